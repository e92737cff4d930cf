"""Device table and versions from cuda.bindings (no CUPTI needed): fallback and enrichment."""
from __future__ import annotations

import sys


def cupti_version() -> str | None:
    """'libcupti <package version> (<path>)' for the runs row."""
    from importlib import metadata

    ver = None
    for dist in ("nvidia-cuda-cupti", "nvidia-cuda-cupti-cu12"):
        try:
            ver = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    try:
        bindings = metadata.version("cupti-python")
    except metadata.PackageNotFoundError:
        bindings = None
    if ver is None and bindings is None:
        return None
    return f"libcupti {ver or '?'} (cupti-python {bindings or '?'})"


def torch_version() -> str | None:
    torch = sys.modules.get("torch")  # never import torch ourselves
    return getattr(torch, "__version__", None) if torch is not None else None


def cuda_devices() -> list[dict]:
    """One devices row per visible GPU from driver attributes ([] without a driver)."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)[:1]
        if int(err) != 0:
            return []
        err, n = driver.cuDeviceGetCount()
        if int(err) != 0:
            return []
        A = driver.CUdevice_attribute
        rows = []
        for i in range(n):
            _, dev = driver.cuDeviceGet(i)

            def attr(name: str) -> int | None:
                e, v = driver.cuDeviceGetAttribute(getattr(A, name), dev)
                return int(v) if int(e) == 0 else None

            _, raw = driver.cuDeviceGetName(256, dev)
            _, mem = driver.cuDeviceTotalMem(dev)
            mclk, bus = attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"), attr(
                "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")
            clk = attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
            rows.append({
                "device_id": i, "kind": "gpu",
                "name": bytes(raw).split(b"\0", 1)[0].decode(errors="replace"),
                "compute_capability": f"{attr('CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR')}."
                                      f"{attr('CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR')}",
                "sm_count": attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
                "core_clock_mhz": clk / 1000.0 if clk else None,
                "memory_clock_mhz": mclk / 1000.0 if mclk else None,
                "memory_bus_width_bits": bus,
                "memory_bytes": int(mem),
                "l2_bytes": attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
                # deviceQuery convention: DDR, two transfers per memory clock
                "peak_memory_bw_gbps": 2 * mclk * 1e3 * bus / 8 / 1e9 if mclk and bus else None,
                "source": "cuda-bindings"})
        return rows
    except Exception:
        return []


def merge_devices(cupti_rows: list[dict], driver_rows: list[dict]) -> list[dict]:
    """CUPTI DEVICE rows, completed with driver attributes CUPTI does not report."""
    by_id = {r["device_id"]: r for r in driver_rows}
    out = []
    for r in cupti_rows:
        d = by_id.pop(r["device_id"], None)
        if d:
            for k, v in d.items():
                if r.get(k) is None and v is not None:
                    r[k] = v
        out.append(r)
    return out + list(by_id.values())
