"""Load examples/denoise.py as a module and swap its step markers (shared by the GPU-check
scripts; the example itself stays unmodified)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "denoise.py"
if str(ROOT) not in sys.path:  # cuptiprof from this checkout, as `python -m cuptiprof` finds it
    sys.path.insert(1, str(ROOT))


def dry_run() -> bool:
    """DRY_RUN=1 or CUPTIPROF_FAKE_CUPTI=1: the CPU rehearsal of the GPU check."""
    return any(os.environ.get(k, "") not in ("", "0") for k in ("DRY_RUN", "CUPTIPROF_FAKE_CUPTI"))


def load():
    spec = importlib.util.spec_from_file_location("denoise_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed_markers(mod, inner=None, on_enter=None, on_exit=None):
    """Replace mod._markers: every "step" range is timed (perf_counter, host side; the example
    synchronizes at the end of each step) and wrapped around `inner` markers (None: no marker).
    on_enter(step) / on_exit(step) run just inside the timed region. Returns the list of
    (step, seconds) that fills as the example runs."""
    times: list[tuple[int, float]] = []
    base = inner or (lambda name, **kw: contextlib.nullcontext())

    @contextlib.contextmanager
    def mark(name, **kw):
        if name != "step":
            with base(name, **kw):
                yield
            return
        step = kw.get("step")
        t0 = time.perf_counter()
        if on_enter:
            on_enter(step)
        try:
            with base(name, **kw):
                yield
        finally:
            if on_exit:
                on_exit(step)
            times.append((step, time.perf_counter() - t0))

    mod._markers = lambda: mark
    return times
