"""Reports whose rows tie on their primary order (equal times, equal starts) list them in one
order whatever the order the rows were written in: a round trip or a merge writes rows in
another order, and the report must not change with it."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import cuptiprof
from cuptiprof.analyse.compare import step_timeline
from cuptiprof.store.writer import RunInfo, Writer

T, US = 1_700_000_000_000_000_000, 1_000


def _step(t: int = T) -> dict:
    return {"range_id": [1], "parent_id": pa.array([None], pa.int64()), "depth": pa.array([0], pa.int32()),
            "name": ["step"], "kind": ["step"], "step": pa.array([1], pa.int32()), "thread_id": [7],
            "start_ns": [t], "end_ns": [t + 1000 * US]}


def _file(path: Path, kernels: list[tuple], quality: list[tuple]) -> Path:
    """kernels: (stream_id, name, start_us, end_us) rows on device 0, step 1, written in this
    order; quality: (check_name, subject, count, detail) facts, added in this order."""
    with Writer(path, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": _step(),
                  "kernels": {"device_id": pa.array([0] * len(kernels), pa.int32()),
                              "stream_id": pa.array([k[0] for k in kernels], pa.int32()),
                              "name": [k[1] for k in kernels],
                              "step": pa.array([1] * len(kernels), pa.int32()),
                              "start_ns": [T + k[2] * US for k in kernels],
                              "end_ns": [T + k[3] * US for k in kernels]}})
        for q in quality:
            w.add_quality(*q)
    return path


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    # op k: 4 calls of 10 us and a spike of 30 us on each of streams 7 and 8, the spikes at one
    # start; ops a and b of equal times at one start on stream 9
    kernels = [(s, "k", 10 + 20 * i, 20 + 20 * i) for s in (7, 8) for i in range(4)]
    kernels += [(7, "k", 200, 230), (8, "k", 200, 230), (9, "b", 300, 310), (9, "a", 300, 310)]
    quality = [("dropped", "kernels", 3, "from writer 2"), ("dropped", "kernels", 5, "from writer 1")]
    return (_file(tmp_path / "fwd.duckdb", kernels, quality),
            _file(tmp_path / "rev.duckdb", kernels[::-1], quality[::-1]))


def _rows(rel) -> list[tuple]:
    return rel.fetchall()


@pytest.mark.parametrize("report", ["outliers", "quality", "ops"])
def test_tied_report_rows_keep_one_order_whatever_the_write_order(tmp_path, report):
    fwd, rev = _pair(tmp_path)
    with cuptiprof.open(fwd) as prof:
        a = _rows(prof.report(report))
    with cuptiprof.open(rev) as prof:
        b = _rows(prof.report(report))
    assert a == b


def test_outliers_of_equal_times_are_by_stream(tmp_path):
    fwd, rev = _pair(tmp_path)
    for p in (fwd, rev):
        with cuptiprof.open(p) as prof:
            rel = prof.outliers()
            got = [(r["name"], r["stream_id"], r["dur_us"])
                   for r in (dict(zip(rel.columns, x)) for x in rel.fetchall())]
        assert got == [("k", 7, 30.0), ("k", 8, 30.0)]


def test_quality_facts_of_one_subject_are_by_detail(tmp_path):
    fwd, rev = _pair(tmp_path)
    for p in (fwd, rev):
        with cuptiprof.open(p) as prof:
            got = [r[-1] for r in prof.report("quality").fetchall() if r[2] == "dropped"]
            raw = [r[-1] for r in prof.data_quality().fetchall() if r[2] == "dropped"]
        assert got == raw == ["from writer 1", "from writer 2"]


def test_timeline_boxes_of_one_start_are_by_end_then_name(tmp_path):
    fwd, rev = _pair(tmp_path)
    got = []
    for p in (fwd, rev):
        with cuptiprof.open(p) as prof:
            rel = step_timeline(prof, 1)
            got.append([(r["stream_id"], r["name"], r["start_ns"]) for r in
                        (dict(zip(rel.columns, x)) for x in rel.fetchall())])
    assert got[0] == got[1]
    assert [n for s, n, _ in got[0] if s == 9] == ["a", "b"]
