"""This process's recording: the Recorder, and the collector on a GPU, opened for each program
image; the exit status the C library keeps; the Python logging records the recording captures.
"""
from __future__ import annotations

import logging
import sys

from cuptiprof.run import settings as S
from cuptiprof.run.child import shared
from cuptiprof.run.child.shared import warn
from cuptiprof.run.recorder import Recorder


def _open_recording(s: S.ChildSettings, parts: str, state: dict | None) -> None:
    """The Recorder (and the collector on a GPU) of this program image; `state`: what the
    image this process ran before an exec handed over (its number, the step counts)."""
    mode = {"profile": "cpu", "light": "light", "time": "time"}.get(s.mode, "cpu")
    shared._rec = Recorder(s, parts, mode, image=state["image"] if state else 0)
    shared._rec.exec_failed = bool(state and state.get("exec_failed"))
    if state:
        shared._rec.carry_on(state["seen"], state["recorded"])
        # this part tells the steps it sees apart from here on (after a failed exec, the
        # earlier part's --step-fn/--step-range steps are still counted in this image)
        with shared._marked_lock:
            shared._seen_base, shared._marked = state["seen"], 0
    shared._rec.write_marker(list(sys.argv) or [sys.executable])
    _watch_exit()
    if s.mode == "profile" and s.gpu:
        _start_collector(s, shared._rec, state)


def _watch_exit(forked: bool = False) -> None:
    """Have the C library write this image's exit status to <host>-<pid>.exit as exit() runs,
    after Python's exit handlers: the status of a `raise SystemExit(n)` too, which they never
    learn (a run merged after its launcher was killed takes it from there). Without the native
    part, the end marker's own reading alone."""
    from cuptiprof.native import extensions_enabled, load_extension

    mod = load_extension("cuptiprof.run._exit_status", api=2) if extensions_enabled() else None
    if mod is None:
        return
    try:
        mod.watch(str(shared._rec.part_path(".exit")))
    except (OSError, ValueError):   # a parts path too long for the C buffer: not watched
        pass
    from cuptiprof.run import recorder

    if forked and recorder.kineto_started:
        # torch.profiler ran in the parent: kineto's destructors wait at exit() for ever on
        # the parent's threads (os.fork, then sys.exit or the script's end, hung the run).
        # The status is written and stdio flushed all the same; Python has finished by then.
        mod.end_before_destructors()


def _keep_exit(code: int) -> None:
    """Write the status this process ends with where _watch_exit() has exit() write it, for
    an ending exit() never sees (os._exit, a signal): it wins over the end marker's reading."""
    if shared._rec is None:
        return
    from cuptiprof.run.recorder import _write_whole

    try:   # whole or not at all, as exit() writes it: the launcher may read it meanwhile
        _write_whole(shared._rec.part_path(".exit"), f"{code & 0xFF}\n")
    except OSError:
        pass


# -- the CUPTI collector ------------------------------------------------------------------------
def _start_collector(s: S.ChildSettings, rec: Recorder, state: dict | None = None) -> None:
    """Start the collector's Session writing this process's part file. When the collector is
    not available the Recorder's CPU fallback records instead."""
    try:
        from cuptiprof.collect.session import Session  # the collector engineer's API
    except Exception as exc:
        warn(f"the CUPTI collector is not available ({exc}); recording CPU ops only")
        return
    try:
        from cuptiprof.store.writer import RunInfo

        shared._collector = Session(str(rec.part_path(".duckdb")), warmup=s.warmup, steps=s.steps,
                             kinds=s.kinds, step_range=None, light=False,
                             run_info=RunInfo(label=s.run_label, command=rec.command))
        shared._collector._launcher = True   # the program's own profile() calls then stand aside
        shared._collector._range_step = s.step_range
        if state:   # an exec'd image: steps go on from the old image's count
            shared._collector.steps_seen, shared._collector.steps_recorded = state["seen"], state["recorded"]
        shared._collector.start()
        if state and s.steps is not None and state["recorded"] >= s.steps:
            shared._collector._finish_recording()   # every step asked for is recorded already
        # step_range=None above: --step-range steps come from the patched Python NVTX calls
        # (cuptiprof.range("step") per matching push), which counts warm-up and recorded steps
        # live; the marker-based numbering would give each step a second range.
        # Steps go to the collector; logs too when it takes them, else to a logs-only part.
        rec.mode = "logs"
        rec.step_now = lambda: shared._collector.step_here() if shared._collector is not None else None
    except Exception as exc:
        shared._collector = None
        warn(f"the CUPTI collector could not start ({exc}); recording CPU ops only")


# -- logging -------------------------------------------------------------------------------------
class _Capture(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if shared._collector is not None and hasattr(shared._collector, "log_record"):
            shared._collector.log_record(record)
        elif shared._rec is not None:
            shared._rec.log_record(record)


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
