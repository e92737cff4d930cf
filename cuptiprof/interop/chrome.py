"""Export a cuptiprof file as a Chrome trace (JSON, optionally gzip) for Perfetto UI and
chrome://tracing, in the Kineto dialect: the categories torch.profiler writes (`kernel`,
`gpu_memcpy`, `cuda_runtime`, `cpu_op`, `user_annotation`, ...), GPU rows on a process per
device with a thread per stream, and `ac2g` flow arrows from each launching call to its GPU work.

Timestamps are microseconds relative to `baseTimeNanoseconds` so that three decimals keep
every nanosecond (absolute epoch microseconds in a double would not); cuptiprof's Kineto
importer reads it back exactly.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import msgspec

from cuptiprof.errors import InputError

BATCH = 100_000
_SYNC_NAME = {"event_synchronize": "Event Sync", "stream_synchronize": "Stream Sync",
              "context_synchronize": "Context Sync", "stream_wait_event": "Stream Wait Event",
              "unknown": "Sync"}
_DOMAIN_CAT = {"cpu_op": "cpu_op", "user_annotation": "user_annotation",
               "python_function": "python_function"}
_MEM = {"pageable": "Pageable", "pinned": "Pinned", "device": "Device", "array": "Array",
        "managed": "Managed", "device_static": "Device", "managed_static": "Managed",
        "unknown": "Unknown"}


def _us(ns: int, base: int) -> float:
    return (ns - base) / 1000


def export_chrome(prof, out: str | os.PathLike, *, force: bool = False) -> dict:
    """Write the rows in `prof`'s step scope to `out` (.json or .json.gz). Returns counts."""
    out = Path(out)
    if out.exists() and not force:
        raise InputError(f"{out}: already exists; choose another path or pass --force")
    if not out.parent.is_dir():
        raise InputError(f"{out}: directory {out.parent} does not exist")
    where = prof.step_filter
    con = prof.con
    procs = con.execute("SELECT DISTINCT run_id, pid FROM (SELECT run_id, pid FROM gpu_activities "
                        "UNION ALL SELECT run_id, pid FROM ranges UNION ALL "
                        "SELECT run_id, pid FROM api_calls) ORDER BY 1, 2").fetchall()
    single = len(procs) <= 1
    proc_index = {p: i for i, p in enumerate(procs)}
    base_row = con.execute(
        f"SELECT min(s) FROM (SELECT min(start_ns) s FROM gpu_activities WHERE {where} "
        f"UNION ALL SELECT min(start_ns) FROM ranges WHERE {where} "
        f"UNION ALL SELECT min(start_ns) FROM api_calls WHERE {where})").fetchone()
    base = (int(base_row[0]) // 1_000_000) * 1_000_000 if base_row[0] is not None else 0

    def gpu_pid(run_id, pid, dev):
        dev = -1 if dev is None else dev
        return dev if single else 1_000_000 + proc_index.get((run_id, pid), 0) * 1000 + dev

    def cpu_pid(run_id, pid):
        return pid if single else 2_000_000 + proc_index.get((run_id, pid), 0)

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    enc = msgspec.json.Encoder()
    counts = {"events": 0}
    opener = gzip.open if out.name.endswith(".gz") else open
    try:
        with opener(tmp, "wb") as fh:
            head = {"schemaVersion": 1, "baseTimeNanoseconds": base, "displayTimeUnit": "ms",
                    "deviceProperties": _device_props(con)}
            dist = con.execute("SELECT rank, world_size FROM processes WHERE rank IS NOT NULL "
                               "LIMIT 1").fetchone() if single else None
            if dist:
                head["distributedInfo"] = {"rank": dist[0], "world_size": dist[1]}
            fh.write(enc.encode(head)[:-1] + b', "traceEvents": [\n')
            first = True

            def emit(events):
                nonlocal first
                if not events:
                    return
                body = enc.encode(events)[1:-1]
                fh.write((b"" if first else b",\n") + body)
                first = False
                counts["events"] += len(events)

            emit(_metadata(con, procs, single, gpu_pid, cpu_pid))
            for batch in _query(con, f"SELECT * FROM ranges WHERE {where}"):
                emit(_ranges(batch, base, gpu_pid, cpu_pid, counts))
            for batch in _query(con, f"SELECT * FROM api_calls WHERE {where}"):
                emit(_calls(batch, base, cpu_pid, counts))
            for table, fn in (("kernels", _kernels), ("memcpys", _memcpys), ("memsets", _memsets),
                              ("syncs", _syncs)):
                for batch in _query(con, f"SELECT * FROM {table} WHERE {where}"):
                    emit(fn(batch, base, gpu_pid, counts))
            fh.write(b"\n]}\n")
        os.replace(tmp, out)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    return counts


def _query(con, sql):
    reader = con.sql(sql).to_arrow_reader(BATCH)
    for rb in reader:
        yield rb.to_pydict()


def _device_props(con) -> list[dict]:
    out = []
    seen = set()
    for dev, name, cc, sms, mem in con.execute(
            "SELECT device_id, name, compute_capability, sm_count, memory_bytes FROM devices "
            "WHERE kind = 'gpu' ORDER BY run_id, pid, device_id").fetchall():
        if dev in seen:
            continue
        seen.add(dev)
        major, _, minor = (cc or "").partition(".")
        d = {"id": dev, "name": name, "totalGlobalMem": mem, "numSms": sms}
        if major.isdigit():
            d["computeMajor"], d["computeMinor"] = int(major), int(minor or 0)
        out.append(d)
    return out


def _metadata(con, procs, single, gpu_pid, cpu_pid) -> list[dict]:
    ev = []
    hosts = dict(((r, p), h) for r, p, h in con.execute("SELECT run_id, pid, host FROM processes").fetchall())
    for run_id, pid in procs:
        label = f"pid {pid}" + (f" ({hosts[(run_id, pid)]})" if hosts.get((run_id, pid)) else "")
        cp = cpu_pid(run_id, pid)
        ev.append({"name": "process_name", "ph": "M", "pid": cp, "tid": 0, "args": {"name": label}})
        ev.append({"name": "process_labels", "ph": "M", "pid": cp, "tid": 0, "args": {"labels": "CPU"}})
        for (dev,) in con.execute("SELECT DISTINCT device_id FROM gpu_activities WHERE run_id = ? "
                                  "AND pid = ? ORDER BY 1", [run_id, pid]).fetchall():
            gp = gpu_pid(run_id, pid, dev)
            ev.append({"name": "process_name", "ph": "M", "pid": gp, "tid": 0,
                       "args": {"name": label if not single else "GPU"}})
            ev.append({"name": "process_labels", "ph": "M", "pid": gp, "tid": 0,
                       "args": {"labels": f"GPU {dev}"}})
    return ev


def _ranges(b, base, gpu_pid, cpu_pid, counts) -> list[dict]:
    ev = []
    for run_id, pid, rid, name, dom, tid, s, e, kind, attrs in zip(
            b["run_id"], b["pid"], b["range_id"], b["name"], b["domain"], b["thread_id"],
            b["start_ns"], b["end_ns"], b["kind"], b["attrs"]):
        if e is None:
            continue
        if dom == "gpu_user_annotation":
            a = json.loads(attrs) if attrs else {}
            ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": name,
                       "pid": gpu_pid(run_id, pid, a.get("device", 0)), "tid": a.get("stream", tid),
                       "ts": _us(s, base), "dur": (e - s) / 1000,
                       "args": {"device": a.get("device"), "stream": a.get("stream")}})
            continue
        cat = "user_annotation" if kind == "step" else \
            _DOMAIN_CAT.get(dom) or ("cpu_op" if kind == "op" else "user_annotation")
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": cpu_pid(run_id, pid), "tid": tid,
                   "ts": _us(s, base), "dur": (e - s) / 1000, "args": {"External id": rid}})
    counts["ranges"] = counts.get("ranges", 0) + len(ev)
    return ev


def _calls(b, base, cpu_pid, counts) -> list[dict]:
    ev = []
    for run_id, pid, tid, kind, cbid, name, corr, s, e, rid in zip(
            b["run_id"], b["pid"], b["thread_id"], b["api_kind"], b["cbid"], b["name"],
            b["correlation_id"], b["start_ns"], b["end_ns"], b["range_id"]):
        cp = cpu_pid(run_id, pid)
        args = {"correlation": corr, "External id": rid}
        if cbid is not None:
            args["cbid"] = cbid
        ts = _us(s, base)
        ev.append({"ph": "X", "cat": "cuda_driver" if kind == "driver" else "cuda_runtime",
                   "name": name, "pid": cp, "tid": tid, "ts": ts, "dur": (e - s) / 1000, "args": args})
        if corr is not None:
            ev.append({"ph": "s", "id": corr, "pid": cp, "tid": tid, "ts": ts, "cat": "ac2g",
                       "name": "ac2g"})
    counts["api_calls"] = counts.get("api_calls", 0) + len(b["start_ns"])
    return ev


def _gpu_event(cat, name, run_id, pid, dev, ctx, stream, corr, s, e, op, base, gpu_pid, extra, ev):
    gp = gpu_pid(run_id, pid, dev)
    ts = _us(s, base)
    args = {"device": dev, "context": ctx, "stream": stream, "correlation": corr,
            "External id": op}
    args.update(extra)
    ev.append({"ph": "X", "cat": cat, "name": name, "pid": gp, "tid": stream, "ts": ts,
               "dur": (e - s) / 1000, "args": args})
    if corr is not None:
        ev.append({"ph": "f", "id": corr, "pid": gp, "tid": stream, "ts": ts, "cat": "ac2g",
                   "name": "ac2g", "bp": "e"})


def _common(b):
    return zip(b["run_id"], b["pid"], b["device_id"], b["context_id"], b["stream_id"],
               b["correlation_id"], b["start_ns"], b["end_ns"], b["op_id"])


def _kernels(b, base, gpu_pid, counts):
    ev = []
    for row, name, gx, gy, gz, bx, by, bz, reg, smem in zip(
            _common(b), b["name"], b["grid_x"], b["grid_y"], b["grid_z"], b["block_x"],
            b["block_y"], b["block_z"], b["registers"], b["static_smem"]):
        extra = {"registers per thread": reg, "shared memory": smem}
        if gx is not None:
            extra["grid"] = [gx, gy, gz]
        if bx is not None:
            extra["block"] = [bx, by, bz]
        _gpu_event("kernel", name, *row, base, gpu_pid, extra, ev)
    counts["kernels"] = counts.get("kernels", 0) + len(b["start_ns"])
    return ev


def _memcpys(b, base, gpu_pid, counts):
    ev = []
    for row, kind, src, dst, nbytes in zip(_common(b), b["copy_kind"], b["src_kind"],
                                            b["dst_kind"], b["bytes"]):
        s, e = row[6], row[7]
        bw = nbytes / (e - s) if nbytes is not None and e > s else 0.0
        name = f"Memcpy {kind} ({_MEM.get(src, 'Unknown')} -> {_MEM.get(dst, 'Unknown')})"
        _gpu_event("gpu_memcpy", name, *row, base, gpu_pid,
                   {"bytes": nbytes, "memory bandwidth (GB/s)": bw}, ev)
    counts["memcpys"] = counts.get("memcpys", 0) + len(b["start_ns"])
    return ev


def _memsets(b, base, gpu_pid, counts):
    ev = []
    for row, kind, nbytes in zip(_common(b), b["memory_kind"], b["bytes"]):
        s, e = row[6], row[7]
        bw = nbytes / (e - s) if nbytes is not None and e > s else 0.0
        _gpu_event("gpu_memset", f"Memset ({_MEM.get(kind, 'Unknown')})", *row, base, gpu_pid,
                   {"bytes": nbytes, "memory bandwidth (GB/s)": bw}, ev)
    counts["memsets"] = counts.get("memsets", 0) + len(b["start_ns"])
    return ev


def _syncs(b, base, gpu_pid, counts):
    ev = []
    for row, st in zip(_common(b), b["sync_type"]):
        row = list(row)
        if row[4] is None:
            row[4] = -1
        _gpu_event("cuda_sync", _SYNC_NAME.get(st, "Sync"), *row, base, gpu_pid, {}, ev)
    counts["syncs"] = counts.get("syncs", 0) + len(b["start_ns"])
    return ev
