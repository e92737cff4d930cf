"""GPU busy time per run, process, device and step (the union of the work intervals of kernels,
memcpys and memsets across streams), kept while writing so that reports need not fold every row.

The writer feeds each committed batch to `BusySummary.add`: the batch's intervals are merged into
islands with numpy (one nearly-sorted argsort). A group (pid, device, step) keeps its islands while
the next batch may still add to it; a group seen again after that is recomputed from the table at
close (`BUSY_SQL`), so the stored numbers are exact whatever the batching. The result goes to
`step_busy` at close, and the run to `step_busy_runs`; a file whose writer died has neither for its
run and the reports compute busy time from the rows instead.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    FROM (SELECT run_id, pid, device_id, step, start_ns, end_ns FROM kernel_rows WHERE run_id = $run
          UNION ALL
          SELECT run_id, pid, device_id, step, start_ns, end_ns FROM memcpys WHERE run_id = $run
          UNION ALL
          SELECT run_id, pid, device_id, step, start_ns, end_ns FROM memsets WHERE run_id = $run) w
    WHERE end_ns >= start_ns AND {groups}
    GROUP BY run_id, pid, device_id, step
)
"""

GROUP_KEYS = ("pid", "device_id", "step")


class BusySummary:
    """Busy time per (pid, device_id, step) of one run, built batch by batch."""

    def __init__(self) -> None:
        self.done: dict[tuple, tuple[int, int, int]] = {}       # group -> (busy, start, end)
        self.open: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # group -> island starts, ends
        self.dirty: set[tuple] = set()                          # recomputed from the table

    def add(self, tables: list[pa.Table]) -> None:
        """Take the work rows of one committed batch (tables with pid, device_id, step,
        start_ns, end_ns; missing device_id/step columns are NULL)."""
        groups, starts, ends = _work(tables)
        if starts is None:
            self._close_open(set())
            return
        from cuptiprof.store.writer import _int_array, distinct_rows

        codes, k = distinct_rows(groups)
        rep = np.empty(k, np.int64)
        rep[codes] = np.arange(len(codes))
        reps = groups.take(_int_array(rep))
        keys = list(zip(*(reps.column(c).to_pylist() for c in GROUP_KEYS)))
        for key in keys:
            if key in self.done:  # seen in an earlier batch, not the previous one
                del self.done[key]
                self.dirty.add(key)
        # Islands still open from the previous batch take part as intervals of their group.
        extra_s, extra_e, extra_c = [], [], []
        for i, key in enumerate(keys):
            if key in self.open:
                s, e = self.open[key]
                extra_s.append(s)
                extra_e.append(e)
                extra_c.append(np.full(len(s), i, np.int64))
        self._close_open(set(keys))
        c = codes.astype(np.int64)
        if extra_s:
            starts = np.concatenate([starts, *extra_s])
            ends = np.concatenate([ends, *extra_e])
            c = np.concatenate([c, *extra_c])
        for i, s, e in _islands(starts, ends, c, k):
            key = keys[i]
            if key not in self.dirty:
                self.open[key] = (s, e)

    def _close_open(self, keep: set) -> None:
        for key in [k for k in self.open if k not in keep]:
            s, e = self.open.pop(key)
            self.done[key] = (int((e - s).sum()), int(s[0]), int(e[-1]))

    def finish(self) -> tuple[list[tuple], list[tuple]]:
        """(rows (pid, device_id, step, busy_ns, start_ns, end_ns), groups to recompute)."""
        self._close_open(set())
        rows = [(*k, b, s, e) for k, (b, s, e) in self.done.items()]
        return rows, sorted(self.dirty, key=lambda k: tuple((v is None, v or 0) for v in k))


def _work(tables: list[pa.Table]) -> tuple[pa.Table | None, np.ndarray | None, np.ndarray | None]:
    from cuptiprof.store.writer import _values

    cols: dict[str, list] = {c: [] for c in GROUP_KEYS}
    starts, ends = [], []
    for t in tables:
        if not t.num_rows or "start_ns" not in t.column_names or "end_ns" not in t.column_names:
            continue
        s_arr, e_arr = (_as(t.column(c), pa.int64()) for c in ("start_ns", "end_ns"))
        s, e = _values(s_arr), _values(e_arr)
        keep = e >= s
        for a in (s_arr, e_arr):
            if a.null_count:
                keep &= a.is_valid().to_numpy(zero_copy_only=False)
        mask = None if keep.all() else pa.Array.from_buffers(
            pa.bool_(), len(keep), [None, pa.py_buffer(np.packbits(keep, bitorder="little"))])
        for c in GROUP_KEYS:
            a = (_as(t.column(c), pa.int32()) if c in t.column_names
                 else pa.nulls(t.num_rows, pa.int32()))
            cols[c].append(a if mask is None else pc.filter(a, mask))
        starts.append(s if mask is None else s[keep])
        ends.append(e if mask is None else e[keep])
    if not starts or not sum(len(s) for s in starts):
        return None, None, None
    if len(starts) == 1:  # one table: no copies
        return pa.table({c: v[0] for c, v in cols.items()}), starts[0], ends[0]
    groups = pa.table({c: pa.concat_arrays(v) for c, v in cols.items()})
    return groups, np.concatenate(starts), np.concatenate(ends)


def _as(col, typ: pa.DataType) -> pa.Array:
    """One array of the given type (no copy when it already is one)."""
    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return a if a.type == typ else pc.cast(a, typ)


def _islands(starts: np.ndarray, ends: np.ndarray, codes: np.ndarray, k: int):
    """Yield (group code, island starts, island ends) of the union of intervals per group."""
    t0 = int(starts.min())
    width = int(ends.max()) - t0 + 1
    if width * k >= 1 << 62:  # time span too wide to lay groups side by side: one by one
        for i in range(k):
            sel = codes == i
            if sel.any():
                yield from ((i, s, e) for _, s, e in
                            _islands(starts[sel], ends[sel], np.zeros(sel.sum(), np.int64), 1))
        return
    # Groups laid side by side on one axis (group i occupies [i*width, (i+1)*width)): one
    # stable sort of nearly-sorted keys, then a running max of ends finds the islands.
    if k == 1:
        order = np.argsort(starts, kind="stable")
        s, e = starts[order] - t0, ends[order] - t0
    else:
        off = codes * width
        off -= t0
        s = starts + off
        order = np.argsort(s, kind="stable")
        s = s[order]
        off += ends
        e = off[order]
    run_max = np.maximum.accumulate(e)
    first = np.empty(len(s), bool)
    first[0] = True
    np.greater(s[1:], run_max[:-1], out=first[1:])
    idx = np.flatnonzero(first)
    isl_e = np.maximum.reduceat(e, idx)
    isl_s = s[idx]
    isl_c = codes[order][idx]
    bounds = np.flatnonzero(np.diff(isl_c)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(idx)]):
        c = int(isl_c[lo])
        base = c * width - t0
        yield c, isl_s[lo:hi] - base, isl_e[lo:hi] - base
