"""Readable C++ names through libstdc++'s __cxa_demangle (no extra dependency)."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_lib = None


def _cxa():
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
            fn = lib.__cxa_demangle
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_int)]
            libc = ctypes.CDLL(None)
            libc.free.argtypes = [ctypes.c_void_p]
            _lib = (fn, libc.free)
        except (OSError, AttributeError):
            _lib = False
    return _lib


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str | None:
    """Demangled form of an Itanium-mangled name, or None when `name` is not mangled."""
    if not name or not name.startswith("_Z"):
        return None
    lib = _cxa()
    if not lib:
        return None
    fn, free = lib
    status = ctypes.c_int(0)
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    ptr = fn(raw, None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        free(ptr)
