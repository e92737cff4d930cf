"""Invariant queries (tests/invariants/*.sql) return no rows on every file cuptiprof writes, and
busy time equals a union of intervals computed here in Python.

Each invariant may read the tables and views of the file, the scope views (sel_*), and every
report as a view named report_<name>.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cuptiprof
from cuptiprof.analyse import catalog
from cuptiprof.store.writer import Writer
from cuptiprof.synthetic import write_synthetic

INVARIANTS = sorted((Path(__file__).parent / "invariants").glob("*.sql"))


def violations(prof, sql_file: Path) -> list:
    for name in catalog.report_names():
        prof.con.execute(f"CREATE OR REPLACE TEMP VIEW report_{name} AS {catalog.report_sql(name)}")
    return prof.con.execute(sql_file.read_text()).fetchall()


def _files(tmp: Path) -> list[Path]:
    from test_reports import write_fixture

    return [
        write_fixture(tmp / "golden.duckdb"),
        write_synthetic(tmp / "multi.duckdb", steps=4, kernels_per_step=500, seed=9, devices=3,
                        slow={"cutlass": 2.0}, spikes=5),
        write_synthetic(tmp / "one.duckdb", steps=1, kernels_per_step=30, seed=2, warmup=0),
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("inv"))


def test_there_are_invariants():
    assert len(INVARIANTS) >= 5


@pytest.mark.parametrize("sql_file", INVARIANTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("which", [0, 1, 2])
def test_invariant_holds(runs, sql_file, which):
    with cuptiprof.open(runs[which]) as prof:
        assert violations(prof, sql_file) == []
    if which < 2:  # the one-step run has only step 0
        with cuptiprof.open(runs[which], steps="2:3") as prof:
            assert prof.sql("SELECT count(*) FROM sel_work").fetchall()[0][0] > 0
            assert violations(prof, sql_file) == []


@pytest.fixture(scope="module")
def imported_traces(tmp_path_factory):
    """Two real traces from ../shared/traces (V100 2021 dialect, A100 modern dialect), imported."""
    from conftest import SHARED_TRACES
    from cuptiprof.interop.importing import import_traces

    picks = ["kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
             "hta/negative_queue_length_values_check/rank0.json.gz"]
    if not all((SHARED_TRACES / p).is_file() for p in picks):
        pytest.skip("../shared/traces is not present")
    d = tmp_path_factory.mktemp("inv")
    out = []
    for i, p in enumerate(picks):
        import_traces([SHARED_TRACES / p], d / f"t{i}.duckdb")
        out.append(d / f"t{i}.duckdb")
    return out


@pytest.mark.parametrize("sql_file", INVARIANTS, ids=lambda p: p.stem)
def test_invariant_holds_on_shared_traces(imported_traces, sql_file):
    for f in imported_traces:
        with cuptiprof.open(f) as prof:
            assert violations(prof, sql_file) == [], f


def test_invariants_catch_broken_files(tmp_path):
    """The invariants can fail: a file with a negative duration and a step that disagrees with
    its range is reported by the queries written for those."""
    path = tmp_path / "broken.duckdb"
    with Writer(path) as w:
        w.append({"ranges": {"range_id": [1], "name": ["step"], "kind": ["step"], "step": [0],
                             "start_ns": [0], "end_ns": [1_000]},
                  "kernels": {"start_ns": [10, 50], "end_ns": [5, 60], "step": [0, 7],
                              "range_id": [1, 1], "name": ["k", "k"], "device_id": [0, 0]}})
    by_name = {p.stem: p for p in INVARIANTS}
    with cuptiprof.open(path) as prof:
        assert len(violations(prof, by_name["no_negative_durations"])) == 1
        assert [r[4:6] for r in violations(prof, by_name["gpu_step_matches_range"])] == [(7, 0)]


# -- busy time is the union of intervals --------------------------------------------------

def python_union(intervals) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def sql_busy(prof) -> dict:
    return {(r[0], r[1]): r[2] for r in prof.sql(
        "SELECT device_id, step, busy_ns FROM sel_busy").fetchall()}


def python_busy(prof) -> dict:
    groups = defaultdict(list)
    for dev, step, s, e in prof.sql(
            "SELECT device_id, step, start_ns, end_ns FROM kernels WHERE step IS NOT NULL "
            "UNION ALL SELECT device_id, step, start_ns, end_ns FROM memcpys WHERE step IS NOT NULL "
            "UNION ALL SELECT device_id, step, start_ns, end_ns FROM memsets WHERE step IS NOT NULL").fetchall():
        groups[(dev, step)].append((s, e))
    return {k: python_union(v) for k, v in groups.items()}


def test_busy_equals_python_union_on_overlapping_streams(runs):
    for path in runs:
        with cuptiprof.open(path) as prof:
            got, want = sql_busy(prof), python_busy(prof)
            assert got == want
            # Streams really overlap here: summed durations exceed busy time.
            summed = prof.sql("SELECT sum(end_ns - start_ns) FROM sel_work").fetchall()[0][0]
            assert summed > sum(want.values())


interval = st.tuples(st.integers(0, 10_000), st.integers(0, 3_000), st.sampled_from([7, 13, 17]),
                     st.sampled_from([0, 1]), st.sampled_from(["kernel", "memcpy", "memset"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(interval, min_size=1, max_size=60))
def test_busy_union_property(tmp_path_factory, items):
    path = tmp_path_factory.mktemp("prop") / "p.duckdb"
    by_kind = defaultdict(lambda: defaultdict(list))
    for s, d, stream, step, kind in items:
        cols = by_kind[kind]
        cols["start_ns"].append(s)
        cols["end_ns"].append(s + d)
        cols["stream_id"].append(stream)
        cols["step"].append(step)
        cols["device_id"].append(0)
    batch = {}
    for kind, cols in by_kind.items():
        table = {"kernel": "kernels", "memcpy": "memcpys", "memset": "memsets"}[kind]
        b = {k: pa.array(v, pa.int64() if k.endswith("_ns") else pa.int32()) for k, v in cols.items()}
        if kind == "kernel":
            b["name"] = pa.array(["k"] * len(cols["start_ns"]))
        if kind == "memcpy":
            b["copy_kind"] = pa.array(["HtoD"] * len(cols["start_ns"]))
        batch[table] = b
    with Writer(path) as w:
        w.append(batch)
    with cuptiprof.open(path) as prof:
        assert sql_busy(prof) == python_busy(prof)
        steps = prof.steps_report().fetchall()
        for row in steps:
            assert row[6] == pytest.approx(python_busy(prof)[(0, row[3])] / 1e6)
