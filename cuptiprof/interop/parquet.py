"""Export a cuptiprof file as Parquet datasets: one directory per table, hive-partitioned by
host and pid (`kernels/host=h1/pid=42/data_0.parquet`), so DuckDB, Spark or Trino read each
directory as one table:

    SELECT * FROM read_parquet('OUT/kernels/**/*.parquet', hive_partitioning = true)

Tables with interned names are exported through their views (names resolved), so a dataset
never needs the `strings` table to be read.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from cuptiprof.errors import InputError

# Per-process tables (partitioned by host/pid), exported from the view that resolves names.
PARTITIONED = ("kernels", "memcpys", "memsets", "syncs", "api_calls", "ranges", "logs",
               "memory_events", "devices", "processes", "data_quality")
PLAIN = ("runs",)


def export_parquet(prof, out_dir: str | os.PathLike, *, force: bool = False) -> dict:
    """Write one dataset per table under `out_dir` (created; replaced with force=True)."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise InputError(f"{out}: already exists and is not empty; choose another directory "
                         "or pass --force")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{out}: directory {parent} does not exist")
    tmp = parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    con = prof.con
    counts = {}
    try:
        for t in PARTITIONED:
            n = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            counts[t] = n
            if n == 0:
                continue
            cols = [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()]
            sel = ", ".join(f"x.{c}" for c in cols if c not in ("host",))
            host = "x.host" if "host" in cols else "p.host"
            join = "" if "host" in cols else \
                "LEFT JOIN processes p ON p.run_id = x.run_id AND p.pid = x.pid"
            dest = (tmp / t).as_posix().replace("'", "''")
            con.execute(
                f"COPY (SELECT {sel}, coalesce({host}, 'unknown') AS host FROM {t} x {join}) "
                f"TO '{dest}' (FORMAT parquet, PARTITION_BY (host, pid))")
        for t in PLAIN:
            (tmp / t).mkdir()
            dest = (tmp / t / "data_0.parquet").as_posix().replace("'", "''")
            counts[t] = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            con.execute(f"COPY (SELECT * FROM {t}) TO '{dest}' (FORMAT parquet)")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return counts
