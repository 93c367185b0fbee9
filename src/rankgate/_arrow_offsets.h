/* Reading the offsets of an Arrow string column (32-bit, or 64-bit for large_string), shared by
 * the compiled modules. Buffers may be unaligned (a slice of a Python buffer): read by memcpy. */
#ifndef RANKGATE_ARROW_OFFSETS_H
#define RANKGATE_ARROW_OFFSETS_H

#include <stdint.h>
#include <string.h>

static inline int64_t arrow_offset(const uint8_t *offsets, int wide, int64_t at) {
    if (wide) {
        int64_t value;
        memcpy(&value, offsets + at * 8, 8);
        return value;
    }
    int32_t value;
    memcpy(&value, offsets + at * 4, 4);
    return value;
}

/* Whether offsets[0..count] all lie within 0..size (each value's range is then readable). */
static inline int arrow_offsets_inside(const uint8_t *offsets, int wide, int64_t count,
                                       int64_t size) {
    for (int64_t i = 0; i <= count; i++) {
        int64_t at = arrow_offset(offsets, wide, i);
        if (at < 0 || at > size) return 0;
    }
    return 1;
}

#endif
