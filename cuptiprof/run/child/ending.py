"""How this process ends: its recording closed at exit, the exit status it ends with (sys.exit's
argument, an uncaught exception, Ctrl-C, a signal), and the notes on its steps left for the launcher.
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading

from cuptiprof.run.child import shared
from cuptiprof.run.child.shared import warn
from cuptiprof.run.child.step_fn import _step_fn_mark
from cuptiprof.run.child.steps import MIXED_STEPS, _mixed_steps, _steps_seen


# -- the end -------------------------------------------------------------------------------------
def _at_exit(ending: bool = False) -> None:
    """`ending`: the interpreter's exit or a signal ends the process right after, so its exit
    status is known here (not so in a multiprocessing worker's finalizers, before its os._exit)."""
    _close_recording(shared._status, _exit_status() if ending else None)
    if _ctrl_c:
        _exit_as_sigint()
    if shared._put_off and threading.current_thread() is threading.main_thread():
        # A SIGTERM/SIGHUP that landed in this very flush was put off (on_term), and its
        # retry, a timer thread, cannot run once the interpreter finishes: the process would
        # exit as if none had come. Out of the recording now: have on_term end it.
        signum, shared._put_off = shared._put_off, 0
        os.kill(os.getpid(), signum)


def _exit_status() -> int:
    """The status this process's parent will see, kept in its end marker: a `cuptiprof merge`
    of the parts of a run whose launcher was killed takes the command's from there. A
    SystemExit raised directly (not through sys.exit/exit) is not seen here, nor one the program
    caught and went on from: the status _watch_exit() has written wins over this one."""
    if shared._end_signal:
        return 128 + shared._end_signal
    # set by Python for the exception that ends the program, whichever excepthook prints it
    last = getattr(sys, "last_type", None)
    if _ctrl_c or isinstance(last, type) and issubclass(last, KeyboardInterrupt):
        return 128 + signal.SIGINT
    if shared._status == "failed" or last is not None:
        return 1
    from cuptiprof.collect.exit_status import _os_exit_status   # sys.exit()'s rule, one place

    return _os_exit_status(shared._exit_arg)


def _note_exit_status() -> None:
    """Python ends with the status sys.exit() is given, and atexit handlers never learn it:
    note it on the way (exit() and quit() raise SystemExit themselves)."""
    def noting(fn, at: int):   # at: the status's place among the arguments
        if getattr(fn, "__cuptiprof_exit__", False):
            return fn

        @functools.wraps(fn)
        def wrapper(*args, **kw):
            if threading.current_thread() is threading.main_thread():   # elsewhere: the thread ends
                shared._exit_arg = args[at] if len(args) > at else kw.get("code")
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
    if shared._rec is None or not (shared._rec.s.step_range or shared._rec.s.step_fn) or shared._rec.s.step_range == "step":
        return   # --step-range step: the program's own cuptiprof.range('step') is what it names
    # the collector counts the steps of a cuptiprof.range(NAME) of --step-range NAME itself
    if shared._marked or getattr(shared._collector, "range_steps_seen", 0):
        _step_fn_mark("steps.option-marked", "")
    elif _steps_seen() - shared._seen_base > 0:
        _step_fn_mark("steps.own-only", "")
        # called (or opened), but each time inside a step of the program's: a range of that step
        if shared._option_hit or getattr(shared._rec, "step_range_seen", False) or \
                getattr(shared._collector, "_range_step_seen", False):
            _step_fn_mark("steps.option-inside", "")


def _close_recording(status: str, exit_status: int | None = None) -> None:
    _note_step_option()
    mixed = _mixed_steps()
    if mixed is not None:
        warn(mixed)
        try:
            if shared._collector is not None:   # by the collector: a daemon thread may be flushing
                shared._collector._note_problem(MIXED_STEPS, mixed)
            elif shared._rec is not None and shared._rec.mode != "time":
                shared._rec._quality(MIXED_STEPS, None, mixed)
        except Exception:
            pass
    if shared._collector is not None:
        try:
            shared._collector.stop(status=status)
        except Exception as exc:
            warn(f"the collector could not finish: {exc}")
    if shared._rec is not None:
        shared._rec.close(status, exit_status)


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
        global _ctrl_c
        shared._status = "interrupted" if issubclass(tp, KeyboardInterrupt) else "failed"
        _ctrl_c = issubclass(tp, KeyboardInterrupt)
        prev(tp, value, tb)

    sys.excepthook = hook
