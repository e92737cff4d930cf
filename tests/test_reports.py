"""Reports over a fixed synthetic run: golden CSVs (fixture batches -> report -> expected CSV) and
the semantics each report promises.

Regenerate the golden files after an intended change with:
    CUPTIPROF_REGEN_GOLDEN=1 python -m pytest -q tests/test_reports.py
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

import cuptiprof
from cuptiprof.commands.report import print_reports
from cuptiprof.store.writer import RunInfo, Writer
from cuptiprof.synthetic import synthetic_batches, write_synthetic

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("CUPTIPROF_REGEN_GOLDEN") == "1"
REPORTS = ("overview", "ops", "ranges", "step_ranges", "kinds", "steps", "step_spread", "devices",
           "streams", "outliers", "quality")


def write_fixture(path: Path) -> Path:
    """The golden run: 3 recorded steps on 2 devices, plus work whose device is unknown."""
    info = RunInfo(label="golden", source="synthetic", command="golden fixture", host="golden-host",
                   start_ns=1_700_000_000_000_000_000)
    with Writer(path, info, pid=4242) as w:
        for batch in synthetic_batches(steps=3, kernels_per_step=60, seed=11, devices=2, n_names=12,
                                       blocks=3, spikes=2, warmup=1):
            w.append(batch)
        # Imported rows sometimes carry no device: they must still count, never vanish in joins.
        t = 1_700_000_000_000_400_000
        w.append({"kernels": {"device_id": pa.array([None, None], pa.int32()),
                              "stream_id": pa.array([99, 99], pa.int32()),
                              "start_ns": [t, t + 1_000], "end_ns": [t + 3_000, t + 2_000],
                              "step": [2, 2], "name": ["unplaced_kernel", "unplaced_kernel"]},
                  "memsets": {"device_id": pa.array([None], pa.int32()), "start_ns": [t + 5_000],
                              "end_ns": [t + 6_000], "step": [2], "bytes": [128]}})
    return path


@pytest.fixture(scope="module")
def golden_run(tmp_path_factory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("golden") / "golden.duckdb")


def to_csv(rel) -> str:
    """Stable CSV: floats to 6 significant digits, NULL as empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(rel.columns)
    for row in rel.fetchall():
        w.writerow(["" if v is None else f"{v:.6g}" if isinstance(v, float) else v for v in row])
    return buf.getvalue()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.csv"
    if REGEN:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with CUPTIPROF_REGEN_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name} differs from {path} (regenerate if intended)"


@pytest.mark.parametrize("report", REPORTS)
def test_golden(golden_run, report):
    with cuptiprof.open(golden_run) as prof:
        check_golden(report, to_csv(prof.report(report)))


@pytest.mark.parametrize("report", ("ops", "steps"))
def test_golden_step_scope(golden_run, report):
    with cuptiprof.open(golden_run, steps="2:3") as prof:
        check_golden(f"{report}_steps_2_3", to_csv(prof.report(report)))


# -- semantics -----------------------------------------------------------------------------

def test_ops_columns_and_shares(golden_run):
    with cuptiprof.open(golden_run) as prof:
        rel = prof.ops()
        assert rel.columns == ["name", "kind", "calls", "total_ms", "mean_us", "min_us", "p50_us",
                               "p95_us", "max_us", "pct_gpu_time", "pct_busy"]
        rows = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
        assert sum(r["pct_gpu_time"] for r in rows) == pytest.approx(100.0)
        # Streams overlap, so shares of busy time sum past 100; never below the GPU-time share.
        assert sum(r["pct_busy"] for r in rows) > 100.0
        for r in rows:
            assert r["min_us"] <= r["p50_us"] <= r["p95_us"] <= r["max_us"]
            assert r["mean_us"] == pytest.approx(r["total_ms"] * 1e3 / r["calls"])
        names = {r["name"] for r in rows}
        assert {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memcpy PtoP", "Memset"} <= names
        assert any(n.startswith("void ") and "<" in n for n in names)  # demangled kernel names
        assert "unplaced_kernel" in names
        # Ordered by total time; --top keeps the first N.
        assert [r["total_ms"] for r in rows] == sorted((r["total_ms"] for r in rows), reverse=True)
        assert [r[0] for r in prof.ops(top=3).fetchall()] == [r["name"] for r in rows[:3]]


def test_slow_op_is_found_at_the_top(tmp_path):
    base = write_synthetic(tmp_path / "base.duckdb", steps=2, kernels_per_step=300, seed=4)
    slow = write_synthetic(tmp_path / "slow.duckdb", steps=2, kernels_per_step=300, seed=4,
                           slow={"softmax_kernelILi1E": 40.0})
    def ops(p):
        with cuptiprof.open(p) as prof:
            return {r[0]: r[3] for r in prof.ops().fetchall()}
    a, b = ops(base), ops(slow)
    name = "void cuda::softmax_kernel<1, float>(float*, float const*, int, int)"
    assert b[name] == pytest.approx(40.0 * a[name], rel=0.05)
    with cuptiprof.open(slow) as prof:
        assert prof.ops(top=1).fetchall()[0][0] == name


def test_outliers_find_the_spikes(golden_run):
    with cuptiprof.open(golden_run) as prof:
        rel = prof.outliers()
        rows = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert rows, "the fixture has 8x spikes; the outliers report must list them"
    for r in rows:
        assert r["x_median"] >= 3 and r["step"] in (1, 2, 3) and r["calls"] >= 5


def test_an_outlier_is_at_least_3x_its_ops_median_among_5_calls(tmp_path):
    """The bounds are inclusive: 5 calls are enough, and a call of exactly 3x the median (and
    1 us over it) is an outlier; 4 calls, or a call under 3x, are not."""
    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "o.duckdb"
    # name -> durations (us), one after the other in step 1
    calls = {"five": [10, 10, 10, 10, 30], "four": [10, 10, 10, 40], "under": [10, 10, 10, 10, 29.9],
             "tiny": [0.4, 0.4, 0.4, 0.4, 1.3]}
    names, starts, ends = [], [], []
    at = 10
    for name, durs in calls.items():
        for d in durs:
            names.append(name)
            starts.append(t + int(at * us))
            ends.append(t + int((at + d) * us))
            at += d + 5
    with Writer(path, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": _range_rows([(1, None, 0, "step", "step", 1, 0, 1000)], t, us),
                  "kernels": {"name": names, "step": pa.array([1] * len(names), pa.int32()),
                              "start_ns": starts, "end_ns": ends}})
    with cuptiprof.open(path) as prof:
        rel = prof.outliers()
        got = [(r["name"], r["dur_us"], r["median_us"], r["x_median"], r["calls"])
               for r in (dict(zip(rel.columns, x)) for x in rel.fetchall())]
    assert got == [("five", 30.0, 10.0, 3.0, 5)]


def test_kinds_split_and_exposed_copy(golden_run):
    with cuptiprof.open(golden_run) as prof:
        rel = prof.kinds()
        rows = {(r[0], r[1]): dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert {k for k, _ in rows} == {"kernel", "memcpy", "memset", "sync"}
    assert {d for k, d in rows if k == "memcpy"} == {"HtoD", "DtoH", "DtoD", "PtoP"}
    assert {d for k, d in rows if k == "sync"} == {"event_synchronize", "stream_wait_event", "stream_synchronize"}
    assert sum(r["pct_gpu_time"] or 0 for r in rows.values()) == pytest.approx(100.0)
    h2d = rows[("memcpy", "HtoD")]
    # Only the first input copy of each step runs before any kernel: partly exposed, partly hidden.
    assert 0 < h2d["exposed_ms"] < h2d["total_ms"]
    d2h = rows[("memcpy", "DtoH")]
    assert d2h["exposed_ms"] == pytest.approx(d2h["total_ms"])  # after the last kernel: all exposed
    assert rows[("sync", "stream_synchronize")]["pct_gpu_time"] is None


def test_steps_windows_busy_idle(golden_run):
    with cuptiprof.open(golden_run) as prof:
        rel = prof.steps()
        rows = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
        # the name this report had before still answers, with the same rows
        assert prof.steps_report().fetchall() == rel.fetchall()
    placed = [r for r in rows if r["device_id"] is not None]
    assert sorted({(r["device_id"], r["step"]) for r in placed}) == [(d, s) for d in (0, 1) for s in (1, 2, 3)]
    for r in placed:
        assert r["host_ms"] >= r["gpu_window_ms"] >= r["busy_ms"] > 0
        assert r["idle_ms"] == pytest.approx(r["gpu_window_ms"] - r["busy_ms"])
        assert r["kernel_ms"] > r["busy_ms"] * 0.5 and r["top_op"] and r["sync_ms"] > 0
    # The step-to-step spread is relative to each device's median step.
    for d in (0, 1):
        spread = sorted(r["busy_vs_median_pct"] for r in placed if r["device_id"] == d)
        assert spread[1] == pytest.approx(0.0)
    unplaced = [r for r in rows if r["device_id"] is None]
    assert len(unplaced) == 1 and unplaced[0]["step"] == 2
    assert unplaced[0]["busy_ms"] == pytest.approx(0.004)  # [0,3) + [5,6) microseconds
    assert unplaced[0]["kernels"] == 2


def test_null_device_rows_survive_every_join(golden_run):
    with cuptiprof.open(golden_run) as prof:
        devices = {r[2]: r for r in prof.devices().fetchall()}
        assert None in devices and devices[None][10] == pytest.approx(0.004)  # busy_ms
        streams = prof.streams().fetchall()
        assert any(r[2] is None and r[3] == 99 and r[8] is not None for r in streams)
        spread = prof.report("step_spread").fetchall()
        assert any(r[2] is None for r in spread)


def test_step_scope_filters_every_report(golden_run):
    with cuptiprof.open(golden_run, steps="3") as prof:
        assert {r[3] for r in prof.steps().fetchall()} == {3}
        assert {r[2] for r in prof.outliers().fetchall()} <= {3}
        assert prof.scope == "steps 3:3" and prof.step_range == (3, 3)
        total_3 = sum(r[3] for r in prof.ops().fetchall())
    with cuptiprof.open(golden_run) as prof:
        total_all = sum(r[3] for r in prof.ops().fetchall())
    assert 0 < total_3 < total_all / 2


@pytest.mark.parametrize("steps, want", [
    ("2:3", {2, 3}), ("2:", {2, 3}), (":2", {1, 2}), ("2", {2}), (range(1, 3), {1, 2}),
    (range(3, 4), {3}), ((2, None), {2, 3}), ((None, 1), {1}), ((1, 3), {1, 2, 3}), (3, {3})])
def test_step_scope_is_inclusive_at_both_ends_in_every_spelling(golden_run, steps, want):
    """--steps A:B and Python's steps= take both ends; range(A, B) stops before B, as in Python."""
    with cuptiprof.open(golden_run, steps=steps) as prof:
        assert {r[3] for r in prof.steps().fetchall()} == want
        assert {r[0] for r in prof.report("step_ranges").fetchall()} == want
        assert {s for (s,) in prof.sql("SELECT DISTINCT step FROM sel_work").fetchall()} == want


def test_rows_without_a_step_are_out_of_scope_but_counted(golden_run):
    with cuptiprof.open(golden_run) as prof:
        n_null = prof.sql("SELECT count(*) FROM memcpys WHERE step IS NULL").fetchall()[0][0]
        assert n_null == 1
        in_scope = prof.sql("SELECT count(*) FROM sel_activities WHERE step IS NULL").fetchall()[0][0]
        assert in_scope == 0
        assert prof.data_quality().fetchall()[0][2] == "unclaimed_records"


def test_file_without_steps_reports_every_row(tmp_path):
    path = tmp_path / "nosteps.duckdb"
    with Writer(path) as w:
        w.append({"kernels": {"start_ns": [0, 10], "end_ns": [5, 30], "name": ["a", "b"],
                              "device_id": [0, 0]}})
    with cuptiprof.open(path) as prof:
        assert prof.scope == "all rows, no steps recorded"
        assert {r[0] for r in prof.ops().fetchall()} == {"a", "b"}
        assert prof.report("devices").fetchall()[0][10] == pytest.approx(25 / 1e6)


def test_report_header_of_a_file_without_steps_reads_without_nested_parentheses(tmp_path, capsys):
    from cuptiprof.cli import main
    path = tmp_path / "nosteps.duckdb"
    with Writer(path) as w:
        w.append({"kernels": {"start_ns": [0, 10], "end_ns": [5, 30], "name": ["a", "b"],
                              "device_id": [0, 0]}})
    assert main(["report", str(path)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head == f"cuptiprof report: {path}  (scope: all rows, no steps recorded)"


def test_python_api_returns_relations(golden_run):
    prof = cuptiprof.open(golden_run)
    tbl = prof.ops(top=5).arrow()
    tbl = tbl.read_all() if hasattr(tbl, "read_all") else tbl
    assert tbl.num_rows == 5 and "p95_us" in tbl.column_names
    assert prof.sql("SELECT count(*) FROM kernels").fetchall()[0][0] > 0
    pytest.importorskip("pandas")
    assert len(prof.steps_report().df()) >= 6
    prof.close()


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_print_reports_formats(golden_run, fmt):
    out = io.StringIO()
    with cuptiprof.open(golden_run) as prof:
        print_reports(prof, ["ops", "steps"], fmt, top=4, out=out)
    text = out.getvalue()
    if fmt == "json":
        doc = json.loads(text)
        assert len(doc["reports"]["ops"]) == 4 and doc["reports"]["steps"]
    elif fmt == "csv":
        assert text.startswith("name,kind,calls,total_ms")
    elif fmt == "markdown":
        assert "### ops:" in text and "| name | kind |" in text
    else:
        assert "ops: top GPU ops" in text and "\x1b" not in text


def test_control_characters_in_names_are_stripped_from_tables(tmp_path):
    path = tmp_path / "evil.duckdb"
    with Writer(path) as w:
        w.append({"kernels": {"start_ns": [0], "end_ns": [5], "name": ["evil\x1b[31m\u202ename"]}})
    out = io.StringIO()
    with cuptiprof.open(path) as prof:
        print_reports(prof, ["ops"], "table", out=out)
    assert "\x1b" not in out.getvalue() and "\u202e" not in out.getvalue()
    assert "evil[31mname" in out.getvalue()


def test_a_step_an_exception_ended_is_marked_and_left_out_of_the_spread(golden_run, tmp_path):
    """A step cut short (data_quality step_incomplete) is shown as incomplete in `steps`, and the
    spread statistics and busy_vs_median_pct are over the complete steps only."""
    import shutil

    import duckdb

    path = tmp_path / "cut.duckdb"
    shutil.copyfile(golden_run, path)
    with cuptiprof.open(golden_run) as prof:
        before = [dict(zip(prof.report("step_spread").columns, r))
                  for r in prof.report("step_spread").fetchall()]
        steps = [dict(zip(prof.steps_report().columns, r)) for r in prof.steps_report().fetchall()]
    dev0 = [r for r in steps if r["device_id"] == 0]
    run_id, pid = dev0[0]["run_id"], dev0[0]["pid"]
    with duckdb.connect(str(path)) as con:
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) VALUES "
                    "(?, ?, 'step_incomplete', '2', 'step 2 was ended early by KeyboardInterrupt')",
                    [run_id, pid])
    with cuptiprof.open(path) as prof:
        spread = {r[2]: dict(zip(prof.report("step_spread").columns, r))
                  for r in prof.report("step_spread").fetchall()}
        after = [dict(zip(prof.steps_report().columns, r)) for r in prof.steps_report().fetchall()]
    assert all(r["complete"] for r in steps)
    cut = {(r["pid"], r["device_id"], r["step"]) for r in after if not r["complete"]}
    assert cut == {(pid, r["device_id"], 2) for r in after if r["pid"] == pid and r["step"] == 2}
    busy = sorted(r["busy_ms"] for r in dev0 if r["step"] != 2)
    assert spread[0]["steps"] == len(busy) and spread[0]["incomplete"] == 1
    assert spread[0]["busy_median_ms"] == pytest.approx((busy[0] + busy[1]) / 2)
    assert spread[0]["busy_min_ms"] == pytest.approx(busy[0])
    old0 = next(r for r in before if r["device_id"] == 0)
    assert old0["steps"] == len(busy) + 1 and old0["incomplete"] == 0
    # The typical step of the HTML report is never the cut one; its bar is marked.
    from cuptiprof.analyse.compare import median_step
    from cuptiprof.render.html import write_report

    with cuptiprof.open(path) as prof:
        assert median_step(prof) in (1, 3)
        html = write_report(prof, tmp_path / "r.html").read_text()
    assert ">2*</text>" in html and "ended early by an exception" in html
    with cuptiprof.open(golden_run) as prof:
        assert median_step(prof) == 2
        assert "ended early" not in write_report(prof, tmp_path / "g.html").read_text()
    # The cut step is measured against the median of the complete ones.
    row2 = next(r for r in after if r["device_id"] == 0 and r["step"] == 2)
    median = (busy[0] + busy[1]) / 2
    assert row2["busy_vs_median_pct"] == pytest.approx(100 * (row2["busy_ms"] / median - 1))


def _ranges_file(path: Path, outer: bool = False, frames: bool = False) -> Path:
    """Two steps; in step 0 attn > inner > attn (a name nested in itself) and mlp, in step 1 attn;
    and the GPU-side copy of an attn annotation, as Kineto traces carry (not a call).
    frames: Python frames of a with_stack trace around step 0's first attn and under it (its kA
    launched there): not the program's ranges, so every number stays the same."""
    t = 1_700_000_000_000_000_000
    us = 1_000
    # range_id, parent_id, depth, name, kind, step, start, end (us after t)
    rows = [(1, None, 0, "step", "step", 0, 0, 500), (2, 1, 1, "attn", "user", 0, 10, 200),
            (3, 2, 2, "inner", "user", 0, 20, 150), (4, 3, 3, "attn", "user", 0, 30, 100),
            (5, 1, 1, "mlp", "user", 0, 300, 400), (6, None, 0, "step", "step", 1, 1000, 1500),
            (7, 6, 1, "attn", "user", 1, 1010, 1100),
            (8, None, 0, "attn", "user", 0, 12, 40)]    # a trace's GPU-side copy of an annotation
    domain = [None] * 7 + ["gpu_user_annotation"]
    if frames:
        rows = [(2, 10, 2) + rows[1][3:], (3, 2, 3) + rows[2][3:], (4, 3, 4) + rows[3][3:]] + \
            [r for r in rows if r[0] not in (2, 3, 4)]
        rows += [(10, 1, 1, "model.py(12): forward", "user", 0, 5, 210),
                 (11, 2, 3, "nn.Module: Linear_0", "user", 0, 9, 30)]
        domain = [None] * 7 + ["gpu_user_annotation"] + ["python_function"] * 2
    if outer:   # a range around both steps, opened before them (no step of its own)
        rows = [(r[0], 9 if r[3] == "step" else r[1]) + r[2:] for r in rows]
        rows.append((9, None, 0, "generate", "user", None, 0, 2000))
        domain.append(None)
    ranges = {"domain": domain,"range_id": [r[0] for r in rows], "parent_id": pa.array([r[1] for r in rows], pa.int64()),
              "depth": pa.array([r[2] for r in rows], pa.int32()), "name": [r[3] for r in rows],
              "kind": [r[4] for r in rows], "step": pa.array([r[5] for r in rows], pa.int32()),
              "thread_id": [7] * len(rows), "start_ns": [t + r[6] * us for r in rows],
              "end_ns": [t + r[7] * us for r in rows]}
    # name, range_id, step, start, duration (us)
    ks = [("kA", 11 if frames else 2, 0, 10, 10), ("kB", 3, 0, 40, 20), ("kB", 4, 0, 70, 30), ("kC", 5, 0, 300, 40),
          ("kD", 1, 0, 400, 5), ("kA", 7, 1, 1010, 7)]
    kernels = {"device_id": pa.array([0] * len(ks), pa.int32()), "stream_id": pa.array([7] * len(ks), pa.int32()),
               "name": [k[0] for k in ks], "range_id": [k[1] for k in ks],
               "step": pa.array([k[2] for k in ks], pa.int32()),
               "start_ns": [t + k[3] * us for k in ks], "end_ns": [t + (k[3] + k[4]) * us for k in ks]}
    memcpys = {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
               "copy_kind": ["HtoD"], "bytes": [64], "range_id": [3], "step": pa.array([0], pa.int32()),
               "start_ns": [t + 120 * us], "end_ns": [t + 121 * us]}
    with Writer(path, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": ranges, "kernels": kernels, "memcpys": memcpys})
    return path


@pytest.mark.parametrize("frames", [False, True], ids=["plain", "with_stack_frames"])
def test_ranges_report_counts_nested_work_for_every_enclosing_range(tmp_path, frames):
    path = _ranges_file(tmp_path / "r.duckdb", frames=frames)
    with cuptiprof.open(path) as prof:
        rel = prof.report("ranges")
        got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert set(got) == {"attn", "inner", "mlp"}          # steps are not the program's ranges
    attn, inner, mlp = got["attn"], got["inner"], got["mlp"]
    # attn holds kA, both kB (one through inner), the copy under inner and step 1's kA; the attn
    # nested in inner (a name inside itself) does not count its kB twice.
    assert (attn["calls"], attn["gpu_calls"]) == (3, 5)
    assert attn["gpu_ms"] == pytest.approx(0.068) and attn["self_gpu_ms"] == pytest.approx(0.047)
    assert attn["top_kernel"] == "kB" and attn["depth"] == 1
    # host time likewise: the attn inside inner (inside attn) is within the outer one's 0.190 ms
    assert attn["host_ms"] == pytest.approx(0.190 + 0.090)
    assert attn["gpu_us_per_call"] == pytest.approx(68 / 3)
    assert (inner["gpu_calls"], inner["depth"]) == (3, 2)
    assert inner["gpu_ms"] == pytest.approx(0.051) and inner["self_gpu_ms"] == pytest.approx(0.021)
    assert mlp["gpu_ms"] == pytest.approx(0.040) == pytest.approx(mlp["self_gpu_ms"])
    assert attn["pct_gpu_time"] == pytest.approx(100 * 68 / 113)
    from cuptiprof.render.html import write_report

    with cuptiprof.open(path) as prof:
        html = write_report(prof, tmp_path / "r.html").read_text()
    assert "The program&#x27;s ranges" in html or "The program's ranges" in html
    assert "attn: 0.068 ms in 3 calls" in html
    assert "Steps by range" in html and ">attn</span>" in html
    # Per step, each piece of work under its innermost range, counted once.
    with cuptiprof.open(path) as prof:
        rel = prof.report("step_ranges")
        split = {(r[0], r[1]): dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert {k: round(v["gpu_ms"], 6) for k, v in split.items()} == {
        (0, "attn"): 0.04, (0, "mlp"): 0.04, (0, "inner"): 0.021, (0, "(no range)"): 0.005,
        (1, "attn"): 0.007}
    assert split[(0, "inner")]["gpu_calls"] == 2
    assert split[(0, "attn")]["pct_step"] == pytest.approx(100 * 40 / 106)
    assert split[(1, "attn")]["pct_step"] == pytest.approx(100)
    # --steps 1: only step 1's range and work
    with cuptiprof.open(path, steps="1") as prof:
        rel = prof.report("ranges")
        rows = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert [(r["range"], r["calls"], r["gpu_calls"]) for r in rows] == [("attn", 1, 1)]
    assert rows[0]["gpu_ms"] == pytest.approx(0.007) and rows[0]["pct_gpu_time"] == pytest.approx(100)


def test_ranges_report_host_time_of_a_recursive_range_counts_once(tmp_path):
    """@cuptiprof.range on a recursive function: host_ms summed every call, the outer ones
    holding the inner ones, and read 2.3 times the time the function ran (fib(4)), while the
    GPU columns count such work once."""
    from cuptiprof.collect.fake import FakeCupti
    from cuptiprof.collect.session import Session

    @cuptiprof.range("fib")
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    p = tmp_path / "fib.duckdb"
    with Session(p, source=FakeCupti(), quiet=True):
        with cuptiprof.step(0):
            fib(4)
            fib(2)
    with cuptiprof.open(p) as prof:
        outer = prof.sql("SELECT sum(end_ns - start_ns) / 1e6 FROM ranges WHERE name = 'fib' "
                         "AND depth = 1").fetchall()[0][0]
        rel = prof.report("ranges")
        row = dict(zip(rel.columns, rel.fetchall()[0]))
    assert (row["range"], row["calls"]) == ("fib", 12)
    assert row["host_ms"] == pytest.approx(outer)


def test_a_range_around_the_steps_holds_their_work_though_opened_outside_them(tmp_path):
    path = _ranges_file(tmp_path / "o.duckdb", outer=True)
    with cuptiprof.open(path) as prof:
        rel = prof.report("ranges")
        got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    gen = got["generate"]
    assert (gen["calls"], gen["host_ms"], gen["gpu_us_per_call"], gen["depth"]) == (0, 0, None, 0)
    assert gen["gpu_ms"] == pytest.approx(0.113) and gen["pct_gpu_time"] == pytest.approx(100)
    assert gen["self_gpu_ms"] == pytest.approx(0.005)     # kD, launched in step 0 alone
    assert got["attn"]["calls"] == 3 and got["attn"]["gpu_ms"] == pytest.approx(0.068)


def _stepless_file(path: Path) -> Path:
    """A run without steps (an nsys import, a trace without ProfilerStep): two kernels that
    overlap on two streams and one sync, all with step NULL."""
    t = 1_700_000_000_000_000_000
    with Writer(path, RunInfo(source="synthetic", label="stepless"), pid=77) as w:
        w.append({"kernels": {"device_id": pa.array([0, 0], pa.int32()),
                              "stream_id": pa.array([7, 8], pa.int32()), "name": ["gemm", "relu"],
                              "step": pa.array([None, None], pa.int32()),
                              "start_ns": [t, t + 50_000], "end_ns": [t + 100_000, t + 300_000]},
                  "syncs": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                            "sync_type": ["stream_synchronize"], "step": pa.array([None], pa.int32()),
                            "start_ns": [t + 10_000], "end_ns": [t + 310_000]}})
    return path


def _steps_rows(path: Path, **kw) -> list[dict]:
    with cuptiprof.open(path, **kw) as prof:
        rel = prof.report("steps")
        return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def test_steps_report_of_a_file_without_steps_has_busy_window_and_sync(tmp_path):
    path = _stepless_file(tmp_path / "n.duckdb")
    (row,) = _steps_rows(path)
    assert row["step"] is None and row["kernels"] == 2
    assert row["gpu_window_ms"] == pytest.approx(0.3) and row["busy_ms"] == pytest.approx(0.3)
    assert row["idle_ms"] == pytest.approx(0) and row["sync_ms"] == pytest.approx(0.3)
    # no step to spread over: the whole file is not a step of its own, and nothing is measured
    # against a median step
    assert row["busy_vs_median_pct"] is None
    with cuptiprof.open(path) as prof:
        assert prof.report("step_spread").fetchall() == []


def test_a_run_without_steps_merged_with_stepped_runs_keeps_its_work(tmp_path):
    """The default scope is the recorded steps, and every row of a process that has none: a run
    without steps merged with runs that have them is reported whole, the others by step."""
    from cuptiprof.store.merge import merge_files

    stepped = write_fixture(tmp_path / "golden.duckdb")
    alone = _stepless_file(tmp_path / "n.duckdb")
    merged = merge_files([stepped, alone], tmp_path / "all.duckdb")
    with cuptiprof.open(stepped) as prof:
        stepped_kinds = {r[0]: r[2] for r in prof.report("kinds").fetchall()}
    with cuptiprof.open(merged) as prof:
        assert "every row of the 1 process without steps" in prof.scope
        dev = {(r[0], r[1], r[2]): dict(zip(prof.report("devices").columns, r))
               for r in prof.report("devices").fetchall()}
        kinds = {r[0]: r[2] for r in prof.report("kinds").fetchall()}
        (tops,) = [r for r in prof.report("ops").fetchall() if r[0] == "gemm"]
    (own,) = [v for (run, pid, _), v in dev.items() if pid == 77]
    assert own["kernels"] == 2 and own["gpu_ms"] == pytest.approx(0.35) and own["busy_ms"] == pytest.approx(0.3)
    assert kinds["kernel"] == stepped_kinds["kernel"] + 2 and tops[2] == 1
    rows = _steps_rows(merged)
    assert [(r["pid"], r["step"], r["kernels"], round(r["busy_ms"], 6)) for r in rows if r["pid"] == 77] \
        == [(77, None, 2, 0.3)]
    # The stepped run is still reported by step alone: its work outside steps stays out.
    assert all(r["step"] is not None for r in rows if r["pid"] != 77)
    # --steps picks steps: the run without any has none of them.
    assert all(r["pid"] != 77 for r in _steps_rows(merged, steps="0:1"))


def _range_rows(rows: list[tuple], t: int, us: int) -> dict:
    """The ranges batch of (range_id, parent_id, depth, name, kind, step, start, end) rows, the
    times in `us` units after `t`, all on thread 7."""
    return {"range_id": [r[0] for r in rows], "parent_id": pa.array([r[1] for r in rows], pa.int64()),
            "depth": pa.array([r[2] for r in rows], pa.int32()), "name": [r[3] for r in rows],
            "kind": [r[4] for r in rows], "step": pa.array([r[5] for r in rows], pa.int32()),
            "thread_id": [7] * len(rows), "start_ns": [t + r[6] * us for r in rows],
            "end_ns": [t + r[7] * us for r in rows]}


def test_ranges_inside_warm_up_are_out_of_the_default_scope(tmp_path):
    """A range opened in a warm-up step carries that step's index; its calls (a first call that
    compiles, say) must not weigh on the per-call numbers of the recorded steps."""
    t, us = 1_700_000_000_000_000_000, 1_000
    # range_id, parent_id, depth, name, kind, step, start, end (us after t)
    rows = [(1, None, 0, "step", "warmup", 0, 0, 900), (2, 1, 1, "unet", "user", 0, 10, 890),
            (3, None, 0, "step", "step", 1, 1000, 1100), (4, 3, 1, "unet", "user", 1, 1010, 1090)]
    path = tmp_path / "w.duckdb"
    with Writer(path, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": _range_rows(rows, t, us),
                  "kernels": {"name": ["k"], "step": pa.array([1], pa.int32()), "range_id": [4],
                              "start_ns": [t + 1020 * us], "end_ns": [t + 1030 * us]}})
    with cuptiprof.open(path) as prof:
        rel = prof.report("ranges")
        (unet,) = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert (unet["range"], unet["calls"]) == ("unet", 1)
    assert unet["host_ms"] == pytest.approx(0.080) and unet["gpu_us_per_call"] == pytest.approx(10)
    assert unet["depth"] == 1    # a warm-up step is a level of nesting like a step


def test_a_process_with_only_warm_up_steps_stays_out_of_the_default_scope(tmp_path):
    """A process without recorded steps is reported whole, unless it marked warm-up steps: its
    work is warm-up then, like the warm-up of any other process."""
    path = write_fixture(tmp_path / "g.duckdb")
    t = 1_700_000_000_000_000_000
    with Writer(path, RunInfo(source="synthetic", label="parent"), mode="append", pid=99) as w:
        w.append({"ranges": {"range_id": [1], "name": ["step"], "kind": ["warmup"],
                             "step": pa.array([0], pa.int32()), "thread_id": [1],
                             "start_ns": [t], "end_ns": [t + 100_000]},
                  "kernels": {"name": ["cold_gemm"], "step": pa.array([None], pa.int32()),
                              "start_ns": [t + 10_000], "end_ns": [t + 90_000]}})
    with cuptiprof.open(path) as prof:
        assert prof.scope == "all recorded steps"
        assert "cold_gemm" not in {r[0] for r in prof.report("ops").fetchall()}


def test_quality_names_the_programs_ranges_outside_every_step(tmp_path):
    """A range after the loop (a VAE decode) is in the file but in no step's scope: the quality
    report says so; a range around the steps is not outside them."""
    t, us = 1_700_000_000_000_000_000, 1_000
    # range_id, parent_id, depth, name, kind, step, start, end (us after t)
    rows = [(1, None, 0, "generate", "user", None, 0, 3000), (2, 1, 1, "step", "step", 0, 10, 900),
            (3, 1, 1, "vae_decode", "user", None, 1000, 1500),
            (4, 1, 1, "vae_decode", "user", None, 1600, 2100)]
    path = tmp_path / "o.duckdb"
    with Writer(path, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": _range_rows(rows, t, us)})
    with cuptiprof.open(path) as prof:
        rel = prof.report("quality")
        got = [dict(zip(rel.columns, r)) for r in rel.fetchall() if r[2] == "outside_steps"]
    assert [(g["subject"], g["count"]) for g in got] == [("vae_decode", 2)]
    assert got[0]["value_ms"] == pytest.approx(1.0) and "ranges WHERE step IS NULL" in got[0]["detail"]



def test_quality_says_a_thread_recorded_step_numbers_more_than_once(tmp_path):
    """A loop that numbers its steps from 0 again (each epoch): every report pools the steps of
    one number, which nothing said. The quality report does, once per process; the same number
    on two threads (steps run at once) is no repeat."""
    t, us = 1_700_000_000_000_000_000, 1_000
    rows = [(i + 1, None, 0, "step", "step", i % 3, 100 * i, 100 * i + 90) for i in range(7)]
    path = tmp_path / "o.duckdb"
    with Writer(path, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": _range_rows(rows, t, us)})
        other = _range_rows([(20, None, 0, "step", "step", 0, 5, 50)], t, us)
        w.append({"ranges": {**other, "thread_id": [8]}})
    with cuptiprof.open(path) as prof:
        rel = prof.report("quality")
        got = [dict(zip(rel.columns, r)) for r in rel.fetchall() if r[2] == "step_repeated"]
    # steps 0, 1, 2 on thread 7: 0 three times, 1 and 2 twice
    assert [(g["pid"], g["subject"], g["count"]) for g in got] == [(1, "0", 4)]
    assert got[0]["detail"].startswith("3 step numbers (first 0) recorded more than once")


@pytest.mark.parametrize("steps", [(None, None), [None, None]])
def test_steps_open_at_both_ends_are_the_default_scope(tmp_path, steps):
    """(None, None) bounds nothing: the recorded steps and every row of a process without
    steps, as with no steps at all, not only the rows that have a step."""
    from cuptiprof.store.merge import merge_files

    merged = merge_files([write_fixture(tmp_path / "golden.duckdb"), _stepless_file(tmp_path / "n.duckdb")],
                         tmp_path / "all.duckdb")
    with cuptiprof.open(merged) as prof:
        want = (prof.scope, prof.report("kinds").fetchall())
    with cuptiprof.open(merged, steps) as prof:
        assert prof.step_range is None
        assert (prof.scope, prof.report("kinds").fetchall()) == want

def test_report_takes_the_cli_by_names(golden_run):
    """`cuptiprof report --by step` is report('steps') in code; report('step') was refused."""
    from cuptiprof.commands.report import BY
    from cuptiprof.errors import UsageError

    with cuptiprof.open(golden_run) as prof:
        for by, name in BY.items():
            assert prof.report(by).fetchall() == prof.report(name).fetchall(), by
        with pytest.raises(UsageError):
            prof.report("no_such_report")


def _ops_run(path: Path, pid: int, label: str, ops: list[tuple]) -> Path:
    """A run without steps of top-level framework ops: (name, start_us, end_us, kernel_us or
    None), the kernel launched under the op when given."""
    t, us = 1_700_000_000_000_000_000, 1_000
    rows = [(i + 1, None, 0, name, "op", None, s, e) for i, (name, s, e, _) in enumerate(ops)]
    k = [(i + 1, s, ku) for i, (_, s, _, ku) in enumerate(ops) if ku is not None]
    with Writer(path, RunInfo(source="synthetic", label=label, host=label), pid=pid) as w:
        w.append({"ranges": _range_rows(rows, t, us),
                  "kernels": {"name": [f"k{op}" for op, _, _ in k], "op_id": [op for op, _, _ in k],
                              "step": pa.array([None] * len(k), pa.int32()),
                              "start_ns": [t + s * us for _, s, _ in k],
                              "end_ns": [t + (s + ku) * us for _, s, ku in k]},
                  "processes": {"pid": [pid], "host": [label]}})
    return path


def test_cpu_ops_of_a_merged_file_count_calls_where_the_op_launched_work(tmp_path):
    """In a merged file an op's calls come from the runs where it launched GPU work, as its GPU
    time does: a run where aten::mm launched none (its kernels not recorded, say) must not
    dilute the per-call time; calls that launched nothing in a run where it did still count."""
    from cuptiprof.store.merge import merge_files

    a = _ops_run(tmp_path / "a.duckdb", 11, "hostA",
                 [("aten::mm", 0, 200, 100), ("aten::mm", 300, 500, 100), ("aten::add", 600, 700, 50)])
    b = _ops_run(tmp_path / "b.duckdb", 22, "hostB",
                 [("aten::mm", 0, 1000, None), ("aten::mm", 1100, 2100, None), ("aten::mm", 2200, 3200, None),
                  ("aten::add", 3300, 3400, 30), ("aten::add", 3500, 3600, None)])
    with cuptiprof.open(merge_files([a, b], tmp_path / "all.duckdb")) as prof:
        rel = prof.report("cpu_ops")
        got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    mm, add = got["aten::mm"], got["aten::add"]
    assert (mm["op_calls"], mm["gpu_calls"]) == (2, 2)
    assert mm["host_ms"] == pytest.approx(0.4) and mm["gpu_us_per_call"] == pytest.approx(100)
    assert (add["op_calls"], add["gpu_calls"]) == (3, 2)
    assert add["host_ms"] == pytest.approx(0.3) and add["gpu_us_per_call"] == pytest.approx(80 / 3)


def _steps_run(path: Path, pid: int, label: str, rows: list[tuple], kernels: list[tuple]) -> Path:
    """A run of `_range_rows` rows (steps and the program's ranges) and kernels (name,
    range_id, step, start_us, duration_us)."""
    t, us = 1_700_000_000_000_000_000, 1_000
    with Writer(path, RunInfo(source="synthetic", label=label, host=label), pid=pid) as w:
        w.append({"ranges": _range_rows(rows, t, us),
                  "kernels": {"name": [k[0] for k in kernels], "range_id": [k[1] for k in kernels],
                              "step": pa.array([k[2] for k in kernels], pa.int32()),
                              "start_ns": [t + k[3] * us for k in kernels],
                              "end_ns": [t + (k[3] + k[4]) * us for k in kernels]},
                  "processes": {"pid": [pid], "host": [label]}})
    return path


def test_ranges_of_a_merged_file_divide_gpu_time_by_the_calls_where_it_ran(tmp_path):
    """A full run merged with one that recorded no GPU work (a --light run): a range's calls
    are those of both runs, but its GPU time per call divides by the calls of the run where it
    launched work only (calls there that launched nothing included). A range without GPU work
    anywhere keeps all its calls and 0 per call."""
    from cuptiprof.store.merge import merge_files

    full = _steps_run(tmp_path / "full.duckdb", 11, "hostA",
                      [(1, None, 0, "step", "step", 0, 0, 1000), (2, 1, 1, "fwd", "user", 0, 10, 400),
                       (3, 1, 1, "fwd", "user", 0, 500, 600), (4, 1, 1, "load", "user", 0, 700, 900),
                       (5, None, 0, "step", "step", 1, 1000, 2000),
                       (6, 5, 1, "fwd", "user", 1, 1010, 1400), (7, 5, 1, "load", "user", 1, 1700, 1900)],
                      [("gemm", 2, 0, 20, 100), ("gemm", 6, 1, 1020, 200)])
    light = _steps_run(tmp_path / "light.duckdb", 22, "hostB",
                       [(1, None, 0, "step", "step", 0, 0, 1000), (2, 1, 1, "fwd", "user", 0, 10, 400),
                        (3, 1, 1, "load", "user", 0, 500, 900),
                        (4, None, 0, "step", "step", 1, 1000, 2000),
                        (5, 4, 1, "fwd", "user", 1, 1010, 1400), (6, 4, 1, "load", "user", 1, 1500, 1900)],
                       [])
    with cuptiprof.open(merge_files([full, light], tmp_path / "all.duckdb")) as prof:
        rel = prof.report("ranges")
        got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    fwd, load = got["fwd"], got["load"]
    assert (fwd["calls"], fwd["gpu_calls"]) == (5, 2)
    assert fwd["host_ms"] == pytest.approx(0.39 + 0.1 + 0.39 + 0.39 + 0.39)
    assert fwd["gpu_ms"] == pytest.approx(0.3) and fwd["gpu_us_per_call"] == pytest.approx(100)
    assert (load["calls"], load["gpu_calls"], load["gpu_us_per_call"]) == (4, 0, 0)


def test_a_report_and_the_programs_own_query_can_be_read_interleaved(golden_run):
    """A result of prof.sql() still being read (to_arrow_reader) made every report fail with
    "connection has an open result", and a temp view of the program's own named like a table
    changed what the reports said: reports run on a connection of their own."""
    with cuptiprof.open(golden_run) as prof:
        ops = prof.ops().fetchall()
        n = prof.sql("SELECT count(*) FROM kernels").fetchall()[0][0]
        reader = prof.sql("SELECT start_ns FROM kernels").to_arrow_reader(16)
        got = reader.read_next_batch().num_rows
        assert prof.ops().fetchall() == ops           # a report while the program reads
        assert got + sum(b.num_rows for b in reader) == n
        report = prof.report("ops").to_arrow_reader(4)
        first = report.read_next_batch()
        assert prof.sql("SELECT count(*) FROM kernels").fetchall() == [(n,)]   # and the reverse
        assert first.num_rows + sum(b.num_rows for b in report) == len(ops)
        db = prof.sql("SELECT current_database()").fetchall()[0][0]
        prof.con.execute(f'CREATE TEMP VIEW memcpys AS SELECT * FROM "{db}".main.memcpys LIMIT 0')
        assert prof.sql("SELECT count(*) FROM memcpys").fetchall() == [(0,)]
        assert any(r[0].startswith("Memcpy") for r in ops)
        assert prof.ops().fetchall() == ops


def test_a_warm_up_of_one_rank_leaves_the_same_step_of_another_rank_in_scope(tmp_path):
    """One run, two ranks: rank 0 warms up in step 0, rank 1 records step 0. Only rank 0's
    warm-up range is out of scope; rank 1's range of step 0 is a call like any other."""
    from cuptiprof.store.merge import merge_files

    r0 = _steps_run(tmp_path / "r0.duckdb", 11, "rank0",
                    [(1, None, 0, "step", "warmup", 0, 0, 900), (2, 1, 1, "unet", "user", 0, 10, 890),
                     (3, None, 0, "step", "step", 1, 1000, 1100), (4, 3, 1, "unet", "user", 1, 1010, 1090)],
                    [("gemm", 4, 1, 1020, 10)])
    r1 = _steps_run(tmp_path / "r1.duckdb", 22, "rank1",
                    [(1, None, 0, "step", "step", 0, 0, 200), (2, 1, 1, "unet", "user", 0, 10, 110),
                     (3, None, 0, "step", "step", 1, 1000, 1100), (4, 3, 1, "unet", "user", 1, 1010, 1050)],
                    [("gemm", 2, 0, 20, 30), ("gemm", 4, 1, 1020, 20)])
    with cuptiprof.open(merge_files([r0, r1], tmp_path / "all.duckdb", one_run=True)) as prof:
        rel = prof.report("ranges")
        (unet,) = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert (unet["calls"], unet["gpu_calls"]) == (3, 3)
    assert unet["host_ms"] == pytest.approx(0.08 + 0.1 + 0.04)
    assert unet["gpu_us_per_call"] == pytest.approx(20)


def _two_ranks_file(tmp_path: Path) -> Path:
    """One run of two ranks (pids 11 and 22), both on their device 0, steps 1 to 4 of 1 ms each.
    Rank 11: one kernel per step of 100, 300 and 200 us in steps 1 to 3, step 2 ended early by an
    exception, step 4 without GPU work. Rank 22: 40 us in step 1; in step 3 two kernels of 30 us
    90 us apart, while rank 11's kernel runs across the gap; steps 2 and 4 without GPU work."""
    import duckdb

    from cuptiprof.store.merge import merge_files

    t, us = 1_700_000_000_000_000_000, 1_000
    parts = []
    # (step, start in the step, duration), us
    for pid, work in ((11, [(1, 10, 100), (2, 10, 300), (3, 10, 200)]),
                      (22, [(1, 10, 40), (3, 10, 30), (3, 130, 30)])):
        path = tmp_path / f"rank{pid}.duckdb"
        steps = [(s, None, 0, "step", "step", s, s * 1000, s * 1000 + 1000) for s in (1, 2, 3, 4)]
        with Writer(path, RunInfo(source="synthetic", label="ranks"), pid=pid) as w:
            w.append({"ranges": _range_rows(steps, t, us),
                      "devices": {"device_id": pa.array([0], pa.int32()), "kind": ["gpu"],
                                  "name": [f"GPU of rank {pid}"], "source": ["synthetic"]},
                      "kernels": {"name": [f"k{pid}"] * len(work),
                                  "device_id": pa.array([0] * len(work), pa.int32()),
                                  "stream_id": pa.array([7] * len(work), pa.int32()),
                                  "step": pa.array([s for s, _, _ in work], pa.int32()),
                                  "start_ns": [t + (s * 1000 + a) * us for s, a, _ in work],
                                  "end_ns": [t + (s * 1000 + a + d) * us for s, a, d in work]}})
        parts.append(path)
    merged = merge_files(parts, tmp_path / "ranks.duckdb", one_run=True)
    with duckdb.connect(str(merged)) as con:
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) VALUES "
                    "(1, 11, 'step_incomplete', '2', 'step 2 was ended early by KeyboardInterrupt')")
    return merged


def test_steps_report_of_two_ranks_keeps_each_ranks_steps_cut_steps_and_medians_apart(tmp_path):
    """Ranks of one run share step numbers and device ordinals: every per-step number (the
    step's row, a step without GPU work as 0, a step cut short, the median it is measured
    against) is the rank's own."""
    path = _two_ranks_file(tmp_path)
    got = [(r["pid"], r["device_id"], r["step"], r["complete"], r["kernels"], round(r["busy_ms"], 6),
            round(r["gpu_window_ms"], 6), round(r["host_ms"], 6), round(r["busy_vs_median_pct"], 6))
           for r in _steps_rows(path)]
    assert got == [
        # rank 11: the median of its complete steps 1, 3 and 4 (0) is 0.1 ms
        (11, 0, 1, True, 1, 0.1, 0.1, 1.0, 0.0), (11, 0, 2, False, 1, 0.3, 0.3, 1.0, 200.0),
        (11, 0, 3, True, 1, 0.2, 0.2, 1.0, 100.0), (11, 0, 4, True, 0, 0.0, 0.0, 1.0, -100.0),
        # rank 22: its step 2 is complete (rank 11's was cut) and without work; median 0.02 ms
        (22, 0, 1, True, 1, 0.04, 0.04, 1.0, 100.0), (22, 0, 2, True, 0, 0.0, 0.0, 1.0, -100.0),
        (22, 0, 3, True, 2, 0.06, 0.15, 1.0, 200.0), (22, 0, 4, True, 0, 0.0, 0.0, 1.0, -100.0)]
    with cuptiprof.open(path) as prof:
        rel = prof.report("step_spread")
        spread = {r[1]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert sorted(spread) == [11, 22]
    assert (spread[11]["steps"], spread[11]["incomplete"]) == (3, 1)
    assert (spread[22]["steps"], spread[22]["incomplete"]) == (4, 0)
    assert spread[11]["busy_median_ms"] == pytest.approx(0.1) and spread[11]["busy_max_ms"] == pytest.approx(0.2)
    assert spread[22]["busy_median_ms"] == pytest.approx(0.02) and spread[22]["busy_max_ms"] == pytest.approx(0.06)
    # rank 11's complete steps 0.1, 0.2 and 0 ms: mean 0.1, sample stddev 0.1; windows the same
    assert spread[11]["busy_cv_pct"] == pytest.approx(100.0)
    assert spread[11]["window_median_ms"] == pytest.approx(0.1)
    assert spread[11]["window_spread_pct"] == pytest.approx(200.0)


def test_steps_in_scope_of_a_process_without_gpu_work_there_are_steps_of_0(tmp_path):
    """--steps 4: neither rank launched GPU work in step 4, though both did in other steps. Each
    still has its step 4, a step of 0 on no known device, and a spread over it."""
    path = _two_ranks_file(tmp_path)
    got = [(r["pid"], r["device_id"], r["step"], r["kernels"], r["busy_ms"], r["gpu_window_ms"])
           for r in _steps_rows(path, steps="4")]
    assert got == [(11, None, 4, 0, 0.0, 0.0), (22, None, 4, 0, 0.0, 0.0)]
    with cuptiprof.open(path, steps="4") as prof:
        spread = [r[1:5] for r in prof.report("step_spread").fetchall()]
    assert spread == [(11, None, 1, 0), (22, None, 1, 0)]


@pytest.mark.parametrize("table", ["memcpys", "memsets"])
def test_a_process_whose_gpu_work_is_only_copies_has_its_steps_without_copies_as_steps_of_0(tmp_path, table):
    """A process that launched no kernel, only copies or only memsets (a data-loading rank),
    records GPU work: a step of it without any is a step of 0 in `steps` (no idle time either)
    and step_spread, as for any other."""
    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "copies.duckdb"
    steps = [(s, None, 0, "step", "step", s, s * 1000, s * 1000 + 1000) for s in (1, 2, 3)]
    work = {"device_id": pa.array([0, 0], pa.int32()), "stream_id": pa.array([21, 21], pa.int32()),
            "bytes": [1 << 20, 1 << 20], "step": pa.array([1, 3], pa.int32()),
            "start_ns": [t + 1010 * us, t + 3010 * us], "end_ns": [t + 1110 * us, t + 3060 * us]}
    if table == "memcpys":
        work["copy_kind"] = ["HtoD", "HtoD"]
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"ranges": _range_rows(steps, t, us), table: work})
    col = "memcpy_ms" if table == "memcpys" else "memset_ms"
    got = [(r["step"], r["device_id"], round(r["busy_ms"], 6), round(r[col], 6), r["idle_ms"], r["kernels"])
           for r in _steps_rows(path)]
    assert got == [(1, 0, 0.1, 0.1, 0.0, 0), (2, 0, 0.0, 0.0, 0.0, 0), (3, 0, 0.05, 0.05, 0.0, 0)]
    with cuptiprof.open(path) as prof:
        rel = prof.report("step_spread")
        (spread,) = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert spread["steps"] == 3 and spread["busy_median_ms"] == pytest.approx(0.05)


def test_devices_and_streams_of_two_ranks_are_each_ranks_own(tmp_path):
    """Both ranks ran on their device 0, stream 7: one row each, with its own device, work and
    busy time."""
    with cuptiprof.open(_two_ranks_file(tmp_path)) as prof:
        rel = prof.streams()
        streams = [(r["pid"], r["device_id"], r["stream_id"], r["kernels"], round(r["gpu_ms"], 6),
                    round(r["pct_device_busy"], 6)) for r in (dict(zip(rel.columns, x)) for x in rel.fetchall())]
        rel = prof.devices()
        devices = [(r["pid"], r["device_id"], r["name"], r["kernels"], round(r["gpu_ms"], 6),
                    round(r["busy_ms"], 6), r["streams"]) for r in (dict(zip(rel.columns, x)) for x in rel.fetchall())]
    assert streams == [(11, 0, 7, 3, 0.6, 100.0), (22, 0, 7, 3, 0.1, 100.0)]
    assert devices == [(11, 0, "GPU of rank 11", 3, 0.6, 0.6, 1), (22, 0, "GPU of rank 22", 3, 0.1, 0.1, 1)]


def test_step_ranges_of_two_ranks_name_each_ranks_own_range(tmp_path):
    """Range ids are per process: rank 0's range 2 ('encode') and rank 1's range 2 ('decode')
    are two ranges, and each rank's kernels count under its own."""
    from cuptiprof.store.merge import merge_files

    r0 = _steps_run(tmp_path / "r0.duckdb", 11, "rank0",
                    [(1, None, 0, "step", "step", 0, 0, 1000), (2, 1, 1, "encode", "user", 0, 10, 400)],
                    [("gemm", 2, 0, 20, 30)])
    r1 = _steps_run(tmp_path / "r1.duckdb", 22, "rank1",
                    [(1, None, 0, "step", "step", 0, 0, 1000), (2, 1, 1, "decode", "user", 0, 10, 400)],
                    [("gemm", 2, 0, 20, 10), ("gemm", 2, 0, 40, 10)])
    with cuptiprof.open(merge_files([r0, r1], tmp_path / "all.duckdb", one_run=True)) as prof:
        got = [(r[0], r[1], r[2], round(r[3], 6), round(r[4], 6)) for r in prof.report("step_ranges").fetchall()]
    assert got == [(0, "encode", 1, 0.03, 60.0), (0, "decode", 2, 0.02, 40.0)]


def test_cpu_ops_count_an_op_called_straight_from_an_op_of_its_name_as_one_call(tmp_path):
    """torch's dispatch often runs aten::linear inside aten::linear (an op and its overload):
    one call, as torch's profiler counts it, with its host time counted once; an op of that name
    under another op is a call of its own."""
    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "ops.duckdb"
    rows = [(1, None, 0, "step", "step", 0, 0, 1000),
            (2, 1, 1, "aten::linear", "op", 0, 10, 110), (3, 2, 2, "aten::linear", "op", 0, 20, 100),
            (4, 1, 1, "aten::matmul", "op", 0, 200, 300), (5, 4, 2, "aten::linear", "op", 0, 210, 250)]
    with Writer(path, RunInfo(source="synthetic", label="ops", host="h"), pid=5) as w:
        w.append({"ranges": _range_rows(rows, t, us),
                  "kernels": {"name": ["gemm", "gemm", "gemv"], "op_id": [3, 5, 4],
                              "step": pa.array([0, 0, 0], pa.int32()),
                              "start_ns": [t + s * us for s in (30, 220, 260)],
                              "end_ns": [t + e * us for e in (50, 230, 265)]},
                  # a host wait under an op: not GPU work of the op, nor of the scope
                  "syncs": {"op_id": [4], "step": pa.array([0], pa.int32()), "sync_type": ["stream_synchronize"],
                            "start_ns": [t + 266 * us], "end_ns": [t + 290 * us]},
                  "processes": {"pid": [5], "host": ["h"]}})
    with cuptiprof.open(path) as prof:
        rel = prof.report("cpu_ops")
        got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    linear = got["aten::linear"]
    assert (linear["op_calls"], linear["gpu_calls"]) == (2, 2)
    assert linear["host_ms"] == pytest.approx(0.1 + 0.04)
    assert linear["gpu_us_per_call"] == pytest.approx((20 + 10) / 2)
    assert (got["aten::matmul"]["op_calls"], got["aten::matmul"]["gpu_calls"]) == (1, 1)
    assert linear["pct_gpu_time"] == pytest.approx(100 * 30 / 35)


@pytest.mark.parametrize("report", [*REPORTS, "cpu_ops"])
def test_counts_are_64_bit_integers(golden_run, report):
    """Counts and sums of integers come out as BIGINT, not DuckDB's 128-bit HUGEINT (which
    Arrow, and so pandas, receive as decimal128)."""
    with cuptiprof.open(golden_run) as prof:
        rel = prof.report(report)
        wide = [(c, str(t)) for c, t in zip(rel.columns, rel.types)
                if str(t) == "HUGEINT" or str(t).startswith("DECIMAL")]
        assert wide == []
        assert not any(str(f.type).startswith("decimal") for f in rel.to_arrow_table().schema)


def test_steps_report_counts_every_host_wait_of_a_step(tmp_path):
    """A wait joins the row of its device and step. One on a device that launched nothing in the
    step (step 3) joins that step's row of 0; one whose device is unknown (a context-wide wait
    without the context's device) gets a row of its own: the waits of the steps add up to those
    the kinds report counts."""
    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "waits.duckdb"
    steps = [(s, None, 0, "step", "step", s, s * 1000, s * 1000 + 1000) for s in (1, 2, 3)]
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"ranges": _range_rows(steps, t, us),
                  "kernels": {"name": ["k", "k"], "device_id": pa.array([0, 0], pa.int32()),
                              "stream_id": pa.array([7, 7], pa.int32()), "step": pa.array([1, 2], pa.int32()),
                              "start_ns": [t + 1010 * us, t + 2010 * us], "end_ns": [t + 1110 * us, t + 2060 * us]},
                  "syncs": {"device_id": pa.array([None, 0, 0], pa.int32()), "stream_id": pa.array([None, 7, 7], pa.int32()),
                            "sync_type": ["context_synchronize", "stream_synchronize", "stream_synchronize"],
                            "step": pa.array([1, 2, 3], pa.int32()),
                            "start_ns": [t + 1020 * us, t + 2020 * us, t + 3020 * us],
                            "end_ns": [t + 1120 * us, t + 2070 * us, t + 3030 * us]}})
    got = [(r["device_id"], r["step"], r["kernels"], round(r["busy_ms"], 6), round(r["sync_ms"], 6),
            round(r["host_ms"], 6)) for r in _steps_rows(path)]
    assert got == [(0, 1, 1, 0.1, 0.0, 1.0), (0, 2, 1, 0.05, 0.05, 1.0), (0, 3, 0, 0.0, 0.01, 1.0),
                   (None, 1, 0, 0.0, 0.1, 1.0)]
    with cuptiprof.open(path) as prof:
        waits = sum(r[3] for r in prof.report("kinds").fetchall() if r[0] == "sync")
        # the row of waits alone is not a step of the device's spread
        assert [r[2:4] for r in prof.report("step_spread").fetchall()] == [(0, 3)]
    assert sum(g[4] for g in got) == pytest.approx(waits)


def test_a_steps_row_of_waits_alone_is_measured_against_no_median(tmp_path):
    """A row of waits alone on an unknown device launched no GPU work there, yet it read -100%
    of the median of the steps whose work had no device either (copies of steps 1 and 2): those
    steps are the device-less work's only spread, and step 3's waits are no step of it."""
    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "waits.duckdb"
    steps = [(s, None, 0, "step", "step", s, s * 1000, s * 1000 + 1000) for s in (1, 2, 3)]
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"ranges": _range_rows(steps, t, us),
                  "kernels": {"name": ["k"] * 3, "device_id": pa.array([0] * 3, pa.int32()),
                              "stream_id": pa.array([7] * 3, pa.int32()),
                              "step": pa.array([1, 2, 3], pa.int32()),
                              "start_ns": [t + s * 1000 * us + 10 * us for s in (1, 2, 3)],
                              "end_ns": [t + s * 1000 * us + 110 * us for s in (1, 2, 3)]},
                  "memcpys": {"device_id": pa.array([None, None], pa.int32()),
                              "stream_id": pa.array([None, None], pa.int32()),
                              "copy_kind": ["HtoD", "HtoD"], "bytes": [64, 64],
                              "step": pa.array([1, 2], pa.int32()),
                              "start_ns": [t + 1200 * us, t + 2200 * us],
                              "end_ns": [t + 1250 * us, t + 2250 * us]},
                  "syncs": {"device_id": pa.array([None], pa.int32()), "stream_id": pa.array([None], pa.int32()),
                            "sync_type": ["context_synchronize"], "step": pa.array([3], pa.int32()),
                            "start_ns": [t + 3200 * us], "end_ns": [t + 3300 * us]}})
    got = {(r["device_id"], r["step"]): (round(r["busy_ms"], 6), round(r["sync_ms"], 6),
                                         r["busy_vs_median_pct"]) for r in _steps_rows(path)}
    assert got[(None, 3)] == (0.0, 0.1, None)
    assert got[(None, 1)] == got[(None, 2)] == (0.05, 0.0, pytest.approx(0))
    assert got[(0, 3)] == (0.1, 0.0, pytest.approx(0))


def test_ops_of_equal_time_are_listed_by_name(tmp_path):
    """Ties in total time keep a stable order, by name, so that --top N and a diff of two
    outputs do not depend on the engine's row order."""
    path = tmp_path / "ties.duckdb"
    names = ["zeta", "alpha", "mid", "beta"]
    with Writer(path) as w:
        w.append({"kernels": {"name": names, "device_id": pa.array([0] * 4, pa.int32()),
                              "start_ns": [i * 100 for i in range(4)], "end_ns": [i * 100 + 50 for i in range(4)]}})
    with cuptiprof.open(path) as prof:
        assert [r[0] for r in prof.ops().fetchall()] == ["alpha", "beta", "mid", "zeta"]


def test_busy_folded_from_the_rows_equals_the_stored_one_with_zero_length_work(tmp_path, monkeypatch):
    """Imported traces round short kernels to 0 us. Work of zero length opens and closes a step's
    GPU window like any other (here at its end, and alone in step 2), whether busy time is read
    from the file's step_busy or folded from every row (a file whose writer died)."""
    import cuptiprof.analyse.profile as profile

    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "zero.duckdb"
    steps = [(s, None, 0, "step", "step", s, s * 1000, s * 1000 + 1000) for s in (1, 2)]
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"ranges": _range_rows(steps, t, us),
                  "kernels": {"name": ["k", "k", "k"], "device_id": pa.array([0, 0, 0], pa.int32()),
                              "stream_id": pa.array([7, 7, 7], pa.int32()), "step": pa.array([1, 1, 2], pa.int32()),
                              "start_ns": [t + 1010 * us, t + 1030 * us, t + 2010 * us],
                              "end_ns": [t + 1020 * us, t + 1030 * us, t + 2010 * us]}})
    want = [(1, 0.02, 0.01, 0.01), (2, 0.0, 0.0, 0.0)]
    for stored in (True, False):
        monkeypatch.setattr(profile, "has_stored_busy", lambda con, db="", s=stored: s)
        with cuptiprof.open(path) as prof:
            assert prof.stored_busy is stored
        got = [(r["step"], round(r["gpu_window_ms"], 6), round(r["busy_ms"], 6), round(r["idle_ms"], 6))
               for r in _steps_rows(path)]
        assert got == want, stored


def test_a_step_that_left_one_of_the_processs_devices_idle_is_a_step_of_0_there(tmp_path):
    """One process on two devices: device 1 ran nothing in step 2 while device 0 did. Step 2 is
    a step of 0 on device 1 in `steps` and in its spread, as it would be for a process of its own."""
    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "gap.duckdb"
    steps = [(s, None, 0, "step", "step", s, s * 1000, s * 1000 + 1000) for s in (1, 2, 3)]
    ks = [(0, 1, 100), (0, 2, 100), (0, 3, 100), (1, 1, 100), (1, 3, 300)]   # device, step, us
    with Writer(path, RunInfo(source="synthetic"), pid=3) as w:
        w.append({"ranges": _range_rows(steps, t, us),
                  "kernels": {"name": ["k"] * len(ks), "device_id": pa.array([k[0] for k in ks], pa.int32()),
                              "stream_id": pa.array([7] * len(ks), pa.int32()),
                              "step": pa.array([k[1] for k in ks], pa.int32()),
                              "start_ns": [t + (s * 1000 + 10) * us for _, s, _ in ks],
                              "end_ns": [t + (s * 1000 + 10 + d) * us for _, s, d in ks]}})
    got = [(r["device_id"], r["step"], r["kernels"], round(r["busy_ms"], 6), round(r["gpu_window_ms"], 6),
            r["host_ms"], round(r["busy_vs_median_pct"], 6)) for r in _steps_rows(path)]
    assert got == [(0, 1, 1, 0.1, 0.1, 1.0, 0.0), (0, 2, 1, 0.1, 0.1, 1.0, 0.0), (0, 3, 1, 0.1, 0.1, 1.0, 0.0),
                   (1, 1, 1, 0.1, 0.1, 1.0, 0.0), (1, 2, 0, 0.0, 0.0, 1.0, -100.0),
                   (1, 3, 1, 0.3, 0.3, 1.0, 200.0)]
    with cuptiprof.open(path) as prof:
        rel = prof.report("step_spread")
        spread = {r[2]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert (spread[1]["steps"], spread[1]["busy_median_ms"], spread[1]["busy_min_ms"]) == (3, 0.1, 0.0)


def test_host_waits_inside_a_range_are_not_its_gpu_work(tmp_path):
    """A sync is the host waiting, not GPU work: it adds nothing to a range's GPU numbers, and a
    process where the range only waited is not one where it has GPU work (its calls do not
    divide the GPU time per call)."""
    t, us = 1_700_000_000_000_000_000, 1_000
    path = tmp_path / "waits.duckdb"
    rows = [(1, None, 0, "step", "step", 0, 0, 1000), (2, 1, 1, "fwd", "user", 0, 10, 400),
            (3, 1, 1, "aaa", "user", 0, 500, 510), (4, 1, 1, "zzz", "user", 0, 600, 900)]
    for pid, mode, kernel in ((11, "create", True), (22, "append", False)):
        batch = {"ranges": _range_rows(rows, t, us),
                 "syncs": {"device_id": pa.array([0], pa.int32()), "stream_id": pa.array([7], pa.int32()),
                           "sync_type": ["stream_synchronize"], "step": pa.array([0], pa.int32()),
                           "range_id": [2], "start_ns": [t + 100 * us], "end_ns": [t + 150 * us]}}
        if kernel:
            batch["kernels"] = {"name": ["gemm"], "device_id": pa.array([0], pa.int32()),
                                "stream_id": pa.array([7], pa.int32()), "step": pa.array([0], pa.int32()),
                                "range_id": [2], "start_ns": [t + 20 * us], "end_ns": [t + 40 * us]}
        with Writer(path, RunInfo(source="synthetic"), mode=mode, pid=pid) as w:
            w.append(batch)
    with cuptiprof.open(path) as prof:
        rel = prof.report("ranges")
        got = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
        split = [r[1:4] for r in prof.report("step_ranges").fetchall()]
    # by GPU time, then ranges without any by host time
    assert [r["range"] for r in got] == ["fwd", "zzz", "aaa"]
    fwd = got[0]
    assert (fwd["calls"], fwd["gpu_calls"]) == (2, 1)
    assert fwd["gpu_ms"] == pytest.approx(0.02) and fwd["self_gpu_ms"] == pytest.approx(0.02)
    assert fwd["gpu_us_per_call"] == pytest.approx(20) and fwd["pct_gpu_time"] == pytest.approx(100)
    assert split == [("fwd", 1, pytest.approx(0.02))]


def test_the_scope_counts_every_process_without_steps(tmp_path):
    from cuptiprof.store.merge import merge_files
    stepped = write_fixture(tmp_path / "golden.duckdb")
    runs = [_stepless_file(tmp_path / f"n{i}.duckdb") for i in range(2)]
    merged = merge_files([stepped, *runs], tmp_path / "all.duckdb")
    with cuptiprof.open(merged) as prof:
        assert prof.scope == "all recorded steps, and every row of the 2 processes without steps"
    with cuptiprof.open(runs[0]) as prof:
        assert prof.scope == "all rows, no steps recorded"


@pytest.mark.parametrize("both_open", [(None, None), [None, None]])
def test_a_pair_open_at_both_ends_is_every_step(tmp_path, both_open):
    """(None, None) bounds nothing: the same scope as steps=None, processes without steps
    included, and the same rows."""
    from cuptiprof.store.merge import merge_files
    merged = merge_files([write_fixture(tmp_path / "golden.duckdb"),
                          _stepless_file(tmp_path / "n.duckdb")], tmp_path / "all.duckdb")
    with cuptiprof.open(merged) as every, cuptiprof.open(merged, steps=both_open) as prof:
        assert prof.scope == every.scope
        assert prof.step_range is None
        assert prof.report("kinds").fetchall() == every.report("kinds").fetchall()
    assert _steps_rows(merged, steps=both_open) == _steps_rows(merged)


def test_quality_counts_the_calls_outside_steps_in_words(tmp_path, capsys):
    out = tmp_path / "q.duckdb"
    with cuptiprof.profile(out):
        with cuptiprof.range("load"):
            pass
        for _ in range(2):
            with cuptiprof.range("prep"):
                pass
        with cuptiprof.range("step", step=0):
            pass
    capsys.readouterr()
    with cuptiprof.open(out) as prof:
        rows = {r[3]: r[6] for r in prof.report("quality").fetchall() if r[2] == "outside_steps"}
    assert rows["load"].startswith("1 call of range 'load' ran outside every recorded step"), rows
    assert rows["prep"].startswith("2 calls of range 'prep' ran outside"), rows


def test_one_kernel_recorded_mangled_in_one_run_and_readable_in_another_is_one_op(tmp_path):
    """A merged file of an Nsight Systems export (mangled names) and a Kineto trace (readable
    ones) of the same program holds one kernel under two names that read the same: it is one op,
    as compare and diff key it, not two rows of one name that split its calls and time."""
    from cuptiprof.store.merge import merge_files

    paths = []
    for i, name in enumerate(["_Z6squarePfi", "square(float*, int)"]):
        path = tmp_path / f"r{i}.duckdb"
        with Writer(path, RunInfo(source="synthetic", label=f"r{i}", host=f"h{i}"), pid=10 + i) as w:
            w.append({"kernels": {"name": [name, name, "other"], "device_id": pa.array([0] * 3, pa.int32()),
                                  "step": pa.array([0, 1, 1], pa.int32()),
                                  "start_ns": [0, 1_000_000, 2_000_000],
                                  "end_ns": [10_000 * (i + 1), 1_000_000 + 10_000 * (i + 1), 2_001_000]}})
        paths.append(path)
    with cuptiprof.open(merge_files(paths, tmp_path / "all.duckdb")) as prof:
        ops = [r[:3] for r in prof.ops().fetchall()]
        steps = {(r["run_id"], r["step"]): r["top_op"] for r in
                 (dict(zip(prof.steps().columns, r)) for r in prof.steps().fetchall())}
    assert ops == [("square(float*, int)", "kernel", 4), ("other", "kernel", 2)]
    assert set(steps.values()) == {"square(float*, int)"}


def _tied_kernels_file(path: Path, names: list[str]) -> Path:
    """Step 0 holding range 'attn' holding op 'aten::mm' holding two kernels of equal length,
    written in `names`' order."""
    t, us = 1_700_000_000_000_000_000, 1_000
    ranges = {"range_id": [1, 2, 3], "parent_id": pa.array([None, 1, 2], pa.int64()),
              "depth": pa.array([0, 1, 2], pa.int32()), "name": ["step", "attn", "aten::mm"],
              "kind": ["step", "user", "op"], "step": pa.array([0, 0, 0], pa.int32()),
              "thread_id": [7, 7, 7], "start_ns": [t, t + 5 * us, t + 10 * us],
              "end_ns": [t + 500 * us, t + 450 * us, t + 400 * us]}
    kernels = {"device_id": pa.array([0, 0], pa.int32()), "stream_id": pa.array([7, 7], pa.int32()),
               "name": names, "range_id": [3, 3], "op_id": [3, 3], "step": pa.array([0, 0], pa.int32()),
               "start_ns": [t + 20 * us, t + 100 * us], "end_ns": [t + 50 * us, t + 130 * us]}
    with Writer(path, RunInfo(source="synthetic"), pid=1) as w:
        w.append({"ranges": ranges, "kernels": kernels})
    return path


@pytest.mark.parametrize("report, col", [("ranges", "top_kernel"), ("cpu_ops", "top_kernel"),
                                         ("steps", "top_op")])
def test_the_top_kernel_of_equal_times_is_the_first_name_whatever_the_row_order(
        tmp_path, report, col):
    # a round trip or a merge writes rows in another order: the report must not change with it
    got = []
    for i, names in enumerate((["kZ", "kA"], ["kA", "kZ"])):
        with cuptiprof.open(_tied_kernels_file(tmp_path / f"{i}.duckdb", names)) as prof:
            rel = prof.report(report)
            got.append([r[rel.columns.index(col)] for r in rel.fetchall()])
    assert got[0] == got[1] and "kA" in got[0]
