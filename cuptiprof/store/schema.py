"""The schema file (schemas/cuptiprof.sql) is the contract; everything here is derived from it."""
from __future__ import annotations

import functools
import re
from importlib import resources

# Tables that hold interned strings: column given by the caller -> id column stored.
INTERNED = {
    "kernel_rows": {"name": "name_id"},   # then interned with the launch configuration
    "api_call_rows": {"name": "name_id"},
    "range_rows": {"name": "name_id"},
}
# Launch-configuration columns a writer is given with kernels and interns, with the kernel's
# name id, into launch_configs; kernel_rows keeps only their config_id (the `kernels` view joins
# them back).
LAUNCH_CONFIG = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers",
                 "static_smem", "dynamic_smem", "graph_id", "graph_node_id")
# Where a kernel ran: the columns a writer is given with kernels (run_id and pid filled in by the
# writer) and interns into lanes; kernel_rows keeps only their lane_id.
LANE = ("run_id", "pid", "device_id", "context_id", "stream_id")
# Friendly table names accepted by the writer (the view name) -> storage table.
STORAGE_TABLE = {"kernels": "kernel_rows", "api_calls": "api_call_rows", "ranges": "range_rows"}
# The GPU activity tables, in the order of gpu_activities.
ACTIVITY_TABLES = ("kernel_rows", "memcpys", "memsets", "syncs")


@functools.lru_cache(maxsize=1)
def schema_sql() -> str:
    """The DDL text shipped with the package."""
    return resources.files("cuptiprof").joinpath("schemas/cuptiprof.sql").read_text()


@functools.lru_cache(maxsize=1)
def _version() -> int:
    m = re.search(r"INSERT INTO meta VALUES \('schema_version', '(\d+)'\)", schema_sql())
    if not m:  # pragma: no cover - guarded by tests
        raise RuntimeError("schemas/cuptiprof.sql does not declare a schema_version")
    return int(m.group(1))


SCHEMA_VERSION = _version()


def table_columns(con, table: str) -> list[tuple[str, str]]:
    """(name, type) of a table's columns, in order, as the connected file has them."""
    return con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = ? AND table_schema = 'main' ORDER BY ordinal_position",
        [table],
    ).fetchall()
