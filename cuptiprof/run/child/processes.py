"""The processes a profiled process makes: the program image it execs (its recording closed
first, and carried on in the new one), the children it forks and reaps (their exit statuses), a
multiprocessing worker's status, cuptiprof's variables in a subprocess's own environment.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading

from cuptiprof.run import settings as S
from cuptiprof.run.child import shared
from cuptiprof.run.child.ending import _at_exit, _close_recording
from cuptiprof.run.child.range_patches import _patch_markers
from cuptiprof.run.child.recording import _keep_exit, _open_recording, _watch_exit
from cuptiprof.run.child.shared import warn
from cuptiprof.run.child.steps import _steps_seen


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
        rec = shared._rec
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
    if shared._rec is None or shared._rec.closed:
        return None
    try:
        if shared._collector is not None:
            seen, recorded = shared._collector.steps_seen, shared._collector.steps_recorded
        else:
            seen, recorded = shared._rec.seen, shared._rec.recorded
        state = {"pid": os.getpid(), "image": shared._rec.image + 1, "seen": seen, "recorded": recorded}
        if shared._collector is not None:
            shared._collector.steps = None   # not short of steps: the next image goes on counting
        shared._rec.goes_on = True
        _close_recording("complete")
        return state
    except Exception as exc:
        warn(f"could not close the recording before exec: {exc}")
        return None


def _reopen_after_failed_exec(state: dict) -> None:
    """The exec failed (no such file...): the program goes on, and so does its recording,
    into a part file of its own."""
    s = shared._rec.s
    shared._collector = None
    try:
        _open_recording(s, str(shared._rec.parts), dict(state, exec_failed=True))
        markers = sys.modules.get("cuptiprof.markers")
        if markers is not None and shared._collector is None:
            if getattr(markers, "_session", None) is not None:
                markers._set_session(None)
            _patch_markers(markers)
        if shared._rec.mode == "cpu" and "torch" in sys.modules:
            shared._rec.start_profiler()
        # atexit runs last-registered first: the new collector's own exit handler would stop
        # it before _at_exit hands it this part's last rows (the steps_mixed note); keep
        # _at_exit first, as in the first image
        atexit.unregister(_at_exit)
        atexit.register(_at_exit, True)
    except Exception as exc:
        warn(f"recording could not go on after a failed exec: {exc}")


def _after_fork() -> None:
    if shared._rec is None:
        return
    shared._marked_lock = threading.RLock()   # another thread of the parent may have held it
    shared._exit_arg = None   # the parent's, not how this process ends
    shared._rec.forget_after_fork()
    if shared._term_watch is not None:
        shared._term_watch.after_fork()
    if shared._collector is not None:
        # CUPTI's state does not survive fork: the child's steps and ranges are recorded
        # host-side (the Recorder, as with --light), the parent's collector left untouched.
        from cuptiprof.collect.session import detach_after_fork

        detach_after_fork()
        shared._collector = None
        shared._rec.mode = "light"
        markers = sys.modules.get("cuptiprof.markers")
        if markers is not None:
            _patch_markers(markers)
    shared._marked, shared._seen_base = 0, _steps_seen()
    shared._rec.write_marker(list(sys.argv))
    _watch_exit(forked=True)   # this process's own file, not its parent's
    # multiprocessing's fork children leave through os._exit: atexit never runs there, its
    # finalizers do. A Process child clears them when it starts, then runs its after-fork
    # callbacks: register there too, or a worker that returned was counted as ended early.
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            _finalize_at_exit()
            util.register_after_fork(shared._rec, _finalize_at_exit)
        except Exception:
            pass


def _finalize_at_exit(_obj=None) -> None:
    util = sys.modules.get("multiprocessing.util")
    if util is not None and not any(getattr(f, "_callback", None) is _at_exit
                                    for f in list(util._finalizer_registry.values())):
        util.Finalize(None, _at_exit, exitpriority=-100)
