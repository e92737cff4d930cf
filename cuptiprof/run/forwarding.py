"""The launcher's signals: SIGINT, SIGTERM and SIGHUP passed on to the command while it starts
and runs, and noted, not obeyed, while OUT is written from the parts.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path


@contextlib.contextmanager
def _signals_wait(out: Path):
    """While OUT is written from the parts, a second Ctrl-C, a SIGTERM (a scheduler following
    up the first) or a SIGHUP must not cost the recording: it is noted, and OUT is finished first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum, frame):
        try:
            print(f"cuptiprof: writing {out} first; it takes a moment", file=sys.stderr)
        except OSError:   # the terminal went away (SIGHUP): write OUT all the same
            pass

    old = {s: signal.signal(s, note) for s in _not_ignored()}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# Signals that end the run: passed on to the command, and never cost the merge. SIGHUP (the
# terminal or ssh session went away) used to kill the launcher alone, leaving OUT.parts.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _not_ignored() -> list:
    return [s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN]


def _interactive() -> bool:
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


class _Forwarding:
    """SIGINT, SIGTERM and SIGHUP handlers that pass the signal on to the command. Installed
    before the command starts: a signal that comes before it exists is kept and passed on by
    started(). A Ctrl-C typed in the terminal already reaches a running child (same process
    group), so SIGINT is passed on only when not from there."""

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.pending: list[int] = []
        self.got: set[int] = set()   # every signal that came, passed on or not
        self.old: dict = {}

    def __enter__(self) -> _Forwarding:
        if threading.current_thread() is threading.main_thread():
            # One ignored as the run starts (nohup's SIGHUP, a script's background job's SIGINT)
            # stays so: the command inherits the ignore and survives it, as without cuptiprof.
            self.old = {s: signal.signal(s, self._on) for s in _not_ignored()}
        return self

    def __exit__(self, *exc) -> None:
        old, self.old = self.old, {}
        for s, h in old.items():
            signal.signal(s, h)

    def _on(self, signum, frame):
        self.got.add(signum)
        if self.child is None:
            self.pending.append(signum)
        elif not (signum == signal.SIGINT and _interactive()):
            self._send(signum)

    def started(self, child: subprocess.Popen) -> None:
        self.child = child
        # the command did not exist when these came, so not even a typed Ctrl-C reached it
        pending, self.pending = self.pending, []
        for s in pending:
            self._send(s)

    def _send(self, signum: int) -> None:
        try:
            self.child.send_signal(signum)
        except ProcessLookupError:
            pass


def _wait_forwarding(child: subprocess.Popen, fwd: _Forwarding | None = None) -> int:
    """Wait for the child, passing SIGINT, SIGTERM and SIGHUP on (see _Forwarding)."""
    own = fwd is None
    if own:
        fwd = _Forwarding().__enter__()
    try:
        fwd.started(child)
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:   # pragma: no cover - the handler above replaces it
                continue
    finally:
        if own:
            fwd.__exit__()
