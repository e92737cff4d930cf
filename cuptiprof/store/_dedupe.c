/* Distinct rows of integer columns: a code per row, in one pass over the rows.
 *
 * distinct(n, columns, codes) -> (k, reps), or None when it declines
 *
 * n:       the number of rows.
 * columns: a sequence of columns, each (itemsize, signed, chunks): itemsize 1, 2, 4 or 8 bytes
 *          (native byte order), signed true or false, chunks a sequence of Arrow chunks, read
 *          in order and n rows in all, each (values, validity, offset, length, null_count):
 *          values and validity objects with the buffer protocol (validity: an Arrow bitmap, LSB
 *          first; may be None when null_count is 0, and both may be None when every value is
 *          NULL), offset the index of the chunk's first value in both. Chunk boundaries need
 *          not line up across columns.
 * codes:   a writable C-contiguous buffer of n int32: receives each row's code, 0..k-1, numbered
 *          in order of first appearance. NULL is a value of its own.
 * reps:    bytes of k native int64: the first row of each code.
 * how:     0 (the default) as described below; 1 the exact way only; 2 guessed ranges from the
 *          first row only (tests: widening).
 * It declines (None) only for n >= 2**31 rows or, where rows cannot be keyed in 63 bits, more
 * than 64 varying columns.
 *
 * Rows become exact integer keys, renumbered through a lookup table (small key spaces: one
 * table of LUT_MAX entries kept between calls, of which only the used entries are reset) or a
 * small open-addressing hash table of keys (it grows with k). Rows go through in blocks: the
 * block's keys are filled in one column at a time (a tight loop each, reading the chunk
 * directly), then looked up row by row. The GIL is released while looping; the codes buffer is
 * the only memory that grows with n (the table grows with k).
 *
 * Keys, the usual way (n >= GUESS_MIN): the columns are read once, with ranges guessed. A sample
 * of rows (SAMPLE_RUNS runs spread over the rows) gives each column's range. A column that
 * holds one value there (and has no NULLs) is only checked against it, with no part in the key;
 * each other column gets a window of 2**bits values around its sampled range (with room to
 * spare where the bits allow) and one more bit for NULL when it has NULLs, and the windows are
 * packed into the two 32-bit halves of the key (into 18 bits for the lookup table when they are
 * small), so that a block's key is built with 32-bit arithmetic: a half |= (value - window
 * start) << shift. Every value is checked against its window as the key is built. When a block
 * holds a value outside its column's window, the windows are widened to cover the rows seen so
 * far (the first row of each code), that block and the sample, the keys of the codes so far
 * are recomputed and the block goes again (at most MAX_WIDEN times). When the windows do not fit
 * in 64 bits, or after that many widenings, and for small inputs, the rows go through the exact
 * way: a min/max pass per column, then a mixed-radix key over the columns that vary (value -
 * min, NULL = max - min + 1), or, when that does not fit in 63 bits, a hash of the row compared
 * value by value with a copy of each code's first row.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API_VERSION 1

#define BLOCK 2048            /* rows filled in column by column, then looked up */
#define LUT_BITS 18
#define LUT_MAX ((uint64_t)1 << LUT_BITS)
#define MAX_VARYING 64
#define GUESS_MIN 4096        /* fewer rows: the exact way (two passes over cached columns) */
#define SAMPLE_RUNS 64
#define SAMPLE_LEN 64         /* at most; n / 1024 for fewer rows */
#define SPARE_MAX 12          /* at most this many bits of room per column beyond its range */
#define MAX_WIDEN 8
#define GOLD 0x9E3779B97F4A7C15ULL

#if defined(__GNUC__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#endif

/* The column loops are also built for AVX2 where the compiler can pick the version at load
 * time (GCC, x86-64, glibc: an ifunc). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    !defined(DEDUPE_NO_CLONES)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* kinds: index = 2 * log2(itemsize) + signed */
enum { K_U8, K_I8, K_U16, K_I16, K_U32, K_I32, K_U64, K_I64 };

/* The body of a switch on a column's kind: M(T, W) per kind, T the element type (U64T for
 * unsigned 64-bit values: uint64_t, or int64_t where any order will do) and W its word
 * (uint32_t up to 32 bits, uint64_t above). Each M ends its case (break or return). */
#define CASE_PER_KIND(M, U64T)                                                                   \
    case K_U8: M(uint8_t, uint32_t)                                                              \
    case K_I8: M(int8_t, uint32_t)                                                               \
    case K_U16: M(uint16_t, uint32_t)                                                            \
    case K_I16: M(int16_t, uint32_t)                                                             \
    case K_U32: M(uint32_t, uint32_t)                                                            \
    case K_I32: M(int32_t, uint32_t)                                                             \
    case K_U64: M(U64T, uint64_t)                                                                \
    default: M(int64_t, uint64_t)

typedef struct {
    const char *data;     /* the chunk's first value (NULL when every value is NULL) */
    const uint8_t *bits;  /* validity bitmap (NULL when no value is NULL) */
    Py_ssize_t bitoff;    /* bit of the chunk's first value */
    Py_ssize_t len, nulls;
    Py_ssize_t start;     /* the row of its first value */
} chunk_t;

typedef struct {
    int kind;
    chunk_t *chunks;
    Py_ssize_t nchunks;
    Py_buffer *views;     /* acquired buffers, released at the end */
    Py_ssize_t nviews;
    Py_ssize_t nulls;     /* in all chunks */
    int64_t lo, hi;       /* over the valid values (exact pass) */
    uint64_t nullcode;    /* exact keys: hi - lo + 1 */
    uint64_t radix;       /* exact keys: the column's weight */
    int64_t glo, ghi;     /* guessed keys: the range the window covers (sample, widened) */
    uint64_t base;        /* guessed keys: the window's first value */
    int bits, shift;      /* guessed keys: window of 2**bits values at bit `shift` of a half */
    int half;             /* guessed keys: 0 low half of the key, 1 high, -1 checked only */
    uint32_t nullbit;     /* guessed keys: the half's NULL bit for this column (0: no NULLs) */
    Py_ssize_t ci, pos;   /* cursor: chunk, row within it */
} col_t;

/* value i of a chunk as int64 (unsigned 64-bit values reinterpreted: a bijection) */
static inline int64_t load(int kind, const char *p, Py_ssize_t i)
{
    switch (kind) {
    case K_U8: return ((const uint8_t *)p)[i];
    case K_I8: return ((const int8_t *)p)[i];
    case K_U16: return ((const uint16_t *)p)[i];
    case K_I16: return ((const int16_t *)p)[i];
    case K_U32: return ((const uint32_t *)p)[i];
    case K_I32: return ((const int32_t *)p)[i];
    case K_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static inline int bit(const uint8_t *bits, Py_ssize_t i)
{
    return (bits[i >> 3] >> (i & 7)) & 1;
}

/* ---- min/max ------------------------------------------------------------------------------- */
#define MINMAX_PLAIN(T, W)                                                                       \
    {                                                                                            \
        const T *p = (const T *)c->data;                                                         \
        T a = p[i0], b = p[i0];                                                                  \
        for (Py_ssize_t i = i0 + 1; i < i1; i++) {                                               \
            a = p[i] < a ? p[i] : a;                                                             \
            b = p[i] > b ? p[i] : b;                                                             \
        }                                                                                        \
        lo = (int64_t)a < lo ? (int64_t)a : lo;                                                  \
        hi = (int64_t)b > hi ? (int64_t)b : hi;                                                  \
    }                                                                                            \
    break;

/* *plo, *phi widened to the valid values of rows i0 .. i1 - 1 (i1 > i0) of chunk c. */
CLONES static void range_minmax(const col_t *col, const chunk_t *c, Py_ssize_t i0, Py_ssize_t i1,
                         int64_t *plo, int64_t *phi)
{
    int64_t lo = *plo, hi = *phi;
    if (c->nulls == c->len)
        return;
    if (c->nulls == 0) {
        switch (col->kind) {
        CASE_PER_KIND(MINMAX_PLAIN, int64_t) /* U64 as int64: any order will do */
        }
    } else {
        for (Py_ssize_t i = i0; i < i1; i++) {
            if (bit(c->bits, c->bitoff + i)) {
                int64_t v = load(col->kind, c->data, i);
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
        }
    }
    *plo = lo;
    *phi = hi;
}

/* The exact range of a column's valid values (lo, hi; the column has one). */
static void minmax(col_t *col)
{
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t ch = 0; ch < col->nchunks; ch++)
        range_minmax(col, &col->chunks[ch], 0, col->chunks[ch].len, &lo, &hi);
    col->lo = lo;
    col->hi = hi;
    col->nullcode = (uint64_t)hi - (uint64_t)lo + 1;
}

/* The range of a sample of a column's valid values (glo, ghi; glo > ghi when it has none):
 * SAMPLE_RUNS runs of `len` rows spread over the rows. */
static void sample_minmax(col_t *col, Py_ssize_t n, Py_ssize_t len)
{
    Py_ssize_t ci = 0;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t s = 0; s < SAMPLE_RUNS; s++) {
        Py_ssize_t r = (n - len) * s / (SAMPLE_RUNS - 1), end = r + len;
        while (r < end) {
            while (r >= col->chunks[ci].start + col->chunks[ci].len)
                ci++;
            const chunk_t *c = &col->chunks[ci];
            Py_ssize_t i1 = end - c->start < c->len ? end - c->start : c->len;
            range_minmax(col, c, r - c->start, i1, &lo, &hi);
            r = c->start + i1;
        }
    }
    col->glo = lo;
    col->ghi = hi;
}

/* Row `row` of a column: 1 and *v, or 0 for NULL. */
static int value_at(const col_t *col, Py_ssize_t row, int64_t *v)
{
    Py_ssize_t a = 0, b = col->nchunks - 1;
    while (a < b) {  /* the last chunk starting at or before row */
        Py_ssize_t mid = (a + b + 1) / 2;
        if (col->chunks[mid].start <= row)
            a = mid;
        else
            b = mid - 1;
    }
    const chunk_t *c = &col->chunks[a];
    Py_ssize_t i = row - c->start;
    if (c->nulls == c->len || (c->nulls && !bit(c->bits, c->bitoff + i)))
        return 0;
    *v = load(col->kind, c->data, i);
    return 1;
}

static inline int bit_length(uint64_t x)
{
#if defined(__GNUC__)
    return x ? 64 - __builtin_clzll(x) : 0;
#else
    int b = 0;
    while (x) {
        b++;
        x >>= 1;
    }
    return b;
#endif
}

/* Windows for guessed keys over the columns `var` (none all NULL) from their ranges glo..ghi:
 * 1 when keys fit the lookup table (the low half, LUT_BITS), 0 when they take the two halves,
 * -1 when they do not fit. */
static int plan_guess(col_t **var, int m)
{
    int need[MAX_VARYING], order[MAX_VARYING], nk = 0, total = 0;
    int64_t lo[MAX_VARYING];
    uint64_t span[MAX_VARYING];
    if (m > MAX_VARYING)
        return -1;
    for (int j = 0; j < m; j++) {
        col_t *c = var[j];
        lo[j] = c->glo <= c->ghi ? c->glo : 0;  /* no value seen yet: a guess around 0 */
        uint64_t d = span[j] = c->glo <= c->ghi ? (uint64_t)c->ghi - (uint64_t)c->glo : 0;
        if (d >= ((uint64_t)1 << 31))
            return -1;
        c->bits = bit_length(d);
        c->half = -1;
        c->shift = 0;
        c->nullbit = 0;
        c->base = (uint64_t)lo[j];
        if (d == 0 && !c->nulls)
            continue;  /* checked only */
        need[j] = c->bits + (c->nulls ? 1 : 0);
        total += need[j];
        order[nk++] = j;
    }
    /* widest first */
    for (int a = 1; a < nk; a++)
        for (int b = a; b > 0 && need[order[b]] > need[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    int lut = total <= LUT_BITS - 4, room[2] = {lut ? LUT_BITS : 32, lut ? 0 : 32}, cnt[2] = {0, 0};
    for (int a = 0; a < nk; a++) {
        col_t *c = var[order[a]];
        int h = room[1] > room[0];
        if (need[order[a]] > room[h])
            return -1;
        c->half = h;
        room[h] -= need[order[a]];
        cnt[h]++;
    }
    int spare[2], shift[2] = {0, 0};
    for (int h = 0; h < 2; h++) {
        spare[h] = cnt[h] ? room[h] / cnt[h] : 0;
        spare[h] = spare[h] > SPARE_MAX ? SPARE_MAX : spare[h];
    }
    for (int a = 0; a < nk; a++) {
        int j = order[a];
        col_t *c = var[j];
        int h = c->half;
        c->bits = c->bits + spare[h] > 31 ? 31 : c->bits + spare[h];
        /* room below the range: a quarter of what is left (ids tend to grow) */
        c->base = (uint64_t)lo[j] - ((((uint64_t)1 << c->bits) - 1 - span[j]) / 4);
        c->shift = shift[h];
        c->nullbit = c->nulls ? (uint32_t)1 << (shift[h] + c->bits) : 0;
        shift[h] += c->bits + (c->nulls ? 1 : 0);
    }
    return lut;
}

/* ---- a block's key contributions of one column --------------------------------------------- */
/* Guessed keys: out[i] (=, first column of the half, or |=) (v - base) << shift (32-bit
 * arithmetic: exact, as v - base modulo 2**32 identifies v within a window of at most 2**31
 * values; 64-bit values are checked with 64 bits), NULL -> nullbit. A column checked only
 * leaves out alone. Returns nonzero when a value lies outside the column's window. */
#define GUESS_PLAIN(T, U)                                                                        \
    {                                                                                            \
        const T *p = (const T *)c->data + pos;                                                   \
        const U b = (U)base;                                                                     \
        U bad = 0;                                                                               \
        if (col->half < 0)                                                                       \
            for (Py_ssize_t i = 0; i < len; i++)                                                 \
                bad |= (U)p[i] ^ b;                                                              \
        else if (first)                                                                          \
            for (Py_ssize_t i = 0; i < len; i++) {                                               \
                U x = (U)p[i] - b;                                                               \
                bad |= x >> bits;                                                                \
                out[i] = (uint32_t)x << shift;                                                   \
            }                                                                                    \
        else                                                                                     \
            for (Py_ssize_t i = 0; i < len; i++) {                                               \
                U x = (U)p[i] - b;                                                               \
                bad |= x >> bits;                                                                \
                out[i] |= (uint32_t)x << shift;                                                  \
            }                                                                                    \
        return bad != 0;                                                                         \
    }

CLONES static int fill_guess(const col_t *col, Py_ssize_t len, uint32_t *out, int first)
{
    const chunk_t *c = &col->chunks[col->ci];
    const Py_ssize_t pos = col->pos;
    const uint64_t base = col->base;
    const int bits = col->bits, shift = col->shift;
    if (c->nulls == 0) {
        switch (col->kind) {
        CASE_PER_KIND(GUESS_PLAIN, uint64_t)
        }
    }
    if (c->nulls == c->len) {  /* a column with NULLs is never checked only */
        const uint32_t x = col->nullbit;
        for (Py_ssize_t i = 0; i < len; i++)
            out[i] = first ? x : out[i] | x;
        return 0;
    }
    uint64_t bad = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        uint32_t y;
        if (bit(c->bits, c->bitoff + pos + i)) {
            uint64_t x = (uint64_t)load(col->kind, c->data, pos + i) - base;
            if (col->kind < K_U64)
                x = (uint32_t)x;
            bad |= x >> bits;
            y = (uint32_t)x << shift;
        } else {
            y = col->nullbit;
        }
        out[i] = first ? y : out[i] | y;
    }
    return bad != 0;
}

/* A row's guessed key (its values lie in their windows). */
static uint64_t key_of_row(col_t **var, int m, Py_ssize_t row)
{
    uint32_t half[2] = {0, 0};
    for (int j = 0; j < m; j++) {
        const col_t *c = var[j];
        int64_t v;
        if (c->half < 0)
            continue;
        if (value_at(c, row, &v))
            half[c->half] |= (uint32_t)((uint64_t)v - c->base) << c->shift;
        else
            half[c->half] |= c->nullbit;
    }
    return half[0] | ((uint64_t)half[1] << 32);
}

/* Exact keys: out[i] (=, first column, or +=) (v - lo) * mul, NULL -> nullcode * mul. */
#define FILL_PLAIN(T, W)                                                                         \
    {                                                                                            \
        const T *p = (const T *)c->data + pos;                                                   \
        if (first)                                                                               \
            for (Py_ssize_t i = 0; i < len; i++)                                                 \
                out[i] = ((uint64_t)(int64_t)p[i] - lo) * mul;                                   \
        else                                                                                     \
            for (Py_ssize_t i = 0; i < len; i++)                                                 \
                out[i] += ((uint64_t)(int64_t)p[i] - lo) * mul;                                  \
    }                                                                                            \
    break;

CLONES static void fill_exact(const col_t *col, Py_ssize_t len, uint64_t *out, int first)
{
    const chunk_t *c = &col->chunks[col->ci];
    const Py_ssize_t pos = col->pos;
    const uint64_t lo = (uint64_t)col->lo, mul = col->radix;
    if (c->nulls == 0) {
        switch (col->kind) {
        CASE_PER_KIND(FILL_PLAIN, uint64_t)
        }
    } else if (c->nulls == c->len) {
        const uint64_t x = col->nullcode * mul;
        for (Py_ssize_t i = 0; i < len; i++)
            out[i] = first ? x : out[i] + x;
    } else {
        const uint64_t nx = col->nullcode * mul;
        for (Py_ssize_t i = 0; i < len; i++) {
            uint64_t x = bit(c->bits, c->bitoff + pos + i)
                ? ((uint64_t)load(col->kind, c->data, pos + i) - lo) * mul : nx;
            out[i] = first ? x : out[i] + x;
        }
    }
}

/* Row mode: values - lo (NULL -> 0) into vals[i * m + j], NULL flags into masks[i] (bit j). */
static void fill_row(const col_t *col, Py_ssize_t len, int j, int m, uint64_t *vals,
                     uint64_t *masks)
{
    const chunk_t *c = &col->chunks[col->ci];
    const Py_ssize_t pos = col->pos;
    const uint64_t lo = (uint64_t)col->lo, b = (uint64_t)1 << j;
    for (Py_ssize_t i = 0; i < len; i++) {
        int valid = c->nulls == 0 || (c->nulls != c->len && bit(c->bits, c->bitoff + pos + i));
        vals[i * m + j] = valid ? (uint64_t)load(col->kind, c->data, pos + i) - lo : 0;
        masks[i] = (j ? masks[i] : 0) | (valid ? 0 : b);
    }
}

static inline uint64_t mix(uint64_t h)
{
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    return h;
}

/* ---- per-code arrays and the hash table ---------------------------------------------------- */
typedef struct {
    int64_t *reps;        /* first row per code */
    uint64_t *ckeys;      /* the key (row mode: the hash) per code */
    uint64_t *cvals;      /* row mode: m values per code */
    uint64_t *cmasks;     /* row mode: NULL flags per code */
    Py_ssize_t k, cap;
    int m;
    /* open addressing: slot -> code + 1 (0: empty); the key is that code's ckeys entry (4-byte
     * slots: the table of a few hundred codes stays in L1) */
    int32_t *tab;
    uint64_t mask;
    int shift;
    /* the lookup table: code + 1 per key (0: unused), when the key space is small */
    int32_t *lut;
    int lut_own;          /* allocated for this call (the shared one was busy) */
    int lut_used;         /* the codes so far are the lookup table's */
} state_t;

/* Resize `ptr` to n elements, or return -1 from the caller (the old block stays valid). */
#define REGROW(ptr, n)                                                   \
    do {                                                                 \
        void *grown_ = realloc((ptr), (size_t)(n) * sizeof *(ptr));      \
        if (!grown_)                                                     \
            return -1;                                                   \
        (ptr) = grown_;                                                  \
    } while (0)

static int grow_codes(state_t *s, int rowmode)
{
    Py_ssize_t cap = s->cap ? s->cap * 2 : 256;
    REGROW(s->reps, cap);
    REGROW(s->ckeys, cap);
    if (rowmode) {
        REGROW(s->cvals, cap * s->m);
        REGROW(s->cmasks, cap);
    }
    s->cap = cap;
    return 0;
}

/* A key's first slot: the high half is folded into the low one first (keys made of two 32-bit
 * halves collided several times as often without). */
static inline uint64_t hash_key(uint64_t key, int shift)
{
    return ((key + (key >> 32) * 0x9E3779B1ULL) * GOLD) >> shift;
}

static inline uint64_t slot_of(const state_t *s, uint64_t key)
{
    return hash_key(key, s->shift);
}

/* Time to grow the table: more than 1/8 of a small one in use (fewer collisions while it
 * fits in L2), more than half of a large one. */
static inline int table_full(Py_ssize_t k, uint64_t mask)
{
    return (uint64_t)k * (mask < ((uint64_t)1 << 15) ? 8 : 2) > mask;
}

/* A table of 2**bits slots holding every code so far. */
static int table_build(state_t *s, int bits)
{
    size_t size = (size_t)1 << bits;
    int32_t *t = calloc(size, sizeof(int32_t));
    if (!t)
        return -1;
    free(s->tab);
    s->tab = t;
    s->mask = size - 1;
    s->shift = 64 - bits;
    for (Py_ssize_t c = 0; c < s->k; c++) {
        uint64_t h = slot_of(s, s->ckeys[c]);
        while (t[h])
            h = (h + 1) & s->mask;
        t[h] = (int32_t)c + 1;
    }
    return 0;
}

/* A new code for row `row` (key or hash `key`): -1 when out of memory. */
static inline Py_ssize_t new_code(state_t *s, uint64_t key, int64_t row, int rowmode)
{
    if (UNLIKELY(s->k == s->cap) && grow_codes(s, rowmode) < 0)
        return -1;
    s->reps[s->k] = row;
    s->ckeys[s->k] = key;
    return s->k++;
}

/* The shared lookup table (taken and given back with the GIL held). */
static int32_t *shared_lut;
static int lut_busy;

/* Reset the lookup table's entries of the codes so far. */
static void lut_clear(state_t *s)
{
    if (s->lut_used)
        for (Py_ssize_t c = 0; c < s->k; c++)
            s->lut[s->ckeys[c]] = 0;
    s->lut_used = 0;
}

/* Forget the codes found so far (a guess that failed). */
static void forget(state_t *s)
{
    lut_clear(s);
    s->k = s->cap = 0;
    free(s->reps);
    free(s->ckeys);
    s->reps = NULL;
    s->ckeys = NULL;
    free(s->tab);
    s->tab = NULL;
}

/* ---- the passes ------------------------------------------------------------------------------ */
static void rewind_cols(col_t **var, int m)
{
    for (int j = 0; j < m; j++)
        var[j]->ci = var[j]->pos = 0;
}

/* Rows in this block: up to BLOCK, none past the end of any column's chunk. */
static Py_ssize_t block_len(col_t **var, int m, Py_ssize_t left)
{
    Py_ssize_t len = left < BLOCK ? left : BLOCK;
    for (int j = 0; j < m; j++) {
        Py_ssize_t r = var[j]->chunks[var[j]->ci].len - var[j]->pos;
        len = r < len ? r : len;
    }
    return len;
}

static void advance(col_t **var, int m, Py_ssize_t len)
{
    for (int j = 0; j < m; j++) {
        col_t *c = var[j];
        c->pos += len;
        if (c->pos == c->chunks[c->ci].len && c->ci + 1 < c->nchunks) {
            c->ci++;
            c->pos = 0;
        }
    }
}

/* Keys to codes, by the lookup table or the hash table: 0, or -1 when out of memory.
 * KEY(i): the key of the block's row i. */
#define LOOKUP(KEY)                                                                              \
    if (use_lut) {                                                                               \
        int32_t *lut = s->lut;                                                                   \
        for (Py_ssize_t i = 0; i < len; i++) {                                                   \
            int32_t *e = &lut[KEY(i)];                                                           \
            int32_t c = *e - 1;                                                                  \
            if (UNLIKELY(c < 0)) {                                                               \
                Py_ssize_t nc = new_code(s, KEY(i), r + i, 0);                                   \
                if (nc < 0)                                                                      \
                    return -1;                                                                   \
                c = (int32_t)nc;                                                                 \
                *e = c + 1;                                                                      \
            }                                                                                    \
            codes[r + i] = c;                                                                    \
        }                                                                                        \
        return 0;                                                                                \
    }                                                                                            \
    int32_t *tab = s->tab;                                                                       \
    const uint64_t *ck = s->ckeys;                                                               \
    uint64_t mask = s->mask;                                                                     \
    int shift = s->shift;                                                                        \
    for (Py_ssize_t i = 0; i < len; i++) {                                                       \
        const uint64_t kv = KEY(i);                                                              \
        uint64_t h = hash_key(kv, shift);                                                        \
        int32_t c;                                                                               \
        for (;;) {                                                                               \
            c = tab[h] - 1;                                                                      \
            if (LIKELY(c >= 0 && ck[c] == kv))                                                   \
                break;                                                                           \
            if (c < 0) {                                                                         \
                Py_ssize_t nc = new_code(s, kv, r + i, 0);                                       \
                if (nc < 0)                                                                      \
                    return -1;                                                                   \
                c = (int32_t)nc;                                                                 \
                tab[h] = c + 1;                                                                  \
                ck = s->ckeys;                                                                   \
                if (UNLIKELY(table_full(s->k, mask))) {                                          \
                    if (table_build(s, 65 - shift) < 0)                                          \
                        return -1;                                                               \
                    tab = s->tab;                                                                \
                    mask = s->mask;                                                              \
                    shift = s->shift;                                                            \
                }                                                                                \
                break;                                                                           \
            }                                                                                    \
            h = (h + 1) & mask;                                                                  \
        }                                                                                        \
        codes[r + i] = c;                                                                        \
    }                                                                                            \
    return 0;

static int lookup(state_t *s, const uint64_t *key, Py_ssize_t len, Py_ssize_t r, int32_t *codes,
                  int use_lut)
{
#define KEY64(i) key[i]
    LOOKUP(KEY64)
#undef KEY64
}

static int lookup2(state_t *s, const uint32_t *lo, const uint32_t *hi, Py_ssize_t len,
                   Py_ssize_t r, int32_t *codes, int use_lut)
{
#define KEY2(i) (lo[i] | ((uint64_t)hi[i] << 32))
    LOOKUP(KEY2)
#undef KEY2
}

/* The lookup table for key spaces up to LUT_MAX (s->lut: the shared one, taken by the caller,
 * or a fresh one); NULL when out of memory. */
static int32_t *get_lut(state_t *s)
{
    if (!s->lut) {
        s->lut = calloc(LUT_MAX, sizeof(int32_t));
        s->lut_own = 1;
    }
    return s->lut;
}

/* Guessed windows that cover the rows so far (one per code), the block of `len` rows at the
 * columns' cursors and the ranges they covered before; the codes so far keep their numbers and
 * get new keys. Returns as plan_guess (-2 out of memory). */
static int widen(col_t **var, int m, state_t *s, Py_ssize_t len)
{
    for (int j = 0; j < m; j++) {
        col_t *col = var[j];
        int64_t lo = col->glo, hi = col->ghi, v;
        range_minmax(col, &col->chunks[col->ci], col->pos, col->pos + len, &lo, &hi);
        for (Py_ssize_t code = 0; code < s->k; code++)
            if (value_at(col, s->reps[code], &v)) {
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
        col->glo = lo;
        col->ghi = hi;
    }
    lut_clear(s);  /* the old keys' entries */
    int lut = plan_guess(var, m);
    if (lut < 0)
        return lut;
    for (Py_ssize_t code = 0; code < s->k; code++)
        s->ckeys[code] = key_of_row(var, m, s->reps[code]);
    if (lut) {
        if (!get_lut(s))
            return -2;
        for (Py_ssize_t code = 0; code < s->k; code++)
            s->lut[s->ckeys[code]] = (int32_t)code + 1;
        s->lut_used = 1;
    } else {
        int bits = 10;
        while (table_full(s->k, ((uint64_t)1 << bits) - 1))
            bits++;
        if (table_build(s, bits) < 0)
            return -2;
    }
    return lut;
}

/* A pass over the rows: an empty lookup table or hash table, every column at its first row.
 * -1: out of memory. */
static int start_pass(col_t **var, int m, state_t *s, int use_lut)
{
    if (use_lut ? !get_lut(s) : table_build(s, 10) < 0)
        return -1;
    s->lut_used = use_lut;
    rewind_cols(var, m);
    return 0;
}

/* Guessed keys: 0, 1 when they do not fit (nothing kept), -1 out of memory. */
static int run_guess(col_t **var, int m, Py_ssize_t n, int32_t *codes, state_t *s, int use_lut,
                     int *widened)
{
    uint32_t lo[BLOCK], hi[BLOCK];
    if (start_pass(var, m, s, use_lut) < 0)
        return -1;
    for (Py_ssize_t r = 0; r < n;) {
        Py_ssize_t len = block_len(var, m, n - r);
        int bad = 0, first[2] = {1, 1};
        uint32_t *half[2] = {lo, hi};
        for (int j = 0; j < m; j++) {
            int h = var[j]->half;
            bad |= fill_guess(var[j], len, h < 0 ? lo : half[h], h < 0 ? 0 : first[h]);
            if (h >= 0)
                first[h] = 0;
        }
        if (UNLIKELY(bad)) {
            int got = *widened < MAX_WIDEN ? widen(var, m, s, len) : -1;
            ++*widened;
            if (got < 0) {
                forget(s);
                return got == -2 ? -1 : 1;
            }
            use_lut = got;
            continue;  /* the same block again */
        }
        for (int h = 0; h < 2; h++)
            if (first[h])
                memset(half[h], 0, (size_t)len * sizeof(uint32_t));
        if (lookup2(s, lo, hi, len, r, codes, use_lut) < 0)
            return -1;
        advance(var, m, len);
        r += len;
    }
    return 0;
}

/* Exact mixed-radix keys (radix: the key space). */
static int run_exact(col_t **var, int m, Py_ssize_t n, int32_t *codes, state_t *s, uint64_t radix)
{
    uint64_t key[BLOCK];
    int use_lut = radix <= LUT_MAX;
    if (start_pass(var, m, s, use_lut) < 0)
        return -1;
    for (Py_ssize_t r = 0; r < n;) {
        Py_ssize_t len = block_len(var, m, n - r);
        for (int j = 0; j < m; j++)
            fill_exact(var[j], len, key, j == 0);
        if (lookup(s, key, len, r, codes, use_lut) < 0)
            return -1;
        advance(var, m, len);
        r += len;
    }
    return 0;
}

/* Rows hashed and compared value by value. */
static int run_rows(col_t **var, int m, Py_ssize_t n, int32_t *codes, state_t *s)
{
    uint64_t *vals = malloc((size_t)BLOCK * m * sizeof(uint64_t));
    uint64_t masks[BLOCK], hash[BLOCK];
    int ret = -1;
    s->m = m;
    if (!vals || table_build(s, 10) < 0)
        goto done;
    rewind_cols(var, m);
    for (Py_ssize_t r = 0; r < n;) {
        Py_ssize_t len = block_len(var, m, n - r);
        for (int j = 0; j < m; j++)
            fill_row(var[j], len, j, m, vals, masks);
        for (Py_ssize_t i = 0; i < len; i++) {
            uint64_t h = mix(masks[i] + GOLD);
            for (int j = 0; j < m; j++)
                h = mix(h ^ (vals[i * m + j] + (uint64_t)j * GOLD));
            hash[i] = h;
        }
        for (Py_ssize_t i = 0; i < len; i++) {
            const uint64_t hv = hash[i];
            const uint64_t *row = &vals[i * m];
            uint64_t slot = slot_of(s, hv);
            int64_t c;
            for (;;) {
                c = s->tab[slot] - 1;
                if (c >= 0 && s->ckeys[c] == hv && s->cmasks[c] == masks[i] &&
                        memcmp(&s->cvals[(size_t)c * m], row, (size_t)m * sizeof(uint64_t)) == 0)
                    break;
                if (c < 0) {
                    c = new_code(s, hv, r + i, 1);
                    if (c < 0)
                        goto done;
                    memcpy(&s->cvals[(size_t)c * m], row, (size_t)m * sizeof(uint64_t));
                    s->cmasks[c] = masks[i];
                    s->tab[slot] = (int32_t)c + 1;
                    if (UNLIKELY(table_full(s->k, s->mask)) && table_build(s, 65 - s->shift) < 0)
                        goto done;
                    break;
                }
                slot = (slot + 1) & s->mask;
            }
            codes[r + i] = (int32_t)c;
        }
        advance(var, m, len);
        r += len;
    }
    ret = 0;
done:
    free(vals);
    return ret;
}

/* How the rows went through (for tests and tuning): calls by way, widenings. */
enum { W_GUESS, W_EXACT_KEYS, W_ROWS, W_SAME, W_FELL_BACK, W_WIDENED, W_N };
static Py_ssize_t stats[W_N];

/* Every row's code (without the GIL): 0, -1 out of memory, 1 declined. how: 0 as it comes,
 * 1 the exact way only, 2 guesses from the first row only (tests: widening). way[]: what
 * happened (indices as stats). */
static int run(col_t *cols, Py_ssize_t ncols, Py_ssize_t n, int32_t *codes, state_t *s, int how,
               Py_ssize_t *way)
{
    col_t *var[MAX_VARYING];
    col_t **all = malloc((ncols ? ncols : 1) * sizeof(col_t *));
    int m = 0, ret = -1;
    if (!all)
        return -1;
    for (Py_ssize_t j = 0; j < ncols; j++)
        if (cols[j].nulls < n)  /* all-NULL columns: the same for every row */
            all[m++] = &cols[j];
    if (m && m <= MAX_VARYING && how != 1 && (n >= GUESS_MIN || how == 2)) {
        Py_ssize_t len = n / 1024 < SAMPLE_LEN ? (n / 1024 ? n / 1024 : 1) : SAMPLE_LEN;
        for (int j = 0; j < m; j++) {
            int64_t v;
            if (how != 2)
                sample_minmax(all[j], n, len);
            else if (value_at(all[j], 0, &v))
                all[j]->glo = all[j]->ghi = v;
            else  /* none */
                all[j]->glo = INT64_MAX, all[j]->ghi = INT64_MIN;
        }
        int lut = plan_guess(all, m);
        if (lut >= 0) {
            int widened = 0;
            ret = run_guess(all, m, n, codes, s, lut, &widened);
            way[W_WIDENED] += widened;
            if (ret <= 0) {
                way[W_GUESS]++;
                goto done;
            }
        }
        way[W_FELL_BACK]++;
    }
    /* the exact way */
    int nvar = 0, keyed = 1, many = 0;
    uint64_t radix = 1;
    for (int j = 0; j < m; j++) {
        col_t *c = all[j];
        minmax(c);
        if (c->lo == c->hi && !c->nulls)
            continue;  /* one value for every row */
        if (nvar == MAX_VARYING) {
            keyed = 0;
            many = 1;
            break;
        }
        var[nvar++] = c;
        uint64_t d = (uint64_t)c->hi - (uint64_t)c->lo;
        uint64_t span = d + 1 + (c->nulls ? 1 : 0);
        if (d >= ((uint64_t)1 << 62) || radix >= ((uint64_t)1 << 63) / span)
            keyed = 0;  /* keys stay below 2**63 */
        if (keyed) {
            c->radix = radix;
            radix *= span;
        }
    }
    if (keyed && nvar) {
        ret = run_exact(var, nvar, n, codes, s, radix);
        way[W_EXACT_KEYS]++;
    } else if (many) {
        ret = 1;
    } else if (nvar) {
        ret = run_rows(var, nvar, n, codes, s);
        way[W_ROWS]++;
    } else {  /* every row the same */
        memset(codes, 0, (size_t)n * sizeof(int32_t));
        ret = 0;
        if (n && new_code(s, 0, 0, 0) < 0)
            ret = -1;
        way[W_SAME]++;
    }
done:
    free(all);
    return ret;
}

/* ---- the call -------------------------------------------------------------------------------- */
static void release_cols(col_t *cols, Py_ssize_t ncols)
{
    if (!cols)
        return;
    for (Py_ssize_t j = 0; j < ncols; j++) {
        for (Py_ssize_t v = 0; v < cols[j].nviews; v++)
            PyBuffer_Release(&cols[j].views[v]);
        PyMem_Free(cols[j].views);
        PyMem_Free(cols[j].chunks);
    }
    PyMem_Free(cols);
}

/* Acquire buffer `o` and check that it holds values off .. off + len - 1 of `isz` bytes
 * (isz 0: bits of a bitmap). */
static int take_buffer(col_t *col, PyObject *o, Py_ssize_t isz, Py_ssize_t off, Py_ssize_t len,
                       const char **out)
{
    Py_buffer *v = &col->views[col->nviews];
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0)
        return -1;
    col->nviews++;
    Py_ssize_t need = isz ? (off + len) * isz : (off + len + 7) / 8;
    if (v->len < need) {
        PyErr_SetString(PyExc_ValueError, "distinct: a buffer is shorter than its chunk");
        return -1;
    }
    *out = (const char *)v->buf + off * isz;
    return 0;
}

static int parse_column(PyObject *spec, col_t *col, Py_ssize_t n)
{
    Py_ssize_t isz;
    int sgn;
    PyObject *chunks;
    if (!PyArg_ParseTuple(spec, "npO", &isz, &sgn, &chunks))
        return -1;
    int lg = isz == 1 ? 0 : isz == 2 ? 1 : isz == 4 ? 2 : isz == 8 ? 3 : -1;
    if (lg < 0) {
        PyErr_SetString(PyExc_ValueError, "distinct: itemsize must be 1, 2, 4 or 8");
        return -1;
    }
    col->kind = 2 * lg + (sgn ? 1 : 0);
    PyObject *seq = PySequence_Fast(chunks, "distinct: chunks must be a sequence");
    if (!seq)
        return -1;
    Py_ssize_t nc = PySequence_Fast_GET_SIZE(seq), total = 0;
    col->chunks = PyMem_Calloc(nc ? nc : 1, sizeof(chunk_t));
    col->views = PyMem_Calloc(2 * (nc ? nc : 1), sizeof(Py_buffer));
    if (!col->chunks || !col->views) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nc; i++) {
        PyObject *values, *validity;
        Py_ssize_t off, len, nulls;
        chunk_t *c = &col->chunks[col->nchunks];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "OOnnn", &values, &validity,
                              &off, &len, &nulls))
            goto fail;
        if (off < 0 || len < 0 || nulls < 0 || nulls > len) {
            PyErr_SetString(PyExc_ValueError, "distinct: bad chunk offset, length or null count");
            goto fail;
        }
        if (len == 0)
            continue;
        c->len = len;
        c->nulls = nulls;
        c->bitoff = off;
        c->start = total;
        if (nulls < len && take_buffer(col, values, isz, off, len, &c->data) < 0)
            goto fail;
        if (nulls && nulls < len) {
            if (validity == Py_None) {
                PyErr_SetString(PyExc_ValueError, "distinct: a chunk with NULLs needs a bitmap");
                goto fail;
            }
            if (take_buffer(col, validity, 0, off, len, (const char **)&c->bits) < 0)
                goto fail;
        }
        total += len;
        col->nulls += nulls;
        col->nchunks++;
    }
    Py_DECREF(seq);
    if (total != n) {
        PyErr_SetString(PyExc_ValueError, "distinct: a column's chunks do not hold n rows");
        return -1;
    }
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

static PyObject *distinct(PyObject *self, PyObject *args)
{
    PyObject *columns, *codes_obj, *seq = NULL, *result = NULL;
    Py_ssize_t n, ncols = 0;
    Py_buffer out = {0};
    col_t *cols = NULL;
    state_t s = {0};
    int err, shared = 0, how = 0;
    Py_ssize_t way[W_N] = {0};

    if (!PyArg_ParseTuple(args, "nOO|i", &n, &columns, &codes_obj, &how))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "distinct: n < 0");
        return NULL;
    }
    if (n >= INT32_MAX)
        Py_RETURN_NONE;
    if (PyObject_GetBuffer(codes_obj, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (out.len != n * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "distinct: codes must hold n int32");
        goto end;
    }
    seq = PySequence_Fast(columns, "distinct: columns must be a sequence");
    if (!seq)
        goto end;
    ncols = PySequence_Fast_GET_SIZE(seq);
    cols = PyMem_Calloc(ncols ? ncols : 1, sizeof(col_t));
    if (!cols) {
        PyErr_NoMemory();
        goto end;
    }
    for (Py_ssize_t j = 0; j < ncols; j++)
        if (parse_column(PySequence_Fast_GET_ITEM(seq, j), &cols[j], n) < 0)
            goto end;
    if (!lut_busy) {  /* the shared lookup table, if it is needed (allocated once) */
        if (!shared_lut)
            shared_lut = calloc(LUT_MAX, sizeof(int32_t));
        if (shared_lut) {
            s.lut = shared_lut;
            lut_busy = shared = 1;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    err = run(cols, ncols, n, (int32_t *)out.buf, &s, how, way);
    if (shared)  /* give it back clean */
        lut_clear(&s);
    Py_END_ALLOW_THREADS
    if (shared)
        lut_busy = 0;
    for (int w = 0; w < W_N; w++)
        stats[w] += way[w];
    if (err < 0) {
        PyErr_NoMemory();
        goto end;
    }
    if (err > 0) {
        result = Py_None;
        Py_INCREF(result);
        goto end;
    }
    {
        PyObject *reps = PyBytes_FromStringAndSize((const char *)s.reps,
                                                   s.k * (Py_ssize_t)sizeof(int64_t));
        if (reps)
            result = Py_BuildValue("(nN)", s.k, reps);
    }
end:
    if (s.lut_own)
        free(s.lut);
    free(s.reps);
    free(s.ckeys);
    free(s.cvals);
    free(s.cmasks);
    free(s.tab);
    release_cols(cols, ncols);
    Py_XDECREF(seq);
    if (out.obj)
        PyBuffer_Release(&out);
    return result;
}

static PyObject *get_stats(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{snsnsnsnsnsn}", "guess", stats[W_GUESS], "exact_keys",
                         stats[W_EXACT_KEYS], "rows", stats[W_ROWS], "same", stats[W_SAME],
                         "fell_back", stats[W_FELL_BACK], "widened", stats[W_WIDENED]);
}

static PyMethodDef methods[] = {
    {"distinct", distinct, METH_VARARGS,
     "distinct(n, columns, codes, how=0) -> (k, reps) or None: a code per row (see the "
     "source)."},
    {"stats", get_stats, METH_NOARGS,
     "Calls so far by way (guess, exact_keys, rows, same), guesses that fell back to the exact "
     "way, and widenings."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dedupe",
                                    "Distinct rows of integer columns (cuptiprof.store.writer).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__dedupe(void)
{
    PyObject *mod = PyModule_Create(&module);
    if (mod && PyModule_AddIntConstant(mod, "API", API_VERSION) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
