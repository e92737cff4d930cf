"""Record objects -> per-kind row tuples. Pure functions; no record object outlives the call.

The buffer-completed callback does only this: one C-level `attrgetter` per record copies the
primitive fields into a tuple appended to the kind's list. Resolution and column building happen
later, at flush time, on the main thread (resolve.py).

Field names are the ones common to cupti-python 13.0.x and 13.4 (docs/cupti-python.md §3):
newer struct versions only append fields, so these read correctly across the version skew.
"""
from __future__ import annotations

import contextlib
import gc
import operator
import threading
from typing import Any, Iterable

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
        "src_kind", "dst_kind", "bytes", "flags_", "src_device_id", "dst_device_id")),
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
    "marker_data": (("MARKER_DATA",), ("id", "payload_kind", "payload.metric_value_int64")),
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


_gc_lock = threading.Lock()
_gc_holders = 0


@contextlib.contextmanager
def no_gc():
    """Pause the cyclic GC: the tuples built here would trigger full collections that walk
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


def _uuid_text(rec: Any) -> str | None:
    try:
        raw = bytes(rec.uuid.bytes)
    except Exception:
        return None
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}" if h.strip("0") else None


class Sink:
    """Per-kind row lists filled by the buffer callback; swapped out whole at each drain.

    kind_enum: the module's ActivityKind (real or fake cupti); the ints are cached here once,
    because converting enums per record is slow.
    """

    def __init__(self, kind_enum: Any):
        self._lock = threading.Lock()
        self._dispatch: dict[int, tuple[Any, str]] = {}
        for table, (members, fields) in RECORDS.items():
            getter = operator.attrgetter(*fields)
            for m in members:
                if hasattr(kind_enum, m):
                    self._dispatch[int(getattr(kind_enum, m))] = (getter, table)
        self._device_kind = int(kind_enum.DEVICE)
        self.other: dict[int, int] = {}
        self._rows = self._fresh()
        self.records = 0  # every record seen, for the benchmark and sanity checks

    @staticmethod
    def _fresh() -> dict[str, list]:
        rows: dict[str, list] = {t: [] for t in RECORDS}
        rows["device_uuid"] = []
        return rows

    def add(self, records: Iterable[Any]) -> None:
        """The buffer-completed callback body: copy fields, keep nothing else."""
        dispatch = self._dispatch
        with self._lock, no_gc():
            rows = self._rows
            appenders = {t: rows[t].append for t in RECORDS}
            n = 0
            for r in records:
                n += 1
                k = r.kind
                e = dispatch.get(k)
                if e is None:
                    self.other[k] = self.other.get(k, 0) + 1
                    continue
                appenders[e[1]](e[0](r))
                if k == self._device_kind:
                    rows["device_uuid"].append(_uuid_text(r))
            self.records += n

    def drain(self) -> dict[str, list]:
        """Take everything collected so far (rows of the next flush start empty)."""
        with self._lock:
            rows, self._rows = self._rows, self._fresh()
        return rows


def columns(table: str, rows: list[tuple]) -> dict[str, tuple]:
    """Row tuples of one kind -> {field: values}; dotted fields are named by their last part."""
    fields = RECORDS[table][1]
    names = [f.rsplit(".", 1)[-1] for f in fields]
    if not rows:
        return {n: () for n in names}
    return dict(zip(names, zip(*rows)))
