"""The CUPTI collector: the only package folder that imports `cupti` (lazily).

    cupti_source  adapter over the cupti module (real, or the fake of fake.py for tests)
    decode        record objects -> per-kind row tuples (pure, primitive fields only)
    resolve       GPU rows -> range and step of the LAUNCHING call, at flush time
    session       Session / profile(): sampling, flushing, writing through the Writer
    nvtx_setup    NVTX_INJECTION64_PATH so that other NVTX domains arrive as MARKER records
    fake          a fake cupti module delivering real cupti-python record objects
    libcuda       the driver's GPU count and version through ctypes (no cuda-bindings needed)
"""
