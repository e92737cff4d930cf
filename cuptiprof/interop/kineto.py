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
from itertools import chain
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Union

import msgspec
import numpy as np
import pyarrow as pa

from cuptiprof.errors import InputError
from cuptiprof.interop import columns as AC
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
        # Close the array in place over the separator bytes: no copy. In compact JSON ("},{")
        # the second byte is the next event's "{", so the bytes are put back either way.
        saved = bytes(buf[end:end + 2])
        buf[end:end + 2] = b"]}"
        try:
            with memoryview(buf) as mv:
                doc = _decode(mv[:end + 2], consumed, prefix_len, before)
        except _Malformed:
            buf[end:end + 2] = saved
            want *= 2  # a separator inside a string or nested value: cut elsewhere later
            continue
        buf[end:end + 2] = saved
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
    """numpy columns appended piece by piece, concatenated at the end. A nullable column `k`
    keeps its validity mask under `k?`."""

    def __init__(self):
        self.parts: dict[str, list] = {}

    def add(self, **cols):
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def add_ints(self, k: str, values: list) -> None:
        v, ok = AC.ints(values)
        self.add(**{k: v, k + "?": ok if ok is not None else np.ones(len(v), bool)})

    def get(self, k, dtype=np.int64):
        p = self.parts.get(k)
        if not p:
            return np.zeros(0, dtype)
        return np.concatenate(p) if len(p) > 1 else p[0]

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
    uniq, inv = np.unique(ids, return_inverse=True)
    return inv, [fn(names[u]) for u in uniq.tolist()]


def _names(ids: np.ndarray, names: list) -> pa.DictionaryArray:
    return AC.dictionary(*_per_name(ids, names, _same))


class KinetoFile:
    """Reads one trace file as one process: the whole timeline is kept as compact columns
    (never a dict per event) and written in one transaction at the end, with every launch
    link (step, innermost range, op) already resolved."""

    def __init__(self, w, path: Path, index: int, used_pids: set[int],
                 on_read: Callable[[int], None] | None = None):
        self.w, self.path, self.index = w, path, index
        self.used_pids = used_pids
        self.on_read = on_read
        self.pid: int | None = None
        self.scale = 1000          # ns per trace time unit (microseconds)
        self.base = 0
        self.names: dict = {}
        self.name_list: list = []
        self.tid_cache: dict = {}
        self.ranges = _Cols()
        self.calls = _Cols()
        self.gpu = {t: _Cols() for t in ("kernels", "memcpys", "memsets", "syncs", "memory_events")}
        self.unknown: dict[str, int] = {}
        self.devprops: list[DevProp] = []
        self.dist: DistInfo | None = None
        self.host: str | None = None
        self.devices_used: set[int] = set()
        self.events = 0
        self.piece: list[Ev] = []
        self.rows: dict[str, int] = {}

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
        poll = getattr(self.w, "poll", None)  # an output still opening: fail early if it failed
        try:
            for doc in iter_docs(read_blocks(self.path, self.on_read)):
                if doc.traceEvents is not None:
                    seen_events = True
                self._meta(doc)
                self._take(doc.traceEvents or [])
                if poll is not None:
                    poll()
        except _Malformed as exc:
            raise self._err(exc) from None
        if not seen_events:
            raise InputError(f"{self.path}: valid JSON but not a trace (no \"traceEvents\" array); "
                             "expected a torch.profiler / Kineto Chrome trace")
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
        """Name -> id (first seen, first numbered); the per-event work is one C-level map."""
        d = self.names
        ids = list(map(d.get, names))
        if None in ids:
            lst = self.name_list
            for n in dict.fromkeys(names):
                if n not in d:
                    d[n] = len(lst)
                    lst.append(n)
            ids = list(map(d.__getitem__, names))
        return np.array(ids, np.int32)

    def _tids(self, lst: list[Ev]) -> np.ndarray:
        tids = [e.tid for e in lst]
        try:
            return np.array(tids, np.int64)
        except (TypeError, ValueError, OverflowError):
            pass
        c = self.tid_cache  # "stream 7", "25738" or missing: parsed once per distinct value
        out = []
        for t in tids:
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
        return self._ns(ts), self._ns(ts) + np.rint(du * self.scale).astype(np.int64)

    def _ns(self, ts: np.ndarray) -> np.ndarray:
        whole = np.floor(ts)
        return whole.astype(np.int64) * self.scale + np.rint((ts - whole) * self.scale).astype(np.int64)

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

    # host side ------------------------------------------------------------------------------
    def _call(self, what: str, lst: list[Ev]) -> None:
        start, end = self._times(lst)
        a = [e.args for e in lst]
        if None in a:
            a = [x if x is not None else _NO_ARGS for x in a]
        self.calls.add(tid=self._tids(lst), start=start, end=end,
                       name=self._intern([e.name for e in lst]),
                       driver=np.full(len(lst), what == "driver"))
        self.calls.add_ints("corr", [x.correlation for x in a])
        self.calls.add_ints("cbid", [x.cbid for x in a])

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
        M = self.gpu["memory_events"]
        M.add(time_ns=self._ns(ts), bytes=np.array([e.args.mem_bytes for e in mem], np.int64))
        M.add_ints("device_id", [e.args.mem_dev_id for e in mem])
        self.rows["memory_events"] = self.rows.get("memory_events", 0) + len(mem)

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
        G = self.gpu[_GPU_TABLE[what]]
        G.add(start_ns=start, end_ns=end, name=self._intern([e.name for e in lst]))
        G.add_ints("device_id", dev)
        G.add_ints("stream_id", stream)
        G.add_ints("context_id", [x.context for x in a])
        G.add_ints("correlation_id", [x.correlation for x in a])
        if what == "kernel":
            _dims(G, "grid", [x.grid for x in a])
            _dims(G, "block", [x.block for x in a])
            G.add_ints("registers", [x.registers for x in a])
            G.add_ints("static_smem", [x.smem for x in a])
        elif what in ("memcpy", "memset"):
            G.add_ints("bytes", [x.bytes for x in a])
        self.rows[_GPU_TABLE[what]] = self.rows.get(_GPU_TABLE[what], 0) + len(lst)

    # end of file ----------------------------------------------------------------------------
    def _gpu_tables(self, run_id, pid, base, link) -> dict:
        """The GPU tables of this file as Arrow tables, links and names resolved."""
        out = {}
        names = self.name_list
        for table, G in self.gpu.items():
            n = len(G.get("time_ns" if table == "memory_events" else "start_ns"))
            if not n:
                continue
            cols = {"run_id": AC.array(np.full(n, run_id, np.int32), pa.int32()),
                    "pid": AC.array(np.full(n, pid, np.int32), pa.int32()),
                    "device_id": G.arrow("device_id", pa.int32())}
            if table == "memory_events":
                b = G.get("bytes")
                cols.update(time_ns=AC.array(G.get("time_ns") + base, pa.int64()),
                            operation=AC.dictionary(b < 0, ["alloc", "free"]),
                            bytes=AC.array(np.abs(b), pa.int64()),
                            memory_kind=AC.dictionary(np.zeros(n, np.int32), ["device"]))
                out[table] = pa.table(cols)
                continue
            ids = G.get("name", np.int32)
            stream, ok = G.get("stream_id"), G.get("stream_id?", bool)
            stream = np.where(stream >= 1 << 31, stream - (1 << 32), stream)  # unsigned -1: no stream
            corr, corr_ok = G.get("correlation_id"), G.get("correlation_id?", bool)
            cols.update(context_id=G.arrow("context_id", pa.int32()),
                        stream_id=AC.array(stream, pa.int32(), ok),
                        correlation_id=AC.array(corr, pa.int64(), corr_ok),
                        start_ns=AC.array(G.get("start_ns") + base, pa.int64()),
                        end_ns=AC.array(G.get("end_ns") + base, pa.int64()))
            cols.update(link(np.where(corr_ok, corr, -1)))
            if table == "kernels":  # a dictionary of kernel names only (they get demangled)
                cols["name"] = _names(ids, names)
                for k in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                          "registers", "static_smem"):
                    cols[k] = G.arrow(k, pa.int32())
            elif table == "memcpys":
                inv, kinds = _per_name(ids, names, _memcpy_kind)
                for j, k in enumerate(("copy_kind", "src_kind", "dst_kind")):
                    cols[k] = AC.dictionary(inv, [x[j] for x in kinds])
                cols["bytes"] = G.arrow("bytes", pa.int64())
            elif table == "memsets":
                cols["bytes"] = G.arrow("bytes", pa.int64())
                cols["memory_kind"] = AC.dictionary(*_per_name(ids, names, _memset_kind))
            else:
                cols["sync_type"] = AC.dictionary(*_per_name(
                    ids, names, lambda s: _SYNC.get((s or "").strip().lower(), "unknown")))
            out[table] = pa.table(cols)
        return out

    def _finish(self) -> FileSummary:
        if self.pid is None:
            self._set_pid(self.index)  # a trace without host events: number it by file
        pid = self.pid
        base = self.base
        w = self.w() if callable(self.w) else self.w

        R, C = self.ranges, self.calls
        r_start, r_end = R.get("start") + base, R.get("end") + base
        r_code, r_name, r_key = R.get("code", np.int8), R.get("name", np.int32), R.get("key")
        c_start, c_end = C.get("start") + base, C.get("end") + base
        c_tid = C.get("tid")
        c_corr_ok = C.get("corr?", bool)
        c_corr = np.where(c_corr_ok, C.get("corr"), -1)
        names = self.name_list
        # ProfilerStep#N ranges are the steps.
        step_of_name = np.full(len(names), -1, np.int64)
        for i, n in enumerate(names):
            m = _STEP_RE.match(n) if type(n) is str else None
            if m:
                step_of_name[i] = int(m.group(1))
        r_stepn = step_of_name[r_name] if len(r_name) else np.zeros(0, np.int64)
        is_step = (r_stepn >= 0) & (r_code != 3)
        s_start, s_end, s_n = r_start[is_step], r_end[is_step], r_stepn[is_step]

        parent, depth, c_range, c_op = nest(r_key, r_start, r_end, r_code == 0,
                                            c_tid, c_start, c_end)
        r_step = steps_at(r_start, s_start, s_end, s_n)
        r_step[is_step] = s_n
        c_step = steps_at(c_start, s_start, s_end, s_n)

        # Link GPU rows to the call that launched them (the first call with that correlation
        # id): its step, innermost range and op.
        has = np.flatnonzero(c_corr >= 0)
        corr_sorted, first = np.unique(c_corr[has], return_index=True)
        first = has[first]

        def link(g: np.ndarray) -> dict:
            call = np.full(len(g), -1, np.int64)
            if len(corr_sorted):
                pos = np.minimum(np.searchsorted(corr_sorted, g), len(corr_sorted) - 1)
                call = np.where((corr_sorted[pos] == g) & (g >= 0), first[pos], -1)
            found = call >= 0
            call = np.where(found, call, 0)
            pick = lambda v: np.where(found, v[call], -1) if len(v) else call - 1  # noqa: E731
            return {"step": _null_neg(pick(c_step), pa.int32()),
                    "range_id": _opt(pick(c_range)), "op_id": _opt(pick(c_op))}

        batch: dict = self._gpu_tables(w.run_id, pid, base, link)
        i32 = lambda v: AC.array(np.full(len(v), v, np.int32) if np.ndim(v) == 0 else v, pa.int32())  # noqa: E731
        n_r = len(r_start)
        if n_r:
            dev, stream = R.get("dev"), R.get("stream")
            attrs = (AC.strings([None if d < 0 else json.dumps({"device": int(d), "stream": int(s)})
                                 for d, s in zip(dev.tolist(), stream.tolist())])
                     if (dev >= 0).any() else pa.nulls(n_r, pa.string()))
            kind_code = np.where(is_step, 2, np.minimum(r_code, 1))  # op, user, step
            batch["ranges"] = {
                "run_id": i32(np.full(n_r, w.run_id)), "pid": i32(np.full(n_r, pid)),
                "range_id": AC.array(np.arange(1, n_r + 1), pa.int64()),
                "parent_id": _opt(parent), "depth": i32(depth), "name": _names(r_name, names),
                "domain": AC.dictionary(r_code, ["cpu_op", "user_annotation", "python_function",
                                                 "gpu_user_annotation"]),
                "thread_id": AC.array(np.where(r_code == 3, stream, r_key), pa.int64()),
                "start_ns": AC.array(r_start, pa.int64()), "end_ns": AC.array(r_end, pa.int64()),
                "kind": AC.dictionary(kind_code, ["op", "user", "step"]),
                "step": _null_neg(r_step, pa.int32()), "attrs": attrs}
        n_c = len(c_start)
        if n_c:
            batch["api_calls"] = {
                "run_id": i32(np.full(n_c, w.run_id)), "pid": i32(np.full(n_c, pid)),
                "thread_id": AC.array(c_tid, pa.int64()),
                "api_kind": AC.dictionary(C.get("driver", bool), ["runtime", "driver"]),
                "cbid": _null_neg(np.where(C.get("cbid?", bool), C.get("cbid"), -1), pa.int32()),
                "name": _names(C.get("name", np.int32), names),
                "correlation_id": _null_neg(c_corr, pa.int64()),
                "start_ns": AC.array(c_start, pa.int64()), "end_ns": AC.array(c_end, pa.int64()),
                "step": _null_neg(c_step, pa.int32()), "range_id": _opt(c_range)}
        self._meta_rows(batch, w.run_id, pid, len(s_n), r_start, r_end, c_start, c_end)
        w.append(batch)
        return FileSummary(str(self.path), pid, self.dist.rank if self.dist else None,
                           self.events, dict(self.rows), dict(self.unknown), len(s_n))

    def _meta_rows(self, batch, run_id, pid, n_steps, r_start, r_end, c_start, c_end) -> None:
        lo = [int(x.min()) for x in (r_start, c_start) if len(x)]
        hi = [int(x.max()) for x in (r_end, c_end) if len(x)]
        for t in ("kernels", "memcpys", "memsets", "syncs"):
            G = self.gpu[t]
            if len(G.get("start_ns")):
                lo.append(int(G.get("start_ns").min()) + self.base)
                hi.append(int(G.get("end_ns").max()) + self.base)
        rank = self.dist.rank if self.dist else None
        if rank is None:
            m = re.search(r"rank[-_]?(\d+)", self.path.name)
            rank = int(m.group(1)) if m else None
        batch["processes"] = _rows(run_id, pid, [{
            "host": self.host, "rank": rank,
            "world_size": self.dist.world_size if self.dist else None, "command": str(self.path),
            "start_ns": min(lo) if lo else None, "end_ns": max(hi) if hi else None}],
            {"rank": pa.int32(), "world_size": pa.int32(), "start_ns": pa.int64(),
             "end_ns": pa.int64()})
        props = {p.id: p for p in self.devprops if p.id is not None}
        devs = sorted(d for d in self.devices_used if d is not None) or sorted(props)
        if devs:
            rows = [props.get(d) or DevProp(id=d) for d in devs]
            batch["devices"] = _rows(run_id, pid, [{
                "device_id": d, "kind": "gpu", "name": p.name,
                "compute_capability": f"{p.computeMajor}.{p.computeMinor}"
                if p.computeMajor is not None else None,
                "sm_count": p.numSms, "memory_bytes": p.totalGlobalMem, "source": "trace"}
                for d, p in zip(devs, rows)],
                {"device_id": pa.int32(), "sm_count": pa.int32(), "memory_bytes": pa.int64()})
        quality = []
        for cat, n in sorted(self.unknown.items()):
            quality.append({"check_name": "unknown_category", "subject": cat, "count": n,
                            "detail": f"{n} events of category {cat!r} in {self.path.name} were "
                            "not imported (a category cuptiprof does not know)"})
        if n_steps:
            for t, label in (("kernels", "kernel"), ("memcpys", "memcpy"), ("memsets", "memset")):
                n = batch[t]["step"].null_count if t in batch else 0
                if n:
                    quality.append({"check_name": "unclaimed_records", "subject": label, "count": n,
                                    "detail": f"{n} {label} rows in {self.path.name} were launched "
                                    "outside every ProfilerStep (or by no recorded API call); they "
                                    "have no step"})
        elif self.rows:
            quality.append({"check_name": "missing_kind", "subject": "step", "count": 0,
                            "detail": f"{self.path.name} has no ProfilerStep#N ranges; rows carry "
                            "no step"})
        if quality:
            batch["data_quality"] = _rows(run_id, pid, quality, {"count": pa.int64()})


_GPU_TABLE = {"kernel": "kernels", "memcpy": "memcpys", "memset": "memsets", "sync": "syncs"}
_NO_ARGS = Args()


def _rows(run_id: int, pid: int, rows: list[dict], ints: dict) -> dict:
    """A few metadata rows -> columns (strings unless typed in `ints`)."""
    out = {"run_id": AC.array(np.full(len(rows), run_id), pa.int32()),
           "pid": AC.array(np.full(len(rows), pid), pa.int32())}
    for k in rows[0]:
        vals = [r[k] for r in rows]
        if k in ints:
            v, ok = AC.ints(vals)
            out[k] = AC.array(v, ints[k], ok)
        else:
            out[k] = AC.strings(vals)
    return out


def _opt(ix) -> pa.Array:
    """Row index -> 1-based id; -1 -> NULL."""
    ix = np.asarray(ix)
    return AC.array(ix + 1, pa.int64(), ix >= 0)


def _null_neg(v, typ) -> pa.Array:
    v = np.asarray(v)
    return AC.array(v, typ, v >= 0)


def _dims(G: _Cols, prefix: str, dims: list) -> None:
    """grid / block lists -> x, y, z columns (NULL where absent)."""
    n = len(dims)
    if n and None not in dims and set(map(len, dims)) == {3}:
        flat = np.array(list(chain.from_iterable(dims)), np.int64).reshape(n, 3)
        ok = np.ones(n, bool)
        for j, k in enumerate("xyz"):
            G.add(**{f"{prefix}_{k}": flat[:, j], f"{prefix}_{k}?": ok})
        return
    dims = [g or (None, None, None) for g in dims]
    G.add_ints(f"{prefix}_x", [g[0] for g in dims])
    G.add_ints(f"{prefix}_y", [g[1] if len(g) > 1 else None for g in dims])
    G.add_ints(f"{prefix}_z", [g[2] if len(g) > 2 else None for g in dims])


def import_kineto(w, paths: list[Path], on_read=None) -> list[FileSummary]:
    """Read each trace file into the writer `w` (one process per file). `w` may also be a
    callable returning the writer, called when the first file has been read (so opening the
    output can overlap the parse)."""
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
