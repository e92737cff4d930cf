"""Bulk ingest through the Writer vs a naive per-row INSERT, in the same run; bytes on disk.

    python bench/ingest.py [--rows 10000000] [--batch 1000000] [--naive-rows 20000]

Kernel rows come from cuptiprof.synthetic (generated before timing). The Writer's ingest is
timed with DuckDB limited to one thread (`SET threads=1`, the Writer's own setting) and again
with one DuckDB thread per core; each includes the final close (checkpoint). Bytes per kernel row = file size / rows.
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from cuptiprof.store.writer import RunInfo, Writer
from cuptiprof.synthetic import synthetic_batches


def kernel_batches(rows: int, batch: int) -> list[pa.Table]:
    steps = max(1, rows // 100_000)
    tables = [b["kernels"] for b in synthetic_batches(steps=steps, kernels_per_step=rows // steps,
                                                      api=False, spikes=0) if "kernels" in b]
    big = pa.concat_tables(tables)
    return [big.slice(i, batch) for i in range(0, big.num_rows, batch)]


def bulk(path: Path, batches: list[pa.Table], threads: int | None) -> tuple[float, float]:
    """(wall s, CPU s of this process) of appending every batch and closing."""
    w = Writer(path, RunInfo(source="synthetic"), mode="overwrite")
    if threads:
        w.execute(f"SET threads={threads}")
    t, c = time.perf_counter(), time.process_time()
    for b in batches:
        w.append({"kernels": b})
    w.close()
    return time.perf_counter() - t, time.process_time() - c


def naive(path: Path, table: pa.Table) -> float:
    """What a simple profiler does: one INSERT per record (in one transaction, to be fair)."""
    w = Writer(path, RunInfo(source="synthetic"), mode="overwrite")
    w.con.execute("SET threads=1")
    rows = table.to_pylist()
    cols = ["correlation_id", "start_ns", "end_ns", "step", "range_id"]
    sql = (f"INSERT INTO kernel_rows (lane_id, config_id, {', '.join(cols)}) "
           f"VALUES (1, 1, {', '.join('?' * len(cols))})")
    t = time.perf_counter()
    w.con.execute("BEGIN")
    for r in rows:
        w.con.execute(sql, [r[c] for c in cols])
    w.con.execute("COMMIT")
    el = time.perf_counter() - t
    w.close()
    return el


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=1_000_000, help="rows per append (one commit each)")
    ap.add_argument("--naive-rows", type=int, default=20_000)
    ap.add_argument("--dir", default=None, help="where to write the files (default: a temp dir)")
    a = ap.parse_args()
    d = Path(a.dir or tempfile.mkdtemp(prefix="cuptiprof-bench-"))
    t = time.perf_counter()
    batches = kernel_batches(a.rows, a.batch)
    gen = time.perf_counter() - t
    n = sum(b.num_rows for b in batches)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
          f"duckdb {duckdb.__version__}, load average {os.getloadavg()[0]:.1f}")
    print(f"generated {n:,} kernel rows in {gen:.1f} s (numpy)")
    path = d / "bulk.duckdb"
    el1, cpu1 = bulk(path, batches, threads=1)
    size = path.stat().st_size
    print(f"bulk, DuckDB threads=1: {n / el1 / 1e6:.2f} M rows/s wall, {n / cpu1 / 1e6:.2f} M rows/s "
          f"CPU ({el1:.1f} s, batches of {a.batch:,} rows)")
    print(f"bytes on disk per kernel row: {size / n:.1f} ({size / 1e6:.0f} MB)")
    small = [b for big in batches for b in (big.slice(i, 100_000) for i in range(0, big.num_rows, 100_000))]
    el3, _ = bulk(path, small, threads=1)
    print(f"bulk, DuckDB threads=1, batches of 100,000 rows: {n / el3 / 1e6:.2f} M rows/s")
    cores = os.cpu_count() or 1
    el2, _ = bulk(path, batches, threads=cores)
    print(f"bulk, DuckDB threads={cores} (the Writer's own setting is 1): "
          f"{n / el2 / 1e6:.2f} M rows/s")
    k = min(a.naive_rows, batches[0].num_rows)
    el_n = naive(d / "naive.duckdb", batches[0].slice(0, k))
    print(f"naive per-row INSERT, threads=1: {k / el_n / 1e3:.1f} k rows/s ({k:,} rows); "
          f"bulk is {(n / el1) / (k / el_n):.0f}x faster")
    for p in d.glob("*.duckdb*"):
        p.unlink()


if __name__ == "__main__":
    main()
