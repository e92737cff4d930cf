"""SIGTERM and SIGHUP: the part file flushed first (never from inside the recording), then the
process ended by the same signal, with the handler hidden from the program.
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading

from cuptiprof.run.child import shared
from cuptiprof.run.child.ending import _at_exit
from cuptiprof.run.child.recording import _keep_exit


_PKG = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def _install_sigterm() -> None:
    """SIGTERM and SIGHUP (a hung-up terminal or ssh session) flush this process's part file
    first, then end it by the same signal."""
    if threading.current_thread() is not threading.main_thread():
        return

    retries = [0]
    ending: list[int] = []   # the signal whose ending the main thread's handler took on

    def on_term(signum, frame):
        if signum in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
            # The main thread blocks it (a critical section of the program's): another thread
            # took it. Without cuptiprof it would wait until unblocked: leave it pending there.
            signal.pthread_kill(threading.get_ident(), signum)
            return
        if _inside_recording(frame) and retries[0] < 250:
            # Landed inside the collector or a writer (maybe within a DuckDB statement, with
            # its locks held): stopping here would re-enter them and hang. Ask again shortly.
            retries[0] += 1
            shared._put_off = signum
            try:
                threading.Timer(0.02, os.kill, (os.getpid(), signum)).start()
            except RuntimeError:
                # Python 3.12+ starts no thread once the interpreter is finishing (the flush
                # at exit): _at_exit sends it again as the flush is done. Raised from here, the
                # error would end that flush halfway.
                pass
            return
        shared._put_off = 0
        if ending:
            # A repeated signal (a hang-up the launcher forwards as well): this handler, which
            # it interrupted, is ending the process, maybe inside its claim of the ending. Only
            # this flag, one store before the claim, is never half-set.
            return
        ending.append(signum)
        if shared._term_watch is not None and not shared._term_watch.claim():
            threading.Event().wait()   # the watcher is ending the process: it kills this one
        # never got out of the recording (5 s): die with what was committed, not risk a hang
        end(signum, flush=retries[0] < 250)
        _signal(signum, signal.SIG_DFL)   # the real one: the program's would put on_term back
        os.kill(os.getpid(), signum)   # die of the signal, as the program would have

    def end(signum, flush=True):
        shared._status, shared._end_signal = "interrupted", signum
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
        shared._term_watch = watch if watch.start() else None


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
