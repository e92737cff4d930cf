"""Realistic synthetic runs, written through the Writer: for tests, golden fixtures and benchmarks.

    from cuptiprof.synthetic import write_synthetic
    write_synthetic("run.duckdb", steps=5, kernels_per_step=400, seed=0, slow={"softmax": 3.0})

Each device replays the same per-step program (like a denoising loop): kernels on a main stream
with small launch gaps and a few host-bound holes, concurrent kernels on two side streams,
memsets and device-to-device copies in the main stream, host-to-device copies on a copy stream
at the start of each step (the first one exposed, the rest hidden under kernels), a
device-to-host copy at the end, peer copies between devices, and host-side syncs. Kernel names
are a few hundred realistic names, many of them long mangled C++ names. Ranges: `warmup` steps
(no GPU rows recorded), `step` ranges and `user` ranges (blocks) inside them; every GPU row
carries the step and the innermost range that launched it. After the last step one copy is not
claimed by any step (step NULL) and counted in data_quality.

Everything is vectorised numpy, so 10 million kernel rows generate in seconds. The same seed
gives the same rows.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa

T0_NS = 1_700_000_000_000_000_000  # a realistic CLOCK_REALTIME origin
MAIN, SIDE1, SIDE2, COPY = 7, 13, 17, 21  # stream ids
SIDE_STREAMS = (SIDE1, SIDE2)


def kernel_names(n: int = 300) -> list[str]:
    """`n` distinct kernel names as CUPTI records them: mangled C++ templates and plain names."""
    functors = ["CUDAFunctor_add", "MulFunctor", "GeluCUDAKernelImpl", "silu_kernel", "AbsFunctor",
                "sigmoid_kernel", "where_kernel_impl", "fill_kernel"]
    gens = [
        (f"_ZN7cutlass6KernelINS_4gemm6kernel4GemmILi{m}ELi{nn}ELi{k}EEEEEvNT_6ParamsE"
         for m, nn, k in itertools.product((64, 128, 256), (64, 128, 256), (32, 64))),
        (f"_ZN2at6native29vectorized_elementwise_kernelILi{v}ENS0_{len(f)}{f}IfEESt5arrayIPcLm{a}EEEEviT0_T1_"
         for f, v, a in itertools.product(functors, (2, 4, 8), (2, 3))),
        (f"_ZN4cuda14softmax_kernelILi{k}EfEEvPT0_PKS1_ii" for k in (1, 2, 4, 8, 16, 32)),
        # The long lambda-in-template names PyTorch's elementwise kernels really have.
        (f"_ZN2at6native18elementwise_kernelILi{a}ELi{b}EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIfffNS0_"
         f"15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_"
         for a, b in itertools.product((128, 256, 512), (1, 2, 4, 8))),
        (f"_Z20layer_norm_kernel_v2ILi{k}EEvPfPKfS2_S2_if" for k in (64, 128, 256, 512, 1024)),
        (f"_ZN2at6native13reduce_kernelILi{a}ELi{b}ENS0_8ReduceOpIfNS0_7MeanOpsIffEEjfLi4EEEEEvT1_"
         for a, b in itertools.product((128, 256, 512), (1, 2, 4))),
        (f"{arch}_{t}gemm_{m}x{nn}_{ly}" for arch, t, m, nn, ly in itertools.product(
            ("ampere", "sm90_xmma"), ("s", "h"), (64, 128, 256), (32, 64, 128), ("nn", "tn"))),
        (f"triton_{k}_fused_{a}_{b}_{i}" for i in range(100) for k, a, b in
         [("poi", "add", "mul"), ("red", "sum", "exp"), ("per", "native_layer_norm", "view")]),
    ]
    names: list[str] = []
    # Interleave the families so that small `n` still mixes mangled and plain names.
    for name in itertools.chain.from_iterable(itertools.zip_longest(*gens)):
        if name is not None:
            names.append(name)
        if len(names) == n:
            return names
    raise ValueError(f"at most {len(names)} distinct synthetic kernel names")


@dataclass
class _Program:
    """One step's work on one device, replayed every step with jitter."""

    kind: np.ndarray      # 0 kernel, 1 memset, 2 memcpy DtoD (all in stream order)
    stream: np.ndarray
    name: np.ndarray      # kernel name index (-1 for non-kernels)
    base: np.ndarray      # base duration, ns
    block: np.ndarray     # user range (block) index
    nbytes: np.ndarray


def _program(rng: np.random.Generator, k: int, names: list[str], blocks: int,
             slow: Mapping[str, float]) -> _Program:
    n = len(names)
    kind = np.zeros(k, np.int8)
    kind[rng.random(k) < 0.02] = 1
    kind[rng.random(k) < 0.012] = 2
    if k >= 8:  # every program has at least one memset and one device-to-device copy
        kind[k // 2], kind[k // 3] = 1, 2
    kind[0] = 0
    # A few hot names dominate, as in a real model (Zipf-like weights).
    w = 1.0 / np.arange(1, n + 1) ** 0.9
    name = rng.choice(n, size=k, p=w / w.sum()).astype(np.int32)
    name_base = np.exp(rng.normal(np.log(12_000), 1.0, n)).astype(np.int64) + 1_500
    for pattern, factor in (slow or {}).items():
        hit = np.array([pattern in s for s in names])
        if not hit.any():
            raise ValueError(f"slow: no synthetic kernel name contains {pattern!r}")
        name_base[hit] = (name_base[hit] * float(factor)).astype(np.int64)
    base = name_base[name]
    nbytes = np.zeros(k, np.int64)
    ms = kind == 1
    nbytes[ms] = rng.integers(1, 64, ms.sum()) * 65536
    base[ms] = 1_000 + nbytes[ms] // 1_000  # ~1 TB/s
    dd = kind == 2
    nbytes[dd] = rng.integers(1, 256, dd.sum()) * 65536
    base[dd] = 2_000 + nbytes[dd] // 800
    name[kind != 0] = -1
    r = rng.random(k)
    stream = np.full(k, MAIN, np.int32)
    side = (kind == 0) & (np.arange(k) > 0)
    stream[side & (r < 0.12)] = SIDE1
    stream[side & (r >= 0.12) & (r < 0.18)] = SIDE2
    block = (np.arange(k) * blocks // max(k, 1)).astype(np.int32)
    return _Program(kind, stream, name, base, block, nbytes)


def _serial(anchor: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Starts of work queued in order on one stream: each starts at its anchor or when the
    previous one ends, whichever is later (vectorised form of that recurrence)."""
    if len(dur) == 0:
        return anchor
    d = np.cumsum(dur)
    d_prev = d - dur
    f = np.maximum.accumulate(anchor - d_prev)
    return f + d_prev


def synthetic_batches(steps: int = 5, kernels_per_step: int = 400, seed: int = 0,
                      slow: Mapping[str, float] | None = None, *, warmup: int = 1,
                      devices: int = 1, n_names: int = 300, blocks: int = 8, api: bool = True,
                      spikes: int = 2, pid: int = 4242) -> Iterator[dict]:
    """Yield Writer batches: one dict per step (all devices), then a tail batch.

    The first batch also carries the devices and process rows. `slow` multiplies the duration
    of every kernel whose mangled name contains a key; `spikes` instances are made 8x slower
    (sporadic outliers the `outliers` report must find).
    """
    rng = np.random.default_rng(seed)
    names = kernel_names(n_names)
    prog = _program(rng, kernels_per_step, names, blocks, slow or {})
    name_dict = pa.array(names, pa.string())
    k = kernels_per_step
    total = steps * devices
    spike_at = set(map(tuple, np.stack([rng.integers(0, total, spikes),
                                        rng.integers(0, k, spikes)], 1).tolist())) if k else set()
    t = T0_NS
    next_range = itertools.count(1)
    corr = 1
    yield {"devices": _devices(devices, pid), "processes": {
        "pid": pa.array([pid], pa.int32()), "host": ["synthetic-host"], "rank": pa.array([0], pa.int32()),
        "local_rank": pa.array([0], pa.int32()), "world_size": pa.array([1], pa.int32()),
        "command": ["python synthetic.py"], "start_ns": pa.array([T0_NS], pa.int64())},
        "ranges": _ranges([(next(next_range), None, 0, "warmup", t + i * 1_000_000,
                            t + i * 1_000_000 + 900_000, "warmup", i) for i in range(warmup)], pid)}
    t += warmup * 1_000_000
    for s in range(warmup, warmup + steps):
        step_rid = next(next_range)
        block_rids = np.array([next(next_range) for _ in range(blocks)], np.int64)
        host_start = t
        t0 = host_start + 30_000
        cols: dict[str, list[dict]] = {"kernels": [], "memcpys": [], "memsets": [], "syncs": [],
                                       "api_calls": []}
        gpu_end = t0
        for dev in range(devices):
            i_run = (s - warmup) * devices + dev
            dur = np.maximum((prog.base * rng.normal(1.0, 0.03, k)).astype(np.int64), 800)
            for (ii, j) in spike_at:
                if ii == i_run and prog.kind[j] == 0:
                    dur[j] *= 8
            # Host-to-device inputs on the copy stream; the main stream waits for the first.
            n_h2d = 3
            h2d_bytes = np.array([4 << 20, 1 << 20, 2 << 20], np.int64)
            h2d_dur = 2_000 + h2d_bytes // 25   # ~25 GB/s (bytes per ns) over PCIe
            d0 = t0 + dev * 1_000
            h2d_start = _serial(np.full(n_h2d, d0, np.int64), h2d_dur)
            main = prog.stream == MAIN
            gap = rng.integers(500, 3_000, k)
            gap[rng.random(k) < 0.01] += rng.integers(20_000, 100_000)  # host-bound holes
            start = np.empty(k, np.int64)
            m_idx = np.flatnonzero(main)
            m_start0 = h2d_start[0] + h2d_dur[0]
            step_len = dur[m_idx] + gap[m_idx]  # each item, then the launch gap after it
            start[m_idx] = m_start0 + np.cumsum(step_len) - step_len
            # Side-stream kernels are launched right after the latest main-stream item.
            last_main = np.maximum.accumulate(np.where(main, np.arange(k), 0))
            anchor = start[last_main] + 1_500
            for sid in SIDE_STREAMS:
                idx = np.flatnonzero(prog.stream == sid)
                start[idx] = _serial(anchor[idx], dur[idx])
            end = start + dur
            dev_end = int(end.max())
            d2h_start, d2h_dur = dev_end + 1_000, 2_000 + (1 << 20) // 25
            dev_end = d2h_start + d2h_dur
            gpu_end = max(gpu_end, dev_end)
            corr_ids = np.arange(corr, corr + k, dtype=np.int64)
            corr += k + 8
            step_col = np.full(k, s, np.int32)
            rid = block_rids[prog.block]
            common = lambda sel: {  # noqa: E731 - columns every activity table shares
                "device_id": pa.array(np.full(int(sel.sum()), dev, np.int32)),
                "context_id": pa.array(np.full(int(sel.sum()), dev + 1, np.int32)),
                "stream_id": pa.array(prog.stream[sel]), "correlation_id": pa.array(corr_ids[sel]),
                "start_ns": pa.array(start[sel]), "end_ns": pa.array(end[sel]),
                "step": pa.array(step_col[sel]), "range_id": pa.array(rid[sel])}
            kn = prog.kind == 0
            nk = int(kn.sum())
            ni = prog.name[kn]
            kern = common(kn)
            kern["name"] = pa.DictionaryArray.from_arrays(pa.array(ni), name_dict)
            kern["grid_x"] = pa.array((ni % 97 + 1) * 8)
            kern["grid_y"] = pa.array(np.ones(nk, np.int32))
            kern["grid_z"] = pa.array(np.ones(nk, np.int32))
            kern["block_x"] = pa.array(np.where(ni % 2 == 0, 128, 256).astype(np.int32))
            kern["block_y"] = pa.array(np.ones(nk, np.int32))
            kern["block_z"] = pa.array(np.ones(nk, np.int32))
            kern["registers"] = pa.array((ni % 9 * 8 + 32).astype(np.int32))
            kern["static_smem"] = pa.array((ni % 4 * 4096).astype(np.int32))
            kern["dynamic_smem"] = pa.array(np.zeros(nk, np.int32))
            cols["kernels"].append(kern)
            msk = prog.kind == 1
            mset = common(msk)
            mset.update(bytes=pa.array(prog.nbytes[msk]), value=pa.array(np.zeros(int(msk.sum()), np.int32)),
                        memory_kind=pa.array(["device"] * int(msk.sum())))
            cols["memsets"].append(mset)
            dd = prog.kind == 2
            ndd = int(dd.sum())
            cp = common(dd)
            cp.update(copy_kind=pa.array(["DtoD"] * ndd), src_kind=pa.array(["device"] * ndd),
                      dst_kind=pa.array(["device"] * ndd), bytes=pa.array(prog.nbytes[dd]),
                      is_async=pa.array(np.ones(ndd, bool)))
            cols["memcpys"].append(cp)
            # Copy stream: H2D at the start, D2H at the end; peer copy when there are peers.
            extra = [(h2d_start[i], h2d_start[i] + h2d_dur[i], "HtoD", "pinned" if i else "pageable",
                      "device", h2d_bytes[i], None, None) for i in range(n_h2d)]
            extra.append((d2h_start, dev_end, "DtoH", "device", "pinned", 1 << 20, None, None))
            if devices > 1:
                ps = start[m_idx[len(m_idx) // 2]]
                extra.append((ps, ps + 40_000, "PtoP", "device", "device", 8 << 20, dev,
                              (dev + 1) % devices))
            ne = len(extra)
            cols["memcpys"].append({
                "device_id": pa.array(np.full(ne, dev, np.int32)),
                "context_id": pa.array(np.full(ne, dev + 1, np.int32)),
                "stream_id": pa.array(np.full(ne, COPY, np.int32)),
                "correlation_id": pa.array(np.arange(corr, corr + ne, dtype=np.int64)),
                "start_ns": pa.array([int(e[0]) for e in extra], pa.int64()),
                "end_ns": pa.array([int(e[1]) for e in extra], pa.int64()),
                "step": pa.array(np.full(ne, s, np.int32)),
                "range_id": pa.array(np.full(ne, step_rid, np.int64)),
                "copy_kind": [e[2] for e in extra], "src_kind": [e[3] for e in extra],
                "dst_kind": [e[4] for e in extra], "bytes": pa.array([int(e[5]) for e in extra], pa.int64()),
                "src_device_id": pa.array([e[6] for e in extra], pa.int32()),
                "dst_device_id": pa.array([e[7] for e in extra], pa.int32()),
                "is_async": pa.array([True] * ne)})
            corr += ne
            # Host waits: an event sync mid-step, a stream wait, the end-of-step stream sync.
            mid = int(start[m_idx[len(m_idx) // 3]])
            cols["syncs"].append({
                "device_id": pa.array(np.full(3, dev, np.int32)),
                "context_id": pa.array(np.full(3, dev + 1, np.int32)),
                "stream_id": pa.array([MAIN, SIDE1, MAIN], pa.int32()),
                "correlation_id": pa.array([corr, corr + 1, corr + 2], pa.int64()),
                "start_ns": pa.array([mid - 20_000, mid, t0 + 200_000 + dev * 1_000], pa.int64()),
                "end_ns": pa.array([mid - 5_000, mid + 800, dev_end + 2_000], pa.int64()),
                "step": pa.array([s] * 3, pa.int32()),
                "range_id": pa.array([step_rid] * 3, pa.int64()),
                "sync_type": ["event_synchronize", "stream_wait_event", "stream_synchronize"],
                "cuda_event_id": pa.array([s * 10 + 1, s * 10 + 2, None], pa.int64())})
            corr += 3
            if api:
                launch = np.where(prog.kind == 0, 0, np.where(prog.kind == 1, 1, 2))
                api_names = pa.array(["cudaLaunchKernel", "cudaMemsetAsync", "cudaMemcpyAsync"])
                a0 = t0 - 20_000 + np.arange(k, dtype=np.int64) * 1_500
                cols["api_calls"].append({
                    "thread_id": pa.array(np.full(k, 1000 + dev, np.int64)),
                    "api_kind": pa.array(["runtime"] * k),
                    "cbid": pa.array(np.where(launch == 0, 211, np.where(launch == 1, 51, 41)).astype(np.int32)),
                    "name": pa.DictionaryArray.from_arrays(pa.array(launch.astype(np.int32)), api_names),
                    "correlation_id": pa.array(corr_ids), "start_ns": pa.array(a0),
                    "end_ns": pa.array(a0 + 1_200), "return_code": pa.array(np.zeros(k, np.int32)),
                    "step": pa.array(step_col), "range_id": pa.array(rid)})
        host_end = gpu_end + 10_000
        span = (host_end - host_start) // blocks
        rng_rows = [(step_rid, None, 0, "step", host_start, host_end, "step", s)]
        rng_rows += [(int(block_rids[b]), step_rid, 1, f"block.{b}", host_start + b * span,
                      host_start + (b + 1) * span, "user", s) for b in range(blocks)]
        batch = {name: _concat(parts) for name, parts in cols.items() if parts}
        batch["ranges"] = _ranges(rng_rows, pid)
        yield batch
        t = host_end + 50_000
    # A late copy that no step claims: kept with a NULL step and counted.
    yield {"memcpys": {
        "device_id": pa.array([0], pa.int32()), "context_id": pa.array([1], pa.int32()),
        "stream_id": pa.array([COPY], pa.int32()), "correlation_id": pa.array([corr], pa.int64()),
        "start_ns": pa.array([t], pa.int64()), "end_ns": pa.array([t + 5_000], pa.int64()),
        "step": pa.array([None], pa.int32()), "range_id": pa.array([None], pa.int64()),
        "copy_kind": ["DtoH"], "src_kind": ["device"], "dst_kind": ["pageable"],
        "bytes": pa.array([65536], pa.int64()), "is_async": [False]},
        "data_quality": {"pid": pa.array([pid], pa.int32()), "check_name": ["unclaimed_records"],
                         "subject": ["memcpy"], "count": pa.array([1], pa.int64()),
                         "value_ns": pa.array([None], pa.int64()),
                         "detail": ["1 memcpy ran after the last recorded step and belongs to no step"]}}


def _concat(parts: list[dict]) -> pa.Table:
    tables = [pa.table(p) for p in parts]
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def _ranges(rows: list[tuple], pid: int) -> dict:
    return {"range_id": pa.array([r[0] for r in rows], pa.int64()),
            "parent_id": pa.array([r[1] for r in rows], pa.int64()),
            "depth": pa.array([r[2] for r in rows], pa.int32()),
            "name": pa.array([r[3] for r in rows], pa.string()),
            "domain": pa.array(["cuptiprof"] * len(rows), pa.string()),
            "thread_id": pa.array([1000] * len(rows), pa.int64()),
            "start_ns": pa.array([r[4] for r in rows], pa.int64()),
            "end_ns": pa.array([r[5] for r in rows], pa.int64()),
            "kind": pa.array([r[6] for r in rows], pa.string()),
            "step": pa.array([r[7] for r in rows], pa.int32()),
            "pid": pa.array([pid] * len(rows), pa.int32())}


def _devices(n: int, pid: int) -> dict:
    return {"pid": pa.array([pid] * n, pa.int32()), "device_id": pa.array(range(n), pa.int32()),
            "kind": ["gpu"] * n, "name": ["NVIDIA H200"] * n,
            "uuid": [f"GPU-00000000-0000-0000-0000-00000000000{i}" for i in range(n)],
            "compute_capability": ["9.0"] * n, "sm_count": pa.array([132] * n, pa.int32()),
            "core_clock_mhz": [1980.0] * n, "memory_clock_mhz": [3201.0] * n,
            "memory_bus_width_bits": pa.array([6144] * n, pa.int32()),
            "memory_bytes": pa.array([150_000_000_000] * n, pa.int64()),
            "l2_bytes": pa.array([52_428_800] * n, pa.int64()),
            "peak_memory_bw_gbps": [4800.0] * n, "peak_host_link_gbps": [64.0] * n,
            "peak_nvlink_gbps": [450.0] * n, "source": ["synthetic"] * n}


def write_synthetic(path: str | os.PathLike, steps: int = 5, kernels_per_step: int = 400,
                    seed: int = 0, slow: Mapping[str, float] | None = None, *, mode: str = "create",
                    label: str | None = None, **kw) -> Path:
    """Write a synthetic run to `path` (one committed batch per step); returns the path.
    Keyword arguments go to `synthetic_batches` (warmup, devices, n_names, blocks, api, spikes)."""
    from cuptiprof.store.writer import RunInfo, Writer

    info = RunInfo(label=label, source="synthetic", command="cuptiprof.synthetic", host="synthetic-host",
                   start_ns=T0_NS, settings={"steps": steps, "kernels_per_step": kernels_per_step,
                                             "seed": seed, "slow": dict(slow or {}), **kw})
    pid = kw.get("pid", 4242)
    with Writer(path, info, mode=mode, pid=pid) as w:
        for batch in synthetic_batches(steps, kernels_per_step, seed, slow, **kw):
            w.append(batch)
    return Path(path)
