"""Import torch.profiler / Kineto Chrome-trace JSON (.json, .json.gz) into a cuptiprof file.

Every dialect from 2021 on: capitalised categories (`Kernel`, `Runtime`, `Operator`) and
modern ones (`kernel`, `cuda_runtime`, `cpu_op`, ...), string thread ids ("stream 7"), integer
or fractional microsecond timestamps, `baseTimeNanoseconds`.

How it stays fast and bounded: the uncompressed text is cut at event boundaries into pieces
of ~16 MB, each decoded by msgspec into small typed Structs that keep only the fields used
(no dict per event). GPU rows are written piece by piece; host rows (ops, annotations, API
calls) are kept as compact columns until the file ends, because a launch is attributed to the
innermost op open on its thread, and a GPU row to the step of the call that launched it,
which needs the whole host timeline. Those links are then applied to the written GPU rows
with one UPDATE per table.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Union

import msgspec
import numpy as np
import pyarrow as pa

from cuptiprof.errors import InputError
from cuptiprof.interop.nesting import nest, steps_at
from cuptiprof.interop.textsource import read_blocks

BATCH_ROWS = 200_000
PIECE_BYTES = 16 << 20


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


class Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, None] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    args: Union[Args, None] = None


class DevProp(msgspec.Struct):
    id: Union[int, None] = None
    name: Union[str, None] = None
    totalGlobalMem: Union[int, None] = None
    computeMajor: Union[int, None] = None
    computeMinor: Union[int, None] = None
    numSms: Union[int, None] = None


class DistInfo(msgspec.Struct):
    rank: Union[int, None] = None
    world_size: Union[int, None] = None
    backend: Union[str, None] = None


class Doc(msgspec.Struct):
    traceEvents: Union[list[Ev], None] = None
    deviceProperties: Union[list[DevProp], None] = None
    distributedInfo: Union[DistInfo, None] = None
    baseTimeNanoseconds: Union[int, None] = None
    displayTimeUnit: Union[str, None] = None
    host_name: Union[str, None] = None


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
# Known categories that carry nothing cuptiprof stores (flow arrows, trace spans, instants).
IGNORED = {"ac2g", "async", "async_cpu_to_gpu", "fwdbwd", "trace", "cpu_instant_event",
           "overhead", "cuda_profiler_range"}
RANGE_KIND = {"op": "op", "user": "user", "python": "user", "gpu_user": "user"}
RANGE_DOMAIN = {"op": "cpu_op", "user": "user_annotation", "python": "python_function",
                "gpu_user": "gpu_user_annotation"}
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
_MEMKIND = {"pageable": "pageable", "pinned": "pinned", "device": "device", "array": "array",
            "managed": "managed", "host": "pageable"}
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
    m = re.search(r"\((\w+)\s*->\s*(\w+)\)", name)
    if m:
        src = _MEMKIND.get(m.group(1).lower(), "unknown")
        dst = _MEMKIND.get(m.group(2).lower(), "unknown")
    return kind, src, dst


def _memset_kind(name: str | None) -> str:
    m = re.search(r"\((\w+)\)", name or "")
    return _MEMKIND.get(m.group(1).lower(), "unknown") if m else "unknown"


def _tid_number(t) -> int:
    """Thread ids come as 25738, "25738" or "stream 7"."""
    if isinstance(t, int):
        return t
    if t is None:
        return 0
    m = re.search(r"(-?\d+)\s*$", str(t))
    return int(m.group(1)) if m else (hash(t) & 0x3FFFFFFF)


# -- cutting the text into decodable pieces ---------------------------------------------------
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\}\s*,\s*\{")
_PREFIX = b'{"traceEvents":['


class _Malformed(Exception):
    def __init__(self, msg: str, offset: int | None, index: int | None):
        super().__init__(msg)
        self.offset, self.index = offset, index


def _decode(piece: bytes, consumed: int, prefix_len: int, before: int) -> Doc:
    try:
        return _DECODER.decode(piece)
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


def iter_docs(blocks: Iterable[bytes], piece_bytes: int = PIECE_BYTES):
    """Decode a trace piece by piece. Yields Doc objects; each holds some of the events and
    whichever top-level keys its text contained."""
    buf = bytearray()
    consumed = 0        # bytes of the file dropped from the front of buf
    prefix_len = 0      # bytes of synthetic prefix at the front of buf
    ev_start = -1       # position of the first event in buf
    bare = False        # the file is a bare JSON array of events
    before = 0          # events in pieces already decoded
    want = piece_bytes
    for block in blocks:
        buf += block
        if ev_start < 0:
            head = bytes(buf[:64]).lstrip()
            if head.startswith(b"["):
                lead = len(buf) - len(buf.lstrip())
                consumed, prefix_len = lead, len(_PREFIX)
                del buf[:lead + 1]
                buf[0:0] = _PREFIX
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
        # Close the array in place over the separator bytes (dropped anyway): no copy.
        buf[end:end + 2] = b"]}"
        try:
            with memoryview(buf) as mv:
                doc = _decode(mv[:end + 2], consumed, prefix_len, before)
        except _Malformed:
            buf[end:end + 2] = b", "
            want *= 2  # a separator inside a string or nested value: cut elsewhere later
            continue
        want = piece_bytes
        consumed += cut - prefix_len
        del buf[:cut]
        buf[0:0] = _PREFIX
        prefix_len = ev_start = len(_PREFIX)
        before += len(doc.traceEvents or ())
        yield doc
    if bare:
        buf += b"}"
    if not buf.strip() and consumed == 0:
        raise _Malformed("the file is empty", None, None)
    yield _decode(bytes(buf), consumed, prefix_len, before)


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


class _Cols:
    """Columns appended piece by piece, concatenated at the end."""

    def __init__(self):
        self.parts: dict[str, list] = {}

    def add(self, **cols):
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(np.asarray(v))

    def get(self, k, dtype=np.int64):
        p = self.parts.get(k)
        return np.concatenate(p) if p else np.zeros(0, dtype)

    def __len__(self):
        p = next(iter(self.parts.values()), None)
        return sum(len(x) for x in p) if p else 0


class KinetoFile:
    """Reads one trace file into the writer `w` as one process."""

    def __init__(self, w, path: Path, index: int, used_pids: set[int],
                 on_read: Callable[[int], None] | None = None):
        self.w, self.path, self.index = w, path, index
        self.used_pids = used_pids
        self.on_read = on_read
        self.pid: int | None = None
        self.placeholder = -1 - index
        self.scale = 1000          # ns per trace time unit (microseconds)
        self.base = 0
        self.names: dict[str, int] = {}
        self.name_list: list[str] = []
        self.tid_cache: dict = {}
        self.ranges = _Cols()
        self.calls = _Cols()
        self.unknown: dict[str, int] = {}
        self.devprops: list[DevProp] = []
        self.dist: DistInfo | None = None
        self.host: str | None = None
        self.devices_used: set[int] = set()
        self.mem = 0
        self.events = 0
        self.piece: list[Ev] = []
        self.rows: dict[str, int] = {}
        self.gpu_pending: dict[str, list] = {}
        self.pending_rows = 0

    # errors ---------------------------------------------------------------------------------
    def _bad(self, e: Ev, what: str) -> InputError:
        idx = next((i for i, x in enumerate(self.piece) if x is e), None)
        where = f"event #{self.events + idx}" if idx is not None else "an event"
        return InputError(f"{self.path}: {where} ({e.cat} {str(e.name)[:60]!r}): {what}")

    def _err(self, exc: _Malformed) -> InputError:
        msg = str(exc)
        if exc.index is not None:
            detail = re.sub(r"\s*-\s*at `\$\.traceEvents\[\d+\]", " at `", msg).replace("at ``", "")
            return InputError(f"{self.path}: event #{exc.index}: {detail}")
        if msg == "the file is empty":
            return InputError(f"{self.path}: the file is empty; expected a torch.profiler trace")
        where = f" near byte {exc.offset:,} of the uncompressed text" if exc.offset is not None else ""
        return InputError(f"{self.path}: invalid JSON{where}: {msg}")

    # main loop ------------------------------------------------------------------------------
    def run(self) -> FileSummary:
        seen_events = False
        try:
            for doc in iter_docs(read_blocks(self.path, self.on_read)):
                if doc.traceEvents is not None:
                    seen_events = True
                self._meta(doc)
                self._take(doc.traceEvents or [])
        except _Malformed as exc:
            raise self._err(exc) from None
        if not seen_events:
            raise InputError(f"{self.path}: valid JSON but not a trace (no \"traceEvents\" array); "
                             "expected a torch.profiler / Kineto Chrome trace")
        self._flush_gpu()
        return self._finish()

    def _meta(self, doc: Doc) -> None:
        if doc.deviceProperties:
            self.devprops.extend(doc.deviceProperties)
        if doc.distributedInfo is not None:
            self.dist = doc.distributedInfo
        if doc.baseTimeNanoseconds:
            self.base = doc.baseTimeNanoseconds
        if doc.host_name:
            self.host = doc.host_name

    def _intern(self, names: list) -> np.ndarray:
        d, lst = self.names, self.name_list
        out = []
        for n in names:
            i = d.get(n)
            if i is None:
                i = d[n] = len(lst)
                lst.append(n)
            out.append(i)
        return np.array(out, np.int64)

    def _tids(self, lst: list[Ev]) -> np.ndarray:
        c = self.tid_cache
        out = []
        for e in lst:
            t = e.tid
            if type(t) is not int:
                v = c.get(t)
                if v is None:
                    v = c[t] = _tid_number(t)
                t = v
            out.append(t)
        return np.array(out, np.int64)

    def _times(self, lst: list[Ev]) -> tuple[np.ndarray, np.ndarray]:
        ts = np.array([e.ts for e in lst], np.float64)
        du = np.array([e.dur for e in lst], np.float64)
        bad = np.isnan(ts)
        if bad.any():
            raise self._bad(lst[int(np.argmax(bad))], "no timestamp (\"ts\")")
        bad = np.isnan(du)
        if bad.any():
            raise self._bad(lst[int(np.argmax(bad))], "no duration (\"dur\")")
        # Out-of-range numbers would wrap around silently in int64; negative spans are not time.
        limit = float(1 << 62) / self.scale
        bad = ~((np.abs(ts) < limit) & (np.abs(du) < limit))
        if bad.any():
            raise self._bad(lst[int(np.argmax(bad))], "timestamp or duration out of range")
        bad = du < 0
        if bad.any():
            raise self._bad(lst[int(np.argmax(bad))], f"negative duration ({du[bad][0]:g})")
        whole = np.floor(ts)
        start = whole.astype(np.int64) * self.scale + np.rint((ts - whole) * self.scale).astype(np.int64)
        return start, start + np.rint(du * self.scale).astype(np.int64)

    def _args(self, lst: list[Ev]) -> list[Args]:
        a = [e.args for e in lst]
        if None in a:
            raise self._bad(lst[a.index(None)], "no \"args\" (device, stream, correlation)")
        return a

    def _decide_pid(self, buckets: dict) -> None:
        for cat, lst in buckets.items():
            if cat and CATEGORIES.get(cat.lower()) in ("op", "user", "runtime", "driver", "python"):
                for e in lst:
                    if isinstance(e.pid, int):
                        self._set_pid(e.pid)
                        return
        for e in buckets.get(None, ()):
            if e.ph == "M" and e.name == "process_labels" and e.args and e.args.labels == "CPU" \
                    and isinstance(e.pid, int):
                self._set_pid(e.pid)
                return

    def _set_pid(self, pid: int) -> None:
        k = 0
        p = pid
        while p in self.used_pids:  # two ranks on different hosts with the same pid
            k += 1
            p = pid + k * (1 << 22)
        self.used_pids.add(p)
        self.pid = p

    def _take(self, evs: list[Ev]) -> None:
        self.piece = evs
        buckets: dict = {}
        for e in evs:
            c = e.cat
            b = buckets.get(c)
            if b is None:
                b = buckets[c] = []
            b.append(e)
        if self.pid is None and self.events == 0:
            if evs:
                ts0 = next((e.ts for e in evs if e.ts), None)
                if ts0 is not None and ts0 > 1e17:  # nanosecond timestamps
                    self.scale = 1
            self._decide_pid(buckets)
        for cat, lst in buckets.items():
            low = cat.lower() if cat else None
            what = CATEGORIES.get(low)
            if what is None:
                if low is None or low == "cpu_instant_event":
                    self._instants(lst)
                elif low not in IGNORED:
                    lst = [e for e in lst if e.ph == "X"]
                    if lst:
                        self.unknown[cat] = self.unknown.get(cat, 0) + len(lst)
                continue
            lst = [e for e in lst if e.ph == "X"]
            if not lst:
                continue
            if what in ("kernel", "memcpy", "memset", "sync"):
                self._gpu(what, lst)
            elif what in ("runtime", "driver"):
                self._call(what, lst)
            else:
                self._range(what, lst)
        self.events += len(evs)
        self.piece = []
        if self.pending_rows >= BATCH_ROWS:
            self._flush_gpu()

    # host side ------------------------------------------------------------------------------
    def _call(self, what: str, lst: list[Ev]) -> None:
        start, end = self._times(lst)
        a = [e.args for e in lst]
        corr = np.array([x.correlation if x is not None and x.correlation is not None else -1
                         for x in a], np.int64)
        cbid = np.array([x.cbid if x is not None and x.cbid is not None else -1 for x in a], np.int64)
        self.calls.add(tid=self._tids(lst), start=start, end=end, corr=corr, cbid=cbid,
                       name=self._intern([e.name for e in lst]),
                       driver=np.full(len(lst), what == "driver"))

    def _range(self, what: str, lst: list[Ev]) -> None:
        start, end = self._times(lst)
        names = self._intern([e.name for e in lst])
        code = {"op": 0, "user": 1, "python": 2, "gpu_user": 3}[what]
        if what == "gpu_user":
            a = self._args(lst)
            dev = np.array([x.device if x.device is not None else _tid_number(e.pid)
                            for x, e in zip(a, lst)], np.int64)
            stream = np.array([x.stream if x.stream is not None else _tid_number(e.tid)
                               for x, e in zip(a, lst)], np.int64)
            key = -1 - (dev * 100_000 + stream)  # GPU-side annotations nest per stream
        else:
            dev = stream = np.full(len(lst), -1, np.int64)
            key = self._tids(lst)
        self.ranges.add(key=key, start=start, end=end, name=names, code=np.full(len(lst), code, np.int8),
                        dev=dev, stream=stream)

    def _instants(self, lst: list[Ev]) -> None:
        mem = [e for e in lst if e.ph == "i" and e.name == "[memory]" and e.args is not None
               and e.args.mem_dev_type == 1 and e.args.mem_bytes is not None]
        if not mem:
            return
        ts = np.array([e.ts for e in mem], np.float64)
        if np.isnan(ts).any():
            return
        whole = np.floor(ts)
        t = whole.astype(np.int64) * self.scale + np.rint((ts - whole) * self.scale).astype(np.int64)
        b = np.array([e.args.mem_bytes for e in mem], np.int64)
        self._queue("memory_events", {
            "device_id": pa.array([e.args.mem_dev_id for e in mem], pa.int32()),
            "time_ns": t, "operation": np.where(b >= 0, "alloc", "free").tolist(),
            "bytes": np.abs(b), "memory_kind": ["device"] * len(mem)})

    # GPU side -------------------------------------------------------------------------------
    def _gpu(self, what: str, lst: list[Ev]) -> None:
        start, end = self._times(lst)
        a = self._args(lst)
        dev = [x.device for x in a]
        if None in dev:
            dev = [d if d is not None else _tid_number(e.pid) for d, e in zip(dev, lst)]
        stream = [x.stream for x in a]
        if None in stream:
            stream = [s if s is not None else _tid_number(e.tid) for s, e in zip(stream, lst)]
        self.devices_used.update(set(dev))
        if max(stream, default=0) >= 1 << 31:  # unsigned -1 ("no stream") in some traces
            stream = [s - (1 << 32) if s is not None and s >= 1 << 31 else s for s in stream]
        cols = {"device_id": pa.array(dev, pa.int32()),
                "context_id": pa.array([x.context for x in a], pa.int32()),
                "stream_id": pa.array(stream, pa.int32()),
                "correlation_id": pa.array([x.correlation for x in a], pa.int64()),
                "start_ns": start, "end_ns": end}
        if what == "kernel":
            grid = [x.grid or (None, None, None) for x in a]
            block = [x.block or (None, None, None) for x in a]
            cols.update(
                name=[e.name for e in lst],
                grid_x=pa.array([g[0] for g in grid], pa.int32()),
                grid_y=pa.array([g[1] if len(g) > 1 else None for g in grid], pa.int32()),
                grid_z=pa.array([g[2] if len(g) > 2 else None for g in grid], pa.int32()),
                block_x=pa.array([g[0] for g in block], pa.int32()),
                block_y=pa.array([g[1] if len(g) > 1 else None for g in block], pa.int32()),
                block_z=pa.array([g[2] if len(g) > 2 else None for g in block], pa.int32()),
                registers=pa.array([x.registers for x in a], pa.int32()),
                static_smem=pa.array([x.smem for x in a], pa.int32()))
            table = "kernels"
        elif what == "memcpy":
            kinds = [_memcpy_kind(e.name) for e in lst]
            cols.update(copy_kind=[k[0] for k in kinds], src_kind=[k[1] for k in kinds],
                        dst_kind=[k[2] for k in kinds],
                        bytes=pa.array([x.bytes for x in a], pa.int64()))
            table = "memcpys"
        elif what == "memset":
            cols.update(bytes=pa.array([x.bytes for x in a], pa.int64()),
                        memory_kind=[_memset_kind(e.name) for e in lst])
            table = "memsets"
        else:
            cols.update(sync_type=[_SYNC.get((e.name or "").strip().lower(), "unknown") for e in lst])
            table = "syncs"
        self._queue(table, cols)

    def _queue(self, table: str, cols: dict) -> None:
        n = len(cols["start_ns"] if "start_ns" in cols else cols["time_ns"])
        self.gpu_pending.setdefault(table, []).append(pa.table(cols))
        self.pending_rows += n
        self.rows[table] = self.rows.get(table, 0) + n

    def _flush_gpu(self) -> None:
        if not self.gpu_pending:
            return
        pid = self.pid if self.pid is not None else self.placeholder
        batch = {}
        for table, parts in self.gpu_pending.items():
            t = pa.concat_tables(parts, promote_options="permissive")
            batch[table] = t.append_column("pid", pa.array(np.full(t.num_rows, pid, np.int32)))
        self.w.append(batch)
        self.gpu_pending.clear()
        self.pending_rows = 0

    # end of file ----------------------------------------------------------------------------
    def _finish(self) -> FileSummary:
        w = self.w
        if self.pid is None:
            self._set_pid(self.index)  # a trace without host events: number it by file
        pid = self.pid
        con = w.con
        if pid != self.placeholder:
            for t in ("kernel_rows", "memcpys", "memsets", "syncs", "memory_events"):
                con.execute(f"UPDATE {t} SET pid = ? WHERE run_id = ? AND pid = ?",
                            [pid, w.run_id, self.placeholder])
        base = self.base
        if base:
            for t in ("kernel_rows", "memcpys", "memsets", "syncs"):
                con.execute(f"UPDATE {t} SET start_ns = start_ns + ?, end_ns = end_ns + ? "
                            "WHERE run_id = ? AND pid = ?", [base, base, w.run_id, pid])
            con.execute("UPDATE memory_events SET time_ns = time_ns + ? WHERE run_id = ? AND pid = ?",
                        [base, w.run_id, pid])

        R, C = self.ranges, self.calls
        r_start, r_end = R.get("start") + base, R.get("end") + base
        r_code, r_name, r_key = R.get("code", np.int8), R.get("name"), R.get("key")
        c_start, c_end = C.get("start") + base, C.get("end") + base
        c_tid, c_corr = C.get("tid"), C.get("corr")
        names = self.name_list
        # ProfilerStep#N ranges are the steps.
        step_of_name = np.full(len(names), -1, np.int64)
        for i, n in enumerate(names):
            m = _STEP_RE.match(n or "")
            if m:
                step_of_name[i] = int(m.group(1))
        r_stepn = step_of_name[r_name] if len(r_name) else np.zeros(0, np.int64)
        is_step = (r_stepn >= 0) & (r_code != 3)
        s_start, s_end, s_n = r_start[is_step], r_end[is_step], r_stepn[is_step]

        parent, depth, c_range, c_op = nest(r_key, r_start, r_end, r_code == 0,
                                            c_tid, c_start, c_end)
        range_id = np.arange(1, len(r_start) + 1, dtype=np.int64)
        r_step = steps_at(r_start, s_start, s_end, s_n)
        r_step[is_step] = s_n
        c_step = steps_at(c_start, s_start, s_end, s_n)

        def opt(ix):  # index -> id, -1 -> NULL
            ix = np.asarray(ix)
            return pa.array(np.where(ix >= 0, ix + 1, 0), pa.int64(), mask=ix < 0)

        def null_neg(v, typ=pa.int32()):
            v = np.asarray(v)
            return pa.array(v, typ, mask=v < 0)

        name_dict = pa.array(names, pa.string())
        kind = np.array(["op", "user", "user", "user"], dtype=object)[r_code] if len(r_code) else []
        kind = np.where(is_step, "step", kind) if len(r_code) else kind
        domain = np.array(["cpu_op", "user_annotation", "python_function", "gpu_user_annotation"],
                          dtype=object)[r_code] if len(r_code) else []
        dev, stream = R.get("dev"), R.get("stream")
        attrs = [None if d < 0 else json.dumps({"device": int(d), "stream": int(s)})
                 for d, s in zip(dev.tolist(), stream.tolist())] if (dev >= 0).any() else [None] * len(dev)
        thread = np.where(r_code == 3, stream, r_key) if len(r_key) else r_key
        for lo in range(0, len(r_start), BATCH_ROWS):
            sl = slice(lo, lo + BATCH_ROWS)
            w.append({"ranges": {
                "pid": np.full(len(range_id[sl]), pid, np.int32),
                "range_id": range_id[sl], "parent_id": opt(parent[sl]), "depth": depth[sl],
                "name": pa.DictionaryArray.from_arrays(pa.array(r_name[sl], pa.int32()), name_dict),
                "domain": list(domain[sl]), "thread_id": thread[sl], "start_ns": r_start[sl],
                "end_ns": r_end[sl], "kind": list(kind[sl]), "step": null_neg(r_step[sl]),
                "attrs": attrs[sl]}})
        c_name = C.get("name")
        for lo in range(0, len(c_start), BATCH_ROWS):
            sl = slice(lo, lo + BATCH_ROWS)
            w.append({"api_calls": {
                "pid": np.full(len(c_start[sl]), pid, np.int32), "thread_id": c_tid[sl],
                "api_kind": np.where(C.get("driver", bool)[sl], "driver", "runtime").tolist(),
                "cbid": null_neg(C.get("cbid")[sl]),
                "name": pa.DictionaryArray.from_arrays(pa.array(c_name[sl], pa.int32()), name_dict),
                "correlation_id": null_neg(c_corr[sl], pa.int64()),
                "start_ns": c_start[sl], "end_ns": c_end[sl],
                "step": null_neg(c_step[sl]), "range_id": opt(c_range[sl])}})

        # Link GPU rows to the call that launched them: its step, innermost range and op.
        has = c_corr >= 0
        if has.any():
            corr, first = np.unique(c_corr[has], return_index=True)
            link = pa.table({"correlation_id": corr,
                             "step": null_neg(c_step[has][first]),
                             "range_id": opt(c_range[has][first]),
                             "op_id": opt(c_op[has][first])})
            con.register("_cuptiprof_link", link)
            try:
                con.execute("BEGIN")
                for t in ("kernel_rows", "memcpys", "memsets", "syncs"):
                    con.execute(
                        f"UPDATE {t} SET step = l.step, range_id = l.range_id, op_id = l.op_id "
                        "FROM _cuptiprof_link l WHERE {t}.run_id = ? AND {t}.pid = ? "
                        "AND {t}.correlation_id = l.correlation_id".replace("{t}", t),
                        [w.run_id, pid])
                con.execute("COMMIT")
            finally:
                con.unregister("_cuptiprof_link")
        self._meta_rows(pid, len(s_n), r_start, r_end, c_start, c_end)
        return FileSummary(str(self.path), pid, self.dist.rank if self.dist else None,
                           self.events, dict(self.rows), dict(self.unknown), len(s_n))

    def _meta_rows(self, pid, n_steps, r_start, r_end, c_start, c_end) -> None:
        w, con = self.w, self.w.con
        lo = [int(x.min()) for x in (r_start, c_start) if len(x)]
        hi = [int(x.max()) for x in (r_end, c_end) if len(x)]
        g = con.execute(
            "SELECT min(start_ns), max(end_ns) FROM gpu_activities WHERE run_id = ? AND pid = ?",
            [w.run_id, pid]).fetchone()
        lo += [g[0]] if g[0] is not None else []
        hi += [g[1]] if g[1] is not None else []
        rank = self.dist.rank if self.dist else None
        if rank is None:
            m = re.search(r"rank[-_]?(\d+)", self.path.name)
            rank = int(m.group(1)) if m else None
        w.append({"processes": {
            "pid": [pid], "host": [self.host], "rank": pa.array([rank], pa.int32()),
            "world_size": pa.array([self.dist.world_size if self.dist else None], pa.int32()),
            "command": [str(self.path)], "start_ns": pa.array([min(lo) if lo else None], pa.int64()),
            "end_ns": pa.array([max(hi) if hi else None], pa.int64()),
            "exit_status": pa.array([None], pa.int32()), "ended_early": pa.array([None], pa.bool_())}})
        props = {p.id: p for p in self.devprops if p.id is not None}
        devs = sorted(d for d in self.devices_used if d is not None) or sorted(props)
        if devs:
            rows = [props.get(d) or DevProp(id=d) for d in devs]
            w.append({"devices": {
                "pid": [pid] * len(rows), "device_id": pa.array(devs, pa.int32()),
                "kind": ["gpu"] * len(rows), "name": [p.name for p in rows],
                "compute_capability": [f"{p.computeMajor}.{p.computeMinor}"
                                       if p.computeMajor is not None else None for p in rows],
                "sm_count": pa.array([p.numSms for p in rows], pa.int32()),
                "memory_bytes": pa.array([p.totalGlobalMem for p in rows], pa.int64()),
                "source": ["trace"] * len(rows)}})
        for cat, n in sorted(self.unknown.items()):
            w.add_quality("unknown_category", cat, n,
                          f"{n} events of category {cat!r} in {self.path.name} were not imported "
                          "(a category cuptiprof does not know)", pid=pid)
        if n_steps:
            for t, label in (("kernel_rows", "kernel"), ("memcpys", "memcpy"), ("memsets", "memset")):
                n = con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ? AND pid = ? AND step IS NULL",
                                [w.run_id, pid]).fetchone()[0]
                if n:
                    w.add_quality("unclaimed_records", label, n,
                                  f"{n} {label} rows in {self.path.name} were launched outside every "
                                  "ProfilerStep (or by no recorded API call); they have no step",
                                  pid=pid)
        elif self.rows:
            w.add_quality("missing_kind", "step", 0,
                          f"{self.path.name} has no ProfilerStep#N ranges; rows carry no step", pid=pid)


def import_kineto(w, paths: list[Path], on_read=None) -> list[FileSummary]:
    """Read each trace file into the open writer `w` (one process per file)."""
    used: set[int] = set()
    out = []
    for i, p in enumerate(paths):
        try:
            out.append(KinetoFile(w, Path(p), i, used, on_read).run())
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, pa.ArrowException) as exc:
            # a shape of trace this importer does not handle: name the file, no traceback
            raise InputError(f"{p}: cannot import this trace ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    return out
