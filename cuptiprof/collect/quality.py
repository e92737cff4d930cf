"""A Session's data_quality rows: a problem noted while it runs (written without waiting for
another thread's flush), and at stop() what was not captured, dropped or cut short."""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from cuptiprof import markers
from cuptiprof.collect.flushing import _rows_to_cols, _take_all
from cuptiprof.store import arrow
from cuptiprof.store.quality import STEP_INCOMPLETE, incomplete_detail

_RANGES_OFF = "CUPTIPROF_DISABLE is set, so cuptiprof.range does nothing"


class _Quality:
    """Session's methods that write its data_quality rows."""

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
        if self._interleaved and src.gpu:
            add("ranges_interleaved", None, self._interleaved,
                f"{self._interleaved} ranges opened while a range of another asyncio task was "
                "open on their thread (tasks running at once): GPU work launched while both were "
                "open is credited to the one opened last")
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
