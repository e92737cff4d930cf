"""`cuptiprof diff BASE NEW --fail-above PCT`: a regression gate for CI.

Exit 0: nothing got slower by more than PCT beyond the step-to-step noise; 1: regressions
(listed); 2: a usage error (bad threshold, same file twice, no recorded steps, different
schema versions, CPU op times of a run without a GPU against or merged with GPU work), so a CI job can
tell a regression from a misuse.
"""
from __future__ import annotations

import sys

from cuptiprof.analyse.families import BY
from cuptiprof.commands import FORMAT_HELP, counted, input_file
from cuptiprof.analyse.diff import MAX_MIN_MS, MAX_PCT, MAX_SIGMAS, NOISE_RULE, diff, parse_number
from cuptiprof.outputs import say, silence
from cuptiprof.render.table import FORMATS, clean, md_escape, render, write_json

_SHOW = ("item_type", "item", "base_ms", "new_ms", "delta_ms", "delta_pct", "allowed_ms", "status")


def register(sub) -> None:
    p = sub.add_parser("diff", help="fail (exit 1) when NEW is slower than BASE beyond the noise",
                       description="Compare NEW against BASE per step, per kind and per op. " + NOISE_RULE
                       + ". Exit 0: no regression; 1: regressions; 2: usage error or bad input.")
    p.add_argument("base", metavar="BASE.duckdb", type=input_file,
                   help="the cuptiprof file to compare against")
    p.add_argument("new", metavar="NEW.duckdb", type=input_file,
                   help="the cuptiprof file that may have regressed")
    p.add_argument("--fail-above", required=True, metavar="PCT",
                   help="allowed slowdown in percent on top of the noise (e.g. 5 or 5%%; 0 to "
                        f"{MAX_PCT:.12g})")
    p.add_argument("--min-ms", default="0", metavar="X",
                   help="ignore slowdowns smaller than X ms per step (e.g. 0.5 or 0.5ms; default 0; "
                        f"at most {MAX_MIN_MS:.12g}, an hour)")
    p.add_argument("--sigmas", default="3", metavar="K",
                   help="noise band in robust standard deviations of the per-step times (default 3; 0 to "
                        f"{MAX_SIGMAS:.12g}: a wider band passes any regression as noise)")
    p.add_argument("--by", choices=BY, default="op",
                   help="op key: exact name (default), family, range or region (see compare --help)")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help=f"{FORMAT_HELP}; csv is one table, the regressions (every item with "
                        "--all), its note: lines on stderr; json holds the verdict, the "
                        "settings, the notes and every item")
    p.add_argument("--all", action="store_true", help="list every item, not only the regressions")
    p.set_defaults(func=run)


def run(args) -> int:
    pct = parse_number(args.fail_above, "--fail-above", unit="%", most=MAX_PCT)
    _hint_fraction(args.fail_above, pct)
    min_ms = parse_number(args.min_ms, "--min-ms", unit="ms", most=MAX_MIN_MS)
    sigmas = parse_number(args.sigmas, "--sigmas", most=MAX_SIGMAS)
    res = diff(args.base, args.new, pct, min_ms=min_ms, sigmas=sigmas, by=args.by)
    reader_gone = False
    try:
        _write(res, args, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        # `cuptiprof diff ... | head`: the reader went away, but the verdict stands; exit 0 here
        # would pass a CI gate (under pipefail) that found regressions
        silence(sys.stdout)
        reader_gone = True
    if res.failed and (reader_gone or args.format in ("table", "markdown")):
        say(f"cuptiprof diff: {counted(len(res.regressions), 'regression')}")
    return 1 if res.failed else 0


def _hint_fraction(text: str, pct: float) -> None:
    """--fail-above 0.05 is 0.05%, though often meant as 5%: the meaning stays, and a line in
    the CI log says how 5% is written."""
    if 0 < pct < 1 and not str(text).strip().endswith("%"):
        say(f"cuptiprof diff: note: --fail-above {text} is {text}% (a percentage, not a "
              f"fraction); for {pct * 100:g}% write --fail-above {pct * 100:g}")


def _write(res, args, out) -> None:
    if args.format == "json":
        write_json({"base": str(res.base), "new": str(res.new), "fail_above_pct": res.fail_above_pct,
                    "min_ms": res.min_ms, "sigmas": res.sigmas, "by": res.by, "rule": NOISE_RULE,
                    "steps": {"base": res.steps[0], "new": res.steps[1]},
                    "regressed": res.failed, "regressions": res.regressions, "notes": res.notes,
                    "items": res.items.to_pylist()}, out)
        return
    rows = res.items if args.all else res.items.filter(
        [s == "regression" for s in res.items.column("status").to_pylist()])
    rows = rows.select([c for c in _SHOW])
    if args.format == "csv":
        # the rows are data; what qualifies them goes beside, on stderr, and first: a reader
        # that went away (`| head`) must not take the notes with it
        for n in res.notes:
            say(f"cuptiprof diff: {clean(n)}")
        render(rows, "csv", out=out)
        return
    head = (f"cuptiprof diff: BASE {res.base} ({_steps(res.steps[0])}) -> NEW {res.new} ({_steps(res.steps[1])}); "
            f"fail above {res.fail_above_pct:g}% + {res.sigmas:g} robust sigmas of step noise"
            + (f", ignoring < {res.min_ms:g} ms" if res.min_ms else ""))
    # the GPU names in the notes come from the files: a line break or a terminal escape in
    # them is stripped as in a table
    head, notes = clean(head), [clean(n) for n in res.notes]
    if args.format == "markdown":   # the paths are the user's text: shown as written
        head, notes = md_escape(head), [md_escape(n) for n in notes]
    out.write(head + "\n" + "".join(f"{n}\n" for n in notes) + "\n")
    if res.failed or args.all:
        title = "regressions" if not args.all else "all items"
        render(rows, args.format, out=out, title=f"{title} (ms per step, median over steps)")
    if not res.failed:
        out.write("no regression\n")


def _steps(n: int) -> str:
    return f"{n} step{'s' if n != 1 else ''}"
