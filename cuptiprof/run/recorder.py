"""What a profiled process records when the CUPTI collector does not: the step count, ranges,
logs, and (no GPU) torch.profiler CPU ops. One instance per process, made by child/recording.py.

Modes: 'time' keeps only step durations (the baseline of `--overhead`, written as JSON, no
DuckDB); 'light' writes ranges and logs; 'cpu' adds torch.profiler CPU ops: the ops that do the work
(the outermost op that does most of its own work: children only views/metadata, or not a
composite op of torch's dispatcher and self time at least half its duration, judged once per op
name for the whole process)
become `kernels` rows on device -1 (stream = thread), every op a `ranges` row of kind 'op'.
The part file is created lazily on the first flush, so processes that never record anything
(compile workers, helper scripts) cost no DuckDB file (the collector's Session makes its part
file the same way).
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

from cuptiprof import ranks
from cuptiprof.cpu_device import cpu_name
from cuptiprof.errors import command_text, env_seconds, stderr_line
from cuptiprof.forking import keep_forever
from cuptiprof.markers import attrs_json, left_inside
from cuptiprof.outputs import ctrl_c_after
from cuptiprof.run import settings as S
from cuptiprof.run.settings import ChildSettings
from cuptiprof.work_ops import is_kernel as _is_kernel
from cuptiprof.work_ops import judge_names as _judge_names

log = logging.getLogger("cuptiprof")

# torch.profiler (kineto) ran in this process image, ours or the program's: a child forked
# from it cannot run kineto's destructors at exit (child.processes._after_fork)
kineto_started = False


# runs.source by mode: the CPU fallback's torch.profiler ops, ranges alone, CUPTI records
_SOURCE = {"cpu": "cpu", "light": "light"}
# The no_gpu detail of a process without a GPU in which torch.profiler never ran (no torch op).
NO_OPS = ("no GPU activity was captured (no CUDA GPU found), and no CPU op: torch.profiler "
          "records the ops of a process that runs torch, and this one ran none")
# ... and of one whose steps were all warm-up: the ops of warm-up steps are not kept.
WARM_UP_ONLY = ("no GPU activity was captured (no CUDA GPU found), and no CPU op was recorded: "
                "no step got past the warm-up")


class _Open:
    __slots__ = ("range_id", "parent_id", "depth", "name", "kind", "step", "thread", "start", "attrs",
                 "is_step", "closed", "gen")

    def __init__(self, **kw):
        self.closed = False
        self.gen = 0      # the Recorder's generation (a forked child starts a new one)
        for k, v in kw.items():
            setattr(self, k, v)


class Recorder:
    def __init__(self, settings: ChildSettings, parts_dir: str, mode: str, image: int = 0):
        self.s = settings
        # which program image of this pid records (0; N after the process exec'd N times):
        # each writes its own part file
        self.image = image
        self.exec_failed = False               # this image goes on after an exec that failed
        self.mode = mode                       # 'time' | 'light' | 'cpu'
        self.parts = Path(parts_dir)
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.command = command_line()
        self.start_ns = time.time_ns()
        self.lock = threading.RLock()
        # open ranges of the running thread or asyncio task (a task starts from a copy of its
        # creator's, a thread empty): steps of concurrent tasks do not nest in each other
        self.gen = 0
        self._stack_var: contextvars.ContextVar = contextvars.ContextVar("cuptiprof_open", default=())
        self.next_id = 1
        self.seen = 0                          # step ranges begun (warm-up included)
        self.recorded = 0                      # recorded steps finished
        self.done = False                      # N steps recorded: collection off
        self.goes_on = False                   # closed for an exec: the next image counts on
        self.ranges: list[tuple] = []          # finished range rows waiting for a flush
        self.logs: list[tuple] = []
        self.step_times: list[tuple] = []      # (step, duration_ns) of recorded steps
        self.windows: list[tuple] = []         # (step, start_ns, end_ns, thread) of recorded steps
                                               # (step None: a warm-up step or range)
        self.spans: list[tuple] = []           # (thread, start, end, range_id, depth) of ended
                                               # ranges: the CPU ops inside them are nested there
        self._open_steps: dict = {}            # range id -> (start, step, thread) of recorded
                                               # steps open
        self._open_on: dict = {}               # thread -> its ranges open (every task's), CPU ops
        self._interleaved = 0                  # ranges begun while another task's was open
                                               # on their thread
        self.writer = None
        self.prof = None
        self.closed = False
        self.step_now = None                   # the collector's current step, when it has the steps
        # torch.profiler hands its ops over only when stopped: it is cycled at a step's end, at
        # most this often (each cycle costs tens of ms of host time between steps)
        self.ops_every_s = env_seconds(S.OPS_EVERY_S, S.KNOBS[S.OPS_EVERY_S])
        # ranges and logs are committed at a step's end at most this often, or with the ops (a
        # commit costs milliseconds however little it holds: at every step it doubled 5 ms steps)
        self.flush_every_s = env_seconds(S.FLUSH_EVERY_S, S.KNOBS[S.FLUSH_EVERY_S])
        self._flushed_at = time.monotonic()
        self._prof_thread = None               # the Thread that started it (cycled there only;
                                               # its ident is reused once it ends)
        self.op_steps: set = set()             # recorded steps with ops written
        self._prof_since = 0.0
        self.work_names: dict = {}             # op name -> does its own work (decided once)
        self._aside = False                    # the program's own torch.profiler runs now
        self._own_call = None                  # the thread starting or stopping ours now

    # -- paths ---------------------------------------------------------------------------------
    def part_path(self, suffix: str) -> Path:
        return self.parts / f"{self.host}-{self.pid}{f'.exec{self.image}' if self.image else ''}{suffix}"

    def write_marker(self, argv: list[str]) -> None:
        """A small JSON saying this process started; the launcher uses it to find processes
        that ended before writing anything."""
        doc = {"pid": self.pid, "ppid": os.getppid(), "host": self.host, "start_ns": self.start_ns,
               "argv": argv, "command": self.command, "image": self.image, "exec_failed": self.exec_failed, **ranks.from_env(os.environ)._asdict()}
        try:
            _write_whole(self.part_path(".start.json"), json.dumps(doc))
        except OSError:
            pass

    # -- ranges and steps ----------------------------------------------------------------------
    def _stack(self) -> tuple:
        """This thread's or task's open ranges, less any another task or thread has ended."""
        st = self._stack_var.get()
        if st and any(o.closed for o in st):
            st = tuple(o for o in st if not o.closed)
            self._stack_var.set(st)
        return st

    def begin(self, name: str, *, is_step: bool = False, step: int | None = None,
              attrs: dict | None = None, kind: str | None = None) -> _Open | None:
        if self.closed:
            return None
        now = time.time_ns()
        stack = self._stack()
        if is_step and any(o.is_step for o in stack):
            is_step = False   # steps do not nest: one inside a step is a range of that step
        with self.lock:
            if is_step:
                if step is None:
                    step = self.seen      # the ordinal, as the collector numbers unnamed steps
                self.seen += 1
                # Counted as they begin, as the collector does: steps of concurrent threads that
                # begin before the first N end are not recorded beyond N.
                if self.done or (self.s.steps is not None
                                 and self.seen > self.s.warmup + self.s.steps):
                    # while an earlier step still runs on another thread, what runs inside this
                    # one must not count for that step: its ranges are kept out by its stand-in
                    # (in time mode too, so the baseline skips the same range work)
                    return None if self.done else self._beyond(stack, now)
                warm = self.seen <= self.s.warmup
                kind = "warmup" if warm else "step"
                if not warm:
                    self._start_profiler()
            elif self.done or stack and stack[-1].kind == "beyond":
                # after the last step, as in every mode (the --overhead baseline too: range
                # work the profiled run no longer does would read as less overhead)
                return None
            rid = self.next_id
            self.next_id += 1
            if is_step and kind == "step":
                self._open_steps[rid] = (now, step, threading.get_native_id())
            parent = stack[-1] if stack else None
            if not is_step:   # read under the lock end() changes the open steps under
                # a range named 'warmup' is warm-up, of no step (and so is what it holds), as
                # the collector stores it: a 'warmup' row with a step number is a warm-up step,
                # whose number the reports leave out of scope (the whole recorded step with it)
                step = None if name == "warmup" else parent.step if parent else self.current_step
        if kind is None:
            kind = "warmup" if name == "warmup" else "user"
        o = _Open(range_id=rid, parent_id=parent.range_id if parent else None, depth=len(stack),
                  name=name, kind=kind, step=step,
                  thread=threading.get_native_id(), start=now, attrs=attrs, is_step=is_step,
                  gen=self.gen)
        self._stack_var.set(stack + (o,))
        if self.mode == "cpu":
            with self.lock:
                on = self._open_on.setdefault(o.thread, [])
                # another task's range open on this thread (asyncio tasks at once): until one of
                # them ends, the CPU ops of either go to the step begun last, in order or not
                if any(not t.closed and t not in stack for t in on):
                    self._interleaved += 1
                on.append(o)
        return o

    def _beyond(self, stack: tuple, now: int) -> _Open:
        """The stand-in of a step beyond the N asked for: on the stack, unwritten."""
        o = _Open(range_id=None, parent_id=None, depth=len(stack), name="step", kind="beyond",
                  step=None, thread=threading.get_native_id(), start=now, attrs=None,
                  is_step=True, gen=self.gen)
        self._stack_var.set(stack + (o,))
        return o

    @property
    def current_step(self) -> int | None:
        """The recorded step open in the process, the latest begun of those (another thread's
        too): the step of a range or log record outside every step of its own thread."""
        open_steps = list(self._open_steps.values())
        return max(open_steps)[1] if open_steps else None

    def end(self, o: _Open | None, exc_type: type | None = None) -> None:
        """Close a range; `exc_type`: the exception that ended it (a step it ends is marked
        incomplete in data_quality)."""
        if o is None or o.closed or o.gen != self.gen:   # ended already, or the parent's (forked)
            return
        now = time.time_ns()
        # Ranges left open inside it end with it: else they stay the parent of everything this
        # thread records later. (The stack is read before `o` is marked closed: it leaves closed
        # ones out.)
        for t in left_inside(self._stack_var, self._stack(), o):
            self._end(t, now, exc_type)
        self._end(o, now, exc_type)

    def _end(self, o: _Open, now: int, exc_type: type | None) -> None:
        o.closed = True
        with self.lock:
            if self.mode == "cpu" and o.kind != "beyond":
                self._open_on[o.thread] = [t for t in self._open_on.get(o.thread, ())
                                           if t is not o and not t.closed]
            if o.kind == "beyond":   # its thread's CPU ops count for no step, as a warm-up's
                if self.mode == "cpu":
                    self.windows.append((None, o.start, now, o.thread))
                return
            if self.mode != "time":   # time mode writes step durations only: nothing to keep
                self.ranges.append((o.range_id, o.parent_id, o.depth, o.name, o.thread, o.start,
                                    now, o.kind, o.step, attrs_json(o.attrs)))
            if self.mode == "cpu" and self.prof:
                self.spans.append((o.thread, o.start, now, o.range_id, o.depth))
            if o.kind == "warmup" and (not o.is_step or self.seen >= self.s.warmup):
                self._start_profiler()      # right after warm-up: the start cost lands outside steps
            if o.kind == "warmup" and self.mode == "cpu":
                # its thread's ops: none (a warm-up step's, or a range named 'warmup' inside a
                # recorded step, whose ops are warm-up as the collector's GPU work of it is)
                self.windows.append((None, o.start, now, o.thread))
            if not (o.is_step and o.kind == "step"):
                return
            self._open_steps.pop(o.range_id, None)
            self.recorded += 1
            self.step_times.append((o.step, now - o.start))
            self.windows.append((o.step, o.start, now, o.thread))
            last = self.s.steps is not None and self.recorded >= self.s.steps
            heavy = last or self._cycle_due() or self.mode != "time" and (
                exc_type is not None or time.monotonic() - self._flushed_at >= self.flush_every_s)
            # a Ctrl-C in the step's end (torch.profiler's cycle, the flush) is raised once it
            # is done: raised inside the cycle, it left the CPU op profiler stopped for good.
            # (Only where there is such work: the handler's setting costs ~5 us a step.)
            with ctrl_c_after() if heavy else contextlib.nullcontext():
                if self.mode != "time":
                    log.info("step %s: %.3f ms", o.step, (now - o.start) / 1e6)
                if last:
                    self.done = True
                    self._stop_profiler()
                    wrote_ops = True
                else:   # this step's ops are written with it: a crash later keeps them
                    wrote_ops = self._cycle_profiler()
                if self.mode != "time":
                    if exc_type is not None:
                        from cuptiprof.store.quality import STEP_INCOMPLETE, incomplete_detail

                        self._quality(STEP_INCOMPLETE, str(o.step),
                                      incomplete_detail(o.step, exc_type.__name__))
                    if wrote_ops or exc_type is not None or \
                            time.monotonic() - self._flushed_at >= self.flush_every_s:
                        self.flush()

    def log_record(self, record: logging.LogRecord) -> None:
        if self.closed or self.mode == "time":
            return
        with self.lock:
            self.logs.append((threading.get_native_id(), int(record.created * 1e9), record.levelname,
                              record.name, record.getMessage(),
                              self._step_here() if self.step_now is None else self.step_now()))

    def _step_here(self) -> int | None:
        """The step of a log record: the innermost step open in this thread or task (none in a
        warm-up step or one beyond the last, nor in a range named 'warmup': its ranges and work
        are of no step), else the latest begun step open in the process."""
        for o in reversed(self._stack()):
            if o.kind == "warmup":
                return None
            if o.is_step:
                return o.step if o.kind == "step" else None
        return self.current_step

    # -- torch.profiler (CPU fallback) ---------------------------------------------------------
    def start_profiler(self, _torch=None) -> None:
        """At `import torch`: profiling starts before any step, so its start-up cost stays out
        of the steps; ops outside the recorded steps are dropped when the steps are known."""
        with self.lock:
            self._start_profiler()

    def _start_profiler(self) -> None:
        global kineto_started
        # closed: close() ran inside a cycle (from a signal handler on this thread)
        if self.mode != "cpu" or self.prof is not None or self.done or self.closed \
                or "torch" not in sys.modules:
            return
        if self._aside:   # the program's own torch.profiler runs: starting ours would end it
            return
        try:
            from torch.profiler import ProfilerActivity, profile

            _watch_other_profilers(self)
            self.prof = profile(activities=[ProfilerActivity.CPU], **_all_threads())
            self._own_call = threading.get_ident()
            kineto_started = True
            try:
                self.prof.start()
            finally:
                self._own_call = None
            self._prof_thread, self._prof_since = threading.current_thread(), time.monotonic()
        except Exception as exc:  # never break the profiled program
            self.prof = False
            self._quality("cpu_profiler_failed", None, f"torch.profiler could not start: {exc}")

    def other_profiler(self, starting: bool) -> None:
        """The program starts (or stopped) a torch.profiler of its own. torch runs one at a
        time: starting it ended ours without a word (its ops lost), and our next cycle ended
        the program's (its ops lost). Ours writes what it has and stands aside until the
        program's stops, then starts again."""
        global kineto_started
        if self._own_call == threading.get_ident() or self.done:   # ours, or ours is over
            return
        with self.lock:
            if starting:
                kineto_started = True
                if not self._aside:
                    self._quality("cpu_profiler_failed", None, "the program ran a torch.profiler "
                                  "of its own: CPU ops that ran while it did are not recorded")
                self._aside = True
                self._stop_profiler()   # prof stays False: nothing starts it meanwhile
            elif self._aside:
                self._aside = False
                if self.prof is False:
                    self.prof = None
                    self._start_profiler()

    def _cycle_due(self) -> bool:
        here = threading.current_thread()
        return not (self.mode != "cpu" or not self.prof
                    or time.monotonic() - self._prof_since < self.ops_every_s
                    or here is not self._prof_thread and (self._prof_thread.is_alive()
                                                          or here is not threading.main_thread()))

    def _cycle_profiler(self) -> bool:
        """Write the ops recorded so far and profile on. Only on the thread that started the
        profiler (torch keeps its state per thread; cycled on another while other threads ran
        ops, their ops went to its steps), or on the main thread once that one has ended (a
        thread that loaded the model, importing torch: it was never cycled, and a crash lost
        every op), and at most every ops_every_s seconds. Whether it did."""
        if not self._cycle_due():
            return False
        self._stop_profiler()
        self.prof = None
        self._start_profiler()
        return True

    def _stop_profiler(self) -> None:
        prof = self.prof
        if not prof:
            return
        self.prof = False
        try:
            self._own_call = threading.get_ident()
            try:
                prof.stop()
            finally:
                self._own_call = None
            self._write_ops(prof)
        except Exception as exc:
            self._quality("cpu_profiler_failed", None, f"torch.profiler results were lost: {exc}")
        finally:
            # Free torch's results now: left to the garbage collector, they were collected at
            # interpreter exit and crashed it (SIGSEGV) once the profiler had been cycled.
            prof.profiler = None

    def _write_ops(self, prof) -> None:
        import numpy as np
        import pyarrow as pa

        from cuptiprof.store import arrow

        base = prof.profiler.kineto_results.trace_start_ns()
        events = [e for e in prof.events() if not getattr(e, "is_async", False)]
        if not events:
            return
        ids = {}
        for e in events:
            ids[e.id] = self.next_id
            self.next_id += 1
        n = len(events)
        start = np.fromiter((base + int(e.time_range.start * 1000) for e in events), np.int64, n)
        end = np.fromiter((base + int(e.time_range.end * 1000) for e in events), np.int64, n)
        # The OS thread id (torch's own `thread` is a counter from 1): the one ranges carry.
        tids = np.fromiter((_tid(e) for e in events), np.int64, n)
        # Step of each op: the recorded step window that holds its start (host windows). A window
        # of the op's own thread wins, so that steps threads run at once keep their own ops; an op
        # on a thread with no step of its own (a pool the step hands work to) goes by time only.
        # Of several windows that hold it, the latest begun wins, as in the collector (windows
        # are listed as steps end: one begun later may have ended first).
        windows = sorted(self.windows, key=lambda w: w[1])
        none = np.iinfo(np.int64).min   # no step: a step's number may be below 0 (step=-1)
        step = np.full(n, none, np.int64)
        for s, ws, we, _ in windows:
            if s is not None:
                step[(start >= ws) & (start < we)] = s
        for s, ws, we, th in windows:   # None: a warm-up step, whose ops are not kept
            step[(tids == th) & (start >= ws) & (start < we)] = none if s is None else s
        if self.seen:   # steps were marked: keep what ran inside recorded ones
            keep = step != none
            if not keep.any():
                return
            idx = np.nonzero(keep)[0]
            events = [events[i] for i in idx]
            start, end, step, tids, n = start[idx], end[idx], step[idx], tids[idx], len(idx)
        self.op_steps.update(arrow.distinct(step[step != none]).tolist())
        step_col = arrow.array(step, mask=step == none, type=pa.int32())
        rid = arrow.array([ids[e.id] for e in events], pa.int64())
        parents = [ids.get(e.cpu_parent.id) if e.cpu_parent is not None else None for e in events]
        depth = np.zeros(n, np.int64)
        root = np.arange(n)
        at = {id(e): i for i, e in enumerate(events)}
        for i, e in enumerate(events):
            d, p, r = 0, e.cpu_parent, i
            while p is not None and d < 256:
                r = at.get(id(p), r)
                d, p = d + 1, p.cpu_parent
            depth[i], root[i] = d, r
        # An op that no other op encloses nests in the innermost range open on its thread when it
        # started, so the work of cuptiprof.range("attention") is found under that range.
        # (ranges of this thread still open, e.g. one around every step, hold ops too)
        spans = self.spans + [(o.thread, o.start, 1 << 62, o.range_id, o.depth)
                              for o in self._stack() if o.kind != "beyond"]
        outer, base = _enclosing(spans, tids, start, [p is None for p in parents])
        for i in np.nonzero(outer >= 0)[0]:
            parents[i] = int(outer[i])
        depth += base[root]
        parent = arrow.array(parents, pa.int64())
        names = arrow.array([e.name for e in events], pa.string())
        thread = arrow.array(tids)
        _judge_names(events, self.work_names)
        leaf = np.fromiter((_is_kernel(e, self.work_names) for e in events), bool, n)
        li = arrow.array(np.nonzero(leaf)[0])
        ranges = pa.table({"range_id": rid, "parent_id": parent, "depth": arrow.array(depth, pa.int32()),
                           "name": names, "thread_id": thread, "start_ns": arrow.array(start),
                           "end_ns": arrow.array(end), "kind": arrow.array(["op"] * n), "step": step_col})
        kernels = pa.table({"device_id": arrow.array(np.full(len(li), -1, np.int32)),
                            "stream_id": thread.take(li).cast(pa.int32()),
                            "correlation_id": rid.take(li),
                            "start_ns": arrow.array(start).take(li), "end_ns": arrow.array(end).take(li),
                            "step": step_col.take(li), "range_id": rid.take(li), "op_id": rid.take(li),
                            "name": names.take(li)})
        self._ensure_writer()
        self.writer.append({"ranges": ranges, "kernels": kernels})

    # -- writing -------------------------------------------------------------------------------
    def _ensure_writer(self) -> None:
        if self.writer is not None:
            return
        from cuptiprof.store.writer import RunInfo, Writer

        torch_version = None
        if "torch" in sys.modules:
            torch_version = getattr(sys.modules["torch"], "__version__", None)
        info = RunInfo(label=self.s.run_label, source=_SOURCE.get(self.mode, "cupti"),
                       command=self.command, start_ns=self.start_ns, torch_version=torch_version,
                       settings={"warmup": self.s.warmup, "steps": self.s.steps, "mode": self.mode,
                                 "step_range": self.s.step_range, "step_fn": self.s.step_fn})
        self.writer = Writer(self.part_path(".logs.duckdb" if self.mode == "logs" else ".duckdb"),
                             info, mode="create", synced=False)
        try:   # one thread: the writer must not compete with the profiled program for cores
            self.writer.execute("SET threads = 1")
        except Exception:
            pass
        if self.mode == "logs":
            return
        self.writer.append({"processes": {
            "pid": [self.pid], "host": [self.host],
            **{k: pa_int(v) for k, v in ranks.from_env(os.environ)._asdict().items()},
            "command": [self.command], "start_ns": [self.start_ns], "ended_early": [None]}})
        if self.mode == "cpu":
            self.writer.append({"devices": {"device_id": [-1], "kind": ["cpu"], "name": [cpu_name()],
                                            "source": ["torch"]}})
            self._quality("no_gpu", "gpu",
                          "no GPU activity was captured (no CUDA GPU found): kernels holds CPU ops "
                          "from torch.profiler on device -1, one stream per thread")
        elif self.mode == "light" and self.s.mode != "light":   # forked from a CUPTI-profiled one
            self._quality("missing_kind", "gpu",
                          "a process forked from one CUPTI profiled (CUPTI does not survive "
                          "fork): ranges and logs only, no GPU activity was collected")
        elif self.mode == "light":
            self._quality("missing_kind", "gpu",
                          "light mode: ranges and logs only, no GPU activity was collected")

    def _quality(self, check: str, subject, detail: str, count: int | None = None) -> None:
        try:
            self._ensure_writer()
            self.writer.add_quality(check, subject, count, detail)
        except Exception:
            pass

    def flush(self) -> None:
        with self.lock:
            ranges, logs = self.ranges, self.logs
            self.ranges, self.logs = [], []
            self._flushed_at = time.monotonic()
        if not ranges and not logs:
            return
        self._ensure_writer()
        batch = {}
        if ranges:
            cols = list(zip(*ranges))
            batch["ranges"] = {
                "range_id": pa_col(cols[0], "int64"), "parent_id": pa_col(cols[1], "int64"),
                "depth": pa_col(cols[2], "int32"), "name": pa_col(cols[3], "string"),
                "thread_id": pa_col(cols[4], "int64"), "start_ns": pa_col(cols[5], "int64"),
                "end_ns": pa_col(cols[6], "int64"), "kind": pa_col(cols[7], "string"),
                "step": pa_col(cols[8], "int32"), "attrs": pa_col(cols[9], "string"),
                "domain": pa_col(["cuptiprof"] * len(ranges), "string")}
        if logs:
            cols = list(zip(*logs))
            batch["logs"] = {"thread_id": pa_col(cols[0], "int64"), "time_ns": pa_col(cols[1], "int64"),
                             "level": pa_col(cols[2], "string"), "logger": pa_col(cols[3], "string"),
                             "message": pa_col(cols[4], "string"), "step": pa_col(cols[5], "int32")}
        self.writer.append(batch)

    def close(self, status: str = "complete", exit_status: int | None = None) -> None:
        """`exit_status`: the status the process ends with, where it ends now and it is known."""
        if self.closed:
            return
        try:
            self._close(status)
        finally:
            try:   # the end marker: this process did not end early, and when it ended (the
                # only record of it where the process wrote no part file)
                _write_whole(self.part_path(".end.json"), json.dumps(
                    {"pid": self.pid, "status": status, "exit_status": exit_status,
                     "end_ns": time.time_ns()}))
            except OSError:
                pass

    def _close(self, status: str) -> None:
        if self.mode == "time":
            self.closed = True
            if self.step_times:
                try:
                    _write_whole(self.part_path(".steps.json"), json.dumps(
                        {"pid": self.pid, "steps": self.step_times}))
                except OSError:
                    pass
            return
        # Under the lock: a step ending on another thread cycles torch.profiler (stop, start a
        # new one) under it; stopped here halfway through, the new one would never be stopped.
        with self.lock:
            profiled = self.prof is not None   # torch.profiler ran: a step without ops is empty
            if self.prof:   # a step still open keeps the ops that ran in it so far
                now = time.time_ns()
                self.windows += [(step, start, now, th)
                                 for start, step, th in self._open_steps.values()]
            self._stop_profiler()
            if profiled and self.op_steps:
                for s in sorted({w[0] for w in self.windows if w[0] is not None} - self.op_steps):
                    self._quality("empty_step", str(s), f"step {s} recorded no op (nothing ran "
                                  "in it, or torch.profiler did not capture it)")
            if profiled and self._interleaved:
                self._quality("ranges_interleaved", None, f"{self._interleaved} ranges began "
                              "while a range of another asyncio task was open on their thread "
                              "(tasks running at once): CPU ops that ran while both were open are "
                              "credited to the step begun last",
                              count=self._interleaved)
            self._steps_short()
            # A step still open (a signal ended the process inside it, a thread's step at exit)
            # holds only the part that ran, as one an exception ended does
            from cuptiprof.store.quality import STEP_INCOMPLETE, incomplete_detail

            for _, step, _ in sorted(self._open_steps.values()):
                self._quality(STEP_INCOMPLETE, str(step),
                              incomplete_detail(step, "the process's end inside it"))
            self.closed = True
            # Ranges still open (a crash inside a step) are written without an end.
            for st in self._stack():
                if st.kind != "beyond":
                    self.ranges.append((st.range_id, st.parent_id, st.depth, st.name, st.thread,
                                        st.start, None, st.kind, st.step, None))
        try:
            self.flush()
            if self.writer is not None:
                end = time.time_ns()
                if self.mode != "logs":
                    self.writer.execute("UPDATE processes SET end_ns = ?, ended_early = FALSE WHERE pid = ?",
                                        [end, self.pid])
                none = None
                if self.mode == "cpu" and not profiled:   # torch.profiler never ran: no CPU op
                    none = NO_OPS
                elif self.mode == "cpu" and self.seen and not any(
                        w[0] is not None for w in self.windows):   # steps, every one warm-up
                    none = WARM_UP_ONLY
                if none:
                    self.writer.execute("UPDATE data_quality SET detail = ? WHERE check_name = "
                                        "'no_gpu' AND pid = ?", [none, self.pid])
                self.writer.close(status, end_ns=end)
        except Exception as exc:
            stderr_line(f"cuptiprof: warning: could not finish {self.part_path('.duckdb')}: {exc}")

    def _steps_short(self) -> None:
        """Fewer steps than --warmup/--steps ask for, as the collector says it: not for a
        process that marked none (a helper), nor for an image whose process goes on in another
        program (exec), which counts on from its steps; with the collector, it counts them."""
        if not self.seen or self.goes_on or self.mode == "logs":
            return
        s = self.s
        if s.steps is not None and self.recorded < s.steps:
            self._quality("steps_short", None, f"{s.steps} steps were asked for after {s.warmup} "
                          f"warm-up steps; {self.recorded} were recorded", count=self.recorded)
        elif s.steps is None and s.warmup and not self.recorded:
            self._quality("steps_short", None, f"{self.seen} steps were marked, all within the "
                          f"{s.warmup} warm-up steps: no step was recorded", count=0)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's writer, buffers and step counts are not ours (a
        forked worker counts its warm-up and steps from its own first step, as a spawned one)."""
        # Kept, never used: freeing the parent's DuckDB connection (or torch profiler) in the
        # child runs their destructors on state whose threads did not survive the fork (SIGSEGV).
        keep_forever(self.writer, self.prof)
        self.gen += 1   # ranges the parent had open are not this process's to write
        self.writer = None
        self.prof = None
        self._aside, self._own_call = False, None   # a torch.profiler the parent ran is not the child's
        self.ranges, self.logs = [], []
        self.seen, self.recorded, self.done, self._open_steps = 0, 0, False, {}
        self._open_on, self._interleaved = {}, 0
        self.step_times, self.windows, self.spans, self.op_steps = [], [], [], set()
        self._stack_var = contextvars.ContextVar("cuptiprof_open", default=())
        self.lock = threading.RLock()
        self.pid = os.getpid()
        self.image, self.exec_failed = 0, False
        self.start_ns = time.time_ns()

    def carry_on(self, seen: int, recorded: int) -> None:
        """A new program image of a process (after exec): its steps go on from the old one's
        count, as one process's would (warm-up is not repeated, --steps counts both)."""
        self.seen, self.recorded = seen, recorded
        self.done = self.s.steps is not None and recorded >= self.s.steps


def command_line() -> str:
    """The process's command line as it was started (`python -m pkg x y`, a multiprocessing
    worker's `python -c ... --multiprocessing-fork`): sys.argv is what the program made of it
    (runpy puts pkg/__main__.py there, a spawned worker takes its parent's)."""
    return command_text(getattr(sys, "orig_argv", None) or sys.argv)


def _watch_other_profilers(rec: Recorder) -> None:
    """Have `rec` told when any torch.profiler starts or stops: torch.autograd.profiler calls
    these two as every profile is prepared (which ends the one running) and after it stopped.
    A torch without them goes unwatched."""
    ap = sys.modules.get("torch.autograd.profiler")
    names = (("_prepare_profiler", True), ("_run_on_profiler_stop", False))
    if not all(callable(getattr(ap, name, None)) for name, _ in names):
        return
    for name, starting in names:
        fn = getattr(ap, name)
        if not isinstance(fn, _ProfilerNotice):
            fn = _ProfilerNotice(fn, starting)
            setattr(ap, name, fn)
        fn.rec = rec   # the recorder of the time (a new one after an exec)


class _ProfilerNotice:
    """torch's start or stop notice, passed on to the recorder: before a start, after a stop."""

    def __init__(self, fn, starting: bool):
        self.fn, self.starting, self.rec = fn, starting, None

    def __call__(self, *args, **kwargs):
        if self.starting:
            self._tell()
        out = self.fn(*args, **kwargs)
        if not self.starting:
            self._tell()
        return out

    def _tell(self) -> None:
        try:
            if self.rec is not None and not self.rec.closed:
                self.rec.other_profiler(self.starting)
        except Exception:   # never break the program's own profiler
            pass


def _all_threads() -> dict:
    """torch.profiler records the ops of the thread that started it unless told otherwise: a
    generate() loop or a thread pool on other threads would have none."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return {"experimental_config": _ExperimentalConfig(profile_all_threads=True)}
    except (ImportError, TypeError):   # a torch without it: the starting thread's ops only
        return {}


def _tid(e) -> int:
    tid = getattr(e, "device_resource_id", None)   # the OS thread id for CPU events
    return int(tid) if isinstance(tid, int) and tid > 0 else int(e.thread)


def _enclosing(spans: list, tids, starts, top) -> tuple:
    """For ops starting at `starts` on threads `tids`, where `top` (ops no op encloses): the
    range_id of the innermost span (thread, start, end, range_id, depth) holding the start, or
    -1; and, for every op, the depth that span adds (its depth + 1, else 0)."""
    import numpy as np

    n = len(starts)
    outer = np.full(n, -1, np.int64)
    base = np.zeros(n, np.int64)
    top = np.asarray(top, bool)
    for thread in {t for t, *_ in spans}:
        idx = np.nonzero(top & (tids == thread))[0]
        if not len(idx):
            continue
        idx = idx[np.argsort(starts[idx], kind="stable")]
        at = starts[idx]
        # Shallow spans first: a deeper one, inside them, overwrites.
        for _, s0, s1, rid, d in sorted((sp for sp in spans if sp[0] == thread), key=lambda x: x[4]):
            lo, hi = np.searchsorted(at, s0, "left"), np.searchsorted(at, s1, "left")
            outer[idx[lo:hi]] = rid
            base[idx[lo:hi]] = d + 1
    return outer, base


def _write_whole(path: Path, text: str) -> None:
    """`text` into the marker `path`, whole or not at all: the launcher reads the markers while
    processes of the run still write them, and an end marker it found there but still empty
    was an ending it could read nothing of (the process's exit status lost)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def pa_int(v):
    import pyarrow as pa

    from cuptiprof.store import arrow

    return arrow.array([v], pa.int32())


def pa_col(values, typ: str):
    import pyarrow as pa

    from cuptiprof.store import arrow

    return arrow.array(list(values), getattr(pa, typ)())
