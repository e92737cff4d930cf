"""The bundled example and the no-GPU path of `cuptiprof run` end to end (what the README's
main command does on a machine without a GPU)."""
from __future__ import annotations

import sys

import pytest

from _run_helpers import ROOT, cli, q

pytest.importorskip("torch")
EXAMPLE = ROOT / "examples" / "denoise.py"
PY = sys.executable


def test_example_runs_alone(tmp_path):
    r = __import__("subprocess").run([PY, EXAMPLE, "--size", "tiny", "--warmup", "1", "--steps", "2"],
                                     capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "denoise: 2 steps" in r.stdout and "image (1, 3, 128, 128)" in r.stdout


def test_example_bad_size(tmp_path):
    r = __import__("subprocess").run([PY, EXAMPLE, "--size", "huge"], capture_output=True, text=True,
                                     timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and "--size" in r.stderr


@pytest.mark.parametrize("args, says", [(["--size", "0,1,1,2"], "--size"),
                                        (["--size", "8,0,2,4"], "--size"),
                                        (["--device", "gpu"], "--device")])
def test_example_bad_size_or_device_is_one_line(tmp_path, args, says):
    """A zero in --size or a device torch does not know ended in a torch traceback."""
    r = __import__("subprocess").run([PY, EXAMPLE, *args, "--steps", "1", "--warmup", "0"],
                                     capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_cpu_path_end_to_end(tmp_path):
    r = cli(["run", "-o", "denoise.duckdb", "--", PY, EXAMPLE, "--size", "tiny", "--warmup", "1",
             "--steps", "3"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    # the report: per-op rows (CPU ops) and per-step rows, and a clear notice
    assert "aten::" in r.stderr and "aten::" not in r.stdout   # the report is on stderr
    steps_block = r.stderr.split("\nsteps:", 1)[1].split("\n\n", 1)[0]
    assert len([l for l in steps_block.splitlines() if l.strip()[:1].isdigit()]) == 3
    assert "no GPU activity was captured" in r.stderr
    assert "wrote denoise.duckdb" in r.stderr
    out = tmp_path / "denoise.duckdb"
    assert q(out, "SELECT source, status FROM runs") == [("cpu", "complete")]
    assert q(out, "SELECT device_id, kind FROM devices") == [(-1, "cpu")]
    assert q(out, "SELECT check_name FROM data_quality WHERE check_name = 'no_gpu'") == [("no_gpu",)]
    # every CPU "kernel" is a leaf op inside a recorded step, with its op range
    assert q(out, "SELECT count(*) > 50, count(*) FILTER (WHERE step IS NULL), "
                  "count(*) FILTER (WHERE device_id <> -1) FROM kernels") == [(True, 0, 0)]
    assert q(out, "SELECT count(*) FROM kernels k LEFT JOIN ranges r ON r.range_id = k.op_id "
                  "AND r.kind = 'op' WHERE r.range_id IS NULL") == [(0,)]
    assert q(out, "SELECT list(DISTINCT step ORDER BY step) FROM kernels") == [([0, 1, 2],)]
    # the example's own log lines sit beside the steps
    assert q(out, "SELECT count(*) FROM logs WHERE logger = 'denoise' AND message = 'decode started'") == [(1,)]


def test_steps_of_the_unmarked_example_from_its_inner_function(tmp_path):
    """The example with --no-markers is code that marks nothing; --step-fn finds each
    denoising step in the function main() defines."""
    r = cli(["run", "-o", "u.duckdb", "--no-report", "--step-fn", "__main__:main.denoise_step",
             "--warmup", "2", "--", PY, EXAMPLE, "--size", "tiny", "--warmup", "0", "--steps", "5",
             "--no-markers"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "denoise: 5 steps" in r.stdout
    out = tmp_path / "u.duckdb"
    assert q(out, "SELECT kind, step FROM ranges WHERE kind IN ('step', 'warmup') "
                  "ORDER BY start_ns") == [("warmup", 0), ("warmup", 1), ("step", 2), ("step", 3),
                                           ("step", 4)]
    assert q(out, "SELECT list(DISTINCT step ORDER BY step) FROM kernels") == [([2, 3, 4],)]
