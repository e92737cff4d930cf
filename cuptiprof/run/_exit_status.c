/* The exit status a profiled process ends with, written to a file as the C library's exit()
 * runs (after Python has finished): Python's own exit handlers never learn it, and a
 * `raise SystemExit(n)` of the program's own leaves no trace they could read.
 *
 * watch(path) -> bool: from now on, exit(status) in this process writes "<status & 0xff>\n"
 * to `path` (created or replaced), whole or not at all: to `path`.tmp<pid> beside it, then
 * renamed over it, as the launcher may read it at any moment. A later call changes the path
 * (a forked child, a new program image); the handler is registered once per process image.
 * False where the C library has no on_exit (not glibc): nothing is written then.
 *
 * The handler uses no Python (the interpreter is gone by then) and no malloc, only
 * async-signal-safe calls: open/write/close/rename/unlink, the temporary name made by watch().
 * A process that ends by a signal or _exit() (os._exit) never runs it: no file.
 *
 * end_before_destructors() -> bool: from now on, exit() in this process (and in the processes
 * it forks) ends it once the status is written, C stdio flushed, without running the exit
 * handlers and C++ static destructors registered before the call. For a forked child of a
 * process that ran torch.profiler: kineto's ConfigLoader destructor waits for ever there on a
 * condition variable its parent's thread (not forked) was waiting on. Registered last, it runs
 * first; once per process image.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define API_VERSION 2

static char exit_path[PATH_MAX];
static char exit_tmp[PATH_MAX];   /* exit_path + ".tmp" + the watching pid */
static pid_t watched;   /* the process that called watch(): a child forked outside Python
                           (no watch() of its own) must not write its parent's file */

#if defined(__GLIBC__)
static int registered;

static void on_exit_write(int status, void *arg)
{
    (void)arg;
    if (!exit_path[0] || getpid() != watched) {
        return;
    }
    /* Written in place (O_TRUNC, then write) the launcher could find it empty: a status lost */
    int fd = open(exit_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return;
    }
    unsigned v = (unsigned)status & 0xffu;
    char buf[4];
    size_t n = 0;
    if (v >= 100) {
        buf[n++] = (char)('0' + v / 100);
    }
    if (v >= 10) {
        buf[n++] = (char)('0' + v / 10 % 10);
    }
    buf[n++] = (char)('0' + v % 10);
    buf[n++] = '\n';
    ssize_t w = write(fd, buf, n);
    if (close(fd) != 0 || w != (ssize_t)n || rename(exit_tmp, exit_path) != 0) {
        unlink(exit_tmp);
    }
}

static int quick_registered;

static void on_exit_quick(int status, void *arg)
{
    on_exit_write(status, arg);
    fflush(NULL);
    _exit(status);
}
#endif

static PyObject *end_before_destructors(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
#if defined(__GLIBC__)
    if (!quick_registered) {
        if (on_exit(on_exit_quick, NULL) != 0) {
            Py_RETURN_FALSE;
        }
        quick_registered = 1;
    }
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *watch(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *path;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path)) {
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(path);
    size_t len = (size_t)PyBytes_GET_SIZE(path);
    pid_t pid = getpid();
    char tmp[PATH_MAX];
    int tlen = snprintf(tmp, sizeof tmp, "%s.tmp%ld", p, (long)pid);
    if (len >= sizeof exit_path || strlen(p) != len || tlen < 0 || (size_t)tlen >= sizeof tmp) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_ValueError, "path too long or holds a NUL");
        return NULL;
    }
#if defined(__GLIBC__)
    /* the handler reads both: never a new path with the old temporary name */
    exit_path[0] = '\0';
    memcpy(exit_tmp, tmp, (size_t)tlen + 1);
    memcpy(exit_path, p, len + 1);
    watched = pid;
    Py_DECREF(path);
    if (!registered) {
        if (on_exit(on_exit_write, NULL) != 0) {
            exit_path[0] = '\0';
            Py_RETURN_FALSE;
        }
        registered = 1;
    }
    Py_RETURN_TRUE;
#else
    Py_DECREF(path);
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"watch", watch, METH_VARARGS,
     "watch(path) -> bool: write the process's exit status to path as exit() runs."},
    {"end_before_destructors", end_before_destructors, METH_NOARGS,
     "end_before_destructors() -> bool: exit() ends the process (status written, stdio "
     "flushed) before the exit handlers and destructors registered so far run."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_exit_status",
                                    "The exit status of a profiled process (cuptiprof.run.child).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__exit_status(void)
{
    PyObject *mod = PyModule_Create(&module);
    if (mod && PyModule_AddIntConstant(mod, "API", API_VERSION) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
