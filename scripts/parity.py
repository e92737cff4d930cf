"""Compare cuptiprof's record of the example with torch.profiler's (imported Kineto trace),
step for step: per kernel name the call count and the total time, memcpy count/bytes per
direction, memset count/bytes.

    python scripts/parity.py --cuptiprof a1.duckdb [a2.duckdb] --torch b1.duckdb [b2.duckdb] \
        --json parity.json [--tol-pct 5]

With two files per tool the same-tool spread (repeat against repeat) is reported too, which
is what a cross-tool time difference should be judged against. Only the steps recorded in
every file are compared. Prints a table; exit status 1 when counts differ or a kernel whose
total time is at least --min-share of the step time differs by more than --tol-pct.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import duckdb

_WS = re.compile(r"\s+")


def _norm(name: str) -> str:
    return _WS.sub(" ", name or "").strip()


def _q(con, sql, params=()):
    return con.execute(sql, params).fetchall()


def load(path: str | Path) -> dict:
    """Per-step aggregates of one cuptiprof file (any source)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        run = _q(con, "SELECT source, cuda_driver_version, cupti_version, torch_version FROM runs")
        steps = sorted(s for (s,) in _q(con, "SELECT DISTINCT step FROM ranges WHERE kind = 'step' "
                                             "AND step IS NOT NULL"))
        kern = _q(con, "SELECT step, demangled, count(*), sum(end_ns - start_ns) FROM kernels "
                       "WHERE step IS NOT NULL GROUP BY ALL")
        cpy = _q(con, "SELECT step, copy_kind, src_kind, dst_kind, count(*), sum(bytes), "
                      "sum(end_ns - start_ns) FROM memcpys WHERE step IS NOT NULL GROUP BY ALL")
        mset = _q(con, "SELECT step, count(*), sum(bytes), sum(end_ns - start_ns) FROM memsets "
                       "WHERE step IS NOT NULL GROUP BY ALL")
        nullk = _q(con, "SELECT count(*) FROM kernels WHERE step IS NULL")[0][0]
    finally:
        con.close()
    return {"path": str(path), "run": run[0] if run else None, "steps": steps,
            "kernels": [(s, _norm(n), c, t) for s, n, c, t in kern],
            "memcpys": cpy, "memsets": mset, "kernels_without_step": nullk}


def _by_name(f: dict, steps: set) -> dict:
    out: dict[str, list] = {}
    for s, n, c, t in f["kernels"]:
        if s in steps:
            e = out.setdefault(n, [0, 0])
            e[0] += c
            e[1] += t
    return out


def _by_step_name(f: dict, steps: set) -> dict:
    return {(s, n): c for s, n, c, _ in _agg_step(f, steps)}


def _agg_step(f, steps):
    acc: dict = {}
    for s, n, c, t in f["kernels"]:
        if s in steps:
            e = acc.setdefault((s, n), [0, 0])
            e[0] += c
            e[1] += t
    return [(s, n, c, t) for (s, n), (c, t) in acc.items()]


def _copies(f: dict, steps: set) -> dict:
    out: dict = {}
    for s, ck, sk, dk, c, b, t in f["memcpys"]:
        if s in steps:
            e = out.setdefault(f"{ck} {sk}->{dk}", [0, 0, 0])
            e[0] += c
            e[1] += int(b or 0)
            e[2] += int(t or 0)
    return out


def _sets(f: dict, steps: set) -> list:
    c = b = t = 0
    for s, n, nb, tt in f["memsets"]:
        if s in steps:
            c, b, t = c + n, b + int(nb or 0), t + int(tt or 0)
    return [c, b, t]


def _pct(a, b):
    return None if not b else 100.0 * (a - b) / b


def _spread(files: list, steps: set) -> dict | None:
    """Repeat against repeat of one tool: |time difference| per kernel name."""
    if len(files) < 2:
        return None
    a, b = _by_name(files[0], steps), _by_name(files[1], steps)
    diffs = [abs(_pct(a[n][1], b[n][1])) for n in a if n in b and b[n][1]]
    ta, tb = sum(v[1] for v in a.values()), sum(v[1] for v in b.values())
    return {"names": len(diffs),
            "median_abs_diff_pct": statistics.median(diffs) if diffs else None,
            "p90_abs_diff_pct": sorted(diffs)[int(0.9 * (len(diffs) - 1))] if diffs else None,
            "total_time_diff_pct": _pct(ta, tb),
            "count_mismatches": sum(1 for n in set(a) | set(b)
                                    if a.get(n, [0])[0] != b.get(n, [0])[0])}


def compare(cp_files: list, tp_files: list, tol_pct: float = 5.0, min_share: float = 0.01) -> dict:
    A = [load(p) for p in cp_files]
    B = [load(p) for p in tp_files]
    steps = set(A[0]["steps"])
    for f in A[1:] + B:
        steps &= set(f["steps"])
    a, b = A[0], B[0]
    ka, kb = _by_name(a, steps), _by_name(b, steps)
    total_b = sum(v[1] for v in kb.values()) or 1
    rows = []
    for n in sorted(set(ka) | set(kb), key=lambda n: -max(ka.get(n, [0, 0])[1], kb.get(n, [0, 0])[1])):
        ca, ta = ka.get(n, [0, 0])
        cb, tb = kb.get(n, [0, 0])
        share = max(ta, tb) / total_b
        rows.append({"name": n, "count_cuptiprof": ca, "count_torch": cb,
                     "total_us_cuptiprof": ta / 1e3, "total_us_torch": tb / 1e3,
                     "time_diff_pct": _pct(ta, tb), "share_of_time": share,
                     "count_equal": ca == cb,
                     "time_within_tol": tb > 0 and abs(_pct(ta, tb)) <= tol_pct})
    sa, sb = _by_step_name(a, steps), _by_step_name(b, steps)
    step_mismatch = sorted({k for k in set(sa) | set(sb) if sa.get(k, 0) != sb.get(k, 0)})
    ca_, cb_ = _copies(a, steps), _copies(b, steps)
    copies = [{"direction": k, "count_cuptiprof": ca_.get(k, [0, 0, 0])[0],
               "count_torch": cb_.get(k, [0, 0, 0])[0], "bytes_cuptiprof": ca_.get(k, [0, 0, 0])[1],
               "bytes_torch": cb_.get(k, [0, 0, 0])[1],
               "time_diff_pct": _pct(ca_.get(k, [0, 0, 0])[2], cb_.get(k, [0, 0, 0])[2])}
              for k in sorted(set(ca_) | set(cb_))]
    ma, mb = _sets(a, steps), _sets(b, steps)
    big = [r for r in rows if r["share_of_time"] >= min_share]
    ta_all, tb_all = sum(v[1] for v in ka.values()), sum(v[1] for v in kb.values())
    verdict = {
        "kernel_names_cuptiprof": len(ka), "kernel_names_torch": len(kb),
        "only_in_cuptiprof": [n for n in ka if n not in kb],
        "only_in_torch": [n for n in kb if n not in ka],
        "kernel_counts_equal": all(r["count_equal"] for r in rows),
        "step_name_count_mismatches": len(step_mismatch),
        "kernels_cuptiprof": sum(v[0] for v in ka.values()),
        "kernels_torch": sum(v[0] for v in kb.values()),
        "total_kernel_time_diff_pct": _pct(ta_all, tb_all),
        f"big_kernels_within_{tol_pct:g}pct": sum(1 for r in big if r["time_within_tol"]),
        "big_kernels": len(big),
        "memcpys_equal": all(c["count_cuptiprof"] == c["count_torch"] and
                             c["bytes_cuptiprof"] == c["bytes_torch"] for c in copies),
        "memsets_equal": ma[:2] == mb[:2],
    }
    verdict["pass"] = bool(steps) and verdict["kernel_counts_equal"] and \
        verdict["memcpys_equal"] and verdict["memsets_equal"] and \
        all(r["time_within_tol"] for r in big) and verdict["kernels_cuptiprof"] > 0
    return {"steps": sorted(steps), "tol_pct": tol_pct, "min_share": min_share,
            "files": {"cuptiprof": [f["path"] for f in A], "torch": [f["path"] for f in B]},
            "runs": {"cuptiprof": [f["run"] for f in A], "torch": [f["run"] for f in B]},
            "kernels_without_step": {"cuptiprof": a["kernels_without_step"],
                                     "torch": b["kernels_without_step"]},
            "verdict": verdict, "kernels": rows, "memcpys": copies,
            "memsets": {"cuptiprof": dict(zip(("count", "bytes", "ns"), ma)),
                        "torch": dict(zip(("count", "bytes", "ns"), mb))},
            "step_name_count_mismatches": [list(k) for k in step_mismatch[:50]],
            "spread": {"cuptiprof": _spread(A, steps), "torch": _spread(B, steps)}}


def _f(v, fmt="{:+.1f}"):
    return "n/a" if v is None else fmt.format(v)


def table(res: dict, top: int = 25) -> str:
    v = res["verdict"]
    out = [f"parity over steps {res['steps']}: {'PASS' if v['pass'] else 'FAIL'}  "
           f"(kernels {v['kernels_cuptiprof']} vs {v['kernels_torch']}, names "
           f"{v['kernel_names_cuptiprof']} vs {v['kernel_names_torch']}, total kernel time "
           f"{_f(v['total_kernel_time_diff_pct'])}%, step/name count mismatches "
           f"{v['step_name_count_mismatches']})"]
    out.append(f"{'count cp':>9} {'count tp':>9} {'us cp':>10} {'us tp':>10} {'diff%':>7}  kernel")
    for r in res["kernels"][:top]:
        out.append(f"{r['count_cuptiprof']:>9} {r['count_torch']:>9} {r['total_us_cuptiprof']:>10.1f} "
                   f"{r['total_us_torch']:>10.1f} {_f(r['time_diff_pct']):>7}  {r['name'][:90]}")
    if len(res["kernels"]) > top:
        out.append(f"... {len(res['kernels']) - top} more kernel names in parity.json")
    for c in res["memcpys"]:
        out.append(f"memcpy {c['direction']}: count {c['count_cuptiprof']} vs {c['count_torch']}, "
                   f"bytes {c['bytes_cuptiprof']} vs {c['bytes_torch']}, time {_f(c['time_diff_pct'])}%")
    ms = res["memsets"]
    out.append(f"memset: count {ms['cuptiprof']['count']} vs {ms['torch']['count']}, "
               f"bytes {ms['cuptiprof']['bytes']} vs {ms['torch']['bytes']}")
    for tool, s in res["spread"].items():
        if s:
            out.append(f"same-tool spread ({tool}, repeat vs repeat): median |diff| "
                       f"{_f(s['median_abs_diff_pct'], '{:.1f}')}%, p90 {_f(s['p90_abs_diff_pct'], '{:.1f}')}%, "
                       f"total {_f(s['total_time_diff_pct'])}%, count mismatches {s['count_mismatches']}")
    for side in ("only_in_cuptiprof", "only_in_torch"):
        if v[side]:
            out.append(f"{side}: " + "; ".join(n[:80] for n in v[side][:10]))
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cuptiprof", nargs="+", required=True, metavar="FILE")
    p.add_argument("--torch", nargs="+", required=True, metavar="FILE")
    p.add_argument("--json", help="write the full comparison here")
    p.add_argument("--tol-pct", type=float, default=5.0)
    p.add_argument("--min-share", type=float, default=0.01,
                   help="kernels below this share of the time are not held to --tol-pct")
    a = p.parse_args(argv)
    for f in a.cuptiprof + a.torch:
        if not Path(f).is_file():
            print(f"parity: {f}: no such file", file=sys.stderr)
            return 2
    res = compare(a.cuptiprof, a.torch, a.tol_pct, a.min_share)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, default=str))
    sys.stdout.write(table(res))
    return 0 if res["verdict"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
