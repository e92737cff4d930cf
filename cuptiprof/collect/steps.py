"""A recorded step's end (a flush, at most once every flush_every_s; the end of recording after
the last step asked for), and the steps and ranges the resolver asks a Session for
(RangeBook): by range id, by time, by thread and time for launches of no range."""
from __future__ import annotations

import time
from typing import Any

from cuptiprof.collect.decode import no_gc


class _Steps:
    """Session's methods for a step's end and for the resolver (RangeBook)."""

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
        # [start, end), as steps_at and the importers hold a step: a range begun as a step
        # ended is of the next step (one begun then), else of none, there as here
        for s, e, step in reversed(tuple(self._windows)):
            if s <= t_ns < e:
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
        a step of the launching thread comes first (its own warm-up step, or range named
        'warmup': no step, warm-up work stays out of recorded steps), then the latest-started
        recorded step of any thread."""
        import numpy as np

        tid, t = np.asarray(tid, np.int64), np.asarray(t, np.int64)
        step, found = np.zeros(len(t), np.int64), np.zeros(len(t), bool)
        spans = [sp for gen in list(self._span_gens) for sp in gen] + list(self._spans)
        spans += [(tok[5], None, tok[7] if tok[6] == "step" else None, tok[4])
                  for tok in list(self._open.values())
                  if (tok[9] is not None or tok[6] == "warmup") and tok[5]]
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
