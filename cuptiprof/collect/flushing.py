"""A Session's flush: synchronize, take what CUPTI delivered, resolve it to ranges and steps,
and append one transaction with the ranges closed since the last flush; the ranges still open
when it stops are written with no end."""
from __future__ import annotations

import contextlib
import time
from typing import Any

import pyarrow as pa

from cuptiprof.collect.decode import no_gc
from cuptiprof.collect.resolve import SELF_ID
from cuptiprof.outputs import ctrl_c_after
from cuptiprof.store import arrow

RANGE_COLS = ("range_id", "parent_id", "depth", "name", "domain", "thread_id", "start_ns",
              "end_ns", "kind", "step", "attrs")


class _Flushing:
    """Session's methods that flush and write its ranges."""

    def flush(self, final: bool = False) -> None:
        """Synchronize, flush CUPTI, resolve and append one transaction. On the thread that
        ended a step, or stop()'s; one at a time."""
        with self._flush_lock, no_gc(), contextlib.nullcontext() if final else ctrl_c_after():
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


def _take_all(pending: list) -> list:
    """What `pending` holds, taken out of it. The list itself stays: another thread may have
    read it already and still be appending to it (a new list in its place lost that item)."""
    n = len(pending)
    taken = pending[:n]
    del pending[:n]
    return taken


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
