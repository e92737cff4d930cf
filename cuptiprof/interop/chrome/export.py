"""export_chrome: the queries of an export in order, their text streamed to the output file
(gzip through ISA-L where it is installed)."""
from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuptiprof.errors import InputError
from cuptiprof.interop.chrome.events import _EVENTS, _ranges
from cuptiprof.interop.chrome.head import _head, _quiet
from cuptiprof.interop.chrome.json_sql import SEP
from cuptiprof.interop.chrome.pids import _ID_STRIDE, _Pids
from cuptiprof.interop.chrome.scope import _held, _ranges_where, _scoped
from cuptiprof.interop.chrome.tracks import _lanes, _metadata, _stream_tids
from cuptiprof.outputs import check_output, publish, temp_beside
from cuptiprof.store.files import first_row

try:  # ISA-L level 2: ~25x faster than zlib -9 for a ~40% larger file (BENCHMARKS.md)
    from isal import igzip as _gzip
    _GZIP_LEVEL = 2  # level 1 is as small, 0 ~25% larger, 3 larger and slower on these traces
except ImportError:  # pragma: no cover - a platform without isal wheels
    _gzip = gzip
    _GZIP_LEVEL = 6

BATCH = 10_000  # rows per Arrow batch: a few MB of text (larger batches cost memory, not time)


def export_chrome(prof, out: str | os.PathLike, *, force: bool = False,
                  before_publish=None) -> dict:
    """Write `prof`'s rows to `out` (.json or .json.gz): every row, or those of the steps chosen
    (`prof.step_range`). Returns counts. `before_publish`: called once the trace is written,
    before it takes its name; where it raises, the trace is not published (an export of
    several outputs writes all of them or none)."""
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
        if before_publish is not None:
            before_publish()
        publish(tmp, out, replace=force)   # not over a file another command made meanwhile
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    return {"events": sink.events, **counts}


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
