"""Export a cuptiprof file as a Chrome trace (JSON, optionally gzip) for Perfetto UI and
chrome://tracing, in the Kineto dialect: the categories torch.profiler writes (`kernel`,
`gpu_memcpy`, `cuda_runtime`, `cpu_op`, `user_annotation`, `[memory]` instants, ...), GPU rows
on a process per device with a thread per stream, and `ac2g` flow arrows from each launching
call to its GPU work. The `logs` table's records are instants on their thread's track in a
category of cuptiprof's own (`cuptiprof_log`: the message as the name, args level, logger and
the step as recorded), which Perfetto shows, Kineto readers skip and the importer reads back.

Several processes (a merged file) get pids of their own in the trace (GPU rows on a pid per
process and device), their correlation ids moved apart, and a `cuptiprofProcesses` key that
lets the importer take them apart again (Kineto readers ignore it).

An export of some steps (--steps) holds their rows and every other range that overlaps them in
time, unclipped (a range around the loop); steps and warm-ups of other numbers stay out, and
so do ranges of theirs that began during those steps (another thread's steps). Exports of other
steps of the same process, imported together, are that one process again: what `cuptiprofRun`
and `cuptiprofProcess` (or `cuptiprofProcesses`) say tells them apart from other processes, and
the External ids (range ids as recorded) a range that several hold (kineto.import_kineto).

Steps are written as `ProfilerStep#N` ranges (torch.profiler's name, which the importer reads
as steps), whatever the program called them. A warm-up step is not one: it keeps its name, with
args `"cuptiprof kind": "warmup"` and `"cuptiprof step"` that the importer reads back. A range
never closed ends at the export's last time (of any record it holds: GPU work, call, range, log,
allocation or free), with `"cuptiprof open": 1`, and is imported back
without an end. A GPU row whose launching call is not in the export (a run recorded without API
calls, a sync) says its step in `"cuptiprof step"` too, and its innermost range (by range_id,
as the ranges' External ids) in `"cuptiprof range"`: the importer takes both from a row's
launching call. A GPU row whose range is not its call's (a framework NVTX range the call's
record does not name) says its range too. A GPU row's CUDA graph and graph node are Kineto's
"graph id" and "graph node id", a peer copy's devices Kineto's "fromDevice" and "toDevice"
(the importer reads cuptiprof's earlier keys for them too: "cuptiprof graph", "cuptiprof graph
node", "cuptiprof src device", "cuptiprof dst device"). Columns Kineto has no key for are
args of cuptiprof's own as well ("cuptiprof async", "cuptiprof value", "cuptiprof return
code", "cuptiprof pool", a [memory] instant's "cuptiprof correlation" and, other than
'device', its "cuptiprof kind"), and what the `processes` table says of each process (how it ended, its
command line, start and end) is a top-level key (`cuptiprofProcess`, or per process in
`cuptiprofProcesses`), as are the run of an export of one process (`cuptiprofRun`; each
process's in `cuptiprofProcesses`; its wall-clock `startTime` in ISO 8601 with its UTC offset)
and the data_quality rows of the runs exported (`cuptiprofDataQuality`; of an export of some
steps, those of the processes it holds rows of and of their runs as a whole), which an import
adds back beside its own. An export of some steps of several processes names each in
`cuptiprofProcesses`, those it holds no row of too (so that exports of other steps of the file
import as its runs, in its order); the importer makes no process of those. An export of every
row says the processes of its runs that recorded no row (`cuptiprofQuietProcesses`: what the
`processes` table says of them), which an import adds back. The import refuses these keys
hand-edited or damaged in one line naming the key: a value of the wrong type, a `startTime`
without its offset (the time it names is not known) or not ISO 8601, a data_quality entry
without its `check`, an integer beyond the column it goes to (64 bits for times, counts and
values, 32 for pids, ranks (distributedInfo's too) and exit statuses).

Timestamps are microseconds relative to `baseTimeNanoseconds`, written as exact decimals with
three places so that every nanosecond survives (absolute epoch microseconds in a double would
not); cuptiprof's Kineto importer reads them back exactly from their text, also for a merged
file whose processes ran on clocks far apart (an nsys import's session clock beside an epoch
clock).

DuckDB builds each event's JSON text (one query per table, `_EVENTS`); Python copies each Arrow
batch's text buffer into the file as it is, so no Python object is made per event and memory
stays at a few batches. `.gz` output goes through ISA-L's deflate (zlib where isal is missing).
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuptiprof.errors import InputError
from cuptiprof.interop.kineto import LOG_CATEGORY, _tid_number
from cuptiprof.outputs import check_output, temp_beside
from cuptiprof.store.files import first_row

try:  # ISA-L level 2: ~25x faster than zlib -9 for a ~40% larger file (BENCHMARKS.md)
    from isal import igzip as _gzip
    _GZIP_LEVEL = 2  # level 1 is as small, 0 ~25% larger, 3 larger and slower on these traces
except ImportError:  # pragma: no cover - a platform without isal wheels
    _gzip = gzip
    _GZIP_LEVEL = 6

# The `cuptiprofLinks` key's value: each range's "External id" is its range_id, each API call's
# the range_id of the innermost range open on its thread, each GPU row's its op's. A trace
# with it is imported with the step, range and op links it was exported with, not by time.
LINKS = "range_id"

BATCH = 10_000  # rows per Arrow batch: a few MB of text (larger batches cost memory, not time)
SEP = ",\n"  # between events; every event's text starts with it


class _Sql(str):
    """SQL expression whose value is JSON text (never NULL)."""


def export_chrome(prof, out: str | os.PathLike, *, force: bool = False) -> dict:
    """Write `prof`'s rows to `out` (.json or .json.gz): every row, or those of the steps chosen
    (`prof.step_range`). Returns counts."""
    out = check_output(out, inputs=[prof.path], force=force)
    # A timeline shows all there is (warm-up, work between steps); --steps caps it.
    where = prof.step_filter if prof.step_range is not None else "TRUE"
    con = prof.con
    wheres = {"ranges": _ranges_where(con, where) if prof.step_range is not None else where}
    procs = con.execute("SELECT DISTINCT run_id, pid FROM (SELECT run_id, pid FROM gpu_activities "
                        "UNION ALL SELECT run_id, pid FROM ranges UNION ALL "
                        "SELECT run_id, pid FROM api_calls UNION ALL SELECT run_id, pid FROM logs "
                        "UNION ALL SELECT run_id, pid FROM memory_events) "
                        "ORDER BY 1, 2").fetchall()
    streams = _stream_tids(con)
    lanes = _lanes(con, procs, streams)
    # the GPU pids one process's rows would take (rows of no device: -1), which its own pid
    # must not be
    pids = _Pids(procs, {-1 if d is None else d for d in lanes[procs[0]]}
                 if len(procs) == 1 else ())
    # flow ids (_fid) of one correlation id, that id + k * stride, stay apart from every other
    # id's: the stride is above twice the largest correlation id as moved (several processes')
    ids = first_row(con.execute(
        "SELECT max(abs(c)) FROM (SELECT max(abs(correlation_id)) c FROM api_calls UNION ALL "
        "SELECT max(abs(correlation_id)) FROM gpu_activities)"))[0] or 0
    pids.flow_stride = 1 << max(32, (2 * (int(ids) + len(procs) * _ID_STRIDE) + 1).bit_length())
    base_row = first_row(con.execute(
        f"SELECT min(s), max(e) FROM (SELECT min(start_ns) s, max(end_ns) e FROM gpu_activities "
        f"WHERE {where} UNION ALL SELECT min(start_ns), max(coalesce(end_ns, start_ns)) "
        f"FROM ranges WHERE {wheres['ranges']} UNION ALL SELECT min(start_ns), max(end_ns) FROM api_calls "
        f"WHERE {where} UNION ALL SELECT min(time_ns), max(time_ns) FROM logs WHERE {where} "
        f"UNION ALL SELECT min(time_ns), max(time_ns) FROM memory_events WHERE {where})"
    ))
    base = (int(base_row[0]) // 1_000_000) * 1_000_000 if base_row[0] is not None else 0
    last = int(base_row[1]) if base_row[1] is not None else base

    tmp = temp_beside(out)
    counts: dict[str, int] = {}
    try:
        # pids are the file's processes' (an export of other steps numbers them alike);
        # names, those of the processes, devices and streams the export holds
        held = _held(con, where, wheres["ranges"]) if prof.step_range is not None else set(procs)
        with _open(tmp, out.name if out.name.lower().endswith(".gz") else None) as fh:
            fh.write(_head(con, base, pids, procs, lanes, [p for p in procs if p in held],
                           _quiet(con, procs) if prof.step_range is None else [],
                           some=prof.step_range is not None))
            sink = _Sink(fh)
            if prof.step_range is not None:
                meta = _metadata(con, [p for p in procs if p in held], pids,
                                 _lanes(con, procs, streams, where, wheres["ranges"]))
            else:
                meta = _metadata(con, procs, pids, lanes)
            sink.write("".join(SEP + msgspec.json.encode(e).decode() for e in meta).encode(), len(meta))
            for table in _EVENTS:
                counts[table] = _write_table(con, table, wheres.get(table, where), base, last,
                                             pids, sink, streams)
            fh.write(b"\n]}\n")
        if not sink.events:   # a trace without events: nothing a viewer or `import` can read
            raise InputError(f"{prof.path}: nothing to export (no GPU activity, range, API call "
                             "or log record); no trace written")
        os.replace(tmp, out)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    return {"events": sink.events, **counts}


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


@contextlib.contextmanager
def _open(path: Path, gz_name: str | None):
    """The output file: written in large blocks, so no buffering of our own. gz_name: gzip it,
    recording that name (the output's, not the temporary one written to) in its header, which
    `gunzip -N` restores and `file` shows."""
    with open(path, "wb") as raw:
        if gz_name is None:
            yield raw
            return
        with _gzip.GzipFile(filename=gz_name, mode="wb", compresslevel=_GZIP_LEVEL,
                            fileobj=raw) as fh:
            yield fh


class _Sink:
    """Appends event texts that each start with SEP; drops the first SEP of the array."""

    def __init__(self, fh):
        self.fh = fh
        self.events = 0

    def write_strings(self, arr: pa.Array, n: int) -> None:
        """Write the characters of a string array as they lie in its Arrow data buffer."""
        if arr.null_count:
            raise RuntimeError("chrome export: an event's text is NULL (a value left unwrapped)")
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            arr = arr.cast(pa.large_string())
        _, offsets, data = arr.buffers()
        width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
        offs = np.frombuffer(offsets, width, count=len(arr) + 1, offset=arr.offset * width().itemsize)
        self.write(memoryview(data)[int(offs[0]):int(offs[-1])], n)

    def write(self, text, n: int) -> None:
        """Write `n` events' text (bytes-like)."""
        if not n:
            return
        self.fh.write(text[len(SEP):] if not self.events else text)
        self.events += n


def _write_table(con, table: str, where: str, base: int, last: int, pids: _Pids,
                 sink: _Sink, streams: dict[str, int] | None = None) -> int:
    """Stream one table's events to `sink`; returns its row count. `last`: the export's last
    time, where a range still open ends; `streams`: see _stream_tids."""
    src = _scoped(table, where, pids)
    sql = (_ranges(src, base, pids, last, streams) if table == "ranges"
           else _EVENTS[table](src, base, pids))
    rows = 0
    reader = con.sql(sql).to_arrow_reader(BATCH)
    try:
        for rb in reader:
            rows += rb.num_rows
            sink.write_strings(rb.column(0), _events_in(rb))
    finally:
        reader.close()
    return rows


def _events_in(rb: pa.RecordBatch) -> int:
    """Events in a batch: one per row plus one per flow arrow (column `flow`)."""
    return rb.num_rows + (pc.sum(rb.column(1)).as_py() or 0)


# -- process ids ----------------------------------------------------------------------------

class _Pids:
    """Kineto's pid of each row. One process: its own pid for CPU rows, the device ordinal for
    GPU rows (as torch.profiler writes), or where its pid is one of its devices' ordinals (a
    container's PID 1 on GPU 1: one process, and threads and streams of one number one track,
    in a viewer) GPU_APART + the ordinal, and rows of no device GPU_APART - 1 (an imported
    process of pid -1 would share theirs, -1, otherwise); the importer reads a GPU row's
    device from its args (-1 written there for no device where the pid does not say it).
    Several: numbers by the process's index (in run, pid order) so that two processes'
    devices 0 stay apart."""

    GPU_APART = 1_000_000
    flow_stride = 1 << 32   # see _fid; export_chrome sets it above the export's ids

    def __init__(self, procs: list[tuple], devices=()):
        self.single = len(procs) <= 1
        self.index = {p: i for i, p in enumerate(procs)}
        self.own = procs[0][1] if self.single and procs else None
        self.gpu_base = self.GPU_APART if self.own is not None and self.own in devices else 0
        # Perfetto UI reads a negative pid as none (pid 0): one that would be negative (the CPU
        # ops of a run without a GPU, device -1, and rows of no device; an imported process of
        # a negative pid) is written as an unused positive one, which `written` maps back to
        # what it stands for (the trace's cuptiprofNegativeIds, read back by the importer)
        self.written: dict[int, int] = {}
        taken = {d + self.gpu_base for d in devices if d is not None and d + self.gpu_base >= 0}
        if self.own is not None and self.own >= 0:
            taken.add(self.own)
        free = (p for p in range(self.GPU_APART - 1, 0, -1) if p not in taken)
        self.no_gpu = next(free) if self.single and not self.gpu_base else None
        if self.no_gpu is not None:
            self.written[self.no_gpu] = -1
        self.own_out = self.own
        if self.own is not None and self.own < 0:
            self.own_out = next(free)
            self.written[self.own_out] = self.own

    def gpu(self, run_id, pid, dev) -> int:
        if self.single:
            p = (-1 if dev is None else dev) + self.gpu_base
            return self.no_gpu if p < 0 and self.no_gpu is not None else p
        dev = -1 if dev is None else dev
        return 1_000_000 + self.index.get((run_id, pid), 0) * 1000 + dev

    def cpu(self, run_id, pid) -> int:
        return self.own_out if self.single else 2_000_000 + self.index.get((run_id, pid), 0)

    # The same in SQL, over a row that has run_id, pid and (after `join`) p_idx.
    def gpu_sql(self, dev: str) -> str:
        dev = f"coalesce({dev}, -1)"
        if self.single and self.gpu_base:
            return f"({self.gpu_base} + {dev})"
        if self.single:
            return f"CASE WHEN {dev} < 0 THEN {self.no_gpu} ELSE {dev} END"
        return f"(1000000 + coalesce(p_idx, 0) * 1000 + {dev})"

    def cpu_sql(self) -> str:
        if self.single:
            return "pid" if self.own_out == self.own else _lit(self.own_out)
        return "(2000000 + coalesce(p_idx, 0))"

    def join(self) -> str:
        if self.single:
            return ""
        rows = ", ".join(f"({_lit(r)}, {_lit(p)}, {i})" for (r, p), i in self.index.items())
        # IS NOT DISTINCT FROM: a NULL run_id or pid finds its index, as in `gpu` and `cpu`
        return (f" LEFT JOIN (VALUES {rows}) _p(p_run, p_pid, p_idx) "
                "ON _p.p_run IS NOT DISTINCT FROM _t.run_id AND _p.p_pid IS NOT DISTINCT FROM _t.pid")


def _lit(v) -> str:
    return "NULL" if v is None else str(int(v))


# Id columns each table writes: correlation ids tie calls to their GPU work (flows, and the
# importer's links), External ids tie both to ranges; all are numbered per process.
_IDS = {"ranges": ("range_id",), "api_calls": ("correlation_id", "range_id"),
        "memory_events": ("correlation_id",), "logs": ()}
_GPU_IDS = ("correlation_id", "op_id", "range_id")
_ID_STRIDE = 1 << 32   # CUPTI correlation ids are 32-bit


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


# -- JSON text in SQL -------------------------------------------------------------------------
# A query's event is a list of pieces: constant JSON text (str) and _Sql expressions, joined by
# one concat() per row. Every _Sql value is wrapped so that NULL becomes `null`: concat() would
# drop a NULL silently and leave invalid JSON.

def _q(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _val(x: str) -> _Sql:
    """A number (or JSON value) column as JSON."""
    return _Sql(f"coalesce(CAST({x} AS VARCHAR), 'null')")


def _str(x: str) -> _Sql:
    """A string as JSON (quotes, backslashes and control characters escaped)."""
    return _Sql(f"coalesce(CAST(to_json({x}) AS VARCHAR), 'null')")


def _us(ns: str) -> _Sql:
    """`ns` nanoseconds as exact microseconds with three decimals (integer arithmetic: a
    double would round away nanoseconds far from the base)."""
    return _Sql(f"concat(CASE WHEN {ns} < 0 THEN '-' END, abs({ns}) // 1000, '.', "
                f"lpad(CAST(abs({ns}) % 1000 AS VARCHAR), 3, '0'))")


def _case(col: str, texts: dict[str, str], default: str) -> _Sql:
    """`col` mapped through `texts` (else `default`), as a JSON string."""
    whens = " ".join(f"WHEN {_q(k)} THEN {_q(json.dumps(v))}" for k, v in texts.items())
    return _Sql(f"CASE {col} {whens} ELSE {_q(json.dumps(default))} END")


def _optional(key: str, cond: str, value: str) -> tuple:
    """An object member written only where `cond` holds (as the Python writer left keys out)."""
    return None, _Sql(f"CASE WHEN {cond} THEN concat({_q(',' + json.dumps(key) + ':')}, {value}) "
                      "ELSE '' END")


def _obj(*pairs) -> list:
    """Pieces of a JSON object: each value is an _Sql expression, a list of pieces (a nested
    object) or a constant; a (None, _Sql) pair is an `_optional` member."""
    pieces: list = ["{"]
    for i, (key, value) in enumerate(pairs):
        if key is not None:
            pieces.append(("," if i else "") + json.dumps(key) + ":")
        if isinstance(value, _Sql):
            pieces.append(value)
        elif isinstance(value, list):
            pieces.extend(value)
        else:
            pieces.append(json.dumps(value))
    pieces.append("}")
    return pieces


def _concat(pieces: list) -> str:
    """One SQL concat() of the pieces, adjacent constants merged."""
    args: list[str] = []
    text = ""
    for p in pieces:
        if isinstance(p, _Sql):
            if text:
                args.append(_q(text))
                text = ""
            args.append(p)
        else:
            text += p
    if text:
        args.append(_q(text))
    return f"concat({', '.join(args)})"


def _select(source: str, cols: dict[str, str], event: list, flow: list | None = None,
            where: str = "", flows: str | None = None) -> str:
    """Columns `text`: SEP + the event, and SEP + the flow event where the row has an arrow's
    end (`_fl`); `flow`: 1 where it does. `flows`: the flow events' text instead (each with its
    SEP), `_n` of them. `cols` are computed once per row, inside."""
    inner = ", ".join(f"{expr} AS {name}" for name, expr in cols.items())
    pieces = [SEP, *event]
    has_flow = "0"
    if flows is not None:
        has_flow = "CASE WHEN _fl THEN _n ELSE 0 END"
        pieces.append(_Sql(f"CASE WHEN _fl THEN {flows} ELSE '' END"))
    elif flow is not None:
        has_flow = "CAST(_fl AS INTEGER)"
        pieces.append(_Sql(f"CASE WHEN _fl THEN {_concat([SEP, *flow])} ELSE '' END"))
    return (f"SELECT {_concat(pieces)} AS text, {has_flow} AS flow "
            f"FROM (SELECT *, {inner} FROM {source}{where})")


def _times(base: int) -> dict[str, str]:
    return {"_ts": _us(f"(start_ns - {base})"), "_dur": _us("(end_ns - start_ns)")}


def _x(cat, name: _Sql, pid: _Sql, tid: _Sql, args: list) -> list:
    return _obj(("ph", "X"), ("cat", cat), ("name", name), ("pid", pid), ("tid", tid),
                ("ts", _Sql("_ts")), ("dur", _Sql("_dur")), ("args", args))


def _flow(ph: str, fid: _Sql, pid: _Sql, tid: _Sql, *extra) -> list:
    """An `ac2g` arrow's end on this row ("s" on the call, "f" on its GPU work)."""
    return _obj(("ph", ph), ("id", fid), ("pid", pid), ("tid", tid),
                ("ts", _Sql("_ts")), ("cat", "ac2g"), ("name", "ac2g"), *extra)


# -- one query per table ------------------------------------------------------------------------

def _ranges(source: str, base: int, pids: _Pids, last: int | None = None,
            streams: dict[str, int] | None = None) -> str:
    # GPU user annotations sit on their device's stream: attrs is {"device": d, "stream": s}.
    gpu = "domain = 'gpu_user_annotation'"
    attrs = "CASE WHEN json_valid(attrs) THEN attrs END"
    dev, stream = (f"json_extract({attrs}, '$.{k}')" for k in ("device", "stream"))
    stream = _stream_sql(stream, streams or {})
    cat = (f"CASE WHEN {gpu} THEN 'gpu_user_annotation' WHEN kind = 'step' THEN 'user_annotation' "
           "WHEN domain IN ('cpu_op', 'user_annotation', 'python_function') THEN domain "
           "WHEN kind = 'op' THEN 'cpu_op' ELSE 'user_annotation' END")
    gpu_pid = pids.gpu_sql(f"CASE WHEN {dev} IS NULL THEN 0 ELSE TRY_CAST({dev} AS BIGINT) END")
    # an annotation of no device is drawn on device 0's pid, which the importer reads as its
    # device where the args name none: where that pid is not the ordinal, args name device 0
    # and its step as recorded, that of the host annotation it mirrors (by time on the GPU,
    # the importer would put it in the step its work ran in, often a later one)
    gpu_args = _concat(_obj(("device", _val(f"coalesce({dev}, '0')" if pids.single and
                                            pids.gpu_base else dev)), ("stream", _val(stream)),
                            _optional("cuptiprof step", "step IS NOT NULL", _val("step"))))
    # What the category cannot say, in args of cuptiprof's own (Kineto readers show them and
    # read nothing into them): a domain other than the category (an NVTX domain, 'cuptiprof';
    # null: NVTX's default domain), and a warm-up step, which is not a step (no ProfilerStep#:
    # tools that read traces would count it as one) but a range under its own name.
    host_args = _concat(_obj(
        ("External id", _val("range_id")),
        _optional("cuptiprof domain", "domain IS DISTINCT FROM _cat", _str("domain")),
        _optional("cuptiprof kind", "kind = 'warmup'", "'\"warmup\"'"),
        _optional("cuptiprof step", "kind = 'warmup' AND step IS NOT NULL", _val("step")),
        _optional("cuptiprof open", "end_ns IS NULL", "'1'")))
    # A range never closed (one entered around a serving loop and never left, say) ends at the
    # export's last time, which holds what ran inside it; "cuptiprof open" says it had no end.
    end = f"coalesce(end_ns, greatest({last if last is not None else 'start_ns'}, start_ns))"
    # an annotation's track is its stream's, as its kernels' (_track: a negative stream as an
    # unsigned 32-bit number, which the importer maps back)
    s = f"TRY_CAST({stream} AS BIGINT)"
    cols = {"_ts": _us(f"(start_ns - {base})"), "_dur": _us(f"({end} - start_ns)"),
            "_cat": cat,
            "_pid": f"CASE WHEN {gpu} THEN {gpu_pid} ELSE {pids.cpu_sql()} END",
            "_tid": f"CASE WHEN {gpu} THEN coalesce(CAST(CASE WHEN {s} IS NOT NULL THEN "
                    f"{_track(s)} END AS VARCHAR), CAST({stream} AS VARCHAR), {_val(_TID)}) "
                    f"ELSE {_val(_TID)} END",
            "_args": f"CASE WHEN {gpu} THEN {gpu_args} ELSE {host_args} END"}
    # A step is ProfilerStep#N whatever the program called it: how torch.profiler marks steps,
    # and what the importer reads back as steps.
    name = "CASE WHEN kind = 'step' AND step IS NOT NULL THEN concat('ProfilerStep#', step) ELSE name END"
    event = _x(_Sql("concat('\"', _cat, '\"')"), _str(name), _val("_pid"), _Sql("_tid"),
               [_Sql("_args")])
    return _select(source, cols, event)


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


def _api_calls(source: str, base: int, pids: _Pids) -> str:
    cols = {**_times(base), "_pid": pids.cpu_sql()}
    args = _obj(("correlation", _val("correlation_id")), ("External id", _val("range_id")),
                _optional("cbid", "cbid IS NOT NULL", "cbid"),
                _optional("cuptiprof return code", "return_code IS NOT NULL", _val("return_code")))
    cat = _case("api_kind", {"driver": "cuda_driver"}, "cuda_runtime")
    event = _x(cat, _str("name"), _val("_pid"), _val(_TID), args)
    # one "s" per GPU row of the call: flow ids as in _fid, m from 0 to _n - 1
    start = _flow("s", _Sql(f"CAST(correlation_id + {pids.flow_stride} * m AS VARCHAR)"),
                  _val("_pid"), _val(_TID))
    one = _flow("s", _Sql("correlation_id"), _val("_pid"), _val(_TID))   # _n = 1: most calls
    flows = (f"CASE WHEN _n = 1 THEN {_concat([SEP, *one])} ELSE array_to_string(list_transform("
             f"range(_n), lambda m: {_concat([SEP, *start])}), '') END")
    return _select(source, cols, event, flows=flows)


# The CUDA graph a kernel, copy or memset was launched from, under Kineto's keys (written by
# Kineto built with CUDA 12 on; left out where none, which Kineto says as 0); and, what Kineto
# has no key for, in args of cuptiprof's own that the importer reads back: a copy's
# asynchrony, a memset's value, a pool allocation (0 or 1 for a boolean).
_GRAPH = (_optional("graph id", "graph_id IS NOT NULL", _val("graph_id")),
          _optional("graph node id", "graph_node_id IS NOT NULL", _val("graph_node_id")))


def _flag(key: str, col: str) -> tuple:
    return _optional(key, f"{col} IS NOT NULL", f"CASE WHEN {col} THEN '1' ELSE '0' END")


def _gpu(source: str, base: int, pids: _Pids, cat: str, name: _Sql, extra: tuple,
         stream: str = "stream_id") -> str:
    """Kernels, copies, memsets and syncs: one frame, their own name and extra args (the
    stream as recorded; the track of a row without one is -1)."""
    cols = {**_times(base), "_pid": pids.gpu_sql("device_id"), "_stream": stream,
            "_track": _track(stream)}
    # A row whose launching call is not in the export (API calls not recorded, or a sync's)
    # says its step and innermost range, which the importer would otherwise take from that
    # call; so does one whose range is not its call's (an NVTX range the call does not name).
    # no device: -1 where the pid is not -1, which the importer would read instead
    dev = "coalesce(device_id, -1)" if pids.single and pids.gpu_base else "device_id"
    args = _obj(("device", _val(dev)), ("context", _val("context_id")),
                ("stream", _val("_stream")), ("correlation", _val("correlation_id")),
                ("External id", _val("op_id")), *extra,
                _optional("cuptiprof step", "step IS NOT NULL AND NOT _call", _val("step")),
                _optional("cuptiprof range", "range_id IS NOT NULL AND (NOT _call OR _apart)",
                          _val("range_id")))
    event = _x(cat, name, _val("_pid"), _val("_track"), args)
    fid = _Sql(f"CAST(correlation_id + {pids.flow_stride} * _m AS VARCHAR)")
    return _select(source, cols, event, _flow("f", fid, _val("_pid"), _val("_track"), ("bp", "e")))


def _kernels(source: str, base: int, pids: _Pids) -> str:
    def dims(key: str) -> tuple:  # [x, y, z], left out unless all three are known (Kineto
        # readers, cuptiprof's own import included, take three integers or no grid at all)
        xyz = ", ',', ".join(_val(f"{key}_{c}") for c in "xyz")
        known = " AND ".join(f"{key}_{c} IS NOT NULL" for c in "xyz")
        return _optional(key, known, f"'[', {xyz}, ']'")
    # Kineto's "shared memory" is static plus dynamic; the dynamic part is said apart, so
    # that the importer splits the sum again
    smem = ("CASE WHEN static_smem IS NOT NULL OR dynamic_smem IS NOT NULL THEN "
            "coalesce(static_smem, 0) + coalesce(dynamic_smem, 0) END")
    return _gpu(source, base, pids, "kernel", _str("name"),
                (("registers per thread", _val("registers")), ("shared memory", _val(smem)),
                 _optional("cuptiprof dynamic smem", "static_smem IS NOT NULL AND dynamic_smem "
                           "IS NOT NULL", _val("dynamic_smem")),
                 dims("grid"), dims("block"), *_GRAPH))


# CUPTI's memory kinds in Kineto's words (the importer reads them back)
_MEM = {"pageable": "Pageable", "pinned": "Pinned", "device": "Device", "array": "Array",
        "managed": "Managed", "device_static": "Device Static", "managed_static": "Managed Static"}


def _mem(col: str) -> str:
    whens = " ".join(f"WHEN {_q(k)} THEN {_q(v)}" for k, v in _MEM.items())
    return f"CASE {col} {whens} ELSE 'Unknown' END"


def _bandwidth() -> tuple:
    """bytes and bytes/ns (= GB/s); 0.0 where the duration is not positive."""
    bw = ("CASE WHEN bytes IS NOT NULL AND end_ns > start_ns THEN bytes / (end_ns - start_ns) "
          "ELSE 0.0 END")
    return (("bytes", _val("bytes")),
            ("memory bandwidth (GB/s)", _Sql(f"CAST(to_json(CAST({bw} AS DOUBLE)) AS VARCHAR)")))


def _memcpys(source: str, base: int, pids: _Pids) -> str:
    name = (f"concat('Memcpy ', coalesce(copy_kind, 'None'), ' (', {_mem('src_kind')}, ' -> ', "
            f"{_mem('dst_kind')}, ')')")
    # a peer copy's source and destination devices (NULL for the other copies), under
    # Kineto's keys
    peer = tuple(_optional(key, f"{k}_device_id IS NOT NULL", _val(f"{k}_device_id"))
                 for key, k in (("fromDevice", "src"), ("toDevice", "dst")))
    return _gpu(source, base, pids, "gpu_memcpy", _str(name),
                (*_bandwidth(), *_GRAPH, _flag("cuptiprof async", "is_async"), *peer))


def _memsets(source: str, base: int, pids: _Pids) -> str:
    name = f"concat('Memset (', {_mem('memory_kind')}, ')')"
    return _gpu(source, base, pids, "gpu_memset", _str(name),
                (*_bandwidth(), *_GRAPH,
                 _optional("cuptiprof value", "value IS NOT NULL", _val("value"))))


_SYNC_NAME = {"event_synchronize": "Event Sync", "stream_synchronize": "Stream Sync",
              "context_synchronize": "Context Sync", "stream_wait_event": "Stream Wait Event"}


def _syncs(source: str, base: int, pids: _Pids) -> str:
    # A context-wide sync has no stream: it goes on tid -1.
    return _gpu(source, base, pids, "cuda_sync", _case("sync_type", _SYNC_NAME, "Sync"),
                (_optional("wait_on_cuda_event_id", "cuda_event_id IS NOT NULL",   # Kineto's key
                           _val("cuda_event_id")),),
                stream="coalesce(stream_id, -1)")


def _memory_events(source: str, base: int, pids: _Pids) -> str:
    # torch.profiler's `[memory]` instants (what the importer reads back): on the process's CPU
    # track (no thread is recorded), Device Type 1 (CUDA), Bytes negative for a free.
    cols = {"_ts": _us(f"(time_ns - {base})"), "_pid": pids.cpu_sql()}
    args = _obj(("Device Type", 1), ("Device Id", _val("device_id")), ("Addr", _val("address")),
                ("Bytes", _val("CASE WHEN operation = 'free' THEN -bytes ELSE bytes END")),
                _optional("cuptiprof step", "step IS NOT NULL", _val("step")),
                _flag("cuptiprof pool", "pool"),
                # not Kineto's: the allocating call's correlation id (moved apart with the
                # calls' in an export of several processes), and a memory kind other than
                # 'device', which an import without it takes (a NULL one comes back 'device':
                # the collector always names one)
                _optional("cuptiprof correlation", "correlation_id IS NOT NULL",
                          _val("correlation_id")),
                _optional("cuptiprof kind", "memory_kind IS NOT NULL AND memory_kind <> 'device'",
                          _str("memory_kind")))
    event = _obj(("ph", "i"), ("s", "t"), ("cat", "cpu_instant_event"), ("name", "[memory]"),
                 ("pid", _val("_pid")), ("tid", NO_THREAD), ("ts", _Sql("_ts")), ("args", args))
    return _select(source, cols, event)


def _logs(source: str, base: int, pids: _Pids) -> str:
    # Python logging records: instants on their thread's track in a category of cuptiprof's own
    # (Kineto readers skip categories they do not know; the importer reads them back into
    # `logs`), the message as the name, the step as recorded ("cuptiprof step")
    cols = {"_ts": _us(f"(time_ns - {base})"), "_pid": pids.cpu_sql()}
    args = _obj(("level", _str("level")), ("logger", _str("logger")),
                _optional("cuptiprof step", "step IS NOT NULL", _val("step")))
    event = _obj(("ph", "i"), ("s", "t"), ("cat", LOG_CATEGORY), ("name", _str("message")),
                 ("pid", _val("_pid")), ("tid", _val(_TID)), ("ts", _Sql("_ts")), ("args", args))
    return _select(source, cols, event, where=" WHERE time_ns IS NOT NULL")


# In the order they are written: ranges and calls (CPU), then GPU work, then log records.
_EVENTS = {"ranges": _ranges, "api_calls": _api_calls, "kernels": _kernels, "memcpys": _memcpys,
           "memsets": _memsets, "syncs": _syncs, "memory_events": _memory_events, "logs": _logs}


# -- header and metadata (a few rows: Python) ----------------------------------------------------

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


def _held(con, where: str, ranges_where: str) -> set[tuple]:
    """The processes (run_id, pid) with a row in the export."""
    return set(con.execute(
        f"SELECT DISTINCT run_id, pid FROM (SELECT run_id, pid FROM gpu_activities WHERE {where} "
        f"UNION ALL SELECT run_id, pid FROM ranges WHERE {ranges_where} UNION ALL "
        f"SELECT run_id, pid FROM api_calls WHERE {where} UNION ALL SELECT run_id, pid FROM logs "
        f"WHERE time_ns IS NOT NULL AND {where} UNION ALL SELECT run_id, pid FROM memory_events "
        f"WHERE {where})").fetchall())


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
