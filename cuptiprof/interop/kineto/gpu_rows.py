"""A file's GPU tables (kernels, memcpys, memsets, syncs, memory_events) as Arrow tables,
part by part, each row's launch links resolved by finish.py's `link`."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuptiprof.store import arrow as AC
from cuptiprof.interop.kineto.categories import _SYNC, _memcpy_kind, _memset_kind
from cuptiprof.interop.kineto.columns import (_int32, _names, _per_name, _step_arg,
                                              _step_col)


class _GpuRows:
    """KinetoFile's GPU rows as the writer takes them."""

    def _gpu_tables(self, run_id, pid, base, link, mem_step, lo: int, hi: int) -> dict:
        """Rows lo:hi of each GPU table of this file as Arrow tables, links and names
        resolved."""
        out = {}
        names = self.name_list
        for table, G in self.gpu.items():
            n = min(hi, len(G.get("time_ns" if table == "memory_events" else "start_ns"))) - lo
            if n <= 0:
                continue
            get = lambda k, dtype=np.int64: G.get(k, dtype)[lo:hi]  # noqa: E731
            arrow = lambda k, typ: AC.array(get(k), typ, get(k + "?", bool))  # noqa: E731
            cols = {"run_id": AC.array(np.full(n, run_id, np.int32), pa.int32()),
                    "pid": AC.array(np.full(n, pid, np.int32), pa.int32()),
                    "device_id": arrow("device_id", pa.int32())}
            if table == "memory_events":
                b = get("bytes")
                cols.update(time_ns=AC.array(get("time_ns") + base, pa.int64()),
                            operation=AC.dictionary(b < 0, ["alloc", "free"]),
                            bytes=AC.array(np.abs(b), pa.int64()),
                            memory_kind=AC.dictionary(np.zeros(n, np.int32), ["device"]),
                            address=AC.array(get("address").astype(np.uint64), pa.uint64(),
                                             get("address?", bool) & (get("address") >= 0)),
                            step=_step_col(mem_step[lo:hi]))
                if self.links:
                    cols["pool"] = _flag(get("pool"), get("pool?", bool))
                    cols["correlation_id"] = arrow("correlation_id", pa.int64())
                    cols["memory_kind"] = self._memory_kinds(get("kind"))
                out[table] = pa.table(cols)
                continue
            ids = get("name", np.int32)
            stream, ok = get("stream_id"), get("stream_id?", bool)
            stream = np.where(stream >= 1 << 31, stream - (1 << 32), stream)
            # unsigned -1 (a context-wide sync), or the -1 track of the export: no stream, NULL
            # as the collector stores it
            ok = ok & (stream >= 0)
            corr, corr_ok = get("correlation_id"), get("correlation_id?", bool)
            cols.update(context_id=arrow("context_id", pa.int32()),
                        stream_id=AC.array(stream, pa.int32(), ok),
                        correlation_id=AC.array(corr, pa.int64(), corr_ok),
                        start_ns=AC.array(get("start_ns") + base, pa.int64()),
                        end_ns=AC.array(get("end_ns") + base, pa.int64()))
            dev = get("device_id")
            cpu = (dev < 0) & get("device_id?", bool)
            cols.update(link(np.where(corr_ok, corr, -1),
                             (cpu, stream, get("start_ns") + base, get("end_ns") + base, ids)
                             if table == "kernels" and cpu.any() else None,
                             (get("ext"), get("ext?", bool)) if self.links else None,
                             _step_arg(G, lo, hi) if self.links else None,
                             (get("xrange"), get("xrange?", bool)) if self.links else None))
            if table != "syncs":
                for k in ("graph_id", "graph_node_id"):
                    cols[k] = arrow(k, pa.int64())
            if table == "memcpys":
                for k in ("src_device_id", "dst_device_id"):
                    cols[k] = _int32(get(k), get(k + "?", bool))
            if self.links and table != "syncs":
                if table == "memcpys":
                    cols["is_async"] = _flag(get("is_async"), get("is_async?", bool))
                elif table == "memsets":
                    cols["value"] = _int32(get("value"), get("value?", bool))
            if table == "kernels":  # a dictionary of kernel names only (they get demangled)
                cols["name"] = _names(ids, names)
                for k in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                          "registers"):
                    cols[k] = arrow(k, pa.int32())
                cols.update(_smem(get("smem"), get("smem?", bool),
                                  (get("xdsmem"), get("xdsmem?", bool)) if self.links else None))
            elif table == "memcpys":
                inv, kinds = _per_name(ids, names, _memcpy_kind)
                for j, k in enumerate(("copy_kind", "src_kind", "dst_kind")):
                    cols[k] = AC.dictionary(inv, [x[j] for x in kinds])
                cols["bytes"] = arrow("bytes", pa.int64())
            elif table == "memsets":
                cols["bytes"] = arrow("bytes", pa.int64())
                cols["memory_kind"] = AC.dictionary(*_per_name(ids, names, _memset_kind))
            else:
                cols["sync_type"] = AC.dictionary(*_per_name(
                    ids, names, lambda s: _SYNC.get((s or "").strip().lower(), "unknown")))
                # 0xFFFFFFFF (or -1): CUPTI's "no event"
                ev, ev_ok = get("cuda_event_id"), get("cuda_event_id?", bool)
                cols["cuda_event_id"] = AC.array(ev, pa.int64(),
                                                 ev_ok & (ev >= 0) & (ev != 0xFFFFFFFF))
            out[table] = pa.table(cols)
        return out

    def _memory_kinds(self, kind: np.ndarray) -> pa.DictionaryArray:
        """The memory kind of [memory] instants of cuptiprof's export: "cuptiprof kind" (ids
        in `small`), 'device' where it is absent (the export leaves 'device' out)."""
        uniq, inv = np.unique(kind, return_inverse=True)
        values = ["device" if u < 0 else self.small.strings[u] for u in uniq.tolist()]
        codes = {v: i for i, v in enumerate(dict.fromkeys(values))}
        return AC.dictionary(np.array([codes[v] for v in values], np.int32)[inv], list(codes))


def _smem(total: np.ndarray, ok: np.ndarray, dynamic: tuple | None) -> dict:
    """Kineto's "shared memory" is a kernel's static plus dynamic shared memory. Where
    cuptiprof's export says the dynamic part ("cuptiprof dynamic smem"), it is split again; a
    trace that does not say it keeps the sum as static_smem (dynamic_smem NULL)."""
    d, d_ok = dynamic if dynamic is not None else (np.zeros(len(total), np.int64),
                                                  np.zeros(len(total), bool))
    d_ok = d_ok & ok & (d >= 0) & (d <= total)
    return {"static_smem": AC.array(np.where(d_ok, total - d, total), pa.int32(), ok),
            "dynamic_smem": AC.array(d, pa.int32(), d_ok)}


def _flag(v: np.ndarray, ok: np.ndarray) -> pa.Array:
    """0 / 1 args as a BOOLEAN column (NULL where absent or another number)."""
    return AC.array(v == 1, pa.bool_(), ok & ((v == 0) | (v == 1)))
