"""`cuptiprof diff BASE NEW --fail-above PCT`: did NEW get slower than BASE beyond the noise?

Items checked: the step's GPU window, every kind (kernel, memcpy per direction, memset, sync,
idle) and every op key (exact name by default). For each item and file the time per step is
the median over the recorded steps; the noise of a file is its median absolute deviation (MAD)
across steps, scaled to a standard deviation (1.4826 x MAD, exact for normal noise and robust
to an odd slow step). An item is a regression when

    new - base > base * PCT / 100 + SIGMAS * 1.4826 * sqrt(MAD_base^2 + MAD_new^2)

and new - base >= MIN_MS (default 0), and, unless SIGMAS is 0, NEW's median lies above the upper
quartile of BASE's steps. SIGMAS defaults to 3. The quartile test decides only where over half
the steps take the same time (a trace with microsecond timestamps; idle time with or without one
gap, as two streams race): the MAD is then 0, and the median of a second run of the same program
may land on the other common value, which BASE's own upper quarter of steps already holds.
'faster' is the mirror: base - new beyond the same allowance, base - new >= MIN_MS and, unless
SIGMAS is 0, NEW's median below the lower quartile of BASE's steps (a flip to the lower common
value is noise either way).
Items found only in NEW are listed as 'new' and items only in BASE as 'gone'; neither fails the
check by itself (a renamed kernel would otherwise count twice), but their time shows in the
step and kind totals. An op at 0 per step in BASE is 'new' too; the step window or a kind
(idle) rising from 0 beyond the allowance is a regression. A kind made of exactly one op key's
rows in both files (kind 'memcpy HtoD' and op 'Memcpy HtoD') regresses once, as that op: the
kind's row says 'duplicate'.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cuptiprof.analyse import catalog
from cuptiprof.errors import InputError, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

NOISE_RULE = ("regression: new - base > base * PCT/100 + SIGMAS * 1.4826 * sqrt(MAD_base^2 + MAD_new^2) "
              "and new - base >= MIN_MS and (SIGMAS = 0 or new > BASE's upper quartile of steps); times "
              "are medians over recorded steps of the time per step, MAD = median absolute deviation "
              "across steps")


# The largest value of each setting: beyond it no slowdown a run shows fails the gate.
MAX_PCT = 1000.0           # --fail-above: 11 times slower
MAX_MIN_MS = 3_600_000.0   # --min-ms: an hour per step
MAX_SIGMAS = 10.0          # --sigmas: 3 is usual; a wider band passes any regression as noise


def parse_number(text, option: str, *, unit: str | None = None,
                 most: float = math.inf) -> float:
    """'5', '5.0', '5%' (unit='%'), '5ms' (unit='ms') -> 5.0, from 0 to `most`; anything else
    is a usage error naming the option and what is wrong."""
    s = str(text).strip()
    if unit and s.endswith(unit):   # the unit the option is in, written out: --fail-above 5%
        s = s[:-len(unit)].strip()
    # 'inf' is a number, only not a usable one: in_range says it is infinite. ASCII digits only:
    # \d and float() read every script's (Arabic-Indic, full-width)
    if not re.fullmatch(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?inf(inity)?", s,
                        re.I):
        raise UsageError(f"{option} {text!r}: not a number in ASCII digits (expected e.g. {option} 5"
                         f"{f' or 5{unit}' if unit else ''})")
    return in_range(float(s), option, most, shown=text)


def in_range(v: float, option: str, most: float = math.inf, shown=None) -> float:
    """v when it lies from 0 to `most`; else a usage error saying what is wrong: not a number,
    negative, infinite ('inf') or too large ('1e400', which overflows to infinity, and any
    value above `most`): a huge or NaN setting would turn the gate off without a word."""
    what = f"{option} {str(v if shown is None else shown)!r}"
    if math.isnan(v):
        raise UsageError(f"{what}: not a number (expected e.g. {option} 5)")
    if v < 0:
        raise UsageError(f"{what}: must not be negative")
    if v > most or math.isinf(v):
        bound = f"at most {most:.12g}" if math.isfinite(most) else "expected a finite number"
        # digits written out and still infinite: a finite number beyond a float's range
        large = math.isfinite(v) or (shown is not None and any(c.isdigit() for c in str(shown)))
        raise UsageError(f"{what}: {'too large' if large else 'infinite'} ({bound}: a larger "
                         "value lets no slowdown fail the gate)")
    return v + 0.0   # -0 is 0: the CI log and the JSON say 0, not -0


@dataclass
class DiffResult:
    base: Path
    new: Path
    fail_above_pct: float
    min_ms: float
    sigmas: float
    by: str
    steps: tuple[int, int]
    items: pa.Table
    regressions: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # the comparison's legend notes

    @property
    def failed(self) -> bool:
        return bool(self.regressions)


def diff(base: str | os.PathLike, new: str | os.PathLike, fail_above_pct: float, *,
         min_ms: float = 0.0, sigmas: float = 3.0, by: str = "op") -> DiffResult:
    """Compare NEW against BASE; see the module docstring for the rule."""
    fail_above_pct = in_range(float(fail_above_pct), "fail_above_pct", MAX_PCT)
    min_ms = in_range(float(min_ms), "min_ms", MAX_MIN_MS)
    sigmas = in_range(float(sigmas), "sigmas", MAX_SIGMAS)
    from cuptiprof.analyse.compare import Comparison  # DuckDB and pyarrow: only when diffing
    with Comparison([base, new], by=by, require_steps=True, names=("BASE", "NEW")) as cmp:
        cpu = [r for r in cmp.runs if r.cpu_ops]
        if len(cpu) == 1:   # e.g. a CI machine that lost its GPU: a gate over CPU op times means nothing
            gpu = cmp.runs[1 - cpu[0].index]
            raise InputError(f"{cpu[0].path} holds CPU op times (recorded without a GPU) and {gpu.path} "
                             "GPU work: they cannot be compared; diff runs recorded the same way "
                             "(`cuptiprof doctor` tells why a machine records no GPU work)")
        for r in cmp.runs:
            if r.cpu_mixed:   # CPU op times summed with kernel times: a gate over them means nothing
                raise InputError(f"{r.path} holds both CPU op times (recorded without a GPU) and GPU work "
                                 "(a merge of both kinds of run): diff runs recorded the same way, "
                                 "each merged only with runs like it")
        sql = catalog.compare_sql("diff")
        items = cmp.con.sql(sql, params={"pct": float(fail_above_pct), "sigmas": float(sigmas),
                                         "min_ms": float(min_ms)}).to_arrow_table()
        steps = (cmp.runs[0].steps, cmp.runs[1].steps)
        notes = [n for n in cmp.legend() if n.startswith("note:")]
        old, new_ = cmp.runs
        if old.devices and new_.devices and old.devices != new_.devices:
            # a CI pool with mixed GPUs: the gate would fail or pass on the hardware, not the change
            notes.append(f"note: BASE ran on {old.devices} and NEW on {new_.devices}: a gate compares "
                         "runs on the same GPU (`cuptiprof compare --by family` compares GPUs)")
    regs = [r for r in items.to_pylist() if r["status"] == "regression"]
    return DiffResult(Path(base), Path(new), float(fail_above_pct), float(min_ms), float(sigmas), by,
                      steps, items, regs, notes)
