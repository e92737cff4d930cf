"""Flush-time resolution: every GPU row gets the range and step of the call that LAUNCHED it.

    GPU row.correlation_id -> API record (thread, time) and EXTERNAL_CORRELATION record
                            -> external id = cuptiprof range id -> that range's step

Launches are asynchronous, so the GPU may run a kernel after its range closed; the join goes
through the launching call, never through GPU time. Kernels replayed from a CUDA graph carry the
`cudaGraphLaunch` correlation id, so the same join tags them. Launches without an external id
(threads with no cuptiprof.range, framework NVTX ranges) are projected onto NVTX MARKER ranges of
other domains through the launching thread and the launch time. Rows nobody claims keep a NULL
step and are counted (data_quality 'unclaimed_records').

State kept between flushes is bounded: correlation maps live for two flushes (a row may arrive
one flush after its API record, never later since every flush follows a synchronize), and a
GPU row whose API record has not arrived yet waits for one more flush.
"""
from __future__ import annotations

import bisect
import json
from typing import Any, Callable, Protocol

import numpy as np
import pyarrow as pa

from cuptiprof.collect.decode import columns

COPY_KIND = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
             7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KIND = {0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
               6: "device_static", 7: "managed_static"}
SYNC_TYPE = {0: "unknown", 1: "event_synchronize", 2: "stream_wait_event",
             3: "stream_synchronize", 4: "context_synchronize"}
NA32 = 0xFFFFFFFF  # CUPTI's "not applicable" for 32-bit ids
MARKER_START, MARKER_END = 2, 4  # ActivityFlag has no MARKER_END member (docs/cupti-python.md §3)
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


class Resolver:
    """Turns drained row tuples (decode.Sink.drain) into writer batches.

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
        self._ext: tuple[dict, dict] = ({}, {})
        self._api: tuple[dict, dict] = ({}, {})
        self._ctx_dev: dict[int, int] = {}
        self._pending: dict[str, list] = {}
        self._open_markers: dict[int, list] = {}
        self._marker_stack: dict[int, list] = {}
        self._intervals: tuple[dict, dict] = ({}, {})  # tid -> sorted [(start, end, rid)]
        self._marker_steps = 0
        self._marker_start: dict[int, int] = {}
        self._has_markers = False
        self.unclaimed: dict[str, int] = {}
        self.rows_out: dict[str, int] = {}
        self.overhead: dict[int, list] = {}  # overhead_kind -> [count, ns]
        self.devices: list[dict] = []
        self.step_rows: dict[int, int] = {}   # step -> GPU rows tagged with it
        self.other_kinds: dict[int, int] = {}

    # -- lookups -----------------------------------------------------------------------------
    def _ext_of(self, corr: int) -> int | None:
        cur, prev = self._ext
        r = cur.get(corr)
        return prev.get(corr) if r is None else r

    def _api_of(self, corr: int) -> tuple | None:
        cur, prev = self._api
        r = cur.get(corr)
        return prev.get(corr) if r is None else r

    def _marker_at(self, tid: int, t: int) -> int | None:
        best = None
        for gen in self._intervals:
            iv = gen.get(tid)
            if not iv:
                continue
            i = bisect.bisect_right(iv, (t, float("inf"), float("inf"))) - 1
            while i >= 0:
                s, e, rid = iv[i]
                if e >= t:
                    if best is None or s > best[0]:
                        best = (s, rid)
                    break
                i -= 1
        for start, rid in ((m[1], m[4]) for m in self._open_markers.values() if m[0] == tid):
            if start <= t and (best is None or start > best[0]):
                best = (start, rid)
        return None if best is None else best[1]

    def claim(self, corr: int, final: bool) -> tuple[int | None, int | None] | None:
        """(range_id, step) of the launching call; None = not known yet (retry next flush)."""
        rid = self._ext_of(corr)
        api = self._api_of(corr)
        mid = self._marker_at(api[0], api[1]) if api is not None and self._has_markers else None
        if rid is not None:
            # A framework NVTX range opened inside the cuptiprof range is the innermost one.
            if mid is not None and self._marker_start.get(mid, 0) > self.book.start_of(rid):
                return mid, self.book.step_of(rid)
            return rid, self.book.step_of(rid)
        if api is None:
            return None if not final else (None, None)
        if mid is not None:
            return mid, self.book.step_of(mid)
        return None, None

    # -- one flush -----------------------------------------------------------------------------
    def resolve(self, rows: dict[str, list], final: bool = False) -> dict[str, Any]:
        """Drained rows -> {table: columns} for Writer.append. `final`: nothing waits any more."""
        self._absorb(rows)
        out: dict[str, Any] = {}
        marker_ranges = self._markers(rows.get("marker", ()), rows.get("marker_data", ()))
        if marker_ranges:
            out["ranges"] = marker_ranges
        for table in GPU_TABLES:
            todo = self._pending.pop(table, []) + rows.get(table, [])
            if not todo:
                continue
            corr_at = _CORR_INDEX[table]
            keep, wait, rids, steps = [], [], [], []
            cache: dict[int, Any] = {}
            ext_cur, ext_prev = self._ext
            step_map = self.book.step_map
            fast = not self._has_markers
            for r in todo:
                corr = r[corr_at]
                if fast:  # common case: an external id names the range; no NVTX to compare
                    rid = ext_cur.get(corr)
                    if rid is None:
                        rid = ext_prev.get(corr)
                    if rid is not None:
                        if rid == SELF_ID:
                            continue
                        keep.append(r)
                        rids.append(rid)
                        steps.append(step_map.get(rid))
                        continue
                c = cache.get(corr)
                if c is None:
                    c = cache[corr] = self.claim(corr, final)
                if c is None:
                    wait.append(r)
                    continue
                if c[0] == SELF_ID:
                    continue
                keep.append(r)
                rids.append(c[0])
                steps.append(c[1])
            if wait:
                self._pending[table] = wait
            if keep:
                out.update(self._build(table, keep, rids, steps))
        api = rows.get("api")
        if api and self.write_api:
            out["api_calls"] = self._api_batch(api)
        self._rotate()
        return out

    def _absorb(self, rows: dict[str, list]) -> None:
        for ctx, dev in rows.get("context", ()):
            self._ctx_dev[ctx] = dev
        ext = self._ext[0]
        k = self.ext_kind
        for ek, eid, corr in rows.get("extcorr", ()):
            if ek == k:
                ext[corr] = eid
        api = self._api[0]
        for r in rows.get("api", ()):
            api[r[5]] = (r[4], r[2])
        for kind, start, end in rows.get("overhead", ()):
            o = self.overhead.setdefault(kind, [0, 0])
            o[0] += 1
            o[1] += max(0, end - start)
        for dev, uuid in zip(rows.get("device", ()), rows.get("device_uuid", ())):
            self.devices.append(_device_row(dev, uuid))

    def _rotate(self) -> None:
        self._ext = ({}, self._ext[0])
        self._api = ({}, self._api[0])
        self._intervals = ({}, self._intervals[0])
        if self._has_markers:  # keep start times only for markers that can still claim rows
            live = {m[4] for m in self._open_markers.values()}
            live.update(rid for iv in self._intervals[1].values() for _, _, rid in iv)
            self._marker_start = {k: v for k, v in self._marker_start.items() if k in live}

    def _markers(self, markers: list, data: list) -> dict | None:
        """Pair start/end MARKER records of other domains into ranges (rows for `ranges`)."""
        if not markers:
            return None
        payload = {mid: v for mid, kind, v in data}
        out: dict[str, list] = {k: [] for k in (
            "range_id", "parent_id", "depth", "name", "domain", "thread_id", "start_ns",
            "end_ns", "kind", "step", "attrs")}
        cur = self._intervals[0]
        for flags, ts, mid, _okind, tid, name, domain in sorted(markers, key=lambda m: m[1]):
            if domain == self.own_domain:
                continue  # cuptiprof.range rows are written by the session itself
            if flags & MARKER_START:
                stack = self._marker_stack.setdefault(tid, [])
                parent = stack[-1] if stack else None
                rid = self.book.new_range_id()
                kind, step = "user", None
                if self.step_range and name == self.step_range:
                    kind = "step"
                    step = payload.get(mid, self._marker_steps)
                    self._marker_steps += 1
                self._open_markers[mid] = [tid, ts, name, domain or None, rid, parent,
                                           len(stack), kind, step, payload.get(mid)]
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
                stack = self._marker_stack.get(tid0)
                if stack and rid in stack:
                    stack.remove(rid)
                if step is None:
                    step = self.book.step_at(start)
                    self.book.note_step(rid, step)
                bisect.insort(cur.setdefault(tid0, []), (start, ts, rid))
                for k, v in zip(out, (rid, parent, depth, name, dom, tid0, start, ts, kind, step,
                                      None if pl is None else json.dumps({"payload": pl}))):
                    out[k].append(v)
        if not out["range_id"]:
            return None
        return out

    def _build(self, table: str, keep: list, rids: list, steps: list) -> dict[str, Any]:
        c = columns(table, keep)
        n = len(keep)
        for s in steps:
            if s is not None:
                self.step_rows[s] = self.step_rows.get(s, 0) + 1
        unclaimed = sum(1 for s in steps if s is None)
        if unclaimed:
            name = "memcpy" if table == "memcpy_p2p" else table
            self.unclaimed[name] = self.unclaimed.get(name, 0) + unclaimed
        common = {"step": pa.array(steps, pa.int32()), "range_id": pa.array(rids, pa.int64())}
        if table != "memory":
            common.update({
                "start_ns": _i64(c["start"]), "end_ns": _i64(c["end"]),
                "correlation_id": _i64(c["correlation_id"]),
                "context_id": _i32(c["context_id"]),
                "stream_id": pa.array([None if s == NA32 else s for s in c["stream_id"]],
                                      pa.int32())})
        if table in ("kernel", "memcpy", "memset", "memcpy_p2p"):
            common["device_id"] = _i32(c["device_id"])
        if table == "kernel":
            out = dict(common, name=pa.array(c["name"], pa.string()),
                       grid_x=_i32(c["grid_x"]), grid_y=_i32(c["grid_y"]), grid_z=_i32(c["grid_z"]),
                       block_x=_i32(c["block_x"]), block_y=_i32(c["block_y"]),
                       block_z=_i32(c["block_z"]), registers=_i32(c["registers_per_thread"]),
                       static_smem=_i32(c["static_shared_memory"]),
                       dynamic_smem=_i32(c["dynamic_shared_memory"]),
                       graph_id=_graph(c["graph_id"]), graph_node_id=_graph(c["graph_node_id"]))
            key = "kernels"
        elif table in ("memcpy", "memcpy_p2p"):
            out = dict(common,
                       copy_kind=pa.array([COPY_KIND.get(k, "unknown") for k in c["copy_kind"]]),
                       src_kind=pa.array([MEMORY_KIND.get(k, "unknown") for k in c["src_kind"]]),
                       dst_kind=pa.array([MEMORY_KIND.get(k, "unknown") for k in c["dst_kind"]]),
                       bytes=_i64(c["bytes"]),
                       is_async=pa.array([bool(f & 1) for f in c["flags_"]], pa.bool_()))
            if table == "memcpy":
                out.update(graph_id=_graph(c["graph_id"]), graph_node_id=_graph(c["graph_node_id"]))
            else:
                out.update(src_device_id=_i32(c["src_device_id"]),
                           dst_device_id=_i32(c["dst_device_id"]))
            key = "memcpys"
        elif table == "memset":
            out = dict(common, bytes=_i64(c["bytes"]), value=_i32(c["value"]),
                       memory_kind=pa.array([MEMORY_KIND.get(k, "unknown")
                                             for k in c["memory_kind"]]),
                       graph_id=_graph(c["graph_id"]), graph_node_id=_graph(c["graph_node_id"]))
            key = "memsets"
        elif table == "sync":
            out = dict(common,
                       device_id=pa.array([self._ctx_dev.get(x) for x in c["context_id"]], pa.int32()),
                       sync_type=pa.array([SYNC_TYPE.get(t, "unknown") for t in c["type"]]),
                       cuda_event_id=pa.array([None if e == NA32 else e for e in c["cuda_event_id"]],
                                              pa.int64()))
            key = "syncs"
        else:
            out = dict(step=common["step"], device_id=_i32(c["device_id"]),
                       time_ns=_i64(c["timestamp"]),
                       operation=pa.array(["free" if o == 2 else "alloc"
                                           for o in c["memory_operation_type"]]),
                       bytes=_i64(c["bytes"]), address=pa.array(np.asarray(c["address"], np.uint64)),
                       memory_kind=pa.array([MEMORY_KIND.get(k, "unknown") for k in c["memory_kind"]]),
                       pool=pa.array([bool(p) for p in c["memory_pool_type"]], pa.bool_()),
                       correlation_id=_i64(c["correlation_id"]))
            key = "memory_events"
        self.rows_out[key] = self.rows_out.get(key, 0) + n
        return {key: out} if key not in ("memcpys",) else {key: out}

    def _api_batch(self, api: list) -> dict[str, Any]:
        ext_cur, ext_prev = self._ext
        api = [r for r in api if ext_cur.get(r[5], ext_prev.get(r[5])) != SELF_ID]
        c = columns("api", api)
        drv = self.driver_kind
        ext_cur, ext_prev = self._ext
        step_map = self.book.step_map
        rids = [ext_cur.get(corr, ext_prev.get(corr)) for corr in c["correlation_id"]]
        steps = [step_map.get(rid) for rid in rids]
        self.rows_out["api_calls"] = self.rows_out.get("api_calls", 0) + len(api)
        names: dict = {}
        for k, cb in set(zip(c["kind"], c["cbid"])):
            names[(k, cb)] = self.api_name(k == drv, cb)
        return {"thread_id": _i64(c["thread_id"]),
                "api_kind": pa.array(["driver" if k == drv else "runtime" for k in c["kind"]]),
                "cbid": _i32(c["cbid"]),
                "name": pa.array([names[kc] for kc in zip(c["kind"], c["cbid"])]),
                "correlation_id": _i64(c["correlation_id"]), "start_ns": _i64(c["start"]),
                "end_ns": _i64(c["end"]),
                "return_code": _i32(c["return_value"]),
                "step": pa.array(steps, pa.int32()), "range_id": pa.array(rids, pa.int64())}


# Position of correlation_id in each GPU table's row tuple (decode.RECORDS order).
def _corr_index() -> dict[str, int]:
    from cuptiprof.collect.decode import RECORDS

    return {t: RECORDS[t][1].index("correlation_id") for t in GPU_TABLES}


_CORR_INDEX = _corr_index()


def _i64(v) -> pa.Array:
    return pa.array(np.asarray(v, np.int64))


def _i32(v) -> pa.Array:
    return pa.array(np.asarray(v, np.int64).astype(np.int32))


def _graph(v) -> pa.Array:
    a = np.asarray(v, np.int64)
    return pa.array(a, mask=(a == 0))


def _device_row(dev: tuple, uuid: str | None) -> dict:
    (did, name, ccmaj, ccmin, sms, clock_khz, bw_kbs, mem, l2) = dev
    return {"device_id": did, "kind": "gpu", "name": name or None, "uuid": uuid,
            "compute_capability": f"{ccmaj}.{ccmin}", "sm_count": sms,
            "core_clock_mhz": clock_khz / 1000.0 if clock_khz else None,
            "memory_bytes": mem or None, "l2_bytes": l2 or None,
            "peak_memory_bw_gbps": bw_kbs * 1000 / 1e9 if bw_kbs else None, "source": "cupti"}
