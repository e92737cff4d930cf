"""What the collector does to the program's CUDA state: it never initialises CUDA itself, it
synchronizes only the devices the process uses and never during a CUDA-graph capture, and it
waits for the GPU before the forced flush of a close."""
from __future__ import annotations

import sys
import types

import pytest

from cuptiprof.collect import cupti_source
from cuptiprof.collect.cupti_source import CuptiSource, gpu_visible
from cuptiprof.collect.errors import NoGpu
from cuptiprof.collect.fake import FakeCupti


def test_gpu_visible_reads_the_environment_and_the_driver_list(tmp_path):
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    assert not gpu_visible({}, gpus)                       # the driver lists none
    (gpus / "0000:19:00.0").mkdir()
    assert gpu_visible({}, gpus)
    assert not gpu_visible({"CUDA_VISIBLE_DEVICES": ""}, gpus)
    assert not gpu_visible({"CUDA_VISIBLE_DEVICES": "-1"}, gpus)
    assert gpu_visible({"CUDA_VISIBLE_DEVICES": "0,1"}, gpus)
    assert gpu_visible({}, tmp_path / "absent")            # cannot tell: CUPTI says later


def _module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    return m


@pytest.fixture
def driver(monkeypatch):
    """A stand-in cuda.bindings.driver: counts cuInit, devices 3 and 5 have active contexts."""
    calls = []

    def cuInit(flags):
        calls.append("cuInit")
        return (0,)

    d = _module("cuda.bindings.driver", cuInit=cuInit,
                cuDeviceGetCount=lambda: (0, 8), cuDeviceGet=lambda i: (0, i),
                cuDevicePrimaryCtxGetState=lambda dev: (0, 0, dev in (3, 5)))
    monkeypatch.setitem(sys.modules, "cuda", _module("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", _module("cuda.bindings", driver=d))
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", d)
    return calls


def test_loading_cupti_never_initialises_cuda(monkeypatch, driver):
    """A script that sets CUDA_VISIBLE_DEVICES at its top, or forks CUDA workers, finds CUDA
    as it left it: the collector starts before the program's first line."""
    cupti = _module("cupti.cupti", get_timestamp=lambda: 1)
    monkeypatch.setitem(sys.modules, "cupti", _module("cupti", cupti=cupti))
    monkeypatch.setitem(sys.modules, "cupti.cupti", cupti)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(cupti_source, "gpu_visible", lambda: True)
    assert cupti_source.load_cupti() is cupti
    assert driver == []
    monkeypatch.setattr(cupti_source, "gpu_visible", lambda: False)
    with pytest.raises(NoGpu, match="CUDA_VISIBLE_DEVICES"):
        cupti_source.load_cupti()
    assert driver == []


def test_synchronize_waits_for_the_devices_in_use_and_never_during_a_capture(monkeypatch, driver):
    synced = []
    capturing = [False]
    cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 8,
                                 current_device=lambda: 0, synchronize=synced.append,
                                 is_current_stream_capturing=lambda: capturing[0])
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    cupti_source.device_synchronize()
    assert synced == [0, 3, 5]     # the current device and those with a context: no new context
    capturing[0] = True
    cupti_source.device_synchronize()
    assert synced == [0, 3, 5]     # a sync during graph capture would invalidate the capture


def test_close_waits_for_the_gpu_before_its_forced_flush():
    """A forced flush hands over records of work still running (no end time): wait first."""
    f = FakeCupti()
    src = CuptiSource(f)
    src.open(lambda records: None)
    src.enable(["kernel"])
    f.calls.clear()
    src.close()
    names = [c[0] for c in f.calls]
    assert "synchronize" in names and ("flush", 1) in f.calls
    assert names.index("synchronize") < f.calls.index(("flush", 1))


def test_synchronize_runs_in_relaxed_capture_mode_and_restores_the_threads_mode(monkeypatch, driver):
    """A step ended on a worker thread flushes there: in the default (global) capture mode its
    synchronize would invalidate a CUDA graph another thread is capturing. The synchronize runs
    with this thread relaxed, and the thread gets its own mode back, even when it fails."""
    d = sys.modules["cuda.bindings.driver"]
    modes = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_GLOBAL=0, CU_STREAM_CAPTURE_MODE_RELAXED=2)
    mode = [0]          # this thread's mode, as the driver keeps it
    log = []

    def exchange(new):
        old, mode[0] = mode[0], new
        log.append(("mode", new))
        return (0, old)
    monkeypatch.setattr(d, "CUstreamCaptureMode", modes, raising=False)
    monkeypatch.setattr(d, "cuThreadExchangeStreamCaptureMode", exchange, raising=False)

    def synchronize(i):
        log.append(("sync", i, mode[0]))
        if i == 5:
            raise RuntimeError("an error the program's own work left behind")
    cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 8,
                                 current_device=lambda: 0, synchronize=synchronize,
                                 is_current_stream_capturing=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(cupti_source, "_capture_mode_missing", False)
    cupti_source.device_synchronize()
    assert log == [("mode", 2), ("sync", 0, 2), ("sync", 3, 2), ("sync", 5, 2), ("mode", 0)]
    assert mode == [0]
