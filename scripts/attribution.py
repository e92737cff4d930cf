"""Step attribution on real launches: every kernel launched inside step i carries step i.

    python scripts/attribution.py eager.duckdb compile.duckdb graphs.duckdb --json attribution.json

Two checks per file, over the recorded steps:
  * by time: a kernel's launching API call (joined on correlation_id) starts inside the window
    of step range i on the same thread, so the kernel must carry step i; counted are kernels
    whose step differs from that window's, kernels in a window with no step, kernels with no
    launching call at all, and launching calls that fall in no window;
  * by range: the kernel's innermost range (range_id) belongs to the same step as the kernel.
CUDA-graph replays are counted apart (graph_id set): their kernels share the correlation id of
the cudaGraphLaunch call. Exit status 1 when a file has a misattributed kernel.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import duckdb

CHECK = """
WITH steps AS (
    SELECT pid, step, thread_id, start_ns, end_ns FROM ranges
    WHERE kind = 'step' AND step IS NOT NULL AND end_ns IS NOT NULL),
launch AS (
    SELECT k.pid, k.step AS kstep, k.graph_id, a.start_ns AS call_ns, a.thread_id AS tid,
           a.correlation_id AS corr
    FROM kernels k LEFT JOIN (SELECT DISTINCT ON (pid, correlation_id) pid, correlation_id, start_ns,
                              thread_id FROM api_calls) a USING (pid, correlation_id)),
judged AS (
    SELECT l.*, (SELECT max(s.step) FROM steps s WHERE s.pid = l.pid AND l.call_ns BETWEEN s.start_ns AND s.end_ns
                   AND (s.thread_id = l.tid OR l.tid IS NULL)) AS wstep
    FROM launch l)
SELECT
    count(*)                                                          AS kernels,
    count(*) FILTER (WHERE kstep IS NOT NULL)                         AS with_step,
    count(*) FILTER (WHERE graph_id IS NOT NULL AND graph_id <> 0)    AS graph_kernels,
    count(*) FILTER (WHERE call_ns IS NULL)                           AS no_launch_call,
    count(*) FILTER (WHERE wstep IS NOT NULL AND kstep IS DISTINCT FROM wstep) AS wrong_step,
    count(*) FILTER (WHERE wstep IS NOT NULL AND kstep IS NULL)       AS in_step_but_null,
    count(*) FILTER (WHERE wstep IS NULL AND kstep IS NOT NULL AND call_ns IS NOT NULL) AS step_outside_window,
    count(*) FILTER (WHERE (graph_id IS NOT NULL AND graph_id <> 0) AND wstep IS NOT NULL
                     AND kstep IS DISTINCT FROM wstep)                AS graph_wrong_step,
    count(DISTINCT corr) FILTER (WHERE graph_id IS NOT NULL AND graph_id <> 0) AS graph_launches
FROM judged
"""

BY_RANGE = """
SELECT count(*) FROM kernels k JOIN ranges r ON r.range_id = k.range_id AND r.pid = k.pid
WHERE k.step IS DISTINCT FROM r.step AND r.step IS NOT NULL
"""

PER_STEP = """
SELECT step, count(*), count(*) FILTER (WHERE graph_id IS NOT NULL AND graph_id <> 0)
FROM kernels GROUP BY step ORDER BY step NULLS FIRST
"""


def check(path: str | Path) -> dict:
    con = duckdb.connect(str(path), read_only=True)
    try:
        cols = [d[0] for d in con.execute(CHECK).description]
        row = dict(zip(cols, con.execute(CHECK).fetchone()))
        try:
            row["range_step_disagrees"] = con.execute(BY_RANGE).fetchone()[0]
        except duckdb.Error as exc:
            row["range_step_disagrees"] = f"n/a ({str(exc).splitlines()[0][:100]})"
        row["per_step"] = [list(r) for r in con.execute(PER_STEP).fetchall()]
        row["source"] = con.execute("SELECT source FROM runs").fetchone()[0]
        row["quality"] = [list(r) for r in con.execute(
            "SELECT check_name, subject, count FROM data_quality").fetchall()]
    finally:
        con.close()
    bad = row["wrong_step"] + row["in_step_but_null"]
    if isinstance(row["range_step_disagrees"], int):
        bad += row["range_step_disagrees"]
    row["pass"] = row["kernels"] > 0 and bad == 0 and row["no_launch_call"] == 0
    row["path"] = str(path)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--json")
    a = p.parse_args(argv)
    res, ok = {}, True
    for f in a.files:
        if not Path(f).is_file():
            print(f"attribution: {f}: no such file (its run failed?)")
            res[Path(f).stem] = {"path": f, "pass": False, "error": "no such file"}
            ok = False
            continue
        r = check(f)
        res[Path(f).stem] = r
        ok &= r["pass"]
        print(f"attribution {Path(f).name}: {'PASS' if r['pass'] else 'FAIL'}  kernels {r['kernels']} "
              f"(with step {r['with_step']}, graph {r['graph_kernels']} from {r['graph_launches']} "
              f"launches), wrong step {r['wrong_step']} (graph {r['graph_wrong_step']}), in a step "
              f"but NULL {r['in_step_but_null']}, no launch call {r['no_launch_call']}, step outside "
              f"any window {r['step_outside_window']}, range disagrees {r['range_step_disagrees']}")
        print(f"  per step [step, kernels, graph kernels]: {r['per_step']}")
    if a.json:
        out = Path(a.json)
        if out.is_file():   # the threads stage's entry (scripts/threaded_steps.py) stays
            try:
                kept = json.loads(out.read_text()).get("threaded_steps")
            except (ValueError, AttributeError):
                kept = None
            if kept is not None:
                res["threaded_steps"] = kept
        out.write_text(json.dumps(res, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
