/* A SQLite trace store read with SQLite's own C API, straight into Arrow buffers.
 *
 * Every columnar read of a SQLite store goes through here when the module is built: the traces,
 * the labels, the small queries around them. One copy of SQLite in the process matters: POSIX
 * locks belong to the process, so a connection that one copy of the library closes drops the
 * locks the other copy's connections hold on the same file (sqlite.org, "How To Corrupt An SQLite
 * Database File", 2.2.1). This module links the system's libsqlite3, as Python's sqlite3 module
 * (the record path, the recorder) does; ADBC's SQLite driver carries a copy of its own.
 *
 * Connection(uri, busy_ms) opens the database read-only; a lock is waited for up to busy_ms.
 *
 * Connection.read_labels(sql, params)
 *     -> (rows, query_offsets, query_data, document_offsets, document_data, grades,
 *         grade_valid, missing_grades)
 *   `sql` calls rankgate_label(query_id, document_id, grade) for each row (`SELECT
 *   sum(rankgate_label(...)) FROM rankgate_labels ...`). Each row is converted as the guarded SQL
 *   of store/columns.py converts it: a row whose query ID is not TEXT is left out; the document ID
 *   becomes its text as CAST(... AS TEXT) writes it (a NULL one '', its grade missing); a grade
 *   that is not INTEGER or REAL is missing (grade_valid 0). ADBC's driver turns each value into Arrow
 *   through its general row path, about 70 ns a value, three quarters of its label read; called
 *   from inside the statement, a row costs no sqlite3_step and no sqlite3_column_* call either.
 *
 * Connection.query(sql, params, kinds) -> Cursor;  Cursor.fetch(max_rows)
 *     -> None at the end | (rows, columns), at most max_rows (and 2^24) rows
 *   `kinds` holds one letter per result column: 'i' an int64 column (a value of another type
 *   is a null), 't' a large_string column (a number as SQLite writes its text, a BLOB's bytes as
 *   they are, NULL a null). Each column comes as (validity bitmap or None, null count, data) for
 *   'i' and (validity bitmap or None, null count, offsets, data) for 't'.
 *
 * store_lines(rows, plain, attributes, members, suffix) -> (offsets, data)
 *   Each trace's JSON line, written from the store's raw columns as store/columns.py's SQL writes
 *   it, with the JSON checked here (see the function). In SQL, on the system's SQLite 3.40, the
 *   checks and concatenations took two thirds of the traces' read.
 *
 * `sql` holds one statement. Parameters (str or int) are bound to its `?` in order. Every buffer is an object of
 * its own holding its memory (no copy on the way to Python). The GIL is released while SQLite
 * works; a connection serves one thread at a time, and a second caller meanwhile gets a
 * RuntimeError rather than a race. SQLite's errors raise Error(extended_result_code, message). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef SQLITE_DIRECTONLY
#define DIRECT_ONLY SQLITE_DIRECTONLY
#else /* SQLite before 3.30 */
#define DIRECT_ONLY 0
#endif

#define BLOCK_TYPE_NAME "rankgate._sqlite_read.Block"
#include "_blocks.h"

enum { QUERY_OFFSETS, QUERY_DATA, DOCUMENT_OFFSETS, DOCUMENT_DATA, GRADES, GRADE_VALID, BUFFERS };

typedef struct {
    Grow grows[BUFFERS];
    int64_t rows, missing;
    int out_of_memory;
} Reading;

/* rankgate_label(query_id, document_id, grade), called by SQLite for each row of the statement
 * (`SELECT sum(rankgate_label(...)) FROM rankgate_labels ...`): the row's values are appended to
 * the buffers. Called from inside the statement, the row costs no sqlite3_step and no
 * sqlite3_column_* call (each of which takes SQLite's API checks): a fifth of the read. */
static void label_row(sqlite3_context *context, int count, sqlite3_value **values) {
    /* The connection's slot for the read in progress (Connection.reading): registered once, with
     * the connection, so no registration can outlive the buffers it points at. */
    Reading *reading = *(Reading **)sqlite3_user_data(context);
    if (reading == NULL) {
        sqlite3_result_error(context, "rankgate_label is called only by a label read", -1);
        return;
    }
    sqlite3_result_int(context, 0);
    /* Types before values: sqlite3_value_text converts a value in place. */
    if (sqlite3_value_type(values[0]) != SQLITE_TEXT) return;
    /* A NULL document (a hand-made table may hold one) is an empty ID with no grade: its query's
     * traces go to the validator, which reports the damaged labels as the record path does. */
    int no_document = sqlite3_value_type(values[1]) == SQLITE_NULL;
    int kind = sqlite3_value_type(values[2]);
    uint8_t valid = !no_document && (kind == SQLITE_INTEGER || kind == SQLITE_FLOAT);
    double grade = valid ? sqlite3_value_double(values[2]) : 0.0;
    const unsigned char *document =
        no_document ? (const unsigned char *)"" : sqlite3_value_text(values[1]);
    int document_bytes = no_document ? 0 : sqlite3_value_bytes(values[1]);
    const unsigned char *query = sqlite3_value_text(values[0]);
    int query_bytes = sqlite3_value_bytes(values[0]);
    Grow *grows = reading->grows;
    if (query == NULL || document == NULL ||
        put_text(&grows[QUERY_OFFSETS], &grows[QUERY_DATA], query, query_bytes) < 0 ||
        put_text(&grows[DOCUMENT_OFFSETS], &grows[DOCUMENT_DATA], document, document_bytes) < 0 ||
        grow_put(&grows[GRADES], &grade, sizeof grade) < 0 ||
        grow_put(&grows[GRADE_VALID], &valid, 1) < 0) {
        reading->out_of_memory = 1;
        sqlite3_result_error_nomem(context);
        return;
    }
    reading->rows++;
    reading->missing += !valid;
}

/* ---- errors ---- */

static PyObject *SQLiteError; /* rankgate._sqlite_read.Error(code, message) */

static PyObject *raise_sqlite(int code, const char *message) {
    PyObject *text = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
    if (text == NULL) return NULL;
    PyObject *args = Py_BuildValue("(iN)", code, text);
    if (args != NULL) {
        PyErr_SetObject(SQLiteError, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* The connection's own message where there is one (it names the table, the lock), and its
 * extended code. */
static int describe(sqlite3 *db, int code, char *message, size_t size) {
    int extended = db ? sqlite3_extended_errcode(db) : 0;
    /* The connection's own message when it holds this error; else SQLite's words for the code. */
    const char *text = extended != SQLITE_OK ? sqlite3_errmsg(db) : sqlite3_errstr(code);
    snprintf(message, size, "%s", text ? text : "unknown SQLite error");
    return extended != SQLITE_OK ? extended : code;
}

/* One statement of `sql`, prepared, or an error code (with `message`): text holding no statement,
 * or more than one, is refused rather than read in part. */
static int prepare_one(sqlite3 *db, const char *sql, sqlite3_stmt **statement, char *message,
                       size_t size) {
    const char *tail = NULL;
    int code = sqlite3_prepare_v2(db, sql, -1, statement, &tail);
    if (code != SQLITE_OK) return describe(db, code, message, size);
    while (tail && (*tail == ' ' || *tail == '\t' || *tail == '\n' || *tail == '\r' || *tail == ';'))
        tail++;
    if (*statement == NULL || (tail && *tail)) {
        snprintf(message, size, "%s", *statement == NULL ? "no SQL statement to run"
                                                          : "one SQL statement at a time");
        sqlite3_finalize(*statement);
        *statement = NULL;
        return SQLITE_MISUSE;
    }
    return SQLITE_OK;
}

/* ---- parameters, taken as C values while the GIL is held ---- */

typedef struct {
    Py_ssize_t count;
    const char **texts;
    Py_ssize_t *lengths;
    long long *numbers;
} Params;

static void params_free(Params *params) {
    free(params->texts);
    free(params->lengths);
    free(params->numbers);
    memset(params, 0, sizeof *params);
}

/* The tuple must outlive the Params: the texts point into its strings. */
static int params_take(PyObject *tuple, Params *params) {
    Py_ssize_t count = PyTuple_GET_SIZE(tuple);
    params->count = count;
    params->texts = calloc((size_t)count + 1, sizeof *params->texts);
    params->lengths = calloc((size_t)count + 1, sizeof *params->lengths);
    params->numbers = calloc((size_t)count + 1, sizeof *params->numbers);
    if (params->texts == NULL || params->lengths == NULL || params->numbers == NULL) {
        params_free(params);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (PyUnicode_Check(item)) {
            params->texts[i] = PyUnicode_AsUTF8AndSize(item, &params->lengths[i]);
        } else if (PyLong_Check(item)) {
            params->numbers[i] = PyLong_AsLongLong(item);
        } else {
            PyErr_SetString(PyExc_TypeError, "parameters must be str or int");
        }
        if (PyErr_Occurred()) {
            params_free(params);
            return -1;
        }
    }
    return 0;
}

static int params_bind(sqlite3_stmt *statement, const Params *params) {
    int code = SQLITE_OK;
    for (Py_ssize_t i = 0; code == SQLITE_OK && i < params->count; i++) {
        code = params->texts[i] ? sqlite3_bind_text(statement, (int)i + 1, params->texts[i],
                                                    (int)params->lengths[i], SQLITE_TRANSIENT)
                                : sqlite3_bind_int64(statement, (int)i + 1, params->numbers[i]);
    }
    return code;
}

/* ---- the connection ---- */

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    /* Set while a call works with the GIL released: a call from another thread meanwhile is
     * refused (the connection is opened without SQLite's own mutex). */
    int busy;
    /* The label read in progress, for rankgate_label (NULL between reads). */
    Reading *reading;
    /* Statements of cursors dropped while another call held the connection, finalized by the
     * next call that holds it (finalizing meanwhile would race that call inside SQLite). */
    sqlite3_stmt **orphans;
    size_t orphan_count, orphan_capacity;
} Connection;

static void finalize_orphans(Connection *self) {
    for (size_t i = 0; i < self->orphan_count; i++) sqlite3_finalize(self->orphans[i]);
    self->orphan_count = 0;
}

static int connection_usable(Connection *self) {
    if (self->db == NULL) {
        PyErr_SetString(PyExc_ValueError, "the SQLite connection is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the SQLite connection is in use by another thread");
        return 0;
    }
    finalize_orphans(self);
    return 1;
}

static int connection_init(Connection *self, PyObject *args, PyObject *kwds) {
    const char *uri;
    int busy_ms;
    static char *keywords[] = {"uri", "busy_ms", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "si", keywords, &uri, &busy_ms)) return -1;
    if (self->db != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the SQLite connection is open already");
        return -1;
    }
    sqlite3 *db = NULL;
    int code;
    char message[512] = "";
    Py_BEGIN_ALLOW_THREADS
    code = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                           NULL);
    if (code == SQLITE_OK) {
        sqlite3_extended_result_codes(db, 1);
        code = sqlite3_busy_timeout(db, busy_ms);
    }
#ifdef SQLITE_DBCONFIG_TRUSTED_SCHEMA
    /* The store is anyone's file: its views and triggers call no function not marked innocuous. */
    if (code == SQLITE_OK) code = sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
#endif
    /* Direct only: a view or trigger of the store's own schema cannot call it. */
    if (code == SQLITE_OK)
        code = sqlite3_create_function(db, "rankgate_label", 3, SQLITE_UTF8 | DIRECT_ONLY,
                                       &self->reading, label_row, NULL, NULL);
    if (code != SQLITE_OK) {
        code = describe(db, code, message, sizeof message);
        sqlite3_close(db);
        db = NULL;
    }
    Py_END_ALLOW_THREADS
    if (db == NULL) {
        raise_sqlite(code, message);
        return -1;
    }
    self->db = db;
    return 0;
}

static PyObject *connection_close(Connection *self, PyObject *unused) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the SQLite connection is in use by another thread");
        return NULL;
    }
    finalize_orphans(self);
    /* A cursor still open keeps the connection alive inside SQLite until it is finalized. */
    if (self->db != NULL) sqlite3_close_v2(self->db);
    self->db = NULL;
    Py_RETURN_NONE;
}

static void connection_dealloc(Connection *self) {
    finalize_orphans(self); /* no call holds it: a call holds a reference to it */
    free(self->orphans);
    if (self->db != NULL) sqlite3_close_v2(self->db);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *connection_read_labels(Connection *self, PyObject *args) {
    const char *sql;
    PyObject *tuple;
    if (!PyArg_ParseTuple(args, "sO!", &sql, &PyTuple_Type, &tuple)) return NULL;
    if (!connection_usable(self)) return NULL;
    Params params;
    if (params_take(tuple, &params) < 0) return NULL;

    Reading reading;
    memset(&reading, 0, sizeof reading);
    Grow *grows = reading.grows;
    sqlite3 *db = self->db;
    sqlite3_stmt *statement = NULL;
    int code = SQLITE_OK, out_of_memory = 0;
    char message[512] = "";

    self->busy = 1;
    self->reading = &reading;
    Py_BEGIN_ALLOW_THREADS
    int64_t zero = 0;
    code = prepare_one(db, sql, &statement, message, sizeof message);
    if (code == SQLITE_OK) code = params_bind(statement, &params);
    if (code == SQLITE_OK && (grow_put(&grows[QUERY_OFFSETS], &zero, sizeof zero) < 0 ||
                              grow_put(&grows[DOCUMENT_OFFSETS], &zero, sizeof zero) < 0))
        out_of_memory = 1;
    if (code == SQLITE_OK && !out_of_memory) {
        int step;
        while ((step = sqlite3_step(statement)) == SQLITE_ROW) continue;
        if (step != SQLITE_DONE) code = step;
    }
    out_of_memory |= reading.out_of_memory;
    if (code != SQLITE_OK && !message[0]) code = describe(db, code, message, sizeof message);
    sqlite3_finalize(statement);
    Py_END_ALLOW_THREADS
    self->reading = NULL;
    self->busy = 0;

    params_free(&params);
    if (out_of_memory || code != SQLITE_OK) {
        for (int i = 0; i < BUFFERS; i++) free(grows[i].data);
        if (out_of_memory) return PyErr_NoMemory();
        return raise_sqlite(code, message);
    }
    PyObject *blocks[BUFFERS];
    for (int i = 0; i < BUFFERS; i++) blocks[i] = grow_release(&grows[i]);
    PyObject *result = NULL;
    int failed = 0;
    for (int i = 0; i < BUFFERS; i++) failed |= blocks[i] == NULL;
    if (!failed)
        result = Py_BuildValue("(LOOOOOOL)", (long long)reading.rows, blocks[QUERY_OFFSETS],
                               blocks[QUERY_DATA], blocks[DOCUMENT_OFFSETS], blocks[DOCUMENT_DATA],
                               blocks[GRADES], blocks[GRADE_VALID], (long long)reading.missing);
    for (int i = 0; i < BUFFERS; i++) Py_XDECREF(blocks[i]);
    return result;
}

/* ---- a cursor: a statement's rows in batches of typed columns ---- */

typedef struct {
    PyObject_HEAD
    Connection *connection; /* a strong reference */
    sqlite3_stmt *statement;
    int columns;
    char *kinds;
    size_t *text_hint; /* each text column's data size in the last batch: the next one's start */
    int done, failed;
    PyObject *names; /* the result columns' names, a tuple of str */
} Cursor;

static PyTypeObject CursorType;

static void cursor_finalize(Cursor *self) {
    sqlite3_finalize(self->statement);
    self->statement = NULL;
    self->done = 1;
}

static void cursor_dealloc(Cursor *self) {
    Connection *connection = self->connection;
    if (connection != NULL && connection->busy && self->statement != NULL) {
        /* Another thread is inside SQLite on this connection: finalized by its next call. */
        if (connection->orphan_count == connection->orphan_capacity) {
            size_t capacity = connection->orphan_capacity ? 2 * connection->orphan_capacity : 8;
            sqlite3_stmt **grown = realloc(connection->orphans, capacity * sizeof *grown);
            if (grown != NULL) {
                connection->orphans = grown;
                connection->orphan_capacity = capacity;
            }
        }
        if (connection->orphan_count < connection->orphan_capacity) {
            connection->orphans[connection->orphan_count++] = self->statement;
            self->statement = NULL;
        }
    }
    cursor_finalize(self);
    free(self->kinds);
    free(self->text_hint);
    Py_XDECREF(self->names);
    Py_XDECREF(self->connection);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *cursor_close(Cursor *self, PyObject *unused) {
    if (self->connection->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the SQLite connection is in use by another thread");
        return NULL;
    }
    cursor_finalize(self);
    Py_RETURN_NONE;
}

static PyObject *connection_query(Connection *self, PyObject *args) {
    const char *sql, *kinds;
    PyObject *tuple;
    if (!PyArg_ParseTuple(args, "sO!s", &sql, &PyTuple_Type, &tuple, &kinds)) return NULL;
    for (const char *kind = kinds; *kind; kind++) {
        if (*kind != 'i' && *kind != 't') {
            PyErr_SetString(PyExc_ValueError, "column kinds are 'i' (int64) and 't' (text)");
            return NULL;
        }
    }
    if (!connection_usable(self)) return NULL;
    Params params;
    if (params_take(tuple, &params) < 0) return NULL;
    sqlite3 *db = self->db;
    sqlite3_stmt *statement = NULL;
    int code;
    char message[512] = "";
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS /* preparing reads the schema, which may wait for a lock */
    code = prepare_one(db, sql, &statement, message, sizeof message);
    if (code == SQLITE_OK) code = params_bind(statement, &params);
    if (code != SQLITE_OK) {
        if (!message[0]) code = describe(db, code, message, sizeof message);
        sqlite3_finalize(statement);
        statement = NULL;
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    params_free(&params);
    if (statement == NULL) return raise_sqlite(code, message);
    int columns = sqlite3_column_count(statement);
    if ((size_t)columns != strlen(kinds)) {
        sqlite3_finalize(statement);
        return PyErr_Format(PyExc_ValueError, "the query gives %d columns, the kinds name %zu",
                            columns, strlen(kinds));
    }
    Cursor *cursor = PyObject_New(Cursor, &CursorType);
    if (cursor == NULL) {
        sqlite3_finalize(statement);
        return NULL;
    }
    cursor->statement = statement;
    cursor->names = NULL;
    cursor->columns = columns;
    cursor->done = cursor->failed = 0;
    cursor->kinds = strdup(kinds);
    cursor->text_hint = calloc((size_t)columns + 1, sizeof *cursor->text_hint);
    Py_INCREF(self);
    cursor->connection = self;
    if (cursor->kinds == NULL || cursor->text_hint == NULL) {
        Py_DECREF(cursor);
        return PyErr_NoMemory();
    }
    cursor->names = PyTuple_New(columns);
    for (int c = 0; cursor->names != NULL && c < columns; c++) {
        const char *name = sqlite3_column_name(statement, c);
        PyObject *text = PyUnicode_DecodeUTF8(name ? name : "", name ? (Py_ssize_t)strlen(name) : 0,
                                              "replace");
        if (text == NULL) break;
        PyTuple_SET_ITEM(cursor->names, c, text);
    }
    if (cursor->names == NULL || PyErr_Occurred()) {
        Py_DECREF(cursor);
        return NULL;
    }
    return (PyObject *)cursor;
}

/* The most rows one fetch fills: its buffers are sized for them up front. */
#define MAX_FETCH_ROWS ((Py_ssize_t)1 << 24)

/* One column of a batch being filled. */
typedef struct {
    Grow validity, offsets, data;
    int64_t nulls;
} Column;

static PyObject *cursor_fetch(Cursor *self, PyObject *args) {
    Py_ssize_t wanted;
    if (!PyArg_ParseTuple(args, "n", &wanted)) return NULL;
    if (wanted < 1) {
        PyErr_SetString(PyExc_ValueError, "fetch: max_rows must be positive");
        return NULL;
    }
    if (wanted > MAX_FETCH_ROWS) wanted = MAX_FETCH_ROWS; /* at most max_rows: a batch's worth */
    if (self->failed) {
        PyErr_SetString(PyExc_RuntimeError, "fetch: the statement failed before");
        return NULL;
    }
    if (self->done) Py_RETURN_NONE;
    if (!connection_usable(self->connection)) return NULL;
    int columns = self->columns;
    Column *filled = calloc((size_t)columns + 1, sizeof *filled);
    if (filled == NULL) return PyErr_NoMemory();
    size_t rows_bytes = ((size_t)wanted + 7) / 8;
    int out_of_memory = 0;
    for (int c = 0; c < columns && !out_of_memory; c++) {
        Column *column = &filled[c];
        int64_t zero = 0;
        if (grow_reserve(&column->validity, rows_bytes) < 0) {
            out_of_memory = 1;
            continue;
        }
        memset(column->validity.data, 0, rows_bytes);
        if (self->kinds[c] == 'i') {
            out_of_memory |= grow_reserve(&column->data, (size_t)wanted * 8) < 0;
        } else {
            out_of_memory |= grow_reserve(&column->offsets, ((size_t)wanted + 1) * 8) < 0 ||
                             grow_put(&column->offsets, &zero, sizeof zero) < 0 ||
                             grow_reserve(&column->data, self->text_hint[c]) < 0;
        }
    }
    sqlite3 *db = self->connection->db;
    sqlite3_stmt *statement = self->statement;
    const char *kinds = self->kinds;
    int code = SQLITE_OK, done = 0;
    Py_ssize_t rows = 0;
    char message[512] = "";

    if (!out_of_memory) {
        self->connection->busy = 1;
        Py_BEGIN_ALLOW_THREADS
        while (rows < wanted) {
            int step = sqlite3_step(statement);
            if (step == SQLITE_DONE) {
                done = 1;
                break;
            }
            if (step != SQLITE_ROW) {
                code = describe(db, step, message, sizeof message);
                break;
            }
            for (int c = 0; c < columns; c++) {
                Column *column = &filled[c];
                /* The type before the value: reading a value as text converts it in place. */
                int type = sqlite3_column_type(statement, c);
                int present;
                if (kinds[c] == 'i') {
                    present = type == SQLITE_INTEGER;
                    int64_t value = present ? sqlite3_column_int64(statement, c) : 0;
                    memcpy(column->data.data + column->data.size, &value, sizeof value);
                    column->data.size += sizeof value;
                } else {
                    present = type != SQLITE_NULL;
                    if (present) {
                        const unsigned char *text = sqlite3_column_text(statement, c);
                        int bytes = sqlite3_column_bytes(statement, c);
                        if (text == NULL && sqlite3_errcode(db) == SQLITE_NOMEM) {
                            out_of_memory = 1;
                            break;
                        }
                        if (grow_put(&column->data, text, text ? (size_t)bytes : 0) < 0) {
                            out_of_memory = 1;
                            break;
                        }
                    }
                    int64_t end = (int64_t)column->data.size;
                    memcpy(column->offsets.data + column->offsets.size, &end, sizeof end);
                    column->offsets.size += sizeof end;
                }
                if (present) column->validity.data[rows >> 3] |= (char)(1 << (rows & 7));
                else column->nulls++;
            }
            if (out_of_memory) break;
            rows++;
        }
        Py_END_ALLOW_THREADS
        self->connection->busy = 0;
    }

    PyObject *result = NULL;
    if (out_of_memory || code != SQLITE_OK) {
        cursor_finalize(self);
        self->failed = 1;
        if (out_of_memory) PyErr_NoMemory();
        else raise_sqlite(code, message);
        goto cleanup;
    }
    if (done) cursor_finalize(self); /* the read lock goes with the statement */
    if (rows == 0) {
        result = Py_None;
        Py_INCREF(result);
        goto cleanup;
    }
    size_t rows_bytes_used = ((size_t)rows + 7) / 8;
    PyObject *list = PyList_New(columns);
    if (list == NULL) goto cleanup;
    for (int c = 0; c < columns; c++) {
        Column *column = &filled[c];
        if (kinds[c] == 't' && column->data.size > self->text_hint[c])
            self->text_hint[c] = column->data.size;
        PyObject *validity;
        if (column->nulls) {
            column->validity.size = rows_bytes_used;
            validity = grow_release(&column->validity);
        } else {
            validity = Py_None;
            Py_INCREF(validity);
        }
        PyObject *item =
            kinds[c] == 'i'
                ? Py_BuildValue("(NLN)", validity, (long long)column->nulls,
                                grow_release(&column->data))
                : Py_BuildValue("(NLNN)", validity, (long long)column->nulls,
                                grow_release(&column->offsets), grow_release(&column->data));
        if (item == NULL) {
            Py_DECREF(list);
            goto cleanup;
        }
        PyList_SET_ITEM(list, c, item);
    }
    result = Py_BuildValue("(nN)", rows, list);

cleanup:
    for (int c = 0; c < columns; c++) {
        free(filled[c].validity.data);
        free(filled[c].offsets.data);
        free(filled[c].data.data);
    }
    free(filled);
    return result;
}

/* ---- a store's trace lines, built from its raw columns ---- */

/* Space, tab and carriage return: JSON's white space but the line feed, which no line may hold. */
static inline int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; }

static const unsigned char *skip_space(const unsigned char *p, const unsigned char *end) {
    while (p < end && is_space(*p)) p++;
    return p;
}

/* The end of the JSON string that opens at p, or NULL when it is not one. */
static const unsigned char *scan_string(const unsigned char *p, const unsigned char *end) {
    for (p++; p < end; p++) {
        unsigned char c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c != '\\') continue;
        if (++p >= end) return NULL;
        c = *p;
        if (c == 'u') {
            for (int i = 0; i < 4; i++) {
                if (++p >= end) return NULL;
                c = *p;
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
                    return NULL;
            }
        } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
            return NULL;
        }
    }
    return NULL;
}

static const unsigned char *scan_digits(const unsigned char *p, const unsigned char *end) {
    const unsigned char *start = p;
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p > start ? p : NULL;
}

/* The end of the JSON number at p, or NULL. */
static const unsigned char *scan_number(const unsigned char *p, const unsigned char *end) {
    if (p < end && *p == '-') p++;
    if (p < end && *p == '0') p++;
    else if ((p = scan_digits(p, end)) == NULL) return NULL;
    if (p < end && *p == '.' && (p = scan_digits(p + 1, end)) == NULL) return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if ((p = scan_digits(p, end)) == NULL) return NULL;
    }
    return p;
}

enum { MAX_DEPTH = 256 };

/* Whether text[0..n) is one JSON value (RFC 8259) with nothing but space, tab or carriage return
 * around it: no line feed and no NUL anywhere. Stricter than SQLite's json_valid where the two
 * differ, never more lenient (deeper than MAX_DEPTH is refused): a value refused here goes to the
 * validator, which gives the record path's answer either way. */
static int json_valid_text(const unsigned char *p, size_t n) {
    const unsigned char *end = p + n;
    char stack[MAX_DEPTH];
    int depth = 0;
    p = skip_space(p, end);
    for (;;) {
        /* a value */
        if (p >= end) return 0;
        unsigned char c = *p;
        if (c == '{' || c == '[') {
            if (depth == MAX_DEPTH) return 0;
            stack[depth++] = (char)c;
            p = skip_space(p + 1, end);
            if (p < end && *p == (c == '{' ? '}' : ']')) {
                depth--;
                p++;
            } else if (c == '{') {
                if (p >= end || *p != '"' || (p = scan_string(p, end)) == NULL) return 0;
                p = skip_space(p, end);
                if (p >= end || *p != ':') return 0;
                p = skip_space(p + 1, end);
                continue;
            } else {
                continue;
            }
        } else if (c == '"') {
            if ((p = scan_string(p, end)) == NULL) return 0;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            if ((p = scan_number(p, end)) == NULL) return 0;
        } else if (c == 't' && end - p >= 4 && memcmp(p, "true", 4) == 0) {
            p += 4;
        } else if (c == 'f' && end - p >= 5 && memcmp(p, "false", 5) == 0) {
            p += 5;
        } else if (c == 'n' && end - p >= 4 && memcmp(p, "null", 4) == 0) {
            p += 4;
        } else {
            return 0;
        }
        /* after a value: the containers it closes, then the next member or element */
        for (;;) {
            p = skip_space(p, end);
            if (depth == 0) return p == end;
            char open = stack[depth - 1];
            if (p >= end) return 0;
            if (*p == (open == '{' ? '}' : ']')) {
                depth--;
                p++;
                continue;
            }
            if (*p != ',') return 0;
            p = skip_space(p + 1, end);
            if (open == '{') {
                if (p >= end || *p != '"' || (p = scan_string(p, end)) == NULL) return 0;
                p = skip_space(p, end);
                if (p >= end || *p != ':') return 0;
                p = skip_space(p + 1, end);
            }
            break;
        }
    }
}

/* Text as a JSON string, escaped as SQLite's json_quote escapes it. */
static int put_quoted(Grow *out, const unsigned char *text, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (grow_reserve(out, n * 6 + 2) < 0) return -1;
    char *to = out->data + out->size;
    *to++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = text[i];
        if (c == '"' || c == '\\') {
            *to++ = '\\';
            *to++ = (char)c;
        } else if (c < 0x20) {
            char brief = c == '\b' ? 'b' : c == '\t' ? 't' : c == '\n' ? 'n' : c == '\f' ? 'f'
                       : c == '\r' ? 'r' : 0;
            *to++ = '\\';
            if (brief) {
                *to++ = brief;
            } else {
                memcpy(to, "u00", 3);
                to += 3;
                *to++ = hex[c >> 4];
                *to++ = hex[c & 15];
            }
        } else {
            *to++ = (char)c;
        }
    }
    *to++ = '"';
    out->size = (size_t)(to - out->data);
    return 0;
}

/* An Arrow large_string column taken from (offsets, data, validity or None). */
typedef struct {
    Py_buffer offsets, data, validity;
    int has_validity;
} TextColumn;

static void text_release(TextColumn *column) {
    if (column->offsets.obj) PyBuffer_Release(&column->offsets);
    if (column->data.obj) PyBuffer_Release(&column->data);
    if (column->validity.obj) PyBuffer_Release(&column->validity);
}

/* `rows` must be at most MAX_LINE_ROWS (checked by the caller), so no size here overflows. */
static int text_take(PyObject *triple, TextColumn *column, Py_ssize_t rows) {
    memset(column, 0, sizeof *column);
    PyObject *offsets, *data, *validity;
    if (!PyTuple_Check(triple) || !PyArg_ParseTuple(triple, "OOO", &offsets, &data, &validity))
        return -1;
    if (PyObject_GetBuffer(offsets, &column->offsets, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(data, &column->data, PyBUF_SIMPLE) < 0 ||
        (validity != Py_None && PyObject_GetBuffer(validity, &column->validity, PyBUF_SIMPLE) < 0)) {
        text_release(column);
        return -1;
    }
    column->has_validity = validity != Py_None;
    if (column->offsets.len / 8 < rows + 1 ||
        (column->has_validity && column->validity.len < (rows + 7) / 8)) {
        text_release(column);
        PyErr_SetString(PyExc_ValueError, "store_lines: a column's buffers do not fit its rows");
        return -1;
    }
    return 0;
}

static inline int text_present(const TextColumn *column, Py_ssize_t row) {
    return !column->has_validity ||
           (((const unsigned char *)column->validity.buf)[row >> 3] >> (row & 7)) & 1;
}

static inline int64_t offset_at(const TextColumn *column, Py_ssize_t row) {
    int64_t value; /* read byte-wise: a caller's buffer need not be aligned */
    memcpy(&value, (const char *)column->offsets.buf + row * 8, sizeof value);
    return value;
}

/* Row `row`'s text, or NULL when its offsets do not lie inside the data. Checked as each row is
 * read, not once before: the buffers are the caller's, and another thread may write them while
 * the lines are built without the GIL. */
static inline const unsigned char *text_at(const TextColumn *column, Py_ssize_t row, size_t *n) {
    int64_t start = offset_at(column, row), end = offset_at(column, row + 1);
    if (start < 0 || end < start || end > column->data.len) return NULL;
    *n = (size_t)(end - start);
    return (const unsigned char *)column->data.buf + start;
}

enum { MAX_MEMBERS = 8 };
/* The most rows of one call: sizes of their buffers stay far from overflowing. */
#define MAX_LINE_ROWS ((Py_ssize_t)1 << 40)

/* store_lines(rows, plain, attributes, members, suffix) -> (offsets, data)
 *
 * The JSON line of each trace, as the SQL line of store/columns.py (_SQLITE_LINE) writes it:
 * '{', the attributes' members and a comma (none when they are NULL, empty, not an object, or an
 * empty object), each member's prefix and value, `suffix`, '}' and a line feed. `plain` (int64
 * per row) says the row's columns hold the types the record path expects; `attributes` and each
 * member's column are (offsets, data, validity or None) of a large_string column (the caller
 * does not write them during the call); a member is (prefix, column, raw), raw a bool: its value
 * JSON-quoted, or as it is when raw (a ranking's JSON, which must
 * be valid JSON then); a null value is JSON's null, as json_quote writes it. A row that is not plain, whose
 * attributes are not valid JSON, or whose text holds a line feed or a NUL, is the line "!", which
 * the scanner leaves to the validator. The lines come as large_string offsets and data. */
static PyObject *store_lines(PyObject *self, PyObject *args) {
    Py_ssize_t rows;
    PyObject *plain_object, *attributes_object, *members_object;
    const char *suffix;
    Py_ssize_t suffix_length;
    if (!PyArg_ParseTuple(args, "nOOO!s#", &rows, &plain_object, &attributes_object,
                          &PyList_Type, &members_object, &suffix, &suffix_length))
        return NULL;
    if (rows < 0 || rows > MAX_LINE_ROWS) {
        PyErr_SetString(PyExc_ValueError, "store_lines: rows out of range");
        return NULL;
    }
    /* A snapshot of the members, each held: nothing the caller does meanwhile frees them. */
    PyObject *held = PySequence_Tuple(members_object);
    if (held == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(held);
    if (count > MAX_MEMBERS) {
        Py_DECREF(held);
        PyErr_SetString(PyExc_ValueError, "store_lines: too many members");
        return NULL;
    }
    Py_buffer plain;
    if (PyObject_GetBuffer(plain_object, &plain, PyBUF_SIMPLE) < 0) {
        Py_DECREF(held);
        return NULL;
    }
    if (plain.len / 8 < rows) {
        PyBuffer_Release(&plain);
        Py_DECREF(held);
        PyErr_SetString(PyExc_ValueError, "store_lines: plain is shorter than the rows");
        return NULL;
    }
    TextColumn attributes, columns[MAX_MEMBERS];
    const char *prefixes[MAX_MEMBERS];
    Py_ssize_t prefix_lengths[MAX_MEMBERS];
    int raw[MAX_MEMBERS];
    int taken = 0, failed = text_take(attributes_object, &attributes, rows) < 0;
    for (Py_ssize_t i = 0; !failed && i < count; i++) {
        PyObject *member = PyTuple_GET_ITEM(held, i), *column, *flag;
        /* The flag an exact bool: no Python code runs while the members are taken. */
        if (!PyTuple_Check(member) ||
            !PyArg_ParseTuple(member, "s#OO!", &prefixes[i], &prefix_lengths[i], &column,
                              &PyBool_Type, &flag) ||
            text_take(column, &columns[i], rows) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "store_lines: bad member");
            failed = 1;
            break;
        }
        raw[i] = flag == Py_True;
        taken++;
    }
    Grow offsets = {0}, data = {0};
    int out_of_memory = 0, bad_offsets = 0;
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        const char *plains = plain.buf;
        int64_t zero = 0;
        out_of_memory = grow_reserve(&offsets, ((size_t)rows + 1) * 8) < 0 ||
                        grow_put(&offsets, &zero, sizeof zero) < 0;
        for (Py_ssize_t row = 0; row < rows && !out_of_memory; row++) {
            size_t start = data.size, n = 0;
            int64_t plain_value;
            memcpy(&plain_value, plains + row * 8, sizeof plain_value);
            int ok = plain_value != 0;
            const unsigned char *text = NULL;
            /* The attributes' members: the object's text between its braces, trimmed. */
            const unsigned char *inner = NULL;
            size_t inner_length = 0;
            if (ok && text_present(&attributes, row)) {
                text = text_at(&attributes, row, &n);
                if (text == NULL) {
                    bad_offsets = 1;
                    break;
                }
                if (n > 0) {
                    ok = memchr(text, 0, n) == NULL && memchr(text, '\n', n) == NULL &&
                         json_valid_text(text, n);
                    const unsigned char *first = skip_space(text, text + n), *last = text + n;
                    while (last > first && is_space(last[-1])) last--;
                    if (ok && last - first >= 2 && *first == '{') {
                        const unsigned char *from = skip_space(first + 1, last - 1);
                        if (from < last - 1) {
                            inner = first + 1;
                            inner_length = (size_t)(last - 1 - inner);
                        }
                    }
                }
            }
            ok = ok && grow_put(&data, "{", 1) == 0;
            if (ok && inner != NULL)
                ok = grow_put(&data, inner, inner_length) == 0 && grow_put(&data, ",", 1) == 0;
            for (Py_ssize_t i = 0; ok && i < count; i++) {
                if (!text_present(&columns[i], row)) {
                    /* json_quote(NULL) is JSON's null; a raw member is never null in a plain row */
                    if (raw[i]) continue;
                    ok = grow_put(&data, prefixes[i], (size_t)prefix_lengths[i]) == 0 &&
                         grow_put(&data, "null", 4) == 0;
                    continue;
                }
                text = text_at(&columns[i], row, &n);
                if (text == NULL) {
                    bad_offsets = 1;
                    ok = 0;
                    break;
                }
                if (memchr(text, 0, n) != NULL || (raw[i] && (memchr(text, '\n', n) != NULL ||
                                                               !json_valid_text(text, n)))) {
                    ok = 0;
                    break;
                }
                ok = grow_put(&data, prefixes[i], (size_t)prefix_lengths[i]) == 0 &&
                     (raw[i] ? grow_put(&data, text, n) : put_quoted(&data, text, n)) == 0;
            }
            if (bad_offsets) break;
            ok = ok && grow_put(&data, suffix, (size_t)suffix_length) == 0 &&
                 grow_put(&data, "}\n", 2) == 0;
            if (!ok) {
                data.size = start; /* what was written of the line goes */
                if (grow_put(&data, "!\n", 2) < 0) out_of_memory = 1;
            }
            int64_t end = (int64_t)data.size;
            if (!out_of_memory && grow_put(&offsets, &end, sizeof end) < 0) out_of_memory = 1;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&plain);
    text_release(&attributes);
    for (int i = 0; i < taken; i++) text_release(&columns[i]);
    Py_DECREF(held);
    if (failed || out_of_memory || bad_offsets) {
        free(offsets.data);
        free(data.data);
        if (bad_offsets) {
            PyErr_SetString(PyExc_ValueError, "store_lines: a column's offsets leave its data");
            return NULL;
        }
        return failed ? NULL : PyErr_NoMemory();
    }
    return Py_BuildValue("(NN)", grow_release(&offsets), grow_release(&data));
}

static PyMethodDef cursor_methods[] = {
    {"fetch", (PyCFunction)cursor_fetch, METH_VARARGS,
     "fetch(max_rows): the next rows as (rows, columns), or None at the end."},
    {"close", (PyCFunction)cursor_close, METH_NOARGS, "Finalize the statement."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef cursor_members[] = {
    {"names", T_OBJECT, offsetof(Cursor, names), READONLY, "The result columns' names."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CursorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankgate._sqlite_read.Cursor",
    .tp_basicsize = sizeof(Cursor),
    .tp_dealloc = (destructor)cursor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = cursor_methods,
    .tp_members = cursor_members,
    .tp_doc = "A statement's rows in batches of typed columns (Connection.query).",
};

static PyMethodDef connection_methods[] = {
    {"read_labels", (PyCFunction)connection_read_labels, METH_VARARGS,
     "read_labels(sql, params): a store's label rows as Arrow buffers."},
    {"query", (PyCFunction)connection_query, METH_VARARGS,
     "query(sql, params, kinds): a Cursor over the statement's rows."},
    {"close", (PyCFunction)connection_close, METH_NOARGS, "Close the connection."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ConnectionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankgate._sqlite_read.Connection",
    .tp_basicsize = sizeof(Connection),
    .tp_dealloc = (destructor)connection_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = connection_methods,
    .tp_init = (initproc)connection_init,
    .tp_new = PyType_GenericNew,
    .tp_doc = "Connection(uri, busy_ms): a read-only connection to a SQLite database.",
};

static PyMethodDef module_methods[] = {
    {"store_lines", store_lines, METH_VARARGS,
     "store_lines(rows, plain, attributes, members, suffix): a store's trace lines."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rankgate._sqlite_read",
    .m_doc = "A SQLite trace store read with SQLite's C API straight into Arrow buffers.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__sqlite_read(void) {
    if (PyType_Ready(&BlockType) < 0 || PyType_Ready(&CursorType) < 0 ||
        PyType_Ready(&ConnectionType) < 0)
        return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) return NULL;
    SQLiteError = PyErr_NewExceptionWithDoc("rankgate._sqlite_read.Error",
                                            "A SQLite error: args are (extended result code, "
                                            "message).",
                                            NULL, NULL);
    if (SQLiteError == NULL || PyModule_AddObjectRef(created, "Error", SQLiteError) < 0 ||
        PyModule_AddObjectRef(created, "Connection", (PyObject *)&ConnectionType) < 0) {
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
