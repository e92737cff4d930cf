"""A SIGTERM or SIGHUP that the profiled process's Python handler never gets to see.

child/signals.py ends a profiled process on SIGTERM/SIGHUP with a Python-level handler that flushes
its part file first. Python runs such a handler only when the main thread comes back to the
interpreter; a main thread blocked in C (a wait inside a library that retries on EINTR, a
collective that never returns, a semaphore entered just after the interpreter's last signal
check) never does, and the process would outlive a signal that, without cuptiprof, kills it at
once: `timeout 600 cuptiprof run -- CMD` would never end.

The interpreter writes the number of each signal it catches to its wakeup fd from the C
handler, whatever the main thread is doing. A watcher thread reads it; when the Python handler
has not started within GRACE_S, the watcher flushes the recording from its own thread (a
bounded wait) and ends the process by the signal's default action, as it would have ended.
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

GRACE_S = 1.0        # the main thread's handler normally starts within microseconds
BUSY_S = 5.0         # longer while the main thread is inside the recording's own code
FLUSH_S = 10.0       # the most the flush may take before the process ends without it
_STOP = b"\0"         # no signal is numbered 0: pause() writes it to stop the thread
_forks_hooked = False

_set_wakeup_fd = signal.set_wakeup_fd   # the real one (see _hide_fd)


class TermWatch:
    """`handled(signum)`: our handler is still the one installed (not the program's own).
    `busy()`: the main thread is inside the recording's code (a flush then would wait on its
    locks). `flush(signum)`: close the recording as the handler would."""

    def __init__(self, handled: Callable[[int], bool], busy: Callable[[], bool],
                 flush: Callable[[int], None]):
        self._handled, self._busy, self._flush = handled, busy, flush
        self._claim = threading.Lock()
        self._fds: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Listen (main thread only). False where the program already has a wakeup fd of its
        own, or this interpreter gives none: the Python handler alone ends the process then."""
        r, w = os.pipe()   # not inherited by exec'd programs
        os.set_blocking(w, False)
        try:
            old = _set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):   # not the main thread or interpreter
            os.close(r), os.close(w)
            return False
        if old != -1:
            _set_wakeup_fd(old)     # the program's own (it set one before us): keep it
            os.close(r), os.close(w)
            return False
        self._fds = (r, w)
        _hide_fd(self)
        global _forks_hooked
        if not _forks_hooked:   # once per program image: a forked child inherits the hooks
            os.register_at_fork(before=self.pause, after_in_parent=self._listen_on)
            _forks_hooked = True
        self._listen_on()
        return True

    def _listen_on(self) -> None:
        if self._fds is not None and self._thread is None:
            t = threading.Thread(target=self._listen, args=(self._fds[0],),
                                 name="cuptiprof-term-watch", daemon=True)
            try:
                t.start()
            except RuntimeError:   # a fork as the interpreter finishes (3.12+): no new thread
                return
            self._thread = t

    def pause(self) -> None:
        """Stop the thread for a fork (restarted after it): a process that forks while it has
        threads gets a warning from Python 3.12 on, and a program that forks before it has
        threads of its own must see none of ours. A signal that comes meanwhile waits in the
        pipe."""
        t, self._thread = self._thread, None
        if t is not None and self._fds is not None:
            try:
                os.write(self._fds[1], _STOP)
            except OSError:   # the pipe is full of signals: the thread is busy with them
                pass
            t.join(GRACE_S + 1.0)
            # join() returns as the thread's Python part ends, just before the OS thread
            # does; the count Python 3.12 checks is the OS's. A loaded machine may run that
            # end late (a count of tries, ~50 ms, forked beside it): a wait bounded in time
            gone = f"/proc/self/task/{t.native_id}"
            deadline = time.monotonic() + GRACE_S + 1.0
            while os.path.exists(gone) and time.monotonic() < deadline:
                time.sleep(0.0005)

    def after_fork(self) -> None:
        """A forked child shares its parent's pipe and has no watcher thread: a fresh pipe
        and thread of its own, unless the program has set a wakeup fd since."""
        if self._fds is None:
            return
        r, w = self._fds
        self._fds, self._claim, self._thread = None, threading.Lock(), None
        try:
            current = _set_wakeup_fd(-1)
        except ValueError:
            return
        os.close(r), os.close(w)   # the parent's: never read them here
        if current == w:
            self.start()
        else:
            _set_wakeup_fd(current)

    def resume(self) -> None:
        """Listen again in a forked child whose wakeup fd was cleared after the fork (the
        forkserver's workers: its server had a wakeup fd of its own)."""
        if self._fds is None and (self._handled(signal.SIGTERM) or
                                  self._handled(signal.SIGHUP)):
            try:
                current = _set_wakeup_fd(-1)
            except ValueError:
                return
            if current == -1:
                self.start()
            else:
                _set_wakeup_fd(current)

    def claim(self) -> bool:
        """True for the first of the handler and the watcher to end the process."""
        return self._claim.acquire(blocking=False)

    def _listen(self, r: int) -> None:
        while True:
            try:
                data = os.read(r, 512)
            except OSError:
                return
            if not data:
                return
            for signum in (signal.SIGTERM, signal.SIGHUP):
                if signum in data and self._handled(signum):
                    self._end_if_unheard(signum)
            if _STOP in data:   # pause(): a fork is under way
                return

    def _end_if_unheard(self, signum: int) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < GRACE_S or (self._busy() and
                                                   time.monotonic() - t0 < BUSY_S):
            if self._claim.locked():   # the handler started: it ends the process
                return
            time.sleep(0.01)
        if _main_blocks(signum) or not self.claim():
            return   # blocked: pending on the main thread, heard again once it unblocks it
        flushing = threading.Thread(target=self._flush, args=(signum,), daemon=True,
                                    name="cuptiprof-term-flush")
        try:
            flushing.start()
        except RuntimeError:   # Python 3.12+ starts no thread once the interpreter finishes
            pass
        else:
            flushing.join(FLUSH_S)
        die_of(signum)


def _main_blocks(signum: int) -> bool:
    """The main thread blocks `signum` (the program's choice; on_term leaves it pending there)."""
    try:
        with open(f"/proc/self/task/{threading.main_thread().native_id}/status") as f:
            blocked = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    return bool(blocked >> (signum - 1) & 1)


_watch: TermWatch | None = None


def _hide_fd(watch: TermWatch) -> None:
    """The program finds no wakeup fd where only the watcher's is set, as without cuptiprof (a
    library that checks it set the first one, as trio does, warns otherwise), and clearing its
    own (-1: an asyncio loop closing) puts the watcher's back, where it hears signals again."""
    global _watch
    _watch = watch
    if getattr(signal.set_wakeup_fd, "__cuptiprof__", False):
        return

    @functools.wraps(_set_wakeup_fd)
    def set_wakeup_fd(fd, /, *, warn_on_full_buffer=True):
        ours = _watch._fds[1] if _watch is not None and _watch._fds is not None else -1
        if fd == -1 and ours != -1:
            old = _set_wakeup_fd(ours, warn_on_full_buffer=False)
        else:
            old = _set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer)
            if fd == -1 and _watch is not None:
                _watch.resume()   # not listening since a fork where the program's fd was set
        return -1 if old == ours != -1 else old
    set_wakeup_fd.__cuptiprof__ = True
    signal.set_wakeup_fd = set_wakeup_fd


def die_of(signum: int) -> None:
    """End this process by `signum`'s default action, from any thread (signal.signal() is for
    the main thread only, so the C library's is called); exit 128+signum where that fails."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(signum, None)   # SIG_DFL
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        sys.stderr.flush()
        os.kill(os.getpid(), signum)
        time.sleep(1.0)
    except Exception:
        pass
    os._exit(128 + signum)
