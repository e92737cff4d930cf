"""cuptiprof: per-operator GPU time for inference, one DuckDB file per run.

    import cuptiprof
    with cuptiprof.profile("run.duckdb", warmup=2, steps=5):
        for i in range(7):
            with cuptiprof.range("step", step=i):
                denoise_step(i)
    cuptiprof.open("run.duckdb").ops(top=10).show()   # or .df() (needs pandas), .fetchall()

Importing cuptiprof has no side effects and needs no GPU; the collector (the only code that
imports `cupti`) loads on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cuptiprof._version import __version__

if TYPE_CHECKING:   # what the lazy names below are, for type checkers (py.typed)
    import os

    from cuptiprof.analyse.profile import Profile, Steps
    from cuptiprof.collect.session import profile
    from cuptiprof.markers import range, step

__all__ = ["__version__", "range", "step", "profile", "open"]


def open(path: str | os.PathLike, steps: Steps = None) -> Profile:  # noqa: A001 - the public name
    """Open a cuptiprof file read-only; report methods return DuckDB relations.

    steps: the steps reports look at, inclusive: an int N, a (first, last) pair with None for an
    open end, a range of consecutive steps, or 'A:B', 'A:', ':B', 'N'; None or (None, None):
    every step (a blank string is refused, as the command line's `--steps ""`)."""
    from cuptiprof.analyse.profile import open_profile

    return open_profile(path, steps)


def __getattr__(name):
    # range/step/profile live with the collector's front end; loaded lazily so that
    # `import cuptiprof` stays cheap and free of side effects.
    if name in ("range", "step"):
        from cuptiprof import markers

        return getattr(markers, name)
    if name == "profile":
        from cuptiprof.collect.session import profile

        return profile
    raise AttributeError(f"module 'cuptiprof' has no attribute {name!r}")


def __dir__():
    # the lazy names too (tab completion); not the imports that are no API
    return sorted(set(globals()) - {"annotations", "TYPE_CHECKING"} | set(__all__))
