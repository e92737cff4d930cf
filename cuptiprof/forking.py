"""What a forked child inherits from a profiled parent and must never free.

A DuckDB connection (a writer's) and torch.profiler's state own native threads; fork copies
the objects but not the threads. Freeing them in the child, when the program drops them or
when the interpreter clears its modules at exit, runs their destructors on threads that are
gone: SIGSEGV, or std::terminate ("terminate called without an active exception"), so a child
that ended normally died. They are kept alive for the child's life and never used.
"""
from __future__ import annotations

import ctypes
from typing import Any


def keep_forever(*objs: Any) -> None:
    """One more reference to each object that nothing ever drops: not even the interpreter's
    teardown frees them."""
    for o in objs:
        if o is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(o))
