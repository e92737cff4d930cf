/* Kineto trace text -> per-event columns, in one pass, without a Python object per event.
 *
 * scan(text, names, small) reads one piece of a trace as cut by kineto.iter_docs (a JSON
 * object holding a "traceEvents" array and maybe other top-level keys) and returns
 *   (ints, floats, kept, events, meta, has_events)
 * ints:   kept x NI int64, row-major (columns: see the C_* constants, mirrored in kineto.py)
 * floats: kept x 2 float64 (ts, dur; NaN where null or absent)
 * kept:   events that carry at least one field kineto.py reads (an event with none of them,
 *         such as {}, can never change an import; its position is still counted)
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
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* int64 columns */
enum {
    C_IDX, C_CAT, C_PH, C_NAME, C_PIDK, C_PID, C_TIDK, C_TID, C_HASARGS, C_LABELS, C_VALID,
    C_ARG0 /* then NARGS argument values */
};
enum {
    A_CORRELATION, A_DEVICE, A_CONTEXT, A_STREAM, A_BYTES, A_GRID0, A_GRID1, A_GRID2,
    A_BLOCK0, A_BLOCK1, A_BLOCK2, A_REGISTERS, A_SMEM, A_CBID, A_DEVTYPE, A_DEVID, A_MEMBYTES,
    NARGS
};
#define NI (C_ARG0 + NARGS)

/* ---- interner: byte string -> id, with the Python str of each id in a list ---------------- */
typedef struct {
    PyObject_HEAD
    PyObject *strings;      /* list of str, index = id */
    char **keys;            /* utf-8 bytes per id (owned) */
    Py_ssize_t *lens;
    uint64_t *hashes;
    Py_ssize_t n, cap;
    int32_t *table;         /* open addressing: id or -1 */
    Py_ssize_t tsize;       /* power of two */
} Interner;

static uint64_t hash_bytes(const unsigned char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 1099511628211ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    h ^= h >> 32;
    return h | 1;
}

static int interner_grow(Interner *it) {
    Py_ssize_t ns = it->tsize ? it->tsize * 2 : 1024;
    int32_t *t = malloc(ns * sizeof(int32_t));
    if (!t) return -1;
    for (Py_ssize_t i = 0; i < ns; i++) t[i] = -1;
    for (Py_ssize_t id = 0; id < it->n; id++) {
        Py_ssize_t j = it->hashes[id] & (ns - 1);
        while (t[j] >= 0) j = (j + 1) & (ns - 1);
        t[j] = (int32_t)id;
    }
    free(it->table);
    it->table = t;
    it->tsize = ns;
    return 0;
}

/* id of the utf-8 bytes s[0:n], numbering them when new. Touches no Python object (the
 * scanner calls it without the GIL): the str of a new id is added to `strings` by the caller
 * (materialize). -1 when out of memory. */
static Py_ssize_t intern_bytes(Interner *it, const char *s, Py_ssize_t n) {
    uint64_t h = hash_bytes((const unsigned char *)s, n);
    if (it->tsize == 0 || (it->n + 1) * 2 > it->tsize) {
        if (interner_grow(it) < 0) return -1;
    }
    Py_ssize_t j = h & (it->tsize - 1);
    while (it->table[j] >= 0) {
        int32_t id = it->table[j];
        if (it->hashes[id] == h && it->lens[id] == n && memcmp(it->keys[id], s, n) == 0)
            return id;
        j = (j + 1) & (it->tsize - 1);
    }
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
    it->table[j] = (int32_t)id;
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
    if (it->tsize) {
        uint64_t h = hash_bytes((const unsigned char *)u, n);
        Py_ssize_t j = h & (it->tsize - 1);
        while (it->table[j] >= 0) {
            int32_t id = it->table[j];
            if (it->hashes[id] == h && it->lens[id] == n && memcmp(it->keys[id], u, n) == 0)
                return PyLong_FromLong(id);
            j = (j + 1) & (it->tsize - 1);
        }
    }
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
} S;

#define DECLINE (-1)
#define WS(c) ((c) == ' ' || (c) == '\n' || (c) == '\r' || (c) == '\t')

static inline void skip_ws(S *s) { while (s->p < s->end && WS(*s->p)) s->p++; }

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

/* A string at s->p (on the opening quote). With want, its utf-8 text is left in out and outn
 * (pointing into the input when it has no escapes, else into s->sbuf). */
static int read_string(S *s, int want, const char **out, Py_ssize_t *outn, int *escaped) {
    const unsigned char *q = s->p + 1, *end = s->end;
    const unsigned char *start = q;
    int esc = 0;
    while (1) {
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
        while (q < end && *q >= 0x20 && *q != '"' && *q != '\\' && *q < 0x80) q++;
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

/* A JSON number at s->p: strict grammar. is_int: no fraction and no exponent. */
static int scan_number(S *s, const unsigned char **tok, Py_ssize_t *len, int *is_int) {
    const unsigned char *q = s->p, *end = s->end;
    const unsigned char *t = q;
    if (q < end && *q == '-') q++;
    if (q >= end) return DECLINE;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (q < end && *q >= '0' && *q <= '9') q++;
    } else {
        return DECLINE;
    }
    int integer = 1;
    if (q < end && *q == '.') {
        integer = 0;
        q++;
        if (q >= end || *q < '0' || *q > '9') return DECLINE;
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        integer = 0;
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end || *q < '0' || *q > '9') return DECLINE;
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    if (q >= end) return DECLINE;  /* a piece never ends inside a value */
    *tok = t; *len = q - t; *is_int = integer;
    s->p = q;
    return 0;
}

/* An integer token within int64. */
static int parse_int64(const unsigned char *t, Py_ssize_t n, int64_t *out) {
    int neg = 0;
    if (*t == '-') { neg = 1; t++; n--; }
    if (n > 19) return DECLINE;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) v = v * 10 + (t[i] - '0');  /* <= 19 digits: no wrap */
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return DECLINE;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return DECLINE;
        *out = (int64_t)v;
    }
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
    if (s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) { s->p += 4; return 1; }
    return 0;
}

/* int|None into an argument column. 1: a value, 0: null. */
static int read_int_or_null(S *s, int64_t *v) {
    if (is_null(s)) return 0;
    const unsigned char *t; Py_ssize_t n; int is_int;
    if (s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) return DECLINE;
    if (scan_number(s, &t, &n, &is_int) < 0 || !is_int) return DECLINE;
    if (parse_int64(t, n, v) < 0) return DECLINE;
    return 1;
}

/* float|None: JSON ints are converted exactly as msgspec does (int64 -> double); other
 * numbers by Python's own correctly rounded parser on a copy of the token. */
static int read_float_or_null(S *s, double *v) {
    if (is_null(s)) { *v = NAN; return 0; }
    const unsigned char *t; Py_ssize_t n; int is_int;
    if (s->p >= s->end || !(*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) return DECLINE;
    if (scan_number(s, &t, &n, &is_int) < 0) return DECLINE;
    if (is_int) {
        int64_t iv;
        if (parse_int64(t, n, &iv) < 0) return DECLINE;
        if (iv == 0 && *t == '-') return DECLINE;  /* -0: leave the sign question to msgspec */
        *v = (double)iv;
        return 1;
    }
    char buf[64];
    if (n >= (Py_ssize_t)sizeof(buf)) return DECLINE;
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
static int read_str_or_null(S *s, Interner *it, int64_t *id) {
    if (is_null(s)) { *id = -1; return 0; }
    if (s->p >= s->end || *s->p != '"') return DECLINE;
    const char *u; Py_ssize_t n;
    if (read_string(s, 1, &u, &n, NULL) < 0) return DECLINE;
    Py_ssize_t r = intern_bytes(it, u, n);
    if (r < 0) { s->nomem = 1; return DECLINE; }
    *id = r;
    return 0;
}

#define key_is(k, n, lit) ((n) == (Py_ssize_t)sizeof(lit) - 1 && memcmp((k), (lit), (n)) == 0)

/* A key at s->p: raw bytes (no escapes allowed: an escaped key could spell a field name). */
static int read_key(S *s, const char **k, Py_ssize_t *n) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"') return DECLINE;
    int esc;
    const unsigned char *start = s->p + 1;
    if (read_string(s, 0, NULL, NULL, &esc) < 0 || esc) return DECLINE;
    *k = (const char *)start;
    *n = s->p - 1 - start;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return DECLINE;
    s->p++;
    skip_ws(s);
    return 0;
}

static const char *ARG_KEYS[NARGS] = {
    "correlation", "device", "context", "stream", "bytes", NULL, NULL, NULL, NULL, NULL, NULL,
    "registers per thread", "shared memory", "cbid", "Device Type", "Device Id", "Bytes"};
static Py_ssize_t ARG_LENS[NARGS];

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
    int seen_name = 0, seen_labels = 0;
    if (s->p < s->end && *s->p == '}') { s->p++; row[C_VALID] = 0; return 0; }
    while (1) {
        const char *k; Py_ssize_t n;
        if (read_key(s, &k, &n) < 0) return DECLINE;
        int a = -1;
        for (int i = 0; i < NARGS; i++)
            if (ARG_LENS[i] == n && memcmp(k, ARG_KEYS[i], n) == 0) { a = i; break; }
        if (a >= 0) {
            if (seen & (1u << a)) return DECLINE;
            seen |= 1u << a;
            int64_t v;
            int r = read_int_or_null(s, &v);
            if (r < 0) return DECLINE;
            if (r == 1) { row[C_ARG0 + a] = v; valid |= (int64_t)1 << a; }
        } else if (key_is(k, n, "grid") || key_is(k, n, "block")) {
            int a0 = k[0] == 'g' ? A_GRID0 : A_BLOCK0;
            if (seen & (1u << a0)) return DECLINE;
            seen |= 1u << a0;
            if (read_dims(s, row, a0, &valid) < 0) return DECLINE;
        } else if (key_is(k, n, "name")) {
            if (seen_name++) return DECLINE;
            if (!is_null(s)) {  /* kept by nothing, but it must be a string */
                if (s->p >= s->end || *s->p != '"') return DECLINE;
                if (read_string(s, 0, NULL, NULL, NULL) < 0) return DECLINE;
            }
        } else if (key_is(k, n, "labels")) {
            if (seen_labels++) return DECLINE;
            if (read_str_or_null(s, s->small, &row[C_LABELS]) < 0) return DECLINE;
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
static int read_id(S *s, int64_t *kind, int64_t *val) {
    if (is_null(s)) return 0;
    if (s->p < s->end && *s->p == '"') {
        *kind = 2;
        return read_str_or_null(s, s->small, val);
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
    row[C_HASARGS] = 0; row[C_LABELS] = -1; row[C_VALID] = 0;
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
            if (!memcmp(k, "cat", 3)) bit = K_CAT;
            else if (!memcmp(k, "pid", 3)) bit = K_PID;
            else if (!memcmp(k, "tid", 3)) bit = K_TID;
            else if (!memcmp(k, "dur", 3)) bit = K_DUR;
            break;
        case 4:
            if (!memcmp(k, "name", 4)) bit = K_NAME;
            else if (!memcmp(k, "args", 4)) bit = K_ARGS;
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
                Py_ssize_t id = intern_bytes(s->small, u, un);
                if (id < 0) { s->nomem = 1; return DECLINE; }
                row[C_PH] = id;
            }
            break;
        }
        case K_CAT: r = read_str_or_null(s, s->small, &row[C_CAT]); break;
        case K_NAME: r = read_str_or_null(s, s->names, &row[C_NAME]); break;
        case K_PID: r = read_id(s, &row[C_PIDK], &row[C_PID]); break;
        case K_TID: r = read_id(s, &row[C_TIDK], &row[C_TID]); break;
        case K_TS: r = read_float_or_null(s, &f[0]) < 0 ? DECLINE : 0; break;
        case K_DUR: r = read_float_or_null(s, &f[1]) < 0 ? DECLINE : 0; break;
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
    if (any) s->kept++;
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
    ib = PyByteArray_FromStringAndSize((const char *)s.I, s.kept * NI * sizeof(int64_t));
    fb = PyByteArray_FromStringAndSize((const char *)s.F, s.kept * 2 * sizeof(double));
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
    for (int i = 0; i < NARGS; i++) ARG_LENS[i] = ARG_KEYS[i] ? (Py_ssize_t)strlen(ARG_KEYS[i]) : -1;
#if defined(__GLIBC__) || defined(__APPLE__)
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c_locale) return PyErr_NoMemory();
#endif
    if (PyType_Ready(&InternerType) < 0) return NULL;
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
