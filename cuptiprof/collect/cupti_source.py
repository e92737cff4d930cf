"""The CUPTI adapter: the only code that calls into the `cupti` module.

It works over the real `cupti.cupti` module or over `fake.FakeCupti` (same functions), so
every line here runs in CPU tests. Order of use (docs/cupti-python.md §7):

    open(on_records)   subscribe (claims CUPTI, detects another profiler), SYSTEM thread ids,
                       buffer callbacks
    enable(kinds)      activity kinds; DEVICE and CONTEXT through enable_and_dump (late attach)
    push/pop           CUSTOM2 external correlation ids around ranges
    synchronize, flush at step boundaries; dropped() after each flush
    disable(), close() disable kinds, forced flush, unsubscribe; finalize once at exit
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from cuptiprof.collect.errors import (
    CollectorProblem,
    CuptiFailure,
    CuptiUnavailable,
    NoGpu,
    SubscriberConflict,
)

# Kind names accepted by profile(kinds=...) -> CUPTI activity kinds they enable.
KIND_GROUPS: dict[str, tuple[str, ...]] = {
    "kernel": ("CONCURRENT_KERNEL",),  # never KERNEL: it serializes all kernels
    "memcpy": ("MEMCPY", "MEMCPY2"),
    "memset": ("MEMSET",),
    "sync": ("SYNCHRONIZATION",),
    "api": (),                          # RUNTIME/DRIVER are always on: the step join needs them
    "nvtx": ("MARKER", "MARKER_DATA", "NAME"),  # MARKER before MARKER_DATA
    "memory": ("MEMORY2",),
    "overhead": ("OVERHEAD",),
}
ALL_KINDS = tuple(KIND_GROUPS)
ALWAYS = ("RUNTIME", "DRIVER", "EXTERNAL_CORRELATION")
DUMPED = ("DEVICE", "CONTEXT")
# Never enabled: GRAPH_TRACE turns graph replays into one record per launch for the whole run.
# High-rate calls that carry no launch (Kineto disables the same ones).
NOISY_RUNTIME = ("cudaGetDevice_v3020", "cudaGetLastError_v3020", "cudaPeekAtLastError_v3020")
NOISY_DRIVER = ("cuKernelGetAttribute", "cuDevicePrimaryCtxGetState", "cuCtxGetCurrent")
BUFFER_BYTES = 16 << 20  # big buffers keep worker-thread deliveries rare (GIL contention)

_finalize_registered = False


def split_kinds(given: Iterable[Any]) -> list:
    """Kind names as `run --kinds` and profile(kinds=...) take them: each string may hold
    several, comma- or space-separated, or both ("kernel,memcpy", "kernel memcpy", a quoted
    "$KINDS"); each name once, in the order given. Anything not a string is kept as it is, for
    the caller to refuse as an unknown kind."""
    names: list = []
    for g in given:
        for k in g.replace(",", " ").split() if isinstance(g, str) else [g]:
            if k not in names:
                names.append(k)
    return names


def load_cupti() -> Any:
    """The real `cupti.cupti` module, checked against the driver; typed failure otherwise."""
    try:
        from cupti import cupti
    except ImportError as exc:
        raise CuptiUnavailable(
            f"cupti-python is not installed ({exc}); install it with pip install 'cuptiprof[gpu]'"
        ) from None
    try:
        cupti.get_timestamp()
    except Exception as exc:  # NotSupportedError without a driver
        raise NoGpu(f"no CUDA driver: {_one_line(exc)}") from None
    if not gpu_visible():
        raise NoGpu("no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)")
    return cupti


def gpu_visible(environ=os.environ, gpus_dir: Path = Path("/proc/driver/nvidia/gpus")) -> bool:
    """Whether this process may see a CUDA GPU, asked WITHOUT initialising CUDA: the profiled
    program must do that itself. cuInit here, before the program's first line, would fix the
    devices before the program sets CUDA_VISIBLE_DEVICES, and leave an initialised driver in a
    parent that forks CUDA workers (CUDA does not survive fork). False where
    CUDA_VISIBLE_DEVICES hides every device or the driver lists no GPU; True where it cannot
    tell (CUPTI then says)."""
    cvd = environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and (not cvd.strip() or cvd.strip().startswith("-")):
        return False
    try:
        if gpus_dir.is_dir():
            return any(gpus_dir.iterdir())
    except OSError:
        pass
    return True


def device_synchronize() -> None:
    """Wait for all GPU work of this process: torch when it has initialised CUDA, else the driver.
    Only devices the process already has a context on: synchronizing another would create one
    (hundreds of MB on every GPU of a node, for each rank). Not while this thread's stream is
    being captured into a CUDA graph: synchronizing then is an error that invalidates the
    capture. Another thread's capture is left alone by synchronizing in relaxed capture mode."""
    torch = sys.modules.get("torch")
    with _relaxed_capture_mode():
        try:
            if torch is not None and torch.cuda.is_initialized():
                if torch.cuda.is_current_stream_capturing():
                    return
                for i in _devices_in_use(torch.cuda.device_count(), torch.cuda.current_device()):
                    torch.cuda.synchronize(i)
                return
        except Exception:
            pass
        try:
            from cuda.bindings import driver

            err, ctx = driver.cuCtxGetCurrent()
            if int(err) == 0 and int(ctx) != 0:
                driver.cuCtxSynchronize()
        except Exception:
            pass


_capture_mode_missing = False   # the driver call is not there (no driver library, old bindings)


@contextlib.contextmanager
def _relaxed_capture_mode():
    """This thread in relaxed stream-capture mode meanwhile. In the default (global) mode a
    synchronize from any thread while another captures a CUDA graph (torch.cuda.graph captures
    in global mode) is refused and invalidates that capture; a step ended on a worker thread
    flushes there. Relaxed, this thread may synchronize (as torch's NCCL watchdog thread does),
    and the capture goes on. Without a driver or these bindings nothing changes."""
    global _capture_mode_missing
    driver = prev = None
    if not _capture_mode_missing:
        try:
            from cuda.bindings import driver

            err, prev = driver.cuThreadExchangeStreamCaptureMode(
                driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
            if int(err) != 0:
                prev = None
        except Exception:   # no bindings or no driver library: not looked for again
            _capture_mode_missing = True
            prev = None
    try:
        yield
    finally:
        if prev is not None:   # the mode the thread had, whatever the synchronize did
            try:
                driver.cuThreadExchangeStreamCaptureMode(prev)
            except Exception:
                pass


def _devices_in_use(n: int, current: int) -> list[int]:
    """Device ordinals whose primary context is active (the current one always): asked through
    cuDevicePrimaryCtxGetState, which creates nothing. All n where the driver cannot say."""
    try:
        from cuda.bindings import driver

        out = []
        for i in range(n):
            err, dev = driver.cuDeviceGet(i)
            if int(err) != 0:
                return list(range(n))
            err, _flags, active = driver.cuDevicePrimaryCtxGetState(dev)
            if int(err) != 0:
                return list(range(n))
            if active or i == current:
                out.append(i)
        return out
    except Exception:
        return list(range(n))


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


class CuptiSource:
    """Activity collection through a cupti module (real or fake).

    module: the `cupti.cupti` module or a FakeCupti; None loads the real one (load_cupti).
    synchronize: waits for the GPU before each flush (default: device_synchronize).
    nvtx_capture: enable MARKER kinds (the session sets it when NVTX injection is live).
    """

    name = "cupti"
    gpu = True

    def __init__(self, module: Any = None, *, synchronize: Callable[[], None] | None = None,
                 buffer_bytes: int = BUFFER_BYTES, nvtx_capture: bool = False):
        self.m = module if module is not None else load_cupti()
        self._sync = synchronize or getattr(self.m, "synchronize", None) or device_synchronize
        self.buffer_bytes = buffer_bytes
        self.nvtx_capture = nvtx_capture
        self.ext_kind = int(self.m.ExternalCorrelationKind.CUSTOM2)
        self.enabled: list[int] = []
        self.missing: dict[str, str] = {}   # kind -> why it is not recorded
        self._subscriber = None
        self._cbid_names: dict[tuple[bool, int], str] = {}
        self._lock = threading.Lock()
        self.is_open = False

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, on_records: Callable[[Iterable[Any]], None]) -> None:
        """Claim CUPTI and register the buffer callbacks; raises a CollectorProblem."""
        m = self.m
        params = m.SubscriberParams()
        params.struct_size = m.SUBSCRIBER_PARAMS_SIZE
        params.subscriber_name = "cuptiprof"
        try:
            self._subscriber = m.subscribe_v2(_no_callback, None, params.ptr)
        except m.cuptiError as exc:
            if int(getattr(exc, "status", -1)) == int(m.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED):
                other = getattr(params, "old_subscriber_name", "") or "another profiler"
                raise SubscriberConflict(
                    f"CUPTI is held by {other} (torch.profiler, nsys, ncu or cuda-gdb); "
                    "stop it or profile without it") from None
            raise CuptiFailure(f"CUPTI subscribe failed: {_one_line(exc)}") from None
        except CollectorProblem:
            raise
        except Exception as exc:
            raise _translate(exc, "subscribe") from None
        try:
            m.set_thread_id_type(int(m.ActivityThreadIdType.SYSTEM))
            buf = self.buffer_bytes
            m.activity_register_callbacks(lambda: (buf, 0), on_records)
        except Exception as exc:
            self._unsubscribe()
            raise _translate(exc, "register callbacks") from None
        self.is_open = True
        _register_finalize(m)

    def enable(self, kinds: Iterable[str]) -> None:
        """Enable the activity kinds of the named groups (plus API and external correlation)."""
        m = self.m
        names: list[str] = list(ALWAYS)
        for k in kinds:
            if k == "nvtx" and not self.nvtx_capture:
                self.missing.setdefault("nvtx", "NVTX injection is not active in this process")
                continue
            names.extend(KIND_GROUPS[k])
        for name in names:
            # a cupti-python that does not name a kind (older or newer than cuptiprof) misses
            # that kind only, as one whose enable fails; the others are still collected
            member = getattr(m.ActivityKind, name, None)
            if member is None:
                self.missing[name.lower()] = "this cupti-python has no ActivityKind of that name"
                continue
            kind = int(member)
            if kind in self.enabled:
                continue
            try:
                m.activity_enable(kind)
                self.enabled.append(kind)
            except Exception as exc:
                self.missing[name.lower()] = f"activity_enable failed: {_one_line(exc)}"
        for cbid in NOISY_RUNTIME:
            self._quiet(m.activity_enable_runtime_api, m.runtime_api_trace_cbid, cbid)
        for cbid in NOISY_DRIVER:
            self._quiet(m.activity_enable_driver_api, m.driver_api_trace_cbid, cbid)
        for name in DUMPED:
            try:
                kind = int(getattr(m.ActivityKind, name))
                m.activity_enable_and_dump(kind)
                if kind not in self.enabled:
                    self.enabled.append(kind)
            except Exception as exc:
                self.missing[name.lower()] = f"activity_enable_and_dump failed: {_one_line(exc)}"

    @staticmethod
    def _quiet(fn: Callable, enum: Any, name: str) -> None:
        member = getattr(enum, name, None)
        if member is not None:
            try:
                fn(int(member), 0)
            except Exception:
                pass  # trimming noise is an optimisation, never a failure

    def disable(self) -> None:
        m = self.m
        for kind in self.enabled:
            try:
                m.activity_disable(kind)
            except Exception:
                pass
        self.enabled = []

    def close(self) -> None:
        """Disable, deliver everything (forced flush) and give the subscriber slot back. The GPU
        is waited for first: a forced flush hands over records of work still running, with no
        end time."""
        if not self.is_open:
            return
        self.disable()
        try:
            self._sync()
        except Exception:
            pass   # closing after a failure: deliver what there is
        try:
            self.flush(forced=True)
        finally:   # CUPTI given back even when the flush failed, or no other profiler can have it
            self.release()

    def release(self) -> None:
        """Give the subscriber slot back (after the final flush)."""
        self._unsubscribe()
        self.is_open = False

    def _unsubscribe(self) -> None:
        if self._subscriber is not None:
            try:
                self.m.unsubscribe(self._subscriber)
            except Exception:
                pass
            self._subscriber = None

    # -- per range and per step ----------------------------------------------------------------
    def push(self, range_id: int) -> None:
        self.m.activity_push_external_correlation_id(self.ext_kind, range_id)

    def pop(self) -> None:
        self.m.activity_pop_external_correlation_id(self.ext_kind)

    def synchronize(self) -> None:
        self._sync()

    def flush(self, forced: bool = False) -> None:
        """Deliver buffered records to the callback (on this thread). Never from a callback."""
        self.m.activity_flush_all(1 if forced else 0)

    def dropped(self) -> int:
        """Records CUPTI dropped since the last call (the count resets on read)."""
        n = ctypes.c_uint64(0)
        try:
            self.m.activity_get_num_dropped_records(0, 0, ctypes.addressof(n))
        except Exception:
            return 0
        return int(n.value)

    def api_name(self, driver: bool, cbid: int) -> str:
        key = (driver, cbid)
        name = self._cbid_names.get(key)
        if name is None:
            enum = self.m.driver_api_trace_cbid if driver else self.m.runtime_api_trace_cbid
            try:
                name = enum(cbid).name
            except ValueError:
                name = f"{'cu' if driver else 'cuda'}Api#{cbid}"
            base, sep, ver = name.rpartition("_v")
            if sep and ver.isdigit():  # cudaLaunchKernel_v7000 -> cudaLaunchKernel
                name = base
            self._cbid_names[key] = name
        return name

    def timestamp(self) -> int:
        return int(self.m.get_timestamp())


def _no_callback(userdata, domain, cbid, cbdata) -> None:  # no callback domain is enabled
    return None


def _translate(exc: BaseException, what: str) -> CollectorProblem:
    msg = _one_line(exc)
    if "driver" in msg.lower() and "not found" in msg.lower():
        return NoGpu(f"no CUDA driver: {msg}")
    if isinstance(exc, (ImportError, OSError)):
        return CuptiUnavailable(f"libcupti cannot be loaded ({what}): {msg}")
    return CuptiFailure(f"CUPTI {what} failed: {msg}")


def _register_finalize(m: Any) -> None:
    """finalize() once per process at exit: CUPTI 13.0-13.1 can crash at exit without it."""
    global _finalize_registered
    if _finalize_registered or not hasattr(m, "finalize"):
        return
    _finalize_registered = True

    def _fin() -> None:
        try:
            m.finalize()
        except Exception:
            pass

    atexit.register(_fin)
