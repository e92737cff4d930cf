"""The trace's head (a few rows: Python): Kineto's keys and cuptiprof's own (its processes,
runs, data_quality rows and quiet processes), and the devices it names."""
from __future__ import annotations

import msgspec

from cuptiprof.interop.chrome.json_sql import _lit
from cuptiprof.interop.chrome.pids import _ID_STRIDE, _Pids
from cuptiprof.store.files import first_row


# The `cuptiprofLinks` key's value: each range's "External id" is its range_id, each API call's
# the range_id of the innermost range open on its thread, each GPU row's its op's. A trace
# with it is imported with the step, range and op links it was exported with, not by time.
LINKS = "range_id"


def _head(con, base: int, pids: _Pids, procs: list[tuple], lanes: dict[tuple, dict],
          held: list[tuple], quiet: list[dict], some: bool = False) -> bytes:
    single = pids.single
    # One process's trace says what the file knows of that process, not of another one it holds
    # (a rank that recorded nothing, beside it in a merge): its devices (where none is its own,
    # its run's, another process of it having recorded them; where the run has none either,
    # any the file has; and those of each device it has rows on), rank and host.
    own = "run_id IS NOT DISTINCT FROM ? AND pid IS NOT DISTINCT FROM ?" if procs else "TRUE"
    own_args = list(procs[0]) if procs else []
    devices = (_with_used(con, procs[0], _device_props(con, procs[0])
                          or _device_props(con, procs[0], whole_run=True), lanes[procs[0]])
               if single and procs else []) or _device_props(con)
    head = {"schemaVersion": 1, "baseTimeNanoseconds": base, "displayTimeUnit": "ms",
            "deviceProperties": devices,
            # not Kineto's: the External ids are range ids (see LINKS), which the importer links by
            "cuptiprofLinks": LINKS,
            # not Kineto's: the pids written for negative ones, and negative tids written as
            # unsigned 32-bit numbers (see _Pids and _track), which the importer maps back
            "cuptiprofNegativeIds": {"pids": {str(k): v for k, v in pids.written.items()},
                                     "tids": "uint32"}}
    if not single:   # not Kineto's: what the importer needs to take the processes apart again
        head["cuptiprofProcesses"] = _processes(con, pids, procs, lanes)
    dist = first_row(con.execute("SELECT rank, world_size, local_rank FROM processes WHERE (rank IS NOT NULL "
                                 f"OR local_rank IS NOT NULL) AND {own} LIMIT 1", own_args)) if single else None
    if dist:   # local_rank: not Kineto's; the importer reads it back
        head["distributedInfo"] = {"rank": dist[0], "world_size": dist[1],
                                   **({"local_rank": dist[2]} if dist[2] is not None else {})}
    # runs.host is the writer's: the recording host, but not an imported trace's (it is the
    # host that imported it; an import that restored the run of cuptiprof's export keeps
    # `imported_from` in its settings, not its source: the key, not the text anywhere in them,
    # such as a recorded step function's name)
    host = first_row(con.execute("SELECT coalesce((SELECT any_value(host) FROM processes WHERE host IS NOT "
                                 f"NULL AND {own}), (SELECT any_value(host) FROM runs WHERE host IS NOT NULL AND "
                                 "source NOT IN ('kineto', 'nsys') AND (CASE WHEN json_valid(settings) "
                                 "THEN json_extract(settings, '$.imported_from') END) IS NULL AND "
                                 f"{'run_id IS NOT DISTINCT FROM ?' if procs else 'TRUE'}))",
                                 own_args + own_args[:1]))[0] if single else None
    if host:   # Kineto's key; the importer reads it back
        head["host_name"] = host
    if single and procs:   # not Kineto's: its pid, how it ended, its command, start and end,
        # and its run (the importer reads them back)
        proc = first_row(con.execute(
            "SELECT exit_status, ended_early, command, start_ns, end_ns FROM processes WHERE "
            "run_id IS NOT DISTINCT FROM ? AND pid IS NOT DISTINCT FROM ? LIMIT 1",
            list(procs[0])))
        head["cuptiprofProcess"] = {"pid": procs[0][1], **dict(zip(_PROC_KEYS, proc or ()))}
        run = _runs(con).get(procs[0][0])
        if run:
            head["cuptiprofRun"] = run
    # (of the runs it holds rows of: another run's would go to the one an import makes of it;
    # of some steps, of the processes it holds rows of)
    quality = _quality(con, held, some)
    if quality:   # not Kineto's: what the file does not contain, which an import adds back
        head["cuptiprofDataQuality"] = quality
    if quiet:   # not Kineto's: processes without a row, which an import adds back
        head["cuptiprofQuietProcesses"] = quiet
    return msgspec.json.encode(head)[:-1] + b', "traceEvents": [\n'


def _processes(con, pids: _Pids, procs: list[tuple], lanes: dict[tuple, dict]) -> list[dict]:
    """Per process: its pids in the trace, the amount its ids were moved by, and what the
    `processes` and `devices` tables know of it (of a device it has rows on that it did not
    record, what its run or the file does: see _with_used)."""
    known = {(r[0], r[1]): r[2:] for r in con.execute(
        "SELECT run_id, pid, host, rank, local_rank, world_size, exit_status, ended_early, "
        "command, start_ns, end_ns FROM processes").fetchall()}
    runs = _runs(con)
    out = []
    for run_id, pid in procs:
        i = pids.index[(run_id, pid)]
        host, rank, local_rank, world, *proc = known.get((run_id, pid), (None,) * 9)
        out.append({"pid": pids.cpu(run_id, pid), "gpuPids": pids.gpu(run_id, pid, 0) // 1000 * 1000,
                    "idShift": i * _ID_STRIDE, "originalPid": pid, "host": host, "rank": rank,
                    "localRank": local_rank, "worldSize": world,
                    "devices": _with_used(con, (run_id, pid), _device_props(con, (run_id, pid)),
                                          lanes[(run_id, pid)]),
                    "run": runs.get(run_id),
                    # a process without a row says nothing: the import's own
                    **(dict(zip(_PROC_KEYS, proc)) if (run_id, pid) in known else {})})
    return out


# processes columns Kineto has no key for (exit_status, ended_early, command, start_ns, end_ns)
_PROC_KEYS = ("exitStatus", "endedEarly", "command", "startNs", "endNs")


def _quality(con, procs: list[tuple], some: bool = False) -> list[dict]:
    """The data_quality rows of the runs exported, in the order written: what the file does
    not contain (dropped records, steps an exception ended, ...) is not in a trace of it
    either. An export of some steps (`some`) carries those of the processes `procs` and of
    their runs as a whole (pid NULL): a row of a process it holds no row of would name,
    imported, a process the import does not make."""
    runs = sorted({r for r, _ in procs if r is not None})
    if not runs:
        return []
    keys = ("run", "pid", "check", "subject", "count", "valueNs", "detail")
    held = set(procs)
    return [dict(zip(keys, r)) for r in con.execute(
        "SELECT run_id, pid, check_name, subject, count, value_ns, detail FROM data_quality "
        f"WHERE run_id IN ({', '.join(map(_lit, runs))}) ORDER BY rowid").fetchall()
        if not some or r[1] is None or (r[0], r[1]) in held]


def _quiet(con, procs: list[tuple]) -> list[dict]:
    """The processes of the runs exported that recorded no row (a helper, multiprocessing's
    resource tracker), which the `processes` table lists with how they ended: no event says
    them, so the head does (an export of some steps holds no process it has no row of)."""
    runs = sorted({r for r, _ in procs if r is not None})
    if not runs:
        return []
    keys = ("run", "pid", "host", "rank", "localRank", "worldSize", *_PROC_KEYS)
    have = set(procs)
    return [dict(zip(keys, r)) for r in con.execute(
        "SELECT run_id, pid, host, rank, local_rank, world_size, exit_status, ended_early, "
        f"command, start_ns, end_ns FROM processes WHERE run_id IN ({', '.join(map(_lit, runs))}) "
        "ORDER BY run_id, pid").fetchall() if (r[0], r[1]) not in have]


def _runs(con) -> dict[int, dict]:
    """What each run was (a merged file holds several): the importer makes them runs again."""
    keys = ("id", "label", "source", "status", "command", "startNs", "startTime", "endNs")
    return {r[0]: dict(zip(keys, r)) for r in con.execute(
        "SELECT run_id, label, source, status, command, start_ns, strftime(start_time AT TIME "
        "ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%f+00:00'), end_ns FROM runs").fetchall()}


# devices columns Kineto's deviceProperties have no key for, under keys of cuptiprof's own
# (Kineto readers ignore them; cuptiprof's importer reads them back)
DEVICE_KEYS = {"peak_memory_bw_gbps": "peakMemoryBandwidthGBps", "uuid": "uuid",
               "core_clock_mhz": "coreClockMHz", "memory_clock_mhz": "memoryClockMHz",
               "memory_bus_width_bits": "memoryBusWidthBits", "l2_bytes": "l2CacheBytes",
               "peak_host_link_gbps": "peakHostLinkGBps", "peak_nvlink_gbps": "peakNvlinkGBps"}


def _device_props(con, proc: tuple | None = None, *, whole_run: bool = False) -> list[dict]:
    """Kineto's deviceProperties: of one process (run_id, pid), or the first of each ordinal
    (of the process's run where whole_run, of the file where no process is given)."""
    out = []
    seen = set()
    where = "" if proc is None else f"AND run_id IS NOT DISTINCT FROM {_lit(proc[0])}" + (
        "" if whole_run else f" AND pid IS NOT DISTINCT FROM {_lit(proc[1])}")
    for dev, name, cc, sms, mem, *more in con.execute(
            "SELECT device_id, name, compute_capability, sm_count, memory_bytes, "
            f"{', '.join(DEVICE_KEYS)} FROM devices WHERE kind IN ('gpu', 'cpu') {where} "
            "ORDER BY run_id, pid, device_id").fetchall():
        if dev in seen:
            continue
        seen.add(dev)
        major, _, minor = (cc or "").partition(".")
        d = {"id": dev, "name": name, "totalGlobalMem": mem, "numSms": sms}
        d.update((k, v) for k, v in zip(DEVICE_KEYS.values(), more) if v is not None)
        if major.isdigit():
            d["computeMajor"], d["computeMinor"] = int(major), int(minor or 0)
        out.append(d)
    return out


def _with_used(con, proc: tuple, props: list[dict], used) -> list[dict]:
    """`props` and, for each device of `used` (ordinals) they do not have, the first of its
    ordinal the process's run records, else the file: a process whose GPUs another process of
    its run recorded (rank 0, say) imports back with them named, not as bare ordinals."""
    missing = {d for d in used if d is not None} - {p["id"] for p in props}
    if not missing:
        return props
    props = list(props)
    for more in (_device_props(con, proc, whole_run=True), _device_props(con)):
        for p in more:
            if p["id"] in missing:
                props.append(p)
                missing.discard(p["id"])
    return props
