"""Import torch.profiler / Kineto Chrome-trace JSON (.json, .json.gz) into a cuptiprof file.

Every dialect from 2021 on: capitalised categories (`Kernel`, `Runtime`, `Operator`) and
modern ones (`kernel`, `cuda_runtime`, `cpu_op`, ...), string thread ids ("stream 7"), integer
or fractional microsecond timestamps, `baseTimeNanoseconds`.

How it stays fast and bounded: the uncompressed text is cut at event boundaries into pieces
of ~16 MB, each read by the native scanner (`_kineto_scan.c`) straight into per-event columns,
or, where it declines a piece (anything unusual) or is not built, decoded by msgspec into
small typed Structs that are then turned into the same columns (pieces.py). Everything after
that works on columns, category by category (no Python object per event). Rows are kept as
compact columns until the file ends, because a launch is attributed to the innermost op open
on its thread, and a GPU row to the step of the call that launched it, which needs the whole
host timeline (a trace cuptiprof exported says each call's range and each GPU row's op by
External id, `cuptiprofLinks`: those links are kept as they were, not found by time); then the file's rows go to the writer: in one append, or for a large trace
APPEND_ROWS rows of each table per append, so that its Arrow and DuckDB copies exist for
one part at a time.
"""
from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Union

import msgspec
import numpy as np
import pyarrow as pa

from cuptiprof import ranks
from cuptiprof.errors import InputError
from cuptiprof.store import arrow as AC
from cuptiprof.interop import pieces as P
from cuptiprof.interop.nesting import nest, steps_at
from cuptiprof.interop.textsource import blocks as text_blocks, read_blocks, text_start
from cuptiprof.work_ops import intervals_work

# Text decoded at once. Small pieces keep the decoder just behind the gunzip thread, and a
# piece's text and its per-event columns stay in cache: faster than 16 MB pieces on every
# shared trace, with a lower peak (bench/import_knobs.py; BENCHMARKS.md, Import).
PIECE_BYTES = 2 << 20
# Rows of each table per transaction (two DuckDB row groups): the Arrow columns, the writer's
# copies and DuckDB's uncommitted rows of a large trace exist for one part at a time.
APPEND_ROWS = 2 * 122_880


# -- the fields kept from each event ----------------------------------------------------------
class Args(msgspec.Struct, gc=False):
    correlation: Union[int, None] = None
    device: Union[int, None] = None
    context: Union[int, None] = None
    stream: Union[int, None] = None
    bytes: Union[int, None] = None
    grid: Union[list[int], None] = None
    block: Union[list[int], None] = None
    registers: Union[int, None] = msgspec.field(default=None, name="registers per thread")
    smem: Union[int, None] = msgspec.field(default=None, name="shared memory")
    cbid: Union[int, None] = None
    name: Union[str, None] = None       # metadata events
    labels: Union[str, None] = None     # process_labels: "CPU", "GPU 0"
    mem_dev_type: Union[int, None] = msgspec.field(default=None, name="Device Type")
    mem_dev_id: Union[int, None] = msgspec.field(default=None, name="Device Id")
    mem_bytes: Union[int, None] = msgspec.field(default=None, name="Bytes")
    mem_addr: Any = msgspec.field(default=None, name="Addr")   # read where an integer
    event_id: Any = msgspec.field(default=None, name="wait_on_cuda_event_id")   # a sync's event
    # Kineto's link from a call or GPU row to its op; other writers may put anything there
    ext_id: Any = msgspec.field(default=None, name="External id")
    # cuptiprof's own export: what the category cannot say (a warm-up, an NVTX domain)
    xkind: Any = msgspec.field(default=None, name="cuptiprof kind")
    xstep: Any = msgspec.field(default=None, name="cuptiprof step")
    xrange: Any = msgspec.field(default=None, name="cuptiprof range")   # a GPU row's range
    xdsmem: Any = msgspec.field(default=None, name="cuptiprof dynamic smem")  # of "shared memory"
    xopen: Any = msgspec.field(default=None, name="cuptiprof open")   # a range without an end
    xdomain: Any = msgspec.field(default=msgspec.UNSET, name="cuptiprof domain")
    # a GPU row's CUDA graph and graph node: Kineto's keys (0: none, as CUPTI says it), and
    # those of cuptiprof's export before it wrote Kineto's (pieces.SHARED)
    kgraph: Any = msgspec.field(default=None, name="graph id")
    kgnode: Any = msgspec.field(default=None, name="graph node id")
    xgraph: Any = msgspec.field(default=None, name="cuptiprof graph")
    xgnode: Any = msgspec.field(default=None, name="cuptiprof graph node")
    # columns Kineto has no key for: a copy's asynchrony (0 or 1), a memset's value, a call's
    # return code, a pool allocation (0 or 1)
    xasync: Any = msgspec.field(default=None, name="cuptiprof async")
    xvalue: Any = msgspec.field(default=None, name="cuptiprof value")
    xret: Any = msgspec.field(default=None, name="cuptiprof return code")
    xpool: Any = msgspec.field(default=None, name="cuptiprof pool")
    # a peer copy's source and destination devices (Kineto's keys, or those of cuptiprof's
    # earlier exports), a [memory] instant's correlation id (in columns of fields their
    # category never says: pieces.SHARED)
    ksrcdev: Any = msgspec.field(default=None, name="fromDevice")
    kdstdev: Any = msgspec.field(default=None, name="toDevice")
    xsrcdev: Any = msgspec.field(default=None, name="cuptiprof src device")
    xdstdev: Any = msgspec.field(default=None, name="cuptiprof dst device")
    xcorr: Any = msgspec.field(default=None, name="cuptiprof correlation")
    # a log record of cuptiprof's export (category LOG_CATEGORY); read where a str
    xlevel: Any = msgspec.field(default=None, name="level")
    xlogger: Any = msgspec.field(default=None, name="logger")


class Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, None] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: msgspec.Raw = msgspec.Raw()   # its text: read exactly (pieces.C_TSX)
    dur: Union[float, None] = None
    args: Union[Args, None] = None


class DevProp(msgspec.Struct):
    id: Union[int, None] = None
    name: Union[str, None] = None
    totalGlobalMem: Union[int, None] = None
    computeMajor: Union[int, None] = None
    computeMinor: Union[int, None] = None
    numSms: Union[int, None] = None
    # computeProperties (Kineto before deviceProperties, 2021) names them as cudaDeviceProp does
    major: Union[int, None] = None
    minor: Union[int, None] = None
    multiProcessorCount: Union[int, None] = None
    # written by cuptiprof's own Chrome export, so that a round trip keeps them (chrome.py's
    # DEVICE_KEYS)
    peakMemoryBandwidthGBps: Union[float, None] = None
    uuid: Union[str, None] = None
    coreClockMHz: Union[float, None] = None
    memoryClockMHz: Union[float, None] = None
    memoryBusWidthBits: Union[int, None] = None
    l2CacheBytes: Union[int, None] = None
    peakHostLinkGBps: Union[float, None] = None
    peakNvlinkGBps: Union[float, None] = None


class RunEntry(msgspec.Struct):
    """The run a process of cuptiprof's export belongs to (`cuptiprofProcesses[].run`, or
    `cuptiprofRun` of an export of one process)."""
    id: int
    label: Union[str, None] = None
    source: Union[str, None] = None
    status: Union[str, None] = None
    command: Union[str, None] = None
    startNs: Union[int, None] = None
    startTime: Union[str, None] = None   # runs.start_time, ISO 8601 with its offset
    endNs: Union[int, None] = None   # runs.end_ns (an older export's: none)


_Unset = msgspec.UnsetType


class ProcInfo(msgspec.Struct):
    """What the `processes` table says of a process that Kineto has no key for, which
    cuptiprof's export says (`cuptiprofProcess`, or in `cuptiprofProcesses`): how it ended
    (exit_status, ended_early), its command line and its start and end. Command, start and
    end absent (an older export): the import's own (the trace's path, the first and last time
    of its rows); null: NULL, as recorded (an end_ns NULL says the process ended before it
    could say so)."""
    exitStatus: Union[int, None] = None
    endedEarly: Union[bool, None] = None
    command: Union[str, None, _Unset] = msgspec.UNSET
    startNs: Union[int, None, _Unset] = msgspec.UNSET
    endNs: Union[int, None, _Unset] = msgspec.UNSET
    pid: Union[int, None] = None   # its pid in the exported file (data_quality rows name it)


class QualityEntry(msgspec.Struct):
    """A data_quality row of the file cuptiprof exported (`cuptiprofDataQuality`, not a
    Kineto key): its run and process there, and what it says. The import adds it back
    (importing._restore_runs)."""
    run: Union[int, None] = None
    pid: Union[int, None] = None
    check: Union[str, None] = None
    subject: Union[str, None] = None
    count: Union[int, None] = None
    valueNs: Union[int, None] = None
    detail: Union[str, None] = None


class QuietEntry(msgspec.Struct):
    """A process of the file cuptiprof exported that recorded no row
    (`cuptiprofQuietProcesses`, not a Kineto key): its run and pid there, and what the
    `processes` table says of it. The import adds it back (importing._quiet_rows)."""
    run: Union[int, None] = None
    pid: Union[int, None] = None
    host: Union[str, None] = None
    rank: Union[int, None] = None
    localRank: Union[int, None] = None
    worldSize: Union[int, None] = None
    exitStatus: Union[int, None] = None
    endedEarly: Union[bool, None] = None
    command: Union[str, None] = None
    startNs: Union[int, None] = None
    endNs: Union[int, None] = None


class ProcEntry(msgspec.Struct):
    """One process of a trace cuptiprof exported from a file of several (`cuptiprofProcesses`,
    not a Kineto key): its pids in the trace, how far its ids were moved, what it was."""
    pid: int
    gpuPids: int               # its GPU rows' pids: gpuPids + device ordinal (-1: no GPU)
    idShift: int = 0           # added to its correlation ids so processes' ids stay apart
    originalPid: Union[int, None] = None
    host: Union[str, None] = None
    rank: Union[int, None] = None
    localRank: Union[int, None] = None
    worldSize: Union[int, None] = None
    devices: Union[list[DevProp], None] = None
    run: Union[RunEntry, None] = None
    exitStatus: Union[int, None] = None
    endedEarly: Union[bool, None] = None
    command: Union[str, None, _Unset] = msgspec.UNSET   # as in ProcInfo
    startNs: Union[int, None, _Unset] = msgspec.UNSET
    endNs: Union[int, None, _Unset] = msgspec.UNSET


class DistInfo(msgspec.Struct):
    rank: Union[int, None] = None
    world_size: Union[int, None] = None
    backend: Union[str, None] = None
    local_rank: Union[int, None] = None   # cuptiprof's export


# the integers of cuptiprof's own keys (and distributedInfo's) that go to 32-bit columns (pid,
# exit_status, rank, ...); every other one goes to a 64-bit column (start_ns, end_ns, count,
# value_ns) or is a key
_INT32_KEYS = {ProcInfo: {"exitStatus", "pid"}, QualityEntry: {"pid"},
               ProcEntry: {"exitStatus", "originalPid", "rank", "localRank", "worldSize"},
               DistInfo: {"rank", "world_size", "local_rank"},
               QuietEntry: {"pid", "rank", "localRank", "worldSize", "exitStatus"}}


class NegativeIds(msgspec.Struct):
    """cuptiprof's export: the pids written for negative ones (a viewer reads a negative pid or
    tid as none), and "uint32" where negative tids are written as unsigned 32-bit numbers."""
    pids: dict[int, int] = msgspec.field(default_factory=dict)
    tids: Union[str, None] = None


class Doc(msgspec.Struct):
    traceEvents: Union[list[Ev], None] = None
    deviceProperties: Union[list[DevProp], None] = None
    computeProperties: Union[list[DevProp], None] = None
    distributedInfo: Union[DistInfo, None] = None
    baseTimeNanoseconds: Union[int, None] = None
    displayTimeUnit: Union[str, None] = None
    host_name: Union[str, None] = None
    cuptiprofProcesses: Union[list[ProcEntry], None] = None
    cuptiprofProcess: Union[ProcInfo, None] = None   # cuptiprof's export of one process
    cuptiprofRun: Union[RunEntry, None] = None   # and its run
    cuptiprofDataQuality: Union[list[QualityEntry], None] = None   # the exported file's
    cuptiprofQuietProcesses: Union[list[QuietEntry], None] = None   # and its processes of no row
    cuptiprofLinks: Union[str, None] = None    # cuptiprof's export: External ids are range ids
    cuptiprofNegativeIds: Union[NegativeIds, None] = None


_DECODER = msgspec.json.Decoder(Doc)

# Kineto category (lower case) -> what it becomes.
CATEGORIES = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "driver", "driver": "driver",
    "cuda_sync": "sync",
    "cpu_op": "op", "operator": "op",
    "user_annotation": "user", "gpu_user_annotation": "gpu_user", "python_function": "python",
}
# Flow arrows: their events (but "X" ones, counted) the native scanner keeps no row for.
FLOW = {"ac2g", "async", "async_cpu_to_gpu", "fwdbwd"}
# Known categories that carry nothing cuptiprof stores (flow arrows, trace spans, instants).
IGNORED = FLOW | {"trace", "cpu_instant_event", "overhead", "cuda_profiler_range"}
# cuptiprof's export: a row of the `logs` table, as an instant event on its thread's track
# (the message its name; args level, logger and "cuptiprof step")
LOG_CATEGORY = "cuptiprof_log"
# the categories named where a trace of none of them is refused (modern spellings)
_READ = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cuda_sync",
         "cpu_op", "user_annotation", "gpu_user_annotation", "python_function")
RANGE_KIND = {"op": "op", "user": "user", "python": "user", "gpu_user": "user"}
RANGE_DOMAIN = {"op": "cpu_op", "user": "user_annotation", "python": "python_function",
                "gpu_user": "gpu_user_annotation"}
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
# CUPTI's memory kinds as Kineto words them ("Device Static": a __device__ variable's memory)
_MEMKIND = {"pageable": "pageable", "pinned": "pinned", "device": "device", "array": "array",
            "managed": "managed", "host": "pageable", "device static": "device_static",
            "managed static": "managed_static"}
_COPYKINDS = {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA"}
_SYNC = {"event sync": "event_synchronize", "stream sync": "stream_synchronize",
         "context sync": "context_synchronize", "stream wait event": "stream_wait_event"}


def _memcpy_kind(name: str | None) -> tuple[str, str, str]:
    """'Memcpy HtoD (Pageable -> Device)' -> ('HtoD', 'pageable', 'device')."""
    if not name:
        return "unknown", "unknown", "unknown"
    parts = name.split()
    kind = parts[1] if len(parts) > 1 and parts[1] in _COPYKINDS else "unknown"
    src = dst = "unknown"
    m = re.search(r"\(\s*(\w+(?: \w+)*)\s*->\s*(\w+(?: \w+)*)\s*\)", name)
    if m:
        src = _MEMKIND.get(m.group(1).lower(), "unknown")
        dst = _MEMKIND.get(m.group(2).lower(), "unknown")
    return kind, src, dst


def _memset_kind(name: str | None) -> str:
    m = re.search(r"\(\s*(\w+(?: \w+)*)\s*\)", name or "")
    return _MEMKIND.get(m.group(1).lower(), "unknown") if m else "unknown"


def _tid_number(t) -> int:
    """Thread ids come as 25738, "25738" or "stream 7"."""
    if isinstance(t, int):
        return t
    if t is None:
        return 0
    m = re.search(r"(-?\d+)\s*$", str(t))
    # a name without a number: a number of its text, the same in every import (hash() of a
    # str differs from one Python process to the next)
    return int(m.group(1)) if m else (zlib.crc32(str(t).encode()) & 0x3FFFFFFF)


# -- cutting the text into decodable pieces ---------------------------------------------------
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\}\s*,\s*\{")
_PREFIX = b'{"traceEvents":['


class _Malformed(Exception):
    def __init__(self, msg: str, offset: int | None, index: int | None):
        super().__init__(msg)
        self.offset, self.index = offset, index


def _decode(piece, consumed: int, prefix_len: int, before: int, scan=None):
    """One piece: the native scanner's columns when it takes it, else msgspec's Doc (whose
    errors become _Malformed)."""
    if scan is not None:
        got = scan(piece)
        if got is not None:
            return got
    try:
        # a copy: each event's "ts" text (msgspec.Raw) holds on to the buffer it was read from
        return _DECODER.decode(bytes(piece) if isinstance(piece, memoryview) else piece)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        m = re.search(r"\$\.traceEvents\[(\d+)\]", msg)
        idx = before + int(m.group(1)) if m else None
        raise _Malformed(msg, None, idx) from None
    except RecursionError:  # hostile input: nesting deeper than any trace has
        raise _Malformed("JSON nested too deeply to be a trace", None, None) from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(byte (\d+)\)", msg)
        off = consumed + int(m.group(1)) - prefix_len if m else None
        raise _Malformed(msg, off, None) from None


def _count(doc) -> int:
    return doc.events if isinstance(doc, P.Piece) else len(doc.traceEvents or ())


def iter_docs(blocks: Iterable[bytes], piece_bytes: int = PIECE_BYTES, scan=None):
    """Decode a trace piece by piece. Yields Doc objects; each holds some of the events and
    whichever top-level keys its text contained. With `scan` (text -> pieces.Piece, or None
    where it declines), a piece it takes is yielded as that Piece instead."""
    buf = bytearray()
    consumed = 0        # bytes of the file dropped from the front of buf
    prefix_len = 0      # bytes of synthetic prefix at the front of buf
    ev_start = -1       # position of the first event in buf
    bare = False        # the file is a bare JSON array of events
    before = 0          # events in pieces already decoded
    want = piece_bytes
    started = False     # buf starts with the text (past a byte-order mark and whitespace)
    for block in blocks:
        buf += block
        if not started:   # the start of the file only
            lead = text_start(buf, consumed == 0)
            if lead is None:   # whitespace (and a byte-order mark) so far: dropped, not held
                if consumed or len(buf) >= 3:   # (else perhaps a byte-order mark cut short)
                    consumed, buf = consumed + len(buf), bytearray()
                continue
            started = True
            if lead:
                consumed, buf = consumed + lead, buf[lead:]   # (once: a new buffer)
        if ev_start < 0:
            if buf[:1] == b"[":
                # the prefix stands for the file's bytes up to and with its "[": the
                # buffer's byte len(_PREFIX) is the file's byte consumed + 1
                consumed, prefix_len = consumed + 1, len(_PREFIX)
                buf = bytearray(_PREFIX) + buf[1:]  # a new buffer: see below
                ev_start, bare = len(_PREFIX), True
            else:
                m = _ARRAY_START.search(buf)
                if not m:
                    continue
                ev_start = m.end()
        if len(buf) - ev_start < want:
            continue
        last = None
        for last in _SEP.finditer(buf, max(ev_start, len(buf) - (1 << 16))):
            pass
        if last is None:
            for last in _SEP.finditer(buf, ev_start):
                pass
        if last is None:
            continue
        end = last.start() + 1
        cut = last.end() - 1
        # Close the array in place over the separator bytes: no copy. In compact JSON ("},{")
        # the second byte is the next event's "{", so the bytes are put back either way.
        saved = bytes(buf[end:end + 2])
        buf[end:end + 2] = b"]}"
        try:
            with memoryview(buf) as mv:
                doc = _decode(mv[:end + 2], consumed, prefix_len, before, scan)
        except _Malformed:
            buf[end:end + 2] = saved
            want *= 2  # a separator inside a string or nested value: cut elsewhere later
            continue
        buf[end:end + 2] = saved
        want = piece_bytes
        consumed += cut - prefix_len
        # The rest (less than an event or two: the cut is at the last separator) starts a new
        # buffer, the prefix written over the piece's last bytes. Not `del buf[:cut]`: a
        # bytearray with free space at its front copies itself whole on every later append.
        buf = buf[cut - len(_PREFIX):]
        buf[:len(_PREFIX)] = _PREFIX
        prefix_len = ev_start = len(_PREFIX)
        before += _count(doc)
        yield doc
    if bare:
        buf += b"}"
    if not started and (not buf or buf.isspace()):   # whitespace (and a byte-order mark)
        raise _Malformed("the file is empty", None, None)
    with memoryview(buf) as mv:  # no copy of the last piece
        doc = _decode(mv, consumed, prefix_len, before, scan)
    yield doc


# -- one file ---------------------------------------------------------------------------------
@dataclass
class FileSummary:
    path: str
    pid: int
    rank: int | None
    events: int = 0
    rows: dict = field(default_factory=dict)
    unknown: dict = field(default_factory=dict)
    steps: int = 0
    run: RunEntry | None = None   # the run it was exported from (cuptiprof's export)
    # cuptiprof's export: the exported file's data_quality rows (with the first process of a
    # trace), each as (the trace that carried it, QualityEntry), and this process's pid there
    quality: list = field(default_factory=list)
    original_pid: int | None = None
    quiet: list = field(default_factory=list)   # (with quality) its processes of no row


class _Cols:
    """numpy columns appended piece by piece, concatenated at the end. A nullable column `k`
    keeps its validity mask under `k?`."""

    def __init__(self):
        self.parts: dict[str, list] = {}

    def add(self, **cols):
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def add_col(self, k: str, values: np.ndarray, ok: np.ndarray) -> None:
        self.add(**{k: values, k + "?": ok})

    def get(self, k, dtype=np.int64):
        p = self.parts.get(k)
        if not p:
            return np.zeros(0, dtype)
        if len(p) > 1:  # joined once: the pieces go, and later gets cost nothing
            p[:] = [np.concatenate(p)]
        return p[0]

    def subset(self, keep: np.ndarray) -> "_Cols":
        """The rows where `keep` holds, every column."""
        out = _Cols()
        for k in list(self.parts):
            out.parts[k] = [self.get(k)[keep]]
        return out

    def put(self, k: str, values: np.ndarray) -> None:
        """Replace column `k`."""
        self.parts[k] = [values]

    def keys(self) -> set:
        """The columns, less "proc" (which process of the trace a row is: read by _split)."""
        return set(self.parts) - {"proc"}

    def extend(self, other: "_Cols") -> None:
        """Append `other`'s rows (the same columns, unless either holds no row); "proc" goes."""
        if not len(other):
            return
        if not len(self):
            self.parts = {k: list(v) for k, v in other.parts.items() if k != "proc"}
            return
        if self.keys() != other.keys():
            raise RuntimeError("kineto import: rows of two traces with other columns")
        self.parts = {k: self.parts[k] + other.parts[k] for k in self.keys()}

    def arrow(self, k, typ) -> pa.Array:
        """A nullable column as one Arrow array."""
        return AC.array(self.get(k), typ, self.get(k + "?", bool))

    def __len__(self):
        p = next(iter(self.parts.values()), None)
        return sum(len(x) for x in p) if p else 0


def _same(x):
    return x


def _per_name(ids: np.ndarray, names: list, fn) -> tuple[np.ndarray, list]:
    """Apply `fn` once per distinct name id; codes into the distinct results. (Also keeps a
    table's dictionary to the names it uses: the writer interns every dictionary value.)"""
    uniq, inv = _dense_unique(ids, len(names))
    return inv, [fn(names[u] if u >= 0 else None) for u in uniq.tolist()]   # -1: no name


def _dense_unique(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(ids, return_inverse=True) for ids in -1..size-1 (names, categories): marks
    and a running count instead of a sort (a few ms per table of a large trace)."""
    seen = np.zeros(size + 1, bool)
    seen[ids + 1] = True
    code = np.cumsum(seen, dtype=np.int32) - 1
    return np.flatnonzero(seen) - 1, code[ids + 1]


def _names(ids: np.ndarray, names: list) -> pa.DictionaryArray:
    """Names by id; an event without one (null or absent: id -1) has none (NULL)."""
    inv, values = _per_name(ids, names, _same)
    if None not in values:
        return AC.dictionary(inv, values)
    none = values.index(None)
    return pa.DictionaryArray.from_arrays(AC.array(np.where(inv == none, 0, inv), pa.int32(),
                                                   inv != none), AC.strings(values))


class KinetoFile:
    """Reads one trace file as one process: the whole timeline is kept as compact columns
    (never a dict per event) and written at the end (in parts when large), with every launch
    link (step, innermost range, op) already resolved."""

    def __init__(self, w, path: Path, index: int, used_pids: set[int],
                 on_read: Callable[[int], None] | None = None):
        self.w, self.path, self.index = w, path, index
        self.used_pids = used_pids
        self.on_read = on_read
        self.pid: int | None = None
        self.host_pids: set = set()   # processes of the host events (more than one: merged)
        self.scale = 1000          # ns per trace time unit (microseconds)
        self.base = 0
        self.native = P.native_enabled()
        self.names = P.interner()  # event names
        self.small = P.interner()  # categories, ph, string pids/tids, labels
        self.small.ids(["X", "i", "M"])  # ids 0, 1, 2
        self.tid_cache: dict = {}
        self.ranges = _Cols()
        self.calls = _Cols()
        self.gpu = {t: _Cols() for t in ("kernels", "memcpys", "memsets", "syncs", "memory_events")}
        self.logs = _Cols()
        self.unknown: dict[str, int] = {}
        self.complete = 0          # complete ('X') events, and those of no category or none
        self.uncategorised = 0     # cuptiprof reads (unknown counts those of a category)
        self.devprops: list[DevProp] = []
        self.dist: DistInfo | None = None
        self.host: str | None = None
        self.devices_used: set[int] = set()
        self.events = 0
        self.piece: P.Piece | None = None
        self.rows: dict[str, int] = {}
        self.procs: list[ProcEntry] | None = None   # several processes: rows carry "proc"
        self.from_run: RunEntry | None = None   # cuptiprof's export: the run exported
        self.quality: list[tuple] = []   # and the exported file's data_quality rows (FileSummary)
        self.quiet: list[QuietEntry] = []       # and its processes that recorded no row
        self.original_pid: int | None = None    # the process's pid in the exported file
        self.hollow = False   # a process the export names that the trace holds no row of
        self.local_rank: int | None = None
        self.proc = ProcInfo()     # what cuptiprof's export says of the process
        self.rank_known = False    # a rank of None is the answer (not: read the file name)
        # A trace cuptiprof exported (`cuptiprofLinks`): its External ids are range ids, and
        # calls and GPU rows are linked by them (as recorded), not by time; its ranges may say
        # their domain and a warm-up in args of cuptiprof's own.
        self.links = False
        self.negative: NegativeIds | None = None   # its pids and tids written for negative ones
        self.cpu_ops = 0           # CPU ops made kernels (a trace without CUDA activity)
        # Kineto's user annotations by External id (range index, id, GPU-side): a GPU-side
        # annotation says the id of the host annotation it mirrors
        self.annots = _Cols()
        self.big_args: dict[str, int] = {}   # args key -> values beyond 64 bits taken as absent

    @property
    def name_list(self) -> list:
        return self.names.strings

    # errors ---------------------------------------------------------------------------------
    def _bad(self, r: int, what: str) -> InputError:
        """An error naming the event in row `r` of the current piece."""
        I = self.piece.I
        c, n = int(I[r, P.C_CAT]), int(I[r, P.C_NAME])
        cat = self.small.strings[c] if c >= 0 else None
        name = self.names.strings[n] if n >= 0 else None
        return InputError(f"{self.path}: event #{self.events + int(I[r, P.C_IDX])} "
                          f"({cat} {str(name)[:60]!r}): {what}")

    def _err(self, exc: _Malformed) -> InputError:
        msg = str(exc)
        if exc.index is not None:
            detail = re.sub(r"\s*-\s*at `\$\.traceEvents\[\d+\]", " at `", msg).replace("at ``", "")
            return InputError(f"{self.path}: event #{exc.index}: {detail}")
        if msg == "the file is empty":
            return InputError(f"{self.path}: the file is empty; expected a torch.profiler trace")
        m = re.fullmatch(r"(.+) - at `\$\.([^`]+)`", msg, re.S)
        if m and exc.offset is None:   # valid JSON; a top-level key of the wrong type or shape
            what, key = m.group(1), m.group(2)
            if key == "traceEvents":
                return InputError(f"{self.path}: \"traceEvents\" is not a list of events "
                                  f"({what[:1].lower()}{what[1:]}); expected a torch.profiler / "
                                  "Kineto Chrome trace")
            own = key.startswith("cuptiprof") or key.startswith("distributedInfo.local_rank")
            fix = "export it again, or delete" if own else "delete"
            return InputError(f"{self.path}: {key}: {what[:1].lower()}{what[1:]}; the trace's "
                              f"{'cuptiprof ' if own else ''}metadata is damaged ({fix} the key "
                              "to import the events without it)")
        where = f" near byte {exc.offset:,} of the uncompressed text" if exc.offset is not None else ""
        return InputError(f"{self.path}: invalid JSON{where}: {msg}")

    # main loop ------------------------------------------------------------------------------
    def _scan(self, text) -> P.Piece | None:
        return P.scan(text, self.names, self.small, _DECODER.decode)

    def run(self) -> list[FileSummary]:
        """Read the file and write each process it holds."""
        return [part._finish() for part in self.parts()]

    def parts(self) -> Iterator["KinetoFile"]:
        """Read the file; then the processes it holds, read and not yet written (_finish), one
        at a time: itself, or for cuptiprof's export of several processes one per process."""
        seen_events, n_events = False, 0
        poll = getattr(self.w, "poll", None)  # an output still opening: fail early if it failed
        try:
            for doc in iter_docs(read_blocks(self.path, self.on_read), PIECE_BYTES,
                                 scan=self._scan if self.native else None):
                try:
                    piece = doc if isinstance(doc, P.Piece) else \
                        P.from_events(doc.traceEvents or [], self.names, self.small, doc)
                except P.BadTs as exc:
                    raise _Malformed(str(exc), None, n_events + exc.index) from None
                if piece.has_events:
                    seen_events = True
                n_events += piece.events
                if piece.meta is not None:
                    self._meta(piece.meta)
                self._take(piece)
                if poll is not None:
                    poll()
        except _Malformed as exc:
            raise self._err(exc) from None
        if not seen_events:
            raise InputError(f"{self.path}: valid JSON but not a trace (no \"traceEvents\" array); "
                             "expected a torch.profiler / Kineto Chrome trace")
        if n_events == 0:
            raise InputError(f"{self.path}: a trace without events (\"traceEvents\" is empty); "
                             "nothing to import (was the profiler's schedule ever active?)")
        if self.complete and self.complete == self.uncategorised + sum(self.unknown.values()):
            raise self._foreign()
        if self.procs and all(len(c.get("proc")) == len(c) for c in (self.ranges, self.calls,
                                                                     self.logs, *self.gpu.values())):
            yield from self._split()
        else:
            yield self

    def _foreign(self) -> InputError:
        """The refusal of a Chrome trace none of whose complete events is of a category the
        importer reads (an XLA/JAX or other tool's trace): imported, it would be an empty run."""
        seen = sorted(self.unknown.items(), key=lambda kv: -kv[1])
        shown = [f"{c!r} ({n:,})" for c, n in seen[:4]]
        if self.uncategorised:
            shown.append(f"no category ({self.uncategorised:,})")
        more = f" and {len(seen) - 4} more" if len(seen) > 4 else ""
        return InputError(
            f"{self.path}: a Chrome trace but not a torch.profiler/Kineto one: none of its "
            f"{self.complete:,} complete events is of a category cuptiprof reads (seen: "
            f"{', '.join(shown)}{more}); the importer reads torch.profiler's categories "
            f"({', '.join(_READ)})")

    def _split(self) -> Iterator["KinetoFile"]:
        """One KinetoFile per process of a trace cuptiprof exported from a file of several: each
        with its own rows, correlation ids moved back, and its host, rank and devices (made one
        at a time: one process's copies of the columns exist at once). A process the trace
        holds no row of (an export of steps it has none in) is `hollow`: it says the process
        (what ties exports of one file together, and their order), but is no process of the
        import; what the trace says of itself goes with its first process of rows."""
        tables = (self.ranges, self.calls, self.logs, *self.gpu.values())
        held = set(np.unique(np.concatenate([c.get("proc", np.int32) for c in tables])).tolist())
        first = min(held, default=0)
        for i, e in enumerate(self.procs):
            part = copy.copy(self)
            part.procs = None
            part.hollow = bool(held) and i not in held
            part.ranges = self.ranges.subset(self.ranges.get("proc", np.int32) == i)
            part.calls = self.calls.subset(self.calls.get("proc", np.int32) == i)
            part.logs = self.logs.subset(self.logs.get("proc", np.int32) == i)
            part.gpu = {t: G.subset(G.get("proc", np.int32) == i) for t, G in self.gpu.items()}
            for cols, k in ((part.calls, "corr"), *((G, "correlation_id") for G in part.gpu.values())):
                if e.idShift and k in cols.parts:
                    v, ok = cols.get(k), cols.get(k + "?", bool)
                    v[ok] -= e.idShift
            part.rows = {t: len(G) for t, G in part.gpu.items() if len(G)}
            part.devices_used = {d for G in part.gpu.values() if len(G)
                                 for d in AC.distinct(G.get("device_id")).tolist()}
            part.devprops = list(e.devices or [])
            part.host, part.local_rank, part.rank_known = e.host, e.localRank, True
            part.dist = DistInfo(rank=e.rank, world_size=e.worldSize)
            part.unknown = self.unknown if i == first else {}   # counted once, with the first
            part.big_args = self.big_args if i == first else {}
            part.host_pids = set() if e.originalPid is None else {e.originalPid}
            part.from_run = e.run
            part.quality = self.quality if i == first else []   # added back once
            part.quiet = self.quiet if i == first else []
            part.original_pid = e.originalPid
            part.proc = ProcInfo(exitStatus=e.exitStatus, endedEarly=e.endedEarly,
                                 command=e.command, startNs=e.startNs, endNs=e.endNs)
            part.pid = None
            if e.originalPid is not None and not part.hollow:   # (a hollow one takes none)
                part._set_pid(e.originalPid)
            yield part

    # one process exported in several traces (export --steps) ------------------------------
    def identity(self) -> tuple | None:
        """The process of cuptiprof's export this is (_process_key): the same in each trace
        exported of that process of that run; None for a trace of anything else."""
        if not self.links or self.from_run is None:
            return None
        pid = self.original_pid if self.original_pid is not None else self.proc.pid
        if pid is None:
            return None
        return _process_key(self.from_run, pid, self.host,
                            self.dist.rank if self.dist is not None else None, self.proc)

    def _holds(self) -> tuple[set, np.ndarray, bool]:
        """What the rows read hold: the numbers of their steps and warm-ups, the correlation
        ids of their API calls and GPU rows, and whether there is any row at all."""
        R = self.ranges
        nums: set = set()
        if len(R):
            names = self.name_list
            host = R.get("code", np.int8) != 3
            for n in np.unique(R.get("name", np.int32)[host]).tolist():
                m = _STEP_RE.match(names[n]) if n >= 0 and type(names[n]) is str else None
                if m:
                    nums.add(int(m.group(1)))
            warm = self.small.find("warmup")
            if self.links and warm >= 0 and "xkind" in R.parts:
                v, ok = R.get("xstep"), R.get("xstep?", bool)
                nums.update(np.unique(v[ok & (R.get("xkind") == warm)]).tolist())
        corr = [self.calls.get("corr")[self.calls.get("corr?", bool)]]
        corr += [G.get("correlation_id")[G.get("correlation_id?", bool)]
                 for t, G in self.gpu.items() if t != "memory_events"]
        rows = any(len(c) for c in (R, self.calls, self.logs, *self.gpu.values()))
        return nums, np.unique(np.concatenate(corr)), rows

    def _absorb(self, other: "KinetoFile") -> None:
        """Take in the rows read of `other`, another trace's export of this process (of other
        steps): their times moved to this trace's base, their names and strings to this
        file's ids; a range both exports hold (one around the steps of both, by its External
        id, which is its range_id as recorded; one without, by every field) once, ending
        where the later export ends it (a range still open ends at each export's last time).
        What is said of the rows is summed (GPU rows, unknown categories, ...)."""
        shift = other.base - self.base
        names = P.ids(self.names, list(other.names.strings))
        small = P.ids(self.small, list(other.small.strings))
        G = other.gpu
        for cols, times, named, strings in (
                (other.ranges, ("start", "end"), ("name",), ("xdomain", "xkind")),
                (other.calls, ("start", "end"), ("name",), ()),
                *((G[t], ("start_ns", "end_ns"), ("name",), ()) for t in G if t != "memory_events"),
                (G["memory_events"], ("time_ns",), (), ("kind",)),
                (other.logs, ("time",), ("message",), ("level", "logger"))):
            if not len(cols):
                continue
            for k in times:
                cols.put(k, cols.get(k) + shift)
            for ks, table in ((named, names), (strings, small)):
                for k in ks:
                    if k in cols.parts:
                        cols.put(k, _remap(cols.get(k), table))
        R, Q = self.ranges, other.ranges
        if len(R) and len(Q):
            keep = np.ones(len(Q), bool)
            ok, q_ok = R.get("ext?", bool), Q.get("ext?", bool)
            at = np.flatnonzero(ok)
            known, first = np.unique(R.get("ext")[at], return_index=True)
            if len(known):
                q_ext = Q.get("ext")
                pos = np.minimum(np.searchsorted(known, q_ext), len(known) - 1)
                hit = q_ok & (known[pos] == q_ext)
                np.maximum.at(R.get("end"), at[first[pos[hit]]], Q.get("end")[hit])
                keep &= ~hit
            fields = ("code", "key", "start", "end", "name", "dev", "stream")
            mine = Counter(zip(*(R.get(k)[~ok].tolist() for k in fields)))
            if mine and not q_ok.all():
                for i, row in zip(np.flatnonzero(~q_ok).tolist(),
                                  zip(*(Q.get(k)[~q_ok].tolist() for k in fields))):
                    if mine[row] > 0:
                        mine[row] -= 1
                        keep[i] = False
            if not keep.all():
                other.ranges = Q.subset(keep)
        for mine_, theirs in ((self.ranges, other.ranges), (self.calls, other.calls),
                              (self.logs, other.logs), *((self.gpu[t], G[t]) for t in G)):
            mine_.extend(theirs)
        self.events += other.events
        self.rows, self.unknown, self.big_args = (
            {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}
            for a, b in ((self.rows, other.rows), (self.unknown, other.unknown),
                         (self.big_args, other.big_args)))
        self.devices_used = self.devices_used | other.devices_used
        have = {d.id for d in self.devprops}
        self.devprops = self.devprops + [d for d in other.devprops if d.id not in have]
        self.host_pids = self.host_pids | other.host_pids
        # each export carries the rows of the processes it holds: both traces' (_quality_rows
        # adds a row two traces carry once)
        self.quality = self.quality + other.quality
        self.quiet = self.quiet or other.quiet

    def _meta(self, doc: Doc) -> None:
        if doc.deviceProperties:
            self.devprops.extend(doc.deviceProperties)
        elif doc.computeProperties and not self.devprops:
            self.devprops.extend(msgspec.structs.replace(
                p, computeMajor=p.major, computeMinor=p.minor, numSms=p.multiProcessorCount)
                for p in doc.computeProperties)
        if doc.distributedInfo is not None:
            self.dist = doc.distributedInfo
            if self.dist.local_rank is not None:
                self.local_rank = self.dist.local_rank
        if doc.baseTimeNanoseconds:
            self.base = doc.baseTimeNanoseconds
        if doc.host_name:
            self.host = doc.host_name
        self._check_own_keys(doc)
        if doc.cuptiprofProcess is not None:
            self.proc = doc.cuptiprofProcess
        if doc.cuptiprofRun is not None:
            self.from_run = doc.cuptiprofRun
        if doc.cuptiprofDataQuality:
            self.quality = [(str(self.path), q) for q in doc.cuptiprofDataQuality]
        if doc.cuptiprofQuietProcesses:
            self.quiet = doc.cuptiprofQuietProcesses
        if doc.cuptiprofLinks == "range_id" and self.events == 0:
            self.links = True
        if doc.cuptiprofNegativeIds is not None and self.events == 0:
            self.negative = doc.cuptiprofNegativeIds
        if doc.cuptiprofProcesses and len(doc.cuptiprofProcesses) > 1 and self.events == 0:
            self.procs = doc.cuptiprofProcesses
            cpu = sorted((e.pid, i) for i, e in enumerate(self.procs))
            gpu = sorted((e.gpuPids, i) for i, e in enumerate(self.procs))
            self._cpu_pids, self._cpu_idx = (np.array(x, np.int64) for x in zip(*cpu))
            self._gpu_pids, self._gpu_idx = (np.array(x, np.int64) for x in zip(*gpu))

    def _check_own_keys(self, doc: Doc) -> None:
        """cuptiprof's own keys as its export writes them, or a one-line refusal naming the
        key (a hand-edited or damaged trace): integers that fit the columns they go to, a
        run's startTime in ISO 8601 with its UTC offset (without one, the time it names is
        not known), a data_quality entry that names its check."""
        keyed: list[tuple[str, Any]] = []
        if doc.distributedInfo is not None:   # Kineto's, with cuptiprof's local_rank
            keyed.append(("distributedInfo", doc.distributedInfo))
        if doc.cuptiprofRun is not None:
            keyed.append(("cuptiprofRun", doc.cuptiprofRun))
        if doc.cuptiprofProcess is not None:
            keyed.append(("cuptiprofProcess", doc.cuptiprofProcess))
        for i, e in enumerate(doc.cuptiprofProcesses or ()):
            keyed.append((f"cuptiprofProcesses[{i}]", e))
            if e.run is not None:
                keyed.append((f"cuptiprofProcesses[{i}].run", e.run))
        for i, e in enumerate(doc.cuptiprofQuietProcesses or ()):
            keyed.append((f"cuptiprofQuietProcesses[{i}]", e))
        for i, q in enumerate(doc.cuptiprofDataQuality or ()):
            keyed.append((f"cuptiprofDataQuality[{i}]", q))
            if q.check is None:
                raise InputError(f"{self.path}: {keyed[-1][0]} has no \"check\" (the name of "
                                 "the data_quality check it records); the trace is damaged")
        for key, entry in keyed:
            small = _INT32_KEYS.get(type(entry), ())
            for name in entry.__struct_fields__:
                v = getattr(entry, name)
                if type(v) is not int:   # (not a bool: endedEarly)
                    continue
                bits = 32 if name in small else 64
                if not -(1 << bits - 1) <= v < (1 << bits - 1):
                    shown = str(v) if v.bit_length() < 128 else f"a {v.bit_length()}-bit number"
                    raise InputError(f"{self.path}: {key}.{name} is {shown}, out of range (a "
                                     f"signed {bits}-bit integer); the trace is damaged")
            when = getattr(entry, "startTime", None)
            if when is not None:
                try:
                    offset = _dt.datetime.fromisoformat(when).utcoffset()
                except ValueError:
                    raise InputError(f"{self.path}: {key}.startTime {when[:40]!r} is not an ISO "
                                     "8601 time; the trace is damaged") from None
                if offset is None:
                    raise InputError(f"{self.path}: {key}.startTime {when[:40]!r} has no UTC "
                                     "offset, so the time it names is not known; add it as "
                                     "cuptiprof's export writes it (+00:00)")

    def _proc_of(self, rows: np.ndarray) -> np.ndarray:
        """Index in self.procs of each row's process (by its pid in the trace: the CPU pid, or
        a GPU pid gpuPids + device); rows of any other pid go with the first process."""
        pid = self._ids(rows, P.C_PIDK, P.C_PID)
        out = np.zeros(len(rows), np.int32)
        k = self._cpu_pids
        pos = np.minimum(np.searchsorted(k, pid), len(k) - 1)
        hit = k[pos] == pid
        out[hit] = self._cpu_idx[pos[hit]]
        q = pid + 1   # device -1 (a run without a GPU) is gpuPids - 1
        j = np.searchsorted(self._gpu_pids, q, "right") - 1
        ok = ~hit & (j >= 0) & (q - self._gpu_pids[np.maximum(j, 0)] < 1000)
        out[ok] = self._gpu_idx[j[ok]]
        return out

    # columns of the current piece -----------------------------------------------------------
    def _arg(self, rows: np.ndarray, field: str,
             key: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Values and validity of one args field for `rows` (an integer beyond int64 raises
        OverflowError here, where it is read; in a field of LOOSE_ARGS it is taken as absent,
        and counted in data_quality under its key in the trace: `key`, or the field's)."""
        I, a = self.piece.I, P.A[field]
        bits = I[rows, P.C_VALID]
        if self.piece.overflow:
            big = int(((bits >> (P.OVER + a)) & 1).sum())
            if big and field not in P.LOOSE_ARGS:
                raise OverflowError(f"{field} beyond 64 bits")
            if big:   # a value another writer or an edit put there: absent, and counted
                key = key or _ARG_KEYS[field]
                self.big_args[key] = self.big_args.get(key, 0) + big
        return I[rows, P.C_ARG0 + a], ((bits >> a) & 1).astype(bool)

    def _ids(self, rows: np.ndarray, kcol: int, vcol: int) -> np.ndarray:
        """pid / tid numbers: 25738, "25738" or "stream 7" (parsed once per distinct string);
        0 where absent."""
        I = self.piece.I
        kind, v = I[rows, kcol], I[rows, vcol]
        if (kind == P.ID_BIG).any():
            raise OverflowError("thread or process id beyond 64 bits")
        out = np.where(kind == P.ID_INT, v, 0)
        s = kind == P.ID_STR
        if s.any():
            uniq, inv = _dense_unique(v[s], self.small.size())
            c, strings = self.tid_cache, self.small.strings
            nums = []
            for u in uniq.tolist():
                t = strings[u]
                x = c.get(t)
                if x is None:
                    x = c[t] = _tid_number(t)
                nums.append(x)
            out[s] = np.array(nums, np.int64)[inv]
        return out

    def _times(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        F = self.piece.F
        ts, du = F[rows, 0], F[rows, 1]
        bad = np.isnan(ts)
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "no timestamp (\"ts\")")
        bad = np.isnan(du)
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "no duration (\"dur\")")
        # Out-of-range numbers would wrap around silently in int64; negative spans are not time.
        limit = float(1 << 62) / self.scale
        bad = ~((np.abs(ts) < limit) & (np.abs(du) < limit))
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "timestamp or duration out of range")
        bad = du < 0
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], f"negative duration ({du[bad][0]:g})")
        start = self._ns(ts, rows)
        return start, start + np.rint(du * self.scale).astype(np.int64)

    def _ns(self, ts: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Timestamps of `rows` (their "ts" values `ts`) in ns: exact where the text is
        (microseconds with at most three decimals), else from the double."""
        whole = np.floor(ts)
        ns = whole.astype(np.int64) * self.scale + np.rint((ts - whole) * self.scale).astype(np.int64)
        if self.scale == 1000:
            x = self.piece.I[rows, P.C_TSX]
            ns = np.where(x != P.TSX_NONE, x, ns)
        return ns

    def _need_args(self, rows: np.ndarray) -> None:
        no = self.piece.I[rows, P.C_HASARGS] == 0
        if no.any():
            raise self._bad(rows[int(np.argmax(no))], "no \"args\" (device, stream, correlation)")

    def _unmap(self, I: np.ndarray) -> None:
        """cuptiprof's export: the negative pids and tids it wrote as positive numbers (device
        -1's pid, the track of no thread) back to what was recorded, before anything reads them."""
        neg = self.negative
        if neg.pids:
            is_int, col = I[:, P.C_PIDK] == P.ID_INT, I[:, P.C_PID]
            hits = [(is_int & (col == w), v) for w, v in neg.pids.items()]
            for hit, v in hits:
                I[hit, P.C_PID] = v
        if neg.tids == "uint32":
            col = I[:, P.C_TID]
            hit = (I[:, P.C_TIDK] == P.ID_INT) & (col >= 1 << 31) & (col < 1 << 32)
            I[hit, P.C_TID] -= 1 << 32

    def _decide_pid(self, cats: list) -> None:
        I = self.piece.I
        for c, rows in cats:
            cat = self.small.strings[c] if c >= 0 else None
            if cat and (CATEGORIES.get(cat.lower()) in ("op", "user", "runtime", "driver", "python")
                        or cat.lower() == LOG_CATEGORY):
                kind = I[rows, P.C_PIDK]
                hit = np.flatnonzero((kind == P.ID_INT) | (kind == P.ID_BIG))
                if len(hit):
                    if kind[hit[0]] == P.ID_BIG:
                        raise OverflowError("process id beyond 64 bits")
                    self._set_pid(int(I[rows[hit[0]], P.C_PID]))
                    return
        rows = next((r for c, r in cats if c == -1), None)
        labels = self.names.find("process_labels")
        cpu = self.small.find("CPU")
        if rows is None or labels < 0 or cpu < 0:
            return
        R = I[rows]
        hit = np.flatnonzero((R[:, P.C_PH] == _PH_M) & (R[:, P.C_NAME] == labels)
                             & (R[:, P.C_HASARGS] == 1) & (R[:, P.C_LABELS] == cpu)
                             & ((R[:, P.C_PIDK] == P.ID_INT) | (R[:, P.C_PIDK] == P.ID_BIG)))
        if len(hit):
            if R[hit[0], P.C_PIDK] == P.ID_BIG:
                raise OverflowError("process id beyond 64 bits")
            self._set_pid(int(R[hit[0], P.C_PID]))

    def _set_pid(self, pid: int) -> None:
        self.pid = claim_pid(self.used_pids, pid)

    def _take(self, piece: P.Piece) -> None:
        """One piece's events, category by category (in the order each first appears)."""
        self.piece = piece
        I = piece.I
        if self.negative is not None:
            self._unmap(I)
        cat = I[:, P.C_CAT]
        uniq, inv = _dense_unique(cat, self.small.size())
        if len(uniq) == 1:
            cats = [(int(uniq[0]), np.arange(len(I)))]
        elif len(uniq) <= 32:   # a trace's few categories: one pass each, no sort
            cats = sorted(((c, np.flatnonzero(inv == i)) for i, c in enumerate(uniq.tolist())),
                          key=lambda x: x[1][0])
        else:
            srt = np.argsort(inv, kind="stable")
            split = np.split(srt, np.cumsum(np.bincount(inv))[:-1])
            cats = sorted(zip(uniq.tolist(), split), key=lambda x: x[1][0])
        if self.pid is None and self.events == 0:
            if len(I):
                ts = piece.F[:, 0]
                nz = np.flatnonzero(ts != 0)  # NaN (no ts) compares unequal: skip those too
                nz = nz[~np.isnan(ts[nz])]
                if len(nz) and ts[nz[0]] > 1e17:  # nanosecond timestamps
                    self.scale = 1
            self._decide_pid(cats)
        strings = self.small.strings
        ph = I[:, P.C_PH]
        for c, rows in cats:
            name = strings[c] if c >= 0 else None
            low = name.lower() if name else None
            what = CATEGORIES.get(low)
            x = ph[rows] == _PH_X   # complete events: every category but instants reads these
            n = int(np.count_nonzero(x))
            self.complete += n
            if what is None:
                if low is None or low == "cpu_instant_event":
                    self._instants(rows)
                    if low is None:
                        self.uncategorised += n
                elif low == LOG_CATEGORY:
                    self._logs(rows[ph[rows] == _PH_I])
                elif low not in IGNORED and n:
                    self.unknown[name] = self.unknown.get(name, 0) + n
                continue
            if not n:
                continue
            rows = rows[x]
            if what in ("kernel", "memcpy", "memset", "sync"):
                self._gpu(what, rows)
            elif what in ("runtime", "driver"):
                self._call(what, rows)
            else:
                self._range(what, rows)
        self.events += piece.events
        self.piece = None

    # host side ------------------------------------------------------------------------------
    def _host_pids(self, rows: np.ndarray) -> None:
        """Note the processes host events come from: one file is imported as one process."""
        I = self.piece.I
        v = I[rows, P.C_PID][I[rows, P.C_PIDK] == P.ID_INT]
        if len(v):
            self.host_pids.update(AC.distinct(v).tolist() if (v != v[0]).any() else (int(v[0]),))

    def _call(self, what: str, rows: np.ndarray) -> None:
        self._host_pids(rows)
        start, end = self._times(rows)
        C = self.calls
        C.add(tid=self._ids(rows, P.C_TIDK, P.C_TID), start=start, end=end,
              name=self.piece.I[rows, P.C_NAME].astype(np.int32),
              driver=np.full(len(rows), what == "driver"))
        if self.procs:
            C.add(proc=self._proc_of(rows))
        C.add_col("corr", *self._arg(rows, "correlation"))
        C.add_col("cbid", *self._arg(rows, "cbid"))
        if self.links:
            C.add_col("ext", *self._arg(rows, "ext_id"))
            C.add_col("ret", *self._arg(rows, "xextra", "cuptiprof return code"))

    def _range(self, what: str, rows: np.ndarray) -> None:
        start, end = self._times(rows)
        if what in ("user", "gpu_user") and not self.links:
            v, ok = self._arg(rows, "ext_id")
            if ok.any():
                at = np.flatnonzero(ok)
                self.annots.add(at=len(self.ranges) + at, ext=v[at],
                                gpu=np.full(len(at), what == "gpu_user"))
        names = self.piece.I[rows, P.C_NAME].astype(np.int32)
        code = {"op": 0, "user": 1, "python": 2, "gpu_user": 3}[what]
        if what == "gpu_user":
            # no args needed: Kineto writes its device and stream as its pid and tid too
            dev = self._or_id(rows, "device", P.C_PIDK, P.C_PID)
            stream = self._or_id(rows, "stream", P.C_TIDK, P.C_TID)
            key = -1 - (dev * 100_000 + stream)  # GPU-side annotations nest per stream
        else:
            self._host_pids(rows)
            dev = stream = np.full(len(rows), -1, np.int64)
            key = self._ids(rows, P.C_TIDK, P.C_TID)
        self.ranges.add(key=key, start=start, end=end, name=names,
                        code=np.full(len(rows), code, np.int8), dev=dev, stream=stream)
        if self.links:
            I = self.piece.I
            self.ranges.add_col("ext", *self._arg(rows, "ext_id"))
            self.ranges.add_col("xstep", *self._arg(rows, "xstep"))
            self.ranges.add_col("xopen", *self._arg(rows, "xopen"))
            self.ranges.add(xdomain=I[rows, P.C_XDOMAIN], xkind=I[rows, P.C_XKIND])
        if self.procs:
            self.ranges.add(proc=self._proc_of(rows))

    def _or_id(self, rows: np.ndarray, field: str, kcol: int, vcol: int) -> np.ndarray:
        """An args field, or where it is absent the number in pid / tid."""
        v, ok = self._arg(rows, field)
        if not ok.all():
            v = v.copy()
            v[~ok] = self._ids(rows[~ok], kcol, vcol)
        return v

    def _instants(self, rows: np.ndarray) -> None:
        mem = self.names.find("[memory]")
        if mem < 0:
            return
        R = self.piece.I[rows]
        sel = (R[:, P.C_PH] == _PH_I) & (R[:, P.C_NAME] == mem) & (R[:, P.C_HASARGS] == 1)
        if not sel.any():
            return
        valid = R[:, P.C_VALID]
        t, b = P.A["mem_dev_type"], P.A["mem_bytes"]
        sel &= ((valid >> t) & 1).astype(bool) & (R[:, P.C_ARG0 + t] == 1)
        sel &= (((valid >> b) | (valid >> (P.OVER + b))) & 1).astype(bool)
        rows = rows[sel]
        if not len(rows):
            return
        ts = self.piece.F[rows, 0]
        if np.isnan(ts).any():
            return
        M = self.gpu["memory_events"]
        M.add(time_ns=self._ns(ts, rows), bytes=self._arg(rows, "mem_bytes")[0],
              tid=self._ids(rows, P.C_TIDK, P.C_TID))
        M.add_col("device_id", *self._arg(rows, "mem_dev_id"))
        M.add_col("address", *self._arg(rows, "mem_addr"))
        if self.links:
            M.add_col("xstep", *self._arg(rows, "xstep"))
            M.add_col("pool", *self._arg(rows, "xextra", "cuptiprof pool"))
            M.add_col("correlation_id", *self._arg(rows, "event_id", "cuptiprof correlation"))
            M.add(kind=self.piece.I[rows, P.C_XKIND])   # "cuptiprof kind": other than 'device'
        if self.procs:
            M.add(proc=self._proc_of(rows))
        self.rows["memory_events"] = self.rows.get("memory_events", 0) + len(rows)

    def _logs(self, rows: np.ndarray) -> None:
        """Log records of cuptiprof's export: time, thread, message (the name), level, logger
        and the step recorded (read in _finish where the trace has cuptiprof's links)."""
        if not len(rows):
            return
        self._host_pids(rows)
        I = self.piece.I
        ts = self.piece.F[rows, 0]
        ok = ~np.isnan(ts)
        bad = ok & ~(np.abs(np.where(ok, ts, 0)) < float(1 << 62) / self.scale)
        if bad.any():
            raise self._bad(rows[int(np.argmax(bad))], "timestamp out of range")
        tid = self._ids(rows, P.C_TIDK, P.C_TID)
        L = self.logs
        L.add_col("time", np.where(ok, self._ns(np.where(ok, ts, 0), rows), 0), ok)
        L.add_col("tid", tid, (I[rows, P.C_TIDK] != P.ID_NONE) & (tid != -1))
        L.add(message=I[rows, P.C_NAME].astype(np.int32), level=I[rows, P.C_XLEVEL].astype(np.int32),
              logger=I[rows, P.C_XLOGGER].astype(np.int32))
        L.add_col("xstep", *self._arg(rows, "xstep"))
        if self.procs:
            L.add(proc=self._proc_of(rows))

    # GPU side -------------------------------------------------------------------------------
    def _gpu(self, what: str, rows: np.ndarray) -> None:
        start, end = self._times(rows)
        self._need_args(rows)
        dev = self._or_id(rows, "device", P.C_PIDK, P.C_PID)
        stream = self._or_id(rows, "stream", P.C_TIDK, P.C_TID)
        self.devices_used.update(AC.distinct(dev).tolist())
        G = self.gpu[_GPU_TABLE[what]]
        G.add(start_ns=start, end_ns=end, name=self.piece.I[rows, P.C_NAME].astype(np.int32))
        if self.procs:
            G.add(proc=self._proc_of(rows))
        ones = np.ones(len(rows), bool)
        G.add_col("device_id", dev, ones)
        G.add_col("stream_id", stream, ones)
        G.add_col("context_id", *self._arg(rows, "context"))
        G.add_col("correlation_id", *self._arg(rows, "correlation"))
        if self.links:
            G.add_col("ext", *self._arg(rows, "ext_id"))
            G.add_col("xstep", *self._arg(rows, "xstep"))
            G.add_col("xrange", *self._arg(rows, "xrange"))
            if what in _EXTRA:
                G.add_col(_EXTRA[what][0], *self._arg(rows, "xextra", _EXTRA[what][1]))
        if what == "memcpy":   # a peer copy's devices (columns a copy's keys share)
            G.add_col("src_device_id", *self._arg(rows, "xdsmem", "fromDevice"))
            G.add_col("dst_device_id", *self._arg(rows, "xopen", "toDevice"))
        if what != "sync":   # the CUDA graph a row was launched from; 0: none (Kineto's)
            for k, a in (("graph_id", "xgraph"), ("graph_node_id", "xgnode")):
                v, ok = self._arg(rows, a, _ARG_KEYS["k" + a[1:]])
                G.add_col(k, v, ok & (v != 0))
        if what == "kernel":
            for k in ("grid", "block"):
                for j, xyz in enumerate("xyz"):
                    G.add_col(f"{k}_{xyz}", *self._arg(rows, f"{k}{j}"))
            G.add_col("registers", *self._arg(rows, "registers"))
            G.add_col("smem", *self._arg(rows, "smem"))
            if self.links:
                G.add_col("xdsmem", *self._arg(rows, "xdsmem"))
        elif what in ("memcpy", "memset"):
            G.add_col("bytes", *self._arg(rows, "bytes"))
        else:   # a sync: the CUDA event it waited on (Kineto's event syncs say it)
            G.add_col("cuda_event_id", *self._arg(rows, "event_id"))
        self.rows[_GPU_TABLE[what]] = self.rows.get(_GPU_TABLE[what], 0) + len(rows)

    # end of file ----------------------------------------------------------------------------
    def _gpu_tables(self, run_id, pid, base, link, mem_step, lo: int, hi: int) -> dict:
        """Rows lo:hi of each GPU table of this file as Arrow tables, links and names
        resolved."""
        out = {}
        names = self.name_list
        for table, G in self.gpu.items():
            n = min(hi, len(G.get("time_ns" if table == "memory_events" else "start_ns"))) - lo
            if n <= 0:
                continue
            get = lambda k, dtype=np.int64: G.get(k, dtype)[lo:hi]  # noqa: E731
            arrow = lambda k, typ: AC.array(get(k), typ, get(k + "?", bool))  # noqa: E731
            cols = {"run_id": AC.array(np.full(n, run_id, np.int32), pa.int32()),
                    "pid": AC.array(np.full(n, pid, np.int32), pa.int32()),
                    "device_id": arrow("device_id", pa.int32())}
            if table == "memory_events":
                b = get("bytes")
                cols.update(time_ns=AC.array(get("time_ns") + base, pa.int64()),
                            operation=AC.dictionary(b < 0, ["alloc", "free"]),
                            bytes=AC.array(np.abs(b), pa.int64()),
                            memory_kind=AC.dictionary(np.zeros(n, np.int32), ["device"]),
                            address=AC.array(get("address").astype(np.uint64), pa.uint64(),
                                             get("address?", bool) & (get("address") >= 0)),
                            step=_null_neg(mem_step[lo:hi], pa.int32()))
                if self.links:
                    cols["pool"] = _flag(get("pool"), get("pool?", bool))
                    cols["correlation_id"] = arrow("correlation_id", pa.int64())
                    cols["memory_kind"] = self._memory_kinds(get("kind"))
                out[table] = pa.table(cols)
                continue
            ids = get("name", np.int32)
            stream, ok = get("stream_id"), get("stream_id?", bool)
            stream = np.where(stream >= 1 << 31, stream - (1 << 32), stream)
            # unsigned -1 (a context-wide sync), or the -1 track of the export: no stream, NULL
            # as the collector stores it
            ok = ok & (stream >= 0)
            corr, corr_ok = get("correlation_id"), get("correlation_id?", bool)
            cols.update(context_id=arrow("context_id", pa.int32()),
                        stream_id=AC.array(stream, pa.int32(), ok),
                        correlation_id=AC.array(corr, pa.int64(), corr_ok),
                        start_ns=AC.array(get("start_ns") + base, pa.int64()),
                        end_ns=AC.array(get("end_ns") + base, pa.int64()))
            dev = get("device_id")
            cpu = (dev < 0) & get("device_id?", bool)
            cols.update(link(np.where(corr_ok, corr, -1),
                             (cpu, stream, get("start_ns") + base, get("end_ns") + base, ids)
                             if table == "kernels" and cpu.any() else None,
                             (get("ext"), get("ext?", bool)) if self.links else None,
                             _step_arg(G, lo, hi) if self.links else None,
                             (get("xrange"), get("xrange?", bool)) if self.links else None))
            if table != "syncs":
                for k in ("graph_id", "graph_node_id"):
                    cols[k] = arrow(k, pa.int64())
            if table == "memcpys":
                for k in ("src_device_id", "dst_device_id"):
                    cols[k] = _int32(get(k), get(k + "?", bool))
            if self.links and table != "syncs":
                if table == "memcpys":
                    cols["is_async"] = _flag(get("is_async"), get("is_async?", bool))
                elif table == "memsets":
                    cols["value"] = _int32(get("value"), get("value?", bool))
            if table == "kernels":  # a dictionary of kernel names only (they get demangled)
                cols["name"] = _names(ids, names)
                for k in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                          "registers"):
                    cols[k] = arrow(k, pa.int32())
                cols.update(_smem(get("smem"), get("smem?", bool),
                                  (get("xdsmem"), get("xdsmem?", bool)) if self.links else None))
            elif table == "memcpys":
                inv, kinds = _per_name(ids, names, _memcpy_kind)
                for j, k in enumerate(("copy_kind", "src_kind", "dst_kind")):
                    cols[k] = AC.dictionary(inv, [x[j] for x in kinds])
                cols["bytes"] = arrow("bytes", pa.int64())
            elif table == "memsets":
                cols["bytes"] = arrow("bytes", pa.int64())
                cols["memory_kind"] = AC.dictionary(*_per_name(ids, names, _memset_kind))
            else:
                cols["sync_type"] = AC.dictionary(*_per_name(
                    ids, names, lambda s: _SYNC.get((s or "").strip().lower(), "unknown")))
                # 0xFFFFFFFF (or -1): CUPTI's "no event"
                ev, ev_ok = get("cuda_event_id"), get("cuda_event_id?", bool)
                cols["cuda_event_id"] = AC.array(ev, pa.int64(),
                                                 ev_ok & (ev >= 0) & (ev != 0xFFFFFFFF))
            out[table] = pa.table(cols)
        return out

    def _memory_kinds(self, kind: np.ndarray) -> pa.DictionaryArray:
        """The memory kind of [memory] instants of cuptiprof's export: "cuptiprof kind" (ids
        in `small`), 'device' where it is absent (the export leaves 'device' out)."""
        uniq, inv = np.unique(kind, return_inverse=True)
        values = ["device" if u < 0 else self.small.strings[u] for u in uniq.tolist()]
        codes = {v: i for i, v in enumerate(dict.fromkeys(values))}
        return AC.dictionary(np.array([codes[v] for v in values], np.int32)[inv], list(codes))

    def _finish(self) -> FileSummary:
        if self.pid is None:   # a trace without host events: cuptiprof's export says its pid
            self._set_pid(self.proc.pid if self.proc.pid is not None else self.index)
        pid = self.pid
        base = self.base
        w = self.w() if callable(self.w) else self.w

        longest = max(len(self.ranges), len(self.calls), len(self.logs),
                      *map(len, self.gpu.values()))
        large = longest > APPEND_ROWS  # written in parts
        if large:  # the text pieces are gone: their pages go back before the next phase
            _release_freed_memory()
        R, C = self.ranges, self.calls
        # Times move to the trace's base in place: no second copy of the largest columns.
        r_start, r_end, c_start, c_end = R.get("start"), R.get("end"), C.get("start"), C.get("end")
        for v in (r_start, r_end, c_start, c_end):
            v += base
        r_code, r_name, r_key = R.get("code", np.int8), R.get("name", np.int32), R.get("key")
        c_tid = C.get("tid")
        c_corr_ok = C.get("corr?", bool)
        c_corr = np.where(c_corr_ok, C.get("corr"), -1)
        names = self.name_list
        # ProfilerStep#N ranges are the steps.
        # (one more entry, for id -1: a range without a name, which is no step)
        step_of_name = np.full(len(names) + 1, -1, np.int64)
        for i, n in enumerate(names):
            m = _STEP_RE.match(n) if type(n) is str else None
            if m:
                step_of_name[i] = int(m.group(1))
        r_stepn = step_of_name[r_name] if len(r_name) else np.zeros(0, np.int64)
        # torch's own record_function annotations ('Optimizer.step#SGD.step',
        # 'enumerate(DataLoader)#...') came as operators in 2021 traces (category Operator);
        # later torch writes them as user_annotation, and they are not ops (cuptiprof's export
        # writes a range's kind as recorded: an op stays one)
        annot = np.fromiter((type(n) is str and "#" in n and not n.startswith("aten::")
                             and step_of_name[i] < 0 for i, n in enumerate([*names, None])),
                            bool, len(names) + 1)
        if len(r_name) and annot.any() and not self.links:
            r_code = np.where((r_code == 0) & annot[r_name], np.int8(1), r_code)
        is_step = (r_stepn >= 0) & (r_code != 3)
        # a warm-up step of cuptiprof's export: kind 'warmup' with its own number, not a step
        warm = np.zeros(len(r_start), bool)
        if self.links and len(r_start) and self.small.find("warmup") >= 0:
            warm = R.get("xkind") == self.small.find("warmup")
            is_step &= ~warm
        s_start, s_end, s_n, s_key = r_start[is_step], r_end[is_step], r_stepn[is_step], r_key[is_step]
        # a range cuptiprof's export says was still open: it nests what ran inside it (its
        # end in the trace is the export's last time) and is written without an end
        r_open = (R.get("xopen?", bool) & (R.get("xopen") == 1)) if self.links and len(r_start) \
            else np.zeros(len(r_start), bool)

        parent, depth, c_range, c_op = nest(r_key, r_start, r_end, r_code == 0,
                                            c_tid, c_start, c_end)
        if not self.links and not self._has_gpu_work():
            self._cpu_kernels(r_code <= 1, ~(is_step | warm), parent, depth, r_name, r_key,
                              r_start, r_end)
            longest = max(longest, len(self.gpu["kernels"]))
            large = longest > APPEND_ROWS
        # what runs inside a warm-up is in it, as recorded: a warm-up holds rows as a step does
        held = is_step | warm
        held_n = np.where(warm, _step_arg(R), r_stepn) if warm.any() else r_stepn
        at = (r_start[held], r_end[held], held_n[held])
        # the warm-up or step each range began in (its index among them): its step, and below
        # whether it began in a warm-up
        r_in = steps_at(r_start, *at[:2], np.arange(len(at[0])), r_key, r_key[held])
        r_step = np.where(r_in >= 0, at[2][np.maximum(r_in, 0)], -1) if len(at[0]) else r_in
        r_step[held] = held_n[held]
        # A GPU-side annotation runs when the GPU gets to its work, often in a later step of
        # the host's: it takes the step of the host annotation it mirrors (its External id).
        A = self.annots
        if len(A) and len(r_step):
            a_at, a_ext, a_gpu = A.get("at"), A.get("ext"), A.get("gpu", bool)
            h_ext, first = np.unique(a_ext[~a_gpu], return_index=True)
            if len(h_ext):
                g_at, g_ext = a_at[a_gpu], a_ext[a_gpu]
                pos = np.minimum(np.searchsorted(h_ext, g_ext), len(h_ext) - 1)
                hit = h_ext[pos] == g_ext
                r_step[g_at[hit]] = r_step[a_at[~a_gpu][first[pos[hit]]]]
        if self.links and len(r_step):
            # cuptiprof's export says a GPU-side annotation's step as recorded, where it had one
            said = _step_arg(R)
            gpu_ann = (r_code == 3) & (said >= 0)
            r_step[gpu_ann] = said[gpu_ann]
        # a call takes a step, never a warm-up (whose work has no step, as recorded): as the
        # collector gives it, its own thread's step or warm-up first (in a warm-up: none), else
        # the latest-started step of any thread that holds it
        c_step = steps_at(c_start, s_start, s_end, s_n, c_tid, s_key)
        if warm.any() and len(c_start):
            w_key = r_key[warm]
            c_w = steps_at(c_start, r_start[warm], r_end[warm], np.arange(len(w_key)), c_tid,
                           w_key)
            in_own = c_w >= 0
            in_own[in_own] = w_key[c_w[in_own]] == c_tid[in_own]
            c_step[in_own] = -1
        by_ext = self._by_ext(R) if self.links else None
        if by_ext is not None and len(c_start):
            # cuptiprof's export: each call's External id is its innermost range (as recorded),
            # which gives its range and step; not by time (a call stamped on another clock, or
            # just before its range began, would fall outside the step it ran in). A range in
            # no step (one that began outside every step, or before the steps of an export of
            # some) gives none: its call takes the step open in its process by time, as the
            # collector gives it. A range begun in a warm-up gives none either (by time too: in
            # the warm-up none, after it the step then open).
            cr = by_ext(C.get("ext"), C.get("ext?", bool))
            hit = cr >= 0
            c_range[hit] = cr[hit]
            rs = r_step[cr[hit]]
            if warm.any():
                hidx = np.flatnonzero(held)
                r_warm = np.where(r_in >= 0, warm[hidx[np.maximum(r_in, 0)]], False) | warm
                rs = np.where(r_warm[cr[hit]], -1, rs)
            c_step[hit] = np.where(rs >= 0, rs, c_step[hit])

        L = self.logs
        n_l = len(L)
        if n_l:   # log records: the step recorded (cuptiprof's export), else the step by time
            l_ok, l_tid = L.get("time?", bool), L.get("tid")
            l_time = np.where(l_ok, L.get("time") + base, 0)
            if self.links:
                l_step = _step_arg(L)
            else:
                l_step = np.where(l_ok, steps_at(l_time, s_start, s_end, s_n, l_tid, s_key), -1)

        # memory events (torch's [memory] instants): the step recorded (cuptiprof's export),
        # else the step open on their thread at their time, as the allocating call's would be
        M = self.gpu["memory_events"]
        if self.links:
            m_step = _step_arg(M)
        else:
            m_step = steps_at(M.get("time_ns") + base, *at, M.get("tid"), r_key[held])

        # Link GPU rows to the call that launched them (the first call with that correlation
        # id): its step, innermost range and op.
        has = np.flatnonzero(c_corr >= 0)
        corr_sorted, first = np.unique(c_corr[has], return_index=True)
        first = has[first]

        launched = np.zeros(len(c_step), bool)   # calls with GPU rows: their steps are not empty
        ops_at: dict | None = None

        def link(g: np.ndarray, cpu: tuple | None = None, ext: tuple | None = None,
                 xstep: np.ndarray | None = None, xrange: tuple | None = None) -> dict:
            nonlocal ops_at
            call = np.full(len(g), -1, np.int64)
            if len(corr_sorted):
                pos = np.minimum(np.searchsorted(corr_sorted, g), len(corr_sorted) - 1)
                call = np.where((corr_sorted[pos] == g) & (g >= 0), first[pos], -1)
            found = call >= 0
            call = np.where(found, call, 0)
            pick = lambda v: np.where(found, v[call], -1) if len(v) else call - 1  # noqa: E731
            launched[call[found]] = True
            step, rng, op = pick(c_step), pick(c_range), pick(c_op)
            if cpu is not None:
                # A run without a GPU records each CPU op that does the work as a kernel on
                # device -1 (stream = thread) over the op's own interval; no call launched it,
                # so it takes the step and links of the range with that thread, interval and
                # name: a cpu_op, or a record_function label (a user range: its op is the
                # innermost op around it, if any).
                if ops_at is None:
                    o = np.flatnonzero((r_code <= 1) & ~held)
                    o = o[np.argsort(depth[o], kind="stable")]
                    ops_at = {}
                    for i, k, a, b, nm in zip(o.tolist(), r_key[o].tolist(), r_start[o].tolist(),
                                              r_end[o].tolist(), r_name[o].tolist()):
                        ops_at.setdefault((k, a, b, nm), i)   # of equal ones, the outermost
                mask, thread, start, end, kname = cpu
                up = None
                for j in np.flatnonzero(mask & ~found).tolist():
                    i = ops_at.get((int(thread[j]), int(start[j]), int(end[j]), int(kname[j])), -1)
                    if i >= 0:
                        if r_code[i] != 0 and up is None:
                            up = _nearest(parent, depth, r_code == 0)
                        step[j], rng[j], op[j] = r_step[i], i, i if r_code[i] == 0 else up[i]
            if ext is not None and by_ext is not None:
                # cuptiprof's export: a GPU row's External id is its op as recorded (none: none)
                v, ok = ext
                o = by_ext(v, ok)
                op = np.where(o >= 0, o, np.where(ok, op, -1))
            if xstep is not None:
                # cuptiprof's export: the step as recorded, written on a row whose launching
                # call is not in the trace (where the call is, its step is the row's)
                step = np.where(found | (xstep < 0), step, xstep)
            if xrange is not None and by_ext is not None:
                # and its innermost range as recorded, by that range's External id (written
                # too where it is not the launching call's)
                r = by_ext(*xrange)
                rng = np.where(r >= 0, r, rng)
            return {"step": _null_neg(step, pa.int32()),
                    "range_id": _opt(rng), "op_id": _opt(op)}

        # Written APPEND_ROWS rows of each table at a time: the Arrow columns, the writer's
        # copies and DuckDB's uncommitted rows of a large trace exist for one part at a time.
        i32 = lambda v: AC.array(np.full(len(v), v, np.int32) if np.ndim(v) == 0 else v, pa.int32())  # noqa: E731
        n_r, n_c = len(r_start), len(c_start)
        dev, stream = R.get("dev"), R.get("stream")
        gpu_ranges = bool((dev >= 0).any())
        unclaimed: dict[str, int] = {}
        for lo in range(0, max(longest, 1), APPEND_ROWS):
            hi = lo + APPEND_ROWS
            batch: dict = self._gpu_tables(w.run_id, pid, base, link, m_step, lo, hi)
            for t in ("kernels", "memcpys", "memsets"):
                if t in batch:
                    unclaimed[t] = unclaimed.get(t, 0) + batch[t]["step"].null_count
            if lo < n_r:
                sl = slice(lo, min(hi, n_r))
                n = sl.stop - lo
                code = r_code[sl]
                attrs = (AC.strings([None if d < 0 else json.dumps({"device": d, "stream": s})
                                     for d, s in zip(dev[sl].tolist(), stream[sl].tolist())])
                         if gpu_ranges else pa.nulls(n, pa.string()))
                batch["ranges"] = {
                    "run_id": i32(np.full(n, w.run_id)), "pid": i32(np.full(n, pid)),
                    "range_id": AC.array(np.arange(lo + 1, sl.stop + 1), pa.int64()),
                    "parent_id": _opt(parent[sl]), "depth": i32(depth[sl]),
                    "name": _names(r_name[sl], names),
                    "domain": self._domains(code, R.get("xdomain")[sl] if self.links else None),
                    "thread_id": AC.array(np.where(code == 3, stream[sl], r_key[sl]), pa.int64()),
                    "start_ns": AC.array(r_start[sl], pa.int64()),
                    "end_ns": AC.array(r_end[sl], pa.int64(), ~r_open[sl]),
                    "kind": AC.dictionary(np.where(warm[sl], 3, np.where(is_step[sl], 2,
                                                                         np.minimum(code, 1))),
                                          ["op", "user", "step", "warmup"]),
                    "step": _null_neg(r_step[sl], pa.int32()), "attrs": attrs}
            if lo < n_c:
                sl = slice(lo, min(hi, n_c))
                n = sl.stop - lo
                batch["api_calls"] = {
                    "run_id": i32(np.full(n, w.run_id)), "pid": i32(np.full(n, pid)),
                    "thread_id": AC.array(c_tid[sl], pa.int64()),
                    "api_kind": AC.dictionary(C.get("driver", bool)[sl], ["runtime", "driver"]),
                    "cbid": _null_neg(np.where(C.get("cbid?", bool)[sl], C.get("cbid")[sl], -1),
                                      pa.int32()),
                    "name": _names(C.get("name", np.int32)[sl], names),
                    "correlation_id": _null_neg(c_corr[sl], pa.int64()),
                    "start_ns": AC.array(c_start[sl], pa.int64()),
                    "end_ns": AC.array(c_end[sl], pa.int64()),
                    "step": _null_neg(c_step[sl], pa.int32()), "range_id": _opt(c_range[sl])}
                if self.links:
                    batch["api_calls"]["return_code"] = _int32(C.get("ret")[sl],
                                                               C.get("ret?", bool)[sl])
            if lo < n_l:
                sl = slice(lo, min(hi, n_l))
                n = sl.stop - lo
                small = self.small.strings
                text = lambda k, s: AC.strings([s[i] if i >= 0 else None  # noqa: E731
                                                for i in L.get(k, np.int32)[sl].tolist()])
                batch["logs"] = {
                    "run_id": i32(np.full(n, w.run_id)), "pid": i32(np.full(n, pid)),
                    "thread_id": AC.array(l_tid[sl], pa.int64(), L.get("tid?", bool)[sl]),
                    "time_ns": AC.array(l_time[sl], pa.int64(), l_ok[sl]),
                    "level": text("level", small), "logger": text("logger", small),
                    "message": text("message", names), "step": _null_neg(l_step[sl], pa.int32())}
            if hi >= longest:  # the last part: one row per process, devices, data quality
                worked = set(AC.distinct(c_step[launched & (c_step >= 0)]).tolist()) \
                    if launched.any() else set()
                empty = sorted(set(s_n.tolist()) - worked) if worked else []
                self._meta_rows(batch, w.run_id, pid, len(s_n), unclaimed, empty,
                                r_start, r_end, c_start, c_end)
            if large:
                _release_freed_memory()  # the previous part's copies
            w.append(batch)
        original = self.original_pid if self.original_pid is not None else self.proc.pid
        if original is None and len(self.host_pids) == 1:
            original = next(iter(self.host_pids))
        return FileSummary(str(self.path), pid, self.dist.rank if self.dist else None,
                           self.events, dict(self.rows), dict(self.unknown), len(s_n),
                           self.from_run, list(self.quality), original, list(self.quiet))

    def _has_gpu_work(self) -> bool:
        """Any kernel, copy or memset read so far."""
        return any(len(self.gpu[t].get("start_ns")) for t in ("kernels", "memcpys", "memsets"))

    def _cpu_kernels(self, is_event, not_step, parent, depth, r_name, r_key, r_start, r_end):
        """A trace recorded without CUDA activity: the CPU ops that do the work become kernels on
        device -1, one stream per thread, as `cuptiprof run` without a GPU stores them (ops and
        record_function labels are torch.profiler's events there; steps and Python frames are not)."""
        event = is_event & not_step
        if not event.any():
            return
        up = _nearest(parent, depth, event)
        idx = np.flatnonzero(event)
        at = np.full(len(event), -1, np.int64)
        at[idx] = np.arange(len(idx))
        names = self.name_list
        work = idx[intervals_work([names[i] if i >= 0 else None for i in r_name[idx].tolist()],
                                  np.where(up[idx] >= 0, at[up[idx]], -1),
                                  r_end[idx] - r_start[idx])]
        n = len(work)
        G = self.gpu["kernels"]
        G.add(start_ns=r_start[work] - self.base, end_ns=r_end[work] - self.base,
              name=r_name[work].astype(np.int32))
        yes, no, zero = np.ones(n, bool), np.zeros(n, bool), np.zeros(n, np.int64)
        G.add_col("device_id", np.full(n, -1, np.int64), yes)
        G.add_col("stream_id", r_key[work].astype(np.int64), yes)
        for k in ("context_id", "correlation_id", "grid_x", "grid_y", "grid_z", "block_x",
                  "block_y", "block_z", "registers", "smem", "graph_id", "graph_node_id"):
            G.add_col(k, zero, no)
        self.devices_used.add(-1)
        self.cpu_ops = n
        self.rows["kernels"] = self.rows.get("kernels", 0) + n

    @staticmethod
    def _by_ext(R: _Cols):
        """For cuptiprof's export: External ids (values, validity) -> the index of the range
        exported with that range_id (-1: none, or not in the trace)."""
        v, ok = R.get("ext"), R.get("ext?", bool)
        keys = np.flatnonzero(ok)
        ids, first = np.unique(v[keys], return_index=True)
        first = keys[first]

        def find(g: np.ndarray, g_ok: np.ndarray) -> np.ndarray:
            if not len(ids):
                return np.full(len(g), -1, np.int64)
            pos = np.minimum(np.searchsorted(ids, g), len(ids) - 1)
            return np.where(g_ok & (ids[pos] == g), first[pos], -1)
        return find

    def _domains(self, code: np.ndarray, xdomain: np.ndarray | None) -> pa.DictionaryArray:
        """Each range's domain: its category's, or where cuptiprof's export wrote one (an NVTX
        domain; null: NVTX's default domain), that."""
        cats = ["cpu_op", "user_annotation", "python_function", "gpu_user_annotation"]
        if xdomain is None or not len(xdomain) or (xdomain == P.XDOMAIN_ABSENT).all():
            return AC.dictionary(code, cats)
        own = np.unique(xdomain[xdomain >= 0])
        codes = np.where(xdomain >= 0, len(cats) + np.searchsorted(own, np.maximum(xdomain, 0)),
                         code)
        values = cats + [self.small.strings[i] for i in own.tolist()]
        return pa.DictionaryArray.from_arrays(
            AC.array(codes, pa.int32(), xdomain != -1), AC.strings(values))

    def _meta_rows(self, batch, run_id, pid, n_steps, unclaimed, empty, r_start, r_end, c_start,
                   c_end) -> None:
        lo = [int(x.min()) for x in (r_start, c_start) if len(x)]
        hi = [int(x.max()) for x in (r_end, c_end) if len(x)]
        for t in ("kernels", "memcpys", "memsets", "syncs"):
            G = self.gpu[t]
            if len(G.get("start_ns")):
                lo.append(int(G.get("start_ns").min()) + self.base)
                hi.append(int(G.get("end_ns").max()) + self.base)
        rank = self.dist.rank if self.dist else None
        if rank is None and not self.rank_known:
            rank = ranks.from_name(self.path.name)
        proc = self.proc
        own = lambda v, mine: mine if v is msgspec.UNSET else v  # noqa: E731
        batch["processes"] = _rows(run_id, pid, [{
            "host": self.host, "rank": rank,
            "world_size": self.dist.world_size if self.dist else None,
            "command": own(proc.command, str(self.path)), "local_rank": self.local_rank,
            "start_ns": own(proc.startNs, min(lo) if lo else None),
            "end_ns": own(proc.endNs, max(hi) if hi else None),
            "exit_status": proc.exitStatus}],
            {"rank": pa.int32(), "world_size": pa.int32(), "local_rank": pa.int32(), "start_ns": pa.int64(),
             "end_ns": pa.int64(), "exit_status": pa.int32()})
        early = proc.endedEarly
        batch["processes"]["ended_early"] = AC.array(np.array([bool(early)]), pa.bool_(),
                                                     np.array([early is not None]))
        props = {p.id: p for p in self.devprops if p.id is not None}
        devs = sorted(d for d in self.devices_used if d is not None) or sorted(props)
        if devs:
            rows = [props.get(d) or DevProp(id=d) for d in devs]
            batch["devices"] = _rows(run_id, pid, [{
                # device -1: the CPU ops of a run without a GPU (cuptiprof's export), not GPU work
                "device_id": d, "kind": "cpu" if d < 0 else "gpu", "name": p.name,
                "compute_capability": f"{p.computeMajor}.{p.computeMinor}"
                if p.computeMajor is not None else None,
                "sm_count": p.numSms, "memory_bytes": p.totalGlobalMem,
                "peak_memory_bw_gbps": p.peakMemoryBandwidthGBps, "uuid": p.uuid,
                "core_clock_mhz": p.coreClockMHz, "memory_clock_mhz": p.memoryClockMHz,
                "memory_bus_width_bits": p.memoryBusWidthBits, "l2_bytes": p.l2CacheBytes,
                "peak_host_link_gbps": p.peakHostLinkGBps, "peak_nvlink_gbps": p.peakNvlinkGBps,
                "source": "trace"}
                for d, p in zip(devs, rows)],
                {"device_id": pa.int32(), "sm_count": pa.int32(), "memory_bytes": pa.int64(),
                 "peak_memory_bw_gbps": pa.float64(), "core_clock_mhz": pa.float64(),
                 "memory_clock_mhz": pa.float64(), "memory_bus_width_bits": pa.int32(),
                 "l2_bytes": pa.int64(), "peak_host_link_gbps": pa.float64(),
                 "peak_nvlink_gbps": pa.float64()})
        quality = []
        if self.cpu_ops:   # torch.profiler without ProfilerActivity.CUDA
            quality.append({"check_name": "no_gpu", "subject": "gpu", "count": self.cpu_ops,
                            "detail": f"no GPU activity in {self.path.name} (recorded without "
                            f"CUDA activity): kernels holds the {self.cpu_ops} CPU ops that do "
                            "the work, on device -1, one stream per thread, as a run without a "
                            "GPU stores them"})
        elif devs and max(devs) < 0:   # as the run without a GPU said
            quality.append({"check_name": "no_gpu", "subject": "gpu", "count": None,
                            "detail": f"no GPU activity in {self.path.name}: kernels holds CPU ops "
                            "on device -1, one stream per thread"})
        elif not self._has_gpu_work():
            # no GPU work and no CPU op either: the reports of GPU work are empty
            quality.append({"check_name": "no_gpu", "subject": "gpu", "count": None,
                            "detail": f"no GPU activity in {self.path.name}: a trace recorded "
                            "without CUDA activity (ProfilerActivity.CUDA) and without CPU ops"})
        for key, n in sorted(self.big_args.items()):
            quality.append({"check_name": "out_of_range_args", "subject": key, "count": n,
                            "detail": f"{n} {key!r} args in {self.path.name} hold an integer "
                            "beyond 64 bits (not a value any writer of this field uses): "
                            "taken as absent"})
        for cat, n in sorted(self.unknown.items()):
            quality.append({"check_name": "unknown_category", "subject": cat, "count": n,
                            "detail": f"{n} events of category {cat!r} in {self.path.name} were "
                            "not imported (a category cuptiprof does not know)"})
        if n_steps:
            for t, label in (("kernels", "kernel"), ("memcpys", "memcpy"), ("memsets", "memset")):
                n = unclaimed.get(t, 0)
                if n:
                    quality.append({"check_name": "unclaimed_records", "subject": label, "count": n,
                                    "detail": f"{n} {label} rows in {self.path.name} were launched "
                                    "outside every ProfilerStep (or by no recorded API call); they "
                                    "have no step"})
        if len(self.host_pids) > 1:
            shown = ", ".join(map(str, sorted(self.host_pids)[:4])) + (" ..." if len(self.host_pids) > 4 else "")
            quality.append({"check_name": "processes_merged", "subject": str(len(self.host_pids)),
                            "count": len(self.host_pids),
                            "detail": f"{self.path.name} holds the host events of "
                            f"{len(self.host_pids)} processes ({shown}), imported as one process "
                            f"(pid {pid}); import one trace per process to keep them apart"})
        for n in empty:   # a step whose launches all missed the trace, or one that launched none
            quality.append({"check_name": "empty_step", "subject": str(n), "count": 0,
                            "detail": f"step {n} has no GPU activity in {self.path.name} "
                            "(nothing launched, or not captured)"})
        if not n_steps and self.rows:
            quality.append({"check_name": "missing_kind", "subject": "step", "count": 0,
                            "detail": f"{self.path.name} has no ProfilerStep#N ranges; rows carry "
                            "no step"})
        if quality:
            batch["data_quality"] = _rows(run_id, pid, quality, {"count": pa.int64()})


# args field -> its key in the trace ("External id")
_ARG_KEYS = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}
_GPU_TABLE = {"kernel": "kernels", "memcpy": "memcpys", "memset": "memsets", "sync": "syncs"}
# the column a GPU category keeps in args "xextra" of cuptiprof's export, and its key there
_EXTRA = {"memcpy": ("is_async", "cuptiprof async"), "memset": ("value", "cuptiprof value")}
_PH_X, _PH_I, _PH_M = 0, 1, 2  # ids in KinetoFile.small, interned first


_TRIM: list = []


def _nearest(parent: np.ndarray, depth: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Each row's nearest ancestor where `keep` holds (-1: none), shallow rows first."""
    up = np.full(len(parent), -1, np.int64)
    for d in range(1, int(depth.max()) + 1 if len(depth) else 0):
        i = np.flatnonzero(depth == d)
        p = parent[i]
        up[i] = np.where(keep[p], p, up[p])
    return up


def _step_arg(cols: "_Cols", lo: int = 0, hi: int | None = None) -> np.ndarray:
    """The "cuptiprof step" arg of each row (of rows lo:hi), -1 where absent: a value no step
    column holds (beyond 32 bits, from another writer or an edit) is taken as absent, not a
    failed import."""
    v = cols.get("xstep")[lo:hi]
    return np.where(cols.get("xstep?", bool)[lo:hi] & (v > -2**31) & (v < 2**31), v, -1)


def claim_pid(used: set[int], pid: int) -> int:
    """The pid a process of an import is written with: its own, unless an earlier file of the
    import used it already (two ranks on different hosts or containers with the same pid), then
    one above every real pid (pid + k * 2**22), so that no two files' rows, ranges or launch
    links ever mix. Marks it used. The Kineto and nsys importers share this rule."""
    p, k = pid, 0
    while p in used:
        k += 1
        p = pid + k * (1 << 22)
    used.add(p)
    return p


def _release_freed_memory() -> None:
    """Give freed heap pages back to the system (glibc's malloc_trim; nothing elsewhere).
    A large import frees its text pieces, then each part's copies, in bulk; glibc keeps such
    pages, and they would count in the peak of the phase that follows (measured: -19% peak
    on a 560 MB trace, with the parts)."""
    if not _TRIM:
        try:
            import ctypes
            _TRIM.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):  # not glibc
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def _rows(run_id: int, pid: int, rows: list[dict], ints: dict) -> dict:
    """A few metadata rows -> columns (strings unless typed in `ints`: integers, or floats)."""
    out = {"run_id": AC.array(np.full(len(rows), run_id), pa.int32()),
           "pid": AC.array(np.full(len(rows), pid), pa.int32())}
    for k in rows[0]:
        vals = [r[k] for r in rows]
        if k in ints and pa.types.is_floating(ints[k]):
            out[k] = AC.array(vals, ints[k])
        elif k in ints:
            v, ok = AC.ints(vals)
            out[k] = AC.array(v, ints[k], ok)
        else:
            out[k] = AC.strings(vals)
    return out


def _smem(total: np.ndarray, ok: np.ndarray, dynamic: tuple | None) -> dict:
    """Kineto's "shared memory" is a kernel's static plus dynamic shared memory. Where
    cuptiprof's export says the dynamic part ("cuptiprof dynamic smem"), it is split again; a
    trace that does not say it keeps the sum as static_smem (dynamic_smem NULL)."""
    d, d_ok = dynamic if dynamic is not None else (np.zeros(len(total), np.int64),
                                                  np.zeros(len(total), bool))
    d_ok = d_ok & ok & (d >= 0) & (d <= total)
    return {"static_smem": AC.array(np.where(d_ok, total - d, total), pa.int32(), ok),
            "dynamic_smem": AC.array(d, pa.int32(), d_ok)}


def _flag(v: np.ndarray, ok: np.ndarray) -> pa.Array:
    """0 / 1 args as a BOOLEAN column (NULL where absent or another number)."""
    return AC.array(v == 1, pa.bool_(), ok & ((v == 0) | (v == 1)))


def _int32(v: np.ndarray, ok: np.ndarray) -> pa.Array:
    """Args as an INTEGER column (NULL where absent or beyond 32 bits)."""
    return AC.array(v, pa.int32(), ok & (v >= -2**31) & (v < 2**31))


def _opt(ix) -> pa.Array:
    """Row index -> 1-based id; -1 -> NULL."""
    ix = np.asarray(ix)
    return AC.array(ix + 1, pa.int64(), ix >= 0)


def _null_neg(v, typ) -> pa.Array:
    v = np.asarray(v)
    return AC.array(v, typ, v >= 0)


def import_kineto(w, paths: list[Path], on_read=None) -> list[FileSummary]:
    """Read each trace file into the writer `w` (one process per file; a trace of cuptiprof's
    export of several processes, one per process). `w` may also be a callable returning the
    writer, called when the first file has been read (so opening the output can overlap the
    parse).

    Several traces of cuptiprof's export of the same process of the same run (exports of some
    of its steps, `export --steps`: the same `cuptiprofRun`, and the same pid, host, rank,
    command, start, end and exit of the process, _process_key) are that one process again:
    imported as one process, under the pid the first of them takes, every row of each, and a
    range that several hold (one around the steps of both) once. Its range ids are numbered
    over all of them, and its steps, launch links and data_quality rows are those of an
    import of one export of all their steps, less what an export of some steps leaves out
    (a range that lies between the steps of two exports, in none of them). Such traces are
    held, read and not written, until the last trace of the import that says that process
    in its head (_said_processes) is read. Where two of them hold the same step (two exports
    whose steps overlap, or an export of every row beside another) or the same API call or
    GPU row, the import is refused in one line: imported together, those rows would count
    twice, as one process or as two. Traces of anything else (other processes, other runs,
    torch.profiler's own traces, whatever their pids) stay processes of their own."""
    paths = [Path(p) for p in paths]
    used: set[int] = set()
    # the processes each trace's head says (only several traces can share one), and the last
    # trace that says each process that more than one says
    said = [_said_processes(p) for p in paths] if len(paths) > 1 else []
    last: dict = {}
    for i, keys in enumerate(said):
        for k in keys:
            last.setdefault(k, []).append(i)
    shared = {k: v[-1] for k, v in last.items() if len(v) > 1}
    held: dict = {}    # process -> [(place, part)]: read, not yet written
    done: list = []    # (place, FileSummary): in the order of the traces and their processes
    for i, p in enumerate(paths):
        with _named(p):
            for j, part in enumerate(KinetoFile(w, p, i, used, on_read).parts()):
                key = part.identity()
                if key in shared and (key in held or shared[key] > i):
                    # its pid now, as a trace not held takes its own
                    if part.pid is None and not part.hollow:
                        part._set_pid(part.proc.pid if part.proc.pid is not None else i)
                    # (a hollow one too: its place is the process's, where it comes first)
                    held.setdefault(key, []).append(((i, j), part))
                elif not part.hollow:
                    done.append(((i, j), part._finish()))
        for key in [k for k in held if shared[k] <= i]:
            group = held.pop(key)
            parts = [m for _, m in group]
            with _named(parts[0].path):
                if all(m.hollow for m in parts):
                    continue   # a process no trace holds a row of
                if _alike(parts):
                    done.append((group[0][0], _merge_parts(parts, used)._finish()))
                else:   # (not as cuptiprof's export writes them) apart, as any other traces
                    done.extend((place, m._finish()) for place, m in group if not m.hollow)
    return [s for _, s in sorted(done, key=lambda d: d[0])]


@contextlib.contextmanager
def _named(path: Path):
    """A shape of trace this importer does not handle: one line naming the file, no
    traceback."""
    try:
        yield
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot import this trace ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None


def _process_key(run: RunEntry, pid: int, host, rank, proc) -> tuple:
    """What tells a process of cuptiprof's export from every other: its run as exported (every
    field: its id alone is a number each file gives its own runs), its pid in the exported
    file, and its host, rank, command, start, end and how it ended. (`proc`: a ProcInfo or
    ProcEntry.)"""
    return (msgspec.structs.astuple(run), pid, host, rank, proc.exitStatus, proc.endedEarly,
            proc.command, proc.startNs, proc.endNs)


_HEAD_BYTES = 8 << 20   # text read, at most, for the keys before "traceEvents"


def _said_processes(path: Path) -> set:
    """The processes a trace of cuptiprof's export says it holds (their _process_key), from its
    head: the keys the export writes before "traceEvents" (the events are not read). Empty for
    a trace of another writer, one whose head says no process, or one that cannot be read here
    (reading it is left to KinetoFile, which names what is wrong)."""
    buf = bytearray()
    blocks = text_blocks(path)
    try:
        for block in blocks:
            buf += block
            at = text_start(buf)   # (past a byte-order mark and whitespace)
            if at is not None:
                if buf[at:at + 1] != b"{":
                    return set()
                m = _ARRAY_START.search(buf, at)
                if m is not None:
                    break
            if len(buf) > _HEAD_BYTES:
                return set()
        else:
            return set()
        doc = _DECODER.decode(bytes(buf[at:m.start()]) + b'"traceEvents": []}')
    except (OSError, InputError, msgspec.DecodeError, RecursionError):
        return set()
    finally:
        blocks.close()
    if doc.cuptiprofLinks != "range_id":
        return set()
    if doc.cuptiprofProcesses and len(doc.cuptiprofProcesses) > 1:
        return {_process_key(e.run, e.originalPid, e.host, e.rank, e)
                for e in doc.cuptiprofProcesses if e.run is not None and e.originalPid is not None}
    proc = doc.cuptiprofProcess
    if doc.cuptiprofRun is None or proc is None or proc.pid is None:
        return set()
    rank = doc.distributedInfo.rank if doc.distributedInfo is not None else None
    return {_process_key(doc.cuptiprofRun, proc.pid, doc.host_name or None, rank, proc)}


def _merge_parts(parts: list[KinetoFile], used: set[int]) -> KinetoFile:
    """Several traces' exports of one process (import_kineto) as one: the first, holding the
    rows of all, with the pid the first of them took (the others' go back to `used`).
    Refused (InputError) where two hold the same step or the same API call or GPU row."""
    held = [(m, *m._holds()) for m in parts]
    for j, (b, b_steps, b_corr, b_rows) in enumerate(held):
        for a, a_steps, a_corr, a_rows in held[:j]:
            if not (a_rows and b_rows):
                continue   # (a process the trace names without a row of it)
            both = a_steps & b_steps
            if both:
                why = f"both hold step{'s' if len(both) > 1 else ''} {_numbers(both)}"
            elif not (a_steps and b_steps):
                why = (f"{(b if a_steps else a).path.name} holds rows in no step (an export of "
                       "every row)")
            elif len(np.intersect1d(a_corr, b_corr)):
                why = "both hold the same API calls or GPU rows (their correlation ids)"
            else:
                continue
            run = a.from_run
            run = repr(run.label) if run.label else run.id
            pid = a.original_pid if a.original_pid is not None else a.proc.pid
            raise InputError(
                f"{b.path}: an export of the same process as {a.path} (pid {pid} of run {run}), "
                f"and {why}: imported together, those rows would count twice; import exports "
                "of steps that do not overlap (cuptiprof export --steps A:B), or import these "
                "into separate files")
    first = parts[0]
    pid = next((m.pid for m in parts if m.pid is not None), None)
    for m in parts:
        if m.pid is not None and m.pid != pid:
            used.discard(m.pid)
    first.pid = pid
    for m in parts[1:]:
        first._absorb(m)
    first.hollow = all(m.hollow for m in parts)
    return first


def _alike(parts: list[KinetoFile]) -> bool:
    """Whether the rows read of each part have the same columns, table by table (as every
    trace of cuptiprof's export gives them), so that one part can take in the others'."""
    def tables(m: KinetoFile) -> list:
        return [m.ranges, m.calls, m.logs, *(m.gpu[t] for t in sorted(m.gpu))]
    for cols in zip(*map(tables, parts)):
        if len({frozenset(c.keys()) for c in cols if len(c)}) > 1:
            return False
    return True


def _numbers(nums: set) -> str:
    """Step numbers as 'N', 'A:B' (consecutive) or the first few."""
    v = sorted(nums)
    if len(v) == 1:
        return str(v[0])
    if v[-1] - v[0] == len(v) - 1:
        return f"{v[0]}:{v[-1]}"
    return ", ".join(map(str, v[:5])) + (" ..." if len(v) > 5 else "")


def _remap(v: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Interned ids as those of another interner (`table`: id -> its id there); a negative one
    (none, absent) stays."""
    if not len(v) or not len(table):
        return v
    return np.where(v >= 0, table[np.maximum(v, 0)], v).astype(v.dtype)
