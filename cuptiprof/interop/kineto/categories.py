"""What each Kineto category becomes (kernel, memcpy, op, ...), the categories read for
nothing, and the names parsed on the way: copy and memset kinds, sync types, thread ids."""
from __future__ import annotations

import re
import zlib

# Kineto category (lower case) -> what it becomes.
CATEGORIES = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "driver", "driver": "driver",
    "cuda_sync": "sync",
    "cpu_op": "op", "operator": "op",
    "user_annotation": "user", "gpu_user_annotation": "gpu_user", "python_function": "python",
}
# Flow arrows: their events (but "X" ones, counted) the native scanner keeps no row for.
FLOW = {"ac2g", "async", "async_cpu_to_gpu", "fwdbwd"}
# Known categories that carry nothing cuptiprof stores (flow arrows, trace spans, instants).
IGNORED = FLOW | {"trace", "cpu_instant_event", "overhead", "cuda_profiler_range"}
# cuptiprof's export: a row of the `logs` table, as an instant event on its thread's track
# (the message its name; args level, logger and "cuptiprof step")
LOG_CATEGORY = "cuptiprof_log"
# the categories named where a trace of none of them is refused (modern spellings)
_READ = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cuda_sync",
         "cpu_op", "user_annotation", "gpu_user_annotation", "python_function")
# N may be below 0: cuptiprof's export of a step numbered so (torch numbers steps from 0)
_STEP_RE = re.compile(r"ProfilerStep#(-?\d+)$")
STEP0 = 1 << 31   # as columns.STEP0: steps are numbered from it while a trace is read


def _step_of(name) -> int:
    """STEP0 + N for a range named ProfilerStep#N, -1 for none: an N past the 32-bit step
    column too (a name of the program's own), which stays a range of that name, not a failed
    import."""
    m = _STEP_RE.match(name) if type(name) is str else None
    return int(m.group(1)) + STEP0 if m and -STEP0 <= int(m.group(1)) < STEP0 else -1


# CUPTI's memory kinds as Kineto words them ("Device Static": a __device__ variable's memory)
_MEMKIND = {"pageable": "pageable", "pinned": "pinned", "device": "device", "array": "array",
            "managed": "managed", "host": "pageable", "device static": "device_static",
            "managed static": "managed_static"}
_COPYKINDS = {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA"}
_SYNC = {"event sync": "event_synchronize", "stream sync": "stream_synchronize",
         "context sync": "context_synchronize", "stream wait event": "stream_wait_event"}
_GPU_TABLE = {"kernel": "kernels", "memcpy": "memcpys", "memset": "memsets", "sync": "syncs"}
# the column a GPU category keeps in args "xextra" of cuptiprof's export, and its key there
_EXTRA = {"memcpy": ("is_async", "cuptiprof async"), "memset": ("value", "cuptiprof value")}
_PH_X, _PH_I, _PH_M = 0, 1, 2  # ids in KinetoFile.small, interned first


def _memcpy_kind(name: str | None) -> tuple[str, str, str]:
    """'Memcpy HtoD (Pageable -> Device)' -> ('HtoD', 'pageable', 'device')."""
    if not name:
        return "unknown", "unknown", "unknown"
    parts = name.split()
    kind = parts[1] if len(parts) > 1 and parts[1] in _COPYKINDS else "unknown"
    src = dst = "unknown"
    m = re.search(r"\(\s*(\w+(?: \w+)*)\s*->\s*(\w+(?: \w+)*)\s*\)", name)
    if m:
        src = _MEMKIND.get(m.group(1).lower(), "unknown")
        dst = _MEMKIND.get(m.group(2).lower(), "unknown")
    return kind, src, dst


def _memset_kind(name: str | None) -> str:
    m = re.search(r"\(\s*(\w+(?: \w+)*)\s*\)", name or "")
    return _MEMKIND.get(m.group(1).lower(), "unknown") if m else "unknown"


def _tid_number(t) -> int:
    """Thread ids come as 25738, "25738" or "stream 7"."""
    if isinstance(t, int):
        return t
    if t is None:
        return 0
    m = re.search(r"(-?\d+)\s*$", str(t))
    # a name without a number: a number of its text, the same in every import (hash() of a
    # str differs from one Python process to the next)
    return int(m.group(1)) if m else (zlib.crc32(str(t).encode()) & 0x3FFFFFFF)
