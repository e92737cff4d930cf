"""What the modules of cuptiprof.run.child share: this process's Recorder and collector, how
the process is ending, the counts that tell --step-fn/--step-range steps from the program's own.
Each name is kept here alone, and read and set as shared.NAME (they are set again as the
process runs, execs and forks), and warn(), the one warning line every failure becomes.
"""
from __future__ import annotations

import sys
import threading

from cuptiprof.run.recorder import Recorder

_rec: Recorder | None = None
_collector = None          # the CUPTI collector's Session, when it records this process
_status = "complete"


def warn(msg: str) -> None:
    try:
        sys.stderr.write(f"cuptiprof: warning: {msg}\n")
    except Exception:
        pass


_marked = 0   # steps --step-fn / --step-range began (warm-up included), to tell them from the program's
_option_hit = False   # a --step-fn call or --step-range range began here (a step or not)
_marked_lock = threading.RLock()   # re-entrant: a step range could reach a patched NVTX push
_seen_base = 0  # steps begun before this process forked, or before this part (an exec), counted elsewhere

_put_off = 0          # a SIGTERM/SIGHUP that on_term put off: it landed inside the recording
_exit_arg = None      # what the main thread last gave sys.exit(), exit() or quit()
_end_signal = 0       # the signal this process is ending by (SIGTERM, SIGHUP)

_term_watch = None   # hears a SIGTERM/SIGHUP whose handler a main thread blocked in C never runs
