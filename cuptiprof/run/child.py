"""What runs inside every Python process that `cuptiprof run` starts (loaded by the bootstrap
sitecustomize before the program's own code).

It reads the settings from the environment (settings.py), then:
  * marks steps: --step-fn wraps a function (each call is one step), --step-range treats an NVTX
    range the program opens (torch.cuda.nvtx / the nvtx package) as the step;
  * captures Python logging records at or above --log-level into the `logs` table;
  * records: the CUPTI collector's Session on a GPU, or the Recorder (light mode, the no-GPU
    torch.profiler fallback, or step timing only for --overhead);
  * closes its part file at exit, after SIGTERM or SIGHUP, and in forked children.
Nothing here may break the profiled program: failures become one warning line on stderr.
"""
from __future__ import annotations

import atexit
import contextvars
import functools
import importlib
import importlib.abc
import importlib.util
import json
import logging
import os
import signal
import sys
import threading

from cuptiprof.outputs import hold_closed_std_fds
from cuptiprof.run import main_hook
from cuptiprof.run import settings as S
from cuptiprof.run.recorder import Recorder

_rec: Recorder | None = None
_collector = None          # the CUPTI collector's Session, when it records this process
_status = "complete"


def warn(msg: str) -> None:
    try:
        sys.stderr.write(f"cuptiprof: warning: {msg}\n")
    except Exception:
        pass


def activate() -> None:
    """Entry point from the bootstrap; does nothing unless `cuptiprof run` set the settings."""
    global _rec
    s = S.ChildSettings.from_env()
    parts = os.environ.get(S.PARTS_DIR)
    if s is None or not parts or not os.path.isdir(parts) or _rec is not None:
        return
    hold_closed_std_fds()   # before the part file and the SIGTERM watcher's pipe are opened
    # A command may start a Python other than the one cuptiprof is installed in (the bootstrap
    # still finds cuptiprof itself); without the store's libraries it cannot record anything.
    missing = [m for m in ("numpy", "pyarrow", "duckdb") if importlib.util.find_spec(m) is None]
    if missing:
        warn(f"{sys.executable} cannot import {', '.join(missing)}: this process is not profiled; "
             "install cuptiprof into that Python's environment, or run the command with the "
             "Python cuptiprof is installed in")
        return
    _open_recording(s, parts, _exec_state())
    if _rec.mode != "time":
        _install_logging(s.log_level)
    if _rec.mode == "cpu":
        _when_imported("torch", lambda torch: _rec.start_profiler(torch))   # _rec of the time
    if s.step_fn:
        _hook_step_fn(s.step_fn)
    if s.step_range:
        # Python NVTX calls drive the step (warm-up, flush, switch-off) with or without CUPTI.
        _when_imported("torch", _patch_torch_nvtx)
        _when_imported("nvtx", _patch_nvtx_package)
    _when_imported("cuptiprof.markers", _patch_markers)
    _when_imported("multiprocessing.process", _patch_mp_bootstrap)
    atexit.register(_at_exit, True)
    _chain_excepthook()
    _note_exit_status()
    _install_sigterm()
    os.register_at_fork(after_in_child=_after_fork)
    _install_exec()
    _when_imported("subprocess", _carry_env_in_popen)
    # how a child ended, as this process reaps it: from when it can have children
    _when_imported("subprocess", _watch_popen_reaping)
    _when_imported("multiprocessing", _watch_reaping)
    os.register_at_fork(after_in_parent=_watch_reaping)


def _open_recording(s: S.ChildSettings, parts: str, state: dict | None) -> None:
    """The Recorder (and the collector on a GPU) of this program image; `state`: what the
    image this process ran before an exec handed over (its number, the step counts)."""
    global _rec, _seen_base, _marked
    mode = {"profile": "cpu", "light": "light", "time": "time"}.get(s.mode, "cpu")
    _rec = Recorder(s, parts, mode, image=state["image"] if state else 0)
    _rec.exec_failed = bool(state and state.get("exec_failed"))
    if state:
        _rec.carry_on(state["seen"], state["recorded"])
        # this part tells the steps it sees apart from here on (after a failed exec, the
        # earlier part's --step-fn/--step-range steps are still counted in this image)
        with _marked_lock:
            _seen_base, _marked = state["seen"], 0
    _rec.write_marker(list(sys.argv) or [sys.executable])
    _watch_exit()
    if s.mode == "profile" and s.gpu:
        _start_collector(s, _rec, state)


def _watch_exit() -> None:
    """Have the C library write this image's exit status to <host>-<pid>.exit as exit() runs,
    after Python's exit handlers: the status of a `raise SystemExit(n)` too, which they never
    learn (a run merged after its launcher was killed takes it from there). Without the native
    part, the end marker's own reading alone."""
    from cuptiprof.native import extensions_enabled, load_extension

    mod = load_extension("cuptiprof.run._exit_status", api=1) if extensions_enabled() else None
    if mod is None:
        return
    try:
        mod.watch(str(_rec.part_path(".exit")))
    except (OSError, ValueError):   # a parts path too long for the C buffer: not watched
        pass


def _keep_exit(code: int) -> None:
    """Write the status this process ends with where _watch_exit() has exit() write it, for
    an ending exit() never sees (os._exit, a signal): it wins over the end marker's reading."""
    if _rec is None:
        return
    try:
        _rec.part_path(".exit").write_text(f"{code & 0xFF}\n")
    except OSError:
        pass


def _patch_mp_bootstrap(process) -> None:
    """A fork or forkserver multiprocessing worker ends with os._exit(what _bootstrap returned),
    after its recording closed in a finalizer, before that status was known: keep it."""
    base = process.BaseProcess
    orig = base._bootstrap
    if getattr(orig, "__cuptiprof_exit__", False):
        return

    @functools.wraps(orig)
    def _bootstrap(self, *args, **kw):
        code = orig(self, *args, **kw)
        if isinstance(code, int):
            _keep_exit(code)
        return code
    _bootstrap.__cuptiprof_exit__ = True
    base._bootstrap = _bootstrap


# -- how a child ended, as this process saw it ----------------------------------------------------
_reaping_watched = False
_reaped: dict[int, int] = {}   # pid -> the status written for it last


def _note_reaped(pid: int, sts: int) -> None:
    """This process reaped child `pid` with wait status `sts`: where that child is one of the
    run's profiled processes, write its exit status (128+N for signal N) to <host>-<pid>.waited,
    which the launcher takes for a process that could not keep its own (SIGKILL, os._exit, a
    signal cuptiprof does not handle). A failure to write is no concern of the program's."""
    try:
        if os.WIFEXITED(sts):
            code = os.WEXITSTATUS(sts)
        elif os.WIFSIGNALED(sts):
            code = 128 + os.WTERMSIG(sts)
        else:   # stopped or continued: not an ending
            return
        rec = _rec
        if rec is None or pid <= 0 or _reaped.get(pid) == code:
            return
        base = os.path.join(str(rec.parts), f"{rec.host}-{pid}")
        if not os.path.exists(base + ".start.json"):   # not profiled, or not of this run
            return
        tmp = f"{base}.waited.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(f"{code}\n")
        os.replace(tmp, base + ".waited")   # whole or not at all
        _reaped[pid] = code
    except Exception:
        pass


def _watch_reaping(_module=None) -> None:
    """os.waitpid, os.wait, os.wait3 and os.wait4 note the children they reap: multiprocessing's
    Popen.poll (fork, spawn) and its forkserver reap workers with os.waitpid, as does a program
    that forked. Done once, when the process first can have children."""
    global _reaping_watched
    if _reaping_watched:
        return
    _reaping_watched = True
    for name in ("waitpid", "wait", "wait3", "wait4"):
        orig = getattr(os, name, None)
        if orig is None or getattr(orig, "__cuptiprof_wait__", False):
            continue
        setattr(os, name, _reaping(orig))


def _reaping(orig):
    @functools.wraps(orig)
    def wait(*args, **kw):
        res = orig(*args, **kw)   # (pid, status[, rusage]); (0, 0) where none was ready
        try:
            if res[0] > 0:
                _note_reaped(res[0], res[1])
        except Exception:
            pass
        return res
    wait.__cuptiprof_wait__ = True
    return wait


def _watch_popen_reaping(subprocess) -> None:
    """subprocess.Popen learns its child's status in _handle_exitstatus (wait, poll, its
    __del__), whichever waitpid it called: note it there too."""
    _watch_reaping()
    popen = subprocess.Popen
    orig = getattr(popen, "_handle_exitstatus", None)   # CPython 3.10-3.13, POSIX
    if orig is None or getattr(orig, "__cuptiprof_wait__", False):
        return

    @functools.wraps(orig)
    def _handle_exitstatus(self, sts, *args, **kw):
        orig(self, sts, *args, **kw)
        try:
            _note_reaped(self.pid, sts)
        except Exception:
            pass
    _handle_exitstatus.__cuptiprof_wait__ = True
    popen._handle_exitstatus = _handle_exitstatus


def _exec_state() -> dict | None:
    """The state an earlier program image of this very process left (it exec'd this one)."""
    raw = os.environ.pop(S.EXEC_STATE, None)
    if not raw:
        return None
    try:
        d = json.loads(raw)
        if d.get("pid") != os.getpid():   # left in the environment of another process
            return None
        return {"image": int(d["image"]), "seen": int(d["seen"]), "recorded": int(d["recorded"])}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


# -- exec ----------------------------------------------------------------------------------------
def _install_exec() -> None:
    """A process that replaces its program (os.execv/os.execve, where every os.exec* ends up)
    never runs its exit handlers: its part file is closed first, and the new image, profiled
    in turn, writes its own part file and goes on counting steps."""
    for name in ("execv", "execve"):
        orig = getattr(os, name, None)
        if orig is None or getattr(orig, "__cuptiprof_exec__", False):
            continue
        setattr(os, name, _exec_wrapper(orig, with_env=name == "execve"))


def _exec_wrapper(orig, with_env: bool):
    @functools.wraps(orig)
    def exec_wrapper(path, args, *rest, **kw):
        state = _close_for_exec()
        if state is None:
            return orig(path, args, *rest, **kw)
        raw = json.dumps(state)
        saved = os.environ.get(S.EXEC_STATE)
        if with_env and rest:
            env = dict(S.carry_env(rest[0]))
            env[S.EXEC_STATE] = raw
            rest = (env,) + tuple(rest[1:])
        elif with_env and "env" in kw:
            kw = dict(kw, env={**S.carry_env(kw["env"]), S.EXEC_STATE: raw})
        else:
            os.environ[S.EXEC_STATE] = raw
        try:
            return orig(path, args, *rest, **kw)
        except BaseException:
            if saved is None:
                os.environ.pop(S.EXEC_STATE, None)
            else:
                os.environ[S.EXEC_STATE] = saved
            _reopen_after_failed_exec(state)
            raise
    exec_wrapper.__cuptiprof_exec__ = True
    return exec_wrapper


def _carry_env_in_popen(subprocess) -> None:
    """subprocess.Popen(env=...) with an environment of the program's own (a helper started
    with a clean environment) kept cuptiprof's variables out, and that Python went unprofiled
    without a word: they are added to it (S.carry_env)."""
    popen = subprocess.Popen
    init = popen.__init__
    if getattr(init, "__cuptiprof_env__", False):
        return

    @functools.wraps(init)
    def __init__(self, args, *rest, **kw):
        if kw.get("env") is not None:
            kw["env"] = S.carry_env(kw["env"])
        elif len(rest) > 9 and rest[9] is not None:     # env given by position
            rest = (*rest[:9], S.carry_env(rest[9]), *rest[10:])
        init(self, args, *rest, **kw)
    __init__.__cuptiprof_env__ = True
    popen.__init__ = __init__


def _close_for_exec() -> dict | None:
    """Close this image's recording as a complete one; the state the next image carries on
    from, or None where nothing records here."""
    if _rec is None or _rec.closed:
        return None
    try:
        if _collector is not None:
            seen, recorded = _collector.steps_seen, _collector.steps_recorded
        else:
            seen, recorded = _rec.seen, _rec.recorded
        state = {"pid": os.getpid(), "image": _rec.image + 1, "seen": seen, "recorded": recorded}
        if _collector is not None:
            _collector.steps = None   # not short of steps: the next image goes on counting
        _rec.goes_on = True
        _close_recording("complete")
        return state
    except Exception as exc:
        warn(f"could not close the recording before exec: {exc}")
        return None


def _reopen_after_failed_exec(state: dict) -> None:
    """The exec failed (no such file...): the program goes on, and so does its recording,
    into a part file of its own."""
    global _collector
    s = _rec.s
    _collector = None
    try:
        _open_recording(s, str(_rec.parts), dict(state, exec_failed=True))
        markers = sys.modules.get("cuptiprof.markers")
        if markers is not None and _collector is None:
            if getattr(markers, "_session", None) is not None:
                markers._set_session(None)
            _patch_markers(markers)
        if _rec.mode == "cpu" and "torch" in sys.modules:
            _rec.start_profiler()
        # atexit runs last-registered first: the new collector's own exit handler would stop
        # it before _at_exit hands it this part's last rows (the steps_mixed note); keep
        # _at_exit first, as in the first image
        atexit.unregister(_at_exit)
        atexit.register(_at_exit, True)
    except Exception as exc:
        warn(f"recording could not go on after a failed exec: {exc}")


# -- the CUPTI collector ------------------------------------------------------------------------
def _start_collector(s: S.ChildSettings, rec: Recorder, state: dict | None = None) -> None:
    """Start the collector's Session writing this process's part file. When the collector is
    not available the Recorder's CPU fallback records instead."""
    global _collector
    try:
        from cuptiprof.collect.session import Session  # the collector engineer's API
    except Exception as exc:
        warn(f"the CUPTI collector is not available ({exc}); recording CPU ops only")
        return
    try:
        from cuptiprof.store.writer import RunInfo

        _collector = Session(str(rec.part_path(".duckdb")), warmup=s.warmup, steps=s.steps,
                             kinds=s.kinds, step_range=None, light=False,
                             run_info=RunInfo(label=s.run_label, command=rec.command))
        _collector._launcher = True   # the program's own profile() calls then stand aside
        _collector._range_step = s.step_range
        if state:   # an exec'd image: steps go on from the old image's count
            _collector.steps_seen, _collector.steps_recorded = state["seen"], state["recorded"]
        _collector.start()
        if state and s.steps is not None and state["recorded"] >= s.steps:
            _collector._finish_recording()   # every step asked for is recorded already
        # step_range=None above: --step-range steps come from the patched Python NVTX calls
        # (cuptiprof.range("step") per matching push), which counts warm-up and recorded steps
        # live; the marker-based numbering would give each step a second range.
        # Steps go to the collector; logs too when it takes them, else to a logs-only part.
        rec.mode = "logs"
        rec.step_now = lambda: _collector.step_here() if _collector is not None else None
    except Exception as exc:
        _collector = None
        warn(f"the CUPTI collector could not start ({exc}); recording CPU ops only")


# -- steps --------------------------------------------------------------------------------------
class _Step:
    """A step marker: the Recorder's step, or a cuptiprof.range('step') for the collector."""

    __slots__ = ("name", "step", "h")

    def __init__(self, name: str, step: int | None = None):
        self.name, self.step, self.h = name, step, None

    def __enter__(self):
        try:
            if _collector is not None:
                import cuptiprof

                self.h = cuptiprof.range("step") if self.step is None else cuptiprof.range("step", step=self.step)
                _count_marked(self.h.__enter__)
            elif _rec is not None:
                self.h = _count_marked(lambda: _rec.begin(self.name, is_step=True, step=self.step))
        except Exception as exc:  # the program's step runs whatever happens here
            self.h = None
            _steps_failed(exc)
        return self

    def __exit__(self, *exc):
        if self.h is None:
            return False
        try:
            if _collector is not None:
                self.h.__exit__(*exc)
            elif _rec is not None:
                _rec.end(self.h, exc[0] if exc else None)
        except Exception as err:
            _steps_failed(err)
        return False


_steps_warned = False
_marked = 0   # steps --step-fn / --step-range began (warm-up included), to tell them from the program's
_marked_lock = threading.RLock()   # re-entrant: a step range could reach a patched NVTX push
_seen_base = 0  # steps begun before this process forked, or before this part (an exec), counted elsewhere


def _count_marked(begin):
    """begin() a step of --step-fn/--step-range, counted in _marked (0 where it opened inside a
    step: not a step). Under the lock: a step another thread began meanwhile would count twice,
    and an update of _marked lost to a thread switch would read as the program's own step (a
    spurious steps_mixed). Well under 1 us a step, nothing for other ranges."""
    global _marked
    with _marked_lock:
        before = _steps_seen()
        h = begin()
        _marked += _steps_seen() - before
    return h


def _steps_seen() -> int:
    """Steps (warm-up included) that whoever records this process has begun so far."""
    if _collector is not None:
        return _collector.steps_seen
    return _rec.seen if _rec is not None else 0


MIXED_STEPS = "steps_mixed"


def _mixed_steps() -> str | None:
    """When --step-fn/--step-range and the program's own cuptiprof.range('step') both began
    steps (neither inside the other), the two are numbered as one sequence: say so."""
    # the collector counts the cuptiprof.range(NAME) steps of --step-range NAME itself
    marked = _marked + getattr(_collector, "range_steps_seen", 0)
    own = _steps_seen() - _seen_base - marked
    if not marked or own <= 0:
        return None
    how = "--step-fn" if _rec is not None and _rec.s.step_fn else "--step-range"
    steps = f"{marked} step" + ("" if marked == 1 else "s")
    return (f"{steps} came from {how} and {own} from the program's own "
            "cuptiprof.range('step') outside them; they are counted (warm-up included) and "
            "numbered as one sequence: mark steps one way")


def _steps_failed(exc: Exception) -> None:
    global _steps_warned
    if not _steps_warned:
        _steps_warned = True
        warn(f"marking a step failed ({exc!r}); the program goes on")


# Whether a --step-fn step is open here: per thread and per asyncio task (a task starts from a
# copy of its creator's context), as the ranges are, so that tasks running the step function at
# once each get a step of their own, and one ending its step does not end another's.
_in_step: contextvars.ContextVar[bool] = contextvars.ContextVar("cuptiprof_in_step", default=False)


def _begin_step() -> _Step:
    _in_step.set(True)
    return _Step("step").__enter__()


def _end_step(st: _Step, exc_type) -> None:
    try:
        st.__exit__(exc_type, None, None)
    finally:
        _in_step.set(False)


def _wrap_step(fn):
    # Under torch.compile, dynamo would trace the wrapper and the step bookkeeping into the
    # program's graph (graph breaks, or errors on the recorder's numpy): the bookkeeping runs
    # eagerly and the wrapper's own frame is skipped, while `fn` is compiled as before.
    begin, end = _eager(_begin_step), _eager(_end_step)
    code = getattr(fn, "__code__", None)
    flags = code.co_flags if code is not None else 0
    if flags & (_CO_COROUTINE | _CO_GENERATOR | _CO_ASYNC_GENERATOR):
        # a call only creates the coroutine or generator: the step is its run, to the end
        step_fn_wrapper = _wrap_step_run(fn, flags, begin, end)
    else:
        @functools.wraps(fn)
        def step_fn_wrapper(*args, **kwargs):
            if _in_step.get():   # a recursive call is part of the same step
                return fn(*args, **kwargs)
            st = begin()
            try:
                out = fn(*args, **kwargs)
            except BaseException as exc:
                end(st, type(exc))
                raise
            end(st, None)
            return out
    step_fn_wrapper.__cuptiprof_wrapped__ = fn
    return _eager(step_fn_wrapper, recursive=False)


_CO_GENERATOR, _CO_COROUTINE, _CO_ASYNC_GENERATOR = 0x20, 0x80, 0x200   # inspect.CO_*


def _wrap_step_run(fn, flags: int, begin, end):
    """The step of an async def holds its run until it returns; that of a generator (sync or
    async) its whole iteration, from the first next() until it is exhausted, raises or is
    closed (a consumer stopping early ends it normally), as cuptiprof.range's decorator does."""
    from cuptiprof import markers

    whole = lambda: _StepRun(begin, end)   # noqa: E731
    if flags & _CO_GENERATOR:
        return markers.wrap_generator(fn, whole)
    if flags & _CO_ASYNC_GENERATOR:
        return markers.wrap_async_generator(fn, whole)

    @functools.wraps(fn)
    async def step_fn_wrapper(*args, **kwargs):
        with whole():
            return await fn(*args, **kwargs)
    return step_fn_wrapper


class _StepRun:
    """A --step-fn step around a run that outlives the call (a coroutine's, a generator's);
    none where it runs inside a step already. A consumer stopping a generator early
    (GeneratorExit) ends it normally; any other exception ends it as incomplete."""

    __slots__ = ("begin", "end", "st")

    def __init__(self, begin, end):
        self.begin, self.end, self.st = begin, end, None

    def __enter__(self):
        if not _in_step.get():
            self.st = self.begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.st is not None:
            self.end(self.st, None if exc_type is None or issubclass(exc_type, GeneratorExit)
                     else exc_type)
        return False


def _eager(fn, recursive: bool = True):
    """`fn` run eagerly where torch.compile meets it (torch.compiler.disable), so step
    bookkeeping never enters a compiled graph; `fn` itself where torch is not loaded.
    recursive=False: only fn's own frame, not what it calls."""
    disable = getattr(getattr(sys.modules.get("torch"), "compiler", None), "disable", None)
    if disable is None:
        return fn
    try:
        return disable(fn) if recursive else disable(fn, recursive=False)
    except Exception:
        return fn


def _hook_step_fn(spec: str) -> None:
    module, _, qual = spec.partition(":")

    def wrap(mod, also_main: bool = False) -> None:
        parts = step_fn_parts(qual)
        try:
            owner, rest = main_hook.walk(mod, parts[:-1])
            func = main_hook.as_function(owner)
            if func is not None:   # a function defined inside this one (main.<locals>.step)
                _wrap_inner(func, rest + parts[-1:], spec)
                return
            # As stored (a staticmethod or classmethod, not the function getattr gives), in
            # the class or the one it inherits it from
            where = owner.__mro__ if isinstance(owner, type) else (owner,)
            raw = next((k.__dict__[parts[-1]] for k in where
                        if parts[-1] in getattr(k, "__dict__", {})), None)
            if raw is None:
                raw = getattr(owner, parts[-1])
        except AttributeError:
            msg = f"--step-fn {spec}: module {module} has no {qual}"
            if also_main:   # `python -m pkg`: the package has no f, pkg/__main__.py may have it
                _main_alt.append(msg)
            else:
                _step_fn_error(msg)
            return
        why = main_hook.not_python(spec, qual, raw)
        if why:
            _step_fn_error(why)
            return
        if isinstance(raw, staticmethod):
            new = staticmethod(_wrap_step(raw.__func__))
        elif isinstance(raw, classmethod):
            new = classmethod(_wrap_step(raw.__func__))
        elif isinstance(raw, type):   # a wrapper in its place would break isinstance, subclasses
            _step_fn_error(f"--step-fn {spec}: {qual} is a class: name one of its methods "
                           f"({qual}.forward, {qual}.__call__)")
            return
        elif callable(raw):
            if getattr(raw, "__cuptiprof_wrapped__", None):
                return
            new = _wrap_step(raw)
        else:
            _step_fn_error(f"--step-fn {spec}: {qual} is not a function")
            return
        setattr(owner, parts[-1], new)
        _step_fn_mark("step-fn.hooked", "")

    main = main_hook.main_module_name()
    # `python -m pkg` runs pkg/__main__.py as __main__: pkg.__main__ names it too
    watched = module == "__main__" or (main is not None and module in (main, main + ".__main__"))
    if watched:
        # The main script runs as __main__ and is never imported by its own name: catch the
        # def as it runs. Other processes of the command (a torchrun parent, helper scripts)
        # watch their own main script, and only a run where none of them found it is an error.
        main_hook.watch(qual, wrap)
        atexit.register(_main_missing, spec)
    if module != "__main__":
        # Under `python -m pkg`, runpy imports the package pkg before it runs pkg/__main__.py as
        # __main__: pkg:f names a function of either, and only one without it in both is wrong.
        _when_imported(module, (lambda mod: wrap(mod, also_main=True)) if watched else wrap)


_main_alt: list[str] = []   # --step-fn's module (also the main module) lacked the function


def step_fn_parts(qual: str) -> list[str]:
    """'main.<locals>.step' and 'main.step' -> ['main', 'step']."""
    return [p for p in qual.split(".") if p != "<locals>"]


def _wrap_inner(func, path: list[str], spec: str) -> None:
    from cuptiprof.run import nested

    try:
        nested.decorate_inner(func, path, _wrap_step, "__cuptiprof_step__")
    except nested.NotReachable as exc:
        _step_fn_error(f"--step-fn {spec}: {exc}")
        return
    _step_fn_mark("step-fn.hooked", "")


def _main_missing(spec: str) -> None:
    if main_hook.state() != "found" and _main_alt:
        _step_fn_error(_main_alt[0])
    elif main_hook.state() != "found":
        _step_fn_mark("step-fn.main-missing",
                      f"--step-fn {spec}: the main script defined no {spec.partition(':')[2]} "
                      "at module level (for a function defined inside another one, name both: "
                      "__main__:main.denoise_step)")


def _step_fn_mark(name: str, text: str) -> bool:
    """Leave a marker for the launcher; False where none could be written."""
    if _rec is not None:
        try:
            (_rec.parts / name).write_text(text)
            return True
        except OSError:
            pass
    return False


def _step_fn_error(msg: str) -> None:
    # The launcher reads the marker and says it once, after the run: as its error, or as a
    # warning where other processes marked steps. Said here only where it cannot be.
    if not _step_fn_mark("step-fn.error", msg):
        warn(msg)


def _patch_torch_nvtx(torch) -> None:
    """--step-range NAME over torch.cuda.nvtx.range_push/range_pop (and torch.cuda.nvtx.range,
    which calls them). On a CPU build they raise; the patched ones keep counting depth."""
    try:
        nv = importlib.import_module("torch.cuda.nvtx")
    except Exception:
        return
    push, pop = nv.range_push, nv.range_pop
    stack = threading.local()

    def range_push(msg):
        st = stack.__dict__.setdefault("s", [])
        st.append(_Step(msg).__enter__() if msg == _rec.s.step_range else None)
        try:
            return push(msg)
        except RuntimeError:
            return len(st) - 1

    def range_pop():
        st = stack.__dict__.setdefault("s", [])
        h = st.pop() if st else None
        try:
            r = pop()
        except RuntimeError:
            r = len(st)
        if h is not None:
            h.__exit__(None, None, None)
        return r

    # A push inside code torch.compile traces happens when the compiled code runs, as without
    # cuptiprof (dynamo breaks the graph there either way), never while it is traced.
    nv.range_push, nv.range_pop = _eager(range_push), _eager(range_pop)


def _patch_nvtx_package(nvtx) -> None:
    push, pop = getattr(nvtx, "push_range", None), getattr(nvtx, "pop_range", None)
    if push is None or pop is None:
        return
    stack = threading.local()

    def push_range(message=None, *a, **kw):
        stack.__dict__.setdefault("s", []).append(
            _Step(message).__enter__() if message == _rec.s.step_range else None)
        return push(message, *a, **kw)

    def pop_range(*a, **kw):
        st = stack.__dict__.setdefault("s", [])
        r = pop(*a, **kw)
        h = st.pop() if st else None
        if h is not None:
            h.__exit__(None, None, None)
        return r

    nvtx.push_range, nvtx.pop_range = push_range, pop_range

    def once_torch_is_there(_torch):   # as for torch.cuda.nvtx: eager under torch.compile
        if nvtx.push_range is push_range and nvtx.pop_range is pop_range:
            nvtx.push_range, nvtx.pop_range = _eager(push_range), _eager(pop_range)
    _when_imported("torch", once_torch_is_there)
    _patch_nvtx_annotate(nvtx)


def _patch_nvtx_annotate(nvtx) -> None:
    """--step-range NAME over nvtx.annotate("NAME") as a context manager or a decorator (it
    pushes through the C library, past nvtx.push_range)."""
    base = getattr(nvtx, "annotate", None)
    if not isinstance(base, type):
        return
    name = _rec.s.step_range

    def begin():
        return _Step(name).__enter__()

    def end(h, exc):
        h.__exit__(*exc)

    def message(a):   # the range's message, as given to nvtx.annotate
        return getattr(a, "init_args", (None,))[0]

    class annotate(base):
        __doc__ = base.__doc__

        def __enter__(self):
            if message(self) == name:
                self.__dict__.setdefault("_cuptiprof_steps", []).append(_eager(begin)())
            return super().__enter__()

        def __exit__(self, *exc):
            out = super().__exit__(*exc)
            steps = self.__dict__.get("_cuptiprof_steps")
            if steps:
                _eager(end)(steps.pop(), exc)
            return out

        def __call__(self, func):
            inner = super().__call__(func)
            if (message(self) or func.__name__) != name:
                return inner

            @functools.wraps(func)
            def step(*args, **kwargs):
                h = _eager(begin)()
                try:
                    out = inner(*args, **kwargs)
                except BaseException as e:
                    _eager(end)(h, (type(e), e, e.__traceback__))
                    raise
                _eager(end)(h, (None, None, None))
                return out
            return step

    annotate.__name__ = annotate.__qualname__ = "annotate"
    annotate.__module__ = base.__module__
    nvtx.annotate = annotate


def _patch_markers(markers) -> None:
    """Without the collector, cuptiprof.range() in user code reaches the Recorder."""
    if _collector is not None or _rec is None:
        return
    try:
        from cuptiprof.run.markers_bridge import install

        install(markers, _rec)
    except Exception as exc:
        warn(f"cuptiprof.range cannot be recorded without the collector ({exc})")


# -- post-import hooks ---------------------------------------------------------------------------
_pending: dict[str, list] = {}


class _Finder(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a watched module finished executing."""

    def find_spec(self, name, path=None, target=None):
        if name not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            # A package may put another object in its place (diffusers and transformers
            # install a lazy module): hook what importers will get.
            _fire(name, sys.modules.get(name, module))

        try:
            loader.exec_module = exec_module
        except Exception:
            return spec
        return spec


_finder = _Finder()


def _fire(name: str, module) -> None:
    for cb in _pending.pop(name, []):
        try:
            cb(module)
        except Exception as exc:
            warn(f"could not hook {name}: {exc}")


def _when_imported(name: str, cb) -> None:
    mod = sys.modules.get(name)
    if mod is not None:
        _pending.setdefault(name, []).append(cb)
        _fire(name, mod)
        return
    _pending.setdefault(name, []).append(cb)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


# -- logging -------------------------------------------------------------------------------------
class _Capture(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if _collector is not None and hasattr(_collector, "log_record"):
            _collector.log_record(record)
        elif _rec is not None:
            _rec.log_record(record)


_capture = _Capture()


def _install_logging(level: str) -> None:
    """See every record a logger lets through, without adding a handler to the root logger
    (that would turn logging.basicConfig() in the program into a no-op and silence Python's
    last-resort handler): Logger.callHandlers is wrapped instead."""
    _capture.setLevel(logging.getLevelName(level.upper()) if isinstance(level, str) else level)
    orig = logging.Logger.callHandlers

    def callHandlers(self, record):
        if record.levelno >= _capture.level:
            try:
                _capture.handle(record)
            except Exception:
                pass
        return orig(self, record)

    logging.Logger.callHandlers = callHandlers
    own = logging.getLogger("cuptiprof")   # step durations: into the logs table, not the terminal
    own.setLevel(logging.INFO)
    own.propagate = False
    own.addHandler(logging.NullHandler())


# -- the end -------------------------------------------------------------------------------------
def _at_exit(ending: bool = False) -> None:
    """`ending`: the interpreter's exit or a signal ends the process right after, so its exit
    status is known here (not so in a multiprocessing worker's finalizers, before its os._exit)."""
    global _put_off
    _close_recording(_status, _exit_status() if ending else None)
    if _ctrl_c:
        _exit_as_sigint()
    if _put_off and threading.current_thread() is threading.main_thread():
        # A SIGTERM/SIGHUP that landed in this very flush was put off (on_term), and its
        # retry, a timer thread, cannot run once the interpreter finishes: the process would
        # exit as if none had come. Out of the recording now: have on_term end it.
        signum, _put_off = _put_off, 0
        os.kill(os.getpid(), signum)


_put_off = 0          # a SIGTERM/SIGHUP that on_term put off: it landed inside the recording
_exit_arg = None      # what the main thread last gave sys.exit(), exit() or quit()
_end_signal = 0       # the signal this process is ending by (SIGTERM, SIGHUP)


def _exit_status() -> int:
    """The status this process's parent will see, kept in its end marker: a `cuptiprof merge`
    of the parts of a run whose launcher was killed takes the command's from there. A
    SystemExit raised directly (not through sys.exit/exit) is not seen here, nor one the program
    caught and went on from: the status _watch_exit() has written wins over this one."""
    if _end_signal:
        return 128 + _end_signal
    # set by Python for the exception that ends the program, whichever excepthook prints it
    last = getattr(sys, "last_type", None)
    if _ctrl_c or isinstance(last, type) and issubclass(last, KeyboardInterrupt):
        return 128 + signal.SIGINT
    if _status == "failed" or last is not None:
        return 1
    arg = _exit_arg
    return 0 if arg is None else arg & 0xFF if isinstance(arg, int) else 1


def _note_exit_status() -> None:
    """Python ends with the status sys.exit() is given, and atexit handlers never learn it:
    note it on the way (exit() and quit() raise SystemExit themselves)."""
    def noting(fn, at: int):   # at: the status's place among the arguments
        if getattr(fn, "__cuptiprof_exit__", False):
            return fn

        @functools.wraps(fn)
        def wrapper(*args, **kw):
            global _exit_arg
            if threading.current_thread() is threading.main_thread():   # elsewhere: the thread ends
                _exit_arg = args[at] if len(args) > at else kw.get("code")
            return fn(*args, **kw)
        wrapper.__cuptiprof_exit__ = True
        return wrapper

    sys.exit = noting(sys.exit, 0)
    quitter = getattr(sys.modules.get("_sitebuiltins"), "Quitter", None)   # None under python -S
    if quitter is not None:
        quitter.__call__ = noting(quitter.__call__, 1)


def _note_step_option() -> None:
    """Whether --step-range/--step-fn began steps here, or only the program's own
    cuptiprof.range('step') did: the launcher says it when no process got one from the option."""
    if _rec is None or not (_rec.s.step_range or _rec.s.step_fn) or _rec.s.step_range == "step":
        return   # --step-range step: the program's own cuptiprof.range('step') is what it names
    if _marked or getattr(_rec, "step_range_seen", False) or \
            getattr(_collector, "_range_step_seen", False):   # a cuptiprof.range of that name
        _step_fn_mark("steps.option-marked", "")
    elif _steps_seen() - _seen_base > 0:
        _step_fn_mark("steps.own-only", "")


def _close_recording(status: str, exit_status: int | None = None) -> None:
    _note_step_option()
    mixed = _mixed_steps()
    if mixed is not None:
        warn(mixed)
        try:
            if _collector is not None:   # by the collector: a daemon thread may be flushing
                _collector._note_problem(MIXED_STEPS, mixed)
            elif _rec is not None and _rec.mode != "time":
                _rec._quality(MIXED_STEPS, None, mixed)
        except Exception:
            pass
    if _collector is not None:
        try:
            _collector.stop(status=status)
        except Exception as exc:
            warn(f"the collector could not finish: {exc}")
    if _rec is not None:
        _rec.close(status, exit_status)


def _exit_as_sigint() -> None:
    """Python ends a program a Ctrl-C stopped by SIGINT (status 130), unless code run at exit
    resets that (stopping torch.profiler does, and the status became 1). Everything is written
    by now and this runs after the program's own exit handlers: end the same way here."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


_ctrl_c = False   # the program ended with an uncaught KeyboardInterrupt


def _chain_excepthook() -> None:
    prev = sys.excepthook

    def hook(tp, value, tb):
        global _status, _ctrl_c
        _status = "interrupted" if issubclass(tp, KeyboardInterrupt) else "failed"
        _ctrl_c = issubclass(tp, KeyboardInterrupt)
        prev(tp, value, tb)

    sys.excepthook = hook


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# cuptiprof code that holds locks or a DuckDB connection while it runs (markers.py and this
# module only wrap the program's own code).
_INTERNAL = tuple(os.path.join(_PKG, d) for d in ("collect", "store", "analyse",
                                                  os.path.join("run", "recorder.py")))


def _inside_recording(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(_INTERNAL):
            return True
        frame = frame.f_back
    return False


_term_watch = None   # hears a SIGTERM/SIGHUP whose handler a main thread blocked in C never runs


def _install_sigterm() -> None:
    """SIGTERM and SIGHUP (a hung-up terminal or ssh session) flush this process's part file
    first, then end it by the same signal."""
    global _term_watch
    if threading.current_thread() is not threading.main_thread():
        return

    retries = [0]
    ending: list[int] = []   # the signal whose ending the main thread's handler took on

    def on_term(signum, frame):
        global _put_off
        if signum in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
            # The main thread blocks it (a critical section of the program's): another thread
            # took it. Without cuptiprof it would wait until unblocked: leave it pending there.
            signal.pthread_kill(threading.get_ident(), signum)
            return
        if _inside_recording(frame) and retries[0] < 250:
            # Landed inside the collector or a writer (maybe within a DuckDB statement, with
            # its locks held): stopping here would re-enter them and hang. Ask again shortly.
            retries[0] += 1
            _put_off = signum
            try:
                threading.Timer(0.02, os.kill, (os.getpid(), signum)).start()
            except RuntimeError:
                # Python 3.12+ starts no thread once the interpreter is finishing (the flush
                # at exit): _at_exit sends it again as the flush is done. Raised from here, the
                # error would end that flush halfway.
                pass
            return
        _put_off = 0
        if ending:
            # A repeated signal (a hang-up the launcher forwards as well): this handler, which
            # it interrupted, is ending the process, maybe inside its claim of the ending. Only
            # this flag, one store before the claim, is never half-set.
            return
        ending.append(signum)
        if _term_watch is not None and not _term_watch.claim():
            threading.Event().wait()   # the watcher is ending the process: it kills this one
        # never got out of the recording (5 s): die with what was committed, not risk a hang
        end(signum, flush=retries[0] < 250)
        _signal(signum, signal.SIG_DFL)   # the real one: the program's would put on_term back
        os.kill(os.getpid(), signum)   # die of the signal, as the program would have

    def end(signum, flush=True):
        global _status, _end_signal
        _status, _end_signal = "interrupted", signum
        if flush:
            _at_exit(True)
        # The recording may have closed before (a worker's finalizer, atexit) with another
        # status: the signal is how the process ends.
        _keep_exit(128 + signum)

    def main_busy() -> bool:
        return _inside_recording(sys._current_frames().get(threading.main_thread().ident))

    ours = [sig for sig in (signal.SIGTERM, signal.SIGHUP)
            # not the program's own, nor ignored (nohup)
            if _getsignal(sig) is signal.SIG_DFL]
    for sig in ours:
        _signal(sig, on_term)
    if ours:
        from cuptiprof.run.term_watch import TermWatch

        _hide_handler(on_term, ours)
        watch = TermWatch(lambda sig: _getsignal(sig) is on_term, main_busy, end)
        _term_watch = watch if watch.start() else None


_signal, _getsignal = signal.signal, signal.getsignal   # the real ones (_hide_handler)


def _hide_handler(on_term, sigs) -> None:
    """The program finds SIG_DFL where on_term is, as it would without cuptiprof: a handler of
    its own that chains to the one it found (`if callable(prev): prev(signum, frame)`) would
    run on_term, which ends the process by the signal before the program's own ending. And
    SIG_DFL set back (asyncio's loop as it closes, a handler that cleans up and re-raises the
    signal to die of it) puts on_term back: the process dies of the signal all the same, with
    its recording flushed."""
    def shown(h):
        return signal.SIG_DFL if h is on_term else h

    @functools.wraps(_signal)
    def signal_(signalnum, handler):
        if type(handler) in (int, signal.Handlers) and handler == signal.SIG_DFL \
                and signalnum in sigs:
            handler = on_term
        return shown(_signal(signalnum, handler))

    @functools.wraps(_getsignal)
    def getsignal(signalnum):
        return shown(_getsignal(signalnum))

    signal.signal, signal.getsignal = signal_, getsignal


def holds_process() -> bool:
    """True where `cuptiprof run` records this process (the bootstrap ran)."""
    return _rec is not None


def _after_fork() -> None:
    global _collector, _marked, _seen_base, _exit_arg, _marked_lock
    if _rec is None:
        return
    _marked_lock = threading.RLock()   # another thread of the parent may have held it
    _exit_arg = None   # the parent's, not how this process ends
    _rec.forget_after_fork()
    if _term_watch is not None:
        _term_watch.after_fork()
    if _collector is not None:
        # CUPTI's state does not survive fork: the child's steps and ranges are recorded
        # host-side (the Recorder, as with --light), the parent's collector left untouched.
        from cuptiprof.collect.session import detach_after_fork

        detach_after_fork()
        _collector = None
        _rec.mode = "light"
        markers = sys.modules.get("cuptiprof.markers")
        if markers is not None:
            _patch_markers(markers)
    _marked, _seen_base = 0, _steps_seen()
    _rec.write_marker(list(sys.argv))
    _watch_exit()   # this process's own file, not its parent's
    # multiprocessing's fork children leave through os._exit: atexit never runs there, its
    # finalizers do. A Process child clears them when it starts, then runs its after-fork
    # callbacks: register there too, or a worker that returned was counted as ended early.
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            _finalize_at_exit()
            util.register_after_fork(_rec, _finalize_at_exit)
        except Exception:
            pass


def _finalize_at_exit(_obj=None) -> None:
    util = sys.modules.get("multiprocessing.util")
    if util is not None and not any(getattr(f, "_callback", None) is _at_exit
                                    for f in list(util._finalizer_registry.values())):
        util.Finalize(None, _at_exit, exitpriority=-100)
