"""A Session's ranges as cuptiprof.range opens and ends them: each numbered (a step also by
phase: warm-up, recorded, beyond the last), kept on the stack of its thread or asyncio task,
and its id pushed on CUPTI's external-correlation stack of the thread, which is per OS thread
(a range ended on another thread, or out of order, comes off later)."""
from __future__ import annotations

import math
import threading
import time

from cuptiprof import markers
from cuptiprof.collect.decode import no_gc
from cuptiprof.errors import stderr_line


class _Ranges:
    """Session's methods that open and end ranges (called by cuptiprof.range)."""

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
            given = markers.given_step(attrs.get("step"))
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
        elif self.phase not in ("warmup", "record"):
            # before start() and after the last step: not recorded. While warming up ranges are
            # (host-side, nothing pushed: collection is off), as without CUPTI: one around the
            # steps (the loop) holds their work and nests what is in it, at every --warmup
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
        # A warm-up step is not pushed: its thread's span keeps its work out of every step. A
        # range named 'warmup' is (inside a recorded step too): what it launches, and what the
        # ranges in it launch, is warm-up, of no step (steps_at: its span on its thread)
        warm_range = kind == "warmup" and tok[9] is None
        if warm_range:   # begun before the push: its span holds all it launches (steps_at)
            tok[5] = self._start_of[rid] = time.time_ns()
        if self.collecting and (kind != "warmup" or warm_range):
            pushed = self._cupti_stack()
            if self._unpop:
                self._cupti_unwind(pushed)
            # Above this task's innermost range on the thread's CUPTI stack lies another task's
            # (asyncio tasks at once): until one of them ends, what either launches goes to the
            # one opened last. Said whether they end in order or not.
            if pushed and pushed[-1] != next((t[0] for t in reversed(stack) if t[10]), None):
                with self._phase_lock:   # see steps_recorded below
                    self._interleaved += 1
            self.source.push(rid)
            pushed.append(rid)
            tok[10] = True
        if not warm_range:
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
                    stderr_line(f"cuptiprof: warning: {self._filter_failed}")
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
        warm-up step, nor in a range named 'warmup': its ranges and GPU work are of no step),
        else the latest begun step open in the process (_open_step)."""
        for t in reversed(self._stack()):
            if t[6] == "warmup":   # a warm-up step, or a range named 'warmup'
                return None
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
                self._cupti_unwind(self._cupti_stack())
            else:
                with self._phase_lock:
                    self._moved_exits += 1
        self._open.pop(tok[0], None)
        self._closed.append(tuple(tok[:5]) + (tok[5], end) + tuple(tok[6:9]))
        self._gen_ids.append(tok[0])
        if tok[9] is None and tok[6] == "warmup":   # a range named 'warmup': of no step
            self._spans.append((tok[5], end, None, tok[4]))
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

    def _detach_ranges(self, exc: BaseException) -> None:
        self._note_problem("range_error", f"range bookkeeping failed: {exc}")
