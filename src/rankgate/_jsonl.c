/* A JSON Lines reader for trace records that builds Arrow-layout columns without Python objects.
 *
 * `parse(data, fields, segment_fields)` walks the lines of `data` and, for every non-blank line,
 * either extracts the trace fields (query ID, retrieved IDs, relevant IDs, relevance scores and the
 * requested segment fields) or marks the row "slow". Slow means "this line is unusual or invalid:
 * let the Python reader (io/json_records.py + io/validate.py) decide". That path owns every error
 * message and every odd value, so this one only has to be right when it says a row is fine.
 * Whenever the exact Python behaviour is not obviously mirrored here, the row goes slow.
 *
 * What Python does, and therefore what a fast row must satisfy:
 *   - line.decode("utf-8") is strict, so every byte sequence >= 0x80 must be well-formed UTF-8
 *     (no overlongs, no encoded surrogates, nothing past U+10FFFF);
 *   - json's decoder accepts exactly RFC 8259 plus NaN/Infinity (refused by rankgate), lone
 *     surrogate escapes (we go slow) and integers of any length (but Python refuses to convert
 *     integers longer than its int_max_str_digits limit, at least 640 digits; we go slow before);
 *   - validate_record's rules for each field, described at each parse_* function below.
 *
 * The GIL is released for the whole scan: output goes into malloc'd growable buffers, which are
 * handed to Python as they are (Block objects) at the end. Nothing here recurses except skipping
 * nested values, and that stops at MAX_DEPTH. Every read is bounded by the end of the current line.
 *
 * Chunk after chunk, the output buffers are the same dozen arrays of about the same sizes. Fresh
 * multi-megabyte allocations are new mappings the kernel zeroes page by page, which cost more than
 * the parsing; so a freed Block's buffer goes to a small pool (at most POOL_LIMIT_BYTES) and the
 * next parse takes it back, each array sized up front from what the previous chunk needed per
 * input byte. The process's allocator is left as it is.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_arrow_offsets.h"
#include <pythread.h>

#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The bounds of io/limits.py (a test holds these equal to it). Past any of them a row is slow, and
 * the Python path refuses it with a located error.
 * Containers nested deeper than this, the record itself being level 1 (MAX_NESTING_DEPTH). */
#define MAX_DEPTH 64
/* IDs in retrieved_ids (MAX_IDS_PER_RANKING). */
#define MAX_IDS_PER_RANKING 1000000
/* Items of relevant_ids plus entries of relevance_scores (MAX_LABELS_PER_QUERY); repeated keys are
 * counted each time, which is never fewer than Python's dict holds. */
#define MAX_LABELS_PER_QUERY 1000000
/* Decoded UTF-8 bytes of one query or document ID (MAX_ID_BYTES). */
#define MAX_ID_BYTES 8192
/* Bytes of a top-level string value or key (MAX_TEXT_BYTES). Measured on the raw text, which is
 * never shorter than the decoded text, so a row within it is within Python's bound too. */
#define MAX_TEXT_BYTES (1024 * 1024)
/* Python refuses int() of more digits than sys.get_int_max_str_digits(), which cannot be set below
 * 640 (0 means no limit). Going slow above 600 digits keeps us clear of any setting. */
#define MAX_INT_DIGITS 600
/* Grades whose text is longer than this are left to Python rather than copied for strtod. */
#define MAX_NUMBER_TEXT 400

enum { PARSED = 0, SLOW = 1, NO_MEMORY = -1 };
enum { QUERY_ID = 0, RETRIEVED = 1, RELEVANT = 2, SCORES = 3, FIELD_COUNT = 4 };

#if defined(__GLIBC__)
/* strtod follows LC_NUMERIC, which an application may change; a private "C" locale does not. */
#define HAVE_STRTOD_L 1
static locale_t c_numeric_locale = (locale_t)0;
#endif

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LOWEST_BYTE(mask) ((size_t)__builtin_ctzll(mask) >> 3)
#endif

/* ------------------------------------------------------------------------------------------- */
/* Growable byte buffers                                                                        */

typedef struct {
    uint8_t *p;
    size_t len;
    size_t cap;
} Buf;

/* ------------------------------------------------------------------------------------------- */
/* The pool of spare output buffers                                                             */

/* Buffers smaller than this are left to malloc, which keeps and reuses small blocks itself. */
#define POOL_MIN_BYTES ((size_t)64 * 1024)
/* What the pool may hold at most, in bytes and in buffers: a couple of chunks' output. */
#define POOL_LIMIT_BYTES ((size_t)64 * 1024 * 1024)
#define POOL_SLOTS 64

typedef struct {
    uint8_t *p;
    size_t cap;
} Spare;

/* Buffers of POOL_MIN_BYTES and more are mappings of their own, not malloc blocks. A column a
 * caller keeps (compare keeps every chunk's labels for the whole run) then pins only its own pages,
 * and a freed buffer is given back to the system at once. From malloc the same buffers left the
 * heap in holes between the kept ones, which it could neither return nor, being sized for other
 * chunks, always reuse: 0.7 GB of a 1M-query compare's 2.2 GB peak. Pages a buffer reserves but
 * never touches cost nothing either way. */
#if defined(__linux__)
#include <sys/mman.h>
static uint8_t *big_alloc(size_t cap) {
    void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : (uint8_t *)p;
}
static void big_free(uint8_t *p, size_t cap) { munmap(p, cap); }
static uint8_t *big_grow(uint8_t *p, size_t cap, size_t new_cap) {
    void *q = mremap(p, cap, new_cap, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : (uint8_t *)q;
}
#else
static uint8_t *big_alloc(size_t cap) { return malloc(cap); }
static void big_free(uint8_t *p, size_t cap) { (void)cap; free(p); }
static uint8_t *big_grow(uint8_t *p, size_t cap, size_t new_cap) {
    (void)cap;
    return realloc(p, new_cap);
}
#endif

/* `n` rounded up to whole pages, so a mapping's recorded size is the size it has. */
static size_t page_rounded(size_t n) {
    static size_t page = 0;
    if (!page) {
        long found = sysconf(_SC_PAGESIZE);
        page = found > 0 ? (size_t)found : 4096;
    }
    return (n + page - 1) / page * page;
}

/* Frees a buffer of either kind: which one it is follows from its capacity. */
static void buffer_free(uint8_t *p, size_t cap) {
    if (!p) return;
    if (cap >= POOL_MIN_BYTES)
        big_free(p, cap);
    else
        free(p);
}

/* Taken with or without the GIL: parse fills buffers with it released, Blocks die holding it. */
static PyThread_type_lock pool_lock = NULL;
static Spare pool[POOL_SLOTS];
static size_t pool_count = 0;
static size_t pool_bytes = 0;

static void pool_enter(void) { PyThread_acquire_lock(pool_lock, WAIT_LOCK); }
static void pool_leave(void) { PyThread_release_lock(pool_lock); }

/* The spare that serves `need` bytes best: the smallest that holds them, else the largest, which
 * the caller grows (for a mapping that costs only the pages added). NULL when the pool is empty.
 * Asked only for a buffer of POOL_MIN_BYTES or more, which `need` itself may be under (an array a
 * little over half of that grows to it): those were mapped afresh every chunk, eight times a
 * chunk, while their spares filled the pool's slots. */
static uint8_t *pool_take(size_t need, size_t *cap) {
    if (!pool_lock) return NULL;
    uint8_t *found = NULL;
    pool_enter();
    size_t best = pool_count, largest = pool_count;
    for (size_t i = 0; i < pool_count; i++) {
        if (pool[i].cap >= need && (best == pool_count || pool[i].cap < pool[best].cap)) best = i;
        if (largest == pool_count || pool[i].cap > pool[largest].cap) largest = i;
    }
    if (best == pool_count) best = largest;
    if (best < pool_count) {
        found = pool[best].p;
        *cap = pool[best].cap;
        pool_bytes -= pool[best].cap;
        pool[best] = pool[--pool_count];
    }
    pool_leave();
    return found;
}

/* Keep a buffer that is no longer used for a later parse. When the pool is full, smaller spares
 * make way for it (a large buffer is what costs page faults to make again); when they cannot, it
 * is freed. Without the making way, the slots filled up with buffers of a few pages, and every
 * chunk's multi-megabyte arrays were mapped and faulted in afresh: a fifth of a run's CPU time
 * went to the kernel. */
static void pool_give(uint8_t *p, size_t cap) {
    if (!p) return;
    if (cap >= POOL_MIN_BYTES && pool_lock && cap <= POOL_LIMIT_BYTES) {
        Spare evicted[POOL_SLOTS];
        size_t n_evicted = 0;
        int kept = 0;
        pool_enter();
        while (pool_count == POOL_SLOTS || pool_bytes + cap > POOL_LIMIT_BYTES) {
            size_t smallest = 0;
            for (size_t i = 1; i < pool_count; i++)
                if (pool[i].cap < pool[smallest].cap) smallest = i;
            if (!pool_count || pool[smallest].cap >= cap) break;
            evicted[n_evicted++] = pool[smallest];
            pool_bytes -= pool[smallest].cap;
            pool[smallest] = pool[--pool_count];
        }
        if (pool_count < POOL_SLOTS && pool_bytes + cap <= POOL_LIMIT_BYTES) {
            pool[pool_count].p = p;
            pool[pool_count].cap = cap;
            pool_count++;
            pool_bytes += cap;
            kept = 1;
        }
        pool_leave();
        for (size_t i = 0; i < n_evicted; i++) buffer_free(evicted[i].p, evicted[i].cap);
        if (kept) return;
    }
    buffer_free(p, cap);
}

/* Room for `need` bytes in all: doubling, or (`exact`, for an array sized up front from the last
 * chunk) just the pages `need` takes, so a presized array is not doubled past its guess. */
static int buf_grow(Buf *b, size_t need, int exact) {
    size_t cap = b->cap ? b->cap : 256;
    if (exact) {
        cap = page_rounded(need);
    } else {
        while (cap < need) {
            if (cap > SIZE_MAX / 2) return -1;
            cap *= 2;
        }
    }
    if (cap < POOL_MIN_BYTES) {
        uint8_t *grown = realloc(b->p, cap);
        if (!grown) return -1;
        b->p = grown;
        b->cap = cap;
        return 0;
    }
    size_t spare_cap = 0;
    uint8_t *spare = pool_take(need, &spare_cap);
    if (spare && spare_cap < need) {
        uint8_t *grown = big_grow(spare, spare_cap, cap);
        if (grown) {
            spare = grown;
            spare_cap = cap;
        } else {
            big_free(spare, spare_cap);
            spare = NULL;
        }
    }
    if (spare) {
        if (b->len) memcpy(spare, b->p, b->len);
        pool_give(b->p, b->cap);
        b->p = spare;
        b->cap = spare_cap;
        return 0;
    }
    uint8_t *grown;
    if (b->p && b->cap >= POOL_MIN_BYTES) {
        grown = big_grow(b->p, b->cap, cap);
    } else {
        grown = big_alloc(cap);
        if (grown && b->p) {
            memcpy(grown, b->p, b->len);
            free(b->p);
        }
    }
    if (!grown) return -1;
    b->p = grown;
    b->cap = cap;
    return 0;
}

/* An empty buffer made ready for about `want` bytes: a spare one when the pool has one, else a
 * new one. Growing past `want` later works as usual. */
static int buf_presize(Buf *b, size_t want) {
    if (want < POOL_MIN_BYTES || b->cap >= want) return 0;
    return buf_grow(b, want, 1);
}

/* Room for `extra` more bytes. `extra` is bounded by the input size, so len + extra cannot wrap. */
static inline int buf_reserve(Buf *b, size_t extra) {
    if (b->cap - b->len >= extra) return 0;
    return buf_grow(b, b->len + extra, 0);
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int buf_i64(Buf *b, int64_t value) { return buf_put(b, &value, sizeof value); }

static inline int buf_u8(Buf *b, uint8_t value) {
    if (buf_reserve(b, 1) < 0) return -1;
    b->p[b->len++] = value;
    return 0;
}

static void buf_free(Buf *b) {
    pool_give(b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Output columns                                                                               */

typedef struct { /* one text per row: query_id and each segment field */
    Buf valid;   /* uint8 per row */
    Buf offsets; /* int64, rows + 1 */
    Buf data;
} TextColumn;

typedef struct { /* a list of IDs per row */
    Buf valid;   /* uint8 per row */
    Buf lists;   /* int64, rows + 1: range of strings per row */
    Buf offsets; /* int64, strings + 1 */
    Buf data;
    size_t strings;
} ListColumn;

typedef struct { /* relevance_scores: (key, grade) entries per row */
    Buf valid;
    Buf entries;     /* int64, rows + 1 */
    Buf key_offsets; /* int64, count + 1 */
    Buf key_data;
    Buf values; /* float64, count */
    size_t count;
} MapColumn;

typedef struct {
    const char *text;
    size_t len;
} Name;

typedef struct {
    /* What to look for. */
    Name fields[FIELD_COUNT];
    int fields_distinct; /* two fields under one key: left to Python (every row slow) */
    size_t nseg;
    Name *seg;
    Py_ssize_t *seg_head; /* length of the part before the first '.', or -1 without a dot */
    uint8_t *seg_shadowed; /* also a trace field's name: never an attribute in Python */

    /* Per-row scratch. */
    uint8_t *seen;        /* FIELD_COUNT + nseg names + nseg heads: key met already in this row */
    uint8_t *seg_match;   /* segments named by the current key */
    uint8_t *head_object; /* the head of a dotted segment name holds an object */
    uint8_t *seg_valid;
    size_t *seg_mark;
    uint8_t qid_valid, rel_valid, scores_valid;
    size_t labels; /* relevant_ids items plus relevance_scores entries so far in this row */
    Buf key_scratch;

    /* Output. */
    size_t rows;
    Buf status, line_index, line_start, line_end;
    TextColumn qid;
    ListColumn retrieved, relevant;
    MapColumn scores;
    TextColumn *segments;
} Parser;

typedef struct { /* column sizes when a row starts, to undo its partial output if it goes slow */
    size_t qid_data;
    size_t retrieved_strings, retrieved_data;
    size_t relevant_strings, relevant_data;
    size_t scores_count, scores_key_data;
} Mark;

static void text_column_free(TextColumn *c) {
    buf_free(&c->valid);
    buf_free(&c->offsets);
    buf_free(&c->data);
}

static void list_column_free(ListColumn *c) {
    buf_free(&c->valid);
    buf_free(&c->lists);
    buf_free(&c->offsets);
    buf_free(&c->data);
}

static void map_column_free(MapColumn *c) {
    buf_free(&c->valid);
    buf_free(&c->entries);
    buf_free(&c->key_offsets);
    buf_free(&c->key_data);
    buf_free(&c->values);
}

static void parser_free(Parser *P) {
    buf_free(&P->status);
    buf_free(&P->line_index);
    buf_free(&P->line_start);
    buf_free(&P->line_end);
    text_column_free(&P->qid);
    list_column_free(&P->retrieved);
    list_column_free(&P->relevant);
    map_column_free(&P->scores);
    if (P->segments) {
        for (size_t i = 0; i < P->nseg; i++) text_column_free(&P->segments[i]);
    }
    free(P->segments);
    free(P->seg);
    free(P->seg_head);
    free(P->seg_shadowed);
    free(P->seen);
    free(P->seg_match);
    free(P->head_object);
    free(P->seg_valid);
    free(P->seg_mark);
    buf_free(&P->key_scratch);
}

/* The output arrays in the order of the result's keys; each segment field adds three more. */
#define OUTPUT_COUNT 19
typedef struct {
    const char *key;
    Buf *buf;
} Output;

static void outputs_of(Parser *P, Output out[OUTPUT_COUNT]) {
    Output all[OUTPUT_COUNT] = {
        {"status", &P->status},
        {"line_index", &P->line_index},
        {"line_start", &P->line_start},
        {"line_end", &P->line_end},
        {"query_id_valid", &P->qid.valid},
        {"query_id_offsets", &P->qid.offsets},
        {"query_id_data", &P->qid.data},
        {"retrieved_lists", &P->retrieved.lists},
        {"retrieved_offsets", &P->retrieved.offsets},
        {"retrieved_data", &P->retrieved.data},
        {"relevant_valid", &P->relevant.valid},
        {"relevant_lists", &P->relevant.lists},
        {"relevant_offsets", &P->relevant.offsets},
        {"relevant_data", &P->relevant.data},
        {"scores_valid", &P->scores.valid},
        {"scores_entries", &P->scores.entries},
        {"scores_key_offsets", &P->scores.key_offsets},
        {"scores_key_data", &P->scores.key_data},
        {"scores_values", &P->scores.values},
    };
    memcpy(out, all, sizeof all);
}

/* Sizing hints: bytes of each output array per input byte in the last chunk big enough to say
 * (the three arrays of a segment field share theirs). Guarded by pool_lock. */
#define HINT_COUNT (OUTPUT_COUNT + 3)
#define HINT_FROM_BYTES ((size_t)256 * 1024)
static double size_hints[HINT_COUNT];

static Buf *segment_buf(TextColumn *c, int which) {
    return which == 0 ? &c->valid : which == 1 ? &c->offsets : &c->data;
}

/* Make every output array ready for what a chunk of `size` bytes needed last time (plus a
 * sixteenth), taking spare buffers from the pool. Only a guess: arrays grow past it as needed. */
static int parser_presize(Parser *P, size_t size) {
    if (size < HINT_FROM_BYTES || !pool_lock) return 0;
    double hints[HINT_COUNT];
    pool_enter();
    memcpy(hints, size_hints, sizeof hints);
    pool_leave();
    Output out[OUTPUT_COUNT];
    outputs_of(P, out);
    for (int i = 0; i < OUTPUT_COUNT; i++) {
        if (buf_presize(out[i].buf, (size_t)(hints[i] * (double)size * 1.0625)) < 0) return -1;
    }
    for (size_t s = 0; s < P->nseg; s++) {
        for (int j = 0; j < 3; j++) {
            size_t want = (size_t)(hints[OUTPUT_COUNT + j] * (double)size * 1.0625);
            if (buf_presize(segment_buf(&P->segments[s], j), want) < 0) return -1;
        }
    }
    return 0;
}

/* Remember what this chunk needed per input byte, for the next one. */
static void parser_learn(Parser *P, size_t size) {
    if (size < HINT_FROM_BYTES || !pool_lock) return;
    Output out[OUTPUT_COUNT];
    outputs_of(P, out);
    pool_enter();
    for (int i = 0; i < OUTPUT_COUNT; i++) size_hints[i] = (double)out[i].buf->len / (double)size;
    for (int j = 0; j < 3; j++) {
        size_t most = 0;
        for (size_t s = 0; s < P->nseg; s++) {
            size_t len = segment_buf(&P->segments[s], j)->len;
            if (len > most) most = len;
        }
        if (P->nseg) size_hints[OUTPUT_COUNT + j] = (double)most / (double)size;
    }
    pool_leave();
}

/* Every offsets array starts with its leading 0. */
static int parser_start(Parser *P) {
    if (buf_i64(&P->qid.offsets, 0) < 0) return -1;
    if (buf_i64(&P->retrieved.lists, 0) < 0 || buf_i64(&P->retrieved.offsets, 0) < 0) return -1;
    if (buf_i64(&P->relevant.lists, 0) < 0 || buf_i64(&P->relevant.offsets, 0) < 0) return -1;
    if (buf_i64(&P->scores.entries, 0) < 0 || buf_i64(&P->scores.key_offsets, 0) < 0) return -1;
    for (size_t i = 0; i < P->nseg; i++) {
        if (buf_i64(&P->segments[i].offsets, 0) < 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Lexical pieces                                                                               */

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static inline const uint8_t *skip_space(const uint8_t *p, const uint8_t *end) {
    /* JSON's four white-space characters only: \v and \f are not JSON white space. */
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

static inline int name_is(const Name *name, const uint8_t *key, size_t len) {
    return name->len == len && (len == 0 || memcmp(name->text, key, len) == 0);
}

static const uint8_t *literal(const uint8_t *p, const uint8_t *end, const char *word, size_t len) {
    if ((size_t)(end - p) < len || memcmp(p, word, len) != 0) return NULL;
    return p + len;
}

/* Nonzero when some byte of `w` is '"', '\\', a control character (< 0x20) or not ASCII (>= 0x80):
 * the bytes a string scan must look at one by one. The lowest set bit marks the first such byte. */
static inline uint64_t special_bytes(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"');
    uint64_t slash = w ^ (ones * '\\');
    uint64_t found = ((quote - ones) & ~quote) | ((slash - ones) & ~slash);
    found |= (w - ones * 0x20) & ~w;
    return (found | w) & high;
}

static int hex4(const uint8_t *p, const uint8_t *end) {
    if (end - p < 4) return -1;
    int value = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        int nibble;
        if (c >= '0' && c <= '9')
            nibble = c - '0';
        else if (c >= 'a' && c <= 'f')
            nibble = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            nibble = c - 'A' + 10;
        else
            return -1;
        value = value * 16 + nibble;
    }
    return value;
}

/* One escape at p (which is '\\'); the position after it, or NULL. A surrogate escape counts only
 * as half of a high-low pair: Python would keep a lone one as a lone surrogate in the str, which no
 * UTF-8 column can hold, so such rows are slow. */
static const uint8_t *scan_escape(const uint8_t *p, const uint8_t *end) {
    if (end - p < 2) return NULL;
    switch (p[1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return p + 2;
    case 'u': {
        int unit = hex4(p + 2, end);
        if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) return NULL;
        if (unit < 0xD800 || unit > 0xDBFF) return p + 6;
        if (end - p < 12 || p[6] != '\\' || p[7] != 'u') return NULL;
        int low = hex4(p + 8, end);
        if (low < 0xDC00 || low > 0xDFFF) return NULL;
        return p + 12;
    }
    default:
        return NULL;
    }
}

/* One UTF-8 sequence starting at a byte >= 0x80, checked against the well-formed byte sequences of
 * Unicode (Table 3-7), which is what Python's strict decoder accepts. */
static const uint8_t *scan_utf8(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    size_t left = (size_t)(end - p);
    if (c >= 0xC2 && c <= 0xDF) {
        if (left < 2 || (p[1] & 0xC0) != 0x80) return NULL;
        return p + 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        uint8_t low = c == 0xE0 ? 0xA0 : 0x80;  /* E0 80..9F would be overlong */
        uint8_t high = c == 0xED ? 0x9F : 0xBF; /* ED A0..BF would be a surrogate */
        if (left < 3 || p[1] < low || p[1] > high || (p[2] & 0xC0) != 0x80) return NULL;
        return p + 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        uint8_t low = c == 0xF0 ? 0x90 : 0x80;  /* F0 80..8F would be overlong */
        uint8_t high = c == 0xF4 ? 0x8F : 0xBF; /* F4 90.. would pass U+10FFFF */
        if (left < 4 || p[1] < low || p[1] > high || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return NULL;
        return p + 4;
    }
    return NULL;
}

/* The string whose content starts at p (just past the opening quote): returns the closing quote, or
 * NULL when Python would refuse it or we would rather not mirror it. `escaped` is set when the
 * content holds escapes, i.e. when its decoded bytes differ from its raw bytes. */
static const uint8_t *scan_string(const uint8_t *p, const uint8_t *end, int *escaped) {
    for (;;) {
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t special = special_bytes(w);
            if (special) {
#ifdef LOWEST_BYTE
                p += LOWEST_BYTE(special);
#endif
                break;
            }
            p += 8;
        }
        if (p >= end) return NULL;
        uint8_t c = *p;
        if (c == '"') return p;
        if (c == '\\') {
            p = scan_escape(p, end);
            if (!p) return NULL;
            *escaped = 1;
        } else if (c < 0x20) {
            return NULL; /* Python's strict decoder refuses raw control characters */
        } else if (c < 0x80) {
            p++;
        } else {
            p = scan_utf8(p, end);
            if (!p) return NULL;
        }
    }
}

static uint8_t *put_utf8(uint8_t *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (uint8_t)cp;
    } else if (cp < 0x800) {
        *o++ = (uint8_t)(0xC0 | (cp >> 6));
        *o++ = (uint8_t)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (uint8_t)(0xE0 | (cp >> 12));
        *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (uint8_t)(0xF0 | (cp >> 18));
        *o++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Append the decoded content of a string that scan_string accepted (s..e, quotes excluded).
 * Decoding never lengthens the text (\uXXXX is 6 bytes for at most 3, a pair 12 for 4). */
static int decode_string(Buf *out, const uint8_t *s, const uint8_t *e) {
    if (buf_reserve(out, (size_t)(e - s)) < 0) return -1;
    uint8_t *o = out->p + out->len;
    while (s < e) {
        if (*s != '\\') {
            const uint8_t *stop = memchr(s, '\\', (size_t)(e - s));
            size_t n = (size_t)((stop ? stop : e) - s);
            memcpy(o, s, n);
            o += n;
            s += n;
            continue;
        }
        uint8_t c = s[1];
        s += 2;
        switch (c) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp = (uint32_t)hex4(s, e);
            s += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* scan_string made sure the low half follows */
                uint32_t low = (uint32_t)hex4(s + 2, e);
                s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            o = put_utf8(o, cp);
            break;
        }
        default: *o++ = c; break; /* '"', '\\' and '/' stand for themselves */
        }
    }
    out->len = (size_t)(o - out->p);
    return 0;
}

/* Append a string's content as text: raw bytes when it has no escapes. */
static inline int put_string(Buf *out, const uint8_t *s, const uint8_t *e, int escaped) {
    return escaped ? decode_string(out, s, e) : buf_put(out, s, (size_t)(e - s));
}

typedef struct {
    const uint8_t *start, *end;
    int integer;       /* no fraction, no exponent: Python makes an int */
    int negative_zero; /* exactly "-0": int("-0") prints as "0", so its text is not its str() */
} Number;

/* A number by RFC 8259's grammar starting at p ('-' or a digit); its end, or NULL. */
static const uint8_t *scan_number(const uint8_t *p, const uint8_t *end, Number *n) {
    const uint8_t *start = p;
    int negative = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && is_digit(*p)) p++;
    } else {
        return NULL;
    }
    size_t digits = (size_t)(p - start) - (size_t)negative;
    n->integer = 1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
        n->integer = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
        n->integer = 0;
    }
    if (n->integer && digits > MAX_INT_DIGITS) return NULL; /* Python's int() would refuse it */
    n->start = start;
    n->end = p;
    n->negative_zero = n->integer && negative && digits == 1 && start[1] == '0';
    return p;
}

static const double POWERS_OF_TEN[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The double Python's float() gives for a validated number's text. Short decimals take Clinger's
 * exact path (an integer below 2^53 times or over an exact power of ten rounds once, correctly);
 * the rest goes to strtod in the C locale, which rounds correctly as Python's own parser does. */
static int number_value(const Number *n, double *out) {
    const uint8_t *p = n->start, *e = n->end;
    int negative = *p == '-';
    if (negative) p++;
    uint64_t mantissa = 0;
    int significant = 0; /* digits from the first nonzero one; past 19 the exact path is off */
    long exponent = 0;
    for (; p < e && is_digit(*p); p++) {
        if (mantissa || *p != '0') {
            significant++;
            if (significant <= 19) mantissa = mantissa * 10 + (uint64_t)(*p - '0');
        }
    }
    if (p < e && *p == '.') {
        for (p++; p < e && is_digit(*p); p++) {
            if (mantissa || *p != '0') {
                significant++;
                if (significant <= 19) mantissa = mantissa * 10 + (uint64_t)(*p - '0');
            }
            exponent--;
        }
    }
    if (p < e) { /* 'e' or 'E', then an optional sign and at least one digit */
        p++;
        int minus = *p == '-';
        if (*p == '+' || *p == '-') p++;
        long power = 0;
        for (; p < e; p++) {
            /* past 100000 only the sign matters: the value is 0 or far out of range */
            if (power < 100000) power = power * 10 + (*p - '0');
        }
        exponent += minus ? -power : power;
    }
    double value;
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    int exact = significant <= 19 && mantissa <= (UINT64_C(1) << 53) && exponent >= -22 &&
                exponent <= 22;
#else
    int exact = 0; /* extended-precision intermediates could round twice */
#endif
    if (mantissa == 0) {
        value = negative ? -0.0 : 0.0;
    } else if (exact) {
        value = exponent < 0 ? (double)mantissa / POWERS_OF_TEN[-exponent]
                             : (double)mantissa * POWERS_OF_TEN[exponent];
        if (negative) value = -value;
    } else {
#ifdef HAVE_STRTOD_L
        size_t len = (size_t)(n->end - n->start);
        if (!c_numeric_locale || len > MAX_NUMBER_TEXT) return SLOW;
        char text[MAX_NUMBER_TEXT + 1];
        memcpy(text, n->start, len);
        text[len] = '\0';
        char *stop = NULL;
        value = strtod_l(text, &stop, c_numeric_locale);
        if (stop != text + len) return SLOW;
#else
        return SLOW;
#endif
    }
    /* The int -0 is 0, so float() of it is 0.0; float("-0.0") keeps its sign. */
    if (n->integer && value == 0.0) value = 0.0;
    *out = value;
    return PARSED;
}

/* ------------------------------------------------------------------------------------------- */
/* Skipping values nobody asked for (still validated: an invalid line is slow wherever it breaks) */

static const uint8_t *skip_value(const uint8_t *p, const uint8_t *end, int depth);

static const uint8_t *skip_container(const uint8_t *p, const uint8_t *end, int depth) {
    /* p is at '{' or '['; depth is the container's own nesting level. */
    if (depth > MAX_DEPTH) return NULL;
    int object = *p == '{';
    uint8_t close = object ? '}' : ']';
    p = skip_space(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
        if (object) {
            if (p >= end || *p != '"') return NULL;
            int escaped = 0;
            p = scan_string(p + 1, end, &escaped);
            if (!p) return NULL;
            p = skip_space(p + 1, end);
            if (p >= end || *p != ':') return NULL;
            p = skip_space(p + 1, end);
        }
        p = skip_value(p, end, depth);
        if (!p) return NULL;
        p = skip_space(p, end);
        if (p >= end) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = skip_space(p + 1, end);
    }
}

/* A value inside a container at nesting level `depth`. */
static const uint8_t *skip_value(const uint8_t *p, const uint8_t *end, int depth) {
    if (p >= end) return NULL;
    switch (*p) {
    case '"': {
        int escaped = 0;
        p = scan_string(p + 1, end, &escaped);
        return p ? p + 1 : NULL;
    }
    case '{':
    case '[':
        return skip_container(p, end, depth + 1);
    case 't': return literal(p, end, "true", 4);
    case 'f': return literal(p, end, "false", 5);
    case 'n': return literal(p, end, "null", 4);
    default: {
        /* NaN and Infinity land here too and are refused: JSON has no such values */
        Number n;
        return (*p == '-' || is_digit(*p)) ? scan_number(p, end, &n) : NULL;
    }
    }
}

/* ------------------------------------------------------------------------------------------- */
/* The trace fields                                                                             */

/* An ID list (retrieved_ids, relevant_ids): an array whose items are non-empty strings or integers
 * (validate._document_id); an integer's JSON text is its str() except "-0". null is allowed only
 * for relevant_ids, where it means "no labels"; retrieved_ids: null is an error in Python. */
static int parse_id_list(ListColumn *col, const uint8_t **pp, const uint8_t *end, int nullable,
                         uint8_t *valid, size_t *count, size_t limit) {
    const uint8_t *p = *pp;
    if (*p == 'n') {
        if (!nullable || !(p = literal(p, end, "null", 4))) return SLOW;
        *pp = p;
        return PARSED;
    }
    if (*p != '[') return SLOW;
    p = skip_space(p + 1, end);
    if (p < end && *p == ']') {
        *pp = p + 1;
        *valid = 1;
        return PARSED;
    }
    for (;;) {
        if (p >= end) return SLOW;
        if (*p == '"') {
            int escaped = 0;
            const uint8_t *close = scan_string(p + 1, end, &escaped);
            if (!close || close == p + 1) return SLOW; /* empty ID: an error in Python */
            size_t before = col->data.len;
            if (put_string(&col->data, p + 1, close, escaped) < 0) return NO_MEMORY;
            if (col->data.len - before > MAX_ID_BYTES) return SLOW;
            p = close + 1;
        } else if (*p == '-' || is_digit(*p)) {
            Number n;
            const uint8_t *after = scan_number(p, end, &n);
            if (!after || !n.integer || n.negative_zero) return SLOW;
            if (buf_put(&col->data, p, (size_t)(after - p)) < 0) return NO_MEMORY;
            p = after;
        } else {
            return SLOW;
        }
        col->strings++;
        if (++*count > limit) return SLOW;
        if (buf_i64(&col->offsets, (int64_t)col->data.len) < 0) return NO_MEMORY;
        p = skip_space(p, end);
        if (p >= end) return SLOW;
        if (*p == ']') break;
        if (*p != ',') return SLOW;
        p = skip_space(p + 1, end);
    }
    *pp = p + 1;
    *valid = 1;
    return PARSED;
}

/* relevance_scores: null, or an object of non-empty keys to numbers with 0 <= float(value) <= 1000
 * (validate._grades). Repeated keys are all emitted, in order; the consumer keeps the last, as the
 * dict json.loads builds does. */
static int parse_scores(MapColumn *col, const uint8_t **pp, const uint8_t *end, uint8_t *valid,
                        size_t *labels) {
    const uint8_t *p = *pp;
    if (*p == 'n') {
        if (!(p = literal(p, end, "null", 4))) return SLOW;
        *pp = p;
        return PARSED;
    }
    if (*p != '{') return SLOW;
    p = skip_space(p + 1, end);
    if (p < end && *p == '}') {
        *pp = p + 1;
        *valid = 1;
        return PARSED;
    }
    for (;;) {
        if (p >= end || *p != '"') return SLOW;
        int escaped = 0;
        const uint8_t *close = scan_string(p + 1, end, &escaped);
        if (!close || close == p + 1) return SLOW;
        const uint8_t *key = p + 1;
        p = skip_space(close + 1, end);
        if (p >= end || *p != ':') return SLOW;
        p = skip_space(p + 1, end);
        if (p >= end || !(*p == '-' || is_digit(*p))) return SLOW; /* bool, null, text: errors */
        Number n;
        const uint8_t *after = scan_number(p, end, &n);
        double grade;
        if (!after || number_value(&n, &grade) != PARSED) return SLOW;
        if (!(grade >= 0.0 && grade <= 1000.0)) return SLOW; /* also refuses NaN */
        size_t before = col->key_data.len;
        if (put_string(&col->key_data, key, close, escaped) < 0) return NO_MEMORY;
        if (col->key_data.len - before > MAX_ID_BYTES) return SLOW;
        if (++*labels > MAX_LABELS_PER_QUERY) return SLOW;
        col->count++;
        if (buf_i64(&col->key_offsets, (int64_t)col->key_data.len) < 0) return NO_MEMORY;
        if (buf_put(&col->values, &grade, sizeof grade) < 0) return NO_MEMORY;
        p = skip_space(after, end);
        if (p >= end) return SLOW;
        if (*p == '}') break;
        if (*p != ',') return SLOW;
        p = skip_space(p + 1, end);
    }
    *pp = p + 1;
    *valid = 1;
    return PARSED;
}

/* query_id (validate._query_id): null (named by its position later), a non-empty string, or an
 * integer. */
static int parse_query_id(TextColumn *col, const uint8_t **pp, const uint8_t *end, uint8_t *valid) {
    const uint8_t *p = *pp;
    if (*p == 'n') {
        if (!(p = literal(p, end, "null", 4))) return SLOW;
        *pp = p;
        return PARSED;
    }
    if (*p == '"') {
        int escaped = 0;
        const uint8_t *close = scan_string(p + 1, end, &escaped);
        if (!close || close == p + 1) return SLOW;
        size_t before = col->data.len;
        if (put_string(&col->data, p + 1, close, escaped) < 0) return NO_MEMORY;
        if (col->data.len - before > MAX_ID_BYTES) return SLOW;
        *pp = close + 1;
        *valid = 1;
        return PARSED;
    }
    if (*p == '-' || is_digit(*p)) {
        Number n;
        const uint8_t *after = scan_number(p, end, &n);
        if (!after || !n.integer || n.negative_zero) return SLOW;
        if (buf_put(&col->data, p, (size_t)(after - p)) < 0) return NO_MEMORY;
        *pp = after;
        *valid = 1;
        return PARSED;
    }
    return SLOW;
}

/* A segment field (segments.segment_value): null -> missing, a string, true/false, an integer.
 * Floats (Python's repr), objects and arrays (json.dumps) are left to Python. The same key may
 * serve several segment columns when a name is repeated. */
static int parse_segment(Parser *P, const uint8_t **pp, const uint8_t *end) {
    const uint8_t *p = *pp, *after;
    const uint8_t *text = NULL;
    size_t len = 0;
    int escaped = 0;
    if (*p == 'n') {
        if (!(after = literal(p, end, "null", 4))) return SLOW;
        *pp = after;
        return PARSED;
    }
    if (*p == '"') {
        const uint8_t *close = scan_string(p + 1, end, &escaped);
        if (!close) return SLOW;
        text = p + 1;
        len = (size_t)(close - text);
        after = close + 1;
    } else if (*p == 't' || *p == 'f') {
        after = *p == 't' ? literal(p, end, "true", 4) : literal(p, end, "false", 5);
        if (!after) return SLOW;
        text = p;
        len = (size_t)(after - p);
    } else if (*p == '-' || is_digit(*p)) {
        Number n;
        after = scan_number(p, end, &n);
        if (!after || !n.integer || n.negative_zero) return SLOW;
        text = p;
        len = (size_t)(after - p);
    } else {
        return SLOW;
    }
    for (size_t i = 0; i < P->nseg; i++) {
        if (!P->seg_match[i]) continue;
        if (put_string(&P->segments[i].data, text, text + len, escaped) < 0) return NO_MEMORY;
        P->seg_valid[i] = 1;
    }
    *pp = after;
    return PARSED;
}

/* One top-level member whose key (decoded) is key[0..len) and whose value starts at *pp. */
static int parse_member(Parser *P, const uint8_t *key, size_t len, const uint8_t **pp,
                        const uint8_t *end) {
    int field = -1;
    for (int k = 0; k < FIELD_COUNT; k++) {
        if (name_is(&P->fields[k], key, len)) {
            field = k;
            break;
        }
    }
    /* A repeated key that matters is slow: json.loads keeps the last, which we do not track. */
    if (field >= 0) {
        if (P->seen[field]) return SLOW;
        P->seen[field] = 1;
    }
    int segment = 0;
    for (size_t i = 0; i < P->nseg; i++) {
        P->seg_match[i] = 0;
        if (name_is(&P->seg[i], key, len)) {
            uint8_t *seen = &P->seen[FIELD_COUNT + i];
            if (*seen) return SLOW;
            *seen = 1;
            if (!P->seg_shadowed[i]) {
                P->seg_match[i] = 1;
                segment = 1;
            }
        }
        if (P->seg_head[i] >= 0 && (size_t)P->seg_head[i] == len &&
            memcmp(P->seg[i].text, key, len) == 0) {
            uint8_t *seen = &P->seen[FIELD_COUNT + P->nseg + i];
            if (*seen) return SLOW;
            *seen = 1;
            P->head_object[i] = **pp == '{';
        }
    }
    switch (field) {
    case QUERY_ID: return parse_query_id(&P->qid, pp, end, &P->qid_valid);
    case RETRIEVED: {
        uint8_t unused = 0;
        size_t ids = 0;
        return parse_id_list(&P->retrieved, pp, end, 0, &unused, &ids, MAX_IDS_PER_RANKING);
    }
    case RELEVANT:
        return parse_id_list(&P->relevant, pp, end, 1, &P->rel_valid, &P->labels,
                             MAX_LABELS_PER_QUERY);
    case SCORES: return parse_scores(&P->scores, pp, end, &P->scores_valid, &P->labels);
    default: break;
    }
    const uint8_t *start = *pp;
    if (segment) {
        int rc = parse_segment(P, pp, end);
        if (rc != PARSED) return rc;
    } else {
        const uint8_t *after = skip_value(*pp, end, 1);
        if (!after) return SLOW;
        *pp = after;
    }
    /* A long top-level string (quotes included in the span) is Python's to refuse. */
    if (*start == '"' && (size_t)(*pp - start) > MAX_TEXT_BYTES + 2) return SLOW;
    return PARSED;
}

/* One non-blank line, p..end (without its "\n"). */
static int parse_record(Parser *P, const uint8_t *p, const uint8_t *end) {
    if (!P->fields_distinct) return SLOW;
    memset(P->seen, 0, FIELD_COUNT + 2 * P->nseg);
    if (P->nseg) {
        memset(P->head_object, 0, P->nseg);
        memset(P->seg_valid, 0, P->nseg);
    }
    P->qid_valid = P->rel_valid = P->scores_valid = 0;
    P->labels = 0;

    p = skip_space(p, end);
    if (p >= end || *p != '{') return SLOW; /* arrays, scalars: "expected an object" in Python */
    p = skip_space(p + 1, end);
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            if (p >= end || *p != '"') return SLOW;
            int escaped = 0;
            const uint8_t *close = scan_string(p + 1, end, &escaped);
            if (!close) return SLOW;
            const uint8_t *key = p + 1;
            size_t len = (size_t)(close - key);
            if (len > MAX_TEXT_BYTES) return SLOW; /* a field name is text too */
            if (escaped) { /* keys compare by their decoded text */
                P->key_scratch.len = 0;
                if (decode_string(&P->key_scratch, key, close) < 0) return NO_MEMORY;
                key = P->key_scratch.p;
                len = P->key_scratch.len;
            }
            p = skip_space(close + 1, end);
            if (p >= end || *p != ':') return SLOW;
            p = skip_space(p + 1, end);
            if (p >= end) return SLOW;
            int rc = parse_member(P, key, len, &p, end);
            if (rc != PARSED) return rc;
            p = skip_space(p, end);
            if (p >= end) return SLOW;
            if (*p == '}') {
                p++;
                break;
            }
            if (*p != ',') return SLOW;
            p = skip_space(p + 1, end);
        }
    }
    if (skip_space(p, end) != end) return SLOW; /* "Extra data" in Python */
    /* Without retrieved_ids Python looks inside "input" or reports the missing field. */
    if (!P->seen[RETRIEVED]) return SLOW;
    /* A dotted segment name that is not a key of its own is looked up inside the object its head
     * names; that lookup is Python's business. */
    for (size_t i = 0; i < P->nseg; i++) {
        int own_key = P->seen[FIELD_COUNT + i] && !P->seg_shadowed[i];
        if (!own_key && P->head_object[i]) return SLOW;
    }
    return PARSED;
}

static void mark(const Parser *P, Mark *m) {
    m->qid_data = P->qid.data.len;
    m->retrieved_strings = P->retrieved.strings;
    m->retrieved_data = P->retrieved.data.len;
    m->relevant_strings = P->relevant.strings;
    m->relevant_data = P->relevant.data.len;
    m->scores_count = P->scores.count;
    m->scores_key_data = P->scores.key_data.len;
    for (size_t i = 0; i < P->nseg; i++) P->seg_mark[i] = P->segments[i].data.len;
}

static void roll_back(Parser *P, const Mark *m) {
    P->qid.data.len = m->qid_data;
    P->retrieved.strings = m->retrieved_strings;
    P->retrieved.offsets.len = (m->retrieved_strings + 1) * sizeof(int64_t);
    P->retrieved.data.len = m->retrieved_data;
    P->relevant.strings = m->relevant_strings;
    P->relevant.offsets.len = (m->relevant_strings + 1) * sizeof(int64_t);
    P->relevant.data.len = m->relevant_data;
    P->scores.count = m->scores_count;
    P->scores.key_offsets.len = (m->scores_count + 1) * sizeof(int64_t);
    P->scores.values.len = m->scores_count * sizeof(double);
    P->scores.key_data.len = m->scores_key_data;
    for (size_t i = 0; i < P->nseg; i++) {
        P->segments[i].data.len = P->seg_mark[i];
        P->seg_valid[i] = 0;
    }
    P->qid_valid = P->rel_valid = P->scores_valid = 0;
}

/* Close the row: one entry in every column, whatever became of the line. */
static int commit_row(Parser *P, uint8_t status, size_t line, size_t start, size_t stop) {
    int failed = buf_u8(&P->status, status) | buf_i64(&P->line_index, (int64_t)line) |
                 buf_i64(&P->line_start, (int64_t)start) | buf_i64(&P->line_end, (int64_t)stop);
    failed |= buf_u8(&P->qid.valid, P->qid_valid) |
              buf_i64(&P->qid.offsets, (int64_t)P->qid.data.len);
    failed |= buf_i64(&P->retrieved.lists, (int64_t)P->retrieved.strings);
    failed |= buf_u8(&P->relevant.valid, P->rel_valid) |
              buf_i64(&P->relevant.lists, (int64_t)P->relevant.strings);
    failed |= buf_u8(&P->scores.valid, P->scores_valid) |
              buf_i64(&P->scores.entries, (int64_t)P->scores.count);
    for (size_t i = 0; i < P->nseg; i++) {
        TextColumn *c = &P->segments[i];
        failed |= buf_u8(&c->valid, P->seg_valid[i]) | buf_i64(&c->offsets, (int64_t)c->data.len);
    }
    P->rows++;
    return failed ? -1 : 0;
}

static inline int is_blank(const uint8_t *p, const uint8_t *end) {
    /* what bytes.strip() removes (the line's own "\n" is already cut off) */
    for (; p < end; p++) {
        uint8_t c = *p;
        if (!(c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == 0x0B || c == 0x0C)) return 0;
    }
    return 1;
}

/* All lines of data[0..size). Returns 0, or -1 when memory ran out. */
static int parse_all(Parser *P, const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    size_t line = 0;
    while (p < end) {
        const uint8_t *newline = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop = newline ? newline : end;
        if (!is_blank(p, stop)) {
            Mark m;
            mark(P, &m);
            int rc = parse_record(P, p, stop);
            if (rc == NO_MEMORY) return -1;
            if (rc != PARSED) roll_back(P, &m);
            if (commit_row(P, rc == PARSED ? 0 : 1, line, (size_t)(p - data),
                           (size_t)(stop - data)) < 0)
                return -1;
        }
        line++;
        p = newline ? newline + 1 : end;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Python interface                                                                             */

static int name_from(PyObject *item, Name *name, const char *what) {
    if (!PyUnicode_Check(item)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(item)->tp_name);
        return -1;
    }
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(item, &len);
    if (!text) return -1;
    name->text = text; /* owned by the str, which the argument tuple keeps alive for the call */
    name->len = (size_t)len;
    return 0;
}

/* The output arrays leave C as Block objects: read-only buffers over the malloc'd memory itself.
 * Copying each array into a bytes object would touch every output page a second time, and on big
 * chunks those page faults cost more than the parsing. numpy.frombuffer and pyarrow.py_buffer take
 * a Block like any bytes-like object and keep it alive while they use it. */
typedef struct {
    PyObject_HEAD
    uint8_t *p;
    Py_ssize_t len;
    size_t cap;
} Block;

static void block_dealloc(Block *self) {
    pool_give(self->p, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int block_getbuffer(Block *self, Py_buffer *view, int flags) {
    static uint8_t empty; /* an empty Block has no storage; the buffer protocol wants a pointer */
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : &empty, self->len, 1,
                             flags);
}

static Py_ssize_t block_length(Block *self) { return self->len; }

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};
static PySequenceMethods block_as_sequence = {.sq_length = (lenfunc)block_length};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rankgate._jsonl.Block",
    .tp_doc = PyDoc_STR("A read-only array made by parse; use it through the buffer protocol."),
    .tp_basicsize = sizeof(Block),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_as_sequence = &block_as_sequence,
};

/* Move a buffer's memory into a new Block (the Buf is left empty either way). */
static PyObject *block_from(Buf *b) {
    Block *block = PyObject_New(Block, &BlockType);
    if (!block) {
        buf_free(b);
        return NULL;
    }
    if (b->len && b->len < b->cap && b->cap < POOL_MIN_BYTES) {
        /* give back spare capacity (keep the block if that fails) */
        uint8_t *fitted = realloc(b->p, b->len);
        if (fitted) {
            b->p = fitted;
            b->cap = b->len;
        }
    } else if (b->len && b->cap >= POOL_MIN_BYTES) {
        /* A caller may keep the block for long (compare keeps every chunk's labels): the pages
         * past its bytes go back to the system now, and the pool grows it again when reused.
         * Only a large surplus (an array doubled past its size): the sixteenth a presized array
         * keeps in hand, cut and grown again chunk after chunk, cost two calls and fresh pages. */
        size_t fit = page_rounded(b->len);
        if (fit < POOL_MIN_BYTES) fit = POOL_MIN_BYTES;
        if (b->cap - fit >= POOL_MIN_BYTES && b->cap - fit >= b->cap / 8) {
            uint8_t *fitted = big_grow(b->p, b->cap, fit);
            if (fitted) {
                b->p = fitted;
                b->cap = fit;
            }
        }
    }
    block->p = b->len ? b->p : NULL;
    block->len = (Py_ssize_t)b->len;
    block->cap = b->len ? b->cap : 0;
    if (!b->len) pool_give(b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)block;
}

static int set_block(PyObject *dict, const char *key, Buf *b) {
    PyObject *value = block_from(b);
    if (!value) return -1;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *build_result(Parser *P) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    PyObject *rows = PyLong_FromSize_t(P->rows);
    if (!rows || PyDict_SetItemString(out, "rows", rows) < 0) {
        Py_XDECREF(rows);
        goto fail;
    }
    Py_DECREF(rows);
    Output parts[OUTPUT_COUNT];
    outputs_of(P, parts);
    for (size_t i = 0; i < OUTPUT_COUNT; i++) {
        if (set_block(out, parts[i].key, parts[i].buf) < 0) goto fail;
    }
    PyObject *segments = PyTuple_New((Py_ssize_t)P->nseg);
    if (!segments) goto fail;
    if (PyDict_SetItemString(out, "segments", segments) < 0) {
        Py_DECREF(segments);
        goto fail;
    }
    Py_DECREF(segments); /* the dict holds it; filled in place below, before anyone sees it */
    for (size_t i = 0; i < P->nseg; i++) {
        TextColumn *c = &P->segments[i];
        PyObject *item = PyTuple_New(3);
        if (!item) goto fail;
        PyTuple_SET_ITEM(segments, (Py_ssize_t)i, item);
        Buf *bufs[3] = {&c->valid, &c->offsets, &c->data};
        for (Py_ssize_t j = 0; j < 3; j++) {
            PyObject *b = block_from(bufs[j]);
            if (!b) goto fail;
            PyTuple_SET_ITEM(item, j, b);
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_obj, *fields_obj, *segments_obj;
    if (!PyArg_ParseTuple(args, "OO!O!:parse", &data_obj, &PyTuple_Type, &fields_obj,
                          &PyTuple_Type, &segments_obj))
        return NULL;
    if (PyTuple_GET_SIZE(fields_obj) != FIELD_COUNT) {
        PyErr_SetString(PyExc_ValueError, "fields must hold 4 names");
        return NULL;
    }

    Parser P;
    memset(&P, 0, sizeof P);
    PyObject *result = NULL;
    Py_buffer view;
    int have_view = 0;

    for (int k = 0; k < FIELD_COUNT; k++) {
        if (name_from(PyTuple_GET_ITEM(fields_obj, k), &P.fields[k], "field name") < 0) goto done;
    }
    P.fields_distinct = 1;
    for (int a = 0; a < FIELD_COUNT; a++) {
        for (int b = a + 1; b < FIELD_COUNT; b++) {
            if (name_is(&P.fields[a], (const uint8_t *)P.fields[b].text, P.fields[b].len))
                P.fields_distinct = 0;
        }
    }
    P.nseg = (size_t)PyTuple_GET_SIZE(segments_obj);
    size_t slots = P.nseg ? P.nseg : 1; /* never malloc(0): its NULL would look like a failure */
    P.seg = calloc(slots, sizeof(Name));
    P.seg_head = calloc(slots, sizeof(Py_ssize_t));
    P.seg_shadowed = calloc(slots, 1);
    P.seen = calloc(FIELD_COUNT + 2 * slots, 1);
    P.seg_match = calloc(slots, 1);
    P.head_object = calloc(slots, 1);
    P.seg_valid = calloc(slots, 1);
    P.seg_mark = calloc(slots, sizeof(size_t));
    P.segments = calloc(slots, sizeof(TextColumn));
    if (!P.seg || !P.seg_head || !P.seg_shadowed || !P.seen || !P.seg_match || !P.head_object ||
        !P.seg_valid || !P.seg_mark || !P.segments) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < P.nseg; i++) {
        Name *name = &P.seg[i];
        if (name_from(PyTuple_GET_ITEM(segments_obj, (Py_ssize_t)i), name, "segment field") < 0)
            goto done;
        const char *dot = name->len ? memchr(name->text, '.', name->len) : NULL;
        P.seg_head[i] = dot ? (Py_ssize_t)(dot - name->text) : -1;
        for (int k = 0; k < FIELD_COUNT; k++) {
            if (name_is(&P.fields[k], (const uint8_t *)name->text, name->len))
                P.seg_shadowed[i] = 1;
        }
    }
    if (parser_start(&P) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyObject_GetBuffer(data_obj, &view, PyBUF_SIMPLE) < 0) goto done;
    have_view = 1;

    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = parser_presize(&P, (size_t)view.len) < 0 ||
             parse_all(&P, (const uint8_t *)view.buf, (size_t)view.len) < 0;
    if (!failed) parser_learn(&P, (size_t)view.len);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = build_result(&P);
done:
    if (have_view) PyBuffer_Release(&view);
    parser_free(&P);
    return result;
}

/* One value that must be a JSON array of IDs and nothing else (a store's ranking column). */
static int parse_ranking(Parser *P, const uint8_t *p, const uint8_t *end) {
    P->qid_valid = P->rel_valid = P->scores_valid = 0;
    P->labels = 0;
    p = skip_space(p, end);
    if (p >= end || *p != '[') return SLOW; /* json.loads of anything else is not a ranking */
    uint8_t unused = 0;
    size_t ids = 0;
    int rc = parse_id_list(&P->retrieved, &p, end, 0, &unused, &ids, MAX_IDS_PER_RANKING);
    if (rc != PARSED) return rc;
    return skip_space(p, end) == end ? PARSED : SLOW; /* "Extra data" in Python */
}

/* Every value data[offsets[i]..offsets[i+1]) of an Arrow string column, one row each. */
static int parse_values(Parser *P, const uint8_t *data, const uint8_t *offsets, size_t count,
                        int wide) {
    for (size_t i = 0; i < count; i++) {
        int64_t start = arrow_offset(offsets, wide, (int64_t)i);
        int64_t stop = arrow_offset(offsets, wide, (int64_t)i + 1);
        Mark m;
        mark(P, &m);
        int rc = parse_ranking(P, data + start, data + stop);
        if (rc == NO_MEMORY) return -1;
        if (rc != PARSED) roll_back(P, &m);
        if (commit_row(P, rc == PARSED ? 0 : 1, i, (size_t)start, (size_t)stop) < 0) return -1;
    }
    return 0;
}

/* parse_rankings(data, offsets, count, wide): each of the count values of an Arrow string column
 * (data and offsets its buffers, 64-bit offsets when wide) is a ranking written as JSON text: the
 * same columns as parse, with only the ranking filled. A value that is not exactly one array of
 * IDs (damaged text, something after the array) is a slow row, for the validator to word. */
static PyObject *parse_rankings(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_obj, *offsets_obj;
    Py_ssize_t count;
    int wide;
    if (!PyArg_ParseTuple(args, "OOnp:parse_rankings", &data_obj, &offsets_obj, &count, &wide))
        return NULL;
    Parser P;
    memset(&P, 0, sizeof P);
    PyObject *result = NULL;
    Py_buffer data, offsets;
    int have_data = 0, have_offsets = 0;
    P.seen = calloc(FIELD_COUNT + 2, 1);
    if (!P.seen) {
        PyErr_NoMemory();
        goto done;
    }
    if (parser_start(&P) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) goto done;
    have_data = 1;
    if (PyObject_GetBuffer(offsets_obj, &offsets, PyBUF_SIMPLE) < 0) goto done;
    have_offsets = 1;
    size_t width = wide ? 8 : 4;
    if (count < 0 || (size_t)offsets.len < ((size_t)count + 1) * width) {
        PyErr_SetString(PyExc_ValueError, "offsets are shorter than count + 1");
        goto done;
    }
    if (!arrow_offsets_inside(offsets.buf, wide, count, data.len)) {
        PyErr_SetString(PyExc_ValueError, "an offset is outside the data");
        goto done;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = parse_values(&P, (const uint8_t *)data.buf, (const uint8_t *)offsets.buf,
                          (size_t)count, wide) < 0;
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = build_result(&P);
done:
    if (have_data) PyBuffer_Release(&data);
    if (have_offsets) PyBuffer_Release(&offsets);
    parser_free(&P);
    return result;
}

PyDoc_STRVAR(parse_doc,
             "parse(data, fields, segment_fields) -> dict\n\n"
             "Trace columns, in Arrow layout, from the JSON Lines in a bytes-like object.\n"
             "See rankgate/_jsonl.pyi for the arguments and the keys of the result.");

/* Free the pool's spare buffers, for a caller done reading; returns the bytes freed. */
/* The line breaks of a buffer: how many, and where the last one is (-1 for none), 16 bytes at a
 * time where SSE2 is there. The reader of JSON Lines counts them in every chunk to number the
 * next chunk's lines; bytes.count did it holding the GIL, a twentieth of a whole run, while the
 * main thread waited to score. */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static PyObject *line_breaks(PyObject *self, PyObject *args) {
    PyObject *data_obj;
    if (!PyArg_ParseTuple(args, "O:line_breaks", &data_obj)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data_obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *start = (const uint8_t *)view.buf, *p = start, *end = start + view.len;
    int64_t count = 0, last = -1;
    Py_BEGIN_ALLOW_THREADS
#if defined(__SSE2__)
    const __m128i newline = _mm_set1_epi8('\n');
    for (; end - p >= 16; p += 16) {
        unsigned mask = (unsigned)_mm_movemask_epi8(
            _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), newline));
        if (mask) {
            count += __builtin_popcount(mask);
            last = (int64_t)(p - start) + 31 - __builtin_clz(mask);
        }
    }
#endif
    for (; p < end; p++) {
        if (*p == '\n') {
            count++;
            last = (int64_t)(p - start);
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("LL", (long long)count, (long long)last);
}

static PyObject *release(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    Spare held[POOL_SLOTS];
    size_t count = 0, bytes = 0;
    if (pool_lock) {
        pool_enter();
        count = pool_count;
        bytes = pool_bytes;
        memcpy(held, pool, count * sizeof(Spare));
        pool_count = 0;
        pool_bytes = 0;
        pool_leave();
    }
    for (size_t i = 0; i < count; i++) buffer_free(held[i].p, held[i].cap);
    return PyLong_FromSize_t(bytes);
}

/* Bytes and buffers the pool holds now. */
static PyObject *pooled(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    size_t count = 0, bytes = 0;
    if (pool_lock) {
        pool_enter();
        count = pool_count;
        bytes = pool_bytes;
        pool_leave();
    }
    return Py_BuildValue("(nn)", (Py_ssize_t)bytes, (Py_ssize_t)count);
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS, parse_doc},
    {"parse_rankings", parse_rankings, METH_VARARGS,
     "parse_rankings(data, offsets, count, wide) -> dict: rankings as JSON text, as parse's "
     "columns."},
    {"line_breaks", line_breaks, METH_VARARGS,
     PyDoc_STR("line_breaks(data) -> (count, last)\n\nHow many b'\\n' bytes `data` holds and "
               "the index of the last (-1 for none).")},
    {"release", release, METH_NOARGS,
     PyDoc_STR("release() -> int\n\nFree the spare output buffers kept for the next parse.")},
    {"pooled", pooled, METH_NOARGS,
     PyDoc_STR("pooled() -> (bytes, buffers)\n\nWhat the pool of spare buffers holds.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "rankgate._jsonl", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jsonl(void) {
#ifdef HAVE_STRTOD_L
    if (!c_numeric_locale) c_numeric_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    /* left at 0 on failure: number_value then sends hard numbers to Python */
#endif
    if (!pool_lock) pool_lock = PyThread_allocate_lock(); /* NULL: no pool, plain malloc */
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&BlockType);
    if (PyModule_AddObject(m, "Block", (PyObject *)&BlockType) < 0) {
        Py_DECREF(&BlockType);
        Py_DECREF(m);
        return NULL;
    }
    /* The bounds compiled in, for the test that holds them equal to io/limits.py. */
    if (PyModule_AddIntConstant(m, "MAX_NESTING_DEPTH", MAX_DEPTH) < 0 ||
        PyModule_AddIntConstant(m, "MAX_IDS_PER_RANKING", MAX_IDS_PER_RANKING) < 0 ||
        PyModule_AddIntConstant(m, "MAX_LABELS_PER_QUERY", MAX_LABELS_PER_QUERY) < 0 ||
        PyModule_AddIntConstant(m, "MAX_ID_BYTES", MAX_ID_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "MAX_TEXT_BYTES", MAX_TEXT_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "POOL_LIMIT_BYTES", (long)POOL_LIMIT_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
