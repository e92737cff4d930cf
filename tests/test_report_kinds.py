"""The kinds report's exposed copy time against a brute-force computation: a copy's hidden time is
the length of its intersection with the union of the kernel intervals on the same run, process
and device (any step, any stream), whatever the steps in scope. The file mixes short and long
kernels (longer than the report's time bins), copies that start inside long kernels, touching
and zero-length intervals, a device that is unknown, 2 runs, 2 processes and 2 devices."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import cuptiprof
from cuptiprof.store.writer import RunInfo, Writer

T0 = 1_700_000_000_000_000_000
PIDS = (101, 202)
DEVICES = (0, 1, None)
STEPS = 4


def _rows(rng, n, short, long_, p_long):
    """n intervals on one lane: start, end, step."""
    start = T0 + np.sort(rng.integers(0, 6_000_000, n))
    dur = np.where(rng.random(n) < p_long, rng.integers(300_000, 1_500_000, n), rng.integers(0, short, n))
    dur[rng.random(n) < 0.03] = 0                        # zero-length intervals
    step = np.minimum((start - T0) // 1_500_000, STEPS - 1).astype(np.int32)
    return start, start + dur, step


def write_runs(path, seed: int = 7) -> list[dict]:
    """Write 2 runs; return every row as a dict (run, pid, device, kind, detail, start, end, step)."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in (1, 2):
        info = RunInfo(label=f"r{run}", source="synthetic", command="kinds test", host="h", start_ns=T0)
        with Writer(path, info, mode="create" if run == 1 else "append", pid=PIDS[0]) as w:
            for pid in PIDS:
                for dev in DEVICES:
                    kern = {k: [] for k in ("start_ns", "end_ns", "step", "stream_id")}
                    for stream in (7, 8, 9):
                        s, e, st = _rows(rng, 120, 60_000, None, 0.08)
                        if stream == 9:                 # back-to-back kernels: touching intervals
                            s = T0 + 1_000_000 + np.arange(40, dtype=np.int64) * 10_000
                            e, st = s + 10_000, np.ones(40, np.int32)
                        kern["start_ns"] += s.tolist()
                        kern["end_ns"] += e.tolist()
                        kern["step"] += st.tolist()
                        kern["stream_id"] += [stream] * len(s)
                    n = len(kern["start_ns"])
                    w.append({"kernels": {
                        "pid": pa.array([pid] * n, pa.int32()),
                        "device_id": pa.array([dev] * n, pa.int32()),
                        "stream_id": pa.array(kern["stream_id"], pa.int32()),
                        "start_ns": pa.array(kern["start_ns"], pa.int64()),
                        "end_ns": pa.array(kern["end_ns"], pa.int64()),
                        "step": pa.array(kern["step"], pa.int32()),
                        "name": [f"k{i % 5}" for i in range(n)]}})
                    rows += [dict(run=run, pid=pid, dev=dev, kind="kernel", detail=None, s=s_, e=e_, step=st_)
                             for s_, e_, st_ in zip(kern["start_ns"], kern["end_ns"], kern["step"])]
                    for kind, detail in (("memcpy", "HtoD"), ("memcpy", "DtoH"), ("memset", None)):
                        s, e, st = _rows(rng, 60, 400_000, None, 0.1)
                        n = len(s)
                        cols = {"pid": pa.array([pid] * n, pa.int32()),
                                "device_id": pa.array([dev] * n, pa.int32()),
                                "stream_id": pa.array([3] * n, pa.int32()),
                                "start_ns": pa.array(s), "end_ns": pa.array(e), "step": pa.array(st),
                                "bytes": pa.array(rng.integers(1, 1 << 20, n))}
                        if kind == "memcpy":
                            cols["copy_kind"] = [detail] * n
                        w.append({kind + "s": cols})
                        rows += [dict(run=run, pid=pid, dev=dev, kind=kind, detail=detail, s=s_, e=e_, step=st_)
                                 for s_, e_, st_ in zip(s.tolist(), e.tolist(), st.tolist())]
    return rows


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def brute_force(rows: list[dict], steps: range) -> dict[tuple, tuple[int, int, int]]:
    """(kind, detail) -> (count, total_ns, exposed_ns) for the copies in scope, by direct
    intersection of each copy with the kernel union of its run, process and device (kernels of
    every step: a kernel of a step out of scope hides a copy as well)."""
    kernels: dict[tuple, list] = {}
    for r in rows:
        if r["kind"] == "kernel":
            kernels.setdefault((r["run"], r["pid"], r["dev"]), []).append((r["s"], r["e"]))
    unions = {k: union(v) for k, v in kernels.items()}
    out: dict[tuple, list[int]] = {}
    for r in rows:
        if r["kind"] == "kernel" or r["step"] not in steps:
            continue
        hidden = sum(max(0, min(e, r["e"]) - max(s, r["s"]))
                     for s, e in unions.get((r["run"], r["pid"], r["dev"]), ()))
        acc = out.setdefault((r["kind"], r["detail"]), [0, 0, 0])
        acc[0] += 1
        acc[1] += r["e"] - r["s"]
        acc[2] += r["e"] - r["s"] - hidden
    return {k: tuple(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def kinds_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kinds") / "kinds.duckdb"
    return path, write_runs(path)


@pytest.mark.parametrize("steps", [None, "1:2"])
def test_exposed_copy_time_matches_brute_force(kinds_file, steps):
    path, rows = kinds_file
    lo, hi = (0, STEPS - 1) if steps is None else map(int, steps.split(":"))
    want = brute_force(rows, range(lo, hi + 1))
    assert any(v[2] < v[1] for v in want.values()), "the fixture must hide some copy time"
    assert any(v[2] > 0 for v in want.values()), "the fixture must expose some copy time"
    with cuptiprof.open(path, steps=steps) as prof:
        rel = prof.kinds()
        got = {(r["kind"], r["detail"]): r for r in (dict(zip(rel.columns, v)) for v in rel.fetchall())}
    assert {k for k in got if k[0] != "kernel"} == set(want)
    for key, (count, total_ns, exposed_ns) in want.items():
        r = got[key]
        assert r["count"] == count
        assert round(r["total_ms"] * 1e6) == total_ns
        assert round(r["exposed_ms"] * 1e6) == exposed_ns, key
    n_kernels = sum(1 for r in rows if r["kind"] == "kernel" and lo <= r["step"] <= hi)
    assert got[("kernel", None)]["count"] == n_kernels
