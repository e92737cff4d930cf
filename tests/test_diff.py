"""`cuptiprof diff BASE NEW --fail-above PCT`: exit 0 / 1 / 2 and the noise rule."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from cuptiprof.analyse.diff import diff, parse_number
from cuptiprof.cli import main
from cuptiprof.errors import UsageError
from cuptiprof.store.writer import RunInfo, Writer
from test_compare import (ADD, BASE_OPS, FLASH, GEMM_H100, SOFTMAX, _kernels_only_run, import_trace,
                          make_run)


def statuses(res):
    return {(r["item_type"], r["item"]): r["status"] for r in res.items.to_pylist()}


def test_same_program_with_noise_passes(tmp_path, capsys):
    a = make_run(tmp_path / "a.duckdb", noise=0.02, seed=1)
    b = make_run(tmp_path / "b.duckdb", noise=0.02, seed=2)
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 0
    assert "no regression" in capsys.readouterr().out


def test_op_made_2x_slower_fails_and_is_listed(tmp_path, capsys):
    a = make_run(tmp_path / "a.duckdb", noise=0.01, seed=1)
    ops = dict(BASE_OPS)
    ops[SOFTMAX] = (200.0, 2, "aten::softmax")
    b = make_run(tmp_path / "b.duckdb", ops=ops, noise=0.01, seed=2)
    assert main(["diff", str(a), str(b), "--fail-above", "10%"]) == 1
    cap = capsys.readouterr()
    assert "softmax_warp_forward" in cap.out and "regression" in cap.err
    assert main(["diff", str(a), str(b), "--fail-above", "5", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    regs = {(r["item_type"], r["item"]) for r in doc["regressions"]}
    assert ("op", SOFTMAX) in regs and ("kind", "kernel") in regs and ("step", "gpu window") in regs
    assert ("op", GEMM_H100) not in regs and ("op", ADD) not in regs
    soft = next(r for r in doc["regressions"] if r["item"] == SOFTMAX)
    assert soft["delta_pct"] == pytest.approx(100, abs=5)
    # a threshold above the slowdown passes; so does ignoring slowdowns under 0.5 ms per step
    assert main(["diff", str(a), str(b), "--fail-above", "150"]) == 0
    assert main(["diff", str(a), str(b), "--fail-above", "10", "--min-ms", "0.5"]) == 0
    # --by family: the same regression under the family key
    res = diff(a, b, 10, by="family")
    assert statuses(res)[("op", "softmax")] == "regression"


def test_noise_band_hides_a_slowdown_within_the_step_spread(tmp_path):
    ops = dict(BASE_OPS)
    ops[SOFTMAX] = (115.0, 2, "aten::softmax")  # 15% slower
    quiet_a = make_run(tmp_path / "qa.duckdb", noise=0.005, seed=1, steps=7)
    quiet_b = make_run(tmp_path / "qb.duckdb", ops=ops, noise=0.005, seed=2, steps=7)
    noisy_a = make_run(tmp_path / "na.duckdb", noise=0.25, seed=3, steps=7)
    noisy_b = make_run(tmp_path / "nb.duckdb", ops=ops, noise=0.25, seed=4, steps=7)
    quiet = diff(quiet_a, quiet_b, 5)
    noisy = diff(noisy_a, noisy_b, 5)
    assert statuses(quiet)[("op", SOFTMAX)] == "regression"
    assert statuses(noisy)[("op", SOFTMAX)] != "regression"
    row = next(r for r in noisy.items.to_pylist() if r["item"] == SOFTMAX)
    assert row["noise_ms"] > 0.05 and row["allowed_ms"] == pytest.approx(
        row["base_ms"] * 0.05 + row["noise_ms"])


def test_copy_moved_direction_and_new_family_are_listed_not_failed(tmp_path):
    a = make_run(tmp_path / "a.duckdb", seed=1)
    ops = dict(BASE_OPS)
    ops[FLASH] = (1.0, 1, "aten::_flash_attention_forward")
    b = make_run(tmp_path / "b.duckdb", ops=ops, copies=(("DtoH", 8 << 20, 400.0),), seed=1)
    res = diff(a, b, 5, min_ms=0.01)
    st = statuses(res)
    assert st[("kind", "memcpy HtoD")] == "gone" and st[("kind", "memcpy DtoH")] == "new"
    assert st[("op", FLASH)] == "new"
    assert not res.failed
    # an item of one file still shows that file's noise, and a gone one the allowance it had
    rows = {r["item"]: r for r in res.items.to_pylist()}
    assert rows["memcpy DtoH"]["noise_ms"] == rows["memcpy HtoD"]["noise_ms"] == 0
    assert rows["memcpy HtoD"]["allowed_ms"] == pytest.approx(0.4 * 0.05)
    assert rows["memcpy DtoH"]["allowed_ms"] is None   # no BASE time, no allowance on it
    # and says which key matched it, as an item of both files does
    assert rows[FLASH]["key_type"] == rows["Memcpy HtoD"]["key_type"] == "name"


def test_usage_errors_exit_2(tmp_path, capsys):
    a = make_run(tmp_path / "a.duckdb")
    b = make_run(tmp_path / "b.duckdb", seed=3)
    for bad in ("abc", "5x", "", "-3"):
        assert main(["diff", str(a), str(b), f"--fail-above={bad}"]) == 2
        err = capsys.readouterr().err
        assert "--fail-above" in err and "Traceback" not in err and err.count("\n") == 1
    assert main(["diff", str(a), str(b), "--fail-above", "5", "--min-ms", "soon"]) == 2
    assert "--min-ms" in capsys.readouterr().err
    # numbers past a float's range are infinity: a gate that could never fail
    for opt, val in (("--fail-above", "1e400"), ("--fail-above", "1e400%"), ("--sigmas", "1e400"),
                     ("--min-ms", "1e999")):
        args = ["--fail-above", "5"] if opt != "--fail-above" else []
        assert main(["diff", str(a), str(b), *args, opt, val]) == 2
        err = capsys.readouterr().err
        assert f"{opt} {val!r}: too large" in err and err.count("\n") == 1 and "Traceback" not in err
    # finite but so large that no slowdown could fail the gate: refused, the bound named
    for opt, val, most in (("--sigmas", "1e308", "10"), ("--sigmas", "10.5", "10"),
                           ("--fail-above", "1e308", "1000"), ("--fail-above", "1001%", "1000"),
                           ("--min-ms", "1e300", "3600000")):
        args = ["--fail-above", "5"] if opt != "--fail-above" else []
        assert main(["diff", str(a), str(b), *args, opt, val]) == 2
        err = capsys.readouterr().err
        assert err == (f"cuptiprof: error: {opt} {val!r}: too large (at most {most}: a larger value "
                       "lets no slowdown fail the gate)\n")
    # infinity written as such is a number, only not a usable one: said so, the bound named
    for opt, val, most in (("--sigmas", "inf", "10"), ("--sigmas", "Infinity", "10"),
                           ("--fail-above", "inf%", "1000"), ("--min-ms", "+infms", "3600000")):
        args = ["--fail-above", "5"] if opt != "--fail-above" else []
        assert main(["diff", str(a), str(b), *args, opt, val]) == 2
        err = capsys.readouterr().err
        assert err == (f"cuptiprof: error: {opt} {val!r}: infinite (at most {most}: a larger value "
                       "lets no slowdown fail the gate)\n")
    assert main(["diff", str(a), str(b), "--fail-above=-inf"]) == 2
    assert capsys.readouterr().err == "cuptiprof: error: --fail-above '-inf': must not be negative\n"
    for opt, val in (("--sigmas", "10"), ("--fail-above", "1000"), ("--min-ms", "3600000")):
        args = ["--fail-above", "5"] if opt != "--fail-above" else []
        assert main(["diff", str(a), str(b), *args, opt, val]) == 0   # the bounds themselves
        capsys.readouterr()
    for kw in ({"sigmas": 1e308}, {"sigmas": float("nan")}, {"min_ms": -1.0}, {"fail_above_pct": 2e3}):
        with pytest.raises(UsageError, match=next(iter(kw))):   # the Python API checks them too
            diff(a, b, **{"fail_above_pct": 5, **kw})
    with pytest.raises(UsageError, match="sigmas 'inf': infinite"):
        diff(a, b, 5, sigmas=float("inf"))
    with pytest.raises(UsageError, match=r"fail_above_pct '2000.0': too large \(at most 1000:"):
        diff(a, b, 2e3)   # a finite number past the bound is too large, not infinite
    assert main(["diff", str(a), str(a), "--fail-above", "5"]) == 2
    assert "same file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # --fail-above is required (argparse, one line)
        main(["diff", str(a), str(b)])
    assert exc.value.code == 2 and "--fail-above" in capsys.readouterr().err
    nosteps = tmp_path / "nosteps.duckdb"
    with Writer(nosteps, RunInfo(source="synthetic")) as w:
        w.append({"kernels": {"start_ns": [0], "end_ns": [500], "name": [ADD]}})
    assert main(["diff", str(a), str(nosteps), "--fail-above", "5"]) == 2
    err = capsys.readouterr().err
    # how to mark steps: run's --steps is a count of them, it marks none
    assert "no recorded steps" in err and "run --step-range or --step-fn" in err
    other = make_run(tmp_path / "v2.duckdb")
    con = duckdb.connect(str(other))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    assert main(["diff", str(a), str(other), "--fail-above", "5"]) == 2
    assert "upgrade cuptiprof" in capsys.readouterr().err
    assert main(["diff", str(a), str(tmp_path / "nope.duckdb"), "--fail-above", "5"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_parse_number():
    assert parse_number("5", "--x") == 5.0 and parse_number("2.5%", "--x", unit="%") == 2.5
    with pytest.raises(UsageError):
        parse_number("5%", "--x")
    with pytest.raises(UsageError):
        parse_number("nan", "--x")
    # --min-ms takes its unit written out, as --fail-above takes '%'; another unit is refused
    assert parse_number("0.5ms", "--min-ms", unit="ms") == parse_number(" 0.5 ms", "--min-ms", unit="ms") == 0.5
    with pytest.raises(UsageError, match="expected e.g. --min-ms 5 or 5ms"):
        parse_number("0.5s", "--min-ms", unit="ms")
    # float() and \d read every script's digits: an Arabic-Indic 3 was a 3% gate
    for text in ("\u0663", "\uff15%", "1\u0660.5", "1_0"):
        with pytest.raises(UsageError, match=r"not a number in ASCII digits \(expected e.g. "
                                             r"--fail-above 5 or 5%\)"):
            parse_number(text, "--fail-above", unit="%")


def test_negative_zero_settings_read_as_zero(tmp_path, capsys):
    """--fail-above -0 is 0 (not negative): the CI log and the JSON say 0, not -0."""
    assert math.copysign(1, parse_number("-0", "--fail-above", unit="%")) == 1
    a = make_run(tmp_path / "a.duckdb", seed=1)
    b = make_run(tmp_path / "b.duckdb", seed=1)
    main(["diff", str(a), str(b), "--fail-above", "-0", "--sigmas", "-0.0", "--min-ms=-0ms"])
    assert "fail above 0% + 0 robust sigmas" in capsys.readouterr().out
    main(["diff", str(a), str(b), "--fail-above", "-0", "--sigmas", "-0", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert [math.copysign(1, doc[k]) for k in ("fail_above_pct", "sigmas")] == [1, 1]


def test_real_trace_against_a_copy_of_itself_passes(shared_traces, tmp_path, capsys):
    src = shared_traces / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    a = import_trace(src, tmp_path / "a.duckdb")
    b = tmp_path / "b.duckdb"
    shutil.copyfile(a, b)
    assert main(["diff", str(a), str(b), "--fail-above", "1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"]["base"] >= 5 and not doc["regressions"]
    kinds = {r["item"] for r in doc["items"] if r["item_type"] == "kind"}
    assert {"kernel", "memcpy DtoD", "memset", "idle"} <= kinds


def test_new_file_whose_every_step_ended_early_is_refused_not_passed(tmp_path, capsys):
    """A run that crashed in each of its steps leaves no complete step: the gate must not read
    the empty side as 'no regression' (exit 0)."""
    a = make_run(tmp_path / "a.duckdb", steps=2)
    b = make_run(tmp_path / "b.duckdb", steps=2, seed=3)
    with duckdb.connect(str(b)) as con:
        run_id, pid = con.execute("SELECT run_id, pid FROM kernels LIMIT 1").fetchone()
        for step in con.execute("SELECT DISTINCT step FROM kernels").fetchall():
            con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) VALUES "
                        "(?, ?, 'step_incomplete', ?, 'ended early by RuntimeError')",
                        [run_id, pid, str(step[0])])
    for cmd in (["diff", str(a), str(b), "--fail-above", "5"], ["compare", str(a), str(b)]):
        assert main(cmd) == 2
        out, err = capsys.readouterr()
        assert "no regression" not in out
        assert err.startswith("cuptiprof: error: ") and err.count("\n") == 1
        assert "every recorded step (2) was ended early" in err


def _cpu_op_run(path, steps=5):
    """A run recorded without a GPU: torch.profiler's CPU ops as kernels on device -1."""
    k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
    t = 1_000_000
    for s in range(steps):
        for op in ("aten::addmm", "aten::gelu"):
            for c, v in (("start_ns", t), ("end_ns", t + 400_000), ("step", s), ("name", op),
                         ("stream_id", 1), ("device_id", -1)):
                k[c].append(v)
            t += 500_000
    with Writer(path, RunInfo(source="cpu")) as w:
        w.append({"kernels": k, "devices": {"device_id": [-1], "kind": ["cpu"], "name": ["AMD EPYC"],
                                            "source": ["torch"]}})
    return path


def test_gpu_run_against_a_run_without_a_gpu_is_refused_by_diff_and_noted_by_compare(tmp_path, capsys):
    """A CI machine that lost its GPU records CPU op times: gating them against GPU kernel times
    would pass or fail by accident."""
    gpu = make_run(tmp_path / "gpu.duckdb")
    cpu = _cpu_op_run(tmp_path / "cpu.duckdb")
    assert main(["diff", str(gpu), str(cpu), "--fail-above", "5"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"cuptiprof: error: {cpu} holds CPU op times (recorded without a GPU)")
    assert main(["diff", str(cpu), str(gpu), "--fail-above", "5"]) == 2   # either way round
    assert capsys.readouterr().err.startswith(f"cuptiprof: error: {cpu} holds CPU op times (recorded "
                                              f"without a GPU) and {gpu} GPU work")
    assert main(["compare", str(gpu), str(cpu)]) == 0
    assert "note: B recorded CPU op times (no GPU)" in capsys.readouterr().out
    # two runs without a GPU are alike: the gate runs, and compare has nothing to note
    cpu2 = _cpu_op_run(tmp_path / "cpu2.duckdb")
    assert main(["diff", str(cpu), str(cpu2), "--fail-above", "5"]) == 0
    assert "no regression" in capsys.readouterr().out
    assert main(["compare", str(cpu), str(cpu2)]) == 0
    assert "CPU op times" not in capsys.readouterr().out


def test_a_merge_of_gpu_work_and_cpu_op_times_is_refused_by_diff_and_noted_by_compare(tmp_path, capsys):
    """`cuptiprof merge` of a GPU run and a run without a GPU pools CPU op times with kernel
    times by step number: a gate over that sum passes or fails by accident, as one over CPU op
    times against GPU work would."""
    gpu = make_run(tmp_path / "gpu.duckdb")
    cpu = _cpu_op_run(tmp_path / "cpu.duckdb")
    mixed = tmp_path / "mixed.duckdb"
    assert main(["merge", str(gpu), str(cpu), "-o", str(mixed)]) == 0
    capsys.readouterr()
    for pair in ((gpu, mixed), (mixed, gpu)):
        assert main(["diff", *map(str, pair), "--fail-above", "5"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert err.startswith(f"cuptiprof: error: {mixed} holds both CPU op times (recorded without a "
                              "GPU) and GPU work")
    assert main(["compare", str(gpu), str(mixed)]) == 0
    assert "note: B holds both CPU op times (no GPU) and GPU work" in capsys.readouterr().out


def test_a_single_step_is_named_as_unknown_noise(tmp_path, capsys):
    """The MAD of one step is 0: the gate then has no noise band at all, and says so."""
    a = make_run(tmp_path / "a.duckdb", steps=1, seed=1)
    b = make_run(tmp_path / "b.duckdb", steps=3, seed=2)
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cuptiprof diff: BASE {a} (1 step) -> NEW {b} (3 steps);")
    # the notes call the files BASE and NEW, as diff's output does (A and B are compare's names)
    assert ("note: BASE holds a single step: its step-to-step noise is unknown and counts as 0, so "
            "diff's band is PCT alone") in out
    assert main(["diff", str(b), str(make_run(tmp_path / "c.duckdb", steps=3, seed=3)),
                 "--fail-above", "5"]) == 0
    assert "single step" not in capsys.readouterr().out


def test_a_copy_slowdown_is_one_regression_not_a_kind_and_an_op(tmp_path, capsys):
    """Every HtoD copy is the op 'Memcpy HtoD': kind and op are the same rows, and one slower
    copy is one regression, listed as the op; where the kind spans several keys (--by range: the
    copies and the memset share one key) it is another view and keeps its own verdict."""
    a = make_run(tmp_path / "a.duckdb", noise=0.01, seed=1)
    b = make_run(tmp_path / "b.duckdb", copies=(("HtoD", 8 << 20, 800.0),), noise=0.01, seed=2)
    for by in ("op", "family"):
        res = diff(a, b, 5, by=by)
        st = statuses(res)
        assert st[("op", "Memcpy HtoD")] == "regression" and st[("kind", "memcpy HtoD")] == "duplicate"
        assert [(r["item_type"], r["item"]) for r in res.regressions] == [("op", "Memcpy HtoD")]
    res = diff(a, b, 5, by="range")
    assert statuses(res)[("kind", "memcpy HtoD")] == "regression"
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 1
    cap = capsys.readouterr()
    assert "1 regression\n" in cap.err and "memcpy HtoD" not in cap.out and "Memcpy HtoD" in cap.out


def test_real_trace_copy_and_memset_regress_once(shared_traces, tmp_path):
    """ResNet-50 with 4 data-loader workers against 0: the host-to-device copies and the memsets
    got slower; each is one regression."""
    rn = shared_traces / "kineto-tbplugin"
    a = import_trace(rn / "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", tmp_path / "rn0.duckdb")
    b = import_trace(rn / "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz", tmp_path / "rn4.duckdb")
    res = diff(a, b, 5)
    regs = [(r["item_type"], r["item"]) for r in res.regressions]
    assert ("op", "Memcpy HtoD") in regs and ("op", "Memset") in regs
    assert not [r for r in regs if r[0] == "kind"]
    assert statuses(res)[("kind", "memcpy HtoD")] == statuses(res)[("kind", "memset")] == "duplicate"
    assert len({(r["base_ms"], r["new_ms"]) for r in res.regressions}) == len(regs)


def test_idle_rising_from_0_is_a_regression(tmp_path, capsys):
    """BASE keeps the GPU busy end to end (no idle); NEW leaves gaps between kernels: idle is a
    metric, and its rise from 0 beyond the allowance fails the gate like any other."""
    a = make_run(tmp_path / "a.duckdb", gap_us=0.0, seed=1)
    b = make_run(tmp_path / "b.duckdb", gap_us=20.0, seed=1)
    res = diff(a, b, 5)
    idle = next(r for r in res.items.to_pylist() if r["item"] == "idle")
    assert idle["base_ms"] == 0 and idle["new_ms"] == pytest.approx(11 * 0.02 + 0.02, abs=0.01)
    assert idle["status"] == "regression" and res.failed
    # the step's GPU window spans the gaps, as idle does (its busy time stays the same)
    window = next(r for r in res.items.to_pylist() if r["item"] == "gpu window")
    assert window["delta_ms"] == pytest.approx(idle["new_ms"], abs=0.01) and window["status"] == "regression"
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 1
    assert "idle" in capsys.readouterr().out
    # below --min-ms it is only slower; the other way round, idle fell to 0
    assert statuses(diff(a, b, 5, min_ms=1.0))[("kind", "idle")] == "slower"
    assert main(["diff", str(b), str(a), "--fail-above", "5"]) == 0


def test_regression_exit_survives_a_reader_that_went_away(tmp_path):
    """`cuptiprof diff ... | head` in a CI step under pipefail: the reader closing the pipe must
    not turn a found regression into exit 0 (the gate would pass)."""
    a = make_run(tmp_path / "a.duckdb", noise=0.01, seed=1)
    ops = dict(BASE_OPS)
    ops[SOFTMAX] = (200.0, 2, "aten::softmax")
    b = make_run(tmp_path / "b.duckdb", ops=ops, noise=0.01, seed=2)
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for fmt, files, code in (("table", (a, b), 1), ("json", (a, b), 1), ("csv", (a, b), 1),
                             ("markdown", (a, b), 1), ("table", (a, a.with_name("c.duckdb")), 0)):
        if not files[1].exists():
            shutil.copyfile(a, files[1])
        r, w = os.pipe()
        os.close(r)   # the reader is gone before the first byte: every write fails with EPIPE
        try:
            p = subprocess.run([sys.executable, "-m", "cuptiprof", "diff", *map(str, files),
                                "--fail-above", "5", "--format", fmt, "--all"],
                               stdout=w, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
        finally:
            os.close(w)
        assert p.returncode == code, (fmt, p.stderr)
        assert "Traceback" not in p.stderr and "Exception" not in p.stderr
        assert ("regression" in p.stderr) == bool(code)
    # `2>&1 | head -1`: stderr goes to the same closed pipe (the --fail-above hint and the
    # regression count are written there): the verdict still holds, and nothing is printed
    # ... and a misuse (the same file twice) stays exit 2, not 1 (a regression) for want of a
    # reader of its error line
    for fmt, threshold, files, code in (("table", "5", (a, b), 1), ("csv", "5", (a, b), 1),
                                        ("table", "0.5", (a, b), 1), ("table", "5", (a, a), 2)):
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([sys.executable, "-m", "cuptiprof", "diff", *map(str, files),
                                "--fail-above", threshold, "--format", fmt],
                               stdout=w, stderr=w, env=env, timeout=120)
        finally:
            os.close(w)
        assert p.returncode == code, (fmt, threshold, files)


def test_csv_notes_reach_stderr_when_the_reader_went_away(tmp_path):
    """`cuptiprof diff ... --format csv | head`: the rows' reader is gone, but the notes that
    qualify the verdict (another GPU) still belong on stderr, where a CI log shows them."""
    a = make_run(tmp_path / "a.duckdb", seed=1)
    other = make_run(tmp_path / "a100.duckdb", seed=2, device="NVIDIA A100-SXM4-80GB")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "cuptiprof", "diff", str(a), str(other),
                            "--fail-above", "5", "--format", "csv", "--all"],
                           stdout=w, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 0, p.stderr
    assert "cuptiprof diff: note: BASE ran on NVIDIA H100 80GB HBM3 and NEW on" in p.stderr


def _quantized_run(path, softmax_us):
    """A run from a trace with microsecond timestamps: per step one 500 us GEMM and one softmax
    of softmax_us[step] whole microseconds (None: the step launched no softmax)."""
    k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
    t = 1_000_000
    for s, us in enumerate(softmax_us):
        for name, dur in ((GEMM_H100, 500_000), (SOFTMAX, None if us is None else us * 1000)):
            if dur is None:
                continue
            for c, v in (("start_ns", t), ("end_ns", t + dur), ("step", s), ("name", name),
                         ("stream_id", 7), ("device_id", 0)):
                k[c].append(v)
            t += dur
        t += 10_000
    with Writer(path, RunInfo(source="kineto")) as w:
        w.append({"kernels": k})
    return path


def test_a_median_flipping_between_two_common_step_times_is_noise(tmp_path, capsys):
    """Two runs of one program traced at microsecond resolution: the softmax takes 7 or 8 us,
    7 in most of BASE's steps and 8 in most of NEW's. Over half the steps share a value, so the
    MAD of each file is 0 and the median's flip read as a 14% regression with no noise band:
    NEW's median is within BASE's upper quartile, so it is noise. A real 2x slowdown still fails,
    and --sigmas 0 (no noise judgement) still fails on any slowdown beyond PCT."""
    a = _quantized_run(tmp_path / "a.duckdb", [7, 7, 8, 7, 8, 7, 7, 8, 7, 8])
    b = _quantized_run(tmp_path / "b.duckdb", [8, 8, 7, 8, 7, 8, 8, 7, 8, 7])
    res = diff(a, b, 5)
    row = next(r for r in res.items.to_pylist() if r["item"] == SOFTMAX)
    assert (row["base_ms"], row["new_ms"]) == (0.007, 0.008)
    assert row["status"] == "slower" and not res.failed
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 0
    assert "no regression" in capsys.readouterr().out
    slow = _quantized_run(tmp_path / "slow.duckdb", [15, 14, 15, 14, 14, 15, 14, 15, 14, 14])
    assert statuses(diff(a, slow, 5))[("op", SOFTMAX)] == "regression"
    assert statuses(diff(a, b, 5, sigmas=0))[("op", SOFTMAX)] == "regression"


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_the_other_gpu_note_strips_line_breaks_and_terminal_escapes(tmp_path, capsys, fmt):
    """GPU names are read from the files: the note naming them is one line, and no escape in
    them reaches the terminal (stdout, or stderr for csv)."""
    from test_compare import _odd_text_run
    a = _odd_text_run(tmp_path / "a.duckdb", "a", "GPU\x1b[2J\nA")
    b = _odd_text_run(tmp_path / "b.duckdb", "b", "GPU B")
    assert main(["diff", str(a), str(b), "--fail-above", "5", "--format", fmt]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    esc = "\\" if fmt == "markdown" else ""
    assert f"note: BASE ran on GPU{esc}[2J A and NEW on GPU B: a gate" in (err if fmt == "csv" else out)


def test_runs_on_another_gpu_or_that_did_not_complete_are_named(tmp_path, capsys):
    """A CI pool with mixed GPUs, or a NEW run whose program crashed after a few steps: the
    verdict rests on something other than the change, and the output says so."""
    a = make_run(tmp_path / "a.duckdb", seed=1)
    other = make_run(tmp_path / "a100.duckdb", seed=2, device="NVIDIA A100-SXM4-80GB")
    assert main(["diff", str(a), str(other), "--fail-above", "5", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    notes = doc["notes"]
    assert doc["regressed"] is False and doc["regressions"] == []   # a note is no regression
    assert ("note: BASE ran on NVIDIA H100 80GB HBM3 and NEW on NVIDIA A100-SXM4-80GB: a gate "
            "compares runs on the same GPU (`cuptiprof compare --by family` compares GPUs)") in notes
    crashed = make_run(tmp_path / "crashed.duckdb", seed=3, steps=2)
    with duckdb.connect(str(crashed)) as con:
        con.execute("UPDATE runs SET status = 'failed'")
    assert main(["diff", str(a), str(crashed), "--fail-above", "5"]) == 0
    out = capsys.readouterr().out
    assert ("note: NEW (crashed.duckdb) is a run that did not complete (failed); only its 2 "
            "complete steps are compared") in out
    assert "BASE ran on" not in out
    with duckdb.connect(str(crashed)) as con:   # one step left: said in the singular
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, detail) SELECT run_id, pid, "
                    "'step_incomplete', '2', 'ended early by RuntimeError' FROM kernels LIMIT 1")
    assert main(["diff", str(a), str(crashed), "--fail-above", "5"]) in (0, 1)
    assert "only its 1 complete step is compared" in capsys.readouterr().out
    assert ("note: BASE (crashed.duckdb) is a run that did not complete (failed); only its 1 complete "
            "step is compared") in diff(crashed, a, 5).notes   # a BASE that crashed is named too
    with duckdb.connect(str(crashed)) as con:   # stopped by a signal, or its writer died: named too
        con.execute("UPDATE runs SET status = 'interrupted'")
    assert any("did not complete (interrupted)" in n for n in diff(a, crashed, 5).notes)
    # a file that lists no GPU (a trace without device records) is no other GPU, as NEW or as BASE
    q = _quantized_run(tmp_path / "q.duckdb", [7] * 5)
    assert main(["diff", str(a), str(q), "--fail-above", "5", "--format", "json"]) in (0, 1)
    assert not [n for n in json.loads(capsys.readouterr().out)["notes"] if "ran on" in n]
    assert not [n for n in diff(q, a, 5).notes if "ran on" in n]
    assert main(["diff", str(a), str(make_run(tmp_path / "b.duckdb", seed=4)), "--fail-above", "5"]) == 0
    assert "note:" not in capsys.readouterr().out
    # CSV holds only the rows: the notes go to stderr, where a CI log still shows them
    assert main(["diff", str(a), str(other), "--fail-above", "5", "--format", "csv"]) == 0
    got = capsys.readouterr()
    assert "note:" not in got.out and got.out.startswith("item_type,")
    assert "cuptiprof diff: note: BASE ran on NVIDIA H100 80GB HBM3 and NEW on" in got.err


def test_same_file_through_a_symlink_is_named_in_the_order_given(tmp_path, capsys):
    a = make_run(tmp_path / "r0.duckdb", noise=0.02, seed=1)
    link = tmp_path / "link_to_r0.duckdb"
    link.symlink_to(a)
    assert main(["diff", str(a), str(link), "--fail-above", "5"]) == 2
    assert capsys.readouterr().err.startswith(f"cuptiprof: error: {a} and {link} are the same file")


@pytest.mark.parametrize("value, hint", [("0.05", True), (".5", True), ("0.05%", False),
                                         ("0.05% ", False), ("0", False), ("1", False),
                                         ("5", False)])
def test_a_fail_above_below_one_without_a_percent_sign_gets_a_hint(tmp_path, capsys, value, hint):
    """0.05 is 0.05% (it was probably meant as 5%): the gate keeps that meaning, and a line on
    stderr says how 5% is written, so that a CI log shows it."""
    a = make_run(tmp_path / "a.duckdb", noise=0.02, seed=1)
    b = make_run(tmp_path / "b.duckdb", noise=0.02, seed=2)
    code = main(["diff", str(a), str(b), "--fail-above", value, "--format", "json"])
    cap = capsys.readouterr()
    assert json.loads(cap.out)["fail_above_pct"] == float(value.strip().rstrip("%"))
    hints = [ln for ln in cap.err.splitlines() if "fraction" in ln]
    assert len(hints) == int(hint), cap.err
    if hint:
        assert hints[0] == (f"cuptiprof diff: note: --fail-above {value} is {value}% (a percentage, "
                            f"not a fraction); for {float(value) * 100:g}% write --fail-above "
                            f"{float(value) * 100:g}")
    assert code in (0, 1)


def test_the_gate_fails_beyond_the_threshold_not_at_it(tmp_path):
    """Without noise (every step the same) an op exactly PCT slower, or exactly --min-ms
    slower, is judged by the documented rule: `new - base > base * PCT / 100` passes at the
    threshold itself, `new - base >= MIN_MS` fails at MIN_MS; exactly PCT faster is 'same'."""
    def run(name, softmax_us):
        ops = dict(BASE_OPS)
        ops[SOFTMAX] = (softmax_us, 2, "aten::softmax")
        return make_run(tmp_path / name, ops=ops, copies=(), seed=1)

    a, slower, faster = run("a.duckdb", 250.0), run("s.duckdb", 312.5), run("f.duckdb", 200.0)
    at = next(r for r in diff(a, slower, 25).items.to_pylist() if r["item"] == SOFTMAX)
    assert (at["base_ms"], at["new_ms"], at["noise_ms"]) == (0.5, 0.625, 0.0)
    assert (at["delta_ms"], at["delta_pct"], at["allowed_ms"]) == (0.125, 25.0, 0.125)
    assert at["status"] == "slower"
    assert statuses(diff(a, slower, 24.9))[("op", SOFTMAX)] == "regression"
    # --min-ms: a slowdown of exactly MIN_MS per step counts; a larger MIN_MS passes it
    assert statuses(diff(a, slower, 10, min_ms=0.125))[("op", SOFTMAX)] == "regression"
    assert statuses(diff(a, slower, 10, min_ms=0.126))[("op", SOFTMAX)] == "slower"
    # faster: beyond the allowance only (0.1 ms is 20% of 0.5 ms)
    assert statuses(diff(a, faster, 20))[("op", SOFTMAX)] == "same"
    assert statuses(diff(a, faster, 19.9))[("op", SOFTMAX)] == "faster"
    # --min-ms holds for speed-ups too: 0.1 ms faster per step is below 0.2 ms
    assert statuses(diff(a, faster, 19.9, min_ms=0.2))[("op", SOFTMAX)] == "same"


def test_the_noise_band_adds_both_files_step_to_step_noise(tmp_path):
    """BASE's softmax takes 8 to 12 us per step (MAD 1 us), NEW's 16 to 24 us (MAD 2 us): the
    band is 3 x 1.4826 x sqrt(1^2 + 2^2) us wide, on top of PCT, and a 10 us slowdown inside it
    is 'slower'; with --sigmas 0 (no band) it fails."""
    a = _quantized_run(tmp_path / "a.duckdb", [8, 9, 10, 11, 12])
    b = _quantized_run(tmp_path / "b.duckdb", [16, 18, 20, 22, 24])
    res = diff(a, b, 5)
    row = next(r for r in res.items.to_pylist() if r["item"] == SOFTMAX)
    assert (row["base_ms"], row["new_ms"]) == (0.01, 0.02)
    assert row["noise_ms"] == pytest.approx(3 * 1.4826 * (0.001 ** 2 + 0.002 ** 2) ** 0.5)
    assert row["allowed_ms"] == pytest.approx(0.01 * 0.05 + row["noise_ms"])
    assert row["status"] == "slower" and not res.failed
    # the step's GPU window (the 500 us GEMM, then the softmax) varies as the softmax does
    window = next(r for r in res.items.to_pylist() if r["item"] == "gpu window")
    assert window["noise_ms"] == pytest.approx(row["noise_ms"]) and window["status"] == "slower"
    assert statuses(diff(a, b, 5, sigmas=0))[("op", SOFTMAX)] == "regression"


def test_the_quartile_test_holds_for_the_step_window_and_the_kinds_too(tmp_path):
    """The median's flip between two common step times is noise for every item, not only for
    the op: the kernel kind and the step's GPU window flip with the softmax (507 or 508 us), and
    even with no allowance at all (--fail-above 0) none of them regresses."""
    a = _quantized_run(tmp_path / "a.duckdb", [7, 7, 8, 7, 8, 7, 7, 8, 7, 8])
    b = _quantized_run(tmp_path / "b.duckdb", [8, 8, 7, 8, 7, 8, 8, 7, 8, 7])
    res = diff(a, b, 0)
    got = {(r["item_type"], r["item"]): r for r in res.items.to_pylist()}
    for item in (("op", SOFTMAX), ("kind", "kernel"), ("step", "gpu window")):
        assert got[item]["delta_ms"] == pytest.approx(0.001) and got[item]["noise_ms"] == 0, item
        assert got[item]["status"] == "slower", item
    assert not res.failed


def test_a_slowdown_within_the_noise_band_is_the_same(tmp_path):
    """BASE's softmax takes 8 to 12 us per step, NEW's 9 to 13 us (MAD 1 us each): the 1 us
    rise lies inside the noise band (3 x 1.4826 x sqrt(2) us), so the op is 'same', not
    'slower'; and a 1 us fall likewise, not 'faster'."""
    a = _quantized_run(tmp_path / "a.duckdb", [8, 9, 10, 11, 12])
    b = _quantized_run(tmp_path / "b.duckdb", [9, 10, 11, 12, 13])
    c = _quantized_run(tmp_path / "c.duckdb", [7, 8, 9, 10, 11])
    for new, delta in ((b, 0.001), (c, -0.001)):
        row = next(r for r in diff(a, new, 5).items.to_pylist() if r["item"] == SOFTMAX)
        assert row["delta_ms"] == pytest.approx(delta)
        assert row["noise_ms"] == pytest.approx(3 * 1.4826 * 2 ** 0.5 * 0.001)
        assert row["status"] == "same"


def test_an_op_at_0_per_step_in_base_is_new_not_a_regression(tmp_path):
    """BASE launched the softmax in 2 of 5 steps (0 per step, the median); NEW in every step:
    the op is listed as 'new', which fails no gate, while its time still counts in the kernel
    kind and the step's window (within the allowance here)."""
    a = _quantized_run(tmp_path / "a.duckdb", [None, None, None, 7, 7])
    b = _quantized_run(tmp_path / "b.duckdb", [20, 20, 20, 20, 20])
    res = diff(a, b, 5)
    row = next(r for r in res.items.to_pylist() if r["item"] == SOFTMAX)
    assert (row["base_ms"], row["new_ms"]) == (0, 0.02) and row["delta_ms"] > row["allowed_ms"]
    assert row["status"] == "new"
    assert statuses(res)[("kind", "kernel")] == "slower" and not res.failed


def test_the_table_lists_the_regressions_or_every_item_and_says_what_it_ignores(tmp_path, capsys):
    """The table holds the regressions only, or with --all every item; its heading names
    --min-ms when given; 'no regression' is said only when there is none. The count of
    regressions goes to stderr beside a table, not beside JSON or CSV, which stand alone."""
    soft, add = "softmax_warp_forward", "vectorized_elementwise_kernel"   # as the table cuts them
    a = make_run(tmp_path / "a.duckdb", noise=0.01, seed=1)
    ops = dict(BASE_OPS)
    ops[SOFTMAX] = (200.0, 2, "aten::softmax")
    b = make_run(tmp_path / "b.duckdb", ops=ops, noise=0.01, seed=2)
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 1
    out, err = capsys.readouterr()
    assert "regressions (ms per step, median over steps)" in out and soft in out
    header = next(line for line in out.splitlines() if line.startswith("item_type"))
    assert header.split() == ["item_type", "item", "base_ms", "new_ms", "delta_ms", "delta_pct",
                              "allowed_ms", "status"]   # the allowance a regression went past
    assert add not in out and "no regression" not in out and "ignoring" not in out
    assert err == "cuptiprof diff: 3 regressions\n"
    assert main(["diff", str(a), str(b), "--fail-above", "5", "--all", "--min-ms", "0.01"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"cuptiprof diff: BASE {a} (5 steps) -> NEW {b} (5 steps); fail above 5% + "
                          "3 robust sigmas of step noise, ignoring < 0.01 ms\n")
    assert "all items (ms per step, median over steps)" in out and add in out and "idle" in out
    for fmt in ("csv", "json"):
        assert main(["diff", str(a), str(b), "--fail-above", "5", "--format", fmt]) == 1
        out, err = capsys.readouterr()
        assert err == ""
    # JSON holds the items as the table lists them: the regressions first, then by step, kind
    # and op, the largest slowdown first within each
    doc = json.loads(out)
    assert doc["regressed"] is True and len(doc["regressions"]) == 3
    items = [(r["status"], r["item_type"], r["item"], r["delta_ms"]) for r in doc["items"]]
    assert [i[:3] for i in items[:3]] == [("regression", "step", "gpu window"),
                                          ("regression", "kind", "kernel"), ("regression", "op", SOFTMAX)]
    rest = items[3:]
    order = {"step": 0, "kind": 1, "op": 2}
    assert "regression" not in {i[0] for i in rest} and len({i[1] for i in rest}) == 2
    assert rest == sorted(rest, key=lambda i: (order[i[1]], -(i[3] or 0), i[2]))
    assert main(["diff", str(a), str(b), "--fail-above", "150", "--all"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("no regression\n") and "all items" in out and soft in out


def test_markdown_counts_the_regressions_on_stderr_as_the_table_does(tmp_path, capsys):
    """Markdown is read by people (a CI summary) as the table is: the count goes beside it."""
    a = make_run(tmp_path / "a.duckdb", noise=0.01, seed=1)
    ops = dict(BASE_OPS)
    ops[SOFTMAX] = (200.0, 2, "aten::softmax")
    b = make_run(tmp_path / "b.duckdb", ops=ops, noise=0.01, seed=2)
    assert main(["diff", str(a), str(b), "--fail-above", "5", "--format", "markdown"]) == 1
    out, err = capsys.readouterr()
    assert err == "cuptiprof diff: 3 regressions\n" and "regressions (ms per step" in out
    assert main(["diff", str(a), str(b), "--fail-above", "150", "--format", "markdown"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.endswith("no regression\n")


def test_an_op_named_like_a_kind_is_matched_as_an_op(tmp_path):
    """A program's one kernel named `kernel` (as many a first CUDA program has it): the op
    'kernel' is matched with the op of the other file, the kind with the kind, and the slowdown
    is one regression, the op's, the kind's row its duplicate."""
    a = _kernels_only_run(tmp_path / "a.duckdb", "kernel")
    b = _kernels_only_run(tmp_path / "b.duckdb", "kernel", dur_us=800)
    res = diff(a, b, 5)
    got = [(r["item_type"], r["status"], r["base_ms"], r["new_ms"]) for r in res.items.to_pylist()
           if r["item"] == "kernel"]
    assert sorted(got) == [("kind", "duplicate", 0.4, 0.8), ("op", "regression", 0.4, 0.8)]
    assert [(r["item_type"], r["item"]) for r in res.regressions] == [("step", "gpu window"), ("op", "kernel")]


def test_a_copy_direction_rising_from_0_per_step_fails_once_as_the_kind(tmp_path):
    """BASE copied device to host in 2 of 5 steps (0 per step, the median), NEW in every step:
    the op 'Memcpy DtoH' is 'new', as any op at 0; the kind 'memcpy DtoH', the same rows, is a
    metric rising from 0 and fails the gate, once: the kind keeps the verdict the op has not."""
    def run(path, copy_us):
        k = {c: [] for c in ("start_ns", "end_ns", "step", "name", "stream_id", "device_id")}
        m = {c: [] for c in ("start_ns", "end_ns", "step", "copy_kind", "bytes", "stream_id", "device_id")}
        t = 1_000_000
        for s, us in enumerate(copy_us):
            for c, v in (("start_ns", t), ("end_ns", t + 500_000), ("step", s), ("name", GEMM_H100),
                         ("stream_id", 7), ("device_id", 0)):
                k[c].append(v)
            t += 500_000
            if us is not None:
                for c, v in (("start_ns", t), ("end_ns", t + us * 1000), ("step", s), ("copy_kind", "DtoH"),
                             ("bytes", 1 << 20), ("stream_id", 7), ("device_id", 0)):
                    m[c].append(v)
                t += us * 1000
            t += 10_000
        with Writer(path, RunInfo(source="synthetic")) as w:
            w.append({"kernels": k, "memcpys": m})
        return path

    a = run(tmp_path / "a.duckdb", [None, None, None, 100, 100])
    b = run(tmp_path / "b.duckdb", [200] * 5)   # above BASE's upper quartile (100 us)
    res = diff(a, b, 5)
    st = statuses(res)
    assert st[("op", "Memcpy DtoH")] == "new" and st[("kind", "memcpy DtoH")] == "regression"
    assert [(r["item_type"], r["item"]) for r in res.regressions if r["item_type"] != "step"] == [
        ("kind", "memcpy DtoH")]


def test_a_kernel_without_a_name_is_judged_like_any_other_op(tmp_path):
    """Unnamed kernels are one op, '(unnamed)': made 2x slower it is a regression of its own,
    listed with the kernel kind and the step it slows."""
    ops = dict(BASE_OPS)
    ops[None] = (300.0, 1, "aten::mystery")
    a = make_run(tmp_path / "a.duckdb", ops=ops, noise=0.01, seed=1)
    ops[None] = (600.0, 1, "aten::mystery")
    b = make_run(tmp_path / "b.duckdb", ops=ops, noise=0.01, seed=2)
    st = statuses(diff(a, b, 10))
    assert st[("op", "(unnamed)")] == "regression" and st[("kind", "kernel")] == "regression"
    assert st[("op", SOFTMAX)] == "same"


def test_a_median_flipping_down_between_two_common_step_times_is_not_faster(tmp_path):
    """The mirror of the flip above: NEW's median lands on the lower of two common values, within
    BASE's lower quarter of steps, so it is noise ('same'), as the flip up is no regression. A
    real 2x speedup is still 'faster', and so is any speedup beyond PCT with --sigmas 0."""
    a = _quantized_run(tmp_path / "a.duckdb", [8, 8, 7, 8, 7, 8, 8, 7, 8, 7])
    b = _quantized_run(tmp_path / "b.duckdb", [7, 7, 8, 7, 8, 7, 7, 8, 7, 8])
    row = next(r for r in diff(a, b, 5).items.to_pylist() if r["item"] == SOFTMAX)
    assert (row["base_ms"], row["new_ms"]) == (0.008, 0.007) and row["status"] == "same"
    fast = _quantized_run(tmp_path / "fast.duckdb", [4, 4, 3, 4, 4, 4, 3, 4, 4, 4])
    assert statuses(diff(a, fast, 5))[("op", SOFTMAX)] == "faster"
    assert statuses(diff(a, b, 5, sigmas=0))[("op", SOFTMAX)] == "faster"


def test_a_median_flipping_down_is_not_faster_for_the_step_window_and_the_kinds_either(tmp_path):
    """The mirror of the quartile test for the step's GPU window and the kernel kind: they flip
    down with the softmax (508 to 507 us), within BASE's lower quarter of steps, so even with no
    allowance at all (--fail-above 0) each is 'same', not 'faster'."""
    a = _quantized_run(tmp_path / "a.duckdb", [8, 8, 7, 8, 7, 8, 8, 7, 8, 7])
    b = _quantized_run(tmp_path / "b.duckdb", [7, 7, 8, 7, 8, 7, 7, 8, 7, 8])
    got = {(r["item_type"], r["item"]): r for r in diff(a, b, 0).items.to_pylist()}
    for item in (("op", SOFTMAX), ("kind", "kernel"), ("step", "gpu window")):
        assert got[item]["delta_ms"] == pytest.approx(-0.001) and got[item]["noise_ms"] == 0, item
        assert got[item]["status"] == "same", item


def test_the_command_judges_by_the_sigmas_and_the_key_it_is_given(tmp_path, capsys):
    """`--sigmas 0` and `--by family` reach the gate: the median's flip between two common step
    times, noise under the default band, fails with no noise judgement, and the JSON's items are
    keyed by family, the settings as given."""
    a = _quantized_run(tmp_path / "a.duckdb", [7, 7, 8, 7, 8, 7, 7, 8, 7, 8])
    b = _quantized_run(tmp_path / "b.duckdb", [8, 8, 7, 8, 7, 8, 8, 7, 8, 7])
    assert main(["diff", str(a), str(b), "--fail-above", "5"]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--fail-above", "5", "--sigmas", "0", "--by", "family",
                 "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["sigmas"], doc["by"]) == (0, "family")
    assert ("op", "softmax", "family") in {(r["item_type"], r["item"], r["key_type"]) for r in doc["regressions"]}


def test_items_of_equal_change_are_listed_by_name(tmp_path):
    """Two runs of five kernels of exactly the same time: every item is unchanged, and the items
    are listed by type, then by name, the same on every run of the gate."""
    ops = {n: (100.0, 1, "aten::x") for n in ("zeta_k", "alpha_k", "mid_k", "beta_k", "omega_k")}
    a = make_run(tmp_path / "a.duckdb", ops=ops, seed=1)
    b = make_run(tmp_path / "b.duckdb", ops=ops, seed=2)
    items = [(r["item_type"], r["item"]) for r in diff(a, b, 5).items.to_pylist()]
    order = {"step": 0, "kind": 1, "op": 2}
    assert items == sorted(items, key=lambda i: (order[i[0]], i[1])) and len(items) == 13


def test_an_odd_slow_step_in_base_does_not_hide_a_regression(tmp_path):
    """BASE's softmax takes 8 us in most steps and 30 us in two odd ones; NEW's takes 15 us in
    every step. NEW's median lies above BASE's upper quartile (8 us), though not above its
    slowest step: the quartile test is no max test, and the op fails the gate."""
    a = _quantized_run(tmp_path / "a.duckdb", [8, 8, 8, 30, 8, 8, 8, 30, 8, 8])
    b = _quantized_run(tmp_path / "b.duckdb", [15] * 10)
    res = diff(a, b, 5)
    assert statuses(res)[("op", SOFTMAX)] == "regression" and res.failed


def test_a_kind_of_two_ops_that_both_regress_keeps_its_own_verdict(tmp_path):
    """Two kernels, both twice as slow: the kernel kind is made of two op keys, so it is another
    view of the work with its own 'regression', not a 'duplicate' of either op."""
    def run(name, scale):
        ops = {GEMM_H100: (400.0 * scale, 1, "aten::mm"), SOFTMAX: (100.0 * scale, 1, "aten::softmax")}
        return make_run(tmp_path / name, ops=ops, copies=(), seed=1)

    st = statuses(diff(run("a.duckdb", 1), run("b.duckdb", 2), 10))
    assert st[("kind", "kernel")] == "regression"
    assert st[("op", GEMM_H100)] == st[("op", SOFTMAX)] == "regression"
    # one op alone (the memset) is its kind's twin: counted once, as the op
    assert st[("kind", "memset")] == st[("op", "Memset")] == "same"


def test_verdict_on_a_stdout_that_cannot_encode_a_name(tmp_path):
    """A CI job whose stdout encoding is ASCII (PYTHONIOENCODING=ascii, a latin-1 locale) and a
    file or kernel name outside it: the table's first line raised UnicodeEncodeError, a
    traceback and exit 1, a 'regression' whatever the runs. The name is written escaped, the
    gate's verdict stands (0 here) and no traceback is printed."""
    a = make_run(tmp_path / "a.duckdb", seed=1)
    b = make_run(tmp_path / "b\u00e9\u6f22.duckdb", seed=1)
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONIOENCODING="ascii")
    for fmt in ("table", "markdown", "csv"):
        p = subprocess.run([sys.executable, "-m", "cuptiprof", "diff", str(a), str(b),
                            "--fail-above", "5", "--format", fmt, "--all"],
                           capture_output=True, env=env, timeout=120)
        err = p.stderr.decode("utf-8", "replace")
        assert p.returncode == 0 and "Traceback" not in err, (fmt, err)
        out = p.stdout.decode("ascii")
        assert "\\xe9\\u6f22" in out or fmt == "csv", out
        assert "gpu window" in out
