/* Byte buffers filled in C without the GIL and handed to Python without a copy: shared by the
 * store readers (_sqlite_read.c, _pg_read.c). Each includer defines BLOCK_TYPE_NAME first. */

#ifndef RANKGATE_BLOCKS_H
#define RANKGATE_BLOCKS_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = BLOCK_TYPE_NAME,
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
    if (more > SIZE_MAX / 4 - grow->size) return -1;
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

/* One text value appended: its bytes, then the end offset. */
static inline int put_text(Grow *offsets, Grow *data, const unsigned char *text, int count) {
    if (grow_put(data, text, (size_t)count) < 0) return -1;
    int64_t end = (int64_t)data->size;
    return grow_put(offsets, &end, sizeof end);
}

#endif
