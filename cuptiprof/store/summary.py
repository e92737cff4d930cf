"""GPU busy time per run, process, device and step (the union of the work intervals of kernels,
memcpys and memsets across streams), kept while writing so that reports need not fold every row.

The writer feeds each committed batch to `BusySummary.add`. The native module (`_islands.c`)
builds each group's (pid, device, step) islands in one pass over the rows as they come, merging
an interval that starts early in from the end (O(1) a row when starts are nearly in order); it
gives up on rows far from start order, and without it (no compiler, CUPTIPROF_NATIVE=0) numpy
does the same: per group the batch's intervals are put in start order (one nearly-sorted
argsort, skipped when in order) and a running max of their ends gives the union. Both give the
same numbers. A group keeps its islands (numpy: its intervals, reduced to islands once it spans
batches) while the next batch may still add to it; a group seen again after that is recomputed
from the table at close (`BUSY_SQL`), so the stored numbers are exact whatever the batching.
The result goes to `step_busy` at close, and the run to `step_busy_runs`; a file whose writer
died has neither for its run and the reports compute busy time from the rows instead.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuptiprof.native import extensions_enabled, load_extension
from cuptiprof.store.arrow import rows_as_lists, valid as _valid, values as _values
from cuptiprof.store.distinct import _one_row_each, distinct_rows

_islands = load_extension("cuptiprof.store._islands", api=1)  # None: the numpy path does it all

# The same fold as sql/scope/sel_busy.sql, over the stored rows of one run. {groups}: an extra
# condition on (pid, device_id, step) or TRUE.
BUSY_SQL = """
SELECT run_id, pid, device_id, step, busy.b AS busy_ns, start_ns, end_ns
FROM (
    SELECT run_id, pid, device_id, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           list_reduce(list({{'s': start_ns, 'e': end_ns}} ORDER BY start_ns, end_ns),
                       lambda acc, x: {{'m': greatest(acc.m, x.e),
                                       'b': acc.b + greatest(0, x.e - greatest(x.s, acc.m))}},
                       {{'m': -9223372036854775807::BIGINT, 'b': 0::BIGINT}}) AS busy
    FROM (SELECT l.run_id, l.pid, l.device_id, k.step, k.start_ns, k.end_ns
          FROM kernel_rows k JOIN lanes l ON l.lane_id = k.lane_id WHERE l.run_id = $run
          UNION ALL
          SELECT run_id, pid, device_id, step, start_ns, end_ns FROM memcpys WHERE run_id = $run
          UNION ALL
          SELECT run_id, pid, device_id, step, start_ns, end_ns FROM memsets WHERE run_id = $run) w
    WHERE end_ns >= start_ns AND {groups}
    GROUP BY run_id, pid, device_id, step
)
"""

GROUP_KEYS = ("pid", "device_id", "step")


# One batch's work of one table: (group keys (pid, device_id, step), group code per row,
# start_ns, end_ns), rows that cannot be work (NULL times, end before start) left out.
WorkPart = tuple[list[tuple], np.ndarray, np.ndarray, np.ndarray]


class BusySummary:
    """Busy time per (pid, device_id, step) of one run, built batch by batch."""

    def __init__(self) -> None:
        self.done: dict[tuple, tuple[int, int, int]] = {}  # group -> (busy, start, end)
        # group -> (intervals, busy, start, end). Intervals: (native store, index) of its islands,
        # or (starts, ends) arrays from the numpy path: its intervals in start order as they
        # came (no islands computed) unless the group already spans batches.
        self.open: dict[tuple, tuple] = {}
        self.dirty: set[tuple] = set()                     # recomputed from the table

    def add(self, parts: list[WorkPart]) -> None:
        """Take the work of one committed batch (one part per table, see `work_part`)."""
        parts = [p for p in parts if len(p[1])]
        if not parts:
            self._close_open(set())
            return
        if len(parts) == 1:
            keys, remaps = parts[0][0], [None]
        else:  # number the groups of all parts together (a small table per part)
            index: dict[tuple, int] = {}
            remaps = [np.array([index.setdefault(key, len(index)) for key in p[0]], np.int64)
                      for p in parts]
            keys = list(index)
        k = len(keys)
        for key in keys:
            if key in self.done:  # seen in an earlier batch, not the previous one
                del self.done[key]
                self.dirty.add(key)
        # Intervals still open from the previous batch take part as intervals of their group.
        prev = [(i, *self.open[key][0]) for i, key in enumerate(keys) if key in self.open]
        native = _native()
        if native is not None:
            # The previous islands go first: in start order, each is appended (or merged into
            # the last island) in O(1). The parts go as they are (no concatenation, no remapped
            # copy of their codes).
            seeds = [(i, a, b) if not isinstance(a, np.ndarray)
                     else (i, _native_ints(a), _native_ints(b)) for i, a, b in prev]
            res = native.islands([*seeds, *((_native_ints(c), _native_ints(s), _native_ints(e), r)
                                            for (_, c, s, e), r in zip(parts, remaps))], k)
            if res is not None:
                self._close_open(set(keys))
                store, summary = res
                count, busy, first, last = np.frombuffer(summary, np.int64).reshape(4, k).tolist()
                for i, key in enumerate(keys):
                    if count[i] and key not in self.dirty:
                        self.open[key] = ((store, i), busy[i], first[i], last[i])
                return
        self._close_open(set(keys))
        if len(parts) == 1:
            c, starts, ends = parts[0][1:]
        else:
            c = np.concatenate([r[p[1]] for p, r in zip(parts, remaps)])
            starts = np.concatenate([p[2] for p in parts])
            ends = np.concatenate([p[3] for p in parts])
        if prev:
            prev = [(i, *_arrays(a, b)) for i, a, b in prev]
            starts = np.concatenate([starts, *(s for _, s, _ in prev)])
            ends = np.concatenate([ends, *(e for _, _, e in prev)])
            c = np.concatenate([c, *(np.full(len(s), i, c.dtype) for i, s, _ in prev)])
        spans = {i for i, _, _ in prev}
        for i, s, e in _in_start_order(starts, ends, c, k):
            key = keys[i]
            if key in self.dirty:
                continue
            run_max = np.maximum.accumulate(e)
            # Each interval adds how far the running max moves past its start or the max
            # before it: never negative, so int64 arithmetic that wraps (spans past 2**63,
            # garbage timestamps) wraps the busy time as the native module does.
            before = np.empty_like(s)
            before[0] = s[0]
            np.maximum(s[1:], run_max[:-1], out=before[1:])
            busy = int(np.subtract(run_max, before, out=before).sum())
            if i in spans:  # a group spanning batches keeps only its islands
                s, e = _union_sorted(s, run_max)
            self.open[key] = ((s, e), busy, int(s[0]), int(run_max[-1]))

    def _close_open(self, keep: set) -> None:
        for key in [k for k in self.open if k not in keep]:
            self.done[key] = self.open.pop(key)[1:]

    def finish(self) -> tuple[list[tuple], list[tuple]]:
        """(rows (pid, device_id, step, busy_ns, start_ns, end_ns), groups to recompute)."""
        self._close_open(set())
        if _islands is not None:
            _islands.trim()  # the island arrays kept for reuse
        rows = [(*k, b, s, e) for k, (b, s, e) in self.done.items()]
        return rows, sorted(self.dirty, key=lambda k: tuple((v is None, v or 0) for v in k))


def work_part(t: pa.Table, groups: tuple[list[tuple], np.ndarray] | None = None) -> WorkPart:
    """The work of one table (columns pid, device_id, step, start_ns, end_ns; a missing
    device_id or step is NULL). `groups`: the (keys, code per row) when the caller already has
    them; otherwise they are found here."""
    if not t.num_rows or "start_ns" not in t.column_names or "end_ns" not in t.column_names:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    s_arr, e_arr = (_as(t.column(c), pa.int64()) for c in ("start_ns", "end_ns"))
    s, e = _values(s_arr), _values(e_arr)
    if groups is None:
        cols = {c: (_as(t.column(c), pa.int32()) if c in t.column_names
                    else pa.nulls(t.num_rows, pa.int32())) for c in GROUP_KEYS}
        g = pa.table(cols)
        codes, k = distinct_rows(g)
        keys = list(zip(*rows_as_lists(g, _one_row_each(codes, k))))
    else:
        keys, codes = groups
    keep = e >= s
    for a in (s_arr, e_arr):
        if a.null_count:
            keep &= _valid(a)
    if not keep.all():
        s, e, codes = s[keep], e[keep], codes[keep]
        used = np.bincount(codes, minlength=len(keys)) > 0
        if not used.all():  # groups left without rows are no groups of this batch
            renum = np.cumsum(used) - 1
            keys = [k for k, u in zip(keys, used.tolist()) if u]
            codes = renum[codes]
    return keys, codes, s, e


def _as(col, typ: pa.DataType) -> pa.Array:
    """One array of the given type (no copy when it already is one)."""
    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return a if a.type == typ else a.cast(typ)


def _native():
    """The native islands module, or None when it was not built or CUPTIPROF_NATIVE=0."""
    return _islands if extensions_enabled() else None


def _native_ints(a: np.ndarray) -> np.ndarray:
    """An array as the native module takes it: contiguous int32 or int64 (no copy when it is)."""
    if a.dtype != np.int64 and a.dtype != np.int32:
        a = a.astype(np.int64)
    return np.ascontiguousarray(a)


def _arrays(a, b) -> tuple[np.ndarray, np.ndarray]:
    """An open group's intervals as (starts, ends) arrays: (a, b) is either those arrays or
    (native store, group index)."""
    if isinstance(a, np.ndarray):
        return a, b
    return tuple(np.frombuffer(x, np.int64) for x in a.get(b))


def _in_start_order(starts: np.ndarray, ends: np.ndarray, codes: np.ndarray, k: int):
    """Yield (group code, starts, ends) per group that has rows, in start order."""
    if k == 1:
        yield 0, *_by_start(starts, ends)
        return
    if not (codes[1:] >= codes[:-1]).all():  # rows of a group together (radix sort when small)
        order = np.argsort(codes.astype(np.int16) if k < 1 << 15 else codes, kind="stable")
        starts, ends, codes = starts[order], ends[order], codes[order]
    bounds = np.searchsorted(codes, np.arange(k + 1))
    for c in range(k):
        lo, hi = int(bounds[c]), int(bounds[c + 1])
        if hi > lo:
            yield c, *_by_start(starts[lo:hi], ends[lo:hi])


def _by_start(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals in start order: one stable sort of nearly-sorted starts, skipped when in order."""
    if not (s[1:] >= s[:-1]).all():
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    return s, e


def _union_sorted(s: np.ndarray, run_max: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Islands (disjoint, in order) of intervals in start order, given the running max of
    their ends."""
    first = np.empty(len(s), bool)
    first[0] = True
    np.greater(s[1:], run_max[:-1], out=first[1:])
    idx = np.flatnonzero(first)
    # An island ends where the next begins; the running max there is its end (islands are
    # disjoint and in order, so no earlier island reaches that far).
    last = np.empty(len(idx), np.int64)
    last[:-1] = idx[1:] - 1
    last[-1] = len(s) - 1
    return s[idx], run_max[last]
