/* A PostgreSQL store's label rows read with libpq's COPY, straight into Arrow buffers.
 *
 * copy_labels(conninfo, settings, sqls)
 *     -> (rows, runs, run_starts, query_offsets, query_data, document_offsets, document_data,
 *         grades)
 *   Connects once per query of `sqls` (1-4) with `conninfo` (a URL or key=value string, as libpq
 *   takes it, the client encoding UTF8), makes each session read-only, applies each (name,
 *   value) of `settings` with set_config (bound, never spliced), and runs `COPY (sql) TO STDOUT
 *   (FORMAT binary)` on every connection at once, all in one snapshot (the first connection
 *   exports it, the others take it). Each query must give three columns: a query ID and a
 *   document ID (text) and a grade (float8); the rows come in the order of `sqls`. Rows of one
 *   query that follow each other are a run, whose ID is kept once: run_starts holds the first
 *   row of each run (int64), query_offsets and query_data the runs' IDs; the documents come as
 *   int64 Arrow offsets and their data, the grades as float64, one per row.
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
#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_TYPE_NAME "rankgate._pg_read.Block"
#include "_blocks.h"

static PyObject *PgError;     /* rankgate._pg_read.Error(sqlstate, message, connected) */
static PyObject *Unsupported; /* rankgate._pg_read.Unsupported */

enum { RUN_STARTS, QUERY_OFFSETS, QUERY_DATA, DOCUMENT_OFFSETS, DOCUMENT_DATA, GRADES, BUFFERS };

/* What a read ended with, apart from success. */
enum { READ_OK, READ_NO_MEMORY, READ_UNSUPPORTED, READ_FAILED };

static const char SIGNATURE[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0'};

typedef struct {
    Grow grows[BUFFERS];
    int64_t rows, runs;
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
        /* A row of the same query as the row before continues its run: the ID is kept once. */
        int same = 0;
        if (labels->runs) {
            int64_t id_start, id_end; /* the last run's ID, between the last two offsets */
            const char *offsets = grows[QUERY_OFFSETS].data;
            memcpy(&id_start, offsets + (labels->runs - 1) * sizeof id_start, sizeof id_start);
            memcpy(&id_end, offsets + labels->runs * sizeof id_end, sizeof id_end);
            same = id_end - id_start == (int64_t)query_bytes &&
                   (query_bytes == 0 ||
                    memcmp(grows[QUERY_DATA].data + id_start, query, query_bytes) == 0);
        }
        if (!same &&
            (grow_put(&grows[RUN_STARTS], &labels->rows, sizeof labels->rows) < 0 ||
             put_text(&grows[QUERY_OFFSETS], &grows[QUERY_DATA], query, (int)query_bytes) < 0))
            return READ_NO_MEMORY;
        labels->runs += !same;
        if (put_text(&grows[DOCUMENT_OFFSETS], &grows[DOCUMENT_DATA], document,
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

enum { MAX_SETTINGS = 8, MAX_PARTS = 4 };

/* One COPY on a connection of its own, and the rows it gave. */
typedef struct {
    PGconn *connection;
    char *sql; /* COPY (...) TO STDOUT (FORMAT binary) */
    Labels labels;
    int done;
} Part;

typedef struct {
    char state[6], message[512];
    int connected; /* every part's connection was made */
} Failure;

/* A result's error (or the connection's) as the read's failure, unless one is kept already. */
static int fail(Failure *failure, PGconn *connection, const PGresult *result) {
    if (failure->message[0]) return READ_FAILED;
    const char *code = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : NULL;
    snprintf(failure->state, sizeof failure->state, "%s", code ? code : "");
    describe(result ? PQresultErrorMessage(result) : PQerrorMessage(connection),
             failure->message, sizeof failure->message);
    return READ_FAILED;
}

/* Runs `sql` (with `count` text parameters); READ_FAILED, the failure kept, when it does not
 * give `wanted`. */
static int run(PGconn *connection, const char *sql, int count, const char *const *values,
               ExecStatusType wanted, Failure *failure) {
    PGresult *result = PQexecParams(connection, sql, count, NULL, values, NULL, NULL, 0);
    int outcome = PQresultStatus(result) == wanted ? READ_OK : fail(failure, connection, result);
    /* A COPY's result stays with the connection until its data is read. */
    PQclear(result);
    return outcome;
}

/* Connects, makes the session read-only and applies the settings. */
static int part_open(Part *part, const char *conninfo, Py_ssize_t count, char **names,
                     char **values, Failure *failure) {
    /* The URL's own connect_timeout, if it has one, overrides the first (libpq's order). */
    const char *keywords[] = {"connect_timeout", "dbname", "client_encoding", NULL};
    const char *settings[] = {"10", conninfo, "UTF8", NULL};
    part->connection = PQconnectdbParams(keywords, settings, 1);
    if (part->connection == NULL || PQstatus(part->connection) != CONNECTION_OK) {
        failure->connected = 0;
        if (!failure->message[0])
            describe(part->connection ? PQerrorMessage(part->connection) : "out of memory",
                     failure->message, sizeof failure->message);
        return READ_FAILED;
    }
    int outcome = run(part->connection, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
                      0, NULL, PGRES_COMMAND_OK, failure);
    for (Py_ssize_t i = 0; i < count && outcome == READ_OK; i++) {
        const char *bound[] = {names[i], values[i]};
        outcome = run(part->connection, "SELECT set_config($1, $2, false)", 2, bound,
                      PGRES_TUPLES_OK, failure);
    }
    int64_t zero = 0;
    Grow *grows = part->labels.grows;
    if (outcome == READ_OK && (grow_put(&grows[QUERY_OFFSETS], &zero, sizeof zero) < 0 ||
                               grow_put(&grows[DOCUMENT_OFFSETS], &zero, sizeof zero) < 0))
        outcome = READ_NO_MEMORY;
    return outcome;
}

/* Every part in one transaction snapshot: the first exports it, the others take it (as
 * pg_dump's parallel workers do), so that a label moved by a concurrent update is seen once. */
static int share_snapshot(Part *parts, int count, Failure *failure) {
    static const char begin[] = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";
    int outcome = run(parts[0].connection, begin, 0, NULL, PGRES_COMMAND_OK, failure);
    if (outcome != READ_OK) return outcome;
    PGresult *result = PQexec(parts[0].connection, "SELECT pg_export_snapshot()");
    if (PQresultStatus(result) != PGRES_TUPLES_OK || PQntuples(result) != 1) {
        outcome = fail(failure, parts[0].connection, result);
        PQclear(result);
        return outcome;
    }
    char set[128];
    const char *snapshot = PQgetvalue(result, 0, 0);
    /* The identifier is spliced (SET TRANSACTION takes no parameter): hex digits and dashes. */
    int plain = strlen(snapshot) < 64 && strspn(snapshot, "0123456789ABCDEFabcdef-") == strlen(snapshot);
    if (plain) snprintf(set, sizeof set, "SET TRANSACTION SNAPSHOT '%s'", snapshot);
    PQclear(result);
    if (!plain) return READ_UNSUPPORTED;
    for (int i = 1; i < count && outcome == READ_OK; i++) {
        outcome = run(parts[i].connection, begin, 0, NULL, PGRES_COMMAND_OK, failure);
        if (outcome == READ_OK)
            outcome = run(parts[i].connection, set, 0, NULL, PGRES_COMMAND_OK, failure);
    }
    return outcome;
}

/* The rows a part's connection holds now (`wait`: block for them); done at the COPY's end. */
static int part_read(Part *part, int wait, int *progressed, Failure *failure) {
    int outcome = READ_OK, got;
    char *buffer = NULL;
    while ((got = PQgetCopyData(part->connection, &buffer, !wait)) > 0) {
        if (outcome == READ_OK)
            outcome = labels_take(&part->labels, (const unsigned char *)buffer, (size_t)got);
        PQfreemem(buffer);
        *progressed = 1;
        /* After a failure the rest is drained, so that the connection ends cleanly. */
    }
    if (got == 0) return outcome; /* no whole row yet */
    part->done = 1;
    *progressed = 1;
    PGresult *result;
    while ((result = PQgetResult(part->connection)) != NULL) {
        if (PQresultStatus(result) != PGRES_COMMAND_OK)
            outcome = fail(failure, part->connection, result);
        PQclear(result);
    }
    if (got == -2) outcome = fail(failure, part->connection, NULL);
    if (outcome == READ_OK && (!part->labels.header_read || !part->labels.ended))
        outcome = READ_UNSUPPORTED;
    return outcome;
}

/* Waits until one of the parts not done has bytes to read, and takes them in. */
static int wait_for_rows(Part *parts, int count, Failure *failure) {
    struct pollfd polled[MAX_PARTS];
    int which[MAX_PARTS], watched = 0;
    for (int i = 0; i < count; i++) {
        if (parts[i].done) continue;
        polled[watched].fd = PQsocket(parts[i].connection);
        polled[watched].events = POLLIN;
        polled[watched].revents = 0;
        which[watched++] = i;
    }
    if (poll(polled, (nfds_t)watched, -1) < 0 && errno != EINTR)
        return fail(failure, parts[which[0]].connection, NULL);
    for (int i = 0; i < watched; i++)
        if (polled[i].revents && !PQconsumeInput(parts[which[i]].connection))
            return fail(failure, parts[which[i]].connection, NULL);
    return READ_OK;
}

/* Appends the bytes of `from` to `to` (which takes no ownership of them). */
static int grow_append(Grow *to, const Grow *from, size_t skip) {
    return grow_put(to, from->data + skip, from->size - skip);
}

/* Offsets (int64) of `from` past its leading zero, each moved by `shift`, appended to `to`. */
static int offsets_append(Grow *to, const Grow *from, size_t first, int64_t shift) {
    size_t count = from->size / sizeof(int64_t);
    if (grow_reserve(to, (count - first) * sizeof(int64_t)) < 0) return -1;
    for (size_t i = first; i < count; i++) {
        int64_t value;
        memcpy(&value, from->data + i * sizeof value, sizeof value);
        value += shift;
        memcpy(to->data + to->size, &value, sizeof value);
        to->size += sizeof value;
    }
    return 0;
}

/* The rows of `part` appended to `into`, in order; a run that continues the last run of `into`
 * (the same query on both sides of the split) joins it. */
static int labels_append(Labels *into, const Labels *part) {
    Grow *to = into->grows;
    const Grow *from = part->grows;
    size_t joins = 0;
    if (into->runs && part->runs) {
        int64_t a_start, a_end, b_end;
        memcpy(&a_start, to[QUERY_OFFSETS].data + (into->runs - 1) * sizeof a_start,
               sizeof a_start);
        memcpy(&a_end, to[QUERY_OFFSETS].data + into->runs * sizeof a_end, sizeof a_end);
        memcpy(&b_end, from[QUERY_OFFSETS].data + sizeof b_end, sizeof b_end);
        joins = a_end - a_start == b_end &&
                (b_end == 0 || memcmp(to[QUERY_DATA].data + a_start, from[QUERY_DATA].data,
                                      (size_t)b_end) == 0);
    }
    int64_t first_id_end = 0;
    if (joins) memcpy(&first_id_end, from[QUERY_OFFSETS].data + sizeof first_id_end,
                      sizeof first_id_end);
    int64_t rows = into->rows;
    int64_t query_shift = (int64_t)to[QUERY_DATA].size - first_id_end;
    int64_t document_shift = (int64_t)to[DOCUMENT_DATA].size;
    if (offsets_append(&to[RUN_STARTS], &from[RUN_STARTS], joins, rows) < 0 ||
        offsets_append(&to[QUERY_OFFSETS], &from[QUERY_OFFSETS], 1 + joins, query_shift) < 0 ||
        grow_append(&to[QUERY_DATA], &from[QUERY_DATA], (size_t)first_id_end) < 0 ||
        offsets_append(&to[DOCUMENT_OFFSETS], &from[DOCUMENT_OFFSETS], 1, document_shift) < 0 ||
        grow_append(&to[DOCUMENT_DATA], &from[DOCUMENT_DATA], 0) < 0 ||
        grow_append(&to[GRADES], &from[GRADES], 0) < 0)
        return READ_NO_MEMORY;
    into->rows += part->rows;
    into->runs += part->runs - (int64_t)joins;
    return READ_OK;
}

/* The COPYs of every part at once, each part's rows into its own buffers. */
static int read_parts(Part *parts, int count, Failure *failure) {
    int outcome = READ_OK;
    for (int i = 0; i < count && outcome == READ_OK; i++)
        outcome = run(parts[i].connection, parts[i].sql, 0, NULL, PGRES_COPY_OUT, failure);
    if (outcome != READ_OK) return outcome;
    for (int left = count; left;) {
        int progressed = 0;
        for (int i = 0; i < count; i++) {
            if (parts[i].done) continue;
            int result = part_read(&parts[i], count == 1, &progressed, failure);
            if (result != READ_OK && outcome == READ_OK) outcome = result;
            left -= parts[i].done;
        }
        if (outcome != READ_OK) return outcome; /* the connections are closed unread */
        if (left && !progressed) outcome = wait_for_rows(parts, count, failure);
        if (outcome != READ_OK) return outcome;
    }
    return READ_OK;
}

static PyObject *raise_error(const char *state, const char *message, int connected) {
    PyObject *args = Py_BuildValue("(ssO)", state, message, connected ? Py_True : Py_False);
    if (args != NULL) {
        PyErr_SetObject(PgError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *copy_labels(PyObject *self, PyObject *args) {
    const char *conninfo;
    PyObject *settings_object, *sqls_object;
    if (!PyArg_ParseTuple(args, "sO!O!", &conninfo, &PyTuple_Type, &settings_object,
                          &PyTuple_Type, &sqls_object))
        return NULL;
    Py_ssize_t setting_count = PyTuple_GET_SIZE(settings_object);
    Py_ssize_t part_count = PyTuple_GET_SIZE(sqls_object);
    if (setting_count > MAX_SETTINGS || part_count < 1 || part_count > MAX_PARTS) {
        PyErr_SetString(PyExc_ValueError, "copy_labels: too many settings, or 1-4 queries");
        return NULL;
    }
    /* UTF-8 copies of the strings: the tuples are not touched without the GIL. */
    char *names[MAX_SETTINGS] = {NULL}, *values[MAX_SETTINGS] = {NULL};
    Part parts[MAX_PARTS];
    memset(parts, 0, sizeof parts);
    int bad = 0;
    for (Py_ssize_t i = 0; i < setting_count && !bad; i++) {
        PyObject *pair = PyTuple_GET_ITEM(settings_object, i);
        const char *name, *value;
        if (!PyArg_ParseTuple(pair, "ss", &name, &value) || !(names[i] = strdup(name)) ||
            !(values[i] = strdup(value)))
            bad = 1;
    }
    for (Py_ssize_t i = 0; i < part_count && !bad; i++) {
        const char *sql = PyUnicode_AsUTF8(PyTuple_GET_ITEM(sqls_object, i));
        static const char before[] = "COPY (", after[] = ") TO STDOUT (FORMAT binary)";
        size_t length = sql ? strlen(sql) : 0;
        if (sql == NULL || !(parts[i].sql = malloc(sizeof before + length + sizeof after))) {
            bad = 1;
            break;
        }
        memcpy(parts[i].sql, before, sizeof before - 1);
        memcpy(parts[i].sql + sizeof before - 1, sql, length);
        memcpy(parts[i].sql + sizeof before - 1 + length, after, sizeof after);
    }

    Failure failure;
    memset(&failure, 0, sizeof failure);
    failure.connected = 1;
    int outcome = bad ? READ_NO_MEMORY : READ_OK;
    if (!bad) {
        int count = (int)part_count;
        Py_BEGIN_ALLOW_THREADS
        for (int i = 0; i < count && outcome == READ_OK; i++)
            outcome = part_open(&parts[i], conninfo, setting_count, names, values, &failure);
        if (outcome == READ_OK && count > 1) outcome = share_snapshot(parts, count, &failure);
        if (outcome == READ_OK) outcome = read_parts(parts, count, &failure);
        for (int i = 1; i < count && outcome == READ_OK; i++)
            outcome = labels_append(&parts[0].labels, &parts[i].labels);
        for (int i = 0; i < count; i++) {
            if (outcome == READ_FAILED && parts[i].connection && !failure.state[0] &&
                PQstatus(parts[i].connection) != CONNECTION_OK)
                snprintf(failure.state, sizeof failure.state, "08006"); /* the connection was lost */
            PQfinish(parts[i].connection); /* a read stopped early is cancelled with it */
        }
        Py_END_ALLOW_THREADS
    }

    for (Py_ssize_t i = 0; i < setting_count; i++) {
        free(names[i]);
        free(values[i]);
    }
    for (int i = 0; i < MAX_PARTS; i++) {
        free(parts[i].sql);
        if (i > 0 || outcome != READ_OK)
            for (int j = 0; j < BUFFERS; j++) free(parts[i].labels.grows[j].data);
    }
    if (outcome != READ_OK) {
        if (outcome == READ_NO_MEMORY) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
        if (outcome == READ_UNSUPPORTED) {
            PyErr_SetString(Unsupported, "the label rows are not of the expected shape");
            return NULL;
        }
        return raise_error(failure.state, failure.message, failure.connected);
    }
    Labels *labels = &parts[0].labels;
    PyObject *blocks[BUFFERS];
    int failed = 0;
    for (int i = 0; i < BUFFERS; i++)
        failed |= (blocks[i] = grow_release(&labels->grows[i])) == NULL;
    PyObject *result = NULL;
    if (!failed)
        result = Py_BuildValue("(LLOOOOOO)", (long long)labels->rows, (long long)labels->runs,
                               blocks[RUN_STARTS], blocks[QUERY_OFFSETS], blocks[QUERY_DATA],
                               blocks[DOCUMENT_OFFSETS], blocks[DOCUMENT_DATA], blocks[GRADES]);
    for (int i = 0; i < BUFFERS; i++) Py_XDECREF(blocks[i]);
    return result;
}

static PyMethodDef module_methods[] = {
    {"copy_labels", copy_labels, METH_VARARGS,
     "copy_labels(conninfo, settings, sqls): a PostgreSQL store's label rows as Arrow buffers."},
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
