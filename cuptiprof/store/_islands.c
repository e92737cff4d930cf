/* Busy-time islands: the union of closed intervals per group, in one pass over the rows.
 *
 * islands(parts, k, limit=-1) -> (store, summary), or None when it gives up
 *
 * parts:   a sequence, read in order, of
 *          (codes, starts, ends) or (codes, starts, ends, remap): rows. codes: a 1-D int32 or
 *              int64 buffer (a group code per row), or an int (every row of the part in that
 *              group); starts, ends: 1-D int64 buffers of the same length, ends >= starts;
 *              remap: None or an int64 buffer, a row's group then being remap[code].
 *          (group, store, index): the islands of group `index` of an earlier result's store,
 *              as intervals of `group` (a group continued from the previous batch).
 *          Groups are 0..k-1.
 * store:   an Islands object holding each group's islands, kept as built (no copy):
 *          store.get(g) -> (starts, ends) as int64 bytes.
 * summary: bytes of 4 * k native int64: per group the number of islands, then their total
 *          length (busy time), the first island's start, the last island's end (0 for a group
 *          without rows).
 * Islands are disjoint and in order; intervals that touch or overlap merge (a new island
 * begins only where an interval starts after every end before it), the same union as a
 * running max of ends over intervals in start order.
 *
 * Each group keeps a growable array of islands. An interval that starts at or after the last
 * island's start extends it or is appended; an earlier one is merged in from the end (walking
 * back over the islands that start after its end), so rows in nearly start order cost O(1)
 * each (the last island of the group being filled stays in registers, the busy time is kept
 * as it grows, and whether an interval extends the last island or starts a new one is not a
 * branch: it is unpredictable). The walking and moving is counted: past `limit` (default
 * 32 * rows + 1e6) the call gives up and returns None (rows far from start order, e.g.
 * reversed: the caller sorts instead). The GIL is released while looping. Island arrays of freed stores are kept for
 * reuse by later calls (at most POOL_BYTES; trim() frees them): fresh memory costs a page
 * fault per 4 KiB on first touch, more than the loop itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API_VERSION 1

#if defined(__GNUC__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define LIKELY(x) (x)
#define __attribute__(x)
#endif

typedef struct { int64_t s, e; } iv_t;
/* A group: m islands in a[0..m-1] (room for cap), busy = their total length (wrapping like
 * numpy's int64 where it would overflow). */
typedef struct { iv_t *a; Py_ssize_t m, cap; uint64_t busy; } grp_t;

/* ---- reusable island arrays (the shared pool is touched with the GIL held only; a call takes
 * it all while looping and gives back what it did not use) --------------------------------- */
#define POOL_N 256
#define POOL_BYTES ((size_t)64 << 20)
typedef struct { iv_t *a[POOL_N]; Py_ssize_t cap[POOL_N]; int n; size_t bytes; } pool_t;
static pool_t pool;

static void pool_put(pool_t *p, iv_t *a, Py_ssize_t cap, size_t max_bytes)
{
    size_t b = (size_t)cap * sizeof(iv_t);
    if (!a)
        return;
    if (p->n == POOL_N || p->bytes + b > max_bytes) {
        free(a);
        return;
    }
    p->a[p->n] = a;
    p->cap[p->n] = cap;
    p->n++;
    p->bytes += b;
}

static void pool_clear(pool_t *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->a[i]);
    p->n = 0;
    p->bytes = 0;
}

/* Room for one more island in g: the smallest pooled array that is large enough, else
 * realloc. */
static int grow(grp_t *g, pool_t *lp)
{
    Py_ssize_t need = g->cap ? g->cap * 2 : 16;
    int best = -1;
    for (int i = 0; i < lp->n; i++)
        if (lp->cap[i] >= need && (best < 0 || lp->cap[i] < lp->cap[best]))
            best = i;
    if (best >= 0) {
        iv_t *a = lp->a[best];
        Py_ssize_t cap = lp->cap[best];
        lp->n--;
        lp->a[best] = lp->a[lp->n];
        lp->cap[best] = lp->cap[lp->n];
        lp->bytes -= (size_t)cap * sizeof(iv_t);
        if (g->m)
            memcpy(a, g->a, (size_t)g->m * sizeof(iv_t));
        pool_put(lp, g->a, g->cap, (size_t)-1);
        g->a = a;
        g->cap = cap;
        return 0;
    }
    iv_t *a = realloc(g->a, (size_t)need * sizeof(iv_t));
    if (!a)
        return -1;
    g->a = a;
    g->cap = need;
    return 0;
}

/* ---- the store ---------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    grp_t *groups;
    Py_ssize_t k;
} Islands;

static PyTypeObject IslandsType;

static void free_groups(grp_t *groups, Py_ssize_t k)
{
    if (!groups)
        return;
    for (Py_ssize_t g = 0; g < k; g++)
        pool_put(&pool, groups[g].a, groups[g].cap, POOL_BYTES);
    free(groups);
}

static void Islands_dealloc(Islands *self)
{
    free_groups(self->groups, self->k);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Islands_get(Islands *self, PyObject *arg)
{
    Py_ssize_t g = PyLong_AsSsize_t(arg);
    if (g == -1 && PyErr_Occurred())
        return NULL;
    if (g < 0 || g >= self->k) {
        PyErr_SetString(PyExc_IndexError, "Islands.get: no such group");
        return NULL;
    }
    const grp_t *gr = &self->groups[g];
    PyObject *s = PyBytes_FromStringAndSize(NULL, gr->m * 8);
    PyObject *e = PyBytes_FromStringAndSize(NULL, gr->m * 8);
    if (!s || !e) {
        Py_XDECREF(s);
        Py_XDECREF(e);
        return NULL;
    }
    int64_t *sp = (int64_t *)PyBytes_AS_STRING(s), *ep = (int64_t *)PyBytes_AS_STRING(e);
    for (Py_ssize_t j = 0; j < gr->m; j++) {
        sp[j] = gr->a[j].s;
        ep[j] = gr->a[j].e;
    }
    PyObject *r = PyTuple_Pack(2, s, e);
    Py_DECREF(s);
    Py_DECREF(e);
    return r;
}

static Py_ssize_t Islands_len(Islands *self) { return self->k; }

static PyMethodDef Islands_methods[] = {
    {"get", (PyCFunction)Islands_get, METH_O,
     "get(g) -> (starts, ends): group g's islands as int64 bytes"},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods Islands_seq = {.sq_length = (lenfunc)Islands_len};

static PyTypeObject IslandsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cuptiprof.store._islands.Islands",
    .tp_basicsize = sizeof(Islands),
    .tp_dealloc = (destructor)Islands_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Islands per group, as built by islands() (see the module source).",
    .tp_methods = Islands_methods,
    .tp_as_sequence = &Islands_seq,
};

/* ---- parts -------------------------------------------------------------------------------- */
typedef struct {
    Py_buffer codes, starts, ends, remap;
    int has_codes, has_remap, code_size;
    int64_t const_code;
    Py_ssize_t n, remap_n;
    const grp_t *seed;          /* (group, store, index): the islands to add */
} part_t;

enum { OK = 0, E_NOMEM, E_CODE, E_ORDER, E_GIVEUP };

/* A signed integer format of the given item size ('@', '=' or '<' byte order allowed). */
static int int_format(const Py_buffer *v, Py_ssize_t size)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == 0 || f[1] != 0 || v->itemsize != size)
        return 0;
    return strchr("bhilq", f[0]) != NULL;
}

static int get_buffer(PyObject *o, Py_buffer *v, const char *what, int allow32)
{
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        v->obj = NULL;
        return -1;
    }
    if (v->ndim != 1 || !(int_format(v, 8) || (allow32 && int_format(v, 4)))) {
        PyErr_Format(PyExc_TypeError, "islands: %s must be a 1-D %s array", what,
                     allow32 ? "int32 or int64" : "int64");
        PyBuffer_Release(v);
        v->obj = NULL;
        return -1;
    }
    return 0;
}

static void release_part(part_t *p)
{
    if (p->codes.obj) PyBuffer_Release(&p->codes);
    if (p->starts.obj) PyBuffer_Release(&p->starts);
    if (p->ends.obj) PyBuffer_Release(&p->ends);
    if (p->remap.obj) PyBuffer_Release(&p->remap);
}

static int parse_part(PyObject *t, part_t *p)
{
    memset(p, 0, sizeof *p);
    if (!PyTuple_Check(t) || (PyTuple_GET_SIZE(t) != 3 && PyTuple_GET_SIZE(t) != 4)) {
        PyErr_SetString(PyExc_TypeError, "islands: each part is a tuple (codes, starts, "
                                         "ends[, remap]) or (group, store, index)");
        return -1;
    }
    PyObject *codes = PyTuple_GET_ITEM(t, 0);
    if (PyLong_Check(codes)) {
        p->const_code = PyLong_AsLongLong(codes);
        if (p->const_code == -1 && PyErr_Occurred())
            return -1;
    }
    if (PyTuple_GET_SIZE(t) == 3 && PyObject_TypeCheck(PyTuple_GET_ITEM(t, 1), &IslandsType)) {
        Islands *st = (Islands *)PyTuple_GET_ITEM(t, 1);
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        if (i == -1 && PyErr_Occurred())
            return -1;
        if (!PyLong_Check(codes) || i < 0 || i >= st->k) {
            PyErr_SetString(PyExc_ValueError, "islands: a seed is (group, store, index)");
            return -1;
        }
        p->seed = &st->groups[i];
        p->n = p->seed->m;
        return 0;
    }
    if (get_buffer(PyTuple_GET_ITEM(t, 1), &p->starts, "starts", 0) < 0 ||
        get_buffer(PyTuple_GET_ITEM(t, 2), &p->ends, "ends", 0) < 0)
        return -1;
    p->n = p->starts.len / 8;
    if (p->ends.len / 8 != p->n) {
        PyErr_SetString(PyExc_ValueError, "islands: starts and ends differ in length");
        return -1;
    }
    if (!PyLong_Check(codes)) {
        if (get_buffer(codes, &p->codes, "codes", 1) < 0)
            return -1;
        p->has_codes = 1;
        p->code_size = (int)p->codes.itemsize;
        if (p->codes.len / p->code_size != p->n) {
            PyErr_SetString(PyExc_ValueError, "islands: codes and starts differ in length");
            return -1;
        }
    }
    if (PyTuple_GET_SIZE(t) == 4 && PyTuple_GET_ITEM(t, 3) != Py_None) {
        if (get_buffer(PyTuple_GET_ITEM(t, 3), &p->remap, "remap", 0) < 0)
            return -1;
        p->has_remap = 1;
        p->remap_n = p->remap.len / 8;
    }
    return 0;
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* [s, e] starts before the last island of g: merge it in from the end. */
static int add_early(grp_t *g, int64_t s, int64_t e, int64_t *work, pool_t *lp)
{
    Py_ssize_t m = g->m, j = m - 1;
    iv_t *a = g->a;
    while (j >= 0 && a[j].s > e)         /* islands after j start after e */
        j--;
    if (j >= 0 && a[j].e >= s) {         /* merge islands i..j with [s, e] */
        Py_ssize_t i = j;
        while (i > 0 && a[i - 1].e >= s)
            i--;
        for (Py_ssize_t x = i; x <= j; x++)
            g->busy -= (uint64_t)a[x].e - (uint64_t)a[x].s;
        if (s < a[i].s)
            a[i].s = s;
        a[i].e = e > a[j].e ? e : a[j].e;
        g->busy += (uint64_t)a[i].e - (uint64_t)a[i].s;
        if (j > i) {
            memmove(a + i + 1, a + j + 1, (size_t)(m - 1 - j) * sizeof(iv_t));
            g->m = m - (j - i);
        }
        *work += 2 * (m - 1 - j) + (j - i);
        return OK;
    }
    if (m == g->cap) {                   /* a new island at j + 1 */
        if (grow(g, lp) < 0)
            return E_NOMEM;
        a = g->a;
    }
    memmove(a + j + 2, a + j + 1, (size_t)(m - 1 - j) * sizeof(iv_t));
    a[j + 1].s = s;
    a[j + 1].e = e;
    g->m = m + 1;
    g->busy += (uint64_t)e - (uint64_t)s;
    *work += 2 * (m - 1 - j);
    return OK;
}

static inline int add_interval(grp_t *g, int64_t s, int64_t e, int64_t *work, pool_t *lp)
{
    Py_ssize_t m = g->m;
    if (LIKELY(m && m < g->cap)) {
        iv_t *last = g->a + m - 1;
        int64_t ls = last->s, le = last->e;
        if (LIKELY(s >= ls)) {           /* extends the last island, or a new one after it */
            if (s > le) {
                last[1].s = s;
                last[1].e = e;
                g->m = m + 1;
                g->busy += (uint64_t)e - (uint64_t)s;
            } else if (e > le) {
                last->e = e;
                g->busy += (uint64_t)e - (uint64_t)le;
            }
            return OK;
        }
        return add_early(g, s, e, work, lp);
    }
    if (m == 0) {
        if (g->cap == 0 && grow(g, lp) < 0)
            return E_NOMEM;
        g->a[0].s = s;
        g->a[0].e = e;
        g->m = 1;
        g->busy += (uint64_t)e - (uint64_t)s;
        return OK;
    }
    if (s > g->a[m - 1].e || s >= g->a[m - 1].s) {
        if (s <= g->a[m - 1].e) {        /* no room needed */
            if (e > g->a[m - 1].e) {
                g->busy += (uint64_t)e - (uint64_t)g->a[m - 1].e;
                g->a[m - 1].e = e;
            }
            return OK;
        }
        if (grow(g, lp) < 0)
            return E_NOMEM;
        g->a[m].s = s;
        g->a[m].e = e;
        g->m = m + 1;
        g->busy += (uint64_t)e - (uint64_t)s;
        return OK;
    }
    return add_early(g, s, e, work, lp);
}

/* The group the rows go to now, its last island held in registers (written back to the array
 * on every row, without reading it back) and its island count. */
typedef struct {
    grp_t *g;
    iv_t *a;
    Py_ssize_t m, cap;
    int64_t ls, le;
    uint64_t busy;
} cur_t;

static inline void cur_save(cur_t *c)
{
    if (c->g) {
        if (c->m) {
            c->a[c->m - 1].s = c->ls;
            c->a[c->m - 1].e = c->le;
        }
        c->g->m = c->m;
        c->g->busy = c->busy;
    }
}

static inline void cur_load(cur_t *c, grp_t *g)
{
    c->g = g;
    c->a = g->a;
    c->m = g->m;
    c->cap = g->cap;
    c->ls = c->m ? c->a[c->m - 1].s : 0;
    c->le = c->m ? c->a[c->m - 1].e : 0;
    c->busy = g->busy;
}

enum { ONE_GROUP, CODES32, CODES64 };

/* The rows of one part. `mode` is a constant in each call, so each mode gets its own loop. */
static inline __attribute__((always_inline)) int
run_rows(const part_t *p, int mode, grp_t *groups, Py_ssize_t k, int64_t limit, int64_t *work,
         pool_t *lp)
{
    const int64_t *st = (const int64_t *)p->starts.buf, *en = (const int64_t *)p->ends.buf;
    const int64_t *remap = p->has_remap ? (const int64_t *)p->remap.buf : NULL;
    const int32_t *c32 = (const int32_t *)p->codes.buf;
    const int64_t *c64 = (const int64_t *)p->codes.buf;
    const Py_ssize_t n = p->n, remap_n = p->remap_n;
    int64_t g = p->const_code, gcur = -1;
    cur_t c = {0};
    int rc = OK;
    if (mode == ONE_GROUP) {
        if (remap) {
            if (g < 0 || g >= p->remap_n)
                return E_CODE;
            g = remap[g];
        }
        if (p->n && (g < 0 || g >= k))
            return E_CODE;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        if (mode != ONE_GROUP) {
            g = mode == CODES32 ? (int64_t)c32[r] : c64[r];
            if (remap) {
                if ((uint64_t)g >= (uint64_t)remap_n) {
                    rc = E_CODE;
                    break;
                }
                g = remap[g];
            }
            if ((uint64_t)g >= (uint64_t)k) {
                rc = E_CODE;
                break;
            }
        }
        int64_t s = st[r], e = en[r];
        if (e < s) {
            rc = E_ORDER;
            break;
        }
        if (g != gcur) {
            cur_save(&c);
            cur_load(&c, &groups[g]);
            gcur = g;
            if (c.m == 0) {              /* a group's first interval (groups begin here) */
                if (c.cap == 0 && grow(c.g, lp) < 0) {
                    rc = E_NOMEM;
                    break;
                }
                c.a = c.g->a;
                c.cap = c.g->cap;
                c.m = 1;
                c.ls = s;
                c.le = e;
                c.busy += (uint64_t)e - (uint64_t)s;
                continue;
            }
        }
        if (c.m == c.cap) {              /* room for one more island */
            cur_save(&c);
            if (grow(c.g, lp) < 0) {
                rc = E_NOMEM;
                break;
            }
            cur_load(&c, c.g);
        }
        if (s < c.ls) {                  /* before the last island: merged in from the end */
            cur_save(&c);
            rc = add_early(c.g, s, e, work, lp);
            if (rc == OK && *work > limit)
                rc = E_GIVEUP;
            if (rc)
                break;
            cur_load(&c, c.g);
            continue;
        }
        /* Extends the last island, or starts a new one after it: no branch on which (it is
         * unpredictable). The last island is written back on every row, so a new one only
         * moves the count on; it starts after the last one's end, so the new end is the
         * larger either way. */
        int64_t app = s > c.le, mask = -app, le = e > c.le ? e : c.le;
        c.a[c.m - 1].s = c.ls;
        c.a[c.m - 1].e = c.le;
        c.m += app;
        c.ls = (s & mask) | (c.ls & ~mask);
        /* busy grows by the new island's length, or by how far the last one now reaches */
        c.busy += (uint64_t)le - (uint64_t)((s & mask) | (c.le & ~mask));
        c.le = le;
    }
    cur_save(&c);
    return rc;
}

static int run_part(const part_t *p, grp_t *groups, Py_ssize_t k, int64_t limit, int64_t *work,
                    pool_t *lp)
{
    if (p->seed) {
        int64_t g = p->const_code;
        if (g < 0 || g >= k)
            return E_CODE;
        for (Py_ssize_t r = 0; r < p->n; r++) {
            int rc = add_interval(&groups[g], p->seed->a[r].s, p->seed->a[r].e, work, lp);
            if (rc)
                return rc;
        }
        return *work > limit ? E_GIVEUP : OK;
    }
    if (!p->has_codes)
        return run_rows(p, ONE_GROUP, groups, k, limit, work, lp);
    if (p->code_size == 4)
        return run_rows(p, CODES32, groups, k, limit, work, lp);
    return run_rows(p, CODES64, groups, k, limit, work, lp);
}

static PyObject *islands(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"parts", "k", "limit", NULL};
    PyObject *seq_in, *seq = NULL, *result = NULL, *sum = NULL;
    Py_ssize_t k, np_ = 0, n = 0;
    long long limit = -1;
    part_t *parts = NULL;
    grp_t *groups = NULL;
    pool_t *lp = NULL;
    int rc = OK;
    int64_t work = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On|L", kwlist, &seq_in, &k, &limit))
        return NULL;
    if (k < 0) {
        PyErr_SetString(PyExc_ValueError, "islands: k must not be negative");
        return NULL;
    }
    seq = PySequence_Fast(seq_in, "islands: parts must be a sequence");
    if (!seq)
        return NULL;
    np_ = PySequence_Fast_GET_SIZE(seq);
    parts = calloc(np_ ? (size_t)np_ : 1, sizeof(part_t));
    groups = calloc(k ? (size_t)k : 1, sizeof(grp_t));
    lp = malloc(sizeof(pool_t));
    if (lp)
        lp->n = 0;
    sum = PyBytes_FromStringAndSize(NULL, 4 * k * 8);
    if (!sum)
        goto done;
    if (!parts || !groups || !lp) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < np_; i++) {
        if (parse_part(PySequence_Fast_GET_ITEM(seq, i), &parts[i]) < 0) {
            release_part(&parts[i]);
            np_ = i;
            goto done;
        }
        n += parts[i].n;
    }
    if (limit < 0)
        limit = 32 * (long long)n + 1000000;
    *lp = pool;                          /* this call takes the pooled arrays */
    pool.n = 0;
    pool.bytes = 0;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < np_ && rc == OK; i++)
        rc = run_part(&parts[i], groups, k, (int64_t)limit, &work, lp);
    if (rc == OK) {
        int64_t *cnt = (int64_t *)PyBytes_AS_STRING(sum), *busy = cnt + k, *first = cnt + 2 * k,
                *last = cnt + 3 * k;
        for (Py_ssize_t g = 0; g < k; g++) {
            const grp_t *gr = &groups[g];
            cnt[g] = gr->m;
            busy[g] = (int64_t)gr->busy;
            first[g] = gr->m ? gr->a[0].s : 0;
            last[g] = gr->m ? gr->a[gr->m - 1].e : 0;
        }
    }
    Py_END_ALLOW_THREADS

    for (int i = 0; i < lp->n; i++)      /* and gives back those it did not use */
        pool_put(&pool, lp->a[i], lp->cap[i], POOL_BYTES);
    lp->n = 0;
    if (rc == E_GIVEUP) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (rc == E_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (rc == E_CODE) {
        PyErr_SetString(PyExc_ValueError, "islands: a group code is out of range");
        goto done;
    }
    if (rc == E_ORDER) {
        PyErr_SetString(PyExc_ValueError, "islands: an interval ends before it starts");
        goto done;
    }
    {
        Islands *st = PyObject_New(Islands, &IslandsType);
        if (!st)
            goto done;
        st->groups = groups;
        st->k = k;
        groups = NULL;
        result = Py_BuildValue("(NO)", (PyObject *)st, sum);
    }
done:
    free_groups(groups, k);
    if (parts) {
        for (Py_ssize_t i = 0; i < np_; i++)
            release_part(&parts[i]);
        free(parts);
    }
    if (lp) {
        for (int i = 0; i < lp->n; i++)
            free(lp->a[i]);
        free(lp);
    }
    Py_XDECREF(seq);
    Py_XDECREF(sum);
    return result;
}

static PyObject *trim(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    pool_clear(&pool);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"islands", (PyCFunction)(void (*)(void))islands, METH_VARARGS | METH_KEYWORDS,
     "islands(parts, k, limit=-1) -> (store, summary), or None when the rows are too far "
     "from start order (see the module source)."},
    {"trim", trim, METH_NOARGS, "Free the island arrays kept for reuse."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_islands",
                                    "Busy-time islands per group (union of intervals).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__islands(void)
{
    if (PyType_Ready(&IslandsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&IslandsType);
    if (PyModule_AddObject(m, "Islands", (PyObject *)&IslandsType) < 0 ||
        PyModule_AddIntConstant(m, "API", API_VERSION) < 0) {
        Py_DECREF(&IslandsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
