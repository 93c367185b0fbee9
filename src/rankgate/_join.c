/* Compiled inner loops of the columnar path: joining rankings with labels, and scoring them.
 *
 * `join` turns Arrow-layout columns of document IDs (retrieved, relevant, graded) into the arrays of
 * a RankedBatch (see batch.py): per ranked position the grade of the document there and whether it
 * is labeled, per query its label grades sorted from highest to lowest. IDs are hashed here, one
 * small table per query, so no Python object is made per ID.
 *
 * `score` computes the metrics that declare a compiled twin (`native=` in metrics/definitions.py)
 * over a RankedBatch, one pass per query. The numpy definitions stay the reference; the property
 * tests hold the two equal on random batches.
 *
 * Both release the GIL, so two threads can work on two batches at once. Every array arrives through
 * the buffer protocol; the caller (rankgate/fast.py) checks lengths and types before calling, and the
 * checks here only guard memory safety.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_arrow_offsets.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------- */
/* Hash table of the documents of one query                                                     */

typedef struct {
    uint64_t hash;
    const uint8_t *bytes;
    uint32_t length;
    uint32_t generation; /* the entry is in use when this equals the table's generation */
    double grade;
    uint8_t labeled;   /* carries a label (relevant_ids or relevance_scores) */
    uint8_t seen;      /* already placed in the ranking */
    uint8_t scored_by_map; /* set by a relevance_scores entry (to spot repeated map keys) */
} Entry;

typedef struct {
    Entry *entries;
    size_t capacity; /* a power of two */
    uint32_t generation;
} Table;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    /* A multiply-xorshift over 8-byte words: IDs are short, so speed matters more than quality
     * beyond avoiding clustering; collisions only cost a comparison. */
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h ^= w;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h ^= w;
        h *= 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

static int table_prepare(Table *table, size_t items) {
    /* At most half full, so probe runs stay short. */
    size_t wanted = 16;
    while (wanted < items * 2) wanted <<= 1;
    if (wanted > table->capacity) {
        Entry *grown = calloc(wanted, sizeof(Entry));
        if (!grown) return -1;
        free(table->entries);
        table->entries = grown;
        table->capacity = wanted;
        table->generation = 0;
    }
    table->generation++;
    if (table->generation == 0) { /* wrapped: forget every stale entry */
        memset(table->entries, 0, table->capacity * sizeof(Entry));
        table->generation = 1;
    }
    return 0;
}

/* The entry for an ID, inserted (zeroed) when absent. */
static Entry *table_find(Table *table, const uint8_t *bytes, uint32_t length) {
    uint64_t hash = hash_bytes(bytes, length);
    size_t mask = table->capacity - 1;
    size_t slot = (size_t)hash & mask;
    for (;;) {
        Entry *e = &table->entries[slot];
        if (e->generation != table->generation) {
            e->generation = table->generation;
            e->hash = hash;
            e->bytes = bytes;
            e->length = length;
            e->grade = 0.0;
            e->labeled = 0;
            e->seen = 0;
            e->scored_by_map = 0;
            return e;
        }
        if (e->hash == hash && e->length == length && memcmp(e->bytes, bytes, length) == 0) return e;
        slot = (slot + 1) & mask;
    }
}

static int descending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static void sort_descending(double *values, size_t n) {
    if (n > 32) {
        qsort(values, n, sizeof(double), descending);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        double v = values[i];
        size_t j = i;
        while (j > 0 && values[j - 1] < v) {
            values[j] = values[j - 1];
            j--;
        }
        values[j] = v;
    }
}

/* ------------------------------------------------------------------------------------------- */
/* Buffers                                                                                      */

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int get_buffer(PyObject *obj, Buf *buf, int writable, Py_ssize_t itemsize, const char *name) {
    int flags = writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS;
    if (PyObject_GetBuffer(obj, &buf->view, flags) < 0) return -1;
    buf->held = 1;
    if (itemsize > 1 && buf->view.len % itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffer length is not a multiple of %zd", name, itemsize);
        return -1;
    }
    return 0;
}

static void release(Buf *bufs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (bufs[i].held) PyBuffer_Release(&bufs[i].view);
    }
}

/* Buffers of objs[0..n), item sizes checked; those from `writable_from` on are written. On failure
 * every buffer taken is released and an exception is set. */
static int get_buffers(PyObject **objs, Buf *bufs, int n, const Py_ssize_t *sizes,
                       const char **names, int writable_from) {
    memset(bufs, 0, (size_t)n * sizeof(Buf));
    for (int i = 0; i < n; i++) {
        if (get_buffer(objs[i], &bufs[i], i >= writable_from, sizes[i], names[i]) < 0) {
            release(bufs, (size_t)n);
            return -1;
        }
    }
    return 0;
}

#define COUNT(b, type) ((size_t)((b).view.len / (Py_ssize_t)sizeof(type)))
#define DATA(b, type) ((type *)(b).view.buf)

/* An Arrow list<string>: list offsets into the strings, string offsets into the bytes. */
typedef struct {
    const int64_t *lists;
    size_t n_lists; /* entries in `lists` (rows + 1) */
    const void *strings; /* int32 (Arrow string) or int64 (large_string) offsets */
    int wide;
    size_t n_strings; /* entries in `strings` */
    const uint8_t *bytes;
    size_t n_bytes;
} IdLists;

static inline int64_t string_at(const IdLists *ids, int64_t i) {
    return ids->wide ? ((const int64_t *)ids->strings)[i] : (int64_t)((const int32_t *)ids->strings)[i];
}

static IdLists id_lists(const Buf *lists, const Buf *strings, const Buf *bytes) {
    IdLists ids;
    ids.lists = (const int64_t *)lists->view.buf;
    ids.n_lists = (size_t)(lists->view.len / 8);
    ids.strings = strings->view.buf;
    ids.wide = strings->view.itemsize == 8;
    ids.n_strings = (size_t)(strings->view.len / (ids.wide ? 8 : 4));
    ids.bytes = (const uint8_t *)bytes->view.buf;
    ids.n_bytes = (size_t)bytes->view.len;
    return ids;
}

#define STRING_BYTES(ids, j) ((ids).bytes + string_at(&(ids), (j)))
#define STRING_LENGTH(ids, j) ((uint32_t)(string_at(&(ids), (j) + 1) - string_at(&(ids), (j))))

/* Checks that every offset a row uses lies inside its buffer (the caller built them, but a bad
 * offset must never become a read outside memory). */
static int ids_row_ok(const IdLists *ids, int64_t row) {
    if (row < 0 || (size_t)row + 1 >= ids->n_lists) return 0;
    int64_t first = ids->lists[row], last = ids->lists[row + 1];
    if (first < 0 || last < first || (size_t)last >= ids->n_strings) return 0;
    int64_t start = string_at(ids, first), end = string_at(ids, last);
    if (start < 0 || end < start || (size_t)end > ids->n_bytes) return 0;
    for (int64_t i = first; i < last; i++) {
        if (string_at(ids, i + 1) < string_at(ids, i)) return 0;
    }
    return 1;
}

/* ROW_FOR_VALIDATOR: something only the validator can word (an empty ID, a map column that repeats
 * a key); the caller sends the row through the record path. */
enum { ROW_SCORED = 0, ROW_UNLABELED = 1, ROW_NO_RELEVANT = 2, ROW_FOR_VALIDATOR = 3 };

/* join(rows, retrieved..., relevant..., scores..., threshold, skip_no_relevant, unique_map_keys,
 *      outputs...) -> (scored, ranked_positions, labels)
 *
 * For each row index in `rows` (in order): status (scored, unlabeled, no relevant label, or for the
 * validator), duplicates dropped from its ranking, and, for scored rows only, its ranked grades, judged
 * flags and sorted label grades appended to the outputs. `forced_zero` marks scored rows without a
 * relevant label (only when they are not skipped). */
static PyObject *join(PyObject *self, PyObject *args) {
    PyObject *objs[22];
    double threshold;
    int skip_no_relevant, unique_map_keys;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOdiiOOOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10],
                          &objs[11], &objs[12], &threshold, &skip_no_relevant, &unique_map_keys,
                          &objs[13], &objs[14], &objs[15], &objs[16], &objs[17], &objs[18],
                          &objs[19], &objs[20], &objs[21]))
        return NULL;
    static const char *names[22] = {
        "rows", "retrieved.lists", "retrieved.strings", "retrieved.bytes", "relevant.valid",
        "relevant.lists", "relevant.strings", "relevant.bytes", "scores.valid", "scores.lists",
        "scores.strings", "scores.bytes", "scores.values", "status", "duplicates", "forced_zero",
        "ranked_offsets", "ranked_grades", "ranked_judged", "label_offsets", "label_grades",
        "spare"};
    /* String offsets may be int32 or int64: only a multiple of 4 is checked, the width is the
     * buffer's item size. */
    static const Py_ssize_t sizes[22] = {8, 8, 4, 1, 1, 8, 4, 1, 1, 8, 4, 1, 8,
                                         1, 8, 1, 8, 8, 1, 8, 8, 1};
    Buf bufs[22];
    memset(bufs, 0, sizeof(bufs));
    for (int i = 0; i < 22; i++) {
        if (objs[i] == Py_None) continue;
        if (get_buffer(objs[i], &bufs[i], i >= 13, sizes[i], names[i]) < 0) {
            release(bufs, 22);
            return NULL;
        }
    }
    for (int i = 0; i < 21; i++) {
        if (!bufs[i].held) {
            PyErr_Format(PyExc_TypeError, "%s: a buffer is required", names[i]);
            release(bufs, 22);
            return NULL;
        }
    }
    size_t n_rows = COUNT(bufs[0], int64_t);
    const int64_t *rows = DATA(bufs[0], int64_t);
    for (int i = 2; i <= 10; i += 4) {
        if (bufs[i].view.itemsize != 4 && bufs[i].view.itemsize != 8) {
            PyErr_Format(PyExc_TypeError, "%s: offsets must be int32 or int64", names[i]);
            release(bufs, 22);
            return NULL;
        }
    }
    IdLists retrieved = id_lists(&bufs[1], &bufs[2], &bufs[3]);
    const uint8_t *relevant_valid = DATA(bufs[4], uint8_t);
    size_t n_relevant_valid = COUNT(bufs[4], uint8_t);
    IdLists relevant = id_lists(&bufs[5], &bufs[6], &bufs[7]);
    const uint8_t *scores_valid = DATA(bufs[8], uint8_t);
    size_t n_scores_valid = COUNT(bufs[8], uint8_t);
    IdLists scores = id_lists(&bufs[9], &bufs[10], &bufs[11]);
    const double *score_values = DATA(bufs[12], double);
    size_t n_score_values = COUNT(bufs[12], double);
    uint8_t *status = DATA(bufs[13], uint8_t);
    int64_t *duplicates = DATA(bufs[14], int64_t);
    uint8_t *forced_zero = DATA(bufs[15], uint8_t);
    int64_t *ranked_offsets = DATA(bufs[16], int64_t);
    double *ranked_grades = DATA(bufs[17], double);
    uint8_t *ranked_judged = DATA(bufs[18], uint8_t);
    int64_t *label_offsets = DATA(bufs[19], int64_t);
    double *label_grades = DATA(bufs[20], double);
    size_t cap_ranked = COUNT(bufs[17], double), cap_labels = COUNT(bufs[20], double);

    if (COUNT(bufs[13], uint8_t) < n_rows || COUNT(bufs[14], int64_t) < n_rows ||
        COUNT(bufs[15], uint8_t) < n_rows || COUNT(bufs[16], int64_t) < n_rows + 1 ||
        COUNT(bufs[19], int64_t) < n_rows + 1 || COUNT(bufs[18], uint8_t) < cap_ranked) {
        PyErr_SetString(PyExc_ValueError, "join: an output buffer is too small");
        release(bufs, 22);
        return NULL;
    }

    Table table = {NULL, 0, 0};
    Entry **labeled_entries = NULL;
    size_t label_cap_entries = 0;
    size_t scored = 0, ranked_at = 0, labels_at = 0;
    const char *failure = NULL;
    Py_BEGIN_ALLOW_THREADS
    ranked_offsets[0] = 0;
    label_offsets[0] = 0;
    for (size_t i = 0; i < n_rows && !failure; i++) {
        int64_t row = rows[i];
        duplicates[i] = 0;
        forced_zero[i] = 0;
        if (!ids_row_ok(&retrieved, row)) { failure = "retrieved IDs: offsets out of range"; break; }
        /* An empty ID is invalid whatever the labels say: the validator reads the row first. */
        int empty_id = 0;
        for (int64_t j = retrieved.lists[row]; j < retrieved.lists[row + 1]; j++) {
            if (STRING_LENGTH(retrieved, j) == 0) { empty_id = 1; break; }
        }
        if (empty_id) {
            status[i] = ROW_FOR_VALIDATOR;
            continue;
        }
        int has_relevant_list = (size_t)row < n_relevant_valid && relevant_valid[row];
        int has_scores = (size_t)row < n_scores_valid && scores_valid[row];
        if (!has_relevant_list && !has_scores) {
            status[i] = ROW_UNLABELED;
            continue;
        }
        if (has_relevant_list && !ids_row_ok(&relevant, row)) { failure = "relevant IDs: offsets out of range"; break; }
        if (has_scores && !ids_row_ok(&scores, row)) { failure = "relevance scores: offsets out of range"; break; }
        int64_t r0 = retrieved.lists[row], r1 = retrieved.lists[row + 1];
        int64_t l0 = has_relevant_list ? relevant.lists[row] : 0;
        int64_t l1 = has_relevant_list ? relevant.lists[row + 1] : 0;
        int64_t s0 = has_scores ? scores.lists[row] : 0, s1 = has_scores ? scores.lists[row + 1] : 0;
        if (has_scores && (size_t)s1 > n_score_values) { failure = "relevance scores: values out of range"; break; }
        if (table_prepare(&table, (size_t)((r1 - r0) + (l1 - l0) + (s1 - s0))) < 0) { failure = "out of memory"; break; }

        /* Labels first: relevant_ids count as grade 1, a relevance score overrides. Each labeled
         * entry is remembered once, so its final grade can be collected without a second lookup
         * (entries do not move: the table was sized for every ID of the query). */
        size_t label_start = labels_at, n_labels = 0;
        int needs_validator = 0; /* an empty ID, or a key a table's map repeats */
        if (label_cap_entries < (size_t)((l1 - l0) + (s1 - s0))) {
            size_t wanted = (size_t)((l1 - l0) + (s1 - s0)) * 2;
            Entry **grown = realloc(labeled_entries, wanted * sizeof(Entry *));
            if (!grown) { failure = "out of memory"; break; }
            labeled_entries = grown;
            label_cap_entries = wanted;
        }
        for (int64_t j = l0; j < l1; j++) {
            if (STRING_LENGTH(relevant, j) == 0) needs_validator = 1;
            Entry *e = table_find(&table, STRING_BYTES(relevant, j), STRING_LENGTH(relevant, j));
            if (!e->labeled) { e->labeled = 1; labeled_entries[n_labels++] = e; }
            e->grade = 1.0;
        }
        for (int64_t j = s0; j < s1; j++) {
            if (STRING_LENGTH(scores, j) == 0) needs_validator = 1;
            Entry *e = table_find(&table, STRING_BYTES(scores, j), STRING_LENGTH(scores, j));
            if (e->scored_by_map && unique_map_keys) needs_validator = 1;
            if (!e->labeled) { e->labeled = 1; labeled_entries[n_labels++] = e; }
            e->scored_by_map = 1;
            e->grade = score_values[j];
        }
        if (needs_validator) {
            status[i] = ROW_FOR_VALIDATOR;
            continue;
        }
        if (labels_at + n_labels > cap_labels) { failure = "label output too small"; break; }
        double best = -1.0;
        for (size_t j = 0; j < n_labels; j++) {
            double grade = labeled_entries[j]->grade;
            label_grades[labels_at++] = grade;
            if (grade > best) best = grade;
        }
        int has_relevant = best >= threshold;
        if (!has_relevant && skip_no_relevant) {
            labels_at = label_start;
            status[i] = ROW_NO_RELEVANT;
            continue;
        }
        sort_descending(label_grades + label_start, labels_at - label_start);
        if (ranked_at + (size_t)(r1 - r0) > cap_ranked) { failure = "ranked output too small"; break; }
        for (int64_t j = r0; j < r1; j++) {
            Entry *e = table_find(&table, STRING_BYTES(retrieved, j), STRING_LENGTH(retrieved, j));
            if (e->seen) { duplicates[i]++; continue; }
            e->seen = 1;
            ranked_grades[ranked_at] = e->labeled ? e->grade : 0.0;
            ranked_judged[ranked_at] = e->labeled;
            ranked_at++;
        }
        status[i] = ROW_SCORED;
        forced_zero[i] = !has_relevant;
        scored++;
        ranked_offsets[scored] = (int64_t)ranked_at;
        label_offsets[scored] = (int64_t)labels_at;
    }
    free(table.entries);
    free(labeled_entries);
    Py_END_ALLOW_THREADS
    release(bufs, 22);
    if (failure) {
        PyErr_Format(PyExc_ValueError, "join: %s", failure);
        return NULL;
    }
    return Py_BuildValue("nnn", (Py_ssize_t)scored, (Py_ssize_t)ranked_at, (Py_ssize_t)labels_at);
}

/* ------------------------------------------------------------------------------------------- */
/* Scoring                                                                                      */

enum {
    M_NDCG_EXP = 0,
    M_NDCG_LINEAR = 1,
    M_DCG_EXP = 2,
    M_DCG_LINEAR = 3,
    M_PRECISION = 4,
    M_RECALL = 5,
    M_MRR = 6,
    M_MAP = 7,
    M_HIT_RATE = 8,
    M_R_PRECISION = 9,
    M_JUDGED = 10,
    M_COUNT = 11
};

static inline double gain_of(double grade, int linear) { return linear ? grade : exp2(grade) - 1.0; }

static inline double ratio(double numerator, double denominator) {
    return denominator != 0.0 ? numerator / denominator : 0.0;
}

/* score(ranked_offsets, ranked_grades, ranked_judged, label_offsets, label_grades, discounts,
 *       codes, cutoffs, rels, out[, unjudged_grade, condensed, policies, policy_grades])
 *
 * out[m * n + q] = metric m of query q. `discounts[r]` is log2(r + 2), computed by numpy so both
 * paths divide by the same numbers; a cutoff < 0 means none. With `unjudged_grade` (not NaN), each
 * query is scored as RankedBatch.with_unjudged_relevant(unjudged_grade) makes it (batch.py): its
 * unjudged documents take that grade, at their ranks and among its labels. The query's arrays are
 * made over again in two small buffers, where the definition makes a whole batch of them: the
 * same numbers, in cache. `discounts` must then cover a query's labels plus its ranking. With
 * `condensed`, each query is scored as RankedBatch.condensed() makes it.
 *
 * `policies` (int32, one per metric: POLICY_NONRELEVANT, POLICY_CONDENSED, POLICY_RELEVANT) and
 * `policy_grades` (float64, the unjudged grade of each POLICY_RELEVANT metric) give each metric a
 * policy of its own instead; metrics of one policy should be next to each other, as a query's
 * arrays are made again whenever the policy changes from one metric to the next. One call then
 * reads each query's arrays once for every policy, where a call per policy read the batch from
 * memory once each (compare scores every metric under all three). */
enum { POLICY_NONRELEVANT = 0, POLICY_CONDENSED = 1, POLICY_RELEVANT = 2 };

/* A query's ranking and ideal grades as one unjudged-document policy sees them. */
typedef struct {
    const double *grades, *ideal;
    int64_t length, n_ideal;
    int all_judged;
} PolicyView;

static PolicyView policy_view(int policy, double unjudged_grade, const double *g,
                              const uint8_t *judged_here, int64_t length, const double *ideal,
                              int64_t n_ideal, double *own_grades, double *own_ideal) {
    PolicyView view = {g, ideal, length, n_ideal, 0};
    if (policy == POLICY_RELEVANT) {
        /* with_unjudged_relevant for this query alone (batch.py is the definition). */
        int64_t added = 0;
        for (int64_t r = 0; r < length; r++) {
            if (judged_here[r]) {
                own_grades[r] = g[r];
            } else {
                own_grades[r] = unjudged_grade;
                added++;
            }
        }
        for (int64_t j = 0; j < n_ideal + added; j++) own_ideal[j] = unjudged_grade;
        for (int64_t j = 0; j < n_ideal; j++)
            own_ideal[j + (ideal[j] <= unjudged_grade ? added : 0)] = ideal[j];
        view.grades = own_grades;
        view.ideal = own_ideal;
        view.n_ideal = n_ideal + added;
        view.all_judged = 1;
    } else if (policy == POLICY_CONDENSED) {
        /* condensed for this query alone: its unjudged documents left out, the rest moved up;
         * the labels (so R and the ideal ranking) as they are. */
        int64_t kept = 0;
        for (int64_t r = 0; r < length; r++)
            if (judged_here[r]) own_grades[kept++] = g[r];
        view.grades = own_grades;
        view.length = kept;
        view.all_judged = 1;
    }
    return view;
}

static PyObject *score(PyObject *self, PyObject *args) {
    PyObject *objs[12] = {NULL};
    double unjudged_grade = NAN;
    int condensed_policy = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO|dpOO", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9],
                          &unjudged_grade, &condensed_policy, &objs[10], &objs[11]))
        return NULL;
    int relevant_policy = !isnan(unjudged_grade);
    int per_metric = objs[10] != NULL && objs[10] != Py_None;
    if ((relevant_policy && condensed_policy) ||
        (per_metric && (relevant_policy || condensed_policy)) ||
        (per_metric != (objs[11] != NULL && objs[11] != Py_None))) {
        PyErr_SetString(PyExc_ValueError, "score: one policy, or policies with their grades");
        return NULL;
    }
    static const char *names[12] = {"ranked_offsets", "ranked_grades", "ranked_judged",
                                    "label_offsets", "label_grades", "discounts", "codes",
                                    "cutoffs", "rels", "out", "policies", "policy_grades"};
    static const Py_ssize_t sizes[12] = {8, 8, 1, 8, 8, 8, 4, 8, 8, 8, 4, 8};
    int n_bufs = per_metric ? 12 : 10;
    Buf bufs[12];
    memset(bufs, 0, sizeof bufs);
    if (get_buffers(objs, bufs, 10, sizes, names, 9) < 0) return NULL;
    for (int i = 10; i < n_bufs; i++) { /* read-only, past `out` */
        if (get_buffer(objs[i], &bufs[i], 0, sizes[i], names[i]) < 0) {
            release(bufs, (size_t)i);
            return NULL;
        }
    }
    const int64_t *ranked_offsets = DATA(bufs[0], int64_t);
    const double *grades = DATA(bufs[1], double);
    const uint8_t *judged = DATA(bufs[2], uint8_t);
    const int64_t *label_offsets = DATA(bufs[3], int64_t);
    const double *label_grades = DATA(bufs[4], double);
    const double *discounts = DATA(bufs[5], double);
    const int32_t *codes = DATA(bufs[6], int32_t);
    const int64_t *cutoffs = DATA(bufs[7], int64_t);
    const double *rels = DATA(bufs[8], double);
    double *out = DATA(bufs[9], double);
    size_t n_offsets = COUNT(bufs[0], int64_t);
    size_t n = n_offsets ? n_offsets - 1 : 0;
    size_t m = COUNT(bufs[6], int32_t);
    size_t n_grades = COUNT(bufs[1], double), n_labels = COUNT(bufs[4], double);
    size_t n_discounts = COUNT(bufs[5], double);
    const int32_t *policies = per_metric ? DATA(bufs[10], int32_t) : NULL;
    const double *policy_grades = per_metric ? DATA(bufs[11], double) : NULL;
    const char *failure = NULL;
    if (COUNT(bufs[3], int64_t) != n_offsets || COUNT(bufs[2], uint8_t) != n_grades ||
        COUNT(bufs[7], int64_t) != m || COUNT(bufs[8], double) != m ||
        COUNT(bufs[9], double) < m * n ||
        (per_metric && (COUNT(bufs[10], int32_t) != m || COUNT(bufs[11], double) != m))) {
        failure = "array lengths disagree";
    }
    int single_policy = relevant_policy ? POLICY_RELEVANT
                        : condensed_policy ? POLICY_CONDENSED
                                           : POLICY_NONRELEVANT;
    int any_own = relevant_policy || condensed_policy;
    for (size_t j = 0; j < m && !failure; j++) {
        if (codes[j] < 0 || codes[j] >= M_COUNT) failure = "unknown metric code";
        if (per_metric) {
            if (policies[j] < POLICY_NONRELEVANT || policies[j] > POLICY_RELEVANT)
                failure = "unknown unjudged-document policy";
            if (policies[j] == POLICY_RELEVANT && isnan(policy_grades[j]))
                failure = "a relevant policy needs its grade";
            relevant_policy |= policies[j] == POLICY_RELEVANT;
            any_own |= policies[j] != POLICY_NONRELEVANT;
        }
    }
    /* Offsets must rise and stay inside the arrays; discounts must cover the longest list (under
     * the relevant policy, a query's labels and its ranking together). */
    size_t longest_ranking = 0, longest_ideal = 0;
    for (size_t q = 0; q < n && !failure; q++) {
        if (ranked_offsets[q] < 0 || ranked_offsets[q + 1] < ranked_offsets[q] ||
            (size_t)ranked_offsets[q + 1] > n_grades || label_offsets[q] < 0 ||
            label_offsets[q + 1] < label_offsets[q] || (size_t)label_offsets[q + 1] > n_labels) {
            failure = "offsets out of range or discounts too short";
            break;
        }
        size_t ranked = (size_t)(ranked_offsets[q + 1] - ranked_offsets[q]);
        size_t ideal = (size_t)(label_offsets[q + 1] - label_offsets[q]) + (relevant_policy ? ranked : 0);
        if (ranked > n_discounts || ideal > n_discounts)
            failure = "offsets out of range or discounts too short";
        if (ranked > longest_ranking) longest_ranking = ranked;
        if (ideal > longest_ideal) longest_ideal = ideal;
    }
    double *own_grades = NULL, *own_ideal = NULL;
    if (!failure && any_own) {
        own_grades = malloc((longest_ranking + 1) * sizeof(double));
        own_ideal = malloc((longest_ideal + 1) * sizeof(double));
        if (own_grades == NULL || own_ideal == NULL) failure = "out of memory";
    }
    if (failure) {
        free(own_grades);
        free(own_ideal);
        release(bufs, n_bufs);
        PyErr_Format(PyExc_ValueError, "score: %s", failure);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (size_t q = 0; q < n; q++) {
        const double *query_grades = grades + ranked_offsets[q];
        const uint8_t *judged_here = judged + ranked_offsets[q];
        int64_t query_length = ranked_offsets[q + 1] - ranked_offsets[q];
        const double *query_ideal = label_grades + label_offsets[q];
        int64_t query_ideal_count = label_offsets[q + 1] - label_offsets[q];
        int shown = -1;            /* the policy `view` shows; -1: none yet */
        double shown_grade = NAN;
        PolicyView view = {NULL, NULL, 0, 0, 0};
        const double *g = NULL, *ideal = NULL;
        int64_t length = 0, n_ideal = 0;
        int all_judged = 0;
        for (size_t j = 0; j < m; j++) {
            int policy = per_metric ? policies[j] : single_policy;
            double policy_grade = per_metric ? policy_grades[j] : unjudged_grade;
            if (policy != shown || (policy == POLICY_RELEVANT && policy_grade != shown_grade)) {
                view = policy_view(policy, policy_grade, query_grades, judged_here, query_length,
                                   query_ideal, query_ideal_count, own_grades, own_ideal);
                shown = policy;
                shown_grade = policy_grade;
                g = view.grades;
                ideal = view.ideal;
                length = view.length;
                n_ideal = view.n_ideal;
                all_judged = view.all_judged;
            }
            int code = codes[j];
            int64_t k = cutoffs[j];
            int64_t depth = (k >= 0 && k < length) ? k : length;
            double rel = rels[j], value = 0.0;
            switch (code) {
            case M_NDCG_EXP:
            case M_NDCG_LINEAR:
            case M_DCG_EXP:
            case M_DCG_LINEAR: {
                int linear = code == M_NDCG_LINEAR || code == M_DCG_LINEAR;
                double dcg = 0.0;
                for (int64_t r = 0; r < depth; r++) dcg += gain_of(g[r], linear) / discounts[r];
                if (code == M_DCG_EXP || code == M_DCG_LINEAR) {
                    value = dcg;
                    break;
                }
                int64_t ideal_depth = (k >= 0 && k < n_ideal) ? k : n_ideal;
                double idcg = 0.0;
                for (int64_t r = 0; r < ideal_depth; r++) idcg += gain_of(ideal[r], linear) / discounts[r];
                value = ratio(dcg, idcg);
                break;
            }
            case M_PRECISION:
            case M_RECALL:
            case M_HIT_RATE: {
                int64_t found = 0;
                for (int64_t r = 0; r < depth; r++) found += g[r] >= rel;
                if (code == M_PRECISION) {
                    value = k >= 0 ? (double)found / (double)k : ratio((double)found, (double)length);
                } else if (code == M_HIT_RATE) {
                    value = found > 0 ? 1.0 : 0.0;
                } else {
                    int64_t total = 0;
                    for (int64_t r = 0; r < n_ideal; r++) total += ideal[r] >= rel;
                    value = ratio((double)found, (double)total);
                }
                break;
            }
            case M_MRR: {
                for (int64_t r = 0; r < depth; r++) {
                    if (g[r] >= rel) {
                        value = 1.0 / ((double)r + 1.0);
                        break;
                    }
                }
                break;
            }
            case M_MAP: {
                int64_t total = 0, hits = 0;
                for (int64_t r = 0; r < n_ideal; r++) total += ideal[r] >= rel;
                double summed = 0.0;
                for (int64_t r = 0; r < depth; r++) {
                    if (g[r] >= rel) {
                        hits++;
                        summed += (double)hits / ((double)r + 1.0);
                    }
                }
                value = ratio(summed, (double)total);
                break;
            }
            case M_R_PRECISION: {
                int64_t total = 0, found = 0;
                for (int64_t r = 0; r < n_ideal; r++) total += ideal[r] >= rel;
                int64_t top = total < length ? total : length;
                for (int64_t r = 0; r < top; r++) found += g[r] >= rel;
                value = ratio((double)found, (double)total);
                break;
            }
            case M_JUDGED: {
                int64_t labeled = all_judged ? depth : 0;
                for (int64_t r = 0; r < depth && !all_judged; r++) labeled += judged_here[r] != 0;
                value = ratio((double)labeled, (double)depth);
                break;
            }
            }
            out[j * n + q] = value;
        }
    }
    Py_END_ALLOW_THREADS
    free(own_grades);
    free(own_ideal);
    release(bufs, n_bufs);
    Py_RETURN_NONE;
}

/* hash_strings(offsets, data, count, wide, out): out[i] = the 64-bit polynomial hash of string i
 * of an Arrow string column (64-bit offsets when wide): h = h * 1099511628211 + (byte + 1) over
 * its bytes, plus its length times 0x9E3779B97F4A7C15, all mod 2^64. The same function as the
 * numpy one in store/columns.py (string_hashes), which runs without the extension. */
static PyObject *hash_strings(PyObject *self, PyObject *args) {
    PyObject *offsets_obj, *data_obj, *out_obj;
    Py_ssize_t count;
    int wide;
    if (!PyArg_ParseTuple(args, "OOnpO", &offsets_obj, &data_obj, &count, &wide, &out_obj))
        return NULL;
    Py_buffer offsets, data, out;
    if (PyObject_GetBuffer(offsets_obj, &offsets, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&offsets);
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&offsets);
        PyBuffer_Release(&data);
        return NULL;
    }
    size_t width = wide ? 8 : 4;
    int bad = count < 0 || (size_t)offsets.len < ((size_t)count + 1) * width ||
              (size_t)out.len < (size_t)count * 8;
    const uint8_t *at = offsets.buf;
    if (!bad && !arrow_offsets_inside(at, wide, count, data.len)) bad = 1;
    if (!bad) {
        Py_BEGIN_ALLOW_THREADS
        const uint8_t *bytes = data.buf;
        uint64_t *hashes = out.buf;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t start = arrow_offset(at, wide, i), stop = arrow_offset(at, wide, i + 1);
            uint64_t h = 0;
            for (int64_t j = start; j < stop; j++) h = h * 1099511628211ull + (uint64_t)bytes[j] + 1u;
            uint64_t length = stop > start ? (uint64_t)(stop - start) : 0u;
            hashes[i] = h + length * 0x9E3779B97F4A7C15ull;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "hash_strings: buffers too short or offsets outside");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The separators of a span, found 16 bytes at a time where SSE2 is there (every x86-64), else a
 * byte at a time. IDs are a few bytes long: memchr's call per ID cost more than the work. */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    uint8_t *bytes;        /* the IDs' bytes, written at bytes[written] */
    const uint8_t *bytes_end; /* the end of the allocation, 16 bytes of slack past the IDs */
    char *offsets;         /* value offsets, 32- or 64-bit */
    int wide;
    int64_t written, piece;
} Cut;

static inline void put_piece(Cut *cut, const uint8_t *from, const uint8_t *until,
                             const uint8_t *data_end) {
    size_t size = (size_t)(until - from);
    if (cut->wide) memcpy(cut->offsets + cut->piece * 8, &cut->written, 8);
    else {
        int32_t narrow = (int32_t)cut->written;
        memcpy(cut->offsets + cut->piece * 4, &narrow, 4);
    }
    uint8_t *to = cut->bytes + cut->written;
    /* A short ID moves as one 16-byte copy (the next ID overwrites what ran past it). */
    if (size <= 16 && data_end - from >= 16 && cut->bytes_end - to >= 16) memcpy(to, from, 16);
    else memcpy(to, from, size);
    cut->written += (int64_t)size;
    cut->piece++;
}

/* The pieces of one row's text, in order, while they number at most `most` (at least 1): the
 * number of pieces, or -1 (what was written of the row is to be dropped) at a separator that
 * would make more. */
static int64_t cut_row(Cut *cut, const uint8_t *p, const uint8_t *end, const uint8_t *data_end,
                       int64_t most) {
    const uint8_t *start = p;
    int64_t pieces = 0;
#if defined(__SSE2__)
    const __m128i separator = _mm_set1_epi8(0x1f);
    for (; end - p >= 16; p += 16) {
        unsigned mask = (unsigned)_mm_movemask_epi8(
            _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), separator));
        while (mask) {
            if (++pieces >= most) return -1; /* this separator's piece and the last: too many */
            const uint8_t *at = p + __builtin_ctz(mask);
            put_piece(cut, start, at, data_end);
            start = at + 1;
            mask &= mask - 1;
        }
    }
#endif
    for (; p < end; p++) {
        if (*p == 0x1f) {
            if (++pieces >= most) return -1;
            put_piece(cut, start, p, data_end);
            start = p + 1;
        }
    }
    put_piece(cut, start, end, data_end);
    return pieces + 1;
}

/* cut_rankings(offsets, data, count, wide, valid, lengths)
 *     -> (list_offsets, value_offsets, values, unread)
 *
 * PostgreSQL's rankings as they travel (store/columns.py): each row one text, its IDs joined by
 * U+001F, beside the array's length. Row i is the string offsets[i]..offsets[i + 1] of `data`
 * (64-bit offsets when `wide`); valid[i] == 0 marks a null text, lengths[i] < 0 a null length. A
 * row is read when its text cuts into exactly lengths[i] pieces (an empty text of length 0 is an
 * empty ranking); any other row is unread (unread[i] = 1) and holds no IDs, for the validator.
 * The result is an Arrow list column's buffers, the IDs copied out without their separators:
 * 32-bit list and value offsets, or 64-bit ones when `wide`. (pyarrow's split_pattern appended
 * each piece through a builder, a third of a store read's client time.) */
static PyObject *cut_rankings(PyObject *self, PyObject *args) {
    PyObject *offsets_obj, *data_obj, *valid_obj, *lengths_obj;
    Py_ssize_t count;
    int wide;
    if (!PyArg_ParseTuple(args, "OOnpOO", &offsets_obj, &data_obj, &count, &wide, &valid_obj,
                          &lengths_obj))
        return NULL;
    Buf bufs[4];
    static const char *names[4] = {"offsets", "data", "valid", "lengths"};
    PyObject *objs[4] = {offsets_obj, data_obj, valid_obj, lengths_obj};
    static const Py_ssize_t sizes[4] = {1, 1, 1, 8};
    if (get_buffers(objs, bufs, 4, sizes, names, 4) < 0) return NULL;
    const uint8_t *at = DATA(bufs[0], uint8_t);
    const uint8_t *data = DATA(bufs[1], uint8_t);
    const uint8_t *valid = DATA(bufs[2], uint8_t);
    const int64_t *lengths = DATA(bufs[3], int64_t);
    size_t width = wide ? 8 : 4;
    if (count < 0 || (size_t)bufs[0].view.len < ((size_t)count + 1) * width ||
        COUNT(bufs[2], uint8_t) < (size_t)count || COUNT(bufs[3], int64_t) < (size_t)count ||
        !arrow_offsets_inside(at, wide, count, bufs[1].view.len)) {
        release(bufs, 4);
        PyErr_SetString(PyExc_ValueError, "cut_rankings: buffers too short or offsets outside");
        return NULL;
    }
    int64_t *kept = malloc(((size_t)count + 1) * sizeof(int64_t));
    PyObject *unread_obj = PyBytes_FromStringAndSize(NULL, count);
    if (kept == NULL || unread_obj == NULL) {
        free(kept);
        Py_XDECREF(unread_obj);
        release(bufs, 4);
        return PyErr_NoMemory();
    }
    uint8_t *unread = (uint8_t *)PyBytes_AS_STRING(unread_obj);
    int64_t total_pieces = 0, total_bytes = 0;
    /* Room for the most the rows can hold: their lengths' pieces, their texts' bytes. One pass
     * then cuts each row, dropping what it wrote of a row whose pieces do not number its
     * length (the texts are read once: the cut was a fifth of a store read's reading thread). */
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t start = arrow_offset(at, wide, i), stop = arrow_offset(at, wide, i + 1);
        kept[i] = valid[i] && stop >= start && lengths[i] > 0;
        if (kept[i]) {
            total_pieces += lengths[i];
            total_bytes += stop - start;
        }
    }
    size_t list_width = wide ? 8 : 4;
    char *list_out = NULL, *value_out = NULL, *bytes_out = NULL;
    PyObject *list_obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(((size_t)count + 1) * list_width));
    PyObject *value_obj =
        PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(((size_t)total_pieces + 1) * list_width));
    PyObject *bytes_obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total_bytes + 16);
    if (!wide && (total_pieces > INT32_MAX || total_bytes > INT32_MAX)) {
        /* cannot happen for the bytes: the pieces' are fewer than the text's, which 32 bits
         * held; the lengths are the server's */
        Py_XDECREF(list_obj);
        list_obj = NULL;
        PyErr_SetString(PyExc_OverflowError, "cut_rankings: 32-bit offsets overflow");
    }
    if (list_obj == NULL || value_obj == NULL || bytes_obj == NULL) {
        free(kept);
        Py_DECREF(unread_obj);
        Py_XDECREF(list_obj);
        Py_XDECREF(value_obj);
        Py_XDECREF(bytes_obj);
        release(bufs, 4);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    list_out = PyBytes_AS_STRING(list_obj);
    value_out = PyBytes_AS_STRING(value_obj);
    bytes_out = PyBytes_AS_STRING(bytes_obj);
    int64_t pieces_kept = 0;
    Py_BEGIN_ALLOW_THREADS
    Cut cut = {(uint8_t *)bytes_out, (const uint8_t *)bytes_out + total_bytes + 16, value_out, wide,
               0, 0};
    const uint8_t *data_end = data + bufs[1].view.len;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (wide) memcpy(list_out + i * 8, &cut.piece, 8);
        else {
            int32_t narrow = (int32_t)cut.piece;
            memcpy(list_out + i * 4, &narrow, 4);
        }
        int64_t start = arrow_offset(at, wide, i), stop = arrow_offset(at, wide, i + 1);
        if (!kept[i]) {
            /* No text, no length, or a length of 0: an empty ranking when the text is empty. */
            unread[i] = (uint8_t)!(valid[i] && lengths[i] == 0 && stop == start);
            continue;
        }
        int64_t piece = cut.piece, written = cut.written;
        if (cut_row(&cut, data + start, data + stop, data_end, lengths[i]) != lengths[i]) {
            cut.piece = piece; /* pieces short of the length, or more: the row is unread */
            cut.written = written;
            unread[i] = 1;
        } else unread[i] = 0;
    }
    int64_t piece = cut.piece, written = cut.written;
    if (wide) {
        memcpy(list_out + count * 8, &piece, 8);
        memcpy(value_out + piece * 8, &written, 8);
    } else {
        int32_t narrow = (int32_t)piece, narrow_bytes = (int32_t)written;
        memcpy(list_out + count * 4, &narrow, 4);
        memcpy(value_out + piece * 4, &narrow_bytes, 4);
    }
    pieces_kept = piece;
    Py_END_ALLOW_THREADS
    /* The value offsets as many as the pieces kept (the caller counts them by the size). */
    if (_PyBytes_Resize(&value_obj, (Py_ssize_t)(((size_t)pieces_kept + 1) * list_width)) < 0) {
        free(kept);
        Py_DECREF(unread_obj);
        Py_DECREF(list_obj);
        Py_DECREF(bytes_obj);
        release(bufs, 4);
        return NULL;
    }
    free(kept);
    release(bufs, 4);
    return Py_BuildValue("(NNNN)", list_obj, value_obj, bytes_obj, unread_obj);
}

/* qrels_columns(data, max_line) -> (bad_line, query_offsets, query_bytes, document_offsets,
 *                                   document_bytes, grade_offsets, grade_bytes)
 *
 * A TREC qrels file in one buffer (io/trec.py: its BOM removed, ending in a newline, holding no
 * white space other than space, tab, CR and LF: the caller checks). Each line's columns are the
 * runs of other bytes; a line with none is blank, and any other must have four (qid, iteration,
 * docno, relevance). Columns 1, 3 and 4 come out as Arrow large_string buffers. bad_line is 0,
 * or the number of the first line that has another count of columns or is longer than max_line
 * bytes with its newline (the caller then reads the file line by line, to explain it). */
static int is_qrels_space(uint8_t byte) {
    return byte == ' ' || byte == '\t' || byte == '\r' || byte == '\n';
}

typedef struct {
    const uint8_t *start[4];
    const uint8_t *stop[4];
} QrelsLine;

/* The columns of the line data[at..newline]; returns how many (5 for more than four). */
static int qrels_line(const uint8_t *p, const uint8_t *end, QrelsLine *line) {
    int found = 0;
    while (p < end) {
        while (p < end && is_qrels_space(*p)) p++;
        if (p == end) break;
        const uint8_t *start = p;
        while (p < end && !is_qrels_space(*p)) p++;
        if (found == 4) return 5;
        line->start[found] = start;
        line->stop[found] = p;
        found++;
    }
    return found;
}

static PyObject *qrels_columns(PyObject *self, PyObject *args) {
    PyObject *data_obj;
    Py_ssize_t max_line;
    if (!PyArg_ParseTuple(args, "On", &data_obj, &max_line)) return NULL;
    Buf bufs[1];
    static const char *names[1] = {"data"};
    PyObject *objs[1] = {data_obj};
    static const Py_ssize_t sizes[1] = {1};
    if (get_buffers(objs, bufs, 1, sizes, names, 1) < 0) return NULL;
    const uint8_t *data = DATA(bufs[0], uint8_t);
    const uint8_t *end = data + bufs[0].view.len;
    static const int wanted[3] = {0, 2, 3};
    int64_t rows = 0, bytes[3] = {0, 0, 0};
    Py_ssize_t bad_line = 0, number = 0;
    QrelsLine line;
    /* First pass: check every line, and count the rows and each column's bytes. */
    Py_BEGIN_ALLOW_THREADS
    for (const uint8_t *p = data; p < end;) {
        const uint8_t *newline = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop = newline ? newline : end;
        number++;
        int found = qrels_line(p, stop, &line);
        if ((stop - p) + 1 > max_line || (found != 0 && found != 4)) {
            bad_line = number;
            break;
        }
        if (found == 4) {
            rows++;
            for (int c = 0; c < 3; c++) bytes[c] += line.stop[wanted[c]] - line.start[wanted[c]];
        }
        p = stop + 1;
    }
    Py_END_ALLOW_THREADS
    if (bad_line) {
        release(bufs, 1);
        return Py_BuildValue("(nOOOOOO)", bad_line, Py_None, Py_None, Py_None, Py_None, Py_None,
                             Py_None);
    }
    PyObject *out[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    for (int c = 0; c < 3; c++) {
        out[2 * c] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((rows + 1) * 8));
        out[2 * c + 1] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bytes[c] + 1);
    }
    for (int i = 0; i < 6; i++) {
        if (out[i] == NULL) {
            for (int j = 0; j < 6; j++) Py_XDECREF(out[j]);
            release(bufs, 1);
            return PyErr_NoMemory();
        }
    }
    int64_t *offsets[3];
    uint8_t *values[3];
    for (int c = 0; c < 3; c++) {
        offsets[c] = (int64_t *)PyBytes_AS_STRING(out[2 * c]);
        values[c] = (uint8_t *)PyBytes_AS_STRING(out[2 * c + 1]);
    }
    /* Second pass: the three columns copied out. */
    Py_BEGIN_ALLOW_THREADS
    int64_t row = 0, written[3] = {0, 0, 0};
    for (const uint8_t *p = data; p < end;) {
        const uint8_t *newline = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop = newline ? newline : end;
        if (qrels_line(p, stop, &line) == 4) {
            for (int c = 0; c < 3; c++) {
                int64_t size = line.stop[wanted[c]] - line.start[wanted[c]];
                offsets[c][row] = written[c];
                memcpy(values[c] + written[c], line.start[wanted[c]], (size_t)size);
                written[c] += size;
            }
            row++;
        }
        p = stop + 1;
    }
    for (int c = 0; c < 3; c++) offsets[c][row] = written[c];
    Py_END_ALLOW_THREADS
    release(bufs, 1);
    return Py_BuildValue("(nNNNNNN)", bad_line, out[0], out[1], out[2], out[3], out[4], out[5]);
}

/* struct_entries(rows, fields) -> (offsets, field_of, grades)
 *
 * A struct column of grades (one field per document ID; io/grades.py's struct_as_map) as the
 * entries of a map, row by row and, within a row, fields in schema order: offsets (int64, rows + 1),
 * the field of each entry (int32) and its grade as a double. `fields` is a list of (validity or
 * None, offset, values, type) per field, each a child of the struct flattened (the struct's nulls
 * and slice applied), with type one of the codes below; a row holds an entry for a field where
 * that field's value is not null. The numbers are converted as Arrow's unsafe cast to float64
 * converts them. (numpy and Arrow calls field by field cost more in calls than in work at the
 * columnar path's chunk size: 256 fields took 4 s a million rows, this a tenth of that.) */
enum { T_INT8, T_INT16, T_INT32, T_INT64, T_UINT8, T_UINT16, T_UINT32, T_UINT64, T_FLOAT, T_DOUBLE };
static const int type_width[] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};

static inline double number_at(const uint8_t *values, int type, int64_t at) {
    switch (type) {
    case T_INT8: { int8_t v; memcpy(&v, values + at, 1); return (double)v; }
    case T_INT16: { int16_t v; memcpy(&v, values + at * 2, 2); return (double)v; }
    case T_INT32: { int32_t v; memcpy(&v, values + at * 4, 4); return (double)v; }
    case T_INT64: { int64_t v; memcpy(&v, values + at * 8, 8); return (double)v; }
    case T_UINT8: return (double)values[at];
    case T_UINT16: { uint16_t v; memcpy(&v, values + at * 2, 2); return (double)v; }
    case T_UINT32: { uint32_t v; memcpy(&v, values + at * 4, 4); return (double)v; }
    case T_UINT64: { uint64_t v; memcpy(&v, values + at * 8, 8); return (double)v; }
    case T_FLOAT: { float v; memcpy(&v, values + at * 4, 4); return (double)v; }
    default: { double v; memcpy(&v, values + at * 8, 8); return v; }
    }
}

/* `count` (1-64) validity bits from bit `at` of a bitmap of `size` bytes, the first in the lowest
 * bit; all set when there is no bitmap. Never reads past the bitmap. */
static inline uint64_t present_bits(const uint8_t *bits, size_t size, int64_t at, int count) {
    uint64_t mask = count == 64 ? ~0ull : ((1ull << count) - 1);
    if (bits == NULL) return mask;
    size_t first = (size_t)(at >> 3);
    int shift = (int)(at & 7);
    uint8_t window[16] = {0};
    size_t wanted = (size_t)(shift + count + 7) / 8;
    if (first < size) memcpy(window, bits + first, wanted < size - first ? wanted : size - first);
    uint64_t low, high = window[8];
    memcpy(&low, window, 8);
    uint64_t word = (low >> shift) | (shift ? high << (64 - shift) : 0);
    return word & mask;
}

static PyObject *struct_entries(PyObject *self, PyObject *args) {
    Py_ssize_t rows;
    PyObject *fields;
    if (!PyArg_ParseTuple(args, "nO!", &rows, &PyList_Type, &fields)) return NULL;
    Py_ssize_t width = PyList_GET_SIZE(fields);
    if (rows < 0 || width > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "struct_entries: bad sizes");
        return NULL;
    }
    Buf *bufs = calloc((size_t)(2 * width + 1), sizeof(Buf));
    int64_t *bit_offsets = calloc((size_t)width + 1, sizeof(int64_t));
    int *types = calloc((size_t)width + 1, sizeof(int));
    int8_t *has_validity = calloc((size_t)width + 1, 1);
    PyObject *result = NULL, *offsets_obj = NULL, *field_obj = NULL, *grades_obj = NULL;
    if (bufs == NULL || bit_offsets == NULL || types == NULL || has_validity == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t f = 0; f < width; f++) {
        PyObject *item = PyList_GET_ITEM(fields, f), *validity, *values;
        Py_ssize_t offset;
        int type;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OnOi", &validity, &offset, &values, &type))
            goto done;
        if (type < T_INT8 || type > T_DOUBLE || offset < 0) {
            PyErr_SetString(PyExc_ValueError, "struct_entries: bad field");
            goto done;
        }
        types[f] = type;
        bit_offsets[f] = offset;
        if (validity != Py_None) {
            if (get_buffer(validity, &bufs[2 * f], 0, 1, "validity") < 0) goto done;
            has_validity[f] = 1;
            if ((size_t)bufs[2 * f].view.len * 8 < (size_t)(offset + rows)) {
                PyErr_SetString(PyExc_ValueError, "struct_entries: validity too short");
                goto done;
            }
        }
        if (get_buffer(values, &bufs[2 * f + 1], 0, 1, "values") < 0) goto done;
        if ((size_t)bufs[2 * f + 1].view.len < (size_t)(offset + rows) * (size_t)type_width[type]) {
            PyErr_SetString(PyExc_ValueError, "struct_entries: values too short");
            goto done;
        }
    }
    /* First pass: entries per row. */
    offsets_obj = PyBytes_FromStringAndSize(NULL, (rows + 1) * 8);
    if (offsets_obj == NULL) goto done;
    int64_t *offsets = (int64_t *)PyBytes_AS_STRING(offsets_obj);
    Py_BEGIN_ALLOW_THREADS
    memset(offsets, 0, (size_t)(rows + 1) * 8);
    for (Py_ssize_t f = 0; f < width; f++) {
        const uint8_t *bits = has_validity[f] ? bufs[2 * f].view.buf : NULL;
        size_t size = has_validity[f] ? (size_t)bufs[2 * f].view.len : 0;
        for (Py_ssize_t r = 0; r < rows; r += 64) {
            int count = rows - r < 64 ? (int)(rows - r) : 64;
            uint64_t word = present_bits(bits, size, bit_offsets[f] + r, count);
            for (; word; word &= word - 1) offsets[r + __builtin_ctzll(word) + 1]++;
        }
    }
    for (Py_ssize_t r = 0; r < rows; r++) offsets[r + 1] += offsets[r];
    Py_END_ALLOW_THREADS
    int64_t total = offsets[rows];
    field_obj = PyBytes_FromStringAndSize(NULL, total * 4);
    grades_obj = PyBytes_FromStringAndSize(NULL, total * 8);
    int64_t *free_at = malloc((size_t)(rows + 1) * sizeof(int64_t));
    if (field_obj == NULL || grades_obj == NULL || free_at == NULL) {
        free(free_at);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int32_t *field_of = (int32_t *)PyBytes_AS_STRING(field_obj);
    double *grades = (double *)PyBytes_AS_STRING(grades_obj);
    /* Second pass: fields in order, each value at the next free place of its row. */
    Py_BEGIN_ALLOW_THREADS
    memcpy(free_at, offsets, (size_t)rows * sizeof(int64_t));
    for (Py_ssize_t f = 0; f < width; f++) {
        const uint8_t *bits = has_validity[f] ? bufs[2 * f].view.buf : NULL;
        size_t size = has_validity[f] ? (size_t)bufs[2 * f].view.len : 0;
        const uint8_t *values = bufs[2 * f + 1].view.buf;
        int64_t base = bit_offsets[f];
        int type = types[f];
        for (Py_ssize_t r = 0; r < rows; r += 64) {
            int count = rows - r < 64 ? (int)(rows - r) : 64;
            uint64_t word = present_bits(bits, size, base + r, count);
            for (; word; word &= word - 1) {
                int64_t row = r + __builtin_ctzll(word);
                int64_t place = free_at[row]++;
                field_of[place] = (int32_t)f;
                grades[place] = number_at(values, type, base + row);
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(free_at);
    result = Py_BuildValue("(OOO)", offsets_obj, field_obj, grades_obj);
done:
    if (bufs != NULL) {
        for (Py_ssize_t i = 0; i < 2 * width; i++)
            if (bufs[i].held) PyBuffer_Release(&bufs[i].view);
    }
    free(bufs);
    free(bit_offsets);
    free(types);
    free(has_validity);
    Py_XDECREF(offsets_obj);
    Py_XDECREF(field_obj);
    Py_XDECREF(grades_obj);
    return result;
}

/* ------------------------------------------------------------------------------------------- */
/* Exact sums                                                                                   */

/* The parts of an exact sum of finite doubles: each value is +-M * 2**(b - 1074) with M an
 * integer below 2**53 and b in 0..2045 (its exponent bin; subnormals share bin 0 with the
 * smallest normals). M is split into 26-bit halves, and each bin sums its values' halves as
 * 64-bit integers, which stay exact for fewer than 2**36 values. `stats.exact_sum` combines the
 * bins as Python integers and rounds once; numpy's frexp, floor and two bincounts did the same
 * in ten passes over the values, a twentieth of an evaluation's time at a million queries. */
#define EXACT_BINS 2046

static PyObject *exact_bins(PyObject *self, PyObject *args) {
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO:exact_bins", &objs[0], &objs[1], &objs[2])) return NULL;
    static const char *names[3] = {"values", "high", "low"};
    static const Py_ssize_t sizes[3] = {8, 8, 8};
    Buf bufs[3];
    if (get_buffers(objs, bufs, 3, sizes, names, 1) < 0) return NULL;
    if (COUNT(bufs[1], int64_t) < EXACT_BINS || COUNT(bufs[2], int64_t) < EXACT_BINS) {
        release(bufs, 3);
        PyErr_SetString(PyExc_ValueError, "exact_bins: the bins need 2046 entries each");
        return NULL;
    }
    const uint64_t *values = DATA(bufs[0], uint64_t);
    size_t n = COUNT(bufs[0], uint64_t);
    int64_t *high = DATA(bufs[1], int64_t), *low = DATA(bufs[2], int64_t);
    int finite = 1;
    Py_BEGIN_ALLOW_THREADS
    memset(high, 0, EXACT_BINS * sizeof(int64_t));
    memset(low, 0, EXACT_BINS * sizeof(int64_t));
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = values[i];
        unsigned biased = (unsigned)((bits >> 52) & 0x7FF);
        if (biased == 0x7FF) { finite = 0; break; }
        int64_t mantissa = (int64_t)(bits & ((UINT64_C(1) << 52) - 1));
        if (biased) mantissa |= INT64_C(1) << 52;
        if (!mantissa) continue;
        unsigned bin = biased ? biased - 1 : 0;
        int64_t upper = mantissa >> 26, lower = mantissa & ((INT64_C(1) << 26) - 1);
        if (bits >> 63) {
            high[bin] -= upper;
            low[bin] -= lower;
        } else {
            high[bin] += upper;
            low[bin] += lower;
        }
    }
    Py_END_ALLOW_THREADS
    release(bufs, 3);
    return PyBool_FromLong(finite);
}

static PyMethodDef methods[] = {
    {"join", join, METH_VARARGS, "Join rankings with labels into RankedBatch arrays."},
    {"score", score, METH_VARARGS, "Score a RankedBatch with the compiled metric twins."},
    {"hash_strings", hash_strings, METH_VARARGS, "A 64-bit hash of each string of a column."},
    {"struct_entries", struct_entries, METH_VARARGS,
     "A struct column of grades as a map's entries, row by row."},
    {"exact_bins", exact_bins, METH_VARARGS,
     "The per-exponent integer parts of an exact sum of doubles."},
    {"cut_rankings", cut_rankings, METH_VARARGS,
     "Separator-joined rankings cut into an Arrow list column's buffers."},
    {"qrels_columns", qrels_columns, METH_VARARGS,
     "A qrels file's query, document and grade columns as Arrow string buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "rankgate._join", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__join(void) { return PyModule_Create(&module); }
