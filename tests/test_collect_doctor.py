"""`cuptiprof doctor` on a machine without a GPU: clear lines, non-zero exit, no traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cuptiprof.collect import cupti_source
from cuptiprof.commands import doctor

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(cupti_source.gpu_count() > 0, reason="this machine has a GPU")
def test_doctor_without_gpu_says_what_and_how():
    r = subprocess.run([sys.executable, "-m", "cuptiprof", "doctor"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (1, 3)
    assert "Traceback" not in r.stderr
    lines = r.stdout.splitlines()
    assert all(l.startswith(("ok ", "problem ")) for l in lines)
    names = [l.split()[1] for l in lines]
    assert {"python", "cuptiprof", "duckdb", "torch", "CUDA"} <= set(names)
    problem = [l for l in lines if l.startswith("problem")]
    assert problem and all(" -> " in l for l in problem)  # each problem says how to fix it
    assert r.stderr.strip().count("\n") == 0 and "would NOT work" in r.stderr


def test_doctor_exit_status_rules(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "checks", lambda: [("a", True, "", "", 1)])
    assert doctor.run(None) == 0
    monkeypatch.setattr(doctor, "checks", lambda: [("gpu", False, "none", "fix", 3)])
    assert doctor.run(None) == 3
    monkeypatch.setattr(doctor, "checks", lambda: [("gpu", False, "", "f", 3),
                                                   ("duckdb", False, "", "f", 1)])
    assert doctor.run(None) == 1
    assert "problem  duckdb" in capsys.readouterr().out
