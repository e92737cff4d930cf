"""The tracks rows go on: tids (negative ones written unsigned), the streams of GPU user
annotations, each process's GPU devices and streams, and the metadata events that name them."""
from __future__ import annotations

import json

from cuptiprof.interop.chrome.json_sql import _q
from cuptiprof.interop.chrome.pids import _Pids
from cuptiprof.interop.kineto import _tid_number


# A row without a thread or stream goes on track -1 (a JSON null tid is no track to a viewer),
# and Perfetto UI reads a negative tid as none (the process's main thread): negative tids are
# written as unsigned 32-bit numbers (-1: 4294967295), which the importer reads back
# (cuptiprofNegativeIds).
def _track(col: str) -> str:
    return f"CASE WHEN {col} >= 0 THEN {col} ELSE {1 << 32} + coalesce({col}, -1) END"


def _unsigned(tid: int) -> int:
    return tid if tid >= 0 else tid + (1 << 32)


NO_THREAD = _unsigned(-1)
_TID = _track("thread_id")


def _stream_tids(con) -> dict[str, int]:
    """The tid of each GPU user annotation's stream that is not an integer (a string an
    imported trace carried, say), by its JSON text: the number the importer makes of a named
    thread (its trailing number, else a crc32 of its text), so that the trace has numeric tids
    only and imports back as before."""
    attrs = "CASE WHEN json_valid(attrs) THEN attrs END"
    return {text: _tid_number(json.loads(text) if kind == "VARCHAR" else text)
            for text, kind in con.execute(
                f"SELECT DISTINCT CAST(s AS VARCHAR), json_type(s) FROM (SELECT json_extract("
                f"{attrs}, '$.stream') s FROM range_rows WHERE domain = 'gpu_user_annotation') "
                "WHERE s IS NOT NULL AND json_type(s) NOT IN ('BIGINT', 'UBIGINT', 'NULL')"
            ).fetchall()}


def _stream_sql(stream: str, streams: dict[str, int]) -> str:
    """A GPU user annotation's stream (JSON) as a JSON integer: its own, or its number in
    `streams` (NULL: none, a JSON null too)."""
    stream = f"CASE WHEN json_type({stream}) <> 'NULL' THEN {stream} END"
    if not streams:
        return stream
    whens = " ".join(f"WHEN {_q(k)} THEN {v}" for k, v in streams.items())
    return (f"CASE WHEN json_type({stream}) IN ('BIGINT', 'UBIGINT', 'NULL') THEN {stream} "
            f"ELSE CAST(CASE CAST({stream} AS VARCHAR) {whens} END AS JSON) END")


def _lanes(con, procs, streams: dict[str, int] | None = None, where: str = "TRUE",
           ranges_where: str = "TRUE") -> dict[tuple, dict]:
    """Per process, the GPU tracks its rows in the export (`where`; ranges: `ranges_where`) go
    on: {device: [streams]} (device None: rows of no device, on device -1's pid)."""
    out: dict[tuple, dict] = {p: {} for p in procs}
    for run_id, pid, dev, stream in con.execute(
            "SELECT DISTINCT run_id, pid, device_id, coalesce(stream_id, -1) FROM gpu_activities "
            f"WHERE {where} ORDER BY ALL").fetchall():
        if (run_id, pid) in out:
            out[(run_id, pid)].setdefault(dev, []).append(stream)
    # GPU user annotations sit on their device's stream (see _ranges), one with no other work
    # on it too: their devices and streams are named as those of GPU rows (a stream that is
    # not a number, or none, leaves the track as it is: its tid is no stream)
    attrs = "CASE WHEN json_valid(attrs) THEN attrs END"
    dev, stream = (f"json_extract({attrs}, '$.{k}')" for k in ("device", "stream"))
    for run_id, pid, d, s in con.execute(
            f"SELECT DISTINCT run_id, pid, CASE WHEN {dev} IS NULL THEN 0 ELSE TRY_CAST({dev} AS "
            f"BIGINT) END, CAST({_stream_sql(stream, streams or {})} AS VARCHAR) FROM range_rows "
            f"WHERE domain = 'gpu_user_annotation' AND {ranges_where}").fetchall():
        if (run_id, pid) not in out:
            continue
        s = None if s is None else int(s)
        streams = out[(run_id, pid)].setdefault(d, [])
        if s is not None and s not in streams:
            streams.append(s)
    return out


def _metadata(con, procs, pids: _Pids, lanes_of: dict[tuple, dict]) -> list[dict]:
    ev = []
    hosts = dict(((r, p), h) for r, p, h in con.execute("SELECT run_id, pid, host FROM processes").fetchall())
    # the processes with a row on the track of no thread (NO_THREAD), which is named
    threadless = set(con.execute(
        "SELECT run_id, pid FROM memory_events UNION SELECT run_id, pid FROM api_calls WHERE "
        "thread_id IS NULL OR thread_id < 0 UNION SELECT run_id, pid FROM logs WHERE thread_id "
        "IS NULL OR thread_id < 0 UNION SELECT run_id, pid FROM ranges WHERE (thread_id IS NULL "
        "OR thread_id < 0) AND domain IS DISTINCT FROM 'gpu_user_annotation'").fetchall())
    for run_id, pid in procs:
        label = f"pid {pid}" + (f" ({hosts[(run_id, pid)]})" if hosts.get((run_id, pid)) else "")
        cp = pids.cpu(run_id, pid)
        ev.append({"name": "process_name", "ph": "M", "pid": cp, "tid": 0, "args": {"name": label}})
        ev.append({"name": "process_labels", "ph": "M", "pid": cp, "tid": 0, "args": {"labels": "CPU"}})
        lanes = lanes_of[(run_id, pid)]
        for dev in sorted(lanes, key=lambda d: (d is None, d or 0)):
            streams = sorted(lanes[dev])
            gp = pids.gpu(run_id, pid, dev)
            cpu_ops = dev is None or dev < 0   # a run without a GPU: CPU op times
            name = "CPU ops (no GPU)" if cpu_ops else "GPU" if pids.single else label
            ev.append({"name": "process_name", "ph": "M", "pid": gp, "tid": 0,
                       "args": {"name": name if pids.single or not cpu_ops else f"{label}: {name}"}})
            ev.append({"name": "process_labels", "ph": "M", "pid": gp, "tid": 0,
                       "args": {"labels": "CPU ops" if cpu_ops else f"GPU {dev}"}})
            for s in streams:   # Kineto's track names: "stream 7"
                ev.append({"name": "thread_name", "ph": "M", "pid": gp, "tid": _unsigned(s),
                           "args": {"name": f"stream {s}" if s >= 0 else "no stream"}})
        if (run_id, pid) in threadless:
            ev.append({"name": "thread_name", "ph": "M", "pid": cp, "tid": NO_THREAD,
                       "args": {"name": "no thread ([memory] events, rows of no thread)"}})
    return ev
