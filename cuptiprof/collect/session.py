"""Session and profile(): collect CUPTI activity for the steps you care about, into one file.

    with cuptiprof.profile("run.duckdb", warmup=2, steps=5):
        for i in range(7):
            with cuptiprof.range("step", step=i):
                denoise_step(i)

Sampling: the first `warmup` step ranges are written as kind 'warmup' with no GPU rows
(collection is off; the ranges opened meanwhile are written too), the next `steps` are
recorded, then activity collection is disabled so the
rest of the run pays nothing. After each recorded step the session synchronizes the GPU,
flushes CUPTI, resolves every row to the step that launched it and appends one transaction to
the file (memory stays flat). stop() (or process exit) forces a last flush.

Without a GPU, driver or usable CUPTI (or with another profiler holding it) the session says so
in one line on stderr, records host-side ranges only, and writes a data_quality row naming what
was not captured; the program keeps running.

This module holds Session's state, start(), stop() and `with`, the session of this process and
its fork, and profile(); the rest of Session, by what each part does:

    sources      where GPU records come from (CUPTI, the fake, none), on and off, given up
    options      its arguments checked before any file is made
    start_rows   its file, made, and the rows the run and process begin with
    ranges       ranges opened and ended, their ids on CUPTI's external-correlation stack
    steps        a step's end (flush, end of recording); steps and ranges for the resolver
    flushing     the flush: synchronize, resolve, append; ranges written
    quality      data_quality rows, noted as the run goes and written at stop()
    exit_status  sys.exit watched; the run closed at the process's exit
"""
from __future__ import annotations

import atexit
import contextvars
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable

from cuptiprof import markers
from cuptiprof.collect.errors import CollectorProblem
from cuptiprof.collect.exit_status import (_ExitStatus, _os_exit_status, _uncaught_status,
                                           _watch_exit)
from cuptiprof.collect.flushing import _Flushing
from cuptiprof.collect.options import (WRITE_MODES, _check_source, _chosen_kinds, _flag,
                                       _make_filter, _pid)
from cuptiprof.collect.quality import _RANGES_OFF, _Quality
from cuptiprof.collect.ranges import _Ranges
from cuptiprof.collect.sources import NullSource, _driver_kind, _kind_enum, _Sources
from cuptiprof.collect.start_rows import _StartRows
from cuptiprof.collect.steps import _Steps
from cuptiprof.errors import UsageError, env_seconds, file_path, stderr_line, whole_number
from cuptiprof.forking import keep_forever

# constants of this module before its parts had modules of their own
from cuptiprof.collect.flushing import RANGE_COLS  # noqa: F401
from cuptiprof.collect.sources import FAKE_ENV  # noqa: F401

_active: "Session | None" = None
# The session a stop() is under way in: no longer _active, its locks still held by the thread
# that stops it (a fork then leaves the child's copies held: detach_after_fork takes it too)
_stopping: "Session | None" = None


def current() -> "Session | None":
    """The active Session of this process, or None."""
    return _active


_END_STATUSES = ("complete", "interrupted", "failed")   # the runs.status of a run that ended
_PHASE_WORDS = {"idle": "not started", "warmup": "warm-up", "record": "recording",
                "done": "finished recording", "stopped": "stopped"}


class Session(_Sources, _StartRows, _Ranges, _Steps, _Flushing, _Quality, _ExitStatus):
    """One collection into one file. Prefer `profile(...)`; the launcher drives it directly.

    path: output DuckDB file (created; see `mode`).
    warmup: step ranges skipped before recording (written as kind 'warmup', no GPU rows).
    steps: step ranges recorded after warm-up (at least 1); None records until stop().
    kinds: subset of ("kernel", "memcpy", "memset", "sync", "api", "nvtx", "memory",
        "overhead"): a list, or the names in one string, comma- or space-separated as
        `cuptiprof run --kinds` takes them ("kernel,memcpy", "kernel memcpy"); None = all.
        Runtime/driver API records are always collected because the
        step join needs them; "api" decides whether they are written to api_calls.
    step_range: another range name that marks a step: a cuptiprof.range of that name, or an
        NVTX range of another domain (torch.cuda.nvtx) captured as MARKER records; the latter
        are numbered at flush time and do not drive warm-up/flushing.
    range_filter: glob (or list of globs, or callable name -> bool) of user range names to
        record; other user ranges are not written and their launches go to the enclosing range.
        A function that raises keeps the range it fails on (said once, and in data_quality).
    light: no api_calls rows, no NVTX markers and no memory events (kernels, copies, memsets,
        syncs and overhead only). Not `cuptiprof run --light`, which collects no GPU activity.
    source: None (CUPTIPROF_FAKE_CUPTI=1 -> the fake source, else real CUPTI, falling back to
        host-only with a one-line notice), "cupti", "fake", "none", a FakeCupti module or an
        object with the CuptiSource interface.
    mode: Writer mode ('create' | 'overwrite' | 'append'). run_info: a store.writer.RunInfo to
        use (the launcher sets label/command); source/versions/settings are filled in.
    flush_every, flush_every_s: flush after every N recorded steps (default 1), and then only
        once flush_every_s seconds have passed since the last flush (None: $CUPTIPROF_FLUSH_EVERY_S,
        else 1.0; 0: at every N-th step's end). Each flush
        synchronizes the devices and commits to the file (milliseconds however little it holds):
        at every step's end that doubled a loop of 5 ms steps (BENCHMARKS). A crash loses at most the steps
        since the last flush. quiet: no stderr notice.
    pid: the process id the run's rows are written under (None: this process's).
    """

    def __init__(self, path: str | os.PathLike, warmup: int = 0, steps: int | None = None,
                 kinds: Iterable[str] | None = None, step_range: str | None = None,
                 range_filter: Any = None, light: bool = False, source: Any = None, *,
                 mode: str = "create", run_info: Any = None, flush_every: int = 1,
                 flush_every_s: float | None = None, quiet: bool = False, pid: int | None = None):
        from cuptiprof.collect.cupti_source import ALL_KINDS

        # steps=0 would record nothing after warm-up (and everything before the first step):
        # refused, as `cuptiprof run --steps 0` is
        warmup, steps = whole_number("warmup", warmup, 0), whole_number("steps", steps, 1, True)
        for name, n in (("warmup", warmup), ("steps", steps)):
            why = None if n is None else markers.steps_beyond(n, count=True)
            if why:
                raise UsageError(f"{name}: {why}")
        flush_every = whole_number("flush_every", flush_every, 1)
        if flush_every_s is None:
            flush_every_s = env_seconds("CUPTIPROF_FLUSH_EVERY_S", 1.0)
        elif isinstance(flush_every_s, bool) or not isinstance(flush_every_s, (int, float)) \
                or not flush_every_s >= 0:
            raise UsageError(f"flush_every_s must be a number of seconds >= 0, not {flush_every_s!r}")
        self.flush_every_s = float(flush_every_s)
        self._last_flush = time.monotonic()
        light, quiet, pid = _flag("light", light), _flag("quiet", quiet), _pid(pid)
        chosen = _chosen_kinds(kinds, ALL_KINDS)
        _check_source(source)   # before any file is made
        if mode not in WRITE_MODES:
            raise UsageError(f"mode must be one of {', '.join(map(repr, WRITE_MODES))}, "
                             f"not {mode!r}")
        if step_range is not None and not isinstance(step_range, str):
            raise UsageError(f"step_range must be a range's name (a str) or None, "
                             f"not {step_range!r}")
        if step_range is not None and not step_range.strip():  # a name read from an unset variable
            raise UsageError(f"step_range {step_range!r}: empty; give the name of the range, or None")
        if light:
            chosen = [k for k in chosen if k not in ("api", "nvtx", "memory")]
        self.path = file_path("path", path)
        self.warmup, self.steps = int(warmup), steps
        self.kinds = chosen
        self.step_range = step_range
        self.light = light
        self._filter = _make_filter(range_filter)
        self._filter_failed: str | None = None   # what range_filter first raised, said once
        self._source_arg = source
        self.mode, self.run_info, self.flush_every, self.quiet = mode, run_info, flush_every, quiet
        self.pid = os.getpid() if pid is None else pid
        self.source: Any = None
        self.writer: Any = None
        self.problem: CollectorProblem | None = None
        self.active = False
        self.passthrough = False     # under `cuptiprof run`: the run records, this does nothing
        self.phase = "idle"          # idle | warmup | record | done | stopped
        self.collecting = False      # activity kinds enabled right now
        self.steps_seen = 0          # step ranges entered (ordinal)
        self.steps_recorded = 0
        self.recorded_steps: list = []
        self.dropped_total = 0
        self.flushes = 0
        self._ids = iter(range(1, 1 << 62))
        self._id_lock = threading.Lock()
        # The open ranges of the running thread or asyncio task: a task starts from a copy of
        # its creator's, so steps of concurrent tasks do not nest in each other; a thread starts
        # empty. A tuple: a task's change never reaches another's.
        self._stack_var: contextvars.ContextVar = contextvars.ContextVar("cuptiprof_ranges", default=())
        self._launcher = False   # the Session `cuptiprof run` starts in each profiled process
        # `cuptiprof run --step-range NAME`: a cuptiprof.range(NAME) is a step, as without the
        # collector (its NVTX pushes drive steps of their own, so step_range stays None)
        self._range_step: str | None = None
        self._range_step_seen = False
        self.range_steps_seen = 0    # steps a cuptiprof.range(_range_step) began
        # CUPTI's external-correlation stack is per OS thread: the ids pushed on each thread,
        # and ids whose range ended elsewhere (another thread, out of order) still to come off
        self._pushed = threading.local()
        self._unpop: set[int] = set()
        self._moved_exits = 0    # ranges ended on another thread than they began on
        self._interleaved = 0   # ranges opened while another task's was open on their thread
        self._closed: list[tuple] = []
        self._open: dict[int, list] = {}
        self._step_of: dict[int, int | None] = {}
        self.step_map = self._step_of  # read by the resolver
        self._start_of: dict[int, int] = {}
        self._gens: deque = deque()
        self._gen_ids: list[int] = []
        self._windows: deque = deque(maxlen=64)  # recent (start, end, step) of step ranges
        # (start, end, step or None for a warm-up, thread) of step ranges closed since the last
        # flush, and of those closed in the three flushes before (what records can still reach)
        self._spans: list[tuple] = []
        self._span_gens: deque = deque()
        self._incomplete: list[tuple] = []   # (step, exception name): steps an exception ended
        self._notes: list[tuple] = []   # (check, detail) of data_quality rows not yet written
        # set by stop() right before its last write of the notes: a note after that could never
        # be written (set, and checked with the append, under _notes_lock)
        self._notes_closed = False
        self._notes_lock = threading.Lock()
        self._flush_lock = threading.RLock()
        # phase changes and step numbering (_enter, _finish_recording, stop): one at a time.
        # Re-entrant: code run on the same thread inside it (a finalizer of a generator holding
        # a step across `yield`, a signal handler) may end or begin a step, which takes it again
        self._phase_lock = threading.RLock()
        self._beginning = 0   # steps numbered under the phase lock, not yet open (or refused)
        self._devices_written = False
        self._start_ns = 0
        self._atexit: Callable | None = None
        self._exit_status: int | None = None   # the process's, when the run ends at its exit
        self._with_depth = 0   # `with` blocks of this profile open now

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "Session":
        """Open the file, claim CUPTI (or fall back to host-only), start the clock. Again while
        it runs, or in a `with` of it, changes nothing; after stop() it is refused.

        Without `with`, call stop() yourself; a run still open when the program ends is closed
        at exit as failed when an uncaught exception or `sys.exit(N)` with N not 0 ended it
        (processes.exit_status: 1, or N), interrupted on Ctrl-C (130), and complete otherwise.
        A `raise SystemExit(N)` (or the `exit()` builtin) is not seen: the run is complete
        then, its exit status unknown (NULL). In `with`, an exception leaving the block ends
        the run the same way (failed and 1, interrupted and 130) and propagates."""
        global _active
        if self.active or self.passthrough:
            return self
        if self.phase == "stopped":   # its step counts and open ranges belong to that run
            raise UsageError(f"profile({str(self.path)!r}) was stopped and records only once; "
                             "start a new cuptiprof.profile(...) instead (mode='append' adds "
                             "a run to an existing file)")
        if not self._launcher and _run_holds_process():
            # `cuptiprof run` records this process already; a second collector would fight it
            # for CUPTI. The program's steps and ranges go to the run.
            self.passthrough = True
            if not self.quiet:
                stderr_line(f"cuptiprof: notice: profile({str(self.path)!r}) runs under `cuptiprof "
                            "run`, which records this process: this profile writes no file and its "
                            "warmup and steps are not used")
            return self
        if _active is not None:
            raise UsageError("a cuptiprof profile is already active in this process; "
                             "stop it before starting another")
        from cuptiprof.collect.decode import Sink
        from cuptiprof.collect.resolve import Resolver
        from cuptiprof.outputs import hold_closed_std_fds
        from cuptiprof.store.writer import RunInfo, Writer

        run = self.run_info or RunInfo()
        run.settings = dict(run.settings or {}, warmup=self.warmup, steps=self.steps,
                            kinds=self.kinds, step_range=self.step_range, light=self.light)
        self._start_ns = time.time_ns()
        self._last_error_at_start = getattr(sys, "last_value", None)
        run.start_ns = run.start_ns or self._start_ns
        self._run = run
        if not self._launcher:   # the file is made now: a mode='create' over a file fails here
            # a process started with stdout or stderr closed: the file would take that number,
            # and what a C library writes there would land in it
            hold_closed_std_fds()
            self.writer = Writer(self.path, run, mode=self.mode, pid=self.pid, taken_hint=(
                "profile(..., mode='overwrite') replaces it, mode='append' adds a run to it "
                "(or choose another path)"))
        try:
            self.source = self._open_source()
            self._sink = Sink(_kind_enum(self.source))
            self.resolver = Resolver(
                self, self.source.ext_kind, self.source.api_name, _driver_kind(self.source),
                write_api="api" in self.kinds, step_range=self.step_range)
            if self.source.gpu:
                try:
                    self.source.open(self._sink.add)
                except CollectorProblem as exc:
                    self._fallback(exc)
            if self.writer is not None:
                self._write_start()
        except BaseException:
            if self.writer is not None:
                self.writer.close("failed")
            raise
        self.active = True
        _active = self
        self.phase = "warmup" if self.warmup > 0 else "record"
        if self.phase == "record":
            self._collect(True)
        markers._set_session(self)
        if markers._disabled and not self.quiet:
            stderr_line(f"cuptiprof: notice: {_RANGES_OFF}; {self.path} gets no step and no range "
                        "of the program")
        if self._atexit is None:
            self._atexit = self._at_exit
            atexit.register(self._atexit)
        if not self._launcher:   # `cuptiprof run` has the exit status from the process itself
            _watch_exit(True)
        return self

    def stop(self, status: str = "complete") -> Path:
        """Last forced flush, data-quality rows, close the file. Safe to call twice.
        status: how the run ended, 'complete', 'interrupted' or 'failed' (runs.status)."""
        global _stopping
        if status not in _END_STATUSES:   # before anything ends: the corrected call still can
            raise UsageError(f"stop(status={status!r}): expected 'complete', 'interrupted' or "
                             "'failed'")
        try:
            with self._flush_lock:   # a flush another thread's step began ends first
                return self._stop(status)
        finally:   # once the lock is released: a fork before this still detaches the session
            if _stopping is self:
                _stopping = None

    def _stop(self, status: str) -> Path:
        global _active, _stopping
        if not self.active:
            return self.writer.path if self.writer else self.path
        markers._set_session(None)
        self.active = False
        if _active is self:
            _stopping = self   # before _active is cleared: a fork in between finds one of them
            _active = None
        with self._phase_lock:   # a step beyond the last, begun meanwhile, ends recording no more
            prev_phase, self.phase = self.phase, "stopped"
        try:
            self.flush(final=True)
        except Exception as exc:  # the file must still close cleanly
            self._note_problem("cupti_error", f"final flush failed: {exc}")
        try:
            self._write_open_ranges()
            self._write_quality(prev_phase)
            end = time.time_ns()
            if self.writer is not None:
                self.writer.execute(
                    "UPDATE processes SET end_ns = ?, ended_early = FALSE, exit_status = "
                    "coalesce(?, exit_status) WHERE run_id = ? AND pid = ?",
                    [end, self._exit_status, self.writer.run_id, self.pid])
        finally:
            # Another thread's note while stop() holds the flush lock is only queued (it never
            # waits for that lock): the notes queued until now are written here, right before
            # the file closes; none can be queued after this (it went unwritten)
            with self._notes_lock:
                self._notes_closed = True
            self._write_notes()
            # a part file never made (nothing recorded) stays unmade
            path = self.writer.close(status) if self.writer is not None else self.path
            _watch_exit(False)
            if self._atexit is not None:
                atexit.unregister(self._atexit)
                self._atexit = None
        return path

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        # `@cuptiprof.profile(...)` above a function: Python's "'Session' object is not
        # callable" said neither what is wrong nor what to write instead
        raise UsageError(f"profile({str(self.path)!r}) is no decorator: write `with "
                         "cuptiprof.profile(...):` around the code (or call start() and "
                         "stop()); @cuptiprof.range(\"...\") marks a function's calls")

    def __repr__(self) -> str:
        state = ("standing aside for `cuptiprof run`" if self.passthrough else
                 _PHASE_WORDS.get(self.phase, self.phase))
        if self.phase in ("record", "done", "stopped") and not self.passthrough:
            n = self.steps_recorded
            state += f", {n} step{'' if n == 1 else 's'}"
        return (f"<cuptiprof.profile({str(self.path)!r}, warmup={self.warmup}, "
                f"steps={self.steps}): {state}>")

    def __enter__(self) -> "Session":
        self.start()
        self._with_depth += 1
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._with_depth -= 1
        if self._with_depth > 0:   # a `with` of this profile inside another: the outer one ends it
            return False
        if exc_type is not None and issubclass(exc_type, SystemExit):
            # the program is exiting: its exit status is the one this code gives the process
            # (sys.exit(0) inside the block is a normal end)
            self._exit_status = _os_exit_status(exc.code)
            self.stop("complete" if self._exit_status == 0 else "failed")
        elif exc_type is None:
            self.stop("complete")
        else:
            # an exception leaving the block ends the run as it ends the program when nothing
            # catches it: the exit status Python gives it (1; 130 for Ctrl-C). It propagates.
            self._exit_status = _uncaught_status(exc_type)
            self.stop("interrupted" if issubclass(exc_type, KeyboardInterrupt) else "failed")
        return False


def _run_holds_process() -> bool:
    """True in a process `cuptiprof run` profiles (its bootstrap ran here)."""
    child = sys.modules.get("cuptiprof.run.child")
    return child is not None and child.holds_process()


def detach_after_fork() -> None:
    """In a forked child, the parent's session is not this process's: its DuckDB connection and
    CUPTI's state did not survive the fork. Closing them here would run their destructors on
    threads that are gone (SIGSEGV), writing would reach the parent's file: they are kept,
    never used, and the child's ranges are not recorded by this session."""
    global _active, _stopping
    # the active session, and one another thread of the parent was stopping at the fork (no
    # longer active, its locks held)
    for s in {id(x): x for x in (_active, _stopping) if x is not None}.values():
        _detach(s)
    _active = _stopping = None


def _detach(s: "Session") -> None:
    keep_forever(s.writer, s.source, getattr(s, "_sink", None))
    s.writer, s.source, s.active, s.phase, s.collecting = None, NullSource(), False, "stopped", False
    # Locks another thread of the parent held at the fork (a step's flush, or stop(), on a worker
    # thread) stay held in the child, where no thread will release them: stop() of this session
    # (the child leaving the parent's `with`) and its exit handler waited for ever
    s._flush_lock, s._phase_lock, s._id_lock = threading.RLock(), threading.RLock(), threading.Lock()
    s._notes_lock, s._notes_closed = threading.Lock(), True   # its notes can go nowhere
    if markers._session is s:
        markers._set_session(None)


os.register_at_fork(after_in_child=detach_after_fork)


def profile(path: str | os.PathLike, warmup: int = 0, steps: int | None = None,
            kinds: Iterable[str] | None = None, step_range: str | None = None,
            range_filter: Any = None, light: bool = False, source: Any = None,
            **options: Any) -> Session:
    """Profile the enclosed code into `path`; a context manager. The parameters are those of
    cuptiprof.collect.session.Session (help() on it says what each does): warmup, steps, kinds,
    step_range, range_filter, light, source and Session's keyword options.

    >>> with cuptiprof.profile("run.duckdb", warmup=2, steps=5):     # doctest: +SKIP
    ...     for i in range(7):
    ...         with cuptiprof.range("step", step=i):
    ...             denoise_step(i)
    """
    return Session(path, warmup=warmup, steps=steps, kinds=kinds, step_range=step_range,
                   range_filter=range_filter, light=light, source=source, **options)
