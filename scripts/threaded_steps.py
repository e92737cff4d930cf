"""Steps on several threads while another thread captures a CUDA graph, on a real GPU.

    python scripts/threaded_steps.py scenario --mode profile --out W/threads-profile.duckdb --steps 8
    cuptiprof run -o W/threads-run.duckdb --warmup 1 --steps 8 --no-report -- \\
        python scripts/threaded_steps.py scenario --mode run --facts W/threads-run.json
    python scripts/threaded_steps.py check --work W --steps 8 --json OUT/attribution.json

The scenario: the main thread runs one warm-up step, then threads A and B run the recorded steps
(A 3, B the rest), each on its own CUDA stream: matmuls inside torch NVTX ranges inside cuptiprof
ranges ("fwd", and "tail" inside it) inside the step, and one launch in the step itself. Thread
C meanwhile captures a CUDA graph (torch.cuda.graph, default capture_error_mode 'global') and
replays it, again and again, each inside a cuptiprof range opened outside any step of its own
thread. Two orderings are forced
with events: B ends a step (so the session flushes on B: synchronize, CUPTI flush, commit) while
C is inside a capture; and A's last step is still running when B's step, the last of the N to
begin, ends, after which A launches the second half of its work (collection must stay on).
With --mode profile the same scenario runs once with no profiler first (the baseline: a capture
that fails there is the scenario's fault, not the collector's), then under
cuptiprof.profile(..., warmup=1, steps=N, flush_every_s=0).

The scenario writes what only the program knows (captures and their times, every flush of the
session and its thread, every torch.cuda.synchronize and whether it raised, thread errors) to a
JSON beside the DuckDB file. `check` reads both and adds a "threaded_steps" entry to the
attribution JSON: captures that failed, kernels whose step differs from their launching call's
thread's step window, API calls and kernels that disagree on range or step, the number of steps,
per-thread kernels per step, the steps of C's ranges, dropped records. Exit status 1 on a failure.

Without CUDA (the dry run: fake CUPTI, CPU torch) there are no streams, graphs or NVTX markers:
C runs its graph body on the CPU inside the same ranges, and the GPU-only verdicts say SKIP.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import sys
import threading
import time
from pathlib import Path

ROLES_STEPS_A = 3          # A's recorded steps; B runs the rest of the N
K = 16                     # matmuls per worker step (two halves)
WAIT_S = 15.0              # any forced ordering gives up after this long (and says so)


# -- the scenario ------------------------------------------------------------------------------
class _Null:
    def __call__(self, *a, **k):
        return contextlib.nullcontext()


def run_scenario(torch, cuda: bool, n_steps: int, R, NV, session=None) -> dict:
    """One run of the threads. R(name, **attrs): a range (cuptiprof.range or a no-op);
    NV(name): a torch NVTX range or a no-op. Returns the facts."""
    facts: dict = {"cuda": cuda, "threads": {}, "captures": [], "replays": 0, "errors": [],
                   "timeouts": [], "forced": {}, "steps_run": {}}
    n_b = n_steps - ROLES_STEPS_A
    ev = {k: threading.Event() for k in ("a_in_last", "b_last_done", "b_waiting", "capturing",
                                         "b_flushed", "stop")}
    barrier1, barrier2 = threading.Barrier(3, timeout=60), threading.Barrier(3, timeout=60)
    dev = "cuda" if cuda else "cpu"
    size = 2048 if cuda else 64
    dtype = torch.bfloat16 if cuda else torch.float32
    lock = threading.Lock()

    def wait(name: str, who: str, t: float = WAIT_S) -> bool:
        ok = ev[name].wait(t)
        if not ok:
            with lock:
                facts["timeouts"].append(f"{who} waited {t} s for {name}")
        return ok

    def stream_ctx(s):
        return torch.cuda.stream(s) if s is not None else contextlib.nullcontext()

    def worker(role: str, nsteps: int) -> None:
        facts["threads"][role] = threading.get_native_id()
        try:
            x = torch.randn(size, size, device=dev, dtype=dtype)
            w = torch.randn(size, size, device=dev, dtype=dtype) / size ** 0.5
            bufs = [torch.empty_like(x) for _ in range(2)]
            s = torch.cuda.Stream() if cuda else None

            def mms(k: int) -> None:   # no allocation: a cudaMalloc would break C's capture
                a = bufs[1] if k else x
                for i in range(k):
                    torch.mm(a if i else x, w, out=bufs[i % 2])
                    a = bufs[i % 2]
                torch.relu_(a)

            with stream_ctx(s):       # cuBLAS handle and workspace of this thread, before capture
                mms(4)
            if s is not None:
                s.synchronize()
        except Exception as exc:
            facts["errors"].append(f"{role} setup: {type(exc).__name__}: {str(exc)[:300]}")
        try:
            barrier1.wait()
            barrier2.wait()
        except threading.BrokenBarrierError:
            facts["errors"].append(f"{role}: another thread failed before the steps")
            ev["a_in_last" if role == "A" else "b_last_done"].set()
            return
        done = 0
        try:
            for i in range(nsteps):
                last = i == nsteps - 1
                if role == "B" and last:
                    wait("a_in_last", "B")           # B's last step begins last of all
                forced_flush = role == "B" and i == 1
                with R("step"):
                    with stream_ctx(s):
                        with R("fwd", role=role, i=i):
                            with NV(f"{role}.mm1"):
                                mms(K // 2)
                            if role == "A" and last:   # B's last step begins and ends now
                                ev["a_in_last"].set()
                                wait("b_last_done", "A")
                            with R("tail", role=role, i=i), NV(f"{role}.mm2"):
                                mms(K // 2)   # A's last: after the last step to begin ended
                        torch.relu_(bufs[0])           # launched in the step range itself
                    if forced_flush:                   # end this step while C captures
                        ev["b_waiting"].set()
                        facts["forced"]["capture_seen"] = wait("capturing", "B")
                        facts["forced"]["b_step_end_ns"] = time.time_ns()
                if forced_flush:
                    facts["forced"]["b_step_exit_done_ns"] = time.time_ns()
                    ev["b_flushed"].set()
                if role == "B" and last:
                    ev["b_last_done"].set()
                done += 1
                time.sleep(0.002)
        except Exception as exc:
            with lock:
                facts["errors"].append(f"{role}: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            facts["steps_run"][role] = done
            if role == "A":
                ev["a_in_last"].set()
            else:
                ev["b_last_done"].set()
                ev["b_flushed"].set()

    def capturer() -> None:
        facts["threads"]["C"] = threading.get_native_id()
        forced_done = passed1 = False
        try:
            n = 256 if cuda else 32
            inp = torch.randn(n, n, device=dev)
            wc = torch.randn(n, n, device=dev) / n ** 0.5

            def body():
                y = inp
                for _ in range(60):
                    y = torch.relu(torch.mm(y, wc))
                return y

            barrier1.wait()
            passed1 = True
            if cuda:                          # warm-up on a side stream, then a first capture
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    body()
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    body()
                g.replay()
                torch.cuda.synchronize()
                del g
        except Exception as exc:
            facts["errors"].append(f"C setup: {type(exc).__name__}: {str(exc)[:300]}")
            if not passed1:                   # the workers would wait for C: let them go
                barrier1.abort()
                barrier2.abort()
                return
        try:
            barrier2.wait()
        except threading.BrokenBarrierError:
            return
        j = 0
        while not ev["stop"].is_set() and j < 500:
            rec = {"j": j, "ok": True}
            g = None
            with R("capture", j=j):
                try:
                    if cuda:
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            rec["t0"] = time.time_ns()
                            body()
                            if not forced_done and ev["b_waiting"].is_set():
                                ev["capturing"].set()   # B ends its step (and flushes) now
                                rec["forced"] = wait("b_flushed", "C", 5.0)
                                forced_done = True
                            rec["t1"] = time.time_ns()
                    else:
                        rec["t0"] = time.time_ns()
                        body()
                        if not forced_done and ev["b_waiting"].is_set():
                            ev["capturing"].set()
                            rec["forced"] = wait("b_flushed", "C", 5.0)
                            forced_done = True
                        rec["t1"] = time.time_ns()
                except Exception as exc:
                    rec["ok"] = False
                    rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    rec.setdefault("t1", time.time_ns())
            facts["captures"].append(rec)
            if rec["ok"]:
                try:
                    with R("replay", j=j):
                        if cuda:
                            g.replay()
                            g.replay()
                        else:
                            body()
                    facts["replays"] += 1
                except Exception as exc:
                    facts["errors"].append(f"C replay: {type(exc).__name__}: {str(exc)[:300]}")
            del g
            j += 1
            time.sleep(0.001)
        if cuda:
            torch.cuda.current_stream().synchronize()

    threads = [threading.Thread(target=worker, args=("A", ROLES_STEPS_A), name="steps-A"),
               threading.Thread(target=worker, args=("B", n_b), name="steps-B"),
               threading.Thread(target=capturer, name="graphs-C")]
    for t in threads:
        t.start()
    for t in threads[:2]:
        t.join(120)
    ev["stop"].set()
    threads[2].join(60)
    facts["hung_threads"] = [t.name for t in threads if t.is_alive()]
    return facts


def _watch_session(session, facts: dict) -> None:
    """Log every flush of the session (thread, times) and every torch.cuda.synchronize (thread,
    times, error) into facts."""
    flushes, syncs = facts.setdefault("flushes", []), facts.setdefault("syncs", [])
    local = threading.local()
    if session is not None:
        orig = session.flush

        def flush(final: bool = False):
            t0 = time.time_ns()
            local.in_flush = True
            try:
                return orig(final)
            finally:
                local.in_flush = False
                flushes.append([threading.get_native_id(), t0, time.time_ns(), bool(final)])

        session.flush = flush
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        orig_sync = torch.cuda.synchronize

        def synchronize(device=None):
            t0, err = time.time_ns(), None
            try:
                return orig_sync(device)
            except Exception as exc:
                err = f"{type(exc).__name__}: {str(exc)[:200]}"
                raise
            finally:
                syncs.append([threading.get_native_id(), t0, time.time_ns(),
                              bool(getattr(local, "in_flush", False)), err])

        torch.cuda.synchronize = synchronize


def scenario(a) -> int:
    faulthandler.dump_traceback_later(a.watchdog_s, exit=True)
    import torch

    import cuptiprof
    from cuptiprof.collect import session as session_mod

    cuda = torch.cuda.is_available()
    nv = (lambda name: torch.cuda.nvtx.range(name)) if cuda else _Null()
    out: dict = {"mode": a.mode, "steps": a.steps, "cuda": cuda}

    def main_warmup():
        with cuptiprof.range("step"):   # the one warm-up step, on the main thread
            x = torch.randn(256, 256, device="cuda" if cuda else "cpu")
            (x @ x).relu_()

    if a.mode == "profile":
        if not a.no_baseline:
            t0 = time.monotonic()
            base = run_scenario(torch, cuda, a.steps, _Null(), _Null())
            base["wall_s"] = round(time.monotonic() - t0, 2)
            out["baseline"] = base
        prof = cuptiprof.profile(a.out, warmup=1, steps=a.steps, flush_every_s=0, mode="overwrite")
        facts: dict = {}
        t0 = time.monotonic()
        with prof:
            _watch_session(prof, facts)
            main_warmup()
            facts.update(run_scenario(torch, cuda, a.steps, cuptiprof.range, nv))
        facts["wall_s"] = round(time.monotonic() - t0, 2)
        facts["dropped_total"] = prof.dropped_total
        facts["steps_recorded"] = prof.steps_recorded
        facts["source"] = getattr(prof.source, "name", None)
        out["profiled"] = facts
    else:   # under `cuptiprof run`: the run's Session records this process
        sess = session_mod._active
        facts = {"session_found": sess is not None}
        _watch_session(sess, facts)
        t0 = time.monotonic()
        main_warmup()
        facts.update(run_scenario(torch, cuda, a.steps, cuptiprof.range, nv))
        facts["wall_s"] = round(time.monotonic() - t0, 2)
        if sess is not None:
            facts["dropped_total_so_far"] = sess.dropped_total
            facts["steps_recorded"] = sess.steps_recorded
            facts["source"] = getattr(sess.source, "name", None)
        out["profiled"] = facts
    Path(a.facts).write_text(json.dumps(out, indent=1, default=str))
    faulthandler.cancel_dump_traceback_later()
    return 0


# -- the check ---------------------------------------------------------------------------------
API_VS_KERNEL = """
SELECT count(*) AS kernels_with_call,
       count(*) FILTER (WHERE k.range_id IS DISTINCT FROM a.range_id) AS range_disagrees,
       count(*) FILTER (WHERE k.step IS DISTINCT FROM a.step) AS step_disagrees
FROM kernels k JOIN (SELECT DISTINCT ON (pid, correlation_id) pid, correlation_id, range_id, step
                     FROM api_calls) a USING (pid, correlation_id)
"""

PER_STEP_THREAD = """
WITH k AS (SELECT k.pid, k.step, a.thread_id FROM kernels k
           JOIN (SELECT DISTINCT ON (pid, correlation_id) pid, correlation_id, thread_id
                 FROM api_calls) a USING (pid, correlation_id))
SELECT s.step, s.thread_id, count(k.step) AS kernels   -- launched by the step's own thread
FROM (SELECT DISTINCT pid, step, thread_id FROM ranges WHERE kind = 'step') s
LEFT JOIN k ON k.pid = s.pid AND k.step = s.step AND k.thread_id = s.thread_id
GROUP BY ALL ORDER BY s.step
"""

IN_NVTX = """
SELECT count(*) FROM kernels k JOIN ranges r ON r.pid = k.pid AND r.range_id = k.range_id
WHERE r.domain IS DISTINCT FROM 'cuptiprof'
"""

# C's ranges, opened outside its own steps: the step they got against the latest-begun step
# open at their start; ambiguous where a step began or ended within 1 ms before it
OPEN_RANGE = """
WITH c AS (SELECT pid, range_id, name, start_ns, step FROM ranges
           WHERE thread_id = ? AND domain = 'cuptiprof' AND name IN ('capture', 'replay')),
s AS (SELECT pid, step, start_ns, end_ns FROM ranges WHERE kind = 'step'),
j AS (SELECT c.*,
        (SELECT arg_max(s.step, s.start_ns) FROM s WHERE s.pid = c.pid AND s.start_ns <= c.start_ns
           AND coalesce(s.end_ns, 9e18) >= c.start_ns) AS expect,
        (SELECT count(*) FROM s WHERE s.pid = c.pid AND
           (s.start_ns BETWEEN c.start_ns - 1000000 AND c.start_ns
            OR s.end_ns BETWEEN c.start_ns - 1000000 AND c.start_ns)) AS near
      FROM c)
SELECT count(*), count(*) FILTER (WHERE step IS NOT NULL),
       count(*) FILTER (WHERE near = 0 AND step IS DISTINCT FROM expect),
       count(*) FILTER (WHERE near > 0 AND step IS DISTINCT FROM expect)
FROM j
"""

BAD_QUALITY = ("dropped_records", "step_incomplete", "empty_step", "steps_short", "cupti_error",
               "range_error", "decode_error")


def _overlaps(facts: dict) -> dict:
    """Flushes and synchronizes on worker threads (not C's, not main's) during a capture."""
    th = facts.get("threads", {})
    workers = {th.get("A"), th.get("B")}
    caps = [(c["t0"], c["t1"]) for c in facts.get("captures", []) if "t0" in c and "t1" in c]

    def during(t0, t1):
        return any(t0 < c1 and t1 > c0 for c0, c1 in caps)

    fl = [f for f in facts.get("flushes", []) if f[0] in workers]
    sy = [s for s in facts.get("syncs", []) if s[3]]
    failed = [(c["t0"], c["t1"]) for c in facts.get("captures", [])
              if not c.get("ok") and "t0" in c and "t1" in c]
    return {"failed_captures_beside_a_worker_flush": sum(
                any(f[1] < c1 and f[2] > c0 for f in fl) for c0, c1 in failed),
            "worker_flushes": len(fl),
            "worker_flushes_during_capture": sum(during(f[1], f[2]) for f in fl),
            "flush_syncs": len(sy),
            "flush_syncs_failed": sum(1 for s in sy if s[4]),
            "flush_sync_errors": sorted({s[4] for s in sy if s[4]})[:3],
            "flush_syncs_during_capture": sum(during(s[1], s[2]) for s in sy)}


def check_file(path: Path, facts: dict, n_steps: int, dry: bool) -> dict:
    import duckdb

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import attribution

    r: dict = {"path": str(path)}
    prof = facts.get("profiled", {})
    r["attribution"] = {k: v for k, v in attribution.check(path).items()
                        if k not in ("per_step", "quality", "path")}
    con = duckdb.connect(str(path), read_only=True)
    try:
        cols = ["kernels_with_call", "api_kernel_range_disagrees", "api_kernel_step_disagrees"]
        r.update(zip(cols, con.execute(API_VS_KERNEL).fetchall()[0]))
        steps = con.execute("SELECT step, thread_id, end_ns IS NULL FROM ranges WHERE kind = 'step' "
                            "ORDER BY step").fetchall()
        r["step_ranges"] = len(steps)
        r["distinct_steps"] = len({s[0] for s in steps})
        r["steps_unclosed"] = sum(1 for s in steps if s[2])
        th = {v: k for k, v in prof.get("threads", {}).items()}
        per: dict = {}
        for step, tid, n in con.execute(PER_STEP_THREAD).fetchall():
            per.setdefault(th.get(tid, str(tid)), []).append([step, n])
        r["kernels_per_step"] = per
        r["steps_short_of_their_thread"] = sum(
            1 for rows in per.values() for _, n in rows if n < max(m for _, m in rows) or n == 0)
        r["kernels_in_nvtx_ranges"] = con.execute(IN_NVTX).fetchall()[0][0]
        c_tid = prof.get("threads", {}).get("C")
        o = con.execute(OPEN_RANGE, [c_tid]).fetchall()[0] if c_tid else (0, 0, 0, 0)
        r["c_ranges"], r["c_ranges_with_step"], r["c_range_step_wrong"], r["c_range_step_at_boundary"] = o
        r["quality"] = [list(q) for q in con.execute(
            "SELECT check_name, subject, count FROM data_quality ORDER BY ALL").fetchall()]
    finally:
        con.close()
    caps = prof.get("captures", [])
    r["captures"], r["captures_failed"] = len(caps), sum(1 for c in caps if not c.get("ok"))
    r["capture_errors"] = sorted({c["error"] for c in caps if c.get("error")})[:3]
    r["replays"] = prof.get("replays")
    r["forced_flush_during_capture"] = prof.get("forced", {}).get("capture_seen")
    r.update(_overlaps(prof))
    r["thread_errors"] = prof.get("errors", [])
    r["timeouts"] = prof.get("timeouts", [])
    r["hung_threads"] = prof.get("hung_threads", [])
    r["steps_run"] = prof.get("steps_run")
    r["dropped_total"] = prof.get("dropped_total", prof.get("dropped_total_so_far"))
    bad_q = [q for q in r["quality"] if q[0] in BAD_QUALITY]
    att = r["attribution"]
    problems = []
    if r["step_ranges"] != n_steps or r["distinct_steps"] != n_steps or r["steps_unclosed"]:
        problems.append(f"{r['step_ranges']} step ranges ({r['distinct_steps']} distinct, "
                        f"{r['steps_unclosed']} unclosed), not {n_steps}")
    for k in ("wrong_step", "in_step_but_null", "no_launch_call"):
        if att.get(k):
            problems.append(f"{k} {att[k]}")
    if isinstance(att.get("range_step_disagrees"), int) and att["range_step_disagrees"]:
        problems.append(f"range_step_disagrees {att['range_step_disagrees']}")
    for k in ("api_kernel_range_disagrees", "api_kernel_step_disagrees", "steps_short_of_their_thread",
              "c_range_step_wrong"):
        if r[k]:
            problems.append(f"{k} {r[k]}")
    if not att.get("kernels"):
        problems.append("no kernels")
    if bad_q:
        problems.append(f"data_quality {bad_q}")
    if r["dropped_total"]:
        problems.append(f"dropped {r['dropped_total']}")
    for k in ("thread_errors", "timeouts", "hung_threads"):
        if r[k]:
            problems.append(f"{k} {r[k]}")
    if not dry:
        if r["captures_failed"] or not r["captures"]:
            problems.append(f"captures failed {r['captures_failed']} of {r['captures']}: "
                            f"{r['capture_errors']}")
        if not att.get("graph_kernels"):
            problems.append("no CUDA graph kernel recorded (C's replays)")
        if not r["worker_flushes_during_capture"]:
            problems.append("no flush on a worker thread overlapped a capture: the capture "
                            "question is not answered")
        if not r["kernels_in_nvtx_ranges"]:
            problems.append("no kernel in a torch NVTX range (NVTX injection not live?)")
    r["problems"] = problems
    r["pass"] = not problems
    return r


def check(a) -> int:
    dry = os.environ.get("DRY_RUN", "0") not in ("", "0")
    work = Path(a.work)
    res: dict = {"steps": a.steps, "dry_run": dry}
    ok = True
    base_f = work / "threads-profile.json"
    base = json.loads(base_f.read_text()).get("baseline") if base_f.is_file() else None
    if base is not None:
        caps = base.get("captures", [])
        failed = sum(1 for c in caps if not c.get("ok"))
        res["baseline"] = {"captures": len(caps), "captures_failed": failed,
                           "capture_errors": sorted({c["error"] for c in caps if c.get("error")})[:3],
                           "errors": base.get("errors"), "timeouts": base.get("timeouts"),
                           "wall_s": base.get("wall_s")}
        if dry:
            print(f"threads baseline (no profiler): SKIP (dry run: no CUDA graph capture on the "
                  f"CPU); {len(caps)} stand-in captures, errors {base.get('errors')}")
        else:
            valid = not failed and not base.get("errors") and not base.get("timeouts")
            res["baseline"]["scenario_valid"] = valid
            print(f"threads baseline (no profiler): {'OK' if valid else 'SCENARIO INVALID'}  "
                  f"captures {len(caps)}, failed {failed} {res['baseline']['capture_errors']}, "
                  f"errors {base.get('errors')}, timeouts {base.get('timeouts')}")
    for mode in ("profile", "run"):
        db, fj = work / f"threads-{mode}.duckdb", work / f"threads-{mode}.json"
        if not db.is_file() or not fj.is_file():
            print(f"threads {mode}: FAIL  {db.name if not db.is_file() else fj.name} is missing "
                  "(its run failed?)")
            res[mode] = {"pass": False, "error": "missing file"}
            ok = False
            continue
        r = check_file(db, json.loads(fj.read_text()), a.steps, dry)
        res[mode] = r
        ok &= r["pass"]
        att = r["attribution"]
        print(f"threads {mode}: {'PASS' if r['pass'] else 'FAIL'}  steps {r['step_ranges']}/{a.steps} "
              f"(run per thread {r['steps_run']}), kernels {att.get('kernels')} (graph "
              f"{att.get('graph_kernels')}, in NVTX ranges {r['kernels_in_nvtx_ranges']}), wrong step "
              f"{att.get('wrong_step')}, in a step but NULL {att.get('in_step_but_null')}, no launch "
              f"call {att.get('no_launch_call')}, API/kernel range disagrees "
              f"{r['api_kernel_range_disagrees']} step {r['api_kernel_step_disagrees']}, steps "
              f"short {r['steps_short_of_their_thread']}, C ranges {r['c_ranges']} (with step "
              f"{r['c_ranges_with_step']}, wrong {r['c_range_step_wrong']}, at a boundary "
              f"{r['c_range_step_at_boundary']}), dropped {r['dropped_total']}")
        print(f"  kernels per step by thread: {r['kernels_per_step']}")
        if dry:
            print(f"  threads {mode}: SKIP (dry run: CUDA graph capture, streams and NVTX markers "
                  f"need a GPU); worker flushes {r['worker_flushes']} "
                  f"({r['worker_flushes_during_capture']} during a stand-in capture)")
        else:
            print(f"  graph captures {r['captures']}, failed {r['captures_failed']} "
                  f"{r['capture_errors']}, replays {r['replays']}; worker flushes "
                  f"{r['worker_flushes']} ({r['worker_flushes_during_capture']} during a capture, "
                  f"forced one seen: {r['forced_flush_during_capture']}); synchronizes in a flush "
                  f"{r['flush_syncs']} (during a capture {r['flush_syncs_during_capture']}, failed "
                  f"{r['flush_syncs_failed']} {r['flush_sync_errors']}); failed captures beside a worker "
                  f"flush {r['failed_captures_beside_a_worker_flush']}")
        for p in r["problems"]:
            print(f"  problem: {p}")
    res["pass"] = ok
    if a.json:
        p = Path(a.json)
        doc = json.loads(p.read_text()) if p.is_file() else {}
        doc["threaded_steps"] = res
        p.write_text(json.dumps(doc, indent=1, default=str))
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scenario")
    s.add_argument("--mode", choices=("profile", "run"), required=True)
    s.add_argument("--out", help="the DuckDB file (--mode profile)")
    s.add_argument("--facts", required=True)
    s.add_argument("--steps", type=int, default=8)
    s.add_argument("--no-baseline", action="store_true")
    s.add_argument("--watchdog-s", type=float, default=100)
    c = sub.add_parser("check")
    c.add_argument("--work", required=True)
    c.add_argument("--steps", type=int, default=8)
    c.add_argument("--json")
    a = p.parse_args(argv)
    return scenario(a) if a.cmd == "scenario" else check(a)


if __name__ == "__main__":
    sys.exit(main())
