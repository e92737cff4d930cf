"""cuptiprof: per-operator GPU time for inference, one DuckDB file per run.

    import cuptiprof
    with cuptiprof.profile("run.duckdb", warmup=2, steps=5):
        for i in range(7):
            with cuptiprof.range("step", step=i):
                denoise_step(i)
    cuptiprof.open("run.duckdb").ops(top=10).df()

Importing cuptiprof has no side effects and needs no GPU; the collector (the only code that
imports `cupti`) loads on first use.
"""
from __future__ import annotations

from cuptiprof._version import __version__

__all__ = ["__version__", "range", "step", "profile", "open"]


def open(path, steps=None):  # noqa: A001 - the public name users expect
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
    # the lazy names too (tab completion); not the __future__ import, which is no API
    return sorted(set(globals()) - {"annotations"} | set(__all__))
