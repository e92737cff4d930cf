"""The store: one DuckDB file per run. The schema (the contract) and the one bulk writer."""
from cuptiprof.store.schema import SCHEMA_VERSION, schema_sql

__all__ = ["SCHEMA_VERSION", "schema_sql", "Writer", "RunInfo"]


def __getattr__(name: str):
    # The writer loads pyarrow and numpy: only when it is asked for, so that reading a file
    # (reports, sql, compare) does not pay for them.
    if name in ("Writer", "RunInfo"):
        from cuptiprof.store import writer
        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
