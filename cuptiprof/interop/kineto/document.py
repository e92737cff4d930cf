"""What a piece of trace text is decoded into where the native scanner declines it (or is
not built): msgspec Structs of the fields kept from each event (Ev, Args) and of the
top-level keys, Kineto's and cuptiprof's own (Doc), and the decoder."""
from __future__ import annotations

from typing import Any, Union

import msgspec


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
    # written by cuptiprof's own Chrome export, so that a round trip keeps them (chrome/head.py's
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

# args field -> its key in the trace ("External id")
_ARG_KEYS = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}
