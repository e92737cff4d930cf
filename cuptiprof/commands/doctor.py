"""`cuptiprof doctor`: can this machine profile a GPU? One line per check: ok / problem + fix.

Exit status: 0 when GPU profiling would work, 3 when the environment cannot (no driver, no GPU,
no CUPTI, CUPTI held by another profiler), 1 when something else is broken. A "note" line
(exit status 0 in the tuple) says something worth knowing that does not stop profiling.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata

from cuptiprof.outputs import say


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check that this machine can profile a GPU (driver, "
                       "CUPTI, NVTX injection, other profilers)",
                       description="Check that this machine can profile a GPU: one line per "
                       "check (ok, note or problem, with the fix). Exit 0: GPU profiling would "
                       "work; 1: a Python package is missing or too old; 3: the environment "
                       "cannot profile a GPU (no driver, no GPU, no CUPTI, CUPTI held by "
                       "another profiler).")
    p.set_defaults(func=run)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def checks() -> list[tuple[str, bool, str, str, int]]:
    """(what, ok, detail, how to fix, exit status when not ok)."""
    from cuptiprof._version import __version__
    from cuptiprof.collect import device_info, libcuda, nvtx_setup

    out: list[tuple[str, bool, str, str, int]] = []
    py_ok = sys.version_info >= (3, 10)
    out.append(("python", py_ok, f"{platform.python_version()} ({sys.executable})",
                "use Python 3.10 or newer", 1))
    out.append(("cuptiprof", True, __version__, "", 1))
    out.extend(_required(dist, least) for dist, least in REQUIRED.items())
    torch = _version("torch")
    out.append(("torch", True, torch or "not installed (only needed for torch programs)", "", 1))
    out.extend(_path_pythons())

    drv = libcuda.driver_version()
    # counted as `cuptiprof run` counts them (libcuda itself), so that this line says what the
    # run will do: through cuda-bindings it said none whenever that package was missing
    n = libcuda.gpu_count()
    out.append(("CUDA driver", drv is not None,
                f"CUDA {drv}" if drv else "libcuda.so.1 cannot be loaded",
                "install the NVIDIA driver (nvidia-smi must work) or run on a GPU machine", 3))
    if drv is not None:
        out.append(("GPU", n > 0, f"{n} visible" if n else "no CUDA device visible",
                    "check nvidia-smi and CUDA_VISIBLE_DEVICES", 3))
        missing = _cuda_bindings_missing()
        if missing:
            out.append(("cuda-bindings", False, f"{missing}: the driver and GPUs above were asked "
                        "of libcuda directly, as `cuptiprof run` does; without it the devices "
                        "table lacks the driver's attributes and a program that does not use "
                        "torch is not synchronized before each flush",
                        "pip install 'cuptiprof[gpu]'", 0))

    bindings = _version("cupti-python")
    out.append(("cupti-python", bindings is not None, bindings or "not installed",
                "pip install 'cuptiprof[gpu]' (pin cupti-python to your CUDA major version)", 3))
    lib = nvtx_setup.libcupti_path() if bindings else None
    cver = device_info.cupti_version()
    out.append(("libcupti", lib is not None, f"{lib} ({cver})" if lib else "not found",
                "pip install nvidia-cuda-cupti matching your driver (see docs/cupti-python.md)",
                3))

    cur = os.environ.get(nvtx_setup.ENV)
    # judged as `cuptiprof run` judges it (nvtx_setup.prepare): another libcupti is replaced
    if lib and nvtx_setup.other_tool(cur, lib):
        out.append(("NVTX injection", False, f"{nvtx_setup.ENV}={cur} names another library",
                    "unset it (another tool's injection holds CUPTI) or point it at " + lib, 3))
    elif lib and cur and os.path.realpath(cur) != os.path.realpath(lib):
        out.append(("NVTX injection", True, f"would work: cuptiprof run sets {nvtx_setup.ENV} "
                    f"to its own libcupti in place of {cur}", "", 3))
    else:
        out.append(("NVTX injection", lib is not None,
                    "would work: cuptiprof run sets " + nvtx_setup.ENV + " before the program "
                    "starts" if lib else "needs libcupti",
                    "install libcupti (see above)", 3))

    if drv is not None and n > 0 and bindings:
        out.append(_subscriber_check())
    return out


# pyproject's dependencies (distribution and module share a name) and the oldest version each
# takes (isal left out: zlib stands in where it is missing)
REQUIRED = {"duckdb": (1, 1), "pyarrow": (14,), "numpy": (1, 23), "rich": (13,),
            "nvtx": (0, 2, 10), "msgspec": (0, 18)}


def _required(dist: str, least: tuple[int, ...]) -> tuple[str, bool, str, str, int]:
    """A required package: installed, importable (its metadata alone said ok for a broken or
    shadowed one) and not older than pyproject asks."""
    import importlib

    at_least = ".".join(map(str, least))
    fix = f"pip install -U {dist}"
    have = _version(dist)
    if have is None:
        return dist, False, "not installed", fix, 1
    m = re.match(r"\d+(?:\.\d+)*", have)
    if m and tuple(int(x) for x in m.group().split(".")) < least:
        return dist, False, f"{have} is too old: cuptiprof needs {at_least} or newer", fix, 1
    try:
        importlib.import_module(dist)
    except Exception as exc:
        return dist, False, f"{have} cannot be imported ({type(exc).__name__}: {exc})", fix, 1
    return dist, True, have, fix, 1


def _cuda_bindings_missing() -> str | None:
    """Why cuda.bindings cannot be used ('not installed', or its import error), or None."""
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError as exc:
        return "not installed" if getattr(exc, "name", None) in ("cuda", "cuda.bindings", None) \
            else f"cannot be imported ({exc})"
    except Exception as exc:
        return f"cannot be imported ({exc})"
    return None


_LIBS = ("numpy", "pyarrow", "duckdb")


def _path_pythons() -> list[tuple[str, bool, str, str, int]]:
    """`python` / `python3` on PATH when they are another interpreter: a command that runs one
    that cannot import cuptiprof's libraries is not profiled (one warning per process)."""
    here = os.path.realpath(sys.executable)
    out = []
    for name in ("python", "python3"):
        exe = shutil.which(name)
        if exe is None or os.path.realpath(exe) == here:
            continue
        probe = ("import importlib.util as u; print(' '.join(m for m in %r if u.find_spec(m) is "
                 "None))" % (_LIBS,))
        try:
            r = subprocess.run([exe, "-c", probe], capture_output=True, text=True, timeout=30)
            missing = r.stdout.split() if r.returncode == 0 else list(_LIBS)
        except (OSError, subprocess.TimeoutExpired):
            missing = list(_LIBS)
        if missing:
            out.append((f"{name} on PATH", False,
                        f"{exe} cannot import {', '.join(missing)}: commands that run `{name}` "
                        "are not profiled",
                        f"run them with {sys.executable}, or install cuptiprof into that Python", 0))
    return out


def _subscriber_check() -> tuple[str, bool, str, str, int]:
    """Claim and release CUPTI once: fails when another profiler holds it."""
    from cuptiprof.collect import cupti_source
    from cuptiprof.collect.errors import CollectorProblem, SubscriberConflict

    try:
        src = cupti_source.CuptiSource()
        src.open(lambda records: None)
        src.release()
        return ("CUPTI subscriber", True, "free (no other profiler holds CUPTI)", "", 3)
    except SubscriberConflict as exc:
        return ("CUPTI subscriber", False, str(exc),
                "stop torch.profiler / nsys / ncu in this process, then profile", 3)
    except CollectorProblem as exc:
        return ("CUPTI subscriber", False, str(exc), "see docs/cupti-python.md", 3)


# The checks that fail when no CUDA GPU is found: `cuptiprof run` then records CPU op times
_NO_GPU = ("CUDA driver", "GPU")


def run(args) -> int:
    failed: set[int] = set()
    no_gpu = False
    for what, ok, detail, fix, code in checks():
        line = f"{'ok     ' if ok else 'problem' if code else 'note   '}  {what:<17} {detail}"
        if not ok:
            line += f"  -> {fix}"
            if code:
                failed.add(code)
            no_gpu = no_gpu or what in _NO_GPU
        say(line, sys.stdout)
    status = 1 if 1 in failed else (3 if failed else 0)
    if status:
        # without a GPU, run falls back to torch.profiler's CPU ops; with CUPTI held by another
        # profiler (a GPU is there) the line stays as it is. Exit 1: a package is missing, so
        # run would not start at all.
        cpu = (", and `cuptiprof run` records a torch program's CPU op times instead (no CUDA "
               "GPU found)") if no_gpu and status == 3 else ""
        # exit 1: profile() cannot record even host-side ranges without its packages
        then = (f"profile() still records host-side ranges{cpu}" if status == 3 else
                "neither does anything else of cuptiprof's until the problems above are fixed")
        say(f"cuptiprof doctor: GPU profiling would NOT work here (exit {status}); {then}")
    else:
        say("cuptiprof doctor: GPU profiling would work here", sys.stdout)
    return status

