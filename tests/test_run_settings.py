"""cuptiprof.run.settings: what turns profiling on in a child, the environment `cuptiprof run`
gives the command, and what a profiled process adds to an environment it gives a program."""
from __future__ import annotations

import json
import os

import pytest

from cuptiprof.run import settings as S


def _env(**kw):
    return {S.SETTINGS: S.ChildSettings(mode="light", warmup=2, steps=5).to_env(), **kw}


def test_the_settings_cross_to_a_child_as_they_were_given():
    given = S.ChildSettings(mode="time", warmup=1, steps=3, kinds=["kernel", "memcpy"],
                            step_range="iter", step_fn="m:f", log_level="DEBUG", run_label="r",
                            command="python x.py", gpu=False, extra={"a": 1})
    assert S.ChildSettings.from_env({S.SETTINGS: given.to_env()}) == given


@pytest.mark.parametrize("disable,on", [(None, True), ("", True), ("0", True), ("1", False),
                                        ("yes", False), ("true", False)])
def test_cuptiprof_disable_keeps_a_child_out_unless_empty_or_0(disable, on):
    env = _env() if disable is None else _env(**{S.DISABLE: disable})
    got = S.ChildSettings.from_env(env)
    assert (got is not None) == on
    if on:
        assert (got.mode, got.warmup, got.steps) == ("light", 2, 5)


@pytest.mark.parametrize("raw", [None, "", "{not json", "[1, 2", "1", "null", "[1, 2]", '"x"'])
def test_settings_absent_or_unreadable_turn_nothing_on(raw):
    """Only settings the launcher wrote profile a process: a damaged variable (JSON that is
    not an object too: CUPTIPROF_RUN_SETTINGS=1 exported by hand) leaves the program to run as
    without cuptiprof, and `cuptiprof run` to record its command, rather than a traceback."""
    env = {} if raw is None else {S.SETTINGS: raw}
    assert S.ChildSettings.from_env(env) is None


def test_settings_with_names_this_version_does_not_know_are_read():
    """A child running another cuptiprof version than the launcher's: names it does not know
    are left out, the rest taken."""
    raw = json.dumps({"mode": "light", "warmup": 4, "from_a_newer_version": True})
    got = S.ChildSettings.from_env({S.SETTINGS: raw})
    assert (got.mode, got.warmup) == ("light", 4)


def test_the_commands_environment_puts_the_bootstrap_first_and_keeps_the_users_choices():
    st = S.ChildSettings(gpu=False)
    env = S.child_env({"PYTHONPATH": "/mine", "KEEP": "x"}, st, "/p.parts", "/boot", "/libnvtx.so")
    assert env["PYTHONPATH"] == "/boot" + os.pathsep + "/mine"
    assert (env["KEEP"], env[S.PARTS_DIR], env[S.BOOTSTRAP_DIR]) == ("x", "/p.parts", "/boot")
    assert json.loads(env[S.SETTINGS])["gpu"] is False
    assert env[S.NVTX_INJECTION] == "/libnvtx.so"
    assert env[S.KINETO_LOG_LEVEL] == "6"          # torch.profiler's start/stop lines: noise
    assert S.child_env({}, st, "/p", "/boot")["PYTHONPATH"] == "/boot"
    # the user's own NVTX injection and Kineto log level win
    mine = S.child_env({S.NVTX_INJECTION: "/own.so", S.KINETO_LOG_LEVEL: "0"}, st, "/p", "/b", "/libnvtx.so")
    assert (mine[S.NVTX_INJECTION], mine[S.KINETO_LOG_LEVEL]) == ("/own.so", "0")


@pytest.mark.parametrize("gpu", [True, None])
def test_kineto_is_left_alone_where_a_gpu_may_record(gpu):
    env = S.child_env({}, S.ChildSettings(gpu=gpu), "/p", "/b")
    assert S.KINETO_LOG_LEVEL not in env and S.NVTX_INJECTION not in env


@pytest.fixture
def profiled(monkeypatch):
    """This process as one `cuptiprof run` profiles."""
    for k in (S.NVTX_INJECTION, S.FAKE_CUPTI, S.KINETO_LOG_LEVEL, S.DISABLE):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(S.SETTINGS, S.ChildSettings().to_env())
    monkeypatch.setenv(S.PARTS_DIR, "/run.parts")
    monkeypatch.setenv(S.BOOTSTRAP_DIR, "/boot")
    monkeypatch.setenv(S.FAKE_CUPTI, "1")
    monkeypatch.setenv(S.KINETO_LOG_LEVEL, "6")


def test_an_environment_given_to_a_program_gets_what_profiles_it(profiled):
    out = S.carry_env({"PATH": "/bin", "PYTHONPATH": "/lib", S.KINETO_LOG_LEVEL: "2"})
    assert out[S.SETTINGS] == os.environ[S.SETTINGS]
    assert (out[S.PARTS_DIR], out[S.BOOTSTRAP_DIR], out[S.FAKE_CUPTI]) == ("/run.parts", "/boot", "1")
    assert out["PYTHONPATH"] == "/boot" + os.pathsep + "/lib"
    assert out[S.KINETO_LOG_LEVEL] == "2"          # the program's own value stays
    assert out["PATH"] == "/bin"
    # the bootstrap already on its path is not added twice
    again = S.carry_env({"PYTHONPATH": "/lib" + os.pathsep + "/boot"})
    assert again["PYTHONPATH"] == "/lib" + os.pathsep + "/boot"


@pytest.mark.parametrize("env", [{S.DISABLE: "1"}, {S.SETTINGS: "{}"}, {b"PATH": b"/bin"}],
                         ids=["disable", "own_settings", "bytes_keys"])
def test_an_environment_that_chooses_for_itself_is_left_as_it_is(profiled, env):
    assert S.carry_env(env) is env


def test_nothing_is_added_where_nothing_profiles_this_process(monkeypatch):
    monkeypatch.delenv(S.SETTINGS, raising=False)
    monkeypatch.setenv(S.BOOTSTRAP_DIR, "/boot")
    env = {"PATH": "/bin"}
    assert S.carry_env(env) is env


def test_a_run_under_settings_that_are_not_an_object_records_its_command(tmp_path):
    from _run_helpers import cli, q, script
    import sys

    p = script(tmp_path, "import cuptiprof\nwith cuptiprof.range('step', step=0):\n    pass\n")
    r = cli(["run", "-o", "own.duckdb", "--no-report", "--light", "--", sys.executable, p], tmp_path,
            CUPTIPROF_RUN_SETTINGS="1", CUPTIPROF_RUN_PARTS=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert q(tmp_path / "own.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(1,)]


def test_a_tuning_knob_that_is_not_a_number_is_said_once_and_the_program_runs(tmp_path):
    """CUPTIPROF_FLUSH_EVERY_S / CUPTIPROF_OPS_EVERY_S with a typo fall back to their default:
    the launcher says so in one warning line each (not once per profiled process), and the
    program runs to its end."""
    from _run_helpers import cli, q, script
    import sys

    script(tmp_path, "import cuptiprof\nwith cuptiprof.range('step', step=0):\n    pass\n",
           name="child.py")
    p = script(tmp_path, f"""\
        import subprocess, sys
        import cuptiprof
        with cuptiprof.range('step', step=0):
            pass
        sys.exit(subprocess.call([sys.executable, {str(tmp_path / 'child.py')!r}]))
        """)
    r = cli(["run", "-o", "knob.duckdb", "--no-report", "--light", "--", sys.executable, p],
            tmp_path, CUPTIPROF_FLUSH_EVERY_S="1s", CUPTIPROF_OPS_EVERY_S="-2")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: warning:")]
    assert len(warnings) == 2, r.stderr
    flush, = [w for w in warnings if "CUPTIPROF_FLUSH_EVERY_S" in w]
    assert "'1s'" in flush and "default" in flush and "1" in flush.split("default", 1)[1]
    ops, = [w for w in warnings if "CUPTIPROF_OPS_EVERY_S" in w]
    assert "'-2'" in ops and "default" in ops
    assert q(tmp_path / "knob.duckdb", "SELECT count(*) FROM processes") == [(2,)]


@pytest.mark.parametrize("value", ["0", "0.5", "2", " 3 ", ""])
def test_a_tuning_knob_that_is_a_number_or_empty_gets_no_warning(tmp_path, value):
    from _run_helpers import cli, script
    import sys

    p = script(tmp_path, "print('ran')\n")
    r = cli(["run", "-o", "ok.duckdb", "--no-report", "--light", "--", sys.executable, p],
            tmp_path, CUPTIPROF_FLUSH_EVERY_S=value, CUPTIPROF_OPS_EVERY_S=value)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr


def test_a_tuning_knob_warning_does_not_join_a_mistakes_one_error_line(tmp_path):
    from _run_helpers import cli, script
    import sys

    p = script(tmp_path, "print('ran')\n")
    (tmp_path / "taken.duckdb").write_text("")
    r = cli(["run", "-o", "taken.duckdb", "--light", "--", sys.executable, p], tmp_path,
            CUPTIPROF_FLUSH_EVERY_S="fast")
    assert r.returncode == 2 and "ran" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuptiprof: error: taken.duckdb"), r.stderr
