"""Record objects -> per-kind rows. No record object outlives the buffer-completed callback.

The callback groups a buffer's records by kind (one numpy argsort) and, for the high-volume
kinds (RAW_TABLES), copies each group's structs in one `b"".join` through the record objects'
buffer protocol: no Python object per field. Kernel names are pointers into CUPTI's memory, so
they are read in the callback, once per distinct pointer of the buffer. Rare kinds (markers,
devices, ...) and record classes without a known dtype go through one C-level `attrgetter` per
record into row tuples. Resolution and column building happen later, at flush time, on the
main thread (resolve.py), on numpy columns (`Rows.cols()`).

A record the bindings cannot read loses only itself: a name that is not UTF-8 (an NVTX message
from a C library in Latin-1) is decoded with replacement characters, and a kind whose group
fails is retried record by record, the unreadable ones counted (data_quality 'decode_error').

A raw copy is exactly `sizeof` the bindings' struct for the record's class, the bytes the
bindings' own accessors read. CUPTIPROF_RAW_RECORDS=0 turns it off (every record then goes
through its attrgetter), should a libcupti/bindings pairing ever disagree on a layout.

Field names are the ones common to cupti-python 13.0.x and 13.4 (docs/cupti-python.md §3):
newer struct versions only append fields, so these read correctly across the version skew.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import operator
import os
import re
import sys
import threading
from typing import Any, Iterable

import numpy as np
import pyarrow.compute as pc

from cuptiprof.store import arrow

# kind name -> (ActivityKind members that produce it, fields read from the record, in order).
# The tuple order is the row layout; `columns()` turns rows back into named columns.
RECORDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "kernel": (("CONCURRENT_KERNEL", "KERNEL"), (
        "start", "end", "device_id", "context_id", "stream_id", "correlation_id", "name",
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
        "static_shared_memory", "dynamic_shared_memory", "graph_id", "graph_node_id")),
    "memcpy": (("MEMCPY",), (
        "start", "end", "device_id", "context_id", "stream_id", "correlation_id", "copy_kind",
        "src_kind", "dst_kind", "bytes", "flags_", "graph_id", "graph_node_id")),
    "memcpy_p2p": (("MEMCPY2",), (
        "start", "end", "device_id", "context_id", "stream_id", "correlation_id", "copy_kind",
        "src_kind", "dst_kind", "bytes", "flags_", "src_device_id", "dst_device_id", "graph_id",
        "graph_node_id")),
    "memset": (("MEMSET",), (
        "start", "end", "device_id", "context_id", "stream_id", "correlation_id", "bytes",
        "value", "memory_kind", "graph_id", "graph_node_id")),
    "sync": (("SYNCHRONIZATION",), (
        "start", "end", "context_id", "stream_id", "correlation_id", "type", "cuda_event_id")),
    "api": (("RUNTIME", "DRIVER"), (
        "kind", "cbid", "start", "end", "thread_id", "correlation_id", "return_value")),
    "extcorr": (("EXTERNAL_CORRELATION",), ("external_kind", "external_id", "correlation_id")),
    "marker": (("MARKER",), (
        "flags_", "timestamp", "id", "object_kind", "object_id.pt.thread_id", "name", "domain")),
    "marker_data": (("MARKER_DATA",), (
        "id", "payload_kind", "payload.metric_value_int64", "payload.metric_value_uint64",
        "payload.metric_value_double")),
    "overhead": (("OVERHEAD",), ("overhead_kind", "start", "end")),
    "memory": (("MEMORY2",), (
        "memory_operation_type", "memory_kind", "correlation_id", "address", "bytes",
        "timestamp", "device_id", "memory_pool_config.memory_pool_type")),
    "context": (("CONTEXT",), ("context_id", "device_id")),
    "device": (("DEVICE",), (
        "id", "name", "compute_capability_major", "compute_capability_minor",
        "num_multiprocessors", "core_clock_rate", "global_memory_bandwidth",
        "global_memory_size", "l2cache_size")),
}


# Kinds copied as raw structs (numbers only, plus the kernel name read in the callback).
RAW_TABLES = frozenset(("kernel", "memcpy", "memcpy_p2p", "memset", "sync", "api", "extcorr",
                        "memory"))
_KIND = operator.attrgetter("kind")
_NAME = operator.attrgetter("name")
# String fields: the bindings decode them as UTF-8 and raise on anything else.
TEXT_FIELDS = frozenset(("name", "domain"))
# Kinds handled first in a buffer: the step of every GPU row of the buffer depends on them.
_FIRST = ("extcorr", "api")


_gc_lock = threading.Lock()
_gc_holders = 0


@contextlib.contextmanager
def no_gc():
    """Pause the cyclic GC: the objects built here would trigger full collections that walk
    every live record object (3-4x the cost of the copy itself)."""
    global _gc_holders
    with _gc_lock:
        if _gc_holders == 0:
            was = gc.isenabled()
            gc.disable()
            no_gc.was_enabled = was  # type: ignore[attr-defined]
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and no_gc.was_enabled:  # type: ignore[attr-defined]
                gc.enable()


def _gc_after_fork() -> None:
    """In a forked child: another thread of the parent inside no_gc() at the fork (a step's flush
    on a worker thread, CUPTI's buffer callback) never leaves it here. The GC it paused would
    stay off for the child's whole life, and its lock could be held."""
    global _gc_lock, _gc_holders
    _gc_lock = threading.Lock()
    if _gc_holders:
        _gc_holders = 0
        if no_gc.was_enabled:  # type: ignore[attr-defined]
            gc.enable()


os.register_at_fork(after_in_child=_gc_after_fork)


def _uuid_text(rec: Any) -> str | None:
    try:
        raw = bytes(rec.uuid.bytes)
    except Exception:
        return None
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}" if h.strip("0") else None


def _module_dtype(cls: type) -> np.dtype | None:
    """The numpy dtype the bindings' module has for a record class (ActivityKernel13 ->
    activity_kernel13_dtype), or None."""
    mod = sys.modules.get(cls.__module__)
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()
    dt = getattr(mod, snake + "_dtype", None)
    return dt if isinstance(dt, np.dtype) and dt.names is not None else None


def text(rec: Any, field: str) -> str:
    """A string field of a record, bytes that are not UTF-8 decoded with replacement
    characters instead of raising (the bindings' accessor decodes strictly)."""
    try:
        return getattr(rec, field)
    except UnicodeDecodeError:
        dt = _module_dtype(type(rec))
        if dt is None or field not in dt.names:
            raise
        ptr = int(np.frombuffer(bytes(rec), dt, count=1)[field][0])
        return ctypes.string_at(ptr).decode("utf-8", "replace") if ptr else ""


def _field_reader(field: str) -> Any:
    get = operator.attrgetter(field)
    if field not in TEXT_FIELDS:
        return get
    return lambda rec: text(rec, field)


def _names(table: str) -> list[str]:
    return [f.rsplit(".", 1)[-1] for f in RECORDS[table][1]]


def _field(a: np.ndarray, dotted: str) -> np.ndarray:
    for part in dotted.split("."):
        a = a[part]
    return a


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct value's first row, int32 code per row), codes numbered in order
    of first appearance, as a dictionary encoding of the column numbers them (hash based)."""
    if not len(values):
        return np.empty(0, np.intp), np.empty(0, np.int32)
    codes = arrow.values(pc.dictionary_encode(arrow.array(values)).indices)
    # codes appear in increasing order, so a new running maximum marks a first appearance
    m = np.maximum.accumulate(codes)
    first = np.flatnonzero(np.r_[True, m[1:] != m[:-1]])
    return first, codes


def raw_dtype(cls: type, table: str) -> np.dtype | None:
    """The numpy dtype of a cupti-python record class (ActivityKernel13 ->
    activity_kernel13_dtype), or None when the module has none or it lacks a needed field."""
    dt = _module_dtype(cls)
    if dt is None:
        return None
    for f in RECORDS[table][1]:
        sub = dt
        for part in f.split("."):
            if sub.names is None or part not in sub.names:
                return None
            sub = sub.fields[part][0]
    return dt


class Cols:
    """Numpy columns of one kind, named like `columns()` names them. String fields hold int32
    codes into `dicts[field]` (a dictionary that may repeat values)."""

    __slots__ = ("n", "data", "dicts")

    def __init__(self, n: int, data: dict[str, np.ndarray], dicts: dict[str, list] | None = None):
        self.n, self.data, self.dicts = n, data, dicts or {}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def take(self, sel: np.ndarray) -> "Cols":
        """Rows selected by a boolean mask (order kept)."""
        data = {k: v[sel] for k, v in self.data.items()}
        n = len(next(iter(data.values()))) if data else 0
        return Cols(n, data, dict(self.dicts))

    def strings(self, name: str) -> list:
        d = self.dicts[name]
        return [d[i] for i in self.data[name].tolist()]

    @staticmethod
    def concat(parts: list["Cols"]) -> "Cols":
        parts = [p for p in parts if p.n]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return Cols(0, {})
        data, dicts = {}, {}
        for k in parts[0].data:
            if k in parts[0].dicts:
                values: list = []
                codes = []
                for p in parts:
                    codes.append(p.data[k].astype(np.int32) + len(values))
                    values.extend(p.dicts[k])
                data[k], dicts[k] = np.concatenate(codes), values
            else:
                data[k] = np.concatenate([p.data[k] for p in parts])
        return Cols(sum(p.n for p in parts), data, dicts)


def _tuple_cols(table: str, rows: list[tuple]) -> Cols:
    """Row tuples -> Cols (records whose class has no usable dtype; lists handed in by hand)."""
    if not rows:
        return Cols(0, {})
    data, dicts = {}, {}
    for name, vals in zip(_names(table), zip(*rows)):
        if any(isinstance(v, str) or v is None for v in vals):
            index: dict = {}
            codes = [index.setdefault(v, len(index)) for v in vals]
            data[name], dicts[name] = np.array(codes, np.int32), list(index)
        else:
            data[name] = np.array(vals)
    return Cols(len(rows), data, dicts)


class Rows:
    """Drained records of one RAW_TABLES kind: raw struct chunks, plus row tuples for records
    that could not be copied raw. `cols()` is the flush path; iterating yields row tuples in
    RECORDS field order (plain ints and strs), for tests and debugging."""

    def __init__(self, table: str):
        self.table = table
        # (structured array, {string field: (names, int32 code per record)})
        self.chunks: list[tuple[np.ndarray, dict]] = []
        self.tuples: list[tuple] = []

    def __len__(self) -> int:
        return sum(len(a) for a, _ in self.chunks) + len(self.tuples)

    def cols(self) -> Cols:
        fields, names = RECORDS[self.table][1], _names(self.table)
        parts = []
        for a, strs in self.chunks:
            data, dicts = {}, {}
            for f, name in zip(fields, names):
                if f in strs:
                    dicts[name], data[name] = strs[f]
                else:
                    data[name] = _field(a, f)
            parts.append(Cols(len(a), data, dicts))
        if self.tuples:
            parts.append(_tuple_cols(self.table, self.tuples))
        return Cols.concat(parts)

    def __iter__(self):
        c = self.cols()
        if not c.n:
            return iter(())
        return zip(*(c.strings(n) if n in c.dicts else c[n].tolist() for n in _names(self.table)))

    def __getitem__(self, i):
        return list(self)[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, Rows)):
            return list(self) == list(other)
        return NotImplemented

    def __bool__(self) -> bool:
        return bool(self.tuples) or any(len(a) for a, _ in self.chunks)


def cols(table: str, rows: Any) -> Cols:
    """Drained rows of a kind (Rows, or a list of row tuples) -> Cols."""
    return rows.cols() if isinstance(rows, Rows) else _tuple_cols(table, list(rows))


class Sink:
    """Per-kind rows filled by the buffer callback; swapped out whole at each drain.

    kind_enum: the module's ActivityKind (real or fake cupti); the ints are cached here once,
    because converting enums per record is slow.
    """

    def __init__(self, kind_enum: Any):
        self._lock = threading.Lock()
        self._dispatch: dict[int, tuple[Any, str]] = {}
        # per field readers that survive undecodable strings, for records read one by one
        self._readers = {t: [_field_reader(f) for f in fields]
                         for t, (_, fields) in RECORDS.items()}
        for table, (members, fields) in RECORDS.items():
            getter = operator.attrgetter(*fields)
            for m in members:
                if hasattr(kind_enum, m):
                    self._dispatch[int(getattr(kind_enum, m))] = (getter, table)
        self._device_kind = int(kind_enum.DEVICE)
        self._dtypes: dict[tuple[type, str], np.dtype | None] = {}
        self._raw = os.environ.get("CUPTIPROF_RAW_RECORDS", "1") != "0"
        self.other: dict[int, int] = {}
        self.errors: dict[str, int] = {}  # kind -> records lost unreadable, since the last drain
        self._rows = self._fresh()
        self.records = 0  # every record seen, for the benchmark and sanity checks

    @staticmethod
    def _fresh() -> dict[str, Any]:
        rows: dict[str, Any] = {t: Rows(t) if t in RAW_TABLES else [] for t in RECORDS}
        rows["device_uuid"] = []
        return rows

    def add(self, records: Iterable[Any]) -> None:
        """The buffer-completed callback body: copy fields, keep no record object."""
        dispatch = self._dispatch
        with self._lock, no_gc():
            recs = records if isinstance(records, list) else list(records)
            n = len(recs)
            if not n:
                return
            rows = self._rows
            # Group by kind with one stable argsort (each kind keeps its delivery order) and
            # one C-level gather; no Python work per record.
            kinds = np.fromiter(map(_KIND, recs), np.int64, count=n)
            order = np.argsort(kinds, kind="stable")
            ks = kinds[order]
            cuts = (np.flatnonzero(ks[1:] != ks[:-1]) + 1).tolist()
            groups = sorted(zip([0] + cuts, cuts + [n]), key=lambda lh: self._rank(int(ks[lh[0]])))
            for lo, hi in groups:
                k = int(ks[lo])
                idx = order[lo:hi].tolist()
                g = operator.itemgetter(*idx)(recs) if len(idx) > 1 else (recs[idx[0]],)
                e = dispatch.get(k)
                if e is None:
                    self.other[k] = self.other.get(k, 0) + len(g)
                    continue
                getter, table = e
                try:
                    self._add_group(rows, k, table, getter, g)
                except Exception:  # one unreadable record must not lose the others
                    self._add_each(rows, k, table, g)
            self.records += n

    def _rank(self, k: int) -> int:
        e = self._dispatch.get(k)
        return _FIRST.index(e[1]) if e is not None and e[1] in _FIRST else len(_FIRST)

    def _add_group(self, rows: dict, k: int, table: str, getter: Any, g: tuple) -> None:
        """A kind's records in one go; adds nothing when it raises."""
        if table in RAW_TABLES:
            if not (self._raw and self._add_raw(rows[table], g)):
                rows[table].tuples.extend(list(map(getter, g)))
            return
        new = list(map(getter, g))
        if k == self._device_kind:
            uuids = list(map(_uuid_text, g))
            rows["device_uuid"].extend(uuids)
        rows[table].extend(new)

    def _add_each(self, rows: dict, k: int, table: str, g: tuple) -> None:
        """A kind's records one by one, each field through its own reader: a record that still
        cannot be read is counted and left out, alone."""
        readers = self._readers[table]
        new, uuids, bad = [], [], 0
        for rec in g:
            try:
                new.append(tuple(r(rec) for r in readers))
            except Exception:
                bad += 1
                continue
            if k == self._device_kind:
                uuids.append(_uuid_text(rec))
        if bad:
            self.errors[table] = self.errors.get(table, 0) + bad
        if table in RAW_TABLES:
            rows[table].tuples.extend(new)
            return
        rows[table].extend(new)
        rows["device_uuid"].extend(uuids)

    def _add_raw(self, rows: Rows, g: tuple) -> bool:
        """Copy a group's structs in one join; False when this class cannot be copied raw."""
        key = (type(g[0]), rows.table)
        dt = self._dtypes.get(key, False)
        if dt is False:
            dt = self._dtypes[key] = raw_dtype(key[0], rows.table)
        if dt is None:
            return False
        try:
            buf = b"".join(g)
        except TypeError:  # no buffer protocol on this class
            self._dtypes[key] = None
            return False
        if len(buf) != dt.itemsize * len(g):  # records of another size in the group
            return False
        a = np.frombuffer(buf, dt)
        strs = {}
        if rows.table == "kernel":
            # One read per distinct name pointer: CUPTI shares a kernel's name across records.
            first, codes = factorize(a["name"])
            strs["name"] = ([text(g[i], "name") for i in first.tolist()], codes)
        rows.chunks.append((a, strs))
        return True

    def drain(self) -> dict[str, Any]:
        """Take everything collected so far (rows of the next flush start empty)."""
        with self._lock:
            rows, self._rows = self._rows, self._fresh()
            rows["decode_error"], self.errors = self.errors, {}
        return rows


def columns(table: str, rows: Iterable[tuple]) -> dict[str, tuple]:
    """Row tuples of one kind -> {field: values}; dotted fields are named by their last part."""
    names = _names(table)
    rows = list(rows)
    if not rows:
        return {n: () for n in names}
    return dict(zip(names, zip(*rows)))
