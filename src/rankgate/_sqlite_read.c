/* A SQLite trace store's labels, read with SQLite's own C API straight into Arrow buffers.
 *
 * ADBC's SQLite driver turns each value into Arrow through its general row path, about 70 ns a
 * value; at ten million label rows (thirty million values) that was three quarters of a store
 * eval's label read, and a quarter of the whole run's CPU time. Stepping the statement here and
 * appending each value to a growing buffer costs little beyond SQLite's own walk of the table.
 *
 * read_labels(uri, sql, params, busy_ms)
 *     -> (0, "", rows, query_offsets, query_data, document_offsets, document_data, grades,
 *         grade_valid, missing_grades)
 *      | (extended_error_code, message)
 *
 * `sql` selects (query ID, document ID, grade); `params` (str or int) are bound to its `?` in
 * order. Each row is converted as the guarded SQL of store/columns.py converts it, value by value:
 * a row whose query ID is not TEXT or whose document ID is NULL is left out (checked here: as
 * typeof() in the SQL, the check of the query ID took a quarter of the read); the document ID becomes its text as CAST(... AS TEXT) writes it (sqlite3_column_text
 * renders an INTEGER or REAL as the cast does, and hands a BLOB's bytes over as they are); a
 * grade that is not INTEGER or REAL is missing (grade_valid 0). The texts come as 64-bit Arrow
 * offsets and data, the grades as float64, each buffer an object of its own holding the memory
 * (no copy on the way to Python). The database is opened read-only; a lock is waited for up to
 * busy_ms. The GIL is released for the whole read. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef SQLITE_DIRECTONLY
#define DIRECT_ONLY SQLITE_DIRECTONLY
#else /* SQLite before 3.30 */
#define DIRECT_ONLY 0
#endif

/* ---- a byte buffer handed to Python without a copy ---- */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
} Block;

static void block_dealloc(Block *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int block_getbuffer(Block *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : "", self->size, 1,
                             flags);
}

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankgate._sqlite_read.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes read from a store, owned by this object.",
};

/* ---- growing buffers, filled without the GIL ---- */

typedef struct {
    char *data;
    size_t size, capacity;
} Grow;

static int grow_reserve(Grow *grow, size_t more) {
    if (grow->size + more <= grow->capacity) return 0;
    size_t capacity = grow->capacity ? grow->capacity : (size_t)1 << 16;
    while (capacity < grow->size + more) capacity *= 2;
    char *data = realloc(grow->data, capacity);
    if (data == NULL) return -1;
    grow->data = data;
    grow->capacity = capacity;
    return 0;
}

static int grow_put(Grow *grow, const void *bytes, size_t count) {
    if (grow_reserve(grow, count) < 0) return -1;
    if (count) memcpy(grow->data + grow->size, bytes, count);
    grow->size += count;
    return 0;
}

/* The buffer as a Block, which takes its memory over (the Grow is emptied either way). */
static PyObject *grow_release(Grow *grow) {
    Block *block = PyObject_New(Block, &BlockType);
    if (block == NULL) {
        free(grow->data);
        grow->data = NULL;
        return NULL;
    }
    block->data = grow->data;
    block->size = (Py_ssize_t)grow->size;
    grow->data = NULL;
    grow->size = grow->capacity = 0;
    return (PyObject *)block;
}

enum { QUERY_OFFSETS, QUERY_DATA, DOCUMENT_OFFSETS, DOCUMENT_DATA, GRADES, GRADE_VALID, BUFFERS };

/* One text value appended: its bytes, then the end offset. */
static int put_text(Grow *offsets, Grow *data, const unsigned char *text, int count) {
    if (grow_put(data, text, (size_t)count) < 0) return -1;
    int64_t end = (int64_t)data->size;
    return grow_put(offsets, &end, sizeof end);
}

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
    Reading *reading = sqlite3_user_data(context);
    sqlite3_result_int(context, 0);
    /* Types before values: sqlite3_value_text converts a value in place. */
    if (sqlite3_value_type(values[0]) != SQLITE_TEXT) return;
    if (sqlite3_value_type(values[1]) == SQLITE_NULL) return;
    int kind = sqlite3_value_type(values[2]);
    uint8_t valid = kind == SQLITE_INTEGER || kind == SQLITE_FLOAT;
    double grade = valid ? sqlite3_value_double(values[2]) : 0.0;
    const unsigned char *document = sqlite3_value_text(values[1]);
    int document_bytes = sqlite3_value_bytes(values[1]);
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

static PyObject *read_labels(PyObject *self, PyObject *args) {
    const char *uri, *sql;
    PyObject *params;
    int busy_ms;
    if (!PyArg_ParseTuple(args, "ssO!i", &uri, &sql, &PyTuple_Type, &params, &busy_ms)) return NULL;
    Py_ssize_t bound = PyTuple_GET_SIZE(params);
    /* The parameters as C values, taken while the GIL is held (the tuple keeps them alive). */
    const char **texts = calloc((size_t)bound + 1, sizeof *texts);
    Py_ssize_t *lengths = calloc((size_t)bound + 1, sizeof *lengths);
    long long *numbers = calloc((size_t)bound + 1, sizeof *numbers);
    if (texts == NULL || lengths == NULL || numbers == NULL) {
        free(texts);
        free(lengths);
        free(numbers);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < bound; i++) {
        PyObject *item = PyTuple_GET_ITEM(params, i);
        if (PyUnicode_Check(item)) {
            texts[i] = PyUnicode_AsUTF8AndSize(item, &lengths[i]);
        } else if (PyLong_Check(item)) {
            numbers[i] = PyLong_AsLongLong(item);
        } else {
            PyErr_SetString(PyExc_TypeError, "read_labels: parameters must be str or int");
        }
        if (PyErr_Occurred()) {
            free(texts);
            free(lengths);
            free(numbers);
            return NULL;
        }
    }

    Reading reading;
    memset(&reading, 0, sizeof reading);
    Grow *grows = reading.grows;
    sqlite3 *db = NULL;
    sqlite3_stmt *statement = NULL;
    int code = SQLITE_OK, out_of_memory = 0;
    char message[512] = "";
    int64_t rows = 0, missing = 0;

    Py_BEGIN_ALLOW_THREADS
    int64_t zero = 0;
    code = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                           NULL);
    if (code == SQLITE_OK) {
        sqlite3_extended_result_codes(db, 1);
        sqlite3_busy_timeout(db, busy_ms);
        /* Direct only: a view or trigger of the store's own schema cannot call it. */
        code = sqlite3_create_function(db, "rankgate_label", 3, SQLITE_UTF8 | DIRECT_ONLY,
                                       &reading, label_row, NULL, NULL);
    }
    if (code == SQLITE_OK) code = sqlite3_prepare_v2(db, sql, -1, &statement, NULL);
    for (Py_ssize_t i = 0; code == SQLITE_OK && i < bound; i++) {
        code = texts[i] ? sqlite3_bind_text(statement, (int)i + 1, texts[i], (int)lengths[i],
                                            SQLITE_STATIC)
                        : sqlite3_bind_int64(statement, (int)i + 1, numbers[i]);
    }
    if (code == SQLITE_OK &&
        (grow_put(&reading.grows[QUERY_OFFSETS], &zero, sizeof zero) < 0 ||
         grow_put(&reading.grows[DOCUMENT_OFFSETS], &zero, sizeof zero) < 0))
        out_of_memory = 1;
    if (code == SQLITE_OK && !out_of_memory) {
        int step;
        while ((step = sqlite3_step(statement)) == SQLITE_ROW) continue;
        if (step != SQLITE_DONE) code = step;
    }
    out_of_memory |= reading.out_of_memory;
    rows = reading.rows;
    missing = reading.missing;
    if (code != SQLITE_OK) {
        /* The connection's own message where there is one (it names the table, the lock). */
        const char *text = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
        if (db) code = sqlite3_extended_errcode(db);
        snprintf(message, sizeof message, "%s", text ? text : "unknown SQLite error");
    }
    sqlite3_finalize(statement);
    sqlite3_close(db);
    Py_END_ALLOW_THREADS

    free(texts);
    free(lengths);
    free(numbers);
    if (out_of_memory || code != SQLITE_OK) {
        for (int i = 0; i < BUFFERS; i++) free(grows[i].data);
        if (out_of_memory) return PyErr_NoMemory();
        return Py_BuildValue("(is)", code, message);
    }
    PyObject *blocks[BUFFERS];
    for (int i = 0; i < BUFFERS; i++) blocks[i] = grow_release(&grows[i]);
    PyObject *result = NULL;
    int failed = 0;
    for (int i = 0; i < BUFFERS; i++) failed |= blocks[i] == NULL;
    if (!failed)
        result = Py_BuildValue("(isLOOOOOOL)", 0, "", (long long)rows, blocks[QUERY_OFFSETS],
                               blocks[QUERY_DATA], blocks[DOCUMENT_OFFSETS], blocks[DOCUMENT_DATA],
                               blocks[GRADES], blocks[GRADE_VALID], (long long)missing);
    for (int i = 0; i < BUFFERS; i++) Py_XDECREF(blocks[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"read_labels", read_labels, METH_VARARGS,
     "read_labels(uri, sql, params, busy_ms): a SQLite store's labels as Arrow buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rankgate._sqlite_read",
    .m_doc = "A SQLite trace store's labels read straight into Arrow buffers.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__sqlite_read(void) {
    if (PyType_Ready(&BlockType) < 0) return NULL;
    return PyModule_Create(&module);
}
