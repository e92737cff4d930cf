"""Session's arguments checked, before any file is made: a wrong one is refused with what to
write instead (UsageError)."""
from __future__ import annotations

import fnmatch
from typing import Any, Callable

from cuptiprof.errors import UsageError

WRITE_MODES = ("create", "overwrite", "append")


def _chosen_kinds(kinds: Any, all_kinds: tuple) -> list:
    """kinds as a list: None is every kind; names in a string split as `run --kinds` splits
    them ("kernel,memcpy", "kernel memcpy"); a string naming none is refused (an unset
    variable), an empty list is the always-on kinds alone."""
    from cuptiprof.collect.cupti_source import split_kinds

    if kinds is None:
        return list(all_kinds)
    if isinstance(kinds, str):
        if not split_kinds([kinds]):   # kinds=os.environ.get("KINDS", ""), as run --kinds ""
            raise UsageError(f"kinds {kinds!r}: no kind given; choose from {', '.join(all_kinds)}")
        kinds = [kinds]
    try:
        chosen = split_kinds(list(kinds))
    except TypeError:
        chosen = [kinds]
    unknown = [k if isinstance(k, str) else repr(k) for k in chosen if k not in all_kinds]
    if unknown:
        raise UsageError(f"unknown kind(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(all_kinds)}")
    return chosen


def _flag(name: str, v: Any) -> bool:
    """A yes-or-no argument: True or False (numpy's bool too); anything else was taken for its
    truth, so light="no" profiled light."""
    if type(v).__name__ not in ("bool", "bool_") or v not in (True, False):
        raise UsageError(f"{name} must be True or False, not {v!r}")
    return bool(v)


def _pid(v: Any) -> int | None:
    """pid: a process id (a whole number that the files' INTEGER column holds) or None; a str
    failed at the first write with DuckDB's conversion error."""
    import numbers

    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 < v < 2 ** 31:
        raise UsageError(f"pid must be a process id (a whole number from 1 to 2**31 - 1) or "
                         f"None, not {v!r}")
    return int(v)


_SOURCE_METHODS = ("open", "enable", "disable", "flush", "push", "pop", "synchronize")


def _check_source(source: Any) -> None:
    """A source Session can use: a name, a FakeCupti (activity_* functions as cupti has them)
    or an object with CuptiSource's methods; anything else failed in start(), after the file
    was made."""
    if isinstance(source, type):   # the class has the methods its instances have
        raise UsageError(f"source={source.__name__} is a class; pass an instance of it, such as "
                         f"{source.__name__}(...)")
    if isinstance(source, str):
        ok = source in ("cupti", "fake", "none")
    else:
        ok = source is None or hasattr(source, "activity_enable") or \
            all(hasattr(source, m) for m in _SOURCE_METHODS)
    if not ok:
        raise UsageError(f"unknown source {source!r}; use 'cupti', 'fake' or 'none'")


def _make_filter(f: Any) -> Callable[[str], bool] | None:
    if f is None:
        return None
    if callable(f):
        return f
    pats = [f] if isinstance(f, str) else list(f) if isinstance(f, (list, tuple, set, frozenset)) \
        else None
    if pats is None or not all(isinstance(p, str) for p in pats):
        raise UsageError(f"range_filter must be a glob, a list of globs or a function of a range's "
                         f"name, not {f!r}")
    for p in pats:
        if not p.strip():   # matches no range: a glob read from an unset variable
            raise UsageError(f"range_filter {p!r}: empty; give a glob of range names, or None")
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in pats)
