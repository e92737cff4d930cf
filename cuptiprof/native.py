"""The optional native (C) parts: the Kineto scanner, the busy-time islands, the distinct-row
pass and the exit-status watch of `cuptiprof run`'s processes. Each is used when it was built (a
C compiler at install time) and CUPTIPROF_NATIVE is not 0; otherwise the msgspec / numpy path
gives the same result (without the watch, a recovered run reads a `raise SystemExit(n)` as 0)."""
from __future__ import annotations

import importlib
import os
from types import ModuleType


def extensions_enabled() -> bool:
    """False when CUPTIPROF_NATIVE=0 (read on every call: tests switch it)."""
    return os.environ.get("CUPTIPROF_NATIVE", "1").strip() != "0"


def load_extension(name: str, api: int | None = None) -> ModuleType | None:
    """The built extension `name`, or None when it was not built or is a stale build of another
    interface (its `API` is not `api`)."""
    try:
        mod = importlib.import_module(name)
    except ImportError:
        return None
    return mod if api is None or getattr(mod, "API", None) == api else None
