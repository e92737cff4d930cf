"""Flush-time resolution: every GPU row gets the range and step of the call that LAUNCHED it.

    GPU row.correlation_id -> API record (thread, time) and EXTERNAL_CORRELATION record
                            -> external id = cuptiprof range id -> that range's step

Launches are asynchronous, so the GPU may run a kernel after its range closed; the join goes
through the launching call, never through GPU time. Kernels replayed from a CUDA graph carry the
`cudaGraphLaunch` correlation id, so the same join tags them. Launches without an external id
(threads with no cuptiprof.range, framework NVTX ranges) are projected onto NVTX MARKER ranges of
other domains through the launching thread and the launch time. A launch in no range at all, or
in a range that began outside every step (a worker's NVTX range pushed before the first step),
takes the recorded step open in the process when its call began, by the importers' rule (the
launching thread's own step first, never a warm-up step; RangeBook.steps_at). Rows nobody claims keep a NULL
step and are counted (data_quality 'unclaimed_records'). Rows CUPTI could not time (a 0 start or
end, or an end before the start) are not written at all, only counted per kind and step
(data_quality 'untimed_records'): one of them would stretch every window that takes a minimum
start back to 1970. Records the bindings could not read are counted as 'decode_error'.

State kept between flushes is bounded: correlation maps live for two flushes (a row may arrive
one flush after its API record, never later since every flush follows a synchronize), and a
GPU row whose API record has not arrived yet waits for one more flush.

The joins are vectorised: each flush's correlation ids are sorted once (`CorrIndex`) and GPU
rows find their external id and launching call with `np.searchsorted`; the NVTX projection
finds each launch's innermost range by binary lifting (`_innermost`). Python runs per MARKER
record (pairing starts and ends) and per distinct range id, never per GPU row.
"""
from __future__ import annotations

import bisect
from typing import Any, Callable, Protocol

import numpy as np
import pyarrow as pa

from cuptiprof.collect.decode import Cols, cols, factorize
from cuptiprof.markers import attrs_json, step_number
from cuptiprof.store import arrow
from cuptiprof.store.quality import DECODE_ERROR, UNTIMED_RECORDS

COPY_KIND = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
             7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KIND = {0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
               6: "device_static", 7: "managed_static"}
SYNC_TYPE = {0: "unknown", 1: "event_synchronize", 2: "stream_wait_event",
             3: "stream_synchronize", 4: "context_synchronize"}
NA32 = 0xFFFFFFFF  # CUPTI's "not applicable" for 32-bit ids
MARKER_START, MARKER_END = 2, 4  # ActivityFlag has no MARKER_END member (docs/cupti-python.md §3)
PAYLOAD_DOUBLE, PAYLOAD_UINT64 = 0, 1  # MetricValueKind of a MARKER_DATA payload
SELF_ID = (1 << 63) - 1  # external id around cuptiprof's own synchronize: rows dropped
GPU_TABLES = ("kernel", "memcpy", "memcpy_p2p", "memset", "sync", "memory")


class RangeBook(Protocol):
    """What the resolver needs from the session's own range bookkeeping."""

    step_map: dict  # range_id -> step

    def step_of(self, range_id: int) -> int | None: ...
    def start_of(self, range_id: int) -> int: ...
    def note_step(self, range_id: int, step: int | None) -> None: ...
    def new_range_id(self) -> int: ...
    def step_at(self, t_ns: int) -> int | None: ...
    # Optional: thread id -> [(start, end or None, range_id, depth)] of the session's own
    # ranges open or closed since the last flush, so NVTX ranges nest inside them.
    # def own_intervals(self) -> dict: ...
    # Optional: (step, found) arrays of the recorded step open at each (thread, time), for
    # launches that carry no range (Session.steps_at).
    # def steps_at(self, tid: np.ndarray, t: np.ndarray) -> tuple: ...


class CorrIndex:
    """One flush's correlation id -> values, as sorted arrays (the last record of an id wins)."""

    __slots__ = ("keys", "vals")

    def __init__(self, keys: np.ndarray | None = None, *vals: np.ndarray):
        if keys is None or not len(keys):
            self.keys = np.empty(0, np.int64)
            self.vals = tuple(np.empty(0, v.dtype if v is not None else np.int64) for v in vals)
            return
        keys = np.asarray(keys, np.int64)
        order = np.argsort(keys, kind="stable")
        k = keys[order]
        last = np.ones(len(k), bool)
        last[:-1] = k[1:] != k[:-1]
        self.keys = k[last]
        self.vals = tuple(np.asarray(v)[order][last] for v in vals)

    def find(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, found mask) of the ids `q`; positions are valid where found."""
        if not len(self.keys):
            return np.zeros(len(q), np.intp), np.zeros(len(q), bool)
        i = np.searchsorted(self.keys, q)
        i[i == len(self.keys)] = 0
        return i, self.keys[i] == q


def _lookup(gens: tuple[CorrIndex, CorrIndex], q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First value column for ids `q`, this flush's records first, then the last flush's."""
    outs, found = _lookup_many(gens, q)
    return outs[0], found


def _lookup_many(gens: tuple[CorrIndex, CorrIndex], q: np.ndarray
                 ) -> tuple[list[np.ndarray], np.ndarray]:
    """Every value column for ids `q` (see _lookup)."""
    ncol = len(gens[0].vals)
    outs = [np.zeros(len(q), gens[0].vals[c].dtype) for c in range(ncol)]
    found = np.zeros(len(q), bool)
    for g in gens:
        todo = ~found
        if not todo.any() or not len(g.keys):
            continue
        i, hit = g.find(q[todo])
        idx = np.flatnonzero(todo)[hit]
        for c in range(ncol):
            outs[c][idx] = g.vals[c][i[hit]]
        found[idx] = True
    return outs, found


_EMPTY_EXT = CorrIndex(None, np.empty(0, np.int64))
_EMPTY_API = CorrIndex(None, np.empty(0, np.int64), np.empty(0, np.int64))


def _str_table(mapping: dict[int, str]) -> tuple[np.ndarray, pa.Array]:
    """A code -> name lookup: (code -> position in names, names with 'unknown' last)."""
    idx = np.full(max(mapping) + 1, len(mapping), np.int32)
    for pos, code in enumerate(mapping):
        idx[code] = pos
    return idx, arrow.array(list(mapping.values()) + ["unknown"], pa.string())


_COPY_KIND = _str_table(COPY_KIND)
_MEMORY_KIND = _str_table(MEMORY_KIND)
_SYNC_TYPE = _str_table(SYNC_TYPE)
_API_KINDS = arrow.array(["runtime", "driver"], pa.string())
_OPERATIONS = arrow.array(["alloc", "free"], pa.string())


def _named(codes: np.ndarray, table: tuple[np.ndarray, pa.Array]) -> pa.Array:
    """Enum codes -> their names ('unknown' for codes outside the table), dictionary encoded
    (DuckDB reads it into the VARCHAR column without a string per row)."""
    idx, names = table
    c = codes.astype(np.int64)
    out = np.full(len(c), len(names) - 1, np.int32)
    ok = (c >= 0) & (c < len(idx))
    out[ok] = idx[c[ok]]
    return pa.DictionaryArray.from_arrays(arrow.array(out), names)


def _map(keys: np.ndarray, fn: Callable[[int], int | None], ok: np.ndarray | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
    """fn(key) for the rows where ok, one call per distinct key: (values, valid where not None)."""
    vals = np.zeros(len(keys), np.int64)
    valid = np.zeros(len(keys), bool)
    idx = np.arange(len(keys)) if ok is None else np.flatnonzero(ok)
    if len(idx):
        uniq, inv = np.unique(keys[idx], return_inverse=True)
        got = [fn(k) for k in uniq.tolist()]
        vals[idx] = np.array([0 if g is None else g for g in got], np.int64)[inv]
        valid[idx] = np.array([g is not None for g in got], bool)[inv]
    return vals, valid


def _innermost(iv: list, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each time in t, the last interval of `iv` (sorted (start, end, range id) tuples)
    that holds it as [start, end): (start, range id, found). The same answer as walking back
    from the last interval started, without the walk: binary lifting over a sparse table of
    running end maxima skips runs of intervals that all ended by t. A launch at the instant a
    range ended is not in it, as the importers' sweep (interop/nesting.py) reads it back."""
    a = np.array(iv, np.int64).reshape(-1, 3)
    starts, ends = a[:, 0], a[:, 1]
    cur = np.searchsorted(starts, t, side="right")  # intervals [0, cur) started by t
    levels = [ends]  # levels[k][j] = max(ends[j : j + 2**k])
    while (1 << len(levels)) <= len(ends):
        w = 1 << (len(levels) - 1)
        levels.append(np.maximum(levels[-1][:-w], levels[-1][w:]))
    for k in range(len(levels) - 1, -1, -1):
        j = cur - (1 << k)
        can = j >= 0
        block_end = np.where(can, levels[k][np.where(can, j, 0)], 0)
        cur = np.where(can & (block_end <= t), j, cur)  # all of [j, cur) ended by t: skip
    found = cur > 0
    j = np.maximum(cur - 1, 0)
    return starts[j], a[j, 2], found


class Resolver:
    """Turns drained rows (decode.Sink.drain) into writer batches of Arrow columns.

    ext_kind: the ExternalCorrelationKind int cuptiprof pushes (CUSTOM2).
    api_name: cbid name lookup, (is_driver, cbid) -> 'cudaLaunchKernel'.
    write_api: write api_calls rows (they are always used for the join).
    step_range: NVTX range name (other domains) that marks a step.
    """

    def __init__(self, book: RangeBook, ext_kind: int, api_name: Callable[[bool, int], str],
                 driver_kind: int, *, write_api: bool = True, step_range: str | None = None,
                 own_domain: str = "cuptiprof"):
        self.book = book
        self.ext_kind = ext_kind
        self.api_name = api_name
        self.driver_kind = driver_kind
        self.write_api = write_api
        self.step_range = step_range
        self.own_domain = own_domain
        # correlation id -> external id, and -> (thread, start) of the API call; two flushes
        self._ext: tuple[CorrIndex, CorrIndex] = (_EMPTY_EXT, _EMPTY_EXT)
        self._api: tuple[CorrIndex, CorrIndex] = (_EMPTY_API, _EMPTY_API)
        self._ctx_dev: dict[int, int] = {}
        self._pending: dict[str, Cols] = {}
        self._open_markers: dict[int, list] = {}
        self._marker_stack: dict[int, list] = {}
        self._intervals: tuple[dict, dict] = ({}, {})  # tid -> sorted [(start, end, rid)]
        self._marker_steps = 0
        self._marker_start: dict[int, int] = {}
        self._marker_depth: dict[int, int] = {}   # open NVTX range id -> its depth
        self._has_markers = False
        self._api_names: dict[tuple[int, int], str] = {}
        self.unclaimed: dict[str, int] = {}
        self.rows_out: dict[str, int] = {}
        self.overhead: dict[int, list] = {}  # overhead_kind -> [count, ns]
        self.devices: list[dict] = []
        self.step_rows: dict[int, int] = {}   # step -> GPU rows tagged with it
        self.other_kinds: dict[int, int] = {}
        self.untimed: dict[tuple[str, int | None], int] = {}  # (kind, step) -> rows left out
        self.decode_errors: dict[str, int] = {}  # kind -> records the bindings could not read

    # -- lookups -----------------------------------------------------------------------------
    def _markers_at(self, tid: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The NVTX range (other domains) each (thread, time) falls in: (range id, found).

        The innermost: the latest-starting range of that thread that holds t as [start, end)
        (closed ranges of this flush and the last, then the ones still open)."""
        n = len(t)
        best_s = np.zeros(n, np.int64)
        best = np.zeros(n, np.int64)
        found = np.zeros(n, bool)
        for gen in self._intervals:  # this flush's first: an older one wins only by a later start
            for th, iv in gen.items():
                sel = np.flatnonzero(tid == th)
                if not len(sel) or not iv:
                    continue
                s, rid, ok = _innermost(iv, t[sel])
                take = ok & (~found[sel] | (s > best_s[sel]))
                idx = sel[take]
                best_s[idx], best[idx], found[idx] = s[take], rid[take], True
        for m in self._open_markers.values():  # still open: started before t on that thread
            take = (tid == m[0]) & (m[1] <= t) & (~found | (m[1] > best_s))
            best_s[take], best[take], found[take] = m[1], m[4], True
        return best, found

    def nvtx_around(self, tid: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The innermost NVTX range (other domains) around each (thread, time) of this flush or
        the last: (range id, its start), where found (start 0 where not)."""
        if not self._has_markers:
            return np.zeros(len(t), np.int64), np.zeros(len(t), np.int64)
        mid, found = self._markers_at(tid, t)
        return mid, _map(mid, lambda m: self._marker_start.get(m, 0), found)[0]

    def claim(self, corr: int, final: bool) -> tuple[int | None, int | None] | None:
        """(range_id, step) of the launching call; None = not known yet (retry next flush)."""
        wait, rid, rid_ok, step, step_ok = self._claim_many(np.array([corr], np.int64), final)
        if wait[0]:
            return None
        return (int(rid[0]) if rid_ok[0] else None), (int(step[0]) if step_ok[0] else None)

    def _claim_many(self, corrs: np.ndarray, final: bool):
        """claim() for many correlation ids: wait mask, (range id, valid), (step, valid)."""
        rid, has = _lookup(self._ext, corrs)
        (tid, start), api = _lookup_many(self._api, corrs)
        wait = ~has & ~api & (not final)    # the API record may arrive with the next flush
        return (wait, *self._innermost(rid, has, tid, start, api))

    def _innermost(self, rid, has, tid, start, api):
        """Innermost range and step of calls at (tid, start) (where `api`) whose cuptiprof range
        is `rid` (where `has`): (range id, valid), (step, valid). A call and the GPU work it
        launched get them alike."""
        n = len(rid)
        mid, mfound = np.zeros(n, np.int64), np.zeros(n, bool)
        if self._has_markers and api.any():
            i = np.flatnonzero(api)
            mid[i], mfound[i] = self._markers_at(tid[i], start[i])
        # A framework NVTX range opened inside the cuptiprof range is the innermost one.
        inner = has & mfound
        if inner.any():
            i = np.flatnonzero(inner)
            ms = _map(mid[i], lambda m: self._marker_start.get(m, 0))[0]
            rs = _map(rid[i], self.book.start_of)[0]
            inner[i] = ms > rs
        by_marker = ~has & api & mfound     # no cuptiprof range: the NVTX range claims it
        out_rid = np.where(inner | by_marker, mid, rid)
        rid_ok = has | by_marker
        step, step_ok = _map(np.where(has, rid, mid), self.book.step_of, has | by_marker)
        self._by_time(step, step_ok, tid, start, ~step_ok & api)
        return out_rid, rid_ok, step, step_ok

    def _by_time(self, step: np.ndarray, step_ok: np.ndarray, tid: np.ndarray,
                 start: np.ndarray, sel: np.ndarray) -> None:
        """Rows `sel` (launched in no range, or in one that began outside every step, such as
        a worker's NVTX range pushed before the first step): the recorded step open in the
        process when their call began, written into step / step_ok in place."""
        fn = getattr(self.book, "steps_at", None)
        if fn is None or not sel.any():
            return
        i = np.flatnonzero(sel)
        s, ok = fn(np.asarray(tid)[i].astype(np.int64), np.asarray(start)[i].astype(np.int64))
        step[i[ok]], step_ok[i[ok]] = s[ok], True

    def _steps_of(self, rid: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """step_map[rid] for the rows where ok (few distinct ranges: one dict lookup each)."""
        return _map(rid, self.book.step_map.get, ok)

    def _claim_rows(self, corr: np.ndarray, final: bool):
        """Per row: keep / wait masks, (range id, valid) and (step, valid)."""
        n = len(corr)
        if not self._has_markers:
            # An external id names the range; without one the row waits for its API record
            # (one flush), which gives it the step open at its launch, or is kept unclaimed.
            # A range that gives no step (one begun outside every step) leaves the step to
            # that record too.
            rid, has = _lookup(self._ext, corr)
            wait = np.zeros(n, bool)
            keep = ~(has & (rid == SELF_ID))
            step, step_ok = self._steps_of(rid, has & keep)
            if not (step_ok | ~keep).all():
                (tid, start), api = _lookup_many(self._api, corr)
                if not final:
                    wait = ~has & ~api
                    keep &= ~wait
                self._by_time(step, step_ok, tid, start, ~step_ok & api)
            return keep, wait, rid, has, step, step_ok
        wait, rid, rid_ok, step, step_ok = self._claim_many(corr, final)
        keep = ~wait & ~(rid_ok & (rid == SELF_ID))
        return keep, wait, rid, rid_ok, step, step_ok

    # -- one flush -----------------------------------------------------------------------------
    def resolve(self, rows: dict[str, Any], final: bool = False) -> dict[str, Any]:
        """Drained rows -> {table: columns} for Writer.append. `final`: nothing waits any more."""
        self._absorb(rows)
        out: dict[str, Any] = {}
        marker_ranges = self._markers(rows.get("marker", ()), rows.get("marker_data", ()))
        if marker_ranges:
            out["ranges"] = marker_ranges
        for table in GPU_TABLES:
            parts = []
            if table in self._pending:
                parts.append(self._pending.pop(table))
            new = rows.get(table)
            if new:
                parts.append(cols(table, new))
            c = Cols.concat(parts)
            if not c.n:
                continue
            corr = c["correlation_id"].astype(np.int64)
            keep, wait, rid, rid_ok, step, step_ok = self._claim_rows(corr, final)
            if wait.any():
                self._pending[table] = c.take(wait)
            if table != "memory":  # memory events are points in time; no window reads them
                untimed = keep & _untimed(c["start"], c["end"])
                if untimed.any():
                    self._count_untimed(table, step[untimed], step_ok[untimed])
                    keep &= ~untimed
            if keep.all():
                built = self._build(table, c, rid, rid_ok, step, step_ok)
            elif keep.any():
                built = self._build(table, c.take(keep), rid[keep], rid_ok[keep], step[keep],
                                    step_ok[keep])
            else:
                continue
            for key, batch in built.items():   # memcpy and memcpy_p2p both fill memcpys
                out[key] = _concat(out[key], batch) if key in out else batch
        api = rows.get("api")
        if api and self.write_api:
            out["api_calls"] = self._api_batch(cols("api", api))
        if final:
            quality = self._quality_batch()
            if quality:
                out["data_quality"] = quality
        self._rotate()
        return out

    def _count_untimed(self, table: str, step: np.ndarray, step_ok: np.ndarray) -> None:
        name = "memcpy" if table == "memcpy_p2p" else table
        for s, ok in zip(step.tolist(), step_ok.tolist()):
            key = (name, s if ok else None)
            self.untimed[key] = self.untimed.get(key, 0) + 1

    def _quality_batch(self) -> dict | None:
        """data_quality rows of what this resolver left out (written once, at the last flush)."""
        rows = []
        for (kind, step), n in sorted(self.untimed.items(),
                                      key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or 0)):
            where = "outside any step" if step is None else f"in step {step}"
            rows.append((UNTIMED_RECORDS, kind, n,
                         f"{n} {kind} records {where} had no valid timestamps (0, or an end before "
                         "the start): CUPTI could not time them, often for lack of device memory, "
                         "or a forced flush handed them over unfinished; they are left out of "
                         "every time"))
        for kind, n in sorted(self.decode_errors.items()):
            rows.append((DECODE_ERROR, kind, n,
                         f"{n} {kind} records could not be read from CUPTI's buffers (the "
                         "bindings raised on a field); they are left out, the rest of their "
                         "buffer is kept"))
        self.untimed, self.decode_errors = {}, {}
        if not rows:
            return None
        check, subject, count, detail = (list(c) for c in zip(*rows))
        return {"check_name": check, "subject": subject, "count": pa.array(count, pa.int64()),
                "value_ns": pa.array([None] * len(rows), pa.int64()), "detail": detail}

    def _absorb(self, rows: dict[str, Any]) -> None:
        for kind, n in rows.get("decode_error", {}).items():
            self.decode_errors[kind] = self.decode_errors.get(kind, 0) + n
        for ctx, dev in rows.get("context", ()):
            self._ctx_dev[ctx] = dev
        ext = rows.get("extcorr")
        if ext:
            e = cols("extcorr", ext)
            mine = e["external_kind"] == self.ext_kind
            self._ext = (CorrIndex(e["correlation_id"][mine],
                                   e["external_id"][mine].astype(np.int64)), self._ext[0])
        else:
            self._ext = (_EMPTY_EXT, self._ext[0])
        api = rows.get("api")
        if api:
            a = cols("api", api)
            self._api = (CorrIndex(a["correlation_id"], a["thread_id"].astype(np.int64),
                                   a["start"].astype(np.int64)), self._api[0])
        else:
            self._api = (_EMPTY_API, self._api[0])
        for kind, start, end in rows.get("overhead", ()):
            if not start or not end or end < start:  # untimed: no bogus span in cupti_overhead
                self.untimed[("overhead", None)] = self.untimed.get(("overhead", None), 0) + 1
                continue
            o = self.overhead.setdefault(kind, [0, 0])
            o[0] += 1
            o[1] += end - start
        for dev, uuid in zip(rows.get("device", ()), rows.get("device_uuid", ())):
            self.devices.append(_device_row(dev, uuid))

    def _rotate(self) -> None:
        # The next flush's records form the next generation (_absorb); this one becomes the last.
        self._intervals = ({}, self._intervals[0])
        if self._has_markers:  # keep start times only for markers that can still claim rows
            live = {m[4] for m in self._open_markers.values()}
            live.update(rid for iv in self._intervals[1].values() for _, _, rid in iv)
            self._marker_start = {k: v for k, v in self._marker_start.items() if k in live}

    def _markers(self, markers: list, data: list) -> dict | None:
        """Pair start/end MARKER records of other domains into ranges (rows for `ranges`)."""
        if not markers:
            return None
        # CUPTI keeps every kind of payload in the same 8 bytes: read them as their kind says
        # (the nvtx package sends an int as INT64, a float as DOUBLE)
        payload = {mid: dbl if kind == PAYLOAD_DOUBLE else u64 if kind == PAYLOAD_UINT64 else i64
                   for mid, kind, i64, u64, dbl in data}
        out: dict[str, list] = {k: [] for k in (
            "range_id", "parent_id", "depth", "name", "domain", "thread_id", "start_ns",
            "end_ns", "kind", "step", "attrs")}
        cur = self._intervals[0]
        own = getattr(self.book, "own_intervals", None)
        own = own() if own is not None else {}
        for flags, ts, mid, _okind, tid, name, domain in sorted(markers, key=lambda m: m[1]):
            if domain == self.own_domain:
                continue  # cuptiprof.range rows are written by the session itself
            if flags & MARKER_START:
                stack = self._marker_stack.setdefault(tid, [])
                parent = stack[-1] if stack else None
                depth = self._marker_depth.get(parent, len(stack) - 1) + 1 if stack else 0
                # A cuptiprof.range opened later than that (or alone) is the parent instead:
                # the two kinds of range nest in one tree.
                inside = max((iv for iv in own.get(tid, ()) if iv[0] <= ts and
                              (iv[1] is None or ts < iv[1])), default=None)
                if inside is not None and (parent is None or
                                           inside[0] > self._marker_start.get(parent, 0)):
                    parent, depth = inside[2], inside[3] + 1
                rid = self.book.new_range_id()
                kind, step = "user", None
                if self.step_range and name == self.step_range:
                    kind = "step"
                    # a payload that is no INTEGER step number: numbered by its position
                    step = step_number(payload.get(mid))
                    if step is None:
                        step = self._marker_steps
                    self._marker_steps += 1
                self._open_markers[mid] = [tid, ts, name, domain or None, rid, parent,
                                           depth, kind, step, payload.get(mid)]
                self._marker_depth[rid] = depth
                stack.append(rid)
                self._marker_start[rid] = ts
                self._has_markers = True
                if kind == "step":
                    self.book.note_step(rid, step)
            elif flags & MARKER_END:
                m = self._open_markers.pop(mid, None)
                if m is None:
                    continue
                tid0, start, name, dom, rid, parent, depth, kind, step, pl = m
                self._marker_depth.pop(rid, None)
                stack = self._marker_stack.get(tid0)
                if stack and rid in stack:
                    stack.remove(rid)
                if step is None:
                    step = self.book.step_at(start)
                    self.book.note_step(rid, step)
                bisect.insort(cur.setdefault(tid0, []), (start, ts, rid))
                for k, v in zip(out, (rid, parent, depth, name, dom, tid0, start, ts, kind, step,
                                      None if pl is None else attrs_json({"payload": pl}))):
                    out[k].append(v)
        if not out["range_id"]:
            return None
        return out

    def _build(self, table: str, c: Cols, rid: np.ndarray, rid_ok: np.ndarray,
               step: np.ndarray, step_ok: np.ndarray) -> dict[str, Any]:
        n = c.n
        if step_ok.any():
            for s, k in zip(*(x.tolist() for x in np.unique(step[step_ok], return_counts=True))):
                self.step_rows[s] = self.step_rows.get(s, 0) + k
        unclaimed = int(n - step_ok.sum())
        if unclaimed:
            name = "memcpy" if table == "memcpy_p2p" else table
            self.unclaimed[name] = self.unclaimed.get(name, 0) + unclaimed
        common = {"step": arrow.array(step.astype(np.int32), mask=~step_ok),
                  "range_id": arrow.array(rid, mask=~rid_ok)}
        if table != "memory":
            stream = c["stream_id"]
            common.update({
                "start_ns": _i64(c["start"]), "end_ns": _i64(c["end"]),
                "correlation_id": _i64(c["correlation_id"]),
                "context_id": _i32(c["context_id"]),
                "stream_id": arrow.array(stream.astype(np.int32),
                                      mask=stream == NA32)})
        if table in ("kernel", "memcpy", "memset", "memcpy_p2p"):
            common["device_id"] = _i32(c["device_id"])
        if table == "kernel":
            out = dict(common, name=_dict_strings(c, "name"),
                       grid_x=_i32(c["grid_x"]), grid_y=_i32(c["grid_y"]), grid_z=_i32(c["grid_z"]),
                       block_x=_i32(c["block_x"]), block_y=_i32(c["block_y"]),
                       block_z=_i32(c["block_z"]), registers=_i32(c["registers_per_thread"]),
                       static_smem=_i32(c["static_shared_memory"]),
                       dynamic_smem=_i32(c["dynamic_shared_memory"]),
                       graph_id=_graph(c["graph_id"]), graph_node_id=_graph(c["graph_node_id"]))
            key = "kernels"
        elif table in ("memcpy", "memcpy_p2p"):
            out = dict(common,
                       copy_kind=_named(c["copy_kind"], _COPY_KIND),
                       src_kind=_named(c["src_kind"], _MEMORY_KIND),
                       dst_kind=_named(c["dst_kind"], _MEMORY_KIND),
                       bytes=_i64(c["bytes"]),
                       is_async=arrow.array((c["flags_"].astype(np.int64) & 1) != 0, pa.bool_()),
                       graph_id=_graph(c["graph_id"]), graph_node_id=_graph(c["graph_node_id"]))
            if table == "memcpy_p2p":
                out.update(src_device_id=_i32(c["src_device_id"]),
                           dst_device_id=_i32(c["dst_device_id"]))
            key = "memcpys"
        elif table == "memset":
            out = dict(common, bytes=_i64(c["bytes"]), value=_i32(c["value"]),
                       memory_kind=_named(c["memory_kind"], _MEMORY_KIND),
                       graph_id=_graph(c["graph_id"]), graph_node_id=_graph(c["graph_node_id"]))
            key = "memsets"
        elif table == "sync":
            ctx = c["context_id"].astype(np.int64)
            uniq, inv = np.unique(ctx, return_inverse=True)
            devs = [self._ctx_dev.get(x) for x in uniq.tolist()]
            dev = np.array([-1 if d is None else d for d in devs], np.int64)[inv]
            dev_ok = np.array([d is not None for d in devs], bool)[inv]
            event = c["cuda_event_id"]
            out = dict(common,
                       device_id=arrow.array(dev.astype(np.int32), mask=~dev_ok),
                       sync_type=_named(c["type"], _SYNC_TYPE),
                       cuda_event_id=arrow.array(event.astype(np.int64), mask=event == NA32))
            key = "syncs"
        else:
            out = dict(step=common["step"], device_id=_i32(c["device_id"]),
                       time_ns=_i64(c["timestamp"]),
                       operation=pa.DictionaryArray.from_arrays(
                           arrow.array((c["memory_operation_type"] == 2).astype(np.int8)),
                           _OPERATIONS),
                       bytes=_i64(c["bytes"]),
                       address=arrow.array(c["address"].astype(np.uint64)),
                       memory_kind=_named(c["memory_kind"], _MEMORY_KIND),
                       pool=arrow.array(c["memory_pool_type"] != 0, pa.bool_()),
                       correlation_id=_i64(c["correlation_id"]))
            key = "memory_events"
        self.rows_out[key] = self.rows_out.get(key, 0) + n
        return {key: out}

    def _api_batch(self, c: Cols) -> dict[str, Any]:
        corr = c["correlation_id"].astype(np.int64)
        rid, has = _lookup(self._ext, corr)
        mine = has & (rid == SELF_ID)
        if mine.any():  # the session's own synchronize
            keep = ~mine
            c, corr, rid, has = c.take(keep), corr[keep], rid[keep], has[keep]
        # the range and step its GPU work gets (a framework NVTX range inside the cuptiprof
        # range is the innermost; no step by its range: the step open at its time)
        rid, has, step, step_ok = self._innermost(
            rid, has, c["thread_id"].astype(np.int64), c["start"].astype(np.int64),
            np.ones(len(rid), bool))
        self.rows_out["api_calls"] = self.rows_out.get("api_calls", 0) + c.n
        kind = c["kind"].astype(np.int64)
        cbid = c["cbid"].astype(np.int64)
        driver = kind == self.driver_kind
        # one name lookup per distinct (kind, cbid): a dictionary column the writer interns
        keys = (kind << 32) | cbid
        first, codes = factorize(keys)
        names = []
        for key in keys[first].tolist():
            k, cb = key >> 32, key & 0xFFFFFFFF
            name = self._api_names.get((k, cb))
            if name is None:
                name = self._api_names[(k, cb)] = self.api_name(k == self.driver_kind, cb)
            names.append(name)
        return {"thread_id": _i64(c["thread_id"]),
                "api_kind": pa.DictionaryArray.from_arrays(arrow.array(driver.astype(np.int8)),
                                                           _API_KINDS),
                "cbid": _i32(c["cbid"]),
                "name": pa.DictionaryArray.from_arrays(arrow.array(codes),
                                                       arrow.array(names, pa.string())),
                "correlation_id": _i64(corr), "start_ns": _i64(c["start"]),
                "end_ns": _i64(c["end"]),
                "return_code": _i32(c["return_value"]),
                "step": arrow.array(step.astype(np.int32), mask=~step_ok),
                "range_id": arrow.array(rid, mask=~has)}


def _untimed(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Rows CUPTI could not time: CUPTI_TIMESTAMP_UNKNOWN (0) when it lacked device memory for
    them, or an incomplete record of a forced flush (an end before its start)."""
    return (start == 0) | (end == 0) | (end < start)


def _concat(a: dict[str, pa.Array], b: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """Two batches of one table, a's rows then b's; a column only one of them has is NULL in
    the other's rows (memcpys of MEMCPY records have graph ids, those of MEMCPY2 records have
    their source and destination devices)."""
    na, nb = len(next(iter(a.values()))), len(next(iter(b.values())))
    out = {}
    for k in list(a) + [k for k in b if k not in a]:
        x, y = a.get(k), b.get(k)
        typ = (x if x is not None else y).type
        out[k] = pa.concat_arrays([x if x is not None else pa.nulls(na, typ),
                                   y if y is not None else pa.nulls(nb, typ)])
    return out


def _i64(v: np.ndarray) -> pa.Array:
    return arrow.array(np.asarray(v).astype(np.int64))


def _i32(v: np.ndarray) -> pa.Array:
    return arrow.array(np.asarray(v).astype(np.int32))  # C cast: wraps like int64 -> int32


def _graph(v: np.ndarray) -> pa.Array:
    a = np.asarray(v).astype(np.int64)
    return arrow.array(a, mask=(a == 0))


def _dict_strings(c: Cols, name: str) -> pa.Array:
    """A string field of Cols as a dictionary array of distinct values, exactly those its rows
    use, in order of first use (the writer interns every dictionary value, in order). A chunk's
    dictionary holds one entry per name pointer, so the same name may repeat in it."""
    index: dict = {}
    distinct_of = np.array([index.setdefault(v, len(index)) for v in c.dicts[name]], np.int32)
    ids = distinct_of[c[name]]
    first, codes = factorize(ids)
    values = list(index)
    used = [values[i] for i in ids[first].tolist()]
    return pa.DictionaryArray.from_arrays(arrow.array(codes), arrow.array(used, pa.string()))


def _device_row(dev: tuple, uuid: str | None) -> dict:
    (did, name, ccmaj, ccmin, sms, clock_khz, bw_kbs, mem, l2) = dev
    return {"device_id": did, "kind": "gpu", "name": name or None, "uuid": uuid,
            "compute_capability": f"{ccmaj}.{ccmin}", "sm_count": sms,
            "core_clock_mhz": clock_khz / 1000.0 if clock_khz else None,
            "memory_bytes": mem or None, "l2_bytes": l2 or None,
            "peak_memory_bw_gbps": bw_kbs * 1000 / 1e9 if bw_kbs else None, "source": "cupti"}
