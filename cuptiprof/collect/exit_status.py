"""The exit status of a process that ends with a profile still running: sys.exit watched
(_ExitWatch), and the run closed by the atexit handler as complete, interrupted or failed."""
from __future__ import annotations

import sys
import threading
from typing import Any

from cuptiprof.errors import stderr_line

# atexit runs after Python has taken the exit status out of the SystemExit that ends the
# program: nothing in Python can read it then. While a profile runs, sys.exit is wrapped so that
# the SystemExit it raises carries an _ExitWatch (a local of the wrapper's frame, which the
# traceback keeps): freed with no Python frame on the stack, the exception reached the top and
# is ending the program; a SystemExit caught, or ending a thread, is freed inside Python code.
_exit_code: list = []     # [code] of the sys.exit that is ending the program
_exit_prev: list = [sys.exit]   # what the wrapper calls: sys.exit as it was when wrapped


class _ExitWatch:
    __slots__ = ("code",)

    def __init__(self, code: Any):
        self.code = code

    def __del__(self) -> None:
        try:
            sys._getframe(1)
        except ValueError:   # no caller: Python's own handling of the SystemExit at the top
            if threading.current_thread() is threading.main_thread():
                _exit_code[:] = [self.code]
        except Exception:
            pass


def _watched_exit(status: Any = None, /) -> None:
    watch = _ExitWatch(status)  # noqa: F841 - lives as long as the traceback of what follows
    _exit_prev[0](status)


_watched_exit.__doc__ = getattr(sys.exit, "__doc__", None)


def _watch_exit(on: bool) -> None:
    if on:
        _exit_code.clear()
        if sys.exit is not _watched_exit:
            _exit_prev[0] = sys.exit
            sys.exit = _watched_exit
    elif sys.exit is _watched_exit:   # one the program set since is its own: left alone
        sys.exit = _exit_prev[0]


def _os_exit_status(code: Any) -> int:
    """The status the process exits with for sys.exit(code): 0 for None, the low 8 bits of an
    integer (255 for one beyond 64 bits), 1 for anything else (Python prints it)."""
    if code is None:
        return 0
    if isinstance(code, int):
        # one beyond a C long fails Python's conversion, which exits -1: 255, not its low bits
        return code & 0xFF if -(1 << 63) <= code < 1 << 63 else 255
    return 1


def _uncaught_status(exc_type: type) -> int:
    """The status the process exits with when an exception of exc_type reaches the top
    uncaught: 1 (Python prints the traceback), 130 for a KeyboardInterrupt (Python ends itself
    by SIGINT)."""
    return 130 if exc_type is KeyboardInterrupt else 1


class _ExitStatus:
    """Session's atexit handler."""

    def _at_exit(self) -> None:
        if not self.active:
            # stop() may be under way on a daemon thread, which the interpreter's end would
            # freeze before the file is closed: wait for it
            with self._flush_lock:
                return
        # started without `with` and never stopped: an uncaught exception ended the program
        # when Python left one in sys.last_value (printed, then atexit runs) since the start
        # (an interactive session keeps the last one it printed)
        exc = getattr(sys, "last_value", None)
        if exc is self._last_error_at_start:
            exc = None
        if exc is not None:   # Python exits 1, or by SIGINT for a KeyboardInterrupt itself
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self._exit_status = _uncaught_status(type(exc))
        elif _exit_code:      # sys.exit(code) ended the program (_ExitWatch)
            self._exit_status = _os_exit_status(_exit_code[0])
            status = "complete" if self._exit_status == 0 else "failed"
        else:
            status = "complete"
        try:
            self.stop(status)
        except Exception as exc:
            stderr_line(f"cuptiprof: warning: could not finish {self.path}: {exc}")
