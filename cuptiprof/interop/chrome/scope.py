"""The rows an export holds: of some steps, the ranges around them and the processes with a
row (_ranges_where, _held); per table, its rows in scope with what their `ac2g` flow arrows
need and their ids moved apart per process (_scoped)."""
from __future__ import annotations

from cuptiprof.interop.chrome.json_sql import _lit
from cuptiprof.interop.chrome.pids import _GPU_IDS, _ID_STRIDE, _IDS, _Pids


def _ranges_where(con, where: str) -> str:
    """The ranges of an export of some steps: those of the steps, and every other range that
    overlaps in time what the steps hold on the host (per process), unclipped: a range
    enclosing them ("generate" around a decode loop, a range opened before the first step) is
    part of what a timeline of those steps shows. Its step stays as recorded (none, or
    another), so an import of the trace puts it in no exported step. Steps and warm-ups of
    other numbers stay out: an import would take them for steps (or warm-ups) holding work;
    so does a range of another step (or warm-up) that began inside that time (another
    thread's step running beside them): an import, by time, would put it in an exported
    step."""
    wins = con.execute(
        "SELECT run_id, pid, min(start_ns), max(coalesce(end_ns, start_ns)), "
        "bool_or(end_ns IS NULL) FROM ("
        f"SELECT run_id, pid, start_ns, end_ns FROM range_rows WHERE {where} UNION ALL "
        f"SELECT run_id, pid, start_ns, end_ns FROM api_call_rows WHERE {where}) "
        "GROUP BY ALL").fetchall()
    if not wins:
        return where
    # A range of the steps never closed (a step the program was killed in) ends, as the
    # export draws it, at the last time the export holds: here, the process's last record of
    # the steps (GPU work, call, range, log, allocation or free), which ran inside it.
    opened = [(r, p) for r, p, _, _, o in wins if o]
    if opened:
        procs = ", ".join(f"({_lit(r)}, {_lit(p)})" for r, p in opened)
        last = dict(((r, p), t) for r, p, t in con.execute(
            "SELECT run_id, pid, max(t) FROM ("
            f"SELECT run_id, pid, end_ns t FROM gpu_activities WHERE {where} UNION ALL "
            f"SELECT run_id, pid, end_ns FROM api_call_rows WHERE {where} UNION ALL "
            f"SELECT run_id, pid, coalesce(end_ns, start_ns) FROM range_rows WHERE {where} "
            f"UNION ALL SELECT run_id, pid, time_ns FROM logs WHERE {where} UNION ALL "
            f"SELECT run_id, pid, time_ns FROM memory_events WHERE {where}) "
            f"SEMI JOIN (VALUES {procs}) _o(o_run, o_pid) ON o_run IS NOT DISTINCT FROM run_id "
            "AND o_pid IS NOT DISTINCT FROM pid GROUP BY ALL").fetchall())
        wins = [(r, p, lo, max(hi, last.get((r, p)) or hi)) for r, p, lo, hi, _ in wins]
    else:
        wins = [w[:4] for w in wins]
    rows = ", ".join(f"({_lit(r)}, {_lit(p)}, {int(lo)}, {int(hi)})" for r, p, lo, hi in wins)
    return (f"(({where}) OR (kind NOT IN ('step', 'warmup') AND EXISTS (SELECT 1 FROM "
            f"(VALUES {rows}) _w(w_run, w_pid, w_lo, w_hi) WHERE w_run IS NOT DISTINCT FROM "
            "run_id AND w_pid IS NOT DISTINCT FROM pid AND start_ns < w_hi AND "
            "(end_ns IS NULL OR end_ns > w_lo) AND (step IS NULL OR start_ns < w_lo))))")


def _held(con, where: str, ranges_where: str) -> set[tuple]:
    """The processes (run_id, pid) with a row in the export."""
    return set(con.execute(
        f"SELECT DISTINCT run_id, pid FROM (SELECT run_id, pid FROM gpu_activities WHERE {where} "
        f"UNION ALL SELECT run_id, pid FROM ranges WHERE {ranges_where} UNION ALL "
        f"SELECT run_id, pid FROM api_calls WHERE {where} UNION ALL SELECT run_id, pid FROM logs "
        f"WHERE time_ns IS NOT NULL AND {where} UNION ALL SELECT run_id, pid FROM memory_events "
        f"WHERE {where})").fetchall())


# Where a row gets its end of an `ac2g` arrow (`_fl`): the first call with a correlation id
# ("s"; CUPTI gives a runtime call and the driver call it makes one id, as the importer's links
# take the first) and every GPU row of it, whatever its table ("f"; a graph launch's kernels,
# copies and memsets share one id), when the other end is in the export too: an end without its
# partner draws nothing. Each GPU row has a flow of its own, its "s" on the call: a flow ends
# at its first "f" (chrome://tracing warns of each later one, Perfetto drops them), so that one
# id for a launch of several rows would draw one arrow. The flow ids (`_fid`): correlation id +
# `flow_stride` * m (`_m`), m numbering the id's GPU rows in the export (kernels, then _GPU_TABLES
# order; start, end within a table) from 0: a launch of one row keeps its correlation id.
_OTHER_END = {"api_calls": "gpu_activities", "kernels": "api_calls", "memcpys": "api_calls",
              "memsets": "api_calls", "syncs": "api_calls"}
# GPU tables in the order that numbers the flows of one correlation id
_GPU_TABLES = ("kernels", "memcpys", "memsets", "syncs")


def _same_id(other: str, where: str) -> str:
    """FROM ... WHERE of the rows of `other` in the export with the row's correlation id."""
    return (f"FROM {other} o WHERE o.run_id IS NOT DISTINCT FROM _r.run_id AND o.pid IS NOT "
            f"DISTINCT FROM _r.pid AND o.correlation_id = _r.correlation_id AND {where}")


def _other_end(table: str, where: str) -> str:
    """Whether the row's partner (its launching call, or a call's GPU row) is in the export."""
    other = _OTHER_END.get(table)
    if other is None:
        return "FALSE"
    if table == "api_calls":
        return "(_n > 0)"
    return f"(correlation_id IS NOT NULL AND EXISTS (SELECT 1 {_same_id(other, where)}))"


def _flows(table: str, where: str) -> str:
    """`_n`: a call's GPU rows in the export (its flows); `_m`: a GPU row's number among its
    correlation id's (see _fid); 0 elsewhere."""
    if table == "api_calls":
        return (f"coalesce((SELECT count(*) {_same_id('gpu_activities', where)}), 0) AS _n, "
                "0 AS _m")
    if table not in _GPU_TABLES:
        return "0 AS _n, 0 AS _m"
    earlier = " UNION ALL ".join(f"SELECT run_id, pid, correlation_id FROM {t} WHERE {where}"
                                 for t in _GPU_TABLES[:_GPU_TABLES.index(table)])
    before = (f" + coalesce((SELECT count(*) {_same_id(f'({earlier})', 'TRUE')}), 0)"
              if earlier else "")
    return ("0 AS _n, row_number() OVER (PARTITION BY run_id, pid, correlation_id ORDER BY "
            f"start_ns, end_ns) - 1{before} AS _m")


def _range_apart(table: str, where: str) -> str:
    """Whether a GPU row's innermost range is not that of a launching call in the export (a
    framework NVTX range the call's record does not name, say): the row then says its own."""
    if _OTHER_END.get(table) != "api_calls":
        return "FALSE"
    return ("(correlation_id IS NOT NULL AND EXISTS (SELECT 1 FROM api_calls o WHERE o.run_id IS "
            "NOT DISTINCT FROM _r.run_id AND o.pid IS NOT DISTINCT FROM _r.pid AND "
            "o.correlation_id = _r.correlation_id AND o.range_id IS DISTINCT FROM _r.range_id "
            f"AND {where}))")


def _flow_end(table: str) -> str:
    if _OTHER_END.get(table) is None:
        return "FALSE"
    if table != "api_calls":
        return "_call"
    return ("(_call AND row_number() OVER (PARTITION BY run_id, pid, correlation_id ORDER BY "
            "start_ns, end_ns) = 1)")


def _scoped(table: str, where: str, pids: _Pids) -> str:
    """FROM clause: the table's rows in scope (with `_call`, see _other_end, `_apart`, see
    _range_apart, `_n` and `_m`, see _flows, and `_fl`, see _flow_end), with the process
    index where several. Several processes' ids are moved apart (index * 2^32), or one
    process's flows and links would join another's rows that carry the same number."""
    src = (f"(SELECT *, {_flow_end(table)} AS _fl FROM (SELECT *, {_other_end(table, where)} "
           f"AS _call FROM (SELECT *, {_range_apart(table, where)} AS _apart, "
           f"{_flows(table, where)} FROM {table} _r WHERE {where}) _r) _r) _t{pids.join()}")
    if pids.single or not _IDS.get(table, _GPU_IDS):
        return src
    moved = ", ".join(f"{c} + coalesce(p_idx, 0) * {_ID_STRIDE} AS {c}"
                      for c in _IDS.get(table, _GPU_IDS))
    return f"(SELECT * REPLACE ({moved}) FROM {src}) _u"
