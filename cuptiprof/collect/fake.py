"""A fake `cupti` module: the same functions the adapter calls, no GPU needed.

It records every enable/flush/push/pop call in `calls`, keeps CUPTI's external-correlation
stacks per thread, and delivers buffers of REAL cupti-python record objects built from the
module's numpy dtypes (docs/cupti-python.md §10) through the registered buffer callbacks, so the
whole collector runs in CI exactly as it would over libcupti.

Simulation methods (not part of cupti) play the application and the GPU:

    fake = FakeCupti()
    corr = fake.launch_kernel("_Z4gemmPf", duration_ns=5000)   # API record + extcorr + kernel
    fake.memcpy(1 << 20, "HtoD"); fake.stream_synchronize()
    fake.memcpy_peer(1 << 20, 0, 1)                            # MEMCPY2 record, GPU 0 -> GPU 1
    fake.graph_launch(["k1", "k2"])                           # kernels share the launch's corr id
    fake.nvtx_push("attn", domain="torch"); fake.nvtx_pop()   # MARKER records (other domains)
    fake.dropped = 5                                           # reported, then reset, like CUPTI

`FakeCupti(auto=True)` (what CUPTIPROF_FAKE_CUPTI=1 selects) synthesizes a copy and two kernels
inside every pushed range, so that `cuptiprof run` and notebooks can be tested end to end.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any, Callable

import numpy as np

from cupti import cupti as _real

# Enumerations are plain Python enums; importing them needs no driver.
ActivityKind = _real.ActivityKind
ExternalCorrelationKind = _real.ExternalCorrelationKind
ActivityThreadIdType = _real.ActivityThreadIdType
ActivityFlag = _real.ActivityFlag
Result = _real.Result
runtime_api_trace_cbid = _real.runtime_api_trace_cbid
driver_api_trace_cbid = _real.driver_api_trace_cbid
cuptiError = _real.cuptiError
SUBSCRIBER_PARAMS_SIZE = _real.SUBSCRIBER_PARAMS_SIZE

_COPY = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "HtoH": 9, "PtoP": 10}
_MEM = {"pageable": 1, "pinned": 2, "device": 3}
_SYNC = {"event_synchronize": 1, "stream_wait_event": 2, "stream_synchronize": 3,
         "context_synchronize": 4}


def _record_class(*pairs: tuple[str, str]) -> tuple[Any, np.dtype]:
    """The newest (record class, dtype) this cupti-python has among `pairs`."""
    for cls_name, dt_name in pairs:
        cls, dt = getattr(_real, cls_name, None), getattr(_real, dt_name, None)
        if cls is not None and dt is not None:
            return cls, dt
    raise RuntimeError(f"cupti-python has none of {pairs}")


CLASSES = {
    "kernel": _record_class(("ActivityKernel13", "activity_kernel13_dtype"),
                            ("ActivityKernel10", "activity_kernel10_dtype")),
    "memcpy": _record_class(("ActivityMemcpy7", "activity_memcpy7_dtype"),
                            ("ActivityMemcpy6", "activity_memcpy6_dtype")),
    "memcpy_p2p": _record_class(("ActivityMemcpyPtoP4", "activity_memcpy_pto_p4_dtype")),
    "memset": _record_class(("ActivityMemset5", "activity_memset5_dtype"),
                            ("ActivityMemset4", "activity_memset4_dtype")),
    "sync": _record_class(("ActivitySynchronization2", "activity_synchronization2_dtype")),
    "api": _record_class(("ActivityAPI", "activity_api_dtype")),
    "extcorr": _record_class(("ActivityExternalCorrelation", "activity_external_correlation_dtype")),
    "marker": _record_class(("ActivityMarker2", "activity_marker2_dtype")),
    "marker_data": _record_class(("ActivityMarkerData2", "activity_marker_data2_dtype"),
                                 ("ActivityMarkerData", "activity_marker_data_dtype")),
    "overhead": _record_class(("ActivityOverhead3", "activity_overhead3_dtype")),
    "memory": _record_class(("ActivityMemory4", "activity_memory4_dtype")),
    "device": _record_class(("ActivityDevice6", "activity_device6_dtype"),
                            ("ActivityDevice5", "activity_device5_dtype")),
    "context": _record_class(("ActivityContext4", "activity_context4_dtype"),
                             ("ActivityContext3", "activity_context3_dtype")),
}


class SubscriberParams:
    """Stands in for cupti.SubscriberParams: attributes, and a `ptr` the fake can look up."""

    _live: dict[int, "SubscriberParams"] = {}

    def __init__(self) -> None:
        self.struct_size = 0
        self.subscriber_name = ""
        self.old_subscriber_name = ""
        self.ptr = id(self)
        SubscriberParams._live[self.ptr] = self


class FakeCupti:
    """A stand-in for the `cupti.cupti` module (see the module docstring)."""

    ActivityKind = ActivityKind
    ExternalCorrelationKind = ExternalCorrelationKind
    ActivityThreadIdType = ActivityThreadIdType
    ActivityFlag = ActivityFlag
    Result = Result
    runtime_api_trace_cbid = runtime_api_trace_cbid
    driver_api_trace_cbid = driver_api_trace_cbid
    cuptiError = cuptiError
    SubscriberParams = SubscriberParams
    SUBSCRIBER_PARAMS_SIZE = SUBSCRIBER_PARAMS_SIZE

    def __init__(self, *, auto: bool = False, conflict: str | None = None,
                 no_driver: bool = False, fail_enable: tuple = (), gpu_delay_ns: int = 2000,
                 devices: int = 1):
        self.auto = auto
        self.conflict = conflict          # name of another subscriber holding CUPTI
        self.no_driver = no_driver        # every call raises like cupti-python without a driver
        self.fail_enable = {int(getattr(ActivityKind, k)) for k in fail_enable}
        self.gpu_delay_ns = gpu_delay_ns  # launch -> start on the GPU (launches are async)
        self.n_devices = devices
        self.calls: list[tuple] = []
        self.enabled: set[int] = set()
        self.dropped = 0
        self.subscribed = False
        self.finalized = False
        self.thread_id_type: int | None = None
        self._callbacks: tuple[Callable, Callable] | None = None
        self._pending: list[tuple[str, dict]] = []
        self._stacks: dict[tuple[int, int], list[int]] = {}
        self._corr = 0
        self._marker_id = 0
        self._marker_stack: dict[int, list[int]] = {}
        self._stream_free: dict[int, int] = {}
        self._lock = threading.RLock()
        self.delivered_records = 0
        self.deliveries = 0

    # -- helpers --------------------------------------------------------------------------
    def _check(self) -> None:
        if self.no_driver:
            from cupti._internal.utils import NotSupportedError

            raise NotSupportedError("CUDA driver is not found (libcuda.so.1 cannot be loaded)")

    def _on(self, kind: str) -> bool:
        return int(getattr(ActivityKind, kind)) in self.enabled

    def _emit(self, table: str, **fields: Any) -> None:
        self._pending.append((table, fields))

    @staticmethod
    def build(table: str, fields: dict, keep: list) -> Any:
        """One real cupti-python record object of `table` with `fields` set (strings kept in `keep`;
        bytes are stored as given, e.g. an NVTX message that is not UTF-8)."""
        cls, dt = CLASSES[table]
        a = np.zeros(1, dtype=dt)
        for k, v in fields.items():
            if isinstance(v, (str, bytes)):
                buf = ctypes.create_string_buffer(v.encode() if isinstance(v, str) else v)
                keep.append(buf)
                v = ctypes.addressof(buf)
            if "." in k:
                parts = k.split(".")
                target = a[parts[0]]
                for p in parts[1:-1]:
                    target = target[p]
                target[parts[-1]] = v
            else:
                a[k] = v
        keep.append(a)
        return cls.from_data(a)

    # -- the cupti functions the adapter calls ----------------------------------------------
    def get_timestamp(self) -> int:
        self._check()
        return time.time_ns()

    def set_thread_id_type(self, t: int) -> None:
        self._check()
        self.calls.append(("set_thread_id_type", int(t)))
        self.thread_id_type = int(t)

    def subscribe_v2(self, callback: Any, userdata: Any, p_params: int) -> int:
        self._check()
        self.calls.append(("subscribe_v2",))
        if self.conflict:
            SubscriberParams._live[p_params].old_subscriber_name = self.conflict
            raise cuptiError(int(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED))
        self.subscribed = True
        return 1

    def unsubscribe(self, handle: int) -> None:
        self.calls.append(("unsubscribe",))
        self.subscribed = False

    def activity_register_callbacks(self, requested: Callable, completed: Callable) -> None:
        self._check()
        self.calls.append(("register_callbacks",))
        self._callbacks = (requested, completed)

    def activity_enable(self, kind: int) -> None:
        self._check()
        kind = int(kind)
        self.calls.append(("enable", kind))
        if kind in self.fail_enable:
            raise cuptiError(int(Result.ERROR_NOT_COMPATIBLE))
        self.enabled.add(kind)

    def activity_disable(self, kind: int) -> None:
        self.calls.append(("disable", int(kind)))
        self.enabled.discard(int(kind))

    def activity_enable_and_dump(self, kind: int) -> None:
        self._check()
        kind = int(kind)
        self.calls.append(("enable_and_dump", kind))
        self.enabled.add(kind)
        with self._lock:
            if kind == int(ActivityKind.DEVICE):
                for d in range(self.n_devices):
                    self._emit("device", kind=kind, id=d, name="Fake GPU",
                               compute_capability_major=9, compute_capability_minor=0,
                               num_multiprocessors=132, core_clock_rate=1_980_000,
                               global_memory_bandwidth=4_800_000_000,
                               global_memory_size=141 << 30, l2cache_size=60 << 20)
            elif kind == int(ActivityKind.CONTEXT):
                for d in range(self.n_devices):
                    self._emit("context", kind=kind, context_id=d + 1, device_id=d)

    def activity_enable_runtime_api(self, cbid: int, enable: int) -> None:
        self.calls.append(("enable_runtime_api", int(cbid), int(enable)))

    def activity_enable_driver_api(self, cbid: int, enable: int) -> None:
        self.calls.append(("enable_driver_api", int(cbid), int(enable)))

    def activity_push_external_correlation_id(self, kind: int, id: int) -> None:
        self._check()
        self.calls.append(("push", int(kind), int(id)))
        key = (threading.get_native_id(), int(kind))
        self._stacks.setdefault(key, []).append(int(id))
        if self.auto:
            self.memcpy(1 << 20, "HtoD")
            self.launch_kernel("_Z9fake_gemmPKfS0_Pfiii", duration_ns=40_000)
            self.launch_kernel("fake_softmax_kernel", duration_ns=10_000)

    def activity_pop_external_correlation_id(self, kind: int) -> int:
        self._check()
        self.calls.append(("pop", int(kind)))
        stack = self._stacks.get((threading.get_native_id(), int(kind)))
        if not stack:
            raise cuptiError(int(Result.ERROR_QUEUE_EMPTY))
        return stack.pop()

    def activity_flush_all(self, flag: int) -> None:
        self._check()
        self.calls.append(("flush", int(flag)))
        self.deliver()

    def activity_get_num_dropped_records(self, context: int, stream_id: int, dropped: int) -> None:
        self.calls.append(("get_dropped",))
        ctypes.c_uint64.from_address(dropped).value = self.dropped
        self.dropped = 0

    def finalize(self) -> None:
        self.calls.append(("finalize",))
        self.finalized = True

    # -- simulation ------------------------------------------------------------------------
    def deliver(self) -> int:
        """Hand every pending record to the buffer-completed callback (as CUPTI's worker would)."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending or self._callbacks is None:
            return 0
        keep: list = []
        records = [self.build(t, f, keep) for t, f in pending]
        self._callbacks[0]()  # CUPTI asks for a buffer before it fills one
        self._callbacks[1](records)
        self.deliveries += 1
        self.delivered_records += len(records)
        return len(records)

    def api_call(self, name: str, *, driver: bool = False, duration_ns: int = 2000,
                 return_value: int = 0) -> int:
        """A runtime (or driver) API call on this thread: API + external-correlation records
        (return_value: the CUDA error it returned)."""
        with self._lock:
            self._corr += 1
            corr = self._corr
            tid = threading.get_native_id()
            start = time.time_ns()
            kind = "DRIVER" if driver else "RUNTIME"
            if self._on(kind):
                enum = driver_api_trace_cbid if driver else runtime_api_trace_cbid
                if self._on("EXTERNAL_CORRELATION"):
                    for (t, ek), stack in self._stacks.items():
                        if t == tid and stack:
                            self._emit("extcorr", kind=int(ActivityKind.EXTERNAL_CORRELATION),
                                       external_kind=ek, external_id=stack[-1],
                                       correlation_id=corr)
                self._emit("api", kind=int(getattr(ActivityKind, kind)),
                           cbid=int(getattr(enum, name)), start=start, end=start + duration_ns,
                           process_id=os.getpid(), thread_id=tid & 0xFFFFFFFF,
                           correlation_id=corr, return_value=return_value)
        return corr

    def _gpu_slot(self, stream: int, duration_ns: int) -> tuple[int, int]:
        start = max(time.time_ns() + self.gpu_delay_ns, self._stream_free.get(stream, 0))
        self._stream_free[stream] = start + duration_ns
        return start, start + duration_ns

    def launch_kernel(self, name: str, *, duration_ns: int = 5000, stream: int = 7,
                      device: int = 0, grid: tuple = (128, 1, 1), block: tuple = (256, 1, 1),
                      corr: int | None = None, graph_id: int = 0, graph_node_id: int = 0) -> int:
        with self._lock:
            if corr is None:
                corr = self.api_call("cudaLaunchKernel_v7000")
            if self._on("CONCURRENT_KERNEL") or self._on("KERNEL"):
                s, e = self._gpu_slot(stream, duration_ns)
                self._emit("kernel", kind=int(ActivityKind.CONCURRENT_KERNEL), start=s, end=e,
                           device_id=device, context_id=device + 1, stream_id=stream,
                           correlation_id=corr, name=name, grid_x=grid[0], grid_y=grid[1],
                           grid_z=grid[2], block_x=block[0], block_y=block[1], block_z=block[2],
                           registers_per_thread=32, static_shared_memory=0,
                           dynamic_shared_memory=4096, graph_id=graph_id,
                           graph_node_id=graph_node_id)
        return corr

    def graph_launch(self, kernels: list[str], *, graph_id: int = 3, stream: int = 7) -> int:
        """cudaGraphLaunch: every node kernel carries the launch's correlation id."""
        with self._lock:
            corr = self.api_call("cudaGraphLaunch_v10000")
            for i, k in enumerate(kernels):
                self.launch_kernel(k, corr=corr, stream=stream, graph_id=graph_id,
                                   graph_node_id=100 + i)
        return corr

    def memcpy(self, nbytes: int, direction: str = "HtoD", *, stream: int = 7, device: int = 0,
               duration_ns: int = 3000, is_async: bool = True) -> int:
        with self._lock:
            corr = self.api_call("cudaMemcpyAsync_v3020")
            if self._on("MEMCPY"):
                src, dst = {"HtoD": ("pinned", "device"), "DtoH": ("device", "pinned"),
                            "DtoD": ("device", "device"), "HtoH": ("pinned", "pinned")}.get(
                                direction, ("device", "device"))
                s, e = self._gpu_slot(stream, duration_ns)
                self._emit("memcpy", kind=int(ActivityKind.MEMCPY), start=s, end=e,
                           device_id=device, context_id=device + 1, stream_id=stream,
                           correlation_id=corr, copy_kind=_COPY[direction],
                           src_kind=_MEM[src], dst_kind=_MEM[dst], bytes=nbytes,
                           flags_=1 if is_async else 0)
        return corr

    def memcpy_peer(self, nbytes: int, src_device: int, dst_device: int, *, stream: int = 7,
                    duration_ns: int = 3000, graph_id: int = 0, graph_node_id: int = 0) -> int:
        """A copy between two GPUs: a MEMCPY2 (peer-to-peer) record, run by the source device
        (a node of graph `graph_id` when that is not 0)."""
        with self._lock:
            corr = self.api_call("cudaMemcpyPeerAsync_v4000")
            if self._on("MEMCPY2"):
                s, e = self._gpu_slot(stream, duration_ns)
                self._emit("memcpy_p2p", kind=int(ActivityKind.MEMCPY2), start=s, end=e,
                           device_id=src_device, context_id=src_device + 1, stream_id=stream,
                           correlation_id=corr, copy_kind=_COPY["PtoP"], src_kind=_MEM["device"],
                           dst_kind=_MEM["device"], bytes=nbytes, flags_=1,
                           src_device_id=src_device, src_context_id=src_device + 1,
                           dst_device_id=dst_device, dst_context_id=dst_device + 1,
                           graph_id=graph_id, graph_node_id=graph_node_id)
        return corr

    def memset(self, nbytes: int, value: int = 0, *, stream: int = 7, device: int = 0) -> int:
        with self._lock:
            corr = self.api_call("cudaMemsetAsync_v3020")
            if self._on("MEMSET"):
                s, e = self._gpu_slot(stream, 1000)
                self._emit("memset", kind=int(ActivityKind.MEMSET), start=s, end=e,
                           device_id=device, context_id=device + 1, stream_id=stream,
                           correlation_id=corr, bytes=nbytes, value=value, memory_kind=3)
        return corr

    def stream_synchronize(self, *, stream: int = 7, device: int = 0) -> int:
        with self._lock:
            corr = self.api_call("cudaStreamSynchronize_v3020")
            if self._on("SYNCHRONIZATION"):
                s = time.time_ns()
                e = max(s + 500, self._stream_free.get(stream, 0))
                self._emit("sync", kind=int(ActivityKind.SYNCHRONIZATION), type=3, start=s, end=e,
                           correlation_id=corr, context_id=device + 1, stream_id=stream,
                           cuda_event_id=0xFFFFFFFF)
        return corr

    def malloc(self, nbytes: int, address: int, *, free: bool = False, device: int = 0,
               pool: bool = False) -> int:
        with self._lock:
            corr = self.api_call("cudaFree_v3020" if free else "cudaMalloc_v3020")
            if self._on("MEMORY2"):
                self._emit("memory", kind=int(ActivityKind.MEMORY2),
                           memory_operation_type=2 if free else 1, memory_kind=3,
                           correlation_id=corr, address=address, bytes=nbytes,
                           timestamp=time.time_ns(), device_id=device, context_id=device + 1,
                           **{"memory_pool_config.memory_pool_type": 1 if pool else 0})
        return corr

    def overhead(self, overhead_kind: int = 0x10000, duration_ns: int = 10_000) -> None:
        with self._lock:
            if self._on("OVERHEAD"):
                s = time.time_ns()
                self._emit("overhead", kind=int(ActivityKind.OVERHEAD),
                           overhead_kind=overhead_kind, start=s, end=s + duration_ns)

    def nvtx_push(self, name: str | bytes, *, domain: str | bytes | None = None,
                  payload: int | float | None = None) -> int:
        """An NVTX push seen through the injection (MARKER + MARKER_DATA records). An int
        payload comes as INT64 (from 2**63 on as UINT64, as a C library's), a float as DOUBLE."""
        with self._lock:
            self._marker_id += 1
            mid = self._marker_id
            tid = threading.get_native_id()
            self._marker_stack.setdefault(tid, []).append(mid)
            if self._on("MARKER"):
                f = dict(kind=int(ActivityKind.MARKER), flags_=2, timestamp=time.time_ns(), id=mid,
                         object_kind=2, name=name)
                f["object_id.pt.thread_id"] = tid & 0xFFFFFFFF
                if domain:
                    f["domain"] = domain
                self._emit("marker", **f)
                if payload is not None and self._on("MARKER_DATA"):
                    kind, field = ((0, "double") if isinstance(payload, float) else
                                   (1, "uint64") if payload >= 1 << 63 else (4, "int64"))
                    self._emit("marker_data", kind=int(ActivityKind.MARKER_DATA), id=mid,
                               payload_kind=kind, **{f"payload.metric_value_{field}": payload})
        return mid

    def nvtx_pop(self) -> None:
        with self._lock:
            tid = threading.get_native_id()
            mid = self._marker_stack[tid].pop()
            if self._on("MARKER"):
                f = dict(kind=int(ActivityKind.MARKER), flags_=4, timestamp=time.time_ns(), id=mid,
                         object_kind=2)
                f["object_id.pt.thread_id"] = tid & 0xFFFFFFFF
                self._emit("marker", **f)

    def synchronize(self) -> None:
        """The device-wide synchronize the session calls before each flush."""
        self.calls.append(("synchronize",))
