"""`cuptiprof doctor` on a machine without a GPU: clear lines, non-zero exit, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuptiprof.commands import doctor
from cuptiprof.collect.libcuda import gpu_count as libcuda_gpu_count

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(libcuda_gpu_count() > 0, reason="this machine has a GPU")
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


@pytest.mark.skipif(libcuda_gpu_count() > 0, reason="this machine has a GPU")
def test_doctor_verdict_survives_a_reader_that_went_away():
    """`cuptiprof doctor | head -1` in a setup script under pipefail: the closed pipe must not
    turn "GPU profiling would NOT work" (exit 3) into exit 0."""
    import os
    for both in (False, True):   # stdout alone, and `2>&1 | head -1`
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([sys.executable, "-m", "cuptiprof", "doctor"], cwd=ROOT, stdout=w,
                               stderr=w if both else subprocess.PIPE, timeout=120)
        finally:
            os.close(w)
        assert p.returncode in (1, 3), both
        assert not p.stderr or b"Traceback" not in p.stderr


def test_doctor_exit_status_rules(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "checks", lambda: [("a", True, "", "", 1)])
    assert doctor.run(None) == 0
    monkeypatch.setattr(doctor, "checks", lambda: [("gpu", False, "none", "fix", 3)])
    assert doctor.run(None) == 3
    monkeypatch.setattr(doctor, "checks", lambda: [("gpu", False, "", "f", 3),
                                                   ("duckdb", False, "", "f", 1)])
    assert doctor.run(None) == 1
    assert "problem  duckdb" in capsys.readouterr().out


def test_doctor_lines_and_verdicts_go_where_a_script_reads_them(monkeypatch, capsys):
    """The check lines and the good verdict on stdout; a failing verdict on stderr, after the
    lines that say why. A note is marked as a note, never as a problem."""
    monkeypatch.setattr(doctor, "checks", lambda: [("a", True, "fine", "", 1),
                                                   ("b", False, "odd", "look", 0)])
    assert doctor.run(None) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines()[-1] == "cuptiprof doctor: GPU profiling would work here"
    assert out.splitlines()[1].startswith("note     b") and "problem" not in out
    monkeypatch.setattr(doctor, "checks", lambda: [("GPU", False, "none", "fix", 3)])
    assert doctor.run(None) == 3
    out, err = capsys.readouterr()
    assert out.startswith("problem  GPU") and "would work" not in out
    assert err.startswith("cuptiprof doctor: GPU profiling would NOT work here (exit 3)")


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
    times; CUPTI held by another profiler (a GPU is there) and a missing package do not, and
    without a package profile() records nothing at all."""
    monkeypatch.setattr(doctor, "checks", lambda: [("python", True, "", "", 1)] + failing)
    status = doctor.run(None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("profile() still records host-side ranges" in err) is (status == 3), err
    assert ("`cuptiprof run` records a torch program's CPU op times instead (no CUDA GPU "
            "found)" in err) is cpu_ops, err


def _libcuda(monkeypatch, gpus, version=12040):
    """libcuda.so.1 answered by a stand-in seeing `gpus` devices; other libraries load as ever."""
    import ctypes

    real = ctypes.CDLL

    class Libcuda:
        def cuInit(self, flags):
            return 0

        def cuDeviceGetCount(self, n):
            n._obj.value = gpus
            return 0

        def cuDriverGetVersion(self, v):
            v._obj.value = version
            return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **k: Libcuda() if name == "libcuda.so.1"
                        else real(name, *a, **k))
    monkeypatch.delenv("CUPTIPROF_FAKE_CUPTI", raising=False)
    monkeypatch.setattr(doctor, "_path_pythons", lambda: [])
    monkeypatch.setattr(doctor, "_subscriber_check", lambda: ("CUPTI subscriber", True, "", "", 3))


def test_doctor_finds_the_gpus_run_uses_without_cuda_bindings(monkeypatch):
    """cuda-bindings missing on a machine with a driver and two GPUs: doctor said the driver
    could not be loaded (and, with it, no GPU) while `cuptiprof run` profiled the GPU it found
    through libcuda. The driver and GPU lines now say what the run will do, and a note says
    what the missing package costs."""
    from cuptiprof.run import launcher

    _libcuda(monkeypatch, 2)
    for m in ("cuda.bindings", "cuda.bindings.driver"):
        monkeypatch.setitem(sys.modules, m, None)   # its import fails, as when not installed
    got = {what: (ok, detail, code) for what, ok, detail, _, code in doctor.checks()}
    assert launcher.gpu_present()
    assert got["CUDA driver"] == (True, "CUDA 12.4", 3)
    assert got["GPU"] == (True, "2 visible", 3)
    ok, detail, code = got["cuda-bindings"]
    assert (ok, code) == (False, 0) and detail.startswith("not installed: the driver and GPUs")


def test_doctor_counts_gpus_as_run_does_whatever_cuda_bindings_says(monkeypatch):
    """libcuda, which `cuptiprof run` asks, sees no device while cuda-bindings says one: the GPU
    line fails as the run falls back to CPU ops (it followed cuda-bindings), with no note."""
    from types import ModuleType, SimpleNamespace

    from cuptiprof.run import launcher

    _libcuda(monkeypatch, 0)
    bindings = ModuleType("cuda.bindings")
    bindings.driver = SimpleNamespace(cuInit=lambda flags: (0,),
                                      cuDeviceGetCount=lambda: (0, 1),
                                      cuDriverGetVersion=lambda: (0, 12040))
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", bindings.driver)
    got = {what: (ok, detail) for what, ok, detail, _, _ in doctor.checks()}
    assert not launcher.gpu_present()
    assert got["CUDA driver"] == (True, "CUDA 12.4")
    assert got["GPU"] == (False, "no CUDA device visible")
    assert "cuda-bindings" not in got


def test_run_doctor_and_the_runs_row_ask_the_driver_through_one_module(monkeypatch):
    """`cuptiprof run` (whether to collect), doctor (its driver and GPU lines) and the runs row
    (cuda_driver_version) ask libcuda through cuptiprof.collect.libcuda: a driver it sees (or
    not) is seen (or not) by all three."""
    from cuptiprof.collect import device_info, libcuda
    from cuptiprof.run import launcher

    monkeypatch.delenv("CUPTIPROF_FAKE_CUPTI", raising=False)
    monkeypatch.setattr(doctor, "_path_pythons", lambda: [])
    monkeypatch.setattr(doctor, "_subscriber_check", lambda: ("CUPTI subscriber", True, "", "", 3))

    class Driver:
        def cuInit(self, flags):
            return 0

        def cuDeviceGetCount(self, n):
            n._obj.value = 3
            return 0

        def cuDriverGetVersion(self, v):
            v._obj.value = 12080
            return 0

    monkeypatch.setattr(libcuda, "_load", Driver)
    got = {what: (ok, detail) for what, ok, detail, _, _ in doctor.checks()}
    assert launcher.gpu_present() and libcuda.gpu_count() == 3
    assert libcuda.driver_version() == "12.8"
    assert got["CUDA driver"] == (True, "CUDA 12.8") and got["GPU"] == (True, "3 visible")

    monkeypatch.setattr(libcuda, "_load", lambda: None)   # no driver installed
    got = {what: (ok, detail) for what, ok, detail, _, _ in doctor.checks()}
    assert not launcher.gpu_present() and libcuda.driver_version() is None
    assert got["CUDA driver"] == (False, "libcuda.so.1 cannot be loaded") and "GPU" not in got


def test_gpu_check_version_probes_ask_the_driver_through_libcuda(monkeypatch, tmp_path):
    """The GPU check's versions (scripts/gpu-check.sh's versions stage, versions.json, and
    scripts/cupti_questions.py's) report the driver as the runs row does, through libcuda:
    a helper they named was removed once and the driver line went missing from both."""
    import importlib.util
    import json
    import os

    from cuptiprof.collect import libcuda

    root = ROOT
    spec = importlib.util.spec_from_file_location(
        "cupti_questions_probe", root / "scripts" / "cupti_questions.py")
    questions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(questions)

    class Driver:
        def cuDriverGetVersion(self, v):
            v._obj.value = 13000
            return 0

    monkeypatch.setattr(libcuda, "_load", Driver)
    assert questions.versions()["driver_api"] == "13.0"

    out = tmp_path / "out"
    env = dict(os.environ, DRY_RUN="1", STAGES="versions", OUT=str(out), PY=sys.executable,
               GPU_CHECK_WORK=str(tmp_path / "work"))
    r = subprocess.run(["bash", str(root / "scripts" / "gpu-check.sh")], env=env, cwd=root,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = json.loads((out / "versions.json").read_text())
    assert "cuptiprof_error" not in got, got
    assert "driver_api" in got and "cupti_version_row" in got


def _cupti_found(monkeypatch, lib):
    """cupti-python installed and its libcupti found at `lib` (whatever this machine holds)."""
    from cuptiprof.collect import device_info, nvtx_setup

    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda d: "12.4.0" if d == "cupti-python" else real(d))
    monkeypatch.setattr(nvtx_setup, "libcupti_path", lambda: str(lib))
    monkeypatch.setattr(device_info, "cupti_version", lambda: 24)


@pytest.mark.parametrize("gpus", [0, 1])
def test_doctor_claims_cupti_only_where_there_is_a_gpu(monkeypatch, tmp_path, gpus):
    """No GPU visible: the GPU line says so and CUPTI is not claimed (a second problem line for
    the same cause); with one, the subscriber check runs."""
    _libcuda(monkeypatch, gpus)
    _cupti_found(monkeypatch, tmp_path / "libcupti.so")
    got = [what for what, *_ in doctor.checks()]
    assert ("CUPTI subscriber" in got) is bool(gpus), got


def test_doctor_takes_a_link_to_its_libcupti_for_that_library(monkeypatch, tmp_path):
    """NVTX_INJECTION64_PATH naming a link to the libcupti cuptiprof uses is no other tool's
    injection; a different library is."""
    from cuptiprof.collect import nvtx_setup

    lib = tmp_path / "libcupti.so"
    lib.write_bytes(b"")
    (tmp_path / "link.so").symlink_to(lib)
    (tmp_path / "other.so").write_bytes(b"")
    _libcuda(monkeypatch, 1)
    _cupti_found(monkeypatch, lib)
    for env, ok in (("link.so", True), ("other.so", False)):
        monkeypatch.setenv(nvtx_setup.ENV, str(tmp_path / env))
        got = {what: (ok, detail) for what, ok, detail, _, _ in doctor.checks()}
        assert got["NVTX injection"][0] is ok, got["NVTX injection"]



def test_doctor_judges_another_libcupti_in_nvtx_injection_as_run_does(monkeypatch, tmp_path):
    """NVTX_INJECTION64_PATH naming another libcupti (a CUDA toolkit's, set in a shell
    profile): `cuptiprof run` puts its own in its place and records the ranges, where doctor
    said a problem, 'another tool's injection holds CUPTI', and exit 3. Another tool's library
    (Nsight Systems') is left in place by run, and stays a problem."""
    from cuptiprof.collect import nvtx_setup

    lib = tmp_path / "ours" / "libcupti.so.12"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    toolkit = tmp_path / "libcupti.so"
    nsys = tmp_path / "libToolsInjection64.so"
    _libcuda(monkeypatch, 1)
    _cupti_found(monkeypatch, lib)
    for env, ok in ((toolkit, True), (nsys, False)):
        monkeypatch.setenv(nvtx_setup.ENV, str(env))
        ran, _ = nvtx_setup.prepare()   # what run does with it
        monkeypatch.setenv(nvtx_setup.ENV, str(env))
        (got, detail), = [(o, d) for what, o, d, _, _ in doctor.checks() if what == "NVTX injection"]
        assert got is ok is ran, detail
        assert str(env) in detail

@pytest.mark.parametrize("mod", ["duckdb", "pyarrow", "numpy", "msgspec"])
def test_doctor_says_a_required_package_that_cannot_be_imported(monkeypatch, mod):
    """Only duckdb was checked, and by its metadata alone: a pyarrow that cannot be imported (or
    a broken duckdb) read as all ok, exit 3 for the missing GPU instead of 1."""
    monkeypatch.setitem(sys.modules, mod, None)   # `import mod` now raises ImportError
    lines = {what: (ok, detail, code) for what, ok, detail, fix, code in doctor.checks()}
    ok, detail, code = lines[mod]
    assert not ok and code == 1 and "cannot be imported" in detail


def test_doctor_says_a_required_package_that_is_too_old(monkeypatch):
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda d: "1.0.0" if d == "duckdb" else real(d))
    ok, detail, fix = next((ok, detail, fix) for what, ok, detail, fix, code in doctor.checks()
                           if what == "duckdb")
    assert not ok and "1.0.0" in detail and "1.1" in detail and "pip install -U duckdb" in fix


def test_doctor_checks_every_package_pyproject_requires():
    import re
    text = (ROOT / "pyproject.toml").read_text()
    deps = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    wanted = {m.group(1): m.group(2) for m in re.finditer(r'^\s*"([\w-]+)>=([\d.]+)"', deps, re.M)}
    assert wanted and {d: ".".join(map(str, v)) for d, v in doctor.REQUIRED.items()} == wanted


@pytest.mark.parametrize("mod, argv", [
    ("duckdb", ["sql", "{db}", "SELECT 1"]),            # imported by the command's module
    ("duckdb", ["--help"]),
    ("pyarrow", ["compare", "{db}", "{db2}"]),          # imported when the command runs
    ("pyarrow", ["report", "{db}", "--html", "{html}"]),
])
def test_a_missing_required_package_is_one_line_naming_it_not_a_traceback(tmp_path, mod, argv):
    """A required package that is missing (pip install --no-deps, another venv's python) is
    doctor's problem line for every command: one line naming the package and its install,
    exit 1, no traceback."""
    from cuptiprof.synthetic import write_synthetic
    db, db2 = write_synthetic(tmp_path / "a.duckdb", steps=2, kernels_per_step=5), \
        write_synthetic(tmp_path / "b.duckdb", steps=2, kernels_per_step=5, seed=1)
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / f"{mod}.py").write_text(f"raise ModuleNotFoundError({f'No module named {mod!r}'!r}, name={mod!r})\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub), str(ROOT)])}
    args = [a.format(db=db, db2=db2, html=tmp_path / "r.html") for a in argv]
    r = subprocess.run([sys.executable, "-m", "cuptiprof", *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    line, = r.stderr.splitlines()
    assert f"package {mod}" in line and "is not installed" in line and f"pip install -U {mod}" in line
    assert not (tmp_path / "r.html").exists()
