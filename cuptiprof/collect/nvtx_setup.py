"""NVTX injection: make NVTX ranges of other domains (torch.cuda.nvtx, frameworks) arrive as
CUPTI MARKER records.

NVTX reads NVTX_INJECTION64_PATH once, at the first NVTX call of each library, so the variable
must name the SAME libcupti that cupti-python loads before any NVTX call in the process (the
launcher exports it before the child starts; `profile()` sets it when it still can).
"""
from __future__ import annotations

import glob
import os
import sys

ENV = "NVTX_INJECTION64_PATH"


def libcupti_path() -> str | None:
    """Absolute path of the libcupti cupti-python uses (cuda.pathfinder's search), or None."""
    try:
        from cuda import pathfinder

        return pathfinder.load_nvidia_dynamic_lib("cupti").abs_path
    except Exception:
        pass
    for base in sys.path:  # wheel layout without cuda-pathfinder
        hits = sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "lib", "libcupti.so*")))
        hits += sorted(glob.glob(os.path.join(base, "nvidia", "cuda_cupti", "lib", "libcupti.so*")))
        if hits:
            return os.path.abspath(hits[-1])
    return None


def injection_env() -> dict[str, str]:
    """Environment for a child process whose NVTX ranges should be captured ({} if unknown)."""
    path = libcupti_path()
    return {ENV: path} if path else {}


def prepare() -> tuple[bool, str]:
    """Point NVTX at our libcupti if that can still work. Returns (set, reason when not)."""
    path = libcupti_path()
    if not path:
        return False, "libcupti was not found"
    current = os.environ.get(ENV)
    if other_tool(current, path):
        # Another tool's injection (e.g. Nsight Systems); it also holds CUPTI.
        return False, f"{ENV} already names another tool ({current})"
    os.environ[ENV] = path
    return True, ""


def other_tool(current: str | None, path: str) -> bool:
    """Whether ENV's value `current` names another tool's injection library, which prepare()
    leaves in place: not our libcupti at `path` (or a link to it), nor another libcupti (a CUDA
    toolkit's, set in a shell profile), which prepare() replaces with ours."""
    return bool(current) and os.path.realpath(current) != os.path.realpath(path) \
        and "cupti" not in os.path.basename(current)


def domain_is_live(domain: str = "cuptiprof") -> bool:
    """True when NVTX calls in `domain` reach a tool (the first call decides, for good)."""
    try:
        import nvtx

        return type(nvtx.get_domain(domain)).__name__ != "DummyDomain"
    except Exception:
        return False
