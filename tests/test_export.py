"""Chrome-trace and Parquet export: valid files, Kineto categories and flows, step scope,
round trips that keep per-kernel totals, and bad arguments."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import cuptiprof
from cuptiprof.interop.chrome import export_chrome
from cuptiprof.interop.importing import import_traces
from cuptiprof.interop.parquet import export_parquet

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
TB0 = SHARED / "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
CLOVER = SHARED / "pipit-nsys/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite"
FILT = [SHARED / "hta/trace_filter/sampled_rank-0.json.gz", SHARED / "hta/trace_filter/sampled_rank-1.json.gz"]


def imported(tmp_path_factory, *srcs: Path) -> Path:
    if not all(s.exists() for s in srcs):
        pytest.skip("../shared/traces is not present")
    base = tmp_path_factory.getbasetemp() / "imported"
    base.mkdir(exist_ok=True)
    out = base / ("+".join(s.name for s in srcs) + ".duckdb")
    if not out.exists():
        import_traces(list(srcs), out)
    return out


def per_kernel(path: Path, where: str = "TRUE"):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return dict((n, (c, d)) for n, c, d in con.execute(
            f"SELECT name, count(*), sum(end_ns - start_ns) FROM kernels WHERE {where} GROUP BY 1").fetchall())
    finally:
        con.close()


@pytest.fixture(scope="module")
def tb0(tmp_path_factory):
    return imported(tmp_path_factory, TB0)


@pytest.fixture(scope="module")
def chrome_steps(tb0, tmp_path_factory):
    out = tmp_path_factory.mktemp("chrome") / "steps.json.gz"
    with cuptiprof.open(tb0, "6:7") as prof:
        counts = export_chrome(prof, out)
    return out, counts


def test_chrome_trace_is_valid_kineto_json(chrome_steps):
    out, counts = chrome_steps
    doc = json.loads(gzip.decompress(out.read_bytes()))
    ev = doc["traceEvents"]
    assert counts["events"] == len(ev)
    cats = {e.get("cat") for e in ev if e["ph"] == "X"}
    assert {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "user_annotation"} <= cats
    for e in ev:
        assert e["ph"] in {"X", "s", "f", "M"}
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["ts"], (int, float))
    starts = {e["id"] for e in ev if e["ph"] == "s"}
    ends = {e["id"] for e in ev if e["ph"] == "f"}
    assert ends and ends <= starts  # every arrow into a GPU row starts at its launching call
    assert doc["deviceProperties"][0]["name"] == "Tesla V100-DGXS-32GB"
    steps = sorted(e["name"] for e in ev if e["ph"] == "X" and e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#6", "ProfilerStep#7"]


def test_round_trip_keeps_per_kernel_totals(tb0, chrome_steps, tmp_path):
    out, _ = chrome_steps
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    assert per_kernel(back) == per_kernel(tb0, "step IN (6, 7)")
    con = duckdb.connect(str(back), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels WHERE op_id IS NULL OR step IS NULL").fetchone()[0] == 0
    orig = duckdb.connect(str(tb0), read_only=True)
    q = "SELECT min(start_ns), max(end_ns) FROM kernels WHERE step IN (6, 7)"
    assert con.execute(q).fetchone() == orig.execute(q).fetchone()  # timestamps kept to the ns


def test_full_round_trip_nsys_and_two_ranks(tmp_path_factory, tmp_path):
    src = imported(tmp_path_factory, CLOVER)
    out = tmp_path / "clover.json"
    with cuptiprof.open(src) as prof:
        export_chrome(prof, out)
    back = tmp_path / "back.duckdb"
    import_traces([out], back)
    assert per_kernel(back) == per_kernel(src)
    two = imported(tmp_path_factory, *FILT)
    out2 = tmp_path / "two.json.gz"
    with cuptiprof.open(two) as prof:
        export_chrome(prof, out2)
    doc = json.loads(gzip.decompress(out2.read_bytes()))
    labels = [e["args"]["labels"] for e in doc["traceEvents"] if e.get("name") == "process_labels"]
    assert labels.count("CPU") == 2


def test_parquet_datasets_read_as_one_table(tmp_path_factory, tmp_path):
    two = imported(tmp_path_factory, *FILT)
    out = tmp_path / "pq"
    with cuptiprof.open(two) as prof:
        counts = export_parquet(prof, out)
    con = duckdb.connect()
    got = con.execute(f"SELECT pid, count(*) FROM read_parquet('{out}/kernels/**/*.parquet', "
                      "hive_partitioning = true) GROUP BY 1 ORDER BY 1").fetchall()
    src = duckdb.connect(str(two), read_only=True)
    assert got == src.execute("SELECT pid, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall()
    assert len(got) == 2 and counts["kernels"] == sum(n for _, n in got)
    assert sorted(p.name for p in (out / "kernels").iterdir()) == ["host=unknown"]
    names = con.execute(f"SELECT count(DISTINCT name) FROM read_parquet('{out}/ranges/**/*.parquet', "
                        "hive_partitioning = true)").fetchone()[0]
    assert names > 10  # names are resolved, no strings table needed
    assert (out / "runs" / "data_0.parquet").exists()


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "cuptiprof", *map(str, args)], capture_output=True, text=True)


def test_cli_export_and_errors(tb0, tmp_path):
    out = tmp_path / "t.json.gz"
    r = run_cli("export", tb0, "--chrome", out, "--steps", "8")
    assert r.returncode == 0, r.stderr
    assert "steps 8:8" in r.stderr and out.exists()
    r = run_cli("export", tb0, "--chrome", out)
    assert r.returncode == 2 and "already exists" in r.stderr
    r = run_cli("export", tb0)
    assert r.returncode == 2 and "--chrome" in r.stderr
    r = run_cli("export", tb0, "--chrome", tmp_path / "x.json", "--steps", "99:100")
    assert r.returncode == 2 and not (tmp_path / "x.json").exists()
    r = run_cli("export", tmp_path / "missing.duckdb", "--parquet", tmp_path / "pq")
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run_cli("export", tb0, "--parquet", tmp_path / "nodir" / "pq")
    assert r.returncode == 2 and "does not exist" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]  # nothing partial left
