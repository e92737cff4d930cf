/* Kineto trace text -> per-event columns, in one pass, without a Python object per event.
 *
 * scan(text, names, small) reads one piece of a trace as cut by kineto.iter_docs (a JSON
 * object holding a "traceEvents" array and maybe other top-level keys) and returns
 *   (ints, floats, kept, events, meta, has_events)
 * ints:   kept x NI int64, row-major (columns: see the C_* constants, mirrored in pieces.py),
 *         in a Block (writable memory with the buffer protocol: numpy.frombuffer reads it)
 * floats: kept x 2 float64 (ts, dur; NaN where null or absent)
 * kept:   events that carry at least one field the importer reads (an event with none of them,
 *         such as {}, can never change an import; its position is still counted), flow
 *         arrows left out (an event of a flow category, ac2g, async, async_cpu_to_gpu or
 *         fwdbwd, any case, whose ph is not "X": the importer reads nothing of them, and they
 *         are a third of a modern trace's events)
 * events: every event of the array
 * meta:   (key, value_start, value_end) of the other top-level keys
 * Strings are interned into the two Interner objects (names: event names, first seen first
 * numbered; small: categories, ph, string pids/tids, labels).
 *
 * It returns None ("decline") for anything it does not handle exactly like msgspec does into
 * kineto.Doc: invalid JSON or UTF-8, an escaped key, a duplicate field, a value of another
 * type, an integer beyond int64, a float that overflows, grid/block not of three ints,
 * nesting deeper than MAX_DEPTH. The caller then decodes the piece with msgspec, so errors
 * and edge cases stay exactly those of the msgspec path. It never accepts text that msgspec
 * rejects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)  /* every x86-64: 16 bytes per step when looking for a string's end */
#include <emmintrin.h>
#endif

#if defined(__GLIBC__) || defined(__APPLE__)
#include <locale.h>
#ifdef __APPLE__
#include <xlocale.h>
#endif
static locale_t c_locale;
static double c_strtod(const char *b, char **e) { return strtod_l(b, e, c_locale); }
#else  /* no strtod_l: leave fractions and exponents to msgspec */
static double c_strtod(const char *b, char **e) { *e = (char *)b; return 0.0; }
#endif

#define MAX_DEPTH 256

#if defined(__GNUC__)
#define HOT_INLINE static inline __attribute__((always_inline))
#else
#define HOT_INLINE static inline
#endif

/* a == b for n bytes, inline: the strings compared here (interned names, keys) are short,
 * where a call to memcmp costs more than the comparison. Loads stay inside both buffers
 * (the last word overlaps the one before it). */
static inline int bytes_eq(const void *a, const void *b, Py_ssize_t n) {
    const unsigned char *x = a, *y = b;
    if (n >= 8) {
        uint64_t u, v;
        for (Py_ssize_t i = 0; i + 8 < n; i += 8) {
            memcpy(&u, x + i, 8); memcpy(&v, y + i, 8);
            if (u != v) return 0;
        }
        memcpy(&u, x + n - 8, 8); memcpy(&v, y + n - 8, 8);
        return u == v;
    }
    if (n >= 4) {
        uint32_t u, v, u2, v2;
        memcpy(&u, x, 4); memcpy(&v, y, 4); memcpy(&u2, x + n - 4, 4); memcpy(&v2, y + n - 4, 4);
        return u == v && u2 == v2;
    }
    if (n > 0)  /* first, middle and last cover one to three bytes */
        return x[0] == y[0] && x[n >> 1] == y[n >> 1] && x[n - 1] == y[n - 1];
    return 1;
}

/* int64 columns */
enum {
    C_IDX, C_CAT, C_PH, C_NAME, C_PIDK, C_PID, C_TIDK, C_TID, C_HASARGS, C_LABELS, C_XDOMAIN,
    C_XKIND, C_XLEVEL, C_XLOGGER, C_VALID, C_TSX, C_ARG0 /* then NARGS argument values */
};
/* C_TSX: "ts" in thousandths of its unit, read exactly from its decimal text (a double holds
 * 16 digits: microseconds since the epoch lose their nanoseconds); TSX_NONE where the text
 * says more (an exponent, a fourth significant decimal), or where there is no number */
#define TSX_NONE INT64_MIN
enum {
    A_CORRELATION, A_DEVICE, A_CONTEXT, A_STREAM, A_BYTES, A_GRID0, A_GRID1, A_GRID2,
    A_BLOCK0, A_BLOCK1, A_BLOCK2, A_REGISTERS, A_SMEM, A_CBID, A_DEVTYPE, A_DEVID, A_MEMBYTES,
    A_EXTID, A_XSTEP, A_XRANGE, A_XDSMEM, A_MEMADDR, A_XOPEN, A_EVENTID,
    /* a GPU row's graph and graph node (Kineto's keys, or those of cuptiprof's earlier
     * exports: an event that says both is declined), and, what Kineto has no key for in
     * cuptiprof's export, one column for the one value of a category (a copy's asynchrony, a
     * memset's value, a call's return code, a pool allocation): an event says one of them */
    A_XGRAPH, A_XGNODE, A_XEXTRA, NARGS
};
/* More shares the column of a key no event of its category says (no column more per event):
 * a peer copy's source and destination devices (Kineto's fromDevice and toDevice, or
 * cuptiprof's earlier keys) those of a kernel's dynamic smem and a range still open, a
 * [memory] instant's correlation id that of a sync's event (pieces.SHARED; an event that
 * says two keys of a column is declined) */
#define A_XSRCDEV A_XDSMEM
#define A_XDSTDEV A_XOPEN
#define A_XCORR A_EVENTID
#define NI (C_ARG0 + NARGS)
/* an argument's bit in a 32-bit `seen` mask and in the low half of C_VALID (pieces.OVER) */
_Static_assert(NARGS <= 32, "more argument columns than bits for them");

/* ---- interner: byte string -> id, with the Python str of each id in a list ---------------- */
typedef struct {
    PyObject_HEAD
    PyObject *strings;      /* list of str, index = id */
    char **keys;            /* utf-8 bytes per id (owned) */
    Py_ssize_t *lens;
    uint64_t *hashes;
    Py_ssize_t n, cap;
    uint64_t *table;        /* open addressing: 0 empty, else the hash's top 32 bits | id + 1 */
    Py_ssize_t tsize;       /* power of two */
} Interner;

/* Whole words, the short tail read as one overlapping word: no loop over single bytes. The
 * length is mixed in, so a tail read twice cannot make two lengths collide often. */
static inline uint64_t hash_bytes(const unsigned char *s, Py_ssize_t n) {
    const uint64_t M = 0x9E3779B97F4A7C15ULL;
    uint64_t h = (uint64_t)n * M, w;
    if (n >= 8) {
        for (Py_ssize_t i = 0; i + 8 < n; i += 8) {
            memcpy(&w, s + i, 8);
            h = (h ^ w) * M;
            h ^= h >> 29;
        }
        memcpy(&w, s + n - 8, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        w = ((uint64_t)a << 32) | b;
    } else if (n > 0) {
        w = ((uint64_t)s[0] << 16) | ((uint64_t)s[n >> 1] << 8) | s[n - 1];
    } else {
        w = 0;
    }
    h = (h ^ w) * M;
    h ^= h >> 32;
    return h | 1;
}

#define HASH_TOP 0xFFFFFFFF00000000ULL
#define ENTRY(h, id) (((h) & HASH_TOP) | (uint64_t)((id) + 1))

static int interner_grow(Interner *it) {
    Py_ssize_t ns = it->tsize ? it->tsize * 2 : 1024;
    uint64_t *t = calloc(ns, sizeof(uint64_t));
    if (!t) return -1;
    for (Py_ssize_t id = 0; id < it->n; id++) {
        Py_ssize_t j = it->hashes[id] & (ns - 1);
        while (t[j]) j = (j + 1) & (ns - 1);
        t[j] = ENTRY(it->hashes[id], id);
    }
    free(it->table);
    it->table = t;
    it->tsize = ns;
    return 0;
}

/* The id of s[0:n] (hash h) if numbered, else -1 with *slot the empty entry for it. Each
 * entry holds part of its hash: a probe past other strings touches no other memory. */
static inline Py_ssize_t lookup(Interner *it, const char *s, Py_ssize_t n, uint64_t h,
                                Py_ssize_t *slot) {
    Py_ssize_t j = h & (it->tsize - 1);
    uint64_t e;
    while ((e = it->table[j]) != 0) {
        if ((e & HASH_TOP) == (h & HASH_TOP)) {
            Py_ssize_t id = (Py_ssize_t)(e & 0xFFFFFFFFULL) - 1;
            if (it->lens[id] == n && bytes_eq(it->keys[id], s, n)) return id;
        }
        j = (j + 1) & (it->tsize - 1);
    }
    *slot = j;
    return -1;
}

/* id of the utf-8 bytes s[0:n], numbering them when new. Touches no Python object (the
 * scanner calls it without the GIL): the str of a new id is added to `strings` by the caller
 * (materialize). -1 when out of memory. */
static Py_ssize_t intern_bytes(Interner *it, const char *s, Py_ssize_t n) {
    uint64_t h = hash_bytes((const unsigned char *)s, n);
    if (it->tsize == 0 || (it->n + 1) * 2 > it->tsize) {
        if (interner_grow(it) < 0) return -1;
    }
    Py_ssize_t j = 0, found = lookup(it, s, n, h, &j);
    if (found >= 0) return found;
    if (it->n >= INT32_MAX - 1) return -1;
    if (it->n == it->cap) {
        Py_ssize_t nc = it->cap ? it->cap * 2 : 256;
        char **k = realloc(it->keys, nc * sizeof(char *));
        if (!k) return -1;
        it->keys = k;
        Py_ssize_t *l = realloc(it->lens, nc * sizeof(Py_ssize_t));
        if (!l) return -1;
        it->lens = l;
        uint64_t *hh = realloc(it->hashes, nc * sizeof(uint64_t));
        if (!hh) return -1;
        it->hashes = hh;
        it->cap = nc;
    }
    char *copy = malloc(n ? n : 1);
    if (!copy) return -1;
    memcpy(copy, s, n);
    Py_ssize_t id = it->n++;
    it->keys[id] = copy;
    it->lens[id] = n;
    it->hashes[id] = h;
    it->table[j] = ENTRY(h, id);
    return id;
}

/* The str of every id numbered since the last call (GIL held). */
static int materialize(Interner *it) {
    for (Py_ssize_t id = PyList_GET_SIZE(it->strings); id < it->n; id++) {
        PyObject *str = PyUnicode_DecodeUTF8(it->keys[id], it->lens[id], "strict");
        if (!str) return -1;
        int r = PyList_Append(it->strings, str);
        Py_DECREF(str);
        if (r < 0) return -1;
    }
    return 0;
}

static PyObject *Interner_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Interner *it = (Interner *)type->tp_alloc(type, 0);
    if (!it) return NULL;
    it->strings = PyList_New(0);
    if (!it->strings) { Py_DECREF(it); return NULL; }
    return (PyObject *)it;
}

static void Interner_dealloc(Interner *it) {
    for (Py_ssize_t i = 0; i < it->n; i++) free(it->keys[i]);
    free(it->keys);
    free(it->lens);
    free(it->hashes);
    free(it->table);
    Py_XDECREF(it->strings);
    Py_TYPE(it)->tp_free((PyObject *)it);
}

/* ids(list of str or None) -> bytes of int32 ids (-1 for None), numbering new strings in
 * order: the msgspec path interns through this, so both paths number names alike. */
static PyObject *Interner_ids(Interner *it, PyObject *seq) {
    PyObject *fast = PySequence_Fast(seq, "ids() takes a sequence");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * sizeof(int32_t));
    if (!out) { Py_DECREF(fast); return NULL; }
    int32_t *o = (int32_t *)PyBytes_AS_STRING(out);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = items[i];
        if (s == Py_None) { o[i] = -1; continue; }
        if (!PyUnicode_Check(s)) {
            PyErr_SetString(PyExc_TypeError, "ids() takes str or None");
            goto fail;
        }
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(s, &len);
        Py_ssize_t id, before = it->n;
        if (u) {
            id = intern_bytes(it, u, len);
        } else {  /* lone surrogates: bytes the scanner never produces, so no clash */
            PyErr_Clear();
            PyObject *b = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
            if (!b) goto fail;
            id = intern_bytes(it, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
            Py_DECREF(b);
        }
        if (id < 0) { PyErr_NoMemory(); goto fail; }
        if (it->n > before && PyList_Append(it->strings, s) < 0) goto fail;
        o[i] = (int32_t)id;
    }
    Py_DECREF(fast);
    return out;
fail:
    Py_DECREF(fast);
    Py_DECREF(out);
    return NULL;
}

/* find(str) -> id, or -1 when it was never seen (nothing is added). */
static PyObject *Interner_find(Interner *it, PyObject *str) {
    if (!PyUnicode_Check(str)) { PyErr_SetString(PyExc_TypeError, "find() takes a str"); return NULL; }
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(str, &n);
    if (!u) { PyErr_Clear(); return PyLong_FromLong(-1); }
    Py_ssize_t j;
    if (it->tsize)
        return PyLong_FromSsize_t(lookup(it, u, n, hash_bytes((const unsigned char *)u, n), &j));
    return PyLong_FromLong(-1);
}

static PyObject *Interner_len(Interner *it, PyObject *unused) { return PyLong_FromSsize_t(it->n); }

static PyMethodDef Interner_methods[] = {
    {"ids", (PyCFunction)Interner_ids, METH_O, "ids(list of str|None) -> bytes of int32 ids"},
    {"find", (PyCFunction)Interner_find, METH_O, "find(str) -> id or -1"},
    {"size", (PyCFunction)Interner_len, METH_NOARGS, "number of strings"},
    {NULL}
};

static PyObject *Interner_strings(Interner *it, void *c) { Py_INCREF(it->strings); return it->strings; }

static PyGetSetDef Interner_getset[] = {
    {"strings", (getter)Interner_strings, NULL, "the strings, by id", NULL},
    {NULL}
};

static PyTypeObject InternerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuptiprof.interop._kineto_scan.Interner",
    .tp_basicsize = sizeof(Interner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Strings numbered in the order first seen.",
    .tp_new = Interner_new,
    .tp_dealloc = (destructor)Interner_dealloc,
    .tp_methods = Interner_methods,
    .tp_getset = Interner_getset,
};

/* ---- Block: malloc'd memory handed to Python as a buffer, so the columns are not copied --- */
typedef struct {
    PyObject_HEAD
    void *buf;
    Py_ssize_t len;
} Block;

static int Block_getbuffer(Block *b, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)b, b->buf ? b->buf : empty, b->len, 0, flags);
}

static void Block_dealloc(Block *b) {
    free(b->buf);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyBufferProcs Block_as_buffer = {(getbufferproc)Block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuptiprof.interop._kineto_scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writable memory of scanned columns (the buffer protocol, e.g. numpy.frombuffer).",
    .tp_dealloc = (destructor)Block_dealloc,
    .tp_as_buffer = &Block_as_buffer,
};

/* A Block owning buf (malloc'd, its first n bytes used), shrunk to n: a piece's columns may
 * live until the file ends, and the capacity was a guess from the text's size (a large block
 * shrinks in place, without a copy). NULL with buf freed on failure. */
static PyObject *block_of(void *buf, Py_ssize_t n) {
    if (!n) {
        free(buf);
        buf = NULL;
    } else {
        void *b = realloc(buf, n);
        if (b) buf = b;
    }
    Block *b = PyObject_New(Block, &BlockType);
    if (!b) { free(buf); return NULL; }
    b->buf = buf;
    b->len = n;
    return (PyObject *)b;
}

/* ---- the scanner ------------------------------------------------------------------------- */
typedef struct {
    const unsigned char *p, *end, *base;
    Interner *names, *small;
    int64_t *I; double *F;
    Py_ssize_t kept, cap, hint;    /* hint: first capacity, from the text's size */
    char *sbuf; Py_ssize_t scap;   /* unescaped string */
    int nomem;                      /* out of memory: raise MemoryError, not a decline */
    struct meta { const char *k; Py_ssize_t n, vs, ve; } *meta;
    Py_ssize_t nmeta, capmeta;
    Py_ssize_t last[10];            /* intern_memo: the last id per field (L_*), or -1 */
    signed char flow[64];           /* flow_name of each category id below 64; -1: not yet */
} S;

enum { L_CAT, L_PH, L_NAME, L_PID, L_TID, L_LABELS, L_XDOMAIN, L_XKIND, L_XLEVEL, L_XLOGGER };

/* intern_bytes with a one-entry memo per field: events in a row often share a category, a
 * ph, a thread or a name, found then without hashing or probing. */
static inline Py_ssize_t intern_memo(S *s, Interner *it, const char *u, Py_ssize_t n, int field) {
    Py_ssize_t id = s->last[field];
    if (id >= 0 && it->lens[id] == n && bytes_eq(it->keys[id], u, n)) return id;
    id = intern_bytes(it, u, n);
    s->last[field] = id;
    return id;
}

#define DECLINE (-1)

/* A flow category (kineto.FLOW, which a test holds this list to), compared as the importer
 * does, lowercased. */
static int flow_name(const char *k, Py_ssize_t n) {
    static const char *const names[] = {"ac2g", "async", "async_cpu_to_gpu", "fwdbwd"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        Py_ssize_t m = (Py_ssize_t)strlen(names[i]);
        if (m != n) continue;
        Py_ssize_t j = 0;
        while (j < n && (k[j] >= 'A' && k[j] <= 'Z' ? k[j] + 32 : k[j]) == names[i][j]) j++;
        if (j == n) return 1;
    }
    return 0;
}

/* An event the importer reads nothing of: a flow category, and a ph other than "X" (whose
 * events it counts, whatever their category). */
static int is_flow(S *s, int64_t cat, int64_t ph) {
    if (cat < 0) return 0;
    if (ph >= 0 && s->small->lens[ph] == 1 && s->small->keys[ph][0] == 'X') return 0;
    if (cat < 64) {
        if (s->flow[cat] < 0) s->flow[cat] = (signed char)flow_name(s->small->keys[cat], s->small->lens[cat]);
        return s->flow[cat];
    }
    return flow_name(s->small->keys[cat], s->small->lens[cat]);
}
#define WS(c) ((c) == ' ' || (c) == '\n' || (c) == '\r' || (c) == '\t')

/* Past the whitespace at p. Compact JSON has none (one test); pretty JSON mostly has one
 * space (after ':' or ',', two tests) or a newline and an indent, taken 16 bytes at a time. */
static inline const unsigned char *ws_end(const unsigned char *p, const unsigned char *end) {
    if (p >= end || *p > ' ') return p;
    if (end - p >= 2 && p[1] > ' ' && WS(*p)) return p + 1;
#if defined(__SSE2__)
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i w = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))));
        unsigned other = ~(unsigned)_mm_movemask_epi8(w) & 0xFFFF;
        if (other) return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < end && WS(*p)) p++;
    return p;
}

static inline void skip_ws(S *s) { s->p = ws_end(s->p, s->end); }

/* The first byte in [q, end) that a plain string cannot hold as is: '"', '\\', a control
 * character or a byte >= 0x80 (which needs UTF-8 validation); end if none. */
static inline const unsigned char *string_stop(const unsigned char *q, const unsigned char *end) {
#if defined(__SSE2__)
    while (end - q >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)q);
        /* signed compare: bytes >= 0x80 are negative, so "< 0x20" catches them too */
        __m128i m = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
            _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
        unsigned mask = (unsigned)_mm_movemask_epi8(m);
        if (mask) return q + __builtin_ctz(mask);
        q += 16;
    }
#else
    while (end - q >= 8) {  /* eight plain ASCII bytes at a time */
        uint64_t w;
        memcpy(&w, q, 8);
        const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
        uint64_t xq = w ^ (ones * '"'), xb = w ^ (ones * '\\');
        uint64_t special = (w | ((w - ones * 0x20) & ~w) | ((xq - ones) & ~xq) |
                            ((xb - ones) & ~xb)) & high;
        if (special) break;
        q += 8;
    }
#endif
    while (q < end && *q >= 0x20 && *q != '"' && *q != '\\' && *q < 0x80) q++;
    return q;
}

static int sbuf_reserve(S *s, Py_ssize_t n) {
    if (n <= s->scap) return 0;
    Py_ssize_t nc = s->scap ? s->scap : 256;
    while (nc < n) nc *= 2;
    char *b = realloc(s->sbuf, nc);
    if (!b) { s->nomem = 1; return DECLINE; }
    s->sbuf = b; s->scap = nc;
    return 0;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(const unsigned char *q, const unsigned char *end, unsigned *out) {
    if (end - q < 4) return DECLINE;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(q[i]);
        if (h < 0) return DECLINE;
        v = v * 16 + h;
    }
    *out = v;
    return 0;
}

/* Strict UTF-8 of one multi-byte sequence starting at q (q[0] >= 0x80); its length or 0. */
static inline int utf8_len(const unsigned char *q, const unsigned char *end) {
    unsigned c = q[0];
    Py_ssize_t left = end - q;
    if (c >= 0xC2 && c <= 0xDF) {
        return (left >= 2 && (q[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (q[1] & 0xC0) != 0x80 || (q[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && q[1] < 0xA0) return 0;          /* overlong */
        if (c == 0xED && q[1] >= 0xA0) return 0;         /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (q[1] & 0xC0) != 0x80 || (q[2] & 0xC0) != 0x80 || (q[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && q[1] < 0x90) return 0;          /* overlong */
        if (c == 0xF4 && q[1] >= 0x90) return 0;         /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

static int read_string_rest(S *s, const unsigned char *q, int want, const char **out,
                            Py_ssize_t *outn, int *escaped);

/* A string at s->p (on the opening quote). With want, its utf-8 text is left in out and outn
 * (pointing into the input when it has no escapes, else into s->sbuf). */
static inline int read_string(S *s, int want, const char **out, Py_ssize_t *outn, int *escaped) {
    const unsigned char *start = s->p + 1;
    const unsigned char *q = string_stop(start, s->end);
    if (q < s->end && *q == '"') {  /* the usual string: plain ASCII, no escapes */
        s->p = q + 1;
        if (escaped) *escaped = 0;
        if (want) { *out = (const char *)start; *outn = q - start; }
        return 0;
    }
    return read_string_rest(s, q, want, out, outn, escaped);
}

/* The rest of a string from q, its first escape, control character or non-ASCII byte. */
static int read_string_rest(S *s, const unsigned char *q, int want, const char **out,
                            Py_ssize_t *outn, int *escaped) {
    const unsigned char *end = s->end;
    const unsigned char *start = s->p + 1;
    int esc = 0;
    while (1) {
        q = string_stop(q, end);
        if (q >= end) return DECLINE;
        unsigned char c = *q;
        if (c == '"') break;
        if (c < 0x20) return DECLINE;
        if (c == '\\') {
            esc = 1;
            if (q + 1 >= end) return DECLINE;
            unsigned char e = q[1];
            if (e == 'u') {
                unsigned v;
                if (read_hex4(q + 2, end, &v) < 0) return DECLINE;
                if (v >= 0xD800 && v <= 0xDBFF) {
                    unsigned lo;
                    if (end - q < 12 || q[6] != '\\' || q[7] != 'u') return DECLINE;
                    if (read_hex4(q + 8, end, &lo) < 0) return DECLINE;
                    if (lo < 0xDC00 || lo > 0xDFFF) return DECLINE;
                    q += 12;
                } else if (v >= 0xDC00 && v <= 0xDFFF) {
                    return DECLINE;
                } else {
                    q += 6;
                }
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                       e == 'r' || e == 't') {
                q += 2;
            } else {
                return DECLINE;
            }
            continue;
        }
        int l = utf8_len(q, end);
        if (!l) return DECLINE;
        q += l;
    }
    s->p = q + 1;
    if (escaped) *escaped = esc;
    if (!want) return 0;
    if (!esc) {
        *out = (const char *)start;
        *outn = q - start;
        return 0;
    }
    /* unescape (the text was validated above) */
    if (sbuf_reserve(s, q - start) < 0) return DECLINE;
    char *o = s->sbuf;
    const unsigned char *r = start;
    while (r < q) {
        if (*r != '\\') { *o++ = (char)*r++; continue; }
        unsigned char e = r[1];
        unsigned v;
        switch (e) {
        case '"': *o++ = '"'; r += 2; continue;
        case '\\': *o++ = '\\'; r += 2; continue;
        case '/': *o++ = '/'; r += 2; continue;
        case 'b': *o++ = '\b'; r += 2; continue;
        case 'f': *o++ = '\f'; r += 2; continue;
        case 'n': *o++ = '\n'; r += 2; continue;
        case 'r': *o++ = '\r'; r += 2; continue;
        case 't': *o++ = '\t'; r += 2; continue;
        default: break;
        }
        read_hex4(r + 2, q, &v);
        r += 6;
        if (v >= 0xD800 && v <= 0xDBFF) {
            unsigned lo;
            read_hex4(r + 2, q, &lo);
            r += 6;
            v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (v < 0x80) {
            *o++ = (char)v;
        } else if (v < 0x800) {
            *o++ = (char)(0xC0 | (v >> 6)); *o++ = (char)(0x80 | (v & 0x3F));
        } else if (v < 0x10000) {
            *o++ = (char)(0xE0 | (v >> 12)); *o++ = (char)(0x80 | ((v >> 6) & 0x3F));
            *o++ = (char)(0x80 | (v & 0x3F));
        } else {
            *o++ = (char)(0xF0 | (v >> 18)); *o++ = (char)(0x80 | ((v >> 12) & 0x3F));
            *o++ = (char)(0x80 | ((v >> 6) & 0x3F)); *o++ = (char)(0x80 | (v & 0x3F));
        }
    }
    *out = s->sbuf;
    *outn = o - s->sbuf;
    return 0;
}

#if defined(__SSE2__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FAST_DIGITS 1
/* How many ASCII digits start the 16 bytes at q (0-16). */
static inline int digit_run16(const unsigned char *q) {
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    __m128i d = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8('0' - 1)),
                              _mm_cmplt_epi8(v, _mm_set1_epi8('9' + 1)));
    return __builtin_ctz(~(unsigned)_mm_movemask_epi8(d));
}

/* The value of the n (1-8) ASCII digits at q, 8 bytes at q readable. SWAR: the digits are
 * moved to the top of a word (leading zeros below), then summed in pairs, quads and the eight,
 * each step one multiply: no branch per digit, so no misprediction on the number's length. */
static inline uint64_t digits_value(const unsigned char *q, int n) {
    uint64_t w;
    memcpy(&w, q, 8);
    w -= 0x3030303030303030ULL;  /* no borrow out of the digits; the bytes after go below */
    w <<= 8 * (8 - n);
    w = (w * 10 + (w >> 8)) & 0x00FF00FF00FF00FFULL;
    w = (w * 100 + (w >> 16)) & 0x0000FFFF0000FFFFULL;
    return (w * 10000 + (w >> 32)) & 0xFFFFFFFFULL;
}

static const uint64_t UPOW10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                   100000000};
#endif

/* Past the ASCII digits at q. */
static inline const unsigned char *skip_digits(const unsigned char *q, const unsigned char *end) {
#ifdef FAST_DIGITS
    if (end - q >= 16) {
        int k = digit_run16(q);
        if (k < 16) return q + k;
        q += 16;
    }
#endif
    while (q < end && *q >= '0' && *q <= '9') q++;
    return q;
}

/* A JSON number at s->p: strict grammar. is_int: no fraction and no exponent. */
static int scan_number(S *s, const unsigned char **tok, Py_ssize_t *len, int *is_int) {
    const unsigned char *q = s->p, *end = s->end;
    const unsigned char *t = q;
    if (q < end && *q == '-') q++;
    if (q >= end) return DECLINE;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        q = skip_digits(q, end);
    } else {
        return DECLINE;
    }
    int integer = 1;
    if (q < end && *q == '.') {
        integer = 0;
        q++;
        if (q >= end || *q < '0' || *q > '9') return DECLINE;
        q = skip_digits(q, end);
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        integer = 0;
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end || *q < '0' || *q > '9') return DECLINE;
        q = skip_digits(q, end);
    }
    if (q >= end) return DECLINE;  /* a piece never ends inside a value */
    *tok = t; *len = q - t; *is_int = integer;
    s->p = q;
    return 0;
}

static int skip_value(S *s, int depth);

static int skip_literal(S *s, const char *lit, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, lit, n) != 0) return DECLINE;
    s->p += n;
    return 0;
}

static int skip_value(S *s, int depth) {
    if (depth > MAX_DEPTH) return DECLINE;
    skip_ws(s);
    if (s->p >= s->end) return DECLINE;
    unsigned char c = *s->p;
    if (c == '"') return read_string(s, 0, NULL, NULL, NULL);
    if (c == '{') {
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == '}') { s->p++; return 0; }
        while (1) {
            skip_ws(s);
            if (s->p >= s->end || *s->p != '"') return DECLINE;
            if (read_string(s, 0, NULL, NULL, NULL) < 0) return DECLINE;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':') return DECLINE;
            s->p++;
            if (skip_value(s, depth + 1) < 0) return DECLINE;
            skip_ws(s);
            if (s->p >= s->end) return DECLINE;
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == '}') { s->p++; return 0; }
            return DECLINE;
        }
    }
    if (c == '[') {
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == ']') { s->p++; return 0; }
        while (1) {
            if (skip_value(s, depth + 1) < 0) return DECLINE;
            skip_ws(s);
            if (s->p >= s->end) return DECLINE;
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == ']') { s->p++; return 0; }
            return DECLINE;
        }
    }
    if (c == 't') return skip_literal(s, "true", 4);
    if (c == 'f') return skip_literal(s, "false", 5);
    if (c == 'n') return skip_literal(s, "null", 4);
    const unsigned char *t; Py_ssize_t n; int is_int;
    return scan_number(s, &t, &n, &is_int);
}

static inline int is_null(S *s) {
    if (s->end - s->p >= 4 && bytes_eq(s->p, "null", 4)) { s->p += 4; return 1; }
    return 0;
}

enum { NUM_INT = 1, NUM_OTHER = 2 };

/* The number at q when it is an integer: its value, read while scanning (NUM_INT, *after past
 * it). NUM_OTHER when a fraction or an exponent follows the integer part (nothing is read).
 * DECLINE for bad grammar, and for an integer of more than 19 digits or beyond int64 (msgspec
 * reads those as Python ints; the msgspec path decides what they mean). */
static inline int scan_int(const unsigned char *q, const unsigned char *end, int64_t *out,
                           const unsigned char **after) {
    int neg = 0;
    if (q < end && *q == '-') { neg = 1; q++; }
    if (q >= end) return DECLINE;
    uint64_t v = 0;
    int nd = 0;
    if (*q == '0') {
        q++;
        nd = 1;
    } else if (*q >= '1' && *q <= '9') {
#ifdef FAST_DIGITS
        if (end - q >= 16) {  /* ids, sizes and microsecond timestamps: up to 16 digits */
            int k = digit_run16(q);
            if (k <= 8) {
                v = digits_value(q, k);
            } else {
                v = digits_value(q, 8) * UPOW10[k - 8] + digits_value(q + 8, k - 8);
            }
            q += k;
            nd = k;
        }
#endif
        for (; q < end && (unsigned)(*q - '0') < 10; q++, nd++)
            if (nd < 19) v = v * 10 + (*q - '0');  /* <= 19 digits: no wrap */
    } else {
        return DECLINE;
    }
    if (q >= end) return DECLINE;  /* a piece never ends inside a value */
    if (*q == '.' || *q == 'e' || *q == 'E') return NUM_OTHER;
    if (nd > 19) return DECLINE;
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return DECLINE;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return DECLINE;
        *out = (int64_t)v;
    }
    *after = q;
    return NUM_INT;
}

/* int|None into an argument column. 1: a value, 0: null. */
static int read_int_or_null(S *s, int64_t *v) {
    if (is_null(s)) return 0;
    const unsigned char *after;
    if (scan_int(s->p, s->end, v, &after) != NUM_INT) return DECLINE;
    s->p = after;
    return 1;
}

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#endif

/* The value of a number token with a fraction or exponent (grammar already checked), when
 * Clinger's fast path gives it: at most 19 significant digits forming a mantissa m <= 2^53,
 * and a power of ten 10^k with |k| <= 22. Both are exact doubles, so the one multiply or
 * divide is correctly rounded: the same double as strtod. 0 when it cannot tell (also for
 * zero, whose sign and underflow checks stay with the strtod path). */
static inline int fast_decimal(const unsigned char *t, Py_ssize_t n, double *out) {
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0  /* no double rounding in registers */
    const unsigned char *q = t, *end = t + n;
    int neg = *q == '-';
    q += neg;
    uint64_t m = 0;
    int nd = 0, e10 = 0;
    for (; q < end && (unsigned)(*q - '0') < 10; q++) {
        if (m == 0 && *q == '0') continue;  /* a leading zero */
        if (nd == 19) return 0;
        m = m * 10 + (*q - '0');
        nd++;
    }
    if (q < end && *q == '.') {
        for (q++; q < end && (unsigned)(*q - '0') < 10; q++) {
            e10--;
            if (m == 0 && *q == '0') continue;
            if (nd == 19) return 0;
            m = m * 10 + (*q - '0');
            nd++;
        }
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        int eneg = 0, x = 0;
        if (*q == '-') { eneg = 1; q++; } else if (*q == '+') { q++; }
        for (; q < end && (unsigned)(*q - '0') < 10; q++)
            if (x < 100000) x = x * 10 + (*q - '0');
        e10 += eneg ? -x : x;
    }
    if (m == 0 || m > ((uint64_t)1 << 53) || e10 < -22 || e10 > 22) return 0;
    double d = (double)m;
    d = e10 < 0 ? d / POW10[-e10] : d * POW10[e10];
    *out = neg ? -d : d;
    return 1;
#else
    (void)t; (void)n; (void)out;
    return 0;
#endif
}

/* A number token (grammar checked) in thousandths, exactly, or TSX_NONE (see C_TSX). The
 * msgspec path's pieces.milli does the same. */
static int64_t exact_milli(const unsigned char *q, Py_ssize_t n) {
    const unsigned char *end = q + n;
    int neg = *q == '-';
    q += neg;
    uint64_t v = 0;
    int nd = 0, fd = 0;
    for (; q < end && (unsigned)(*q - '0') < 10; q++) {
        if (++nd > 16) return TSX_NONE;
        v = v * 10 + (*q - '0');
    }
    if (q < end && *q == '.') {
        for (q++; q < end && (unsigned)(*q - '0') < 10; q++, fd++) {
            if (fd < 3) v = v * 10 + (*q - '0');
            else if (*q != '0') return TSX_NONE;
        }
    }
    if (q != end) return TSX_NONE;  /* an exponent */
    for (; fd < 3; fd++) v *= 10;   /* at most 19 digits: no uint64 wrap */
    if (v > (uint64_t)INT64_MAX) return TSX_NONE;
    return neg ? -(int64_t)v : (int64_t)v;
}

/* float|None: JSON ints are converted exactly as msgspec does (int64 -> double); other
 * numbers by the fast path above, or else by a correctly rounded strtod on a copy of the
 * token. With milli, the number's exact_milli too. */
static int read_float_or_null(S *s, double *v, int64_t *milli) {
    if (is_null(s)) { *v = NAN; return 0; }
    int64_t iv;
    const unsigned char *after;
    int r = scan_int(s->p, s->end, &iv, &after);
    if (r == DECLINE) return DECLINE;
    if (r == NUM_INT) {
        if (iv == 0 && *s->p == '-') return DECLINE;  /* -0: leave the sign question to msgspec */
        if (milli)
            *milli = iv > INT64_MAX / 1000 || iv < -(INT64_MAX / 1000) ? TSX_NONE : iv * 1000;
        s->p = after;
        *v = (double)iv;
        return 1;
    }
    const unsigned char *t; Py_ssize_t n; int is_int;
    if (scan_number(s, &t, &n, &is_int) < 0) return DECLINE;
    if (milli) *milli = exact_milli(t, n);
    char buf[64];
    if (n >= (Py_ssize_t)sizeof(buf)) return DECLINE;
    if (fast_decimal(t, n, v)) return 1;
    memcpy(buf, t, n);
    buf[n] = 0;
    char *e;
    double d = c_strtod(buf, &e);  /* correctly rounded, whatever the locale */
    if (e != buf + n || !isfinite(d)) return DECLINE;
    if (d == 0.0) {  /* an underflow or a negative zero: not worth matching in C */
        for (Py_ssize_t i = 0; i < n; i++)
            if ((t[i] >= '1' && t[i] <= '9') || t[i] == '-') return DECLINE;
    }
    *v = d;
    return 1;
}

/* str|None interned into `it`: id or -1 for null. */
static int read_str_or_null(S *s, Interner *it, int field, int64_t *id) {
    if (is_null(s)) { *id = -1; return 0; }
    if (s->p >= s->end || *s->p != '"') return DECLINE;
    const char *u; Py_ssize_t n;
    if (read_string(s, 1, &u, &n, NULL) < 0) return DECLINE;
    Py_ssize_t r = intern_memo(s, it, u, n, field);
    if (r < 0) { s->nomem = 1; return DECLINE; }
    *id = r;
    return 0;
}

#define key_is(k, n, lit) ((n) == (Py_ssize_t)sizeof(lit) - 1 && bytes_eq((k), (lit), (n)))

/* A string interned into `it` (id), anything else -1: a value other writers' traces may give
 * any type (kineto.Args types it Any, and keeps only a str). */
static int read_loose_str(S *s, Interner *it, int field, int64_t *id) {
    if (s->p < s->end && *s->p == '"') return read_str_or_null(s, it, field, id);
    *id = -1;
    return skip_value(s, 3);
}

/* A key at s->p: raw bytes (no escapes allowed: an escaped key could spell a field name).
 * Inlined where called (events, args, the top level): no call per key. */
HOT_INLINE int read_key(S *s, const char **k, Py_ssize_t *n) {
#if defined(__SSE2__)
    /* One 16-byte look at the whitespace before a key and the key itself (an indent and a
     * short key, as Kineto writes them): where it spans them both, no byte-wise walk. */
    if (s->end - s->p >= 16) {
        const unsigned char *p = s->p;
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i ws = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))));
        __m128i stop = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
            _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
        unsigned other = ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFF;
        unsigned stops = (unsigned)_mm_movemask_epi8(stop);
        if (other) {
            int i = __builtin_ctz(other);              /* the opening quote, if all is well */
            unsigned after = (stops >> i) >> 1;        /* stops inside the key */
            if (p[i] == '"' && after) {
                int j = i + 1 + __builtin_ctz(after);
                if (p[j] == '"') {                     /* a plain key: no escape, all ASCII */
                    *k = (const char *)p + i + 1;
                    *n = j - i - 1;
                    s->p = p + j + 1;
                    goto colon;
                }
            }
        }
    }
#endif
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"') return DECLINE;
    int esc;
    const unsigned char *start = s->p + 1;
    if (read_string(s, 0, NULL, NULL, &esc) < 0 || esc) return DECLINE;
    *k = (const char *)start;
    *n = s->p - 1 - start;
#if defined(__SSE2__)
colon:
#endif
    if (s->p < s->end && *s->p == ':') {  /* the usual: no space before the colon */
        s->p++;
    } else {
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') return DECLINE;
        s->p++;
    }
    skip_ws(s);
    return 0;
}

/* What an args key is: an int argument (its A_* column), one of these, or AK_OTHER. Matched
 * by length first (most args keys, such as "External id", match no length or one word). */
enum { AK_OTHER = -1, AK_GRID = NARGS, AK_BLOCK, AK_NAME, AK_LABELS, AK_XDOMAIN, AK_XKIND,
       AK_XLEVEL, AK_XLOGGER };

static inline int arg_key(const char *k, Py_ssize_t n) {
#define IS(lit) bytes_eq(k, lit, sizeof(lit) - 1)
    switch (n) {
    case 4:
        if (IS("cbid")) return A_CBID;
        if (IS("Addr")) return A_MEMADDR;   /* a [memory] instant's address */
        if (IS("grid")) return AK_GRID;
        if (IS("name")) return AK_NAME;
        break;
    case 5:
        if (IS("bytes")) return A_BYTES;
        if (IS("Bytes")) return A_MEMBYTES;
        if (IS("block")) return AK_BLOCK;
        if (IS("level")) return AK_XLEVEL;    /* a log record of cuptiprof's export */
        break;
    case 6:
        if (IS("device")) return A_DEVICE;
        if (IS("stream")) return A_STREAM;
        if (IS("labels")) return AK_LABELS;
        if (IS("logger")) return AK_XLOGGER;
        break;
    case 7: if (IS("context")) return A_CONTEXT; break;
    case 8:
        if (IS("graph id")) return A_XGRAPH;   /* Kineto's (CUDA 12 on) */
        if (IS("toDevice")) return A_XDSTDEV;  /* Kineto's: a peer copy's devices */
        break;
    case 9: if (IS("Device Id")) return A_DEVID; break;
    case 10: if (IS("fromDevice")) return A_XSRCDEV; break;
    case 11:
        if (IS("correlation")) return A_CORRELATION;
        if (IS("Device Type")) return A_DEVTYPE;
        if (IS("External id")) return A_EXTID;
        break;
    case 13:
        if (IS("shared memory")) return A_SMEM;
        if (IS("graph node id")) return A_XGNODE;   /* Kineto's (CUDA 12 on) */
        break;
    case 14:   /* cuptiprof's own export: a warm-up's kind (and a [memory] instant's memory
                * kind) and step, a range still open, an allocation of a memory pool */
        if (IS("cuptiprof kind")) return AK_XKIND;
        if (IS("cuptiprof step")) return A_XSTEP;
        if (IS("cuptiprof open")) return A_XOPEN;
        if (IS("cuptiprof pool")) return A_XEXTRA;
        break;
    case 15:   /* cuptiprof's own export: the range of a GPU row without its call, a graph,
                * a copy's asynchrony, a memset's value */
        if (IS("cuptiprof range")) return A_XRANGE;
        if (IS("cuptiprof graph")) return A_XGRAPH;
        if (IS("cuptiprof async")) return A_XEXTRA;
        if (IS("cuptiprof value")) return A_XEXTRA;
        break;
    case 16: if (IS("cuptiprof domain")) return AK_XDOMAIN; break;
    case 20:
        if (IS("registers per thread")) return A_REGISTERS;
        if (IS("cuptiprof graph node")) return A_XGNODE;   /* cuptiprof's export */
        if (IS("cuptiprof src device")) return A_XSRCDEV;  /* cuptiprof's export: a peer */
        if (IS("cuptiprof dst device")) return A_XDSTDEV;  /* copy's devices */
        break;
    case 21:
        if (IS("wait_on_cuda_event_id")) return A_EVENTID;   /* a sync's event */
        if (IS("cuptiprof return code")) return A_XEXTRA;   /* cuptiprof's export: a call's */
        if (IS("cuptiprof correlation")) return A_XCORR;    /* and a [memory] instant's */
        break;
    case 22: if (IS("cuptiprof dynamic smem")) return A_XDSMEM; break;   /* cuptiprof's export */
    }
    return AK_OTHER;
#undef IS
}

static int read_dims(S *s, int64_t *row, int a0, int64_t *valid) {
    if (is_null(s)) return 0;
    if (s->p >= s->end || *s->p != '[') return DECLINE;
    s->p++;
    for (int j = 0; j < 3; j++) {
        skip_ws(s);
        int64_t v;
        int r = read_int_or_null(s, &v);
        if (r != 1) return DECLINE;  /* null inside the list: msgspec rejects it */
        row[C_ARG0 + a0 + j] = v;
        skip_ws(s);
        if (s->p >= s->end) return DECLINE;
        if (j < 2) {
            if (*s->p != ',') return DECLINE;
        } else if (*s->p != ']') {
            return DECLINE;
        }
        s->p++;
    }
    *valid |= (int64_t)7 << a0;
    return 0;
}

static int read_args(S *s, int64_t *row) {
    s->p++;  /* '{' */
    skip_ws(s);
    int64_t valid = 0;
    uint32_t seen = 0;
    int seen_name = 0, seen_labels = 0, seen_xdomain = 0, seen_xkind = 0, seen_xlevel = 0,
        seen_xlogger = 0;
    if (s->p < s->end && *s->p == '}') { s->p++; row[C_VALID] = 0; return 0; }
    while (1) {
        const char *k; Py_ssize_t n;
        if (read_key(s, &k, &n) < 0) return DECLINE;
        int a = arg_key(k, n);
        if (a >= 0 && a < NARGS) {
            if (seen & (1u << a)) return DECLINE;
            seen |= 1u << a;
            int64_t v;
            int r = read_int_or_null(s, &v);
            if (r < 0) return DECLINE;
            if (r == 1) { row[C_ARG0 + a] = v; valid |= (int64_t)1 << a; }
        } else if (a == AK_GRID || a == AK_BLOCK) {
            int a0 = a == AK_GRID ? A_GRID0 : A_BLOCK0;
            if (seen & (1u << a0)) return DECLINE;
            seen |= 1u << a0;
            if (read_dims(s, row, a0, &valid) < 0) return DECLINE;
        } else if (a == AK_NAME) {
            if (seen_name++) return DECLINE;
            if (!is_null(s)) {  /* kept by nothing, but it must be a string */
                if (s->p >= s->end || *s->p != '"') return DECLINE;
                if (read_string(s, 0, NULL, NULL, NULL) < 0) return DECLINE;
            }
        } else if (a == AK_LABELS) {
            if (seen_labels++) return DECLINE;
            if (read_str_or_null(s, s->small, L_LABELS, &row[C_LABELS]) < 0) return DECLINE;
        } else if (a == AK_XDOMAIN) {   /* absent -2, null -1 (NVTX's default domain) */
            if (seen_xdomain++) return DECLINE;
            if (read_str_or_null(s, s->small, L_XDOMAIN, &row[C_XDOMAIN]) < 0) return DECLINE;
        } else if (a == AK_XKIND) {
            if (seen_xkind++) return DECLINE;
            if (read_str_or_null(s, s->small, L_XKIND, &row[C_XKIND]) < 0) return DECLINE;
        } else if (a == AK_XLEVEL) {
            if (seen_xlevel++) return DECLINE;
            if (read_loose_str(s, s->small, L_XLEVEL, &row[C_XLEVEL]) < 0) return DECLINE;
        } else if (a == AK_XLOGGER) {
            if (seen_xlogger++) return DECLINE;
            if (read_loose_str(s, s->small, L_XLOGGER, &row[C_XLOGGER]) < 0) return DECLINE;
        } else {
            if (skip_value(s, 3) < 0) return DECLINE;
        }
        skip_ws(s);
        if (s->p >= s->end) return DECLINE;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == '}') { s->p++; break; }
        return DECLINE;
    }
    row[C_VALID] = valid;
    return 0;
}

/* pid / tid: int | str | None. kind 0 none, 1 int, 2 str (value: id in small). */
static int read_id(S *s, int field, int64_t *kind, int64_t *val) {
    if (is_null(s)) return 0;
    if (s->p < s->end && *s->p == '"') {
        *kind = 2;
        return read_str_or_null(s, s->small, field, val);
    }
    int r = read_int_or_null(s, val);
    if (r < 0) return DECLINE;
    *kind = 1;
    return 0;
}

static int grow(S *s) {
    Py_ssize_t nc = s->cap ? s->cap * 2 : s->hint;
    int64_t *I = realloc(s->I, nc * NI * sizeof(int64_t));
    if (!I) { s->nomem = 1; return DECLINE; }
    s->I = I;
    double *F = realloc(s->F, nc * 2 * sizeof(double));
    if (!F) { s->nomem = 1; return DECLINE; }
    s->F = F;
    s->cap = nc;
    return 0;
}

enum { K_PH = 1, K_CAT = 2, K_NAME = 4, K_PID = 8, K_TID = 16, K_TS = 32, K_DUR = 64, K_ARGS = 128 };

static int read_event(S *s, int64_t index) {
    if (s->p >= s->end || *s->p != '{') return DECLINE;
    s->p++;
    if (s->kept == s->cap && grow(s) < 0) return DECLINE;
    int64_t *row = s->I + s->kept * NI;
    double *f = s->F + s->kept * 2;
    row[C_IDX] = index;
    row[C_CAT] = -1; row[C_PH] = -1; row[C_NAME] = -1;
    row[C_PIDK] = 0; row[C_PID] = 0; row[C_TIDK] = 0; row[C_TID] = 0;
    row[C_HASARGS] = 0; row[C_LABELS] = -1; row[C_XDOMAIN] = -2; row[C_XKIND] = -1;
    row[C_XLEVEL] = -1; row[C_XLOGGER] = -1;
    row[C_VALID] = 0;
    row[C_TSX] = TSX_NONE;
    memset(row + C_ARG0, 0, NARGS * sizeof(int64_t));
    f[0] = NAN; f[1] = NAN;
    unsigned seen = 0;
    int any = 0;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return 0; }
    while (1) {
        const char *k; Py_ssize_t n;
        if (read_key(s, &k, &n) < 0) return DECLINE;
        unsigned bit = 0;
        int r = 0;
        switch (n) {
        case 2:
            if (k[0] == 'p' && k[1] == 'h') bit = K_PH;
            else if (k[0] == 't' && k[1] == 's') bit = K_TS;
            break;
        case 3:
            if (bytes_eq(k, "cat", 3)) bit = K_CAT;
            else if (bytes_eq(k, "pid", 3)) bit = K_PID;
            else if (bytes_eq(k, "tid", 3)) bit = K_TID;
            else if (bytes_eq(k, "dur", 3)) bit = K_DUR;
            break;
        case 4:
            if (bytes_eq(k, "name", 4)) bit = K_NAME;
            else if (bytes_eq(k, "args", 4)) bit = K_ARGS;
            break;
        }
        if (bit) {
            if (seen & bit) return DECLINE;
            seen |= bit;
            any = 1;
        }
        switch (bit) {
        case K_PH: {
            if (s->p >= s->end || *s->p != '"') return DECLINE;  /* str, never null */
            const char *u; Py_ssize_t un;
            if (read_string(s, 1, &u, &un, NULL) < 0) return DECLINE;
            if (un) {  /* "" stays -1, as when absent */
                Py_ssize_t id = intern_memo(s, s->small, u, un, L_PH);
                if (id < 0) { s->nomem = 1; return DECLINE; }
                row[C_PH] = id;
            }
            break;
        }
        case K_CAT: r = read_str_or_null(s, s->small, L_CAT, &row[C_CAT]); break;
        case K_NAME: r = read_str_or_null(s, s->names, L_NAME, &row[C_NAME]); break;
        case K_PID: r = read_id(s, L_PID, &row[C_PIDK], &row[C_PID]); break;
        case K_TID: r = read_id(s, L_TID, &row[C_TIDK], &row[C_TID]); break;
        case K_TS: r = read_float_or_null(s, &f[0], &row[C_TSX]) < 0 ? DECLINE : 0; break;
        case K_DUR: r = read_float_or_null(s, &f[1], NULL) < 0 ? DECLINE : 0; break;
        case K_ARGS:
            if (is_null(s)) break;
            if (s->p >= s->end || *s->p != '{') return DECLINE;
            row[C_HASARGS] = 1;
            r = read_args(s, row);
            break;
        default:
            r = skip_value(s, 2);
        }
        if (r < 0) return DECLINE;
        skip_ws(s);
        if (s->p >= s->end) return DECLINE;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == '}') { s->p++; break; }
        return DECLINE;
    }
    if (any && !is_flow(s, row[C_CAT], row[C_PH])) s->kept++;
    return 0;
}

/* The whole piece, without the GIL: 0 taken, DECLINE otherwise. */
static int scan_text(S *s, int64_t *events, int *has_events) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != '{') return DECLINE;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; goto tail; }
    while (1) {
        const char *k; Py_ssize_t n;
        if (read_key(s, &k, &n) < 0) return DECLINE;
        if (key_is(k, n, "traceEvents")) {
            if (*has_events) return DECLINE;
            *has_events = 1;
            if (s->p >= s->end || *s->p != '[') return DECLINE;
            s->p++;
            skip_ws(s);
            if (s->p < s->end && *s->p == ']') {
                s->p++;
            } else {
                while (1) {
                    if (read_event(s, *events) < 0) return DECLINE;
                    (*events)++;
                    skip_ws(s);
                    if (s->p >= s->end) return DECLINE;
                    if (*s->p == ',') { s->p++; skip_ws(s); continue; }
                    if (*s->p == ']') { s->p++; break; }
                    return DECLINE;
                }
            }
        } else {
            /* other top-level keys: validated here, decoded by msgspec from their text */
            const unsigned char *vs = s->p;
            if (skip_value(s, 1) < 0) return DECLINE;
            for (Py_ssize_t i = 0; i < s->nmeta; i++)  /* a duplicate key: msgspec's business */
                if (s->meta[i].n == n && memcmp(s->meta[i].k, k, n) == 0) return DECLINE;
            if (s->nmeta == s->capmeta) {
                Py_ssize_t nc = s->capmeta ? s->capmeta * 2 : 16;
                struct meta *m = realloc(s->meta, nc * sizeof(*m));
                if (!m) { s->nomem = 1; return DECLINE; }
                s->meta = m;
                s->capmeta = nc;
            }
            s->meta[s->nmeta].k = k;
            s->meta[s->nmeta].n = n;
            s->meta[s->nmeta].vs = vs - s->base;
            s->meta[s->nmeta].ve = s->p - s->base;
            s->nmeta++;
        }
        skip_ws(s);
        if (s->p >= s->end) return DECLINE;
        if (*s->p == ',') { s->p++; skip_ws(s); continue; }
        if (*s->p == '}') { s->p++; break; }
        return DECLINE;
    }
tail:
    skip_ws(s);
    return s->p == s->end ? 0 : DECLINE;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *names, *small;
    if (!PyArg_ParseTuple(args, "y*O!O!", &view, &InternerType, &names, &InternerType, &small))
        return NULL;
    S s;
    memset(&s, 0, sizeof(s));
    s.base = s.p = view.buf;
    s.end = s.p + view.len;
    s.names = (Interner *)names;
    s.small = (Interner *)small;
    for (int i = 0; i < 10; i++) s.last[i] = -1;
    memset(s.flow, -1, sizeof(s.flow));
    /* Kineto events take 150-400 bytes of text: room for most pieces without growing (pages
     * are only touched as rows are written) */
    s.hint = view.len / 160 > 4096 ? view.len / 160 : 4096;
    int64_t events = 0;
    int has_events = 0, r;
    PyObject *result = NULL, *meta = NULL, *ib = NULL, *fb = NULL;
    /* Other threads (the gunzip reader, the output being opened) run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    r = scan_text(&s, &events, &has_events);
    Py_END_ALLOW_THREADS
    /* strings numbered during the scan get their str now, taken or not (a declined piece's
     * prefix was read in order, so the numbering stays first-seen) */
    if (materialize(s.names) < 0 || materialize(s.small) < 0) goto done;
    if (s.nomem) { PyErr_NoMemory(); goto done; }
    if (r < 0) { result = Py_None; Py_INCREF(result); goto done; }
    meta = PyList_New(s.nmeta);
    if (!meta) goto done;
    for (Py_ssize_t i = 0; i < s.nmeta; i++) {
        PyObject *t = Py_BuildValue("(y#nn)", s.meta[i].k, s.meta[i].n, s.meta[i].vs, s.meta[i].ve);
        if (!t) goto done;
        PyList_SET_ITEM(meta, i, t);
    }
    /* the row buffers become the columns' memory (no copy); ib and fb own them from here */
    ib = block_of(s.I, s.kept * NI * sizeof(int64_t));
    s.I = NULL;
    fb = block_of(s.F, s.kept * 2 * sizeof(double));
    s.F = NULL;
    if (!ib || !fb) goto done;
    result = Py_BuildValue("(OOnLOO)", ib, fb, s.kept, (long long)events, meta,
                           has_events ? Py_True : Py_False);
done:
    Py_XDECREF(meta);
    Py_XDECREF(ib);
    Py_XDECREF(fb);
    free(s.I);
    free(s.F);
    free(s.sbuf);
    free(s.meta);
    PyBuffer_Release(&view);
    return result;
}

/* ---- range nesting (nesting.nest's sweep) ---------------------------------------------------
 * sweep(order, keys, starts, ends, is_op, n): rows 0..n-1 are ranges, n.. calls; `order` sorts
 * them by key, then start (ranges first, longer first). Returns bytearrays of parent (int64),
 * depth (int32) per range and innermost range and op (int64) per call. */
static PyObject *sweep(PyObject *self, PyObject *args) {
    Py_buffer ob, kb, sb, eb, pb;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*n", &ob, &kb, &sb, &eb, &pb, &n)) return NULL;
    PyObject *res = NULL, *parent = NULL, *depth = NULL, *crange = NULL, *cop = NULL;
    int64_t *st = NULL;
    Py_ssize_t total = kb.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t m = total - n;
    if (ob.len != total * (Py_ssize_t)sizeof(int64_t) || sb.len != kb.len || eb.len != kb.len ||
        pb.len != n || m < 0) {
        PyErr_SetString(PyExc_ValueError, "sweep: inconsistent lengths");
        goto done;
    }
    const int64_t *order = ob.buf, *keys = kb.buf, *starts = sb.buf, *ends = eb.buf;
    const int8_t *is_op = pb.buf;
    parent = PyByteArray_FromStringAndSize(NULL, n * sizeof(int64_t));
    depth = PyByteArray_FromStringAndSize(NULL, n * sizeof(int32_t));
    crange = PyByteArray_FromStringAndSize(NULL, m * sizeof(int64_t));
    cop = PyByteArray_FromStringAndSize(NULL, m * sizeof(int64_t));
    st = PyMem_Malloc((3 * total + 1) * sizeof(int64_t));
    if (!parent || !depth || !crange || !cop || !st) { PyErr_NoMemory(); goto done; }
    int64_t *par = (int64_t *)PyByteArray_AS_STRING(parent);
    int32_t *dep = (int32_t *)PyByteArray_AS_STRING(depth);
    int64_t *cr = (int64_t *)PyByteArray_AS_STRING(crange);
    int64_t *co = (int64_t *)PyByteArray_AS_STRING(cop);
    int64_t *s_end = st, *s_idx = st + total, *s_op = st + 2 * total;
    Py_ssize_t top = 0;
    int64_t cur = 0;
    int have = 0;
    for (Py_ssize_t j = 0; j < total; j++) {
        int64_t i = order[j];
        if (i < 0 || i >= total) { PyErr_SetString(PyExc_ValueError, "sweep: bad order"); goto done; }
        int64_t k = keys[i];
        if (!have || k != cur) { cur = k; have = 1; top = 0; }
        int64_t s0 = starts[i];
        while (top && s_end[top - 1] <= s0) top--;
        if (i < n) {
            int64_t op;
            if (top) {
                par[i] = s_idx[top - 1];
                dep[i] = (int32_t)top;
                op = is_op[i] ? i : s_op[top - 1];
            } else {
                par[i] = -1;
                dep[i] = 0;
                op = is_op[i] ? i : -1;
            }
            s_end[top] = ends[i]; s_idx[top] = i; s_op[top] = op;
            top++;
        } else {
            cr[i - n] = top ? s_idx[top - 1] : -1;
            co[i - n] = top ? s_op[top - 1] : -1;
        }
    }
    res = PyTuple_Pack(4, parent, depth, crange, cop);
done:
    Py_XDECREF(parent); Py_XDECREF(depth); Py_XDECREF(crange); Py_XDECREF(cop);
    PyMem_Free(st);
    PyBuffer_Release(&ob); PyBuffer_Release(&kb); PyBuffer_Release(&sb);
    PyBuffer_Release(&eb); PyBuffer_Release(&pb);
    return res;
}

static PyMethodDef methods[] = {
    {"sweep", sweep, METH_VARARGS,
     "sweep(order, keys, starts, ends, is_op, n) -> (parent, depth, call_range, call_op)"},
    {"scan", scan, METH_VARARGS,
     "scan(text, names, small) -> (ints, floats, kept, events, meta, has_events) or None"},
    {NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kineto_scan", "Kineto trace text -> per-event columns.", -1, methods
};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
#if defined(__GLIBC__) || defined(__APPLE__)
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c_locale) return PyErr_NoMemory();
#endif
    if (PyType_Ready(&InternerType) < 0 || PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&InternerType);
    if (PyModule_AddObject(m, "Interner", (PyObject *)&InternerType) < 0) {
        Py_DECREF(&InternerType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "NI", NI);
    PyModule_AddIntConstant(m, "NARGS", NARGS);
    return m;
}
