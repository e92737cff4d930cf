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
    assert all(l.startswith(("ok ", "problem ", "note ")) for l in lines)
    names = [l.split()[1] for l in lines]
    assert {"python", "cuptiprof", "duckdb", "torch", "CUDA"} <= set(names)
    problem = [l for l in lines if l.startswith("problem")]
    assert problem and all(" -> " in l for l in problem)  # each problem says how to fix it
    assert r.stderr.strip().count("\n") == 0 and "would NOT work" in r.stderr
    assert "`cuptiprof run` records a torch program's CPU op times" in r.stderr


def test_doctor_exit_status_rules(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "checks", lambda: [("a", True, "", "", 1)])
    assert doctor.run(None) == 0
    monkeypatch.setattr(doctor, "checks", lambda: [("gpu", False, "none", "fix", 3)])
    assert doctor.run(None) == 3
    monkeypatch.setattr(doctor, "checks", lambda: [("gpu", False, "", "f", 3),
                                                   ("duckdb", False, "", "f", 1)])
    assert doctor.run(None) == 1
    assert "problem  duckdb" in capsys.readouterr().out


def test_doctor_notes_another_python_on_path(tmp_path, monkeypatch, capsys):
    """A `python3` on PATH that cannot import cuptiprof's libraries: a note with the fix, and
    the exit status stays what the GPU checks make it."""
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho numpy duckdb\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}")
    notes = doctor._path_pythons()
    assert [(w, ok, code) for w, ok, _, _, code in notes] == [("python3 on PATH", False, 0)]
    assert "cannot import numpy, duckdb" in notes[0][2] and sys.executable in notes[0][3]
    monkeypatch.setattr(doctor, "checks", lambda: [("a", True, "", "", 1)] + notes)
    assert doctor.run(None) == 0
    out = capsys.readouterr().out
    assert "note     python3 on PATH" in out and " -> run them with" in out
    # the interpreter cuptiprof runs in is not a note
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert doctor._path_pythons() == []


@pytest.mark.parametrize("failing, cpu_ops", [
    ([("CUDA driver", False, "libcuda.so.1 cannot be loaded", "f", 3)], True),
    ([("CUDA driver", True, "CUDA 12.4", "", 3), ("GPU", False, "no CUDA device visible", "f", 3)],
     True),
    ([("CUDA driver", True, "CUDA 12.4", "", 3), ("GPU", True, "1 visible", "", 3),
      ("CUPTI subscriber", False, "held by another profiler", "f", 3)], False),
    ([("CUDA driver", False, "", "f", 3), ("duckdb", False, "not installed", "f", 1)], False),
])
def test_doctor_says_run_records_cpu_ops_without_a_gpu(monkeypatch, capsys, failing, cpu_ops):
    """No CUDA GPU found: the last line says `cuptiprof run` records a torch program's CPU op
    times; CUPTI held by another profiler (a GPU is there) and a missing package do not."""
    monkeypatch.setattr(doctor, "checks", lambda: [("python", True, "", "", 1)] + failing)
    doctor.run(None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "profile() still records host-side ranges" in err
    assert ("`cuptiprof run` records a torch program's CPU op times instead (no CUDA GPU "
            "found)" in err) is cpu_ops, err
