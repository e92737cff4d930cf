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

    export      export_chrome: the queries in order, their text streamed to the file (gzip)
    scope       the rows an export holds (of some steps), per table with its flows' ends
    events      one query per table that builds its events' JSON text (_EVENTS)
    json_sql    the SQL pieces an event's JSON text is built of, and SQL literals
    pids        the pid each row is written under (_Pids), the id columns moved apart
    tracks      tids, each process's GPU devices and streams, the metadata that names them
    head        the trace's head: Kineto's keys and cuptiprof's own

The names other modules use are imported here. A test or benchmark that replaces one (a
constant, a function) replaces it in the module that reads it: _gzip and _GZIP_LEVEL in export.
"""
from __future__ import annotations

from cuptiprof.interop.chrome.export import export_chrome
from cuptiprof.interop.chrome.head import DEVICE_KEYS, LINKS
from cuptiprof.interop.chrome.tracks import NO_THREAD

__all__ = ["export_chrome", "NO_THREAD", "LINKS", "DEVICE_KEYS"]
