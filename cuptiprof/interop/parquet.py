"""Export a cuptiprof file as Parquet datasets: one directory per table, hive-partitioned by
host and pid (`kernels/host=h1/pid=42/data_0.parquet`), so DuckDB, Spark or Trino read each
directory as one table:

    SELECT * FROM read_parquet('OUT/kernels/**/*.parquet', hive_partitioning = true,
                               hive_types = {'host': 'VARCHAR', 'pid': 'INTEGER'})

`hive_types` gives host and pid the types they have in the file's views: left out, DuckDB infers
a partition column's type from the directory names (pid as BIGINT, a host named `1234` as a
number). `runs` is one file, `OUT/runs/data_0.parquet`. Tables with interned names are exported
through their views (names resolved), without the ids into the file's string table, so a
dataset never needs the `strings` table to be read.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from cuptiprof.errors import InputError
from cuptiprof.outputs import FORCE_HINT, check_output, temp_beside
from cuptiprof.store.files import first_row

# Per-process tables (partitioned by host/pid), exported from the view that resolves names.
PARTITIONED = ("kernels", "memcpys", "memsets", "syncs", "api_calls", "ranges", "logs",
               "memory_events", "devices", "processes", "data_quality")
PLAIN = ("runs",)
# Columns of the views left out: ids into the file's `strings` table, meaningless outside it
# (the names they stand for are columns of their own).
INTERNAL = ("name_id",)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"   # Hive's NULL, read back as NULL


def _not_an_export(out: Path) -> str | None:
    """--force replaces a directory of cuptiprof's datasets, never one holding anything else."""
    names = set(PARTITIONED) | set(PLAIN)
    other = sorted(p.name for p in out.iterdir() if not (p.is_dir() and p.name in names))
    if other:
        return (f"holds {', '.join(other[:3])}{' ...' if len(other) > 3 else ''}, which a "
                "Parquet export did not write; --force replaces only an earlier export: choose "
                "another directory")
    return None


def check_target(out_dir: str | os.PathLike, inputs, force: bool) -> Path:
    """Refuse `out_dir` before anything (of this or another export) is written."""
    return check_output(out_dir, inputs=inputs, force=force, directory=True,
                        replaceable=_not_an_export)


def export_parquet(prof, out_dir: str | os.PathLike, *, force: bool = False) -> dict:
    """Write one dataset per table under `out_dir` (created; an earlier export is replaced with
    force=True). A table without rows in scope gets one file without rows in the NULL
    partition (host and pid NULL), so every table reads as a dataset, with the same columns and
    types (`hive_types`) as one with rows."""
    out = check_target(out_dir, [prof.path], force)
    tmp = temp_beside(out)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    con = prof.con
    counts = {}
    try:
        for t in PARTITIONED:
            cols = [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()]
            src = t   # --steps: the rows of those steps, in every table that has steps
            if prof.step_range is not None and "step" in cols:
                src = f"(SELECT * FROM {t} WHERE {prof.step_filter})"
            n = first_row(con.execute(f"SELECT count(*) FROM {src}"))[0]
            counts[t] = n
            sel = ", ".join(f"x.{c}" for c in cols if c not in ("host", "pid", *INTERNAL))
            host = "x.host" if "host" in cols else "p.host"
            join = "" if "host" in cols else \
                "LEFT JOIN processes p ON p.run_id = x.run_id AND p.pid = x.pid"
            # an unknown host stays NULL: Hive's __HIVE_DEFAULT_PARTITION__, which DuckDB,
            # Spark, Trino and pyarrow read back as NULL
            query = f"SELECT {sel}, {host} AS host, x.pid FROM {src} x {join}"
            if n == 0:   # no partition to write: one file of the other columns, in the NULL
                # partition, so that host and pid are partition columns as in a table with rows
                part = tmp / t / f"host={NULL_PARTITION}" / f"pid={NULL_PARTITION}"
                part.mkdir(parents=True)
                dest = (part / "data_0.parquet").as_posix().replace("'", "''")
                con.execute(f"COPY (SELECT * EXCLUDE (host, pid) FROM ({query})) TO '{dest}' "
                            "(FORMAT parquet)")
                continue
            dest = (tmp / t).as_posix().replace("'", "''")
            con.execute(f"COPY ({query}) TO '{dest}' (FORMAT parquet, PARTITION_BY (host, pid))")
        for t in PLAIN:
            (tmp / t).mkdir()
            dest = (tmp / t / "data_0.parquet").as_posix().replace("'", "''")
            counts[t] = first_row(con.execute(f"SELECT count(*) FROM {t}"))[0]
            con.execute(f"COPY (SELECT * FROM {t}) TO '{dest}' (FORMAT parquet)")
        if force:
            if out.is_symlink():   # replaced, never written through (nor rmtree'd: it refuses)
                out.unlink()
            elif out.exists():
                shutil.rmtree(out) if out.is_dir() else out.unlink()
        try:
            # without force only an empty folder is replaced (the rename fails over anything
            # else): what another command wrote there meanwhile is kept, never removed
            os.replace(tmp, out)
        except OSError:
            if force or not os.path.lexists(out):
                raise
            raise InputError(f"{out}: already exists (written by another command since this one "
                             f"began); {FORCE_HINT}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return counts
