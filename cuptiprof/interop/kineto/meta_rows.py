"""The rows written once per process, with its last part: its `processes` row, its devices
and its data_quality rows (what the import says of the trace)."""
from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa

from cuptiprof import ranks
from cuptiprof.store import arrow as AC
from cuptiprof.interop.kineto.document import DevProp


class _MetaRows:
    """KinetoFile's rows of the process itself."""

    def _meta_rows(self, batch, run_id, pid, n_steps, unclaimed, empty, r_start, r_end, c_start,
                   c_end) -> None:
        lo = [int(x.min()) for x in (r_start, c_start) if len(x)]
        hi = [int(x.max()) for x in (r_end, c_end) if len(x)]
        for t in ("kernels", "memcpys", "memsets", "syncs"):
            G = self.gpu[t]
            if len(G.get("start_ns")):
                lo.append(int(G.get("start_ns").min()) + self.base)
                hi.append(int(G.get("end_ns").max()) + self.base)
        rank = self.dist.rank if self.dist else None
        if rank is None and not self.rank_known:
            rank = ranks.from_name(self.path.name)
        proc = self.proc
        own = lambda v, mine: mine if v is msgspec.UNSET else v  # noqa: E731
        batch["processes"] = _rows(run_id, pid, [{
            "host": self.host, "rank": rank,
            "world_size": self.dist.world_size if self.dist else None,
            "command": own(proc.command, str(self.path)), "local_rank": self.local_rank,
            "start_ns": own(proc.startNs, min(lo) if lo else None),
            "end_ns": own(proc.endNs, max(hi) if hi else None),
            "exit_status": proc.exitStatus}],
            {"rank": pa.int32(), "world_size": pa.int32(), "local_rank": pa.int32(), "start_ns": pa.int64(),
             "end_ns": pa.int64(), "exit_status": pa.int32()})
        early = proc.endedEarly
        batch["processes"]["ended_early"] = AC.array(np.array([bool(early)]), pa.bool_(),
                                                     np.array([early is not None]))
        props = {p.id: p for p in self.devprops if p.id is not None}
        devs = sorted(d for d in self.devices_used if d is not None) or sorted(props)
        if devs:
            rows = [props.get(d) or DevProp(id=d) for d in devs]
            batch["devices"] = _rows(run_id, pid, [{
                # device -1: the CPU ops of a run without a GPU (cuptiprof's export), not GPU work
                "device_id": d, "kind": "cpu" if d < 0 else "gpu", "name": p.name,
                "compute_capability": f"{p.computeMajor}.{p.computeMinor}"
                if p.computeMajor is not None else None,
                "sm_count": p.numSms, "memory_bytes": p.totalGlobalMem,
                "peak_memory_bw_gbps": p.peakMemoryBandwidthGBps, "uuid": p.uuid,
                "core_clock_mhz": p.coreClockMHz, "memory_clock_mhz": p.memoryClockMHz,
                "memory_bus_width_bits": p.memoryBusWidthBits, "l2_bytes": p.l2CacheBytes,
                "peak_host_link_gbps": p.peakHostLinkGBps, "peak_nvlink_gbps": p.peakNvlinkGBps,
                "source": "trace"}
                for d, p in zip(devs, rows)],
                {"device_id": pa.int32(), "sm_count": pa.int32(), "memory_bytes": pa.int64(),
                 "peak_memory_bw_gbps": pa.float64(), "core_clock_mhz": pa.float64(),
                 "memory_clock_mhz": pa.float64(), "memory_bus_width_bits": pa.int32(),
                 "l2_bytes": pa.int64(), "peak_host_link_gbps": pa.float64(),
                 "peak_nvlink_gbps": pa.float64()})
        quality = []
        if self.cpu_ops:   # torch.profiler without ProfilerActivity.CUDA
            quality.append({"check_name": "no_gpu", "subject": "gpu", "count": self.cpu_ops,
                            "detail": f"no GPU activity in {self.path.name} (recorded without "
                            f"CUDA activity): kernels holds the {self.cpu_ops} CPU ops that do "
                            "the work, on device -1, one stream per thread, as a run without a "
                            "GPU stores them"})
        elif devs and max(devs) < 0:   # as the run without a GPU said
            quality.append({"check_name": "no_gpu", "subject": "gpu", "count": None,
                            "detail": f"no GPU activity in {self.path.name}: kernels holds CPU ops "
                            "on device -1, one stream per thread"})
        elif not self._has_gpu_work():
            # no GPU work and no CPU op either: the reports of GPU work are empty
            quality.append({"check_name": "no_gpu", "subject": "gpu", "count": None,
                            "detail": f"no GPU activity in {self.path.name}: a trace recorded "
                            "without CUDA activity (ProfilerActivity.CUDA) and without CPU ops"})
        for key, n in sorted(self.big_args.items()):
            quality.append({"check_name": "out_of_range_args", "subject": key, "count": n,
                            "detail": f"{n} {key!r} args in {self.path.name} hold an integer "
                            "beyond 64 bits (not a value any writer of this field uses): "
                            "taken as absent"})
        for cat, n in sorted(self.unknown.items()):
            quality.append({"check_name": "unknown_category", "subject": cat, "count": n,
                            "detail": f"{n} events of category {cat!r} in {self.path.name} were "
                            "not imported (a category cuptiprof does not know)"})
        if n_steps:
            for t, label in (("kernels", "kernel"), ("memcpys", "memcpy"), ("memsets", "memset")):
                n = unclaimed.get(t, 0)
                if n:
                    quality.append({"check_name": "unclaimed_records", "subject": label, "count": n,
                                    "detail": f"{n} {label} rows in {self.path.name} were launched "
                                    "outside every ProfilerStep (or by no recorded API call); they "
                                    "have no step"})
        if len(self.host_pids) > 1:
            shown = ", ".join(map(str, sorted(self.host_pids)[:4])) + (" ..." if len(self.host_pids) > 4 else "")
            quality.append({"check_name": "processes_merged", "subject": str(len(self.host_pids)),
                            "count": len(self.host_pids),
                            "detail": f"{self.path.name} holds the host events of "
                            f"{len(self.host_pids)} processes ({shown}), imported as one process "
                            f"(pid {pid}); import one trace per process to keep them apart"})
        for n in empty:   # a step whose launches all missed the trace, or one that launched none
            quality.append({"check_name": "empty_step", "subject": str(n), "count": 0,
                            "detail": f"step {n} has no GPU activity in {self.path.name} "
                            "(nothing launched, or not captured)"})
        if not n_steps and self.rows:
            quality.append({"check_name": "missing_kind", "subject": "step", "count": 0,
                            "detail": f"{self.path.name} has no ProfilerStep#N ranges; rows carry "
                            "no step"})
        if quality:
            batch["data_quality"] = _rows(run_id, pid, quality, {"count": pa.int64()})


def _rows(run_id: int, pid: int, rows: list[dict], ints: dict) -> dict:
    """A few metadata rows -> columns (strings unless typed in `ints`: integers, or floats)."""
    out = {"run_id": AC.array(np.full(len(rows), run_id), pa.int32()),
           "pid": AC.array(np.full(len(rows), pid), pa.int32())}
    for k in rows[0]:
        vals = [r[k] for r in rows]
        if k in ints and pa.types.is_floating(ints[k]):
            out[k] = AC.array(vals, ints[k])
        elif k in ints:
            v, ok = AC.ints(vals)
            out[k] = AC.array(v, ints[k], ok)
        else:
            out[k] = AC.strings(vals)
    return out
