"""The store: one DuckDB file per run. The schema (the contract) and the one bulk writer."""
from cuptiprof.store.schema import SCHEMA_VERSION, schema_sql
from cuptiprof.store.writer import RunInfo, Writer

__all__ = ["SCHEMA_VERSION", "schema_sql", "Writer", "RunInfo"]
