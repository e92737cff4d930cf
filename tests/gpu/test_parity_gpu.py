"""cuptiprof against torch.profiler on the same denoising steps, on a real GPU: equal kernel
counts per name, equal copies and memsets, close total times; and every kernel launched in
step i carries step i. Runs only with a CUDA GPU and cupti-python (`pytest -m gpu`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
EX = ["--size", "tiny", "--warmup", "2", "--steps", "4", "--seed", "0"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    pytest.importorskip("cupti")
    d = tmp_path_factory.mktemp("parity")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("CUPTIPROF_FAKE_CUPTI", None)
    py = sys.executable

    def run(*cmd):
        cp = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]

    cp_file, trace, tp_file = d / "cp.duckdb", d / "tp.json", d / "tp.duckdb"
    run(py, "-m", "cuptiprof", "run", "-o", str(cp_file), "--warmup", "1", "--steps", "3",
        "--no-report", "--", py, "examples/denoise.py", *EX)
    run(py, "scripts/torch_profile_example.py", "--trace", str(trace), "--skip", "1",
        "--record", "3", "--", *EX)
    run(py, "-m", "cuptiprof", "import", str(trace), "-o", str(tp_file), "--no-progress")
    return cp_file, tp_file


def test_same_kernels_copies_and_memsets_as_torch_profiler(runs):
    import parity

    res = parity.compare([runs[0]], [runs[1]], tol_pct=10.0)
    v = res["verdict"]
    assert res["steps"] == [1, 2, 3]
    assert v["kernels_cuptiprof"] > 0
    assert v["only_in_cuptiprof"] == [] and v["only_in_torch"] == []
    assert v["kernel_counts_equal"] and v["step_name_count_mismatches"] == 0
    assert v["memcpys_equal"] and v["memsets_equal"]
    assert any(c["direction"].startswith("DtoH") for c in res["memcpys"])  # the preview copy
    assert abs(v["total_kernel_time_diff_pct"]) < 10.0


def test_every_kernel_carries_the_step_that_launched_it(runs):
    import attribution

    r = attribution.check(runs[0])
    assert r["kernels"] > 0 and r["with_step"] == r["kernels"]
    assert r["wrong_step"] == 0 and r["in_step_but_null"] == 0 and r["no_launch_call"] == 0
    assert r["range_step_disagrees"] == 0
    assert [s for s, _, _ in r["per_step"]] == [1, 2, 3]


def test_the_examples_ranges_hold_the_work_launched_inside_them(runs):
    """`report --by range` on CUDA: kernels carry the innermost cuptiprof.range open when they
    were launched, so the example's transformer and scheduler ranges hold their own work."""
    import cuptiprof

    with cuptiprof.open(runs[0]) as prof:
        rel = prof.report("ranges")
        got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
        work = prof.sql("SELECT count(*) FROM sel_activities WHERE kind <> 'sync'").fetchall()[0][0]
    tr, sc = got["transformer"], got["scheduler"]
    assert tr["calls"] == 3 and sc["calls"] == 3
    assert tr["gpu_calls"] > 2 * sc["gpu_calls"] > 0
    assert tr["gpu_calls"] + sc["gpu_calls"] < work    # the step's own copies lie outside both
    assert tr["self_gpu_ms"] == tr["gpu_ms"] and tr["pct_gpu_time"] > 50
