"""cuptiprof.run.overhead: which runs --overhead compares and how its table reads, with the
runs themselves stood in for (no timing), and the two step-latency readers on files written by
hand."""
from __future__ import annotations

import io
import json
import re

import pytest

from cuptiprof.errors import CuptiprofError
from cuptiprof.run import overhead
from cuptiprof.run.launcher import LaunchOptions, LaunchResult


def _fake_runs(monkeypatch, tmp_path, base, prof, codes=None):
    """launch() stood in for: the i-th run of each kind takes base[i] / prof[i] as its
    (ms per step, wall s); the untimed warm-up run ('warm', 0) takes 99 s, which no column may
    show. Returns the list of (kind, run, mode) in the order the runs were made."""
    made = []
    codes = codes or {}

    def launch(cmd, o):
        kind, r = re.fullmatch(r"(base|prof|warm)-(\d+)\.duckdb", o.output.rsplit("/", 1)[1]).groups()
        r = int(r)
        made.append((kind, r, o.mode))
        # the command's own output would break up the table; each run's report too
        assert (o.quiet, o.report) == (True, False)
        parts = tmp_path / f"{kind}-{r}.parts"
        parts.mkdir()
        (parts / "marker").write_text(kind)
        if kind == "warm":
            return LaunchResult(codes.get((kind, r), 0), 0, tmp_path / "w", parts, 99.0)
        step, wall = (base if kind == "base" else prof)[r]
        return LaunchResult(codes.get((kind, r), 0), 0, parts if kind == "base" else tmp_path / f"p{r}",
                            parts, wall)

    def step_of(kind):
        def read(path):
            r = int(re.search(r"(\d+)", path.name).group(1))
            return (base if kind == "base" else prof)[r][0]
        return read

    monkeypatch.setattr(overhead, "launch", launch)
    monkeypatch.setattr(overhead, "_median_steps_base", step_of("base"))
    monkeypatch.setattr(overhead, "_median_steps_profiled", step_of("prof"))
    return made


def _row(text, label):
    line = next(l for l in text.splitlines() if l.startswith(label))
    return re.split(r"\s{2,}", line.strip())


def test_the_table_compares_the_medians_of_the_runs_against_the_unprofiled_ones(monkeypatch, tmp_path, capsys):
    """Medians, not means (one slow run must not move them); the difference is relative to the
    run without profiling; the spreads are each kind's own min-max."""
    base = [(2.0, 1.0), (4.0, 1.2), (3.0, 1.1)]
    prof = [(3.0, 1.5), (5.0, 1.4), (100.0, 3.0)]
    made = _fake_runs(monkeypatch, tmp_path, base, prof)
    out = io.StringIO()
    assert overhead.measure(["python", "x.py"], LaunchOptions(), 3, out) == 0
    text = out.getvalue()
    assert text.splitlines()[0] == ("cuptiprof overhead: 3 runs each, interleaved, after one "
                                    "untimed warm-up run: python x.py")
    # 3.0 -> 5.0 ms: +66.7 %; (3 + 5 + 100) / 3 = 36 ms would be the mean
    assert _row(text, "per step") == ["per step (median of recorded steps)", "3.000 ms", "5.000 ms",
                                      "+66.7", "2.000-4.000", "3.000-100.000"]
    # 1.1 -> 1.5 s: +36.4 %
    assert _row(text, "end to end") == ["end to end", "1.100 s", "1.500 s", "+36.4",
                                        "1.000-1.200", "1.400-3.000"]
    # the per-step spreads overlap (2-4 and 3-100), the end-to-end ones do not
    notes = [l for l in text.splitlines() if l.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: per step:")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("cuptiprof: overhead warm-up run, with profiling, untimed (it pays for "
                      "cold caches): 99.00 s")
    assert err[1] == "cuptiprof: overhead run 1/3 without profiling: 1.00 s, 2.000 ms/step"
    assert err[2] == "cuptiprof: overhead run 1/3 with profiling: 1.50 s, 3.000 ms/step"
    assert len(err) == 7


def test_a_faster_profiled_run_reads_as_a_negative_difference(monkeypatch, tmp_path):
    _fake_runs(monkeypatch, tmp_path, [(4.0, 2.0)], [(3.0, 1.0)])
    out = io.StringIO()
    overhead.measure(["cmd"], LaunchOptions(), 1, out)
    assert _row(out.getvalue(), "per step")[3] == "-25.0"
    assert _row(out.getvalue(), "end to end")[3] == "-50.0"


@pytest.mark.parametrize("repeat", [1, 2, 4])
def test_the_runs_alternate_which_kind_goes_first_and_the_baseline_only_times(monkeypatch, tmp_path, repeat):
    """An untimed profiled run first, so that neither kind's first run pays for cold caches
    (the command's files, Python's imports, cuptiprof's own: `--repeat 1` read 0.48 s without
    profiling, 0.15 s with); then base, prof, prof, base, ...: drift in the machine hits both
    kinds alike. The baseline runs in time mode; the profiled runs in the mode asked for."""
    made = _fake_runs(monkeypatch, tmp_path, [(1.0, 1.0)] * repeat, [(1.0, 1.0)] * repeat)
    overhead.measure(["cmd"], LaunchOptions(mode=None), repeat, io.StringIO())
    order = [(k, r) for k, r, _ in made]
    expect = [("warm", 0)]
    for r in range(repeat):
        expect += [("base", r), ("prof", r)] if r % 2 == 0 else [("prof", r), ("base", r)]
    assert order == expect
    assert {(k, m) for k, _, m in made} == {("warm", None), ("base", "time"), ("prof", None)}
    assert not list(tmp_path.glob("*.parts"))   # each run's parts folder is removed


def test_runs_without_steps_say_so_and_end_to_end_is_still_compared(monkeypatch, tmp_path, capsys):
    _fake_runs(monkeypatch, tmp_path, [(None, 1.0)], [(None, 2.0)])
    out = io.StringIO()
    overhead.measure(["cmd"], LaunchOptions(), 1, out)
    assert _row(out.getvalue(), "per step") == ["per step (median of recorded steps)", "no steps marked"]
    assert _row(out.getvalue(), "end to end")[1:4] == ["1.000 s", "2.000 s", "+100.0"]
    assert capsys.readouterr().err.splitlines()[1] == \
        "cuptiprof: overhead run 1/1 without profiling: 1.00 s"


def test_runs_whose_steps_were_all_warm_up_do_not_read_as_unmarked(monkeypatch, tmp_path):
    """With --warmup W, a program that marked W steps or fewer recorded none: not "no steps
    marked", which sent the user looking for markers that are there."""
    _fake_runs(monkeypatch, tmp_path, [(None, 1.0)], [(None, 2.0)])
    out = io.StringIO()
    overhead.measure(["cmd"], LaunchOptions(warmup=9), 1, out)
    assert _row(out.getvalue(), "per step")[1:] == ["no step recorded (none marked, or all "
                                                    "within --warmup 9)"]


@pytest.mark.parametrize("failed,words", [(("base", 0), "an unprofiled run"),
                                          (("prof", 1), "a profiled run"),
                                          (("warm", 0), "the warm-up run")])
def test_a_command_that_fails_in_any_run_ends_the_measurement(monkeypatch, tmp_path, failed, words):
    _fake_runs(monkeypatch, tmp_path, [(1.0, 1.0)] * 2, [(1.0, 1.0)] * 2, codes={failed: 1})
    with pytest.raises(CuptiprofError) as e:
        overhead.measure(["cmd"], LaunchOptions(), 2, io.StringIO())
    assert str(e.value) == (f"cmd exited with status 1 in {words}; --overhead needs a command "
                            "that succeeds")


def test_the_baseline_step_is_the_median_of_every_steps_file(tmp_path):
    """Every process's steps, pooled; durations in ns, read as ms; a file that cannot be read
    is skipped."""
    (tmp_path / "a.steps.json").write_text(json.dumps({"steps": [[0, 1_000_000], [1, 5_000_000]]}))
    (tmp_path / "b.steps.json").write_text(json.dumps({"steps": [[0, 2_000_000]]}))
    (tmp_path / "c.steps.json").write_text("{not json")
    assert overhead._median_steps_base(tmp_path) == 2.0
    assert overhead._median_steps_base(tmp_path / "nothing") is None


def test_the_profiled_step_is_the_median_of_the_ended_steps(tmp_path):
    import duckdb

    path = tmp_path / "p.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE ranges (kind VARCHAR, start_ns BIGINT, end_ns BIGINT)")
    con.execute("INSERT INTO ranges VALUES ('step', 0, 1000000), ('step', 0, 3000000), "
                "('step', 0, 4000000), ('step', 0, NULL), ('user', 0, 90000000)")
    con.close()
    assert overhead._median_steps_profiled(path) == 3.0


def test_steps_in_one_kind_of_run_only_are_not_compared(monkeypatch, tmp_path):
    """A difference needs steps on both sides: runs with profiling that recorded none leave
    nothing to compare the baseline's steps with."""
    _fake_runs(monkeypatch, tmp_path, [(1.0, 1.0)], [(None, 2.0)])
    out = io.StringIO()
    assert overhead.measure(["cmd"], LaunchOptions(), 1, out) == 0
    assert _row(out.getvalue(), "per step")[1:] == ["no steps marked"]


def test_spreads_that_only_touch_count_as_overlapping():
    """The slowest run without profiling as slow as the fastest with it: the difference is
    not told from noise."""
    touch = {"base": [(1.0, 1.0), (2.0, 1.1)], "prof": [(2.0, 5.0), (3.0, 6.0)]}
    notes = overhead.noise_notes(touch)
    assert len(notes) == 1 and notes[0].startswith("note: per step: the spreads")
    wall_only = {"base": [(1.0, 1.0), (1.1, 3.0)], "prof": [(2.0, 2.0), (2.1, 4.0)]}
    assert [n[:22] for n in overhead.noise_notes(wall_only)] == ["note: end to end: the "]


def test_a_step_fn_the_program_lacks_is_said_without_the_file_of_a_run_it_made(tmp_path):
    """--overhead with a --step-fn the script does not define: the error named the file of its
    first run (/tmp/cuptiprof-overhead-XXXX/warm-0.duckdb, already removed) as the one without
    steps, a file the user never named and cannot find."""
    import sys

    from _run_helpers import cli, one_line_error, script

    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.step(0):
            pass
    """)
    r = cli(["run", "--light", "--overhead", "--repeat", "1", "--step-fn", "__main__:nope", "--",
             sys.executable, p], tmp_path)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr)
    assert "cuptiprof-overhead-" not in r.stderr and ".duckdb" not in r.stderr, r.stderr
    assert r.stderr.strip().endswith("(the command ran, in --overhead's first run)"), r.stderr


def test_a_step_fn_only_some_processes_have_is_said_once_without_a_file_of_its_runs(tmp_path):
    """--overhead of a command whose processes import two modules of one name, one with the
    --step-fn function: the warning named each run's file (/tmp/cuptiprof-overhead-XXXX/...,
    removed, never named by the user) and came once per run, the warm-up run's included."""
    import sys

    from _run_helpers import cli, script

    script(tmp_path, """
        def step():
            pass
    """, name="mod.py")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "mod.py").write_text("x = 1\n")
    p = script(tmp_path, """
        import subprocess
        import sys

        import mod

        subprocess.run([sys.executable, "-c", "import mod"], cwd="other", check=True)
        for i in range(3):
            mod.step()
    """)
    r = cli(["run", "--light", "--overhead", "--repeat", "1", "--step-fn", "mod:step", "--",
             sys.executable, p], tmp_path)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert warnings == ["cuptiprof: warning: --step-fn mod:step: module mod has no step (the "
                        "steps measured come from the processes that had it)"], r.stderr
    assert "cuptiprof-overhead-" not in r.stderr and ".duckdb" not in r.stderr, r.stderr
    assert "no steps marked" not in r.stdout and " ms " in r.stdout, r.stdout   # steps measured
