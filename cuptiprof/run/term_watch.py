"""A SIGTERM or SIGHUP that the profiled process's Python handler never gets to see.

child.py ends a profiled process on SIGTERM/SIGHUP with a Python-level handler that flushes
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


class TermWatch:
    """`handled(signum)`: our handler is still the one installed (not the program's own).
    `busy()`: the main thread is inside the recording's code (a flush then would wait on its
    locks). `flush(signum)`: close the recording as the handler would."""

    def __init__(self, handled: Callable[[int], bool], busy: Callable[[], bool],
                 flush: Callable[[int], None]):
        self._handled, self._busy, self._flush = handled, busy, flush
        self._claim = threading.Lock()
        self.owner = 0   # the thread that claimed the ending
        self._fds: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Listen (main thread only). False where the program already has a wakeup fd of its
        own, or this interpreter gives none: the Python handler alone ends the process then."""
        r, w = os.pipe()   # not inherited by exec'd programs
        os.set_blocking(w, False)
        try:
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):   # not the main thread or interpreter
            os.close(r), os.close(w)
            return False
        if old != -1:
            signal.set_wakeup_fd(old)     # the program's own (it set one before us): keep it
            os.close(r), os.close(w)
            return False
        self._fds = (r, w)
        global _forks_hooked
        if not _forks_hooked:   # once per program image: a forked child inherits the hooks
            os.register_at_fork(before=self.pause, after_in_parent=self._listen_on)
            _forks_hooked = True
        self._listen_on()
        return True

    def _listen_on(self) -> None:
        if self._fds is not None and self._thread is None:
            self._thread = threading.Thread(target=self._listen, args=(self._fds[0],),
                                            name="cuptiprof-term-watch", daemon=True)
            self._thread.start()

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
            # does; the count Python 3.12 checks is the OS's
            gone = f"/proc/self/task/{t.native_id}"
            for _ in range(100):
                if not os.path.exists(gone):
                    break
                time.sleep(0.0005)

    def after_fork(self) -> None:
        """A forked child shares its parent's pipe and has no watcher thread: a fresh pipe
        and thread of its own, unless the program has set a wakeup fd since."""
        if self._fds is None:
            return
        r, w = self._fds
        self._fds, self._claim, self.owner, self._thread = None, threading.Lock(), 0, None
        try:
            current = signal.set_wakeup_fd(-1)
        except ValueError:
            return
        os.close(r), os.close(w)   # the parent's: never read them here
        if current == w:
            self.start()
        else:
            signal.set_wakeup_fd(current)

    def resume(self) -> None:
        """Listen again in a forked child whose wakeup fd was cleared after the fork (the
        forkserver's workers: its server had a wakeup fd of its own)."""
        if self._fds is None and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            try:
                current = signal.set_wakeup_fd(-1)
            except ValueError:
                return
            if current == -1:
                self.start()
            else:
                signal.set_wakeup_fd(current)

    def claim(self) -> bool:
        """True for the first of the handler and the watcher to end the process."""
        if not self._claim.acquire(blocking=False):
            return False
        self.owner = threading.get_ident()
        return True

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
        if not self.claim():
            return
        flushing = threading.Thread(target=self._flush, args=(signum,), daemon=True,
                                    name="cuptiprof-term-flush")
        flushing.start()
        flushing.join(FLUSH_S)
        die_of(signum)


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
