"""The CUDA driver asked directly through ctypes (libcuda.so.1), without the cuda-bindings
package: what `cuptiprof run` decides by and what doctor and the runs row report, so that all
three give the same answer on a machine where that optional package is missing."""
from __future__ import annotations

import ctypes
from typing import Any


def _load() -> Any:
    """The driver library, or None where it cannot be loaded (no driver installed)."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def gpu_count() -> int:
    """CUDA devices the driver can see: 0 without a driver or device (cuInit fails)."""
    cuda = _load()
    if cuda is None:
        return 0
    try:
        if cuda.cuInit(0) != 0:
            return 0
        n = ctypes.c_int(0)
        return max(n.value, 0) if cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0
    except AttributeError:   # a library of that name without the driver API
        return 0


def driver_version() -> str | None:
    """The CUDA version the driver supports as 'major.minor' (12040 -> '12.4'); None without a
    driver. Needs no cuInit and no device."""
    cuda = _load()
    if cuda is None:
        return None
    v = ctypes.c_int(0)
    try:
        if cuda.cuDriverGetVersion(ctypes.byref(v)) != 0 or v.value <= 0:
            return None
    except AttributeError:
        return None
    return f"{v.value // 1000}.{(v.value % 1000) // 10}"
