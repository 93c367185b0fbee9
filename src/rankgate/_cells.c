/* Python cells -> Arrow buffers, for the two column shapes a table built from dicts holds.
 *
 * pandas.DataFrame(records) keeps each ranking as a Python list of str and each set of grades as a
 * dict per row. pyarrow converts such object columns generically (a type check, a UTF-8 encoding
 * and a builder append per item: about 60 ns an ID here), which made a DataFrame several times
 * slower to score than the same rows read from Parquet. These two functions handle exactly those
 * shapes and nothing else: any cell they do not expect makes them return None, and the caller
 * leaves the column to pyarrow (and the validator) as before. The bytes they return are the
 * buffers of an Arrow array; rankgate.io.cells wraps them without a copy.
 *
 * Both walk the cells twice while holding the GIL: once to check every type and size the
 * buffers, once to fill them (text_lists reads the items themselves in the second walk only).
 * Only exact list, dict, str, int and float objects are accepted, so no Python code (a __len__,
 * __iter__ or __eq__ of a subclass) can run between the two walks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* UTF-8 of an exact str, or NULL (a lone surrogate cannot be encoded; the error is cleared). */
static const char *utf8_of(PyObject *text, Py_ssize_t *size) {
    if (PyUnicode_IS_ASCII(text)) {
        *size = PyUnicode_GET_LENGTH(text);
        return (const char *)PyUnicode_DATA(text);
    }
    const char *data = PyUnicode_AsUTF8AndSize(text, size);
    if (data == NULL) PyErr_Clear();
    return data;
}

static PyObject *new_bytes(Py_ssize_t size, char **data) {
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (bytes != NULL) *data = PyBytes_AS_STRING(bytes);
    return bytes;
}

/* A validity bitmap (bit i set: cell i holds a value), or None when no cell is null. */
static PyObject *validity_of(PyObject *cells, Py_ssize_t n, Py_ssize_t nulls) {
    if (nulls == 0) Py_RETURN_NONE;
    char *bits;
    PyObject *bitmap = new_bytes((n + 7) / 8, &bits);
    if (bitmap == NULL) return NULL;
    memset(bits, 0, (size_t)((n + 7) / 8));
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_ITEM(cells, i) != Py_None) bits[i >> 3] |= (char)(1 << (i & 7));
    }
    return bitmap;
}

static void put_offset(char *buffer, int wide, Py_ssize_t at, int64_t value) {
    if (wide) {
        memcpy(buffer + at * 8, &value, 8);
    } else {
        int32_t narrow = (int32_t)value;
        memcpy(buffer + at * 4, &narrow, 4);
    }
}

PyDoc_STRVAR(text_lists_doc,
             "text_lists(cells) -> None | (nulls, list_offsets, validity, items, text_offsets, "
             "data, wide)\n\nA list whose cells are each None or an exact list of exact str, as "
             "the buffers of an Arrow list<string> (wide: large_list<large_string>, 64-bit "
             "offsets, when 32 bits cannot hold them). None for any other cell.");

/* Text offsets of text_lists, 32-bit until the bytes pass what 32 bits hold, then 64-bit. */
typedef struct {
    PyObject *bytes;
    char *at;
    int wide;
} Offsets;

static int widen(Offsets *offsets, Py_ssize_t used, Py_ssize_t capacity) {
    char *wider;
    PyObject *bytes = new_bytes(capacity * 8, &wider);
    if (bytes == NULL) return -1;
    for (Py_ssize_t i = 0; i < used; i++) {
        int32_t narrow;
        memcpy(&narrow, offsets->at + i * 4, 4);
        int64_t value = narrow;
        memcpy(wider + i * 8, &value, 8);
    }
    Py_DECREF(offsets->bytes);
    offsets->bytes = bytes;
    offsets->at = wider;
    offsets->wide = 1;
    return 0;
}

#define PREFETCH_AHEAD 8

static PyObject *text_lists(PyObject *self, PyObject *args) {
    PyObject *cells;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &cells)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cells);
    Py_ssize_t nulls = 0, items = 0, size;
    /* The cells are walked first (their types and lengths), their items once: each item is a
     * separate object, and reading it is a cache miss; walking them twice cost a third more. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *cell = PyList_GET_ITEM(cells, i);
        if (cell == Py_None) {
            nulls++;
            continue;
        }
        if (!PyList_CheckExact(cell)) Py_RETURN_NONE;
        items += PyList_GET_SIZE(cell);
    }
    int64_t *ends = PyMem_Malloc((size_t)(n + 1) * sizeof(int64_t));
    if (ends == NULL) return PyErr_NoMemory();
    Offsets offsets = {NULL, NULL, 0};
    offsets.bytes = new_bytes((items + 1) * 4, &offsets.at);
    /* The IDs' bytes, grown as they come (a guess of 16 a piece to start). */
    Py_ssize_t capacity = items * 16 + 64, at = 0, item = 0;
    char *data;
    PyObject *blob = new_bytes(capacity, &data);
    PyObject *lists = NULL, *validity = NULL;
    if (offsets.bytes == NULL || blob == NULL) goto failed;
    put_offset(offsets.at, 0, 0, 0);
    ends[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *cell = PyList_GET_ITEM(cells, i);
        if (cell != Py_None) {
            Py_ssize_t count = PyList_GET_SIZE(cell);
            /* Each item is an object of its own, somewhere in memory: ask for a few ahead, so
             * that their reads overlap (a third of the time here went to waiting on them). */
            for (Py_ssize_t j = 0; j < count && j < PREFETCH_AHEAD; j++)
                __builtin_prefetch(PyList_GET_ITEM(cell, j));
            for (Py_ssize_t j = 0; j < count; j++) {
                if (j + PREFETCH_AHEAD < count)
                    __builtin_prefetch(PyList_GET_ITEM(cell, j + PREFETCH_AHEAD));
                PyObject *entry = PyList_GET_ITEM(cell, j);
                const char *text;
                if (!PyUnicode_CheckExact(entry) || (text = utf8_of(entry, &size)) == NULL) {
                    PyMem_Free(ends);
                    Py_XDECREF(offsets.bytes);
                    Py_XDECREF(blob);
                    Py_RETURN_NONE;
                }
                if (size > capacity - at) {
                    Py_ssize_t grown = capacity * 2 > at + size ? capacity * 2 : at + size;
                    if (_PyBytes_Resize(&blob, grown) < 0) goto failed;
                    capacity = grown;
                    data = PyBytes_AS_STRING(blob);
                }
                memcpy(data + at, text, (size_t)size);
                at += size;
                if (!offsets.wide && at > INT32_MAX && widen(&offsets, item + 1, items + 1) < 0)
                    goto failed;
                put_offset(offsets.at, offsets.wide, ++item, at);
            }
        }
        ends[i + 1] = item;
    }
    int wide = offsets.wide || items > INT32_MAX;
    if (wide && !offsets.wide && widen(&offsets, items + 1, items + 1) < 0) goto failed;
    if (_PyBytes_Resize(&blob, at) < 0) goto failed;
    char *list_offsets;
    lists = new_bytes((n + 1) * (wide ? 8 : 4), &list_offsets);
    validity = validity_of(cells, n, nulls);
    if (lists == NULL || validity == NULL) goto failed;
    for (Py_ssize_t i = 0; i <= n; i++) put_offset(list_offsets, wide, i, ends[i]);
    PyMem_Free(ends);
    return Py_BuildValue("(nNNnNNi)", nulls, lists, validity, items, offsets.bytes, blob, wide);
failed:
    PyMem_Free(ends);
    Py_XDECREF(lists);
    Py_XDECREF(offsets.bytes);
    Py_XDECREF(blob);
    Py_XDECREF(validity);
    return NULL;
}

PyDoc_STRVAR(grade_maps_doc,
             "grade_maps(cells) -> None | (nulls, map_offsets, validity, entries, key_offsets, "
             "keys, values, value_validity, whole)\n\nA list whose cells are each None or an exact "
             "dict of exact str -> int, float or None, as the buffers of an Arrow "
             "map<large_string, int64> (whole: every grade an int) or map<large_string, double>. "
             "None for any other cell, an int outside 64 bits, or more entries than 32-bit "
             "offsets hold.");

static PyObject *grade_maps(PyObject *self, PyObject *args) {
    PyObject *cells;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &cells)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cells);
    Py_ssize_t nulls = 0, entries = 0, bytes = 0, missing = 0, size, position;
    int whole = 1, overflow;
    PyObject *key, *value;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *cell = PyList_GET_ITEM(cells, i);
        if (cell == Py_None) {
            nulls++;
            continue;
        }
        if (!PyDict_CheckExact(cell)) Py_RETURN_NONE;
        position = 0;
        while (PyDict_Next(cell, &position, &key, &value)) {
            if (!PyUnicode_CheckExact(key) || utf8_of(key, &size) == NULL) Py_RETURN_NONE;
            bytes += size;
            if (value == Py_None) {
                missing++;
            } else if (PyLong_CheckExact(value)) {
                (void)PyLong_AsLongLongAndOverflow(value, &overflow);
                if (overflow) Py_RETURN_NONE;
            } else if (PyFloat_CheckExact(value)) {
                whole = 0;
            } else {
                Py_RETURN_NONE;
            }
        }
        entries += PyDict_GET_SIZE(cell);
    }
    if (entries > INT32_MAX) Py_RETURN_NONE;
    char *map_offsets, *key_offsets, *key_data, *grades, *grade_bits = NULL;
    PyObject *maps = new_bytes((n + 1) * 4, &map_offsets);
    PyObject *offsets = new_bytes((entries + 1) * 8, &key_offsets);
    PyObject *blob = new_bytes(bytes, &key_data);
    PyObject *values = new_bytes(entries * 8, &grades);
    PyObject *validity = validity_of(cells, n, nulls);
    PyObject *value_validity = NULL;
    if (missing) {
        value_validity = new_bytes((entries + 7) / 8, &grade_bits);
        if (value_validity != NULL) memset(grade_bits, 0, (size_t)((entries + 7) / 8));
    } else {
        value_validity = Py_NewRef(Py_None);
    }
    if (maps == NULL || offsets == NULL || blob == NULL || values == NULL || validity == NULL ||
        value_validity == NULL)
        goto failed;
    Py_ssize_t entry = 0, at = 0;
    put_offset(map_offsets, 0, 0, 0);
    put_offset(key_offsets, 1, 0, 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *cell = PyList_GET_ITEM(cells, i);
        if (cell != Py_None) {
            position = 0;
            while (PyDict_Next(cell, &position, &key, &value)) {
                const char *text = utf8_of(key, &size);
                memcpy(key_data + at, text, (size_t)size);
                at += size;
                if (value != Py_None) {
                    if (grade_bits != NULL) grade_bits[entry >> 3] |= (char)(1 << (entry & 7));
                    if (whole) {
                        int64_t grade = PyLong_AsLongLong(value);
                        memcpy(grades + entry * 8, &grade, 8);
                    } else {
                        double grade = PyFloat_CheckExact(value) ? PyFloat_AS_DOUBLE(value)
                                                                 : PyLong_AsDouble(value);
                        memcpy(grades + entry * 8, &grade, 8);
                    }
                } else {
                    memset(grades + entry * 8, 0, 8);
                }
                put_offset(key_offsets, 1, ++entry, at);
            }
        }
        put_offset(map_offsets, 0, i + 1, entry);
    }
    return Py_BuildValue("(nNNnNNNNi)", nulls, maps, validity, entries, offsets, blob, values,
                         value_validity, whole);
failed:
    Py_XDECREF(maps);
    Py_XDECREF(offsets);
    Py_XDECREF(blob);
    Py_XDECREF(values);
    Py_XDECREF(validity);
    Py_XDECREF(value_validity);
    return NULL;
}

static PyMethodDef methods[] = {
    {"text_lists", text_lists, METH_VARARGS, text_lists_doc},
    {"grade_maps", grade_maps, METH_VARARGS, grade_maps_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "rankgate._cells", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cells(void) { return PyModule_Create(&module); }
