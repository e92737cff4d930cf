"""Session and profile(): collect CUPTI activity for the steps you care about, into one file.

    with cuptiprof.profile("run.duckdb", warmup=2, steps=5):
        for i in range(7):
            with cuptiprof.range("step", step=i):
                denoise_step(i)

Sampling: the first `warmup` step ranges are written as kind 'warmup' with no GPU rows
(collection is off), the next `steps` are recorded, then activity collection is disabled so the
rest of the run pays nothing. After each recorded step the session synchronizes the GPU,
flushes CUPTI, resolves every row to the step that launched it and appends one transaction to
the file (memory stays flat). stop() (or process exit) forces a last flush.

Without a GPU, driver or usable CUPTI (or with another profiler holding it) the session says so
in one line on stderr, records host-side ranges only, and writes a data_quality row naming what
was not captured; the program keeps running.
"""
from __future__ import annotations

import atexit
import contextvars
import fnmatch
import math
import os
import socket
import sys
import threading
import time
from collections import deque
from types import SimpleNamespace
from pathlib import Path
from typing import Any, Callable, Iterable

import pyarrow as pa

from cuptiprof import markers, ranks
from cuptiprof.collect.decode import no_gc
from cuptiprof.collect.errors import CollectorProblem
from cuptiprof.collect.resolve import SELF_ID
from cuptiprof.errors import UsageError, env_seconds, file_path, whole_number
from cuptiprof.forking import keep_forever
from cuptiprof.store import arrow
from cuptiprof.store.quality import STEP_INCOMPLETE, incomplete_detail

FAKE_ENV = "CUPTIPROF_FAKE_CUPTI"
RANGE_COLS = ("range_id", "parent_id", "depth", "name", "domain", "thread_id", "start_ns",
              "end_ns", "kind", "step", "attrs")

_active: "Session | None" = None
# The session a stop() is under way in: no longer _active, its locks still held by the thread
# that stops it (a fork then leaves the child's copies held: detach_after_fork takes it too)
_stopping: "Session | None" = None


def current() -> "Session | None":
    """The active Session of this process, or None."""
    return _active


class NullSource:
    """Host-side only: no GPU records (no GPU, no CUPTI, or CUPTI held by another tool)."""

    name = "none"
    gpu = False
    kind_enum = SimpleNamespace(DEVICE=8, DRIVER=4)  # what Sink/Resolver ask for
    missing: dict = {}
    enabled: list = []
    ext_kind = 0

    def open(self, on_records: Callable) -> None: ...
    def enable(self, kinds: Iterable[str]) -> None: ...
    def disable(self) -> None: ...
    def close(self) -> None: ...
    def release(self) -> None: ...
    def push(self, range_id: int) -> None: ...
    def pop(self) -> None: ...
    def synchronize(self) -> None: ...
    def flush(self, forced: bool = False) -> None: ...
    def dropped(self) -> int: return 0
    def api_name(self, driver: bool, cbid: int) -> str: return str(cbid)


_END_STATUSES = ("complete", "interrupted", "failed")   # the runs.status of a run that ended
_PHASE_WORDS = {"idle": "not started", "warmup": "warm-up", "record": "recording",
                "done": "finished recording", "stopped": "stopped"}


class Session:
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
    flush_every: flush after every N recorded steps, and then only once flush_every_s seconds
        have passed since the last flush (None: $CUPTIPROF_FLUSH_EVERY_S, else 1.0). Each flush
        synchronizes the devices and commits to the file (milliseconds however little it holds):
        at every step's end that doubled a loop of 5 ms steps (BENCHMARKS). A crash loses at most the steps
        since the last flush. quiet: no stderr notice.
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
        flush_every = whole_number("flush_every", flush_every, 1)
        if flush_every_s is None:
            flush_every_s = env_seconds("CUPTIPROF_FLUSH_EVERY_S", 1.0)
        elif isinstance(flush_every_s, bool) or not isinstance(flush_every_s, (int, float)) \
                or not flush_every_s >= 0:
            raise UsageError(f"flush_every_s must be a number of seconds >= 0, not {flush_every_s!r}")
        self.flush_every_s = float(flush_every_s)
        self._last_flush = time.monotonic()
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
        self._unordered_exits = 0   # ranges ended while one opened after them was still open
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
        then, its exit status unknown (NULL)."""
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
                print(f"cuptiprof: notice: profile({str(self.path)!r}) runs under `cuptiprof run`, which "
                      "records this process: this profile writes no file and its warmup and "
                      "steps are not used", file=sys.stderr)
            return self
        if _active is not None:
            raise UsageError("a cuptiprof profile is already active in this process; "
                             "stop it before starting another")
        from cuptiprof.collect.decode import Sink
        from cuptiprof.collect.resolve import Resolver
        from cuptiprof.store.writer import RunInfo, Writer

        run = self.run_info or RunInfo()
        run.settings = dict(run.settings or {}, warmup=self.warmup, steps=self.steps,
                            kinds=self.kinds, step_range=self.step_range, light=self.light)
        self._start_ns = time.time_ns()
        self._last_error_at_start = getattr(sys, "last_value", None)
        run.start_ns = run.start_ns or self._start_ns
        self._run = run
        if not self._launcher:   # the file is made now: a mode='create' over a file fails here
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
            print(f"cuptiprof: notice: {_RANGES_OFF}; {self.path} gets no step and no range of the "
                  "program", file=sys.stderr)
        if self._atexit is None:
            self._atexit = self._at_exit
            atexit.register(self._atexit)
        if not self._launcher:   # `cuptiprof run` has the exit status from the process itself
            _watch_exit(True)
        return self

    def _open_source(self) -> Any:
        from cuptiprof.collect import cupti_source, fake

        src = self._source_arg
        if src is None:
            src = "fake" if os.environ.get(FAKE_ENV, "") not in ("", "0") else "cupti"
        if isinstance(src, str):
            if src == "none":
                self._fallback(None)
                return self.source
            if src == "fake":
                s = cupti_source.CuptiSource(fake.FakeCupti(auto=True), nvtx_capture=True)
                s.name = "fake"
                return s
            try:
                from cuptiprof.collect import nvtx_setup

                m = cupti_source.load_cupti()
                injected, _why = nvtx_setup.prepare()  # before the first NVTX call, if any left
                markers.reload_env()
                live = injected and nvtx_setup.domain_is_live()
                return cupti_source.CuptiSource(m, nvtx_capture=live)
            except CollectorProblem as exc:
                self._fallback(exc)
                return self.source
        if isinstance(src, fake.FakeCupti):
            s = cupti_source.CuptiSource(src, nvtx_capture=True)
            s.name = "fake"
            return s
        return src

    def _fallback(self, exc: CollectorProblem | None) -> None:
        """Host-side ranges only; say why once on stderr (unless asked not to use a GPU)."""
        self.problem = exc
        self.source = NullSource()
        if exc is not None and not self.quiet:
            print(f"cuptiprof: notice: no GPU activity captured: {exc}; recording host-side ranges "
                  f"only into {self.path}", file=sys.stderr)

    def _file(self) -> Any:
        """The Writer; in a process `cuptiprof run` records (its part file), made once there is
        something to write: the first step's flush, a range, a data_quality row, GPU work. A
        process that reaches no step and records nothing (a helper script, a compile worker)
        leaves no part file, as the Recorder does without a GPU. Under the flush lock."""
        if self.writer is None:
            from cuptiprof.store.writer import Writer

            self.writer = Writer(self.path, self._run, mode=self.mode, pid=self.pid,
                                 synced=False)
            self._write_start()
        return self.writer

    def _write_start(self) -> None:
        from cuptiprof.collect import device_info, libcuda

        src = self.source
        source_name = {"cupti": "cupti", "fake": "synthetic"}.get(src.name, "cpu")
        self.writer.execute(
            "UPDATE runs SET source = ?, cuda_driver_version = ?, cupti_version = ?, "
            "torch_version = coalesce(torch_version, ?) WHERE run_id = ?",
            [source_name, libcuda.driver_version() if src.name == "cupti" else None,
             device_info.cupti_version() if src.name == "cupti" else
             ("fake cupti" if src.name == "fake" else None),
             device_info.torch_version(), self.writer.run_id])
        self.writer.append({"processes": {
            "pid": [self.pid], "host": [socket.gethostname()],
            **{k: arrow.array([v], pa.int32()) for k, v in ranks.from_env(os.environ)._asdict().items()},
            "command": [_command_line()], "start_ns": [self._start_ns],
            "end_ns": arrow.array([None], pa.int64()), "exit_status": arrow.array([None], pa.int32()),
            # TRUE until stop() says otherwise: a killed process leaves it TRUE.
            "ended_early": [True]}})
        if not src.gpu:
            self.writer.append({"devices": {"device_id": [-1], "kind": ["cpu"],
                                            "name": [_cpu_name()], "source": ["cpu"]}})
            self._devices_written = True

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
            self._exit_status = 130 if type(exc) is KeyboardInterrupt else 1
        elif _exit_code:      # sys.exit(code) ended the program (_ExitWatch)
            self._exit_status = _os_exit_status(_exit_code[0])
            status = "complete" if self._exit_status == 0 else "failed"
        else:
            status = "complete"
        try:
            self.stop(status)
        except Exception as exc:
            print(f"cuptiprof: warning: could not finish {self.path}: {exc}", file=sys.stderr)

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
            self.stop("interrupted" if issubclass(exc_type, KeyboardInterrupt) else "failed")
        return False

    # -- collection on/off ----------------------------------------------------------------------
    def _collect(self, on: bool) -> None:
        if on == self.collecting or not self.source.gpu:
            self.collecting = on and self.source.gpu
            return
        try:
            if on:
                self.source.enable(self.kinds)
            else:
                self.source.disable()
            self.collecting = on
        except Exception as exc:
            self._gpu_failed(exc)

    def _gpu_failed(self, exc: BaseException) -> None:
        """A CUPTI failure mid-run: keep the program and the host ranges going."""
        self._note_problem("cupti_error", f"CUPTI failed mid-run ({exc}); GPU records after this "
                           "point were not captured")
        if not self.quiet:
            print(f"cuptiprof: warning: CUPTI failed ({exc}); no further GPU activity is captured",
                  file=sys.stderr)
        try:
            self.source.close()
        except Exception:
            pass
        self.source = NullSource()
        self.collecting = False

    def _note_problem(self, check: str, detail: str) -> None:
        """A data_quality row: written now, or by the flush (or stop()) another thread is in,
        before the file closes; none after it closes. The file's one connection takes one
        transaction at a time: a row written beside another thread's flush was refused, or
        aborted that flush (its rows lost, ranges no longer recorded)."""
        with self._notes_lock:   # never held while taking another lock
            if self._notes_closed:   # the file is closing or closed: nothing can write it
                return
            self._notes.append((check, detail))
        # never waits for the flush lock: this may run under the phase lock, which stop() takes
        # inside the flush lock
        if self._flush_lock.acquire(blocking=False):
            try:
                self._write_notes()
            finally:
                self._flush_lock.release()

    def _write_notes(self) -> None:
        """The rows _note_problem left; under the flush lock."""
        for check, detail in _take_all(self._notes):
            try:
                self._file().add_quality(check, None, None, detail)
            except Exception:
                pass

    # -- ranges (called by cuptiprof.range) ------------------------------------------------------
    def new_range_id(self) -> int:
        with self._id_lock:
            return next(self._ids)

    def _stack(self) -> tuple:
        """This thread's or task's open ranges. A range another task or thread ended (a task
        created inside a step, a generator closed by asyncio's finalizer) is still in this
        copy of the stack: it is left out here, and the stack is written back without it."""
        st = self._stack_var.get()
        if st and any(self._open.get(t[0]) is not t for t in st):
            st = tuple(t for t in st if self._open.get(t[0]) is t)
            self._stack_var.set(st)
        return st

    def _enter(self, name: str, attrs: dict) -> list | None:
        if not self.active:
            return None
        step_name = name == "step" or (self.step_range is not None and name == self.step_range)
        by_option = self._range_step is not None and name == self._range_step
        if by_option:
            step_name = self._range_step_seen = True
        is_step = step_name
        stack = self._stack()
        if is_step and any(t[9] is not None for t in stack):
            is_step = False   # steps do not nest: one inside a step is a range of that step
        kind = "user"
        ordinal = None
        parent = stack[-1] if stack else None
        if is_step:
            given = markers.step_number(attrs.get("step"))
            # `step` is a step's number, not one of its attributes
            extra = markers.attrs_json({k: v for k, v in attrs.items() if k != "step"})
            # Steps of two threads begun at once must get two numbers, and the switch to
            # recording must be seen by a step beyond the last numbered after it (which ends
            # it) and by stop(). A step is numbered, switched and opened in one section under
            # the phase lock: a step of another thread that ends meanwhile, or a step beyond
            # the last, sees it open, not every step begun and none still running. The lock is
            # held for these checks and CUPTI's enable, never for a flush.
            # No collection meanwhile: a finalizer it ran here could end a step, whose flush
            # waits for the flush lock that another thread's flush holds while it waits for this.
            with self._phase_lock, no_gc():
                ordinal = self.steps_seen
                self.steps_seen = ordinal + 1
                if by_option:   # --step-range's, told from the program's own (steps_mixed)
                    self.range_steps_seen += 1
                # until it is open, this step counts as running for _recording_over, which code
                # this thread runs in between (a step ended by a finalizer) may call
                self._beginning += 1
                try:
                    if ordinal < self.warmup:
                        kind = "warmup"
                    elif self.steps is None or ordinal < self.warmup + self.steps:
                        kind = "step"
                        if self.phase == "warmup":
                            self.phase = "record"
                            self._collect(True)
                    else:
                        kind = None
                    if kind is not None:
                        step = ordinal if given is None else given
                        # a warm-up step claims no GPU work for a step (see below)
                        warm = kind == "warmup" or (parent is not None and parent[11])
                        rid = self.new_range_id()
                        tok = [rid, parent[0] if parent else None, len(stack), name,
                               threading.get_native_id(), 0, kind, step, extra, ordinal, False,
                               warm]
                        self._open[rid] = tok
                        self._step_of[rid] = None if warm else step
                finally:
                    self._beginning -= 1
            if kind is None:   # its work must stay out, even while an earlier step still runs
                self._finish_recording()
                return None
            self._stack_var.set(stack + (tok,))
        elif self.phase != "record":
            return None
        else:
            if name == "warmup":
                kind, step = "warmup", None
            elif self._filter is not None and not self._keeps(name):
                return None
            else:
                step = parent[7] if parent else self._open_step()
            # A warm-up step, and every range inside one, carries the warm-up's number in
            # `ranges` but claims no GPU work for a step: what a range inside it launches (once
            # another thread's step has turned collection on) has no step, not the warm-up's.
            warm = parent is not None and parent[11]
            rid = self.new_range_id()
            if step_name:   # a step inside a step: its number is no attribute either
                attrs = {k: v for k, v in attrs.items() if k != "step"}
            tok = [rid, parent[0] if parent else None, len(stack), name,
                   threading.get_native_id(), 0, kind, step, markers.attrs_json(attrs),
                   None, False, warm]
            self._step_of[rid] = None if warm else step
            self._open[rid] = tok
            self._stack_var.set(stack + (tok,))
        if self.collecting and kind != "warmup":
            pushed = self._cupti_stack()
            if self._unpop:
                self._cupti_unwind(pushed)
            self.source.push(rid)
            pushed.append(rid)
            tok[10] = True
        tok[5] = self._start_of[rid] = time.time_ns()
        return tok

    def _keeps(self, name: str) -> bool:
        """range_filter(name); True where the program's filter raises: one bad name must not
        stop the recording of every range after it, as a failure of the bookkeeping does."""
        try:
            return bool(self._filter(name))
        except Exception as exc:
            if self._filter_failed is None:
                self._filter_failed = (f"range_filter raised {type(exc).__name__} ({exc}) for "
                                       f"the range {name!r}: ranges it fails on are recorded")
                if not self.quiet:
                    print(f"cuptiprof: warning: {self._filter_failed}", file=sys.stderr)
            return True

    def _open_step(self) -> int | None:
        """The recorded step open in the process, the latest begun of those (another thread's
        too): the step of a range opened outside every step of its own thread, the one the
        work launched in it gets."""
        steps = [t for t in list(self._open.values()) if t[6] == "step"]
        # a start of 0 is a step being begun now (its start is set last): the latest
        return max(steps, key=lambda t: t[5] or math.inf)[7] if steps else None

    def step_here(self) -> int | None:
        """The step of a log record: the innermost step open in this thread or task (none in a
        warm-up step), else the latest begun step open in the process (_open_step)."""
        for t in reversed(self._stack()):
            if t[9] is not None:   # a step (its ordinal)
                return t[7] if t[6] == "step" else None
        return self._open_step()

    def _cupti_stack(self) -> list:
        st = getattr(self._pushed, "ids", None)
        if st is None:
            st = self._pushed.ids = []
        return st

    def _cupti_unwind(self, pushed: list) -> None:
        """Take the ids in self._unpop off this thread's CUPTI stack: pop down to the lowest
        of them and push back the ones above it that are still open (CUPTI pops only the top)."""
        mine = [i for i, rid in enumerate(pushed) if rid in self._unpop]
        if not mine:
            return
        keep = [rid for rid in pushed[mine[0]:] if rid not in self._unpop]
        try:
            for _ in range(len(pushed) - mine[0]):
                self.source.pop()
            for rid in keep:
                self.source.push(rid)
        except Exception as exc:   # pushes and pops only say which range launched what
            self._note_problem("cupti_error", f"external correlation stack: {exc}")
        self._unpop.difference_update(pushed[mine[0]:])
        pushed[mine[0]:] = keep

    def _exit(self, tok: list, exc_type: type | None = None) -> None:
        if self._open.get(tok[0]) is not tok:   # not open here (ended already, another session)
            return
        end = time.time_ns()
        # Ranges left open inside it end with it: else they stay the parent of every range and
        # step after on this thread, their ids on CUPTI's stack claiming its work.
        for t in markers.left_inside(self._stack_var, self._stack(), tok):
            self._end(t, end, exc_type)
        self._end(tok, end, exc_type)

    def _end(self, tok: list, end: int, exc_type: type | None) -> None:
        if tok[10]:
            # Only the thread that pushed can pop (CUPTI's stack is per thread); a range ended
            # elsewhere comes off when its own thread next opens or ends a range. A range ended
            # out of order (tasks of one thread) comes off from under the ones still open.
            self._unpop.add(tok[0])
            if threading.get_native_id() == tok[4]:
                pushed = self._cupti_stack()
                if pushed and pushed[-1] != tok[0]:
                    with self._phase_lock:   # see steps_recorded below
                        self._unordered_exits += 1
                self._cupti_unwind(pushed)
            else:
                with self._phase_lock:
                    self._moved_exits += 1
        self._open.pop(tok[0], None)
        self._closed.append(tuple(tok[:5]) + (tok[5], end) + tuple(tok[6:9]))
        self._gen_ids.append(tok[0])
        if tok[9] is not None:  # a step range
            self._spans.append((tok[5], end, tok[7] if tok[6] == "step" else None, tok[4]))
            if tok[6] == "step":
                if exc_type is not None:   # the program's exception ended the step early
                    self._incomplete.append((tok[7], exc_type.__name__))
                self._windows.append((tok[5], end, tok[7]))
                self.recorded_steps.append(tok[7])
                # Steps of two threads may end at once: `+=` is a read and a write, one count
                # was lost. The phase lock counts steps as they begin too; it is re-entrant, and
                # held here for no other lock (the flush lock is taken after it, never inside).
                with self._phase_lock:
                    self.steps_recorded += 1
                self._after_step()

    def _after_step(self) -> None:
        """Flush at a recorded step's end, on whichever thread ended it: the steps of a worker
        thread are committed as they go too, not only by stop() (a crash lost them all). Under
        the flush lock, so never beside stop() or another thread's flush."""
        with self._flush_lock:
            if not self.active:   # stopped meanwhile: stop() flushed for the last time
                return
            if self._recording_over():
                self.flush()
                self._finish_recording(if_over=True)
            elif self.steps_recorded % self.flush_every == 0 and \
                    time.monotonic() - self._last_flush >= self.flush_every_s:
                self.flush()

    def _recording_over(self) -> bool:
        """Every step asked for has begun and none of them is still open. The last one to begin
        may end first (threads): collection stays on until the others end (or a step beyond
        the last begins), or their GPU work after that point was lost without a word."""
        if self.steps is None or self.steps_seen < self.warmup + self.steps or self._beginning:
            return False
        return not any(t[6] == "step" for t in list(self._open.values()))

    def _finish_recording(self, if_over: bool = False) -> None:
        """End the recording; if_over: only when _recording_over() still holds under the phase
        lock (the last step, numbered by another thread as this one's step ended, may be
        opening: it was not seen open, and lost its GPU work as a step cut short)."""
        # A step beyond the last runs this without the flush lock (it must not wait for another
        # thread's flush), so two threads can get here at once: the check and what follows are
        # done once, under the phase lock.
        with self._phase_lock, no_gc():
            if self.phase != "record" or (if_over and not self._recording_over()):
                return
            self.phase = "done"
            self._collect(False)
            for t in list(self._open.values()):   # another thread's step, still running
                if t[6] == "step":
                    self._incomplete.append((t[7], f"a step beyond steps={self.steps} that another "
                                                   "thread or task began (recording stopped)"))

    def _detach_ranges(self, exc: BaseException) -> None:
        self._note_problem("range_error", f"range bookkeeping failed: {exc}")

    # RangeBook for the resolver
    def step_of(self, range_id: int) -> int | None:
        return self._step_of.get(range_id)

    def start_of(self, range_id: int) -> int:
        return self._start_of.get(range_id, 0)

    def note_step(self, range_id: int, step: int | None) -> None:
        self._step_of[range_id] = step
        self._gen_ids.append(range_id)

    def own_intervals(self) -> dict:
        """Thread id -> [(start, end or None, range_id, depth)] of cuptiprof ranges open or closed
        since the last flush: the ones NVTX ranges of this flush can have started inside."""
        out: dict[int, list] = {}
        for t in self._closed:
            out.setdefault(t[4], []).append((t[5], t[6], t[0], t[2]))
        for tok in list(self._open.values()):
            if tok[5]:   # (0: being begun now, its start not yet set)
                out.setdefault(tok[4], []).append((tok[5], None, tok[0], tok[2]))
        return out

    def step_at(self, t_ns: int) -> int | None:
        # a copy: a step another thread ends meanwhile changes the deque (iterating it raised)
        for s, e, step in reversed(tuple(self._windows)):
            if s <= t_ns <= e:
                return step
        for tok in list(self._open.values()):
            # start 0: a step just begun on another thread, its start not yet set (it is set
            # after CUPTI's push, so that the range holds no collector work)
            if tok[6] == "step" and 0 < tok[5] <= t_ns:
                return tok[7]
        return None

    def steps_at(self, tid: Any, t: Any) -> tuple:
        """The recorded step open in the process at each launch time `t` (ns) of thread `tid`,
        for launches that carry no range: (step, found), numpy arrays.

        The importers' rule (interop.nesting.steps_at, run.recorder): a step holds [start, end);
        a step of the launching thread comes first (its own warm-up step: no step, warm-up work
        stays out of recorded steps), then the latest-started recorded step of any thread."""
        import numpy as np

        tid, t = np.asarray(tid, np.int64), np.asarray(t, np.int64)
        step, found = np.zeros(len(t), np.int64), np.zeros(len(t), bool)
        spans = [sp for gen in list(self._span_gens) for sp in gen] + list(self._spans)
        spans += [(tok[5], None, tok[7] if tok[6] == "step" else None, tok[4])
                  for tok in list(self._open.values()) if tok[9] is not None and tok[5]]
        if not spans or not len(t):
            return step, found
        spans.sort(key=lambda sp: sp[0])
        holds = [(t >= s0) & (t < s1) if s1 is not None else t >= s0 for s0, s1, _, _ in spans]
        for (_, _, n, _), hit in zip(spans, holds):   # any thread's: a later start wins
            if n is not None:
                step[hit], found[hit] = n, True
        for (_, _, n, th), hit in zip(spans, holds):  # the launching thread's own step first
            hit = hit & (tid == th)
            step[hit], found[hit] = (0, False) if n is None else (n, True)
        return step, found

    # -- flushing -----------------------------------------------------------------------------
    def flush(self, final: bool = False) -> None:
        """Synchronize, flush CUPTI, resolve and append one transaction. On the thread that
        ended a step, or stop()'s; one at a time."""
        with self._flush_lock, no_gc():
            src = self.source
            if src.gpu:
                try:
                    self._own_synchronize(src)
                    if final:  # disable kinds, deliver everything, count, give CUPTI back
                        src.disable()
                        src.flush(True)
                        self.dropped_total += src.dropped()
                        src.release()
                    else:
                        src.flush(False)
                        self.dropped_total += src.dropped()
                except Exception as exc:
                    self._gpu_failed(exc)
            rows = self._sink.drain() if hasattr(self, "_sink") else {}
            batches = self.resolver.resolve(rows, final=final) if rows else {}
            # a copy: CUPTI's thread may add a kind to it meanwhile (iterating it then raised)
            for k, v in list(self._sink.other.items()) if hasattr(self, "_sink") else ():
                self.resolver.other_kinds[k] = v
            ranges = self._ranges_batch()
            mr = batches.pop("ranges", None)
            if ranges or mr:
                batches["ranges"] = _typed_ranges({
                    c: (ranges[c] if ranges else []) + (mr[c] if mr else []) for c in RANGE_COLS})
            if self.writer is None and not any(map(_n_rows, batches.values())):
                batches = {}   # nothing recorded (its own synchronize): no part file for it
            if batches or self.writer is not None:   # nor for its devices alone
                self._devices(batches)
            if batches:
                self._file().append(batches)
            self.flushes += 1
            self._last_flush = time.monotonic()
            self._prune()
            self._write_notes()   # those noted on another thread meanwhile

    def _own_synchronize(self, src: Any) -> None:
        """Wait for the GPU; the sync record this makes is ours, so the resolver drops it."""
        if not self.collecting:
            src.synchronize()
            return
        src.push(SELF_ID)
        try:
            src.synchronize()
        finally:
            src.pop()

    def _ranges_batch(self) -> dict | None:
        closed = _take_all(self._closed)
        if not closed:
            return None
        cols = [list(c) for c in zip(*closed)]
        self._inside_nvtx(cols)
        return {"range_id": cols[0], "parent_id": cols[1], "depth": cols[2], "name": cols[3],
                "domain": ["cuptiprof"] * len(closed), "thread_id": cols[4],
                "start_ns": cols[5], "end_ns": cols[6], "kind": cols[7], "step": cols[8],
                "attrs": cols[9]}

    def _inside_nvtx(self, cols: list) -> None:
        """A cuptiprof range opened inside an NVTX range of another domain (and later than its
        own parent) gets that range as parent: the two kinds nest in one tree, so a range's
        GPU work includes what ran in the other kind of range inside it."""
        r = getattr(self, "resolver", None)
        if r is None:
            return
        import numpy as np

        mid, start = r.nvtx_around(np.asarray(cols[4], np.int64), np.asarray(cols[5], np.int64))
        for i in np.flatnonzero(start):
            parent = cols[1][i]
            if parent is None or start[i] > self._start_of.get(parent, 0):
                cols[1][i] = int(mid[i])

    def _devices(self, batches: dict) -> None:
        if self._devices_written or not self.resolver.devices:
            return
        from cuptiprof.collect import device_info

        rows = self.resolver.devices
        if self.source.name == "cupti":
            rows = device_info.merge_devices(rows, device_info.cuda_devices())
        batches["devices"] = _rows_to_cols(rows)
        self._devices_written = True

    def _prune(self) -> None:
        """Forget ranges closed three flushes ago: no row can still claim them."""
        self._gens.append(self._gen_ids)
        self._gen_ids = []
        self._span_gens.append(self._spans)
        self._spans = []
        while len(self._span_gens) > 3:
            self._span_gens.popleft()
        while len(self._gens) > 3:
            for rid in self._gens.popleft():
                if rid not in self._open:
                    self._step_of.pop(rid, None)
                    self._start_of.pop(rid, None)

    def _write_open_ranges(self) -> None:
        # a copy: another thread may open or end a range meanwhile (iterating it then raised)
        still_open = list(self._open.values())
        for t in still_open:   # a step still open at stop: its numbers are partial
            if t[9] is not None and t[6] == "step":
                self._incomplete.append((t[7], "stop() before the step's end"))
        # with the ranges another thread ended since the last flush (added to the list, which
        # stays: that thread may have read it already)
        ended = {c[0] for c in list(self._closed)}   # ended since the copy: written ended
        self._closed.extend(tuple(t[:5]) + (t[5], None) + tuple(t[6:9]) for t in still_open
                            if t[0] not in ended)
        batch = self._ranges_batch()
        if batch:
            self._file().append({"ranges": _typed_ranges(batch)})

    def _write_quality(self, phase: str) -> None:
        from cuptiprof.collect import device_info

        r, src = self.resolver, self.source
        batch: dict[str, list] = {"check_name": [], "subject": [], "count": [], "value_ns": [],
                                  "detail": []}

        def add(check, subject, count, detail, value_ns=None):
            for k, v in zip(batch, (check, subject, count, value_ns, detail)):
                batch[k].append(v)

        # subject 'gpu', as `cuptiprof run` and the importers name what was not captured
        if self.problem is not None:
            add(self.problem.check, "gpu", None, f"No GPU activity was captured: {self.problem}")
        elif not src.gpu and self._source_arg == "none":
            add("no_gpu", "gpu", None, "No GPU activity was captured: profiling ran host-side only")
        if self.dropped_total:
            add("dropped_records", None, self.dropped_total,
                f"CUPTI dropped {self.dropped_total} activity records (buffers full); totals "
                "are lower than the real work")
        for kind, n in sorted(r.unclaimed.items()):
            add("unclaimed_records", kind, n,
                f"{n} {kind} records were launched outside every recorded step (in no range "
                "of one, and in no range while none was open, or from a warm-up step's "
                "thread); their step is NULL")
        for kind, why in sorted(getattr(src, "missing", {}).items()):
            add("missing_kind", kind, None, f"{kind} records were not captured: {why}")
        if src.gpu:
            for step in self.recorded_steps:
                if not r.step_rows.get(step):
                    add("empty_step", str(step), 0,
                        f"step {step} has no GPU activity (nothing launched, or not captured)")
        for step, exc_name in self._incomplete:
            add(STEP_INCOMPLETE, str(step), None, incomplete_detail(step, exc_name))
        if self._moved_exits and src.gpu:
            add("range_thread_switch", None, self._moved_exits,
                f"{self._moved_exits} ranges ended on another thread than they began on: GPU work "
                "their first thread launched after that, until it next opened or ended a range, "
                "may be credited to them")
        if self._unordered_exits and src.gpu:
            add("ranges_interleaved", None, self._unordered_exits,
                f"{self._unordered_exits} ranges ended while a range opened after them on their "
                "thread was still open (asyncio tasks running at once; an outer range ended first "
                "ends those open inside it): GPU work launched while both were open is credited "
                "to the one opened last")
        for okind, (n, ns) in sorted(r.overhead.items()):
            add("cupti_overhead", _overhead_name(src, okind), n,
                f"CUPTI spent {ns / 1e6:.3f} ms in {n} overhead spans of this kind", ns)
        if self._filter_failed is not None:
            add("range_filter_failed", None, None, self._filter_failed)
        if markers._disabled:
            add("ranges_disabled", None, None, f"{_RANGES_OFF}: no step or range of the program "
                "was recorded")
        if self._launcher and not self.steps_seen:
            pass   # a process of `cuptiprof run` that marked no step (a helper): not short of any
        elif self.steps is not None and self.steps_recorded < self.steps and phase != "idle":
            add("steps_short", None, self.steps_recorded,
                f"{self.steps} steps were asked for after {self.warmup} warm-up steps; "
                f"{self.steps_recorded} were recorded")
        elif self.steps is None and self.warmup and not self.steps_recorded and phase != "idle":
            # collection starts after the warm-up: a run that never got past it holds nothing
            add("steps_short", None, 0,
                f"{self.steps_seen} steps were marked, all within the {self.warmup} warm-up "
                "steps: no step and no GPU work were recorded")
        if self.writer is None and not batch["check_name"]:
            return   # nothing recorded: no part file
        if not self._devices_written:
            rows = device_info.cuda_devices() if src.name == "cupti" else []
            if rows:
                self._file().append({"devices": _rows_to_cols(rows)})
        if batch["check_name"]:
            self._file().append({"data_quality": {
                "check_name": batch["check_name"], "subject": batch["subject"],
                "count": arrow.array(batch["count"], pa.int64()),
                "value_ns": arrow.array(batch["value_ns"], pa.int64()), "detail": batch["detail"]}})


def _command_line() -> str:
    """The process's command line as started (sys.argv is what runpy or multiprocessing made
    of it: pkg/__main__.py for `python -m pkg`, the parent's argv in a spawned worker)."""
    import shlex

    return shlex.join(getattr(sys, "orig_argv", None) or sys.argv)


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


# -- the exit status at exit -------------------------------------------------------------------
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
    integer, 1 for anything else (Python prints it)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


# -- helpers -----------------------------------------------------------------------------------
def _take_all(pending: list) -> list:
    """What `pending` holds, taken out of it. The list itself stays: another thread may have
    read it already and still be appending to it (a new list in its place lost that item)."""
    n = len(pending)
    taken = pending[:n]
    del pending[:n]
    return taken


_RANGES_OFF = "CUPTIPROF_DISABLE is set, so cuptiprof.range does nothing"
WRITE_MODES = ("create", "overwrite", "append")


def _chosen_kinds(kinds: Any, all_kinds: tuple) -> list:
    """kinds as a list: None is every kind; names in a string split as `run --kinds` splits
    them ("kernel,memcpy", "kernel memcpy"); a string naming none is refused (an unset
    variable), an empty list is the always-on kinds alone."""
    from cuptiprof.collect.cupti_source import split_kinds

    if kinds is None:
        return list(all_kinds)
    if isinstance(kinds, str):
        if not split_kinds([kinds]):   # kinds=os.environ.get("KINDS", ""), as run --kinds ""
            raise UsageError(f"kinds {kinds!r}: no kind given; choose from {', '.join(all_kinds)}")
        kinds = [kinds]
    try:
        chosen = split_kinds(list(kinds))
    except TypeError:
        chosen = [kinds]
    unknown = [k if isinstance(k, str) else repr(k) for k in chosen if k not in all_kinds]
    if unknown:
        raise UsageError(f"unknown kind(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(all_kinds)}")
    return chosen


_SOURCE_METHODS = ("open", "enable", "disable", "flush", "push", "pop", "synchronize")


def _check_source(source: Any) -> None:
    """A source Session can use: a name, a FakeCupti (activity_* functions as cupti has them)
    or an object with CuptiSource's methods; anything else failed in start(), after the file
    was made."""
    if isinstance(source, type):   # the class has the methods its instances have
        raise UsageError(f"source={source.__name__} is a class; pass an instance of it, such as "
                         f"{source.__name__}(...)")
    if isinstance(source, str):
        ok = source in ("cupti", "fake", "none")
    else:
        ok = source is None or hasattr(source, "activity_enable") or \
            all(hasattr(source, m) for m in _SOURCE_METHODS)
    if not ok:
        raise UsageError(f"unknown source {source!r}; use 'cupti', 'fake' or 'none'")


def _make_filter(f: Any) -> Callable[[str], bool] | None:
    if f is None:
        return None
    if callable(f):
        return f
    pats = [f] if isinstance(f, str) else list(f) if isinstance(f, (list, tuple, set, frozenset)) \
        else None
    if pats is None or not all(isinstance(p, str) for p in pats):
        raise UsageError(f"range_filter must be a glob, a list of globs or a function of a range's "
                         f"name, not {f!r}")
    for p in pats:
        if not p.strip():   # matches no range: a glob read from an unset variable
            raise UsageError(f"range_filter {p!r}: empty; give a glob of range names, or None")
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in pats)


def _kind_enum(src: Any) -> Any:
    m = getattr(src, "m", None)
    return m.ActivityKind if m is not None else src.kind_enum


def _driver_kind(src: Any) -> int:
    return int(_kind_enum(src).DRIVER)


def _overhead_name(src: Any, kind: int) -> str:
    m = getattr(src, "m", None)
    try:
        return m.ActivityOverheadKind(kind).name.lower() if m is not None else str(kind)
    except Exception:
        try:
            from cupti import cupti

            return cupti.ActivityOverheadKind(kind).name.lower()
        except Exception:
            return str(kind)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


_RANGE_TYPES = {"range_id": pa.int64(), "parent_id": pa.int64(), "depth": pa.int32(),
                "name": pa.string(), "domain": pa.string(), "thread_id": pa.int64(),
                "start_ns": pa.int64(), "end_ns": pa.int64(), "kind": pa.string(),
                "step": pa.int32(), "attrs": pa.string()}


def _typed_ranges(cols: dict) -> dict:
    return {c: arrow.array(cols[c], _RANGE_TYPES[c]) for c in RANGE_COLS}


def _n_rows(batch: Any) -> int:
    """Rows of one table of a batch: an Arrow table, or a dict of columns."""
    if isinstance(batch, dict):
        return len(next(iter(batch.values()), ()))
    return batch.num_rows


def _rows_to_cols(rows: list[dict]) -> dict[str, list]:
    keys = sorted({k for r in rows for k in r})
    return {k: [r.get(k) for r in rows] for k in keys}
