"""Failure behaviour on real processes: what survives a killed child, a signal to the launcher,
a writer killed mid-commit, two writers, a full disk, and files that are old, new or damaged.

The profiled children use the collector's fake CUPTI (CUPTIPROF_FAKE_CUPTI=1): each pushed
range synthesizes one copy and two kernels, so every flushed step leaves GPU rows to count.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

import hostile_corpus as H
from _run_helpers import q, wait_for
from conftest import report_tally

from cuptiprof.synthetic import write_synthetic

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
KERNELS_PER_RANGE = 2          # fake CUPTI: two kernels and one copy per pushed range
TALLY = {"tried": 0, "clean": 0}


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    report_tally(request, TALLY, "fault cases on real processes",
                 "ended cleanly with nothing committed lost")


@pytest.fixture
def tally(request):
    """Count a fault case, and count it clean when its test passed (the call phase is reported,
    and counted in testsfailed, before this teardown runs)."""
    TALLY["tried"] += 1
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed == failed:
        TALLY["clean"] += 1


def env(**extra) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    for k in ("CUPTIPROF_FAKE_CUPTI", "CUPTIPROF_DISABLE", "CUPTIPROF_RUN_SETTINGS",
              "CUPTIPROF_RUN_PARTS"):
        e.pop(k, None)
    e.update(extra)
    return e


FAKE = {"CUPTIPROF_FAKE_CUPTI": "1"}


def script(tmp: Path, body: str, name: str = "prog.py") -> Path:
    p = tmp / name
    p.write_text(textwrap.dedent(body))
    return p


def cli(args, cwd: Path, timeout: float = 120, preexec=None, **extra):
    return subprocess.run([PY, "-m", "cuptiprof", *map(str, args)], cwd=cwd, env=env(**extra),
                          capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)


def one_line(stderr: str, *words: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith("cuptiprof: error:"), stderr
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    return lines[0]


STEPS = """
    import os, pathlib, signal, sys, time, cuptiprof
    for i in range({n}):
        with cuptiprof.range("step", step=i):
            with cuptiprof.range("attn"):
                pass
    {after}
"""


# -- the profiled child -------------------------------------------------------------------------
def test_child_sigkill_keeps_every_flushed_step(tmp_path, tally):
    p = script(tmp_path, STEPS.format(n=3, after="os.kill(os.getpid(), signal.SIGKILL)"))
    r = cli(["run", "-o", "k.duckdb", "--no-report", "--", PY, p], tmp_path, **FAKE)
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    out = tmp_path / "k.duckdb"
    assert not (tmp_path / "k.duckdb.parts").exists()
    # each step flushed at its end: all three steps' kernels (step range + inner range) are in
    assert q(out, "SELECT step, count(*) FROM kernels GROUP BY step ORDER BY step") == \
        [(i, 2 * KERNELS_PER_RANGE) for i in range(3)]
    assert q(out, "SELECT ended_early, exit_status FROM processes") == [(True, 137)]
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]


def test_child_sigkill_in_no_gpu_mode_keeps_the_ops_of_every_flushed_step(tmp_path, tally):
    """Without a GPU the ops come from torch.profiler, which hands its events over only when
    it stops: it is cycled at each step's end, so a kill keeps every finished step's ops."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import os, signal, torch, cuptiprof
        x = torch.randn(32, 32)
        for i in range(4):
            with cuptiprof.range("step", step=i):
                x = torch.tanh(x @ x)
            if i == 2:
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--", PY, p], tmp_path,
            CUPTIPROF_OPS_EVERY_S="0")     # hand the ops over at every step's end
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    got = q(tmp_path / "c.duckdb", "SELECT step, list(DISTINCT name ORDER BY name) FROM kernels "
                                  "GROUP BY step ORDER BY step")
    assert [s for s, _ in got] == [0, 1, 2]
    assert all({"aten::mm", "aten::tanh"} <= set(names) for _, names in got), got


def test_no_gpu_mode_records_the_ops_of_steps_run_in_another_thread(tmp_path):
    """A generate() loop on a worker thread (a streamer's pattern): torch.profiler records every
    thread's ops, and is cycled only from the thread that started it (torch's state is per
    thread: from another it warned on the program's stderr and lost a step)."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import threading, torch, cuptiprof
        def gen():
            a = torch.randn(16, 16)
            for i in range(4):
                with cuptiprof.range("step", step=i):
                    a = torch.tanh(a @ a)
        t = threading.Thread(target=gen)
        t.start(); t.join()
    """)
    r = cli(["run", "-o", "t.duckdb", "--no-report", "--warmup", "1", "--", PY, p], tmp_path,
            CUPTIPROF_OPS_EVERY_S="0")
    assert r.returncode == 0, r.stderr
    got = q(tmp_path / "t.duckdb", "SELECT step, list(DISTINCT name ORDER BY name) FROM kernels "
                                  "GROUP BY step ORDER BY step")
    assert [s for s, _ in got] == [1, 2, 3], got
    assert all({"aten::mm", "aten::tanh"} <= set(names) for _, names in got), got
    assert "callback" not in r.stderr and "disableProfiler" not in r.stderr, r.stderr


def test_no_gpu_mode_names_a_step_that_recorded_no_op(tmp_path):
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import torch, cuptiprof
        a = torch.randn(8, 8)
        for i in range(3):
            with cuptiprof.range("step", step=i):
                if i != 1:
                    a = torch.tanh(a @ a)
    """)
    r = cli(["run", "-o", "e.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "e.duckdb", "SELECT subject FROM data_quality WHERE check_name = 'empty_step'") \
        == [("1",)]


@pytest.mark.parametrize("how,code,status,early", [
    ("sys.exit(3)", 3, "failed", False),
    ("raise RuntimeError('boom')", 1, "failed", False),
    ("os._exit(7)", 7, "failed", True),
])
def test_child_exit_paths(tmp_path, tally, how, code, status, early):
    p = script(tmp_path, STEPS.format(n=2, after=how))
    r = cli(["run", "-o", "x.duckdb", "--no-report", "--", PY, p], tmp_path, **FAKE)
    assert r.returncode == code, r.stderr
    out = tmp_path / "x.duckdb"
    assert q(out, "SELECT count(DISTINCT step), count(*) FROM kernels") == \
        [(2, 2 * 2 * KERNELS_PER_RANGE)]
    assert q(out, "SELECT status FROM runs") == [(status,)]
    assert q(out, "SELECT ended_early, exit_status FROM processes") == [(early, code)]
    if "raise" in how:
        assert "RuntimeError: boom" in r.stderr     # the program's own traceback, untouched


# The signal comes while step 3 waits inside both its ranges: landing between the step's push
# and its inner range's (a window of microseconds), it cut a step short of its inner range's rows.
LOOP = """
    import pathlib, time, cuptiprof
    i = 0
    while i < 3000:
        with cuptiprof.range("step", step=i):
            with cuptiprof.range("attn"):
                if i == 3:
                    pathlib.Path("ready").touch()
                    time.sleep(60)
                time.sleep(0.01)
        i += 1
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_launcher_is_forwarded_and_data_flushed(tmp_path, tally, sig):
    p = script(tmp_path, LOOP)
    # a session of its own: the signal reaches the launcher only, which must pass it on
    proc = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "s.duckdb", "--no-report", "--",
                             PY, p], cwd=tmp_path, env=env(**FAKE), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "ready", proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    out = tmp_path / "s.duckdb"
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    steps, kernels = q(out, "SELECT count(DISTINCT step), count(*) FROM kernels")[0]
    assert steps == 4                        # three flushed before the signal, and the one it cut
    # whole steps only: every step holds all its rows, the cut one too
    assert q(out, "SELECT count(*) FROM (SELECT step FROM kernels GROUP BY step "
                  f"HAVING count(*) <> {2 * KERNELS_PER_RANGE})") == [(0,)]
    assert q(out, "SELECT exit_status FROM processes") == [(128 + sig,)]


@pytest.mark.parametrize("mode, extra", [([], FAKE), ([], {}), (["--light"], {})],
                         ids=["collector", "cpu", "light"])
def test_a_step_a_signal_cut_short_is_marked_incomplete(tmp_path, tally, mode, extra):
    """SIGTERM ends the program inside step 3 without unwinding it: that step is written open
    and marked step_incomplete, so the steps report does not call it complete, with the CUPTI
    collector and without alike."""
    p = script(tmp_path, LOOP)
    proc = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "c.duckdb", "--no-report", *mode,
                             "--", PY, p], cwd=tmp_path, env=env(**extra), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    out = tmp_path / "c.duckdb"
    assert q(out, "SELECT step FROM ranges WHERE kind = 'step' AND end_ns IS NULL") == [(3,)]
    assert q(out, "SELECT subject FROM data_quality WHERE check_name = 'step_incomplete'") \
        == [("3",)]
    r = cli(["report", out, "--by", "step", "--format", "csv"], tmp_path)
    assert r.returncode == 0, r.stderr
    import csv, io
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert {row["step"]: row["complete"] for row in rows} == \
        {"0": "True", "1": "True", "2": "True", "3": "False"}


def test_sigterm_while_recording_never_hangs(tmp_path, tally):
    """A program that spends most of its time inside the collector and its commits: SIGTERM
    lands there (possibly inside a DuckDB statement). The child must still stop, promptly,
    with a file that opens and holds the steps committed before."""
    p = script(tmp_path, """
        import pathlib, cuptiprof
        for i in range(3000):
            with cuptiprof.range("step", step=i):
                for j in range(100):
                    with cuptiprof.range("attn"):
                        pass
            if i == 2:
                pathlib.Path("ready").touch()
    """)
    proc = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "t.duckdb", "--no-report", "--",
                             PY, p], cwd=tmp_path, env=env(**FAKE), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "ready", proc)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("the profiled program hung after SIGTERM")
    assert proc.returncode == 128 + signal.SIGTERM, err
    out = tmp_path / "t.duckdb"
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    full = 101 * KERNELS_PER_RANGE
    # every step but the one the signal cut short holds all its kernels
    assert q(out, f"SELECT count(*) FROM (SELECT step FROM kernels GROUP BY step "
                  f"HAVING count(*) <> {full})")[0][0] <= 1
    assert q(out, f"SELECT count(*) FROM (SELECT step FROM kernels GROUP BY step "
                  f"HAVING count(*) = {full})")[0][0] >= 3



@pytest.mark.parametrize("no_new_threads", [False, True])
def test_sigterm_inside_the_flush_at_exit_still_ends_the_process_by_it(tmp_path, tally,
                                                                        no_new_threads):
    """A SIGTERM that lands inside the flush as the program exits is put off until the flush
    is out of the writer's code; the retry, a timer thread, never ran once the interpreter was
    finishing, and the process exited 0 as if no signal had come: without cuptiprof it dies
    of it. (A multiprocessing worker's flush in its finalizers is followed by a wait for
    threads, where the retry runs.) Python 3.12+ starts no thread at that point at all
    (no_new_threads: as it does): the flush must still end whole."""
    p = script(tmp_path, f"""
        import os, signal, threading, cuptiprof
        from cuptiprof.run import recorder
        flush = recorder.Recorder.flush
        def no_thread(self):
            raise RuntimeError("can't create new thread at interpreter shutdown")
        def flush_at_close(self, *a, **kw):
            if self.closed:   # within Recorder.close(): the last flush, as the program exits
                if {no_new_threads}:
                    threading.Thread.start = no_thread
                os.kill(os.getpid(), signal.SIGTERM)
            return flush(self, *a, **kw)
        recorder.Recorder.flush = flush_at_close
        for i in range(3):
            with cuptiprof.range("step", step=i):
                pass
    """)
    r = subprocess.run([PY, "-m", "cuptiprof", "run", "-o", "x.duckdb", "--no-report", "--",
                        PY, p], cwd=tmp_path, env=env(CUPTIPROF_FLUSH_EVERY_S="600"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    out = tmp_path / "x.duckdb"
    assert q(out, "SELECT status FROM runs") == [("interrupted",)]
    assert q(out, "SELECT exit_status FROM processes") == [(128 + signal.SIGTERM,)]
    assert q(out, "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(3,)]

# -- the writer ---------------------------------------------------------------------------------
WRITER = """
    import os, signal, sys
    import numpy as np
    from cuptiprof.store.writer import RunInfo, Writer
    N = 50_000
    w = Writer(sys.argv[1], RunInfo(source="synthetic"))
    for b in range(int(sys.argv[2])):
        if sys.argv[3] == "at-commit" and b == 3:
            real = w.con
            class Killing:                      # dies on the COMMIT of the 4th batch
                def __getattr__(self, k):
                    return getattr(real, k)
                def execute(self, sql, *a):
                    if sql == "COMMIT":
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real.execute(sql, *a)
            w.con = Killing()
        s = np.arange(N, dtype=np.int64) + b * N
        w.append({"kernels": {"start_ns": s, "end_ns": s + 1, "name": [f"k{b}"] * N,
                              "device_id": np.zeros(N, np.int32), "stream_id": np.zeros(N, np.int32)}})
        print(b + 1, flush=True)
    w.close()
"""


def _kernel_batches(out: Path) -> tuple[int, int]:
    n, names = q(out, "SELECT count(*), count(DISTINCT name) FROM kernels")[0]
    return n, names


def test_writer_killed_at_commit_keeps_committed_batches(tmp_path, tally):
    p = script(tmp_path, WRITER, "writer.py")
    out = tmp_path / "w.duckdb"
    r = subprocess.run([PY, p, out, "10", "at-commit"], env=env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert r.stdout.split() == ["1", "2", "3"]
    assert _kernel_batches(out) == (3 * 50_000, 3)    # the 4th batch never committed
    assert q(out, "SELECT status FROM runs") == [("running",)]   # and it says so
    r = cli(["report", out, "--by", "op"], tmp_path)
    assert r.returncode == 0, r.stderr


def test_writer_killed_mid_stream_keeps_whole_batches(tmp_path, tally):
    """SIGKILL at an arbitrary moment of a stream of commits: whole batches, at least every one
    reported committed."""
    p = script(tmp_path, WRITER, "writer.py")
    out = tmp_path / "w.duckdb"
    proc = subprocess.Popen([PY, p, out, "1000", "stream"], env=env(), stdout=subprocess.PIPE,
                            text=True)
    seen = 0
    for line in proc.stdout:
        seen = int(line)
        if seen >= 4:
            break
    proc.kill()
    proc.communicate(timeout=60)
    n, names = _kernel_batches(out)
    assert n == names * 50_000 and names >= seen


def test_ctrl_c_inside_a_commit_reaches_the_program(tmp_path, tally):
    """DuckDB swallows a KeyboardInterrupt that lands inside a statement; the writer must give it
    back, or the profiled program would ignore Ctrl-C. Whole batches only in the file."""
    p = script(tmp_path, WRITER.replace("print(b + 1, flush=True)", """print(b + 1, flush=True)
        if b == 2:
            import threading
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()"""), "writer.py")
    out = tmp_path / "w.duckdb"
    r = subprocess.run([PY, p, out, "100000", "stream"], env=env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode in (1, -signal.SIGINT, 130), r.stderr
    lines = r.stderr.strip().splitlines()
    if "while cuptiprof was writing" in lines[-1]:   # landed in a statement: the writer's note
        lines.pop()
    assert lines[-1] == "KeyboardInterrupt", r.stderr[-2000:]
    n, names = _kernel_batches(out)
    assert n == names * 50_000 and 3 <= names < 100_000


# -- two writers, and a reader during a write ---------------------------------------------------
def test_two_runs_same_output_and_report_while_writing(tmp_path, tally):
    p = script(tmp_path, """
        import pathlib, time, cuptiprof
        with cuptiprof.range("step", step=0):
            pass
        pathlib.Path("ready").touch()
        while not pathlib.Path("go").exists():
            time.sleep(0.02)
    """)
    first = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "same.duckdb", "--no-report",
                              "--", PY, p], cwd=tmp_path, env=env(**FAKE),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(tmp_path / "ready", first)
        second = cli(["run", "-o", "same.duckdb", "--no-report", "--", PY, "-c", "pass"], tmp_path,
                     **FAKE)
        assert second.returncode == 2
        one_line(second.stderr, "another cuptiprof run", f"pid {first.pid}")
        rep = cli(["report", "same.duckdb"], tmp_path)
        assert rep.returncode == 2
        one_line(rep.stderr, "still writing", f"pid {first.pid}")
    finally:
        (tmp_path / "go").touch()
        _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert q(tmp_path / "same.duckdb", "SELECT count(*) FROM kernels") == [(KERNELS_PER_RANGE,)]
    # parts left by a run whose launcher is gone: not "still writing", but how to recover them
    left = tmp_path / "gone.duckdb.parts"
    left.mkdir()
    (left / "launcher.pid").write_text("999999999")
    # ... that recorded nothing: a merge of no part file would fail too, so not that
    rep = cli(["report", "gone.duckdb"], tmp_path)
    assert rep.returncode == 2
    line = one_line(rep.stderr, "did not finish and recorded nothing", f"remove {left.name}")
    assert "cuptiprof merge" not in line
    shutil.copy(tmp_path / "same.duckdb", left / "vm-1.duckdb")
    rep = cli(["report", "gone.duckdb"], tmp_path)
    assert rep.returncode == 2
    one_line(rep.stderr, "did not finish", "cuptiprof merge")


def test_report_and_second_writer_while_a_writer_holds_the_file(tmp_path, tally):
    p = script(tmp_path, """
        import pathlib, sys, time
        from cuptiprof.store.writer import RunInfo, Writer
        w = Writer("held.duckdb", RunInfo(source="synthetic"))
        w.append({"kernels": {"start_ns": [1], "end_ns": [2], "name": ["k"]}})
        pathlib.Path("ready").touch()
        while not pathlib.Path("go").exists():
            time.sleep(0.02)
        w.close()
    """, "hold.py")
    holder = subprocess.Popen([PY, p], cwd=tmp_path, env=env(), stderr=subprocess.PIPE, text=True)
    try:
        wait_for(tmp_path / "ready", holder)
        for args in (["report", "held.duckdb"], ["sql", "held.duckdb", "SELECT 1"],
                     ["merge", "held.duckdb", "-o", "m.duckdb"]):
            r = cli(args, tmp_path)
            assert r.returncode == 2, (args, r.stderr)
            one_line(r.stderr, "another process", f"pid {holder.pid}")
        assert not (tmp_path / "m.duckdb").exists()
    finally:
        (tmp_path / "go").touch()
        holder.communicate(timeout=60)
    assert holder.returncode == 0
    assert q(tmp_path / "held.duckdb", "SELECT status FROM runs") == [("complete",)]


# -- a full disk ---------------------------------------------------------------------------------
def _fsize(limit: int):
    def f():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # get EFBIG, as ENOSPC would be
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return f


def _big_trace(path: Path, kernels: int = 40_000) -> Path:
    import json

    doc = H.good_trace()
    k = doc["traceEvents"][3]
    doc["traceEvents"] += [dict(k, ts=1000 + 10 * i, name=f"kernel_{i % 3000}_" + "x" * 40)
                           for i in range(kernels)]
    path.write_text(json.dumps(doc))
    return path


def test_disk_full_import_is_one_line_and_leaves_nothing(tmp_path, tally):
    src = _big_trace(tmp_path / "big.json")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = cli(["import", src, "-o", out_dir / "big.duckdb", "--no-progress"], tmp_path,
            preexec=_fsize(400_000))
    assert r.returncode == 1, r.stderr
    one_line(r.stderr, "disk is full")
    assert list(out_dir.iterdir()) == []


def test_disk_full_writer_keeps_last_commit(tmp_path, tally):
    p = script(tmp_path, WRITER, "writer.py")
    out = tmp_path / "w.duckdb"
    r = subprocess.run([PY, p, out, "200", "stream"], env=env(), capture_output=True, text=True,
                       timeout=120, preexec_fn=_fsize(3_000_000))
    assert r.returncode != 0
    assert "File too large" in r.stderr or "No space" in r.stderr, r.stderr[-1000:]
    committed = int(r.stdout.split()[-1]) if r.stdout.split() else 0
    n, names = _kernel_batches(out)
    assert n == names * 50_000 and names >= committed
    assert cli(["report", out, "--by", "op"], tmp_path).returncode == 0


@pytest.mark.parametrize("program_exit,expected", [(0, 1), (3, 3)])
def test_disk_full_during_run_does_not_kill_the_program(tmp_path, tally, program_exit, expected):
    """The part file fills the disk: the program still runs to its end, the launcher says what
    happened in one line (naming the output and the kept parts) and keeps the part file, which
    still holds every committed step. The program's own failure status wins; a clean program
    whose profile could not be written exits 1."""
    after = f"print('program finished', flush=True); import sys; sys.exit({program_exit})"
    p = script(tmp_path, STEPS.format(n=100, after=after))
    r = cli(["run", "-o", "d.duckdb", "--no-report", "--", PY, p], tmp_path,
            preexec=_fsize(600_000), **FAKE)
    assert "program finished" in r.stdout, r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode == expected, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: error:")]
    assert len(errors) == 1 and "disk is full" in errors[0], r.stderr
    assert "d.duckdb.parts" in errors[0] and ".tmp-" not in errors[0], errors[0]
    parts = sorted((tmp_path / "d.duckdb.parts").glob("*.duckdb"))
    assert len(parts) == 1 and not (tmp_path / "d.duckdb").exists()
    # with room again, the kept part merges into a file with all 100 steps
    m = cli(["merge", parts[0], "-o", "recovered.duckdb"], tmp_path)
    assert m.returncode == 0, m.stderr
    assert q(tmp_path / "recovered.duckdb", "SELECT count(DISTINCT step), count(*) FROM kernels") \
        == [(100, 100 * 2 * KERNELS_PER_RANGE)]


def test_disk_full_export_names_the_file(tmp_path, tally):
    from cuptiprof.synthetic import write_synthetic

    src = tmp_path / "s.duckdb"
    write_synthetic(str(src), steps=4, kernels_per_step=3000, seed=1)
    r = cli(["export", src, "--chrome", "t.json"], tmp_path, preexec=_fsize(200_000))
    assert r.returncode == 1, r.stderr
    one_line(r.stderr, "t.json")
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("args,out", [
    (["merge", "s.duckdb", "-o", "m.duckdb"], "m.duckdb"),
    (["export", "s.duckdb", "--parquet", "pq"], "pq"),
])
def test_disk_full_through_duckdb_names_the_output_not_its_temporary_or_the_input(
        tmp_path, tally, args, out):
    """merge, and export --parquet, write through DuckDB: its message names the temporary file
    (.m.duckdb.tmp-PID.wal) or none, and the line named that, or the input file."""
    write_synthetic(str(tmp_path / "s.duckdb"), steps=4, kernels_per_step=3000, seed=1)
    r = cli(args, tmp_path, preexec=_fsize(20_000))
    assert r.returncode == 1, r.stderr
    line = one_line(r.stderr, "disk is full")
    assert line.startswith(f"cuptiprof: error: {out}: cannot write"), line
    assert ".tmp-" not in line and "s.duckdb" not in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]


# -- files from other versions, and damaged files -----------------------------------------------
@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A good file and copies of it: newer and older schema, truncated, zeroed, corrupt blocks."""
    from cuptiprof.store.schema import SCHEMA_VERSION
    from cuptiprof.synthetic import write_synthetic

    d = tmp_path_factory.mktemp("damaged")
    good = d / "good.duckdb"
    write_synthetic(str(good), steps=3, kernels_per_step=200, seed=0)
    files = {}

    def copy(name):
        shutil.copy(good, d / name)
        return d / name

    for name, version in (("newer", SCHEMA_VERSION + 1), ("older", 0)):
        f = copy(f"{name}.duckdb")
        con = duckdb.connect(str(f))
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])
        con.close()
        files[name] = f
    size = good.stat().st_size
    for name, keep in (("truncated_half", size // 2), ("truncated_tiny", 100), ("empty", 0)):
        f = copy(f"{name}.duckdb")
        os.truncate(f, keep)
        files[name] = f
    for name, off in (("corrupt_header", 0), ("corrupt_first_block", 5000),
                      ("corrupt_middle", size // 3), ("corrupt_late", 2 * size // 3)):
        f = copy(f"{name}.duckdb")
        with open(f, "r+b") as fh:
            fh.seek(off)
            fh.write(bytes((i * 7 + 3) % 256 for i in range(4096)))
        files[name] = f
    text = d / "notes.duckdb"
    text.write_text("not a database\n")
    files["text_named_duckdb"] = text
    # a schema version and nothing else (a meta table made by hand, or all the rest dropped)
    f = d / "meta_only.duckdb"
    con = duckdb.connect(str(f))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    con.close()
    files["meta_only"] = f
    return good, files


COMMANDS = {
    "report": ["report", "{f}"],
    "sql": ["sql", "{f}", "SELECT count(*), sum(end_ns) FROM gpu_activities"],
    "export_chrome": ["export", "{f}", "--chrome", "{o}.json"],
    "export_parquet": ["export", "{f}", "--parquet", "{o}.pq"],
    "merge": ["merge", "{f}", "-o", "{o}.duckdb"],
    "compare": ["compare", "{g}", "{f}"],
    "diff": ["diff", "{g}", "{f}", "--fail-above", "5"],
    "report_html": ["report", "{f}", "--html", "{o}.html"],
}


def test_old_new_and_damaged_files_through_every_command(damaged, tmp_path):
    good, files = damaged
    tasks = []
    for fname, f in files.items():
        for cname, argv in COMMANDS.items():
            o = tmp_path / "out" / f"{fname}-{cname}"
            tasks.append((f"{fname}:{cname}", [a.format(f=f, g=good, o=o) for a in argv]))
    (tmp_path / "out").mkdir()
    res = H.cli_batch(tasks, tmp_path / "work", timeout=60)
    bad = {}
    for name, d in res.items():
        TALLY["tried"] += 1
        fname, cname = name.split(":")
        err = d["stderr"]
        lines = [ln for ln in err.splitlines() if ln.strip()]
        why = None
        if d["rc"] is None:
            why = "hung"
        elif "Traceback" in err:
            why = "traceback: " + err.strip().splitlines()[-1]
        elif d["rc"] == 0:
            # a block no query reads may stay unnoticed; the answer must then be complete
            if not fname.startswith("corrupt_"):
                why = "accepted"
        elif d["rc"] not in (1, 2) or len(lines) != 1 or not lines[0].startswith("cuptiprof: error:"):
            why = f"rc {d['rc']}, stderr {err[-300:]!r}"
        elif fname == "newer" and "newer" not in lines[0]:
            why = f"does not say newer: {lines[0]}"
        elif fname == "older" and "old" not in lines[0]:
            why = f"does not say old: {lines[0]}"
        elif fname == "meta_only" and (d["rc"] != 2 or "not a complete cuptiprof file" not in lines[0]):
            why = f"exit {d['rc']}, does not say incomplete: {lines[0]}"
        elif fname.startswith(("truncated_half", "corrupt_")) and (
                str(files[fname]) not in lines[0] or "not a cuptiprof file" in lines[0]):
            # beside a good file (compare, diff) too: the line names the damaged one, as damaged
            why = f"does not name {files[fname].name} as damaged: {lines[0]}"
        elif d["rc"] != 0 and cname != "diff" and d["rc"] != 2:
            why = f"exit {d['rc']} for bad input: {lines[0]}"
        if not why and d["rc"] != 0:
            left = sorted(p.name for p in (tmp_path / "out").iterdir()
                          if p.name.startswith(f"{fname}-{cname}."))
            why = f"left a partial output {left}" if left else None
        if why:
            bad[name] = why
        else:
            TALLY["clean"] += 1
    assert not bad, bad
    # a temporary file of a failed command would carry a dot prefix
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


# Files edited by hand in DuckDB: what each did, and what the line says the file lacks.
EDITS = {
    "column_dropped": (["ALTER TABLE kernel_rows DROP COLUMN start_ns"],
                       "kernel_rows has no column start_ns"),
    "column_renamed": (["ALTER TABLE memcpys RENAME COLUMN bytes TO nbytes"],
                       "memcpys has no column bytes"),
    "column_retyped": (["ALTER TABLE kernel_rows ALTER COLUMN end_ns TYPE VARCHAR"],
                       "kernel_rows.end_ns is VARCHAR, not BIGINT"),
    "table_dropped": (["DROP TABLE launch_configs"], "no launch_configs"),
    "logs_dropped": (["DROP TABLE logs"], "no logs"),
    "view_replaced": (["CREATE OR REPLACE VIEW kernels AS SELECT 1 AS x"],
                      "kernels has no column run_id"),
    # a user's own tables, views and columns beside cuptiprof's: every command reads the file
    "additions": (["CREATE TABLE notes (note VARCHAR)", "CREATE VIEW slow AS SELECT * FROM kernels",
                   "ALTER TABLE runs ADD COLUMN note VARCHAR"], None),
}


def test_files_edited_by_hand_through_every_command(damaged, tmp_path):
    """A table, column or view of cuptiprof's dropped, renamed, retyped or replaced in DuckDB:
    a command that reads it says so in one line naming the file and what it lacks, exit 2 (it
    said DuckDB's "Binder Error: ..." naming no file, exit 1), and merge refuses the file
    whatever it lacks (it merged NULLs in place of a dropped column, and nothing in place of a
    dropped table). A command that reads none of it may run; additions change nothing."""
    good, _ = damaged
    files = {}
    for name, (edits, _) in EDITS.items():
        f = tmp_path / f"{name}.duckdb"
        shutil.copy(good, f)
        with duckdb.connect(str(f)) as con:
            for e in edits:
                con.execute(e)
        files[name] = f
    (tmp_path / "out").mkdir()
    tasks = [(f"{fname}:{cname}", [a.format(f=f, g=good, o=tmp_path / "out" / f"{fname}-{cname}")
                                   for a in argv])
             for fname, f in files.items() for cname, argv in COMMANDS.items()
             if not (fname == "additions" and cname in ("compare", "diff", "merge"))]
    res = H.cli_batch(tasks, tmp_path / "work", timeout=60)
    bad = {}
    for name, d in res.items():
        fname, cname = name.split(":")
        says = EDITS[fname][1]
        lines = [ln for ln in d["stderr"].splitlines() if ln.strip()]
        if says is None:
            if d["rc"] != 0:
                bad[name] = f"refused additions: {d['stderr'][-300:]!r}"
        elif d["rc"] == 0 and cname != "merge":
            continue
        elif d["rc"] != 2 or len(lines) != 1 or not lines[0].startswith(
                f"cuptiprof: error: {files[fname]}: not a complete cuptiprof file ({says}"):
            bad[name] = f"rc {d['rc']}: {d['stderr'][-300:]!r}"
    assert not bad, bad
    # what a refused command would have written is not there, nor its temporary
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "out").iterdir()) == \
        sorted(n.split(":")[0] for n, d in res.items() if d["rc"] == 0 and
               n.split(":")[1] not in ("report", "sql", "compare", "diff"))


@pytest.mark.parametrize("every_s,kept", [("0", [0, 1, 2]), ("3600", [])])
def test_a_light_run_commits_its_steps_at_most_as_often_as_asked(tmp_path, every_s, kept, tally):
    """--light writes ranges and logs only; a commit at every step's end (milliseconds however
    little it holds) slowed short steps. A step's end commits once CUPTIPROF_FLUSH_EVERY_S has
    passed since the last commit, so a kill loses at most that long of steps."""
    p = script(tmp_path, """
        import os, signal, cuptiprof
        for i in range(4):
            with cuptiprof.range("step", step=i):
                sum(range(1000))
            if i == 2:
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = cli(["run", "-o", "l.duckdb", "--no-report", "--light", "--", PY, p], tmp_path,
            CUPTIPROF_FLUSH_EVERY_S=every_s)
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    got = q(tmp_path / "l.duckdb", "SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'")
    assert got == [(kept or None,)]
    assert q(tmp_path / "l.duckdb", "SELECT ended_early FROM processes") == [(True,)]


def test_a_step_that_raised_is_committed_at_its_end(tmp_path, tally):
    """However seldom steps are committed (CUPTIPROF_FLUSH_EVERY_S), a step an exception ended
    is committed as it ends, with its step_incomplete row: a crash that follows keeps it."""
    p = script(tmp_path, """
        import os, signal, cuptiprof
        try:
            with cuptiprof.range("step", step=0):
                raise ValueError("bad batch")
        except ValueError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = cli(["run", "-o", "x.duckdb", "--no-report", "--light", "--", PY, p], tmp_path,
            CUPTIPROF_FLUSH_EVERY_S="3600")
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    out = tmp_path / "x.duckdb"
    assert q(out, "SELECT step, end_ns IS NOT NULL FROM ranges WHERE kind = 'step'") == [(0, True)]
    assert q(out, "SELECT subject FROM data_quality WHERE check_name = 'step_incomplete'") == \
        [("0",)]


@pytest.mark.parametrize("other_part", [False, True])
def test_a_missing_part_file_is_refused_not_merged_as_an_unreadable_part(tmp_path, other_part):
    """`cuptiprof merge OUT.parts/*.duckdb` where the glob matched nothing passes the pattern
    itself: one line naming it (and that the folder holds no part), no output file."""
    parts = tmp_path / "r.duckdb.parts"
    parts.mkdir()
    (parts / "run.json").write_text("{}")
    if other_part:
        write_synthetic(parts / "1.duckdb", steps=1, kernels_per_step=4)
    r = cli(["merge", "r.duckdb.parts/*.duckdb", "-o", "r.duckdb"], tmp_path)
    assert r.returncode == 2
    line = one_line(r.stderr, "r.duckdb.parts/*.duckdb: no such file")
    assert ("holds no part file" in line) is not other_part
    assert not (tmp_path / "r.duckdb").exists()


def test_a_killed_run_merged_from_its_parts_is_the_run_the_launcher_would_write(tmp_path, tally):
    """The launcher and its workers killed together (SIGKILL to the process group): the merge the
    messages name writes one run, its processes ended early, and says the run was recovered."""
    p = script(tmp_path, """
        import multiprocessing as mp, pathlib, time, cuptiprof
        def work(n):
            for i in range(3):
                with cuptiprof.range("step", step=i):
                    pass
            pathlib.Path(f"ready{n}").touch()
            time.sleep(600)
        if __name__ == "__main__":
            ps = [mp.Process(target=work, args=(n,)) for n in range(2)]
            for w in ps:
                w.start()
            for w in ps:
                w.join()
    """)
    proc = subprocess.Popen([PY, "-m", "cuptiprof", "run", "-o", "k.duckdb", "--", PY, p],
                            cwd=tmp_path, env=env(**FAKE), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(tmp_path / "ready0", proc)
    wait_for(tmp_path / "ready1", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    parts = tmp_path / "k.duckdb.parts"
    hint = cli(["report", "k.duckdb"], tmp_path)
    assert f"cuptiprof merge {parts.name}/*.duckdb -o k.duckdb" in one_line(hint.stderr)
    r = cli(["merge", *sorted(x.name for x in parts.glob("*.duckdb")), "-o", "../k.duckdb"], parts)
    assert r.returncode == 0, r.stderr
    # what was written is said on stderr, as every other merge says it: stdout stays empty
    n = len(list(parts.glob("*.duckdb")))
    assert r.stdout == "" and f"../k.duckdb, the run of the {n} part files in" in r.stderr
    out = tmp_path / "k.duckdb"
    assert q(out, "SELECT label, status, command FROM runs") == \
        [("k", "interrupted", f"{PY} {p}")]
    assert q(out, "SELECT count(*), bool_and(ended_early), count(exit_status) FROM processes") == \
        [(3, True, 0)]
    assert q(out, "SELECT count(DISTINCT pid), count(*) FROM ranges WHERE kind = 'step'") == [(2, 6)]
    assert q(out, "SELECT check_name, count(*) FROM data_quality WHERE check_name IN "
                  "('run_recovered', 'process_ended_early') GROUP BY 1 ORDER BY 1") == \
        [("process_ended_early", 3), ("run_recovered", 1)]
    # the parts are one run: merged with another file they are refused, in one line
    r = cli(["merge", *parts.glob("*.duckdb"), out, "-o", "m.duckdb"], tmp_path)
    assert r.returncode == 2 and "merged alone" in one_line(r.stderr)
