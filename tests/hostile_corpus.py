"""A corpus of hostile inputs for `cuptiprof import`, generated at test time (nothing large is
committed). `generate(folder)` writes every case and returns them; each case says whether the
input is actually valid (`ok`: the import must succeed) or not (`ok` False: one clear line on
stderr, exit status 2, and no output or temporary file left behind).

    python tests/hostile_corpus.py /tmp/hostile        # write the corpus to look at it

bench/faults.py runs it through the CLI and counts the cases that ended cleanly.
"""
from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# The huge "array of nothing": big enough that a reader holding it all in memory, or a quadratic
# search for event boundaries, shows up as a timeout, small enough to write and read in seconds.
HUGE_MB = 50
KERNELS_IN_GOOD_TRACE = 1


@dataclass
class Case:
    name: str
    path: Path
    ok: bool | None          # True: valid, must import; False: must fail; None: either, cleanly
    words: str = ""          # a word the one error line must contain (case-insensitive)
    kernels: int = KERNELS_IN_GOOD_TRACE  # kernels a valid input must import


@dataclass
class Outcome:
    case: Case
    returncode: int | None   # None: it hung and was killed
    stderr: str
    seconds: float
    clean: bool = False
    why: str = ""


def good_trace(step_ts: float = 0.0, kernel: str = "gemm") -> dict:
    """A small valid torch.profiler (Kineto) trace: a step, an op, a launch, a kernel, a copy."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10, "tid": 10,
         "ts": step_ts, "dur": 100.0, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10,
         "ts": step_ts + 10.5, "dur": 20.25, "args": {"External id": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10,
         "ts": step_ts + 12.0, "dur": 5.0, "args": {"correlation": 77, "cbid": 211}},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": step_ts + 50.0,
         "dur": 3.5, "args": {"device": 0, "stream": 7, "correlation": 77, "grid": [2, 1, 1],
                              "block": [128, 1, 1]}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
         "tid": 7, "ts": step_ts + 60, "dur": 2, "args": {"device": 0, "stream": 7, "bytes": 4096}},
    ]
    return {"schemaVersion": 1, "traceEvents": ev,
            "deviceProperties": [{"id": 0, "name": "Test GPU", "computeMajor": 9,
                                  "computeMinor": 0, "numSms": 132, "totalGlobalMem": 1 << 30}]}


def _with_kernel(**changes) -> dict:
    doc = good_trace()
    k = doc["traceEvents"][3]
    for key, v in changes.items():
        if v is _DROP:
            k.pop(key, None)
        else:
            k[key] = v
    return doc


_DROP = object()


def _json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _huge_array(path: Path, mb: int) -> Path:
    """{"traceEvents": [{}, {}, ...]} of `mb` MB, streamed to disk."""
    chunk = b"{}," * (1 << 18)
    with open(path, "wb") as fh:
        fh.write(b'{"traceEvents": [')
        for _ in range(max(1, (mb << 20) // len(chunk))):
            fh.write(chunk)
        fh.write(b"{}]}")
    return path


def _sqlite(path: Path, truncate: bool = False) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE recipes (name TEXT, minutes INTEGER)")
    con.executemany("INSERT INTO recipes VALUES (?, ?)", [("soup", 20)] * 200)
    con.commit()
    con.close()
    if truncate:
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 3 + 7])
    return path


def generate(folder: str | Path, huge_mb: int = HUGE_MB) -> list[Case]:
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    good = json.dumps(good_trace()).encode()
    gz = gzip.compress(good)
    deep = 200_000
    cases = [
        # compression and framing
        Case("truncated_gzip", _bytes(d / "truncated.json.gz", gz[: len(gz) // 2]), False, "gzip"),
        Case("garbage_gzip", _bytes(d / "garbage.json.gz", b"\x1f\x8b" + b"\x00\xff" * 64), False),
        Case("gzip_of_text", _bytes(d / "text.json.gz", gzip.compress(b"hello, world\n" * 100)),
             False),
        Case("empty", _bytes(d / "empty.json", b""), False, "empty"),
        Case("whitespace", _bytes(d / "blank.json", b" \n\t" * 1000), False),
        Case("binary", _bytes(d / "random.bin", bytes(range(256)) * 64), False),
        Case("json_null", _bytes(d / "null.json", b"null"), False),
        # JSON that is not valid, or not a trace
        Case("invalid_json", _bytes(d / "invalid.json", good[:-40] + b"}}"), False, "JSON"),
        Case("unterminated_string", _bytes(d / "unterminated.json",
                                           b'{"traceEvents": [{"name": "abc'), False),
        Case("not_a_trace", _json(d / "config.json", {"model": "resnet", "layers": [1, 2]}),
             False, "not a trace"),
        Case("events_not_a_list", _json(d / "events_int.json", {"traceEvents": 5}), False),
        Case("event_is_a_list", _json(d / "event_list.json", {"traceEvents": [[1, 2, 3]]}), False),
        Case("bare_numbers", _bytes(d / "numbers.json", b"[1, 2, 3]"), False),
        # wrong types and missing fields in otherwise good traces
        Case("ts_is_a_string", _json(d / "ts_str.json", _with_kernel(ts="yesterday")), False),
        Case("dur_is_a_list", _json(d / "dur_list.json", _with_kernel(dur=[1, 2])), False),
        Case("args_is_a_string", _json(d / "args_str.json", _with_kernel(args="none")), False),
        Case("grid_of_strings", _json(d / "grid_str.json",
                                      _with_kernel(args={"device": 0, "stream": 7, "correlation": 77,
                                                         "grid": ["a"], "block": [1]})), False),
        Case("kernel_without_dur", _json(d / "no_dur.json", _with_kernel(dur=_DROP)), False),
        Case("kernel_without_ts", _json(d / "no_ts.json", _with_kernel(ts=_DROP)), False),
        Case("kernel_without_args", _json(d / "no_args.json", _with_kernel(args=_DROP)), False),
        # numbers out of range
        Case("huge_ts", _json(d / "huge_ts.json", _with_kernel(ts=1e300)), False, "range"),
        Case("huge_int_dur", _bytes(d / "huge_int.json", json.dumps(good_trace()).replace(
            '"dur": 3.5', '"dur": 123456789012345678901234567890').encode()), False, "range"),
        Case("huge_correlation", _json(d / "huge_corr.json", _with_kernel(
            args={"device": 0, "stream": 7, "correlation": 1 << 70})), False),
        Case("nan_ts", _bytes(d / "nan.json", json.dumps(_with_kernel(ts=float("nan"))).encode()),
             False),
        Case("negative_dur", _json(d / "negative.json", _with_kernel(dur=-5.0)), False,
             "negative"),
        # names: NUL, control characters, markup (valid JSON, valid trace: must import)
        Case("nul_and_control_names", _json(d / "names.json", good_trace(
            kernel="k\x00ern\x1b[31mel\x07<script>alert(1)</script>,\"q\"\n|x|")), True),
        Case("non_utf8_name", _bytes(d / "latin1.json", good.replace(b'"gemm"', b'"g\xffe\xfem"')),
             False, "UTF-8"),
        # structure
        Case("deeply_nested_args", _bytes(d / "deep.json", good.replace(
            b'"cbid": 211', b'"cbid": 211, "x": ' + b"[" * deep + b"]" * deep)), False),
        Case("deeply_nested_top", _bytes(d / "deep_top.json",
                                         b'{"traceEvents": [], "y": ' + b"{\"a\":" * deep + b"1"
                                         + b"}" * deep + b"}"), False),
        # valid compact JSON whose events carry nothing: an empty import, streamed
        Case("huge_array_of_nothing", _huge_array(d / "huge.json", huge_mb), True, kernels=0),
        # Nsight Systems side
        Case("sqlite_not_nsys", _sqlite(d / "recipes.sqlite"), False, "Nsight"),
        Case("sqlite_truncated", _sqlite(d / "cut.sqlite", truncate=True), False),
        Case("valid_trace", _json(d / "valid.json", good_trace()), True),
        Case("valid_trace_gz", _bytes(d / "valid.json.gz", gz), True),
    ]
    return cases


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    """Files in `folder` other than `keep`: partial outputs, temporary names, WAL files."""
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def _env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def cli_batch(tasks: list[tuple], work: Path, timeout: float = 60.0) -> dict:
    """Run `cuptiprof ARGV` for every (name, argv[, options]), each in a fresh forked process;
    options: {"umask": int, "env": {name: value}, "cwd": folder}.

    One driver process imports cuptiprof once, then forks a child per task that runs the CLI's
    main() exactly as `python -m cuptiprof` does (an escaping exception prints a traceback), so
    a crash, a hang (killed after `timeout`) or stray output of one task cannot touch another,
    and a batch costs one interpreter start-up instead of one per task.
    Returns name -> {"rc": exit status or None when it hung, "stderr", "stdout", "seconds"}."""
    work.mkdir(parents=True, exist_ok=True)
    todo = [{"name": n, "argv": list(map(str, a)), "err": str(work / f"{n}.stderr"),
             "out": str(work / f"{n}.stdout"), **(opts[0] if opts else {})}
            for n, a, *opts in tasks]
    r = subprocess.run([sys.executable, __file__, "--drive", str(timeout)], input=json.dumps(todo),
                       capture_output=True, text=True, env=_env(), cwd=work,
                       timeout=timeout * len(tasks) + 60)
    if r.returncode != 0:
        raise RuntimeError(f"the CLI driver failed: {r.stderr[-2000:]}")
    res = {d["name"]: d for d in json.loads(r.stdout)}
    for t in todo:
        d = res[t["name"]]
        d["stderr"] = Path(t["err"]).read_text(errors="replace")
        d["stdout"] = Path(t["out"]).read_text(errors="replace")
        Path(t["err"]).unlink()
        Path(t["out"]).unlink()
    return res


def import_cases(cases: list[Case], work: Path, timeout: float = 60.0) -> list[Outcome]:
    """`cuptiprof import CASE -o work/NAME/out.duckdb` for every case, each judged."""
    tasks = []
    for c in cases:
        (work / c.name).mkdir(parents=True, exist_ok=True)  # alone in its folder: leftovers show
        tasks.append((c.name, ["import", c.path, "-o", work / c.name / "out.duckdb",
                               "--no-progress"]))
    got = cli_batch(tasks, work, timeout)
    out = []
    for c in cases:
        d = got[c.name]
        o = Outcome(c, d["rc"], d["stderr"], d["seconds"])
        o.why = f"no answer within {timeout:.0f} s" if d["rc"] is None else \
            judge(o, work / c.name / "out.duckdb")
        o.clean = not o.why
        out.append(o)
    return out


def _drive(timeout: float) -> None:
    """--drive: read the cases (JSON) from stdin, run each in a forked child, print outcomes."""
    import importlib

    from cuptiprof.cli import build_parser, main

    # Imported once, before any fork: every child starts warm (no DuckDB connection is open yet).
    build_parser()
    for m in ("cuptiprof.interop.importing", "cuptiprof.interop.kineto", "cuptiprof.interop.nsys",
              "cuptiprof.store.writer", "cuptiprof.analyse.profile"):
        importlib.import_module(m)

    results = []
    for t in json.load(sys.stdin):
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            if "umask" in t:
                os.umask(t["umask"])
            os.environ.update(t.get("env", {}))
            if "cwd" in t:
                os.chdir(t["cwd"])
            os.dup2(os.open(t["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
            os.dup2(os.open(t["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
            rc = 120
            try:
                rc = main(t["argv"])
            except SystemExit as exc:   # argparse
                rc = exc.code if isinstance(exc.code, int) else 2
            except BaseException:       # noqa: BLE001 - what `python -m` would show the user
                import traceback

                traceback.print_exc()
                rc = 1
            finally:
                for f in (sys.stdout, sys.stderr):
                    try:
                        f.flush()
                    except Exception:  # noqa: BLE001 - a closed pipe: nothing left to say
                        pass
                os._exit(rc)
        rc = None
        while time.perf_counter() - t0 < timeout:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        results.append({"name": t["name"], "rc": rc, "seconds": time.perf_counter() - t0})
    json.dump(results, sys.stdout)


def judge(res: Outcome, out: Path) -> str:
    """'' when the case ended cleanly with nothing lost, else what went wrong."""
    case, err = res.case, res.stderr
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if "Traceback" in err:
        return "a traceback on stderr"
    if res.returncode == 0:
        if case.ok is False:
            return "accepted an invalid input"
        extra = leftovers(out.parent, {out.name})
        if extra:
            return f"left {extra} next to the output"
        try:
            import duckdb

            con = duckdb.connect(str(out), read_only=True)
            try:
                kernels = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
                status = con.execute("SELECT status FROM runs").fetchall()
            finally:
                con.close()
        except Exception as exc:  # noqa: BLE001 - any failure here is the finding
            return f"the output does not open: {exc}"
        if status != [("complete",)]:
            return f"run status {status}"
        if case.ok and kernels != case.kernels:
            return f"{kernels} kernels imported, {case.kernels} expected"
        out.unlink()
        return ""
    if case.ok is True:
        return f"refused a valid input: {err.strip()}"
    if res.returncode != 2:
        return f"exit status {res.returncode}, expected 2"
    if len(lines) != 1 or not lines[0].startswith("cuptiprof: error:"):
        return f"{len(lines)} lines on stderr, expected one error line"
    if case.path.name not in lines[0]:
        return "the error line does not name the input"
    if case.words and case.words.lower() not in lines[0].lower():
        return f"the error line does not say {case.words!r}"
    extra = leftovers(out.parent, set())
    if extra:
        return f"left {extra} behind after a failed import"
    return ""


if __name__ == "__main__":
    if sys.argv[1:2] == ["--drive"]:
        _drive(float(sys.argv[2]))
        sys.exit(0)
    for c in generate(sys.argv[1] if len(sys.argv) > 1 else "hostile"):
        print(f"{c.name:24s} {'valid' if c.ok else 'bad':5s} {c.path}")
