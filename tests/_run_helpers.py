"""Helpers for the `cuptiprof run` tests: run the CLI on real child processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[1]


def env(**extra) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    for k in ("CUPTIPROF_FAKE_CUPTI", "CUPTIPROF_DISABLE", "CUPTIPROF_RUN_SETTINGS"):
        e.pop(k, None)
    e.update(extra)
    return e


def script(tmp: Path, body: str, name: str = "prog.py") -> Path:
    p = tmp / name
    p.write_text(textwrap.dedent(body))
    return p


def tree(d: Path) -> dict:
    """Every file under `d` with its bytes: what a refused or failed command must leave alone."""
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def gone_pid() -> int:
    """The pid of a process that has ended."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def left_parts(parts: Path, launcher: int | None = None) -> Path:
    """OUT.parts as a run whose launcher was killed leaves it: one part file (pid 11's) and
    launcher.pid naming `launcher` (default: a process that has ended)."""
    from cuptiprof.store.writer import RunInfo, Writer

    parts.mkdir()
    with Writer(parts / "h-11.duckdb", RunInfo(source="cpu"), pid=11) as w:
        w.append({"processes": {"pid": [11]}})
    (parts / "launcher.pid").write_text(str(gone_pid() if launcher is None else launcher))
    return parts


def driver(tmp: Path, patch: str) -> Path:
    """A script that runs the cuptiprof command line given to it after `patch`, Python that
    replaces a piece of cuptiprof (the launcher's wait, its merge) to stage a failure."""
    return script(tmp, textwrap.dedent(patch) + "\nimport sys\nfrom cuptiprof.cli import main\n"
                  "sys.exit(main(sys.argv[1:]))\n", name="driver.py")


def cli_driven(patch: str, args, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """cli() through driver(cwd, patch)."""
    return subprocess.run([sys.executable, str(driver(cwd, patch)), *map(str, args)], cwd=cwd,
                          env=env(), capture_output=True, text=True, timeout=timeout)


def cli(args, cwd: Path, timeout: float = 120, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuptiprof", *map(str, args)], cwd=cwd,
                          env=env(**extra), capture_output=True, text=True, timeout=timeout)


def popen(args, cwd: Path, **extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cuptiprof", *map(str, args)], cwd=cwd,
                            env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Wait until the program started by `proc` writes `path` (it has got where a test acts)."""
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited early: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def written(path: Path, proc: subprocess.Popen, timeout: float = 60) -> str:
    """What the program started by `proc` writes into `path` (its pid, as a rule), once it has:
    the file is there, empty, a moment before its text is (write_text opens, then writes), and
    a test that read it as soon as it appeared read nothing."""
    import time

    wait_for(path, proc, timeout)
    deadline = time.monotonic() + timeout
    while not (text := path.read_text()):
        if proc.poll() is not None:
            raise AssertionError(f"exited early: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path} stayed empty"
        time.sleep(0.02)
    return text


def q(path: Path, sql: str) -> list:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def syncs_and_renames(monkeypatch) -> list:
    """Record os.fsync (the path synced) and os.replace (the path renamed) calls, in order; an
    os.link that puts a new output in place (outputs.publish) counts as its rename."""
    events = []
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(a, b):
        events.append(("replace", str(a)))
        real_replace(a, b)
    def link(a, b, **kw):
        events.append(("replace", str(a)))
        real_link(a, b, **kw)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    return events


def one_line_error(stderr: str) -> None:
    lines = [l for l in stderr.strip().splitlines() if l]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("cuptiprof: error:"), stderr
    assert "Traceback" not in stderr


@pytest.fixture
def no_leftover_session(monkeypatch):
    """In-process profiling tests: ranges on (CUPTIPROF_DISABLE unset), and no session or range
    hook left behind for the next test. Use as `_clean = pytest.fixture(autouse=True)(...)`:
    import it and mark it autouse in the module."""
    from cuptiprof import markers
    from cuptiprof.collect import session as session_mod

    monkeypatch.delenv("CUPTIPROF_DISABLE", raising=False)
    markers.reload_env()
    yield
    assert session_mod.current() is None, "a test left a session active"
    assert session_mod._stopping is None, "a stop() left its session marked as stopping"
    assert markers._session is None


# Three threads: step 0 stays open on one while another's step 1 begins and ends, then a third
# opens the range "io" outside its own steps; "after" follows with no step open anywhere.
# `launch(name)` stands for GPU work (the fake CUPTI's launch_kernel, or nothing).
STEP_OPEN_ELSEWHERE = """
import threading, cuptiprof
first_in, second_done, io_done = threading.Event(), threading.Event(), threading.Event()
def first():
    with cuptiprof.step(0):
        first_in.set()
        io_done.wait()
def second():
    first_in.wait()
    with cuptiprof.step(1):
        launch("k1")
    second_done.set()
def io():
    second_done.wait()
    with cuptiprof.range("io"):
        launch("k_io")
    io_done.set()
threads = [threading.Thread(target=t) for t in (first, second, io)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with cuptiprof.range("after"):
    pass
"""
