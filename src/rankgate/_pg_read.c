/* A PostgreSQL store's label rows read with libpq's COPY, straight into Arrow buffers.
 *
 * copy_labels(conninfo, settings, sql)
 *     -> (rows, query_offsets, query_data, document_offsets, document_data, grades)
 *   Connects with `conninfo` (a URL or key=value string, as libpq takes it, the client encoding
 *   UTF8), makes the session read-only, applies each (name, value) of `settings` with
 *   set_config (bound, never spliced), and runs `COPY (sql) TO STDOUT (FORMAT binary)`. `sql`
 *   must give three columns: a query ID and a document ID (text) and a grade (float8). The
 *   result is int64 Arrow offsets and their data for the IDs, and float64 grades.
 *
 *   ADBC's driver decodes COPY's binary rows through a general reader per field and then Arrow's
 *   builders: about 190 ns a label row of the client's time, where this loop takes a fraction of
 *   that. Rows are parsed as COPY's binary format defines them (PostgreSQL documentation, "COPY",
 *   section "Binary Format"): an 11-byte signature, a flags word and a header extension, then per
 *   tuple a 16-bit field count (-1 ends the data) and per field a 32-bit length (-1 for NULL) and
 *   its bytes, all in network byte order. Each CopyData message the server sends holds whole rows
 *   (the protocol's documentation, "COPY Operations").
 *
 *   Errors raise Error(sqlstate, message, connected): sqlstate '' where libpq gave none,
 *   `connected` false when no connection was made. A result of another shape (a NULL, a grade
 *   that is not 8 bytes, another number of columns) raises Unsupported: the caller reads the
 *   rows through its general path, which words what it finds there. The GIL is released while
 *   libpq waits and the rows are parsed. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_TYPE_NAME "rankgate._pg_read.Block"
#include "_blocks.h"

static PyObject *PgError;     /* rankgate._pg_read.Error(sqlstate, message, connected) */
static PyObject *Unsupported; /* rankgate._pg_read.Unsupported */

enum { QUERY_OFFSETS, QUERY_DATA, DOCUMENT_OFFSETS, DOCUMENT_DATA, GRADES, BUFFERS };

/* What a read ended with, apart from success. */
enum { READ_OK, READ_NO_MEMORY, READ_UNSUPPORTED, READ_FAILED };

static const char SIGNATURE[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0'};

typedef struct {
    Grow grows[BUFFERS];
    int64_t rows;
    int header_read, ended;
} Labels;

static inline uint32_t big32(const unsigned char *at) {
    return (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 | (uint32_t)at[2] << 8 | (uint32_t)at[3];
}

static inline uint16_t big16(const unsigned char *at) {
    return (uint16_t)(at[0] << 8 | at[1]);
}

/* One field of a tuple: its bytes and length, moving `at` past it. -1 when the field does not fit
 * the message or is NULL. */
static inline int take_field(const unsigned char **at, const unsigned char *end,
                             const unsigned char **bytes, uint32_t *length) {
    if (end - *at < 4) return -1;
    uint32_t size = big32(*at);
    *at += 4;
    /* -1 (NULL) is UINT32_MAX; no field PostgreSQL sends reaches 2^31 bytes. */
    if (size > INT32_MAX || (uint64_t)size > (uint64_t)(end - *at)) return -1;
    *bytes = *at;
    *length = size;
    *at += size;
    return 0;
}

/* The rows of one CopyData message appended to the buffers. */
static int labels_take(Labels *labels, const unsigned char *at, size_t size) {
    const unsigned char *end = at + size;
    if (!labels->header_read) {
        if (size < sizeof SIGNATURE + 8 || memcmp(at, SIGNATURE, sizeof SIGNATURE) != 0)
            return READ_UNSUPPORTED;
        uint32_t extension = big32(at + sizeof SIGNATURE + 4);
        at += sizeof SIGNATURE + 8;
        if ((uint64_t)extension > (uint64_t)(end - at)) return READ_UNSUPPORTED;
        at += extension;
        labels->header_read = 1;
    }
    Grow *grows = labels->grows;
    while (at < end) {
        if (labels->ended || end - at < 2) return READ_UNSUPPORTED;
        uint16_t fields = big16(at);
        at += 2;
        if (fields == UINT16_MAX) {
            labels->ended = 1;
            continue;
        }
        if (fields != 3) return READ_UNSUPPORTED;
        const unsigned char *query, *document, *grade;
        uint32_t query_bytes, document_bytes, grade_bytes;
        if (take_field(&at, end, &query, &query_bytes) < 0 ||
            take_field(&at, end, &document, &document_bytes) < 0 ||
            take_field(&at, end, &grade, &grade_bytes) < 0 || grade_bytes != 8)
            return READ_UNSUPPORTED;
        uint64_t bits = (uint64_t)big32(grade) << 32 | big32(grade + 4);
        double value;
        memcpy(&value, &bits, sizeof value);
        if (put_text(&grows[QUERY_OFFSETS], &grows[QUERY_DATA], query, (int)query_bytes) < 0 ||
            put_text(&grows[DOCUMENT_OFFSETS], &grows[DOCUMENT_DATA], document,
                     (int)document_bytes) < 0 ||
            grow_put(&grows[GRADES], &value, sizeof value) < 0)
            return READ_NO_MEMORY;
        labels->rows++;
    }
    return READ_OK;
}

/* libpq's message for a failed result or connection, its first line without the severity. */
static void describe(const char *text, char *message, size_t size) {
    if (text == NULL || !*text) text = "unknown PostgreSQL error";
    if (strncmp(text, "ERROR:  ", 8) == 0) text += 8;
    else if (strncmp(text, "FATAL:  ", 8) == 0) text += 8;
    size_t length = strcspn(text, "\n");
    if (length >= size) length = size - 1;
    memcpy(message, text, length);
    message[length] = '\0';
}

/* Runs `sql` (with `count` text parameters); READ_FAILED with the message and SQLSTATE when it
 * does not give `wanted`. */
static int run(PGconn *connection, const char *sql, int count, const char *const *values,
               ExecStatusType wanted, char *state, char *message, size_t size) {
    PGresult *result = PQexecParams(connection, sql, count, NULL, values, NULL, NULL, 0);
    int status = PQresultStatus(result);
    if (status == (int)wanted) {
        /* A COPY's result stays with the connection until its data is read. */
        PQclear(result);
        return READ_OK;
    }
    const char *code = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : NULL;
    snprintf(state, 6, "%s", code ? code : "");
    describe(result ? PQresultErrorMessage(result) : PQerrorMessage(connection), message, size);
    PQclear(result);
    return READ_FAILED;
}

static PyObject *raise_error(const char *state, const char *message, int connected) {
    PyObject *args = Py_BuildValue("(ssO)", state, message, connected ? Py_True : Py_False);
    if (args != NULL) {
        PyErr_SetObject(PgError, args);
        Py_DECREF(args);
    }
    return NULL;
}

enum { MAX_SETTINGS = 8 };

static PyObject *copy_labels(PyObject *self, PyObject *args) {
    const char *conninfo, *sql;
    PyObject *settings_object;
    if (!PyArg_ParseTuple(args, "sO!s", &conninfo, &PyTuple_Type, &settings_object, &sql))
        return NULL;
    Py_ssize_t setting_count = PyTuple_GET_SIZE(settings_object);
    if (setting_count > MAX_SETTINGS) {
        PyErr_SetString(PyExc_ValueError, "copy_labels: too many settings");
        return NULL;
    }
    /* UTF-8 copies of the settings: the tuple's strings are not touched without the GIL. */
    char *names[MAX_SETTINGS] = {NULL}, *values[MAX_SETTINGS] = {NULL};
    int bad = 0;
    for (Py_ssize_t i = 0; i < setting_count && !bad; i++) {
        PyObject *pair = PyTuple_GET_ITEM(settings_object, i);
        const char *name, *value;
        if (!PyArg_ParseTuple(pair, "ss", &name, &value) || !(names[i] = strdup(name)) ||
            !(values[i] = strdup(value)))
            bad = 1;
    }
    char *copy_sql = NULL;
    size_t sql_length = strlen(sql);
    if (!bad) {
        static const char before[] = "COPY (", after[] = ") TO STDOUT (FORMAT binary)";
        copy_sql = malloc(sizeof before + sql_length + sizeof after);
        if (copy_sql == NULL) bad = 1;
        else {
            memcpy(copy_sql, before, sizeof before - 1);
            memcpy(copy_sql + sizeof before - 1, sql, sql_length);
            memcpy(copy_sql + sizeof before - 1 + sql_length, after, sizeof after);
        }
    }
    if (bad) {
        for (Py_ssize_t i = 0; i < setting_count; i++) {
            free(names[i]);
            free(values[i]);
        }
        free(copy_sql);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }

    Labels labels;
    memset(&labels, 0, sizeof labels);
    Grow *grows = labels.grows;
    char state[6] = "", message[512] = "";
    int outcome = READ_OK, connected = 0;
    PGconn *connection = NULL;

    Py_BEGIN_ALLOW_THREADS
    /* The URL's own connect_timeout, if it has one, overrides the first (libpq's order). */
    const char *keywords[] = {"connect_timeout", "dbname", "client_encoding", NULL};
    const char *settings[] = {"10", conninfo, "UTF8", NULL};
    connection = PQconnectdbParams(keywords, settings, 1);
    if (connection == NULL || PQstatus(connection) != CONNECTION_OK) {
        outcome = READ_FAILED;
        describe(connection ? PQerrorMessage(connection) : "out of memory", message,
                 sizeof message);
    } else {
        connected = 1;
        outcome = run(connection, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", 0, NULL,
                      PGRES_COMMAND_OK, state, message, sizeof message);
    }
    for (Py_ssize_t i = 0; i < setting_count && outcome == READ_OK; i++) {
        const char *bound[] = {names[i], values[i]};
        outcome = run(connection, "SELECT set_config($1, $2, false)", 2, bound, PGRES_TUPLES_OK,
                      state, message, sizeof message);
    }
    int64_t zero = 0;
    if (outcome == READ_OK && (grow_put(&grows[QUERY_OFFSETS], &zero, sizeof zero) < 0 ||
                               grow_put(&grows[DOCUMENT_OFFSETS], &zero, sizeof zero) < 0))
        outcome = READ_NO_MEMORY;
    if (outcome == READ_OK)
        outcome = run(connection, copy_sql, 0, NULL, PGRES_COPY_OUT, state, message,
                      sizeof message);
    if (outcome == READ_OK) {
        char *buffer = NULL;
        int got;
        while ((got = PQgetCopyData(connection, &buffer, 0)) > 0) {
            if (outcome == READ_OK)
                outcome = labels_take(&labels, (const unsigned char *)buffer, (size_t)got);
            PQfreemem(buffer);
            /* After a failure the rest is drained, so that the connection ends cleanly. */
        }
        PGresult *result;
        while ((result = PQgetResult(connection)) != NULL) {
            if (PQresultStatus(result) != PGRES_COMMAND_OK && outcome != READ_FAILED) {
                const char *code = PQresultErrorField(result, PG_DIAG_SQLSTATE);
                snprintf(state, sizeof state, "%s", code ? code : "");
                describe(PQresultErrorMessage(result), message, sizeof message);
                outcome = READ_FAILED;
            }
            PQclear(result);
        }
        if (got == -2 && outcome != READ_FAILED) {
            describe(PQerrorMessage(connection), message, sizeof message);
            outcome = READ_FAILED;
        }
        if (outcome == READ_OK && (!labels.header_read || !labels.ended)) outcome = READ_UNSUPPORTED;
    }
    if (connected && outcome == READ_FAILED && !state[0] && PQstatus(connection) != CONNECTION_OK)
        snprintf(state, sizeof state, "08006"); /* the connection was lost */
    PQfinish(connection);
    Py_END_ALLOW_THREADS

    for (Py_ssize_t i = 0; i < setting_count; i++) {
        free(names[i]);
        free(values[i]);
    }
    free(copy_sql);
    if (outcome != READ_OK) {
        for (int i = 0; i < BUFFERS; i++) free(grows[i].data);
        if (outcome == READ_NO_MEMORY) return PyErr_NoMemory();
        if (outcome == READ_UNSUPPORTED) {
            PyErr_SetString(Unsupported, "the label rows are not of the expected shape");
            return NULL;
        }
        return raise_error(state, message, connected);
    }
    PyObject *blocks[BUFFERS];
    int failed = 0;
    for (int i = 0; i < BUFFERS; i++) failed |= (blocks[i] = grow_release(&grows[i])) == NULL;
    PyObject *result = NULL;
    if (!failed)
        result = Py_BuildValue("(LOOOOO)", (long long)labels.rows, blocks[QUERY_OFFSETS],
                               blocks[QUERY_DATA], blocks[DOCUMENT_OFFSETS],
                               blocks[DOCUMENT_DATA], blocks[GRADES]);
    for (int i = 0; i < BUFFERS; i++) Py_XDECREF(blocks[i]);
    return result;
}

static PyMethodDef module_methods[] = {
    {"copy_labels", copy_labels, METH_VARARGS,
     "copy_labels(conninfo, settings, sql): a PostgreSQL store's label rows as Arrow buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rankgate._pg_read",
    .m_doc = "A PostgreSQL store's label rows read with libpq's COPY into Arrow buffers.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__pg_read(void) {
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) return NULL;
    PgError = PyErr_NewExceptionWithDoc(
        "rankgate._pg_read.Error",
        "A PostgreSQL error: args are (SQLSTATE or '', message, whether a connection was made).",
        NULL, NULL);
    Unsupported = PyErr_NewExceptionWithDoc(
        "rankgate._pg_read.Unsupported",
        "The rows are not of the shape this reader converts: read them another way.", NULL, NULL);
    if (PgError == NULL || Unsupported == NULL ||
        PyModule_AddObjectRef(created, "Error", PgError) < 0 ||
        PyModule_AddObjectRef(created, "Unsupported", Unsupported) < 0) {
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
