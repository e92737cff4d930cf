"""`cuptiprof report` / `sql` / `schema` through a real process: output, and every bad input ends
as one line on stderr, a non-zero status, no traceback, and the file untouched."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from cuptiprof.collect.errors import SubscriberConflict
from cuptiprof.render.table import render
from cuptiprof.synthetic import write_synthetic

ROOT = Path(__file__).resolve().parents[1]
# `python -m cuptiprof` and what the `cuptiprof` console script runs (cuptiprof.cli:main).
ENTRY_POINTS = {
    "module": [sys.executable, "-m", "cuptiprof"],
    "script": [sys.executable, "-c", "import sys; from cuptiprof.cli import main; sys.exit(main())"],
}
if shutil.which("cuptiprof"):
    ENTRY_POINTS["installed"] = [shutil.which("cuptiprof")]


def cli(*args, entry="module", cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([*ENTRY_POINTS[entry], *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.parent.glob(path.name + "*")):  # the file and any .wal next to it
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def run_file(tmp_path_factory) -> Path:
    return write_synthetic(tmp_path_factory.mktemp("cli") / "run.duckdb", steps=4,
                           kernels_per_step=80, seed=3, devices=2, n_names=30, label="cli")


def test_report_summary_table(run_file):
    r = cli("report", run_file)
    assert r.returncode == 0, r.stderr
    for title in ("overview:", "ops:", "kinds:", "steps:", "step_spread:"):
        assert title in r.stdout
    assert "\x1b[" not in r.stdout  # piped: plain text, no terminal escapes


def test_report_summary_of_many_steps_shows_a_few_and_counts_the_rest(tmp_path):
    # a decode loop of thousands of steps printed one summary line per step and device
    from cuptiprof.commands.report import SUMMARY_STEP_ROWS
    f = write_synthetic(tmp_path / "loop.duckdb", steps=SUMMARY_STEP_ROWS + 7, kernels_per_step=12,
                        seed=1, devices=1, n_names=5, api=False)
    r = cli("report", f)
    assert r.returncode == 0, r.stderr
    steps = r.stdout.split("\nsteps:", 1)[1].split("\nstep_spread:", 1)[0]
    rows = [ln for ln in steps.splitlines()[3:] if ln.strip() and not ln.startswith("...")]
    assert len(rows) == SUMMARY_STEP_ROWS
    assert f"... 7 more rows: `cuptiprof report {f} --by step` prints every step" in steps
    r = cli("report", f, "--by", "step", "--format", "csv")   # asked for: every step
    assert len(r.stdout.strip().splitlines()) == 1 + SUMMARY_STEP_ROWS + 7
    r = cli("report", f, "--format", "json")   # machine-read: whole
    assert len(json.loads(r.stdout)["reports"]["steps"]) == SUMMARY_STEP_ROWS + 7
    # --top cuts a summary's steps shorter still: the rest are counted all the same
    r = cli("report", f, "--top", "3")
    steps = r.stdout.split("\nsteps:", 1)[1].split("\nstep_spread:", 1)[0]
    assert len([ln for ln in steps.splitlines()[3:] if ln.strip() and not ln.startswith("...")]) == 3
    assert f"... {SUMMARY_STEP_ROWS + 4} more rows: `cuptiprof report {f} --by step`" in steps


def test_report_markdown_summary_is_headed_and_cuts_its_steps_as_the_table_does(tmp_path, capsys):
    """A summary in markdown reads as the table one: the file and scope first, the steps cut at
    SUMMARY_STEP_ROWS and the rest counted; a summary of few steps counts nothing."""
    from cuptiprof.cli import main
    from cuptiprof.commands.report import SUMMARY_STEP_ROWS
    f = write_synthetic(tmp_path / "md.duckdb", steps=SUMMARY_STEP_ROWS + 3, kernels_per_step=6,
                        seed=2, devices=1, n_names=4, api=False)
    assert main(["report", str(f), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cuptiprof report: ") and "md.duckdb" in out.splitlines()[0]
    steps = out.split("### steps:", 1)[1].split("### step_spread:", 1)[0]
    # the heading row and the rows shown (the |---| line begins otherwise)
    assert len([ln for ln in steps.splitlines() if ln.startswith("| ")]) == 1 + SUMMARY_STEP_ROWS
    assert "... 3 more rows: `cuptiprof report" in steps
    few = write_synthetic(tmp_path / "few.duckdb", steps=3, kernels_per_step=6, devices=1, api=False)
    for fmt in ("table", "markdown"):
        assert main(["report", str(few), "--format", fmt]) == 0
        assert "more rows" not in capsys.readouterr().out


def test_report_markdown_summary_shows_its_path_as_written(tmp_path, capsys):
    """The heading of a summary in markdown names the file: its path reads as written, not as
    a tag or emphasis, as compare's and diff's headings do."""
    markdown_it = pytest.importorskip("markdown_it")
    import html as html_mod
    import re

    from cuptiprof.cli import main
    f = write_synthetic(tmp_path / "x_<b>y_*z*.duckdb", steps=3, kernels_per_step=6, devices=1,
                        api=False)
    assert main(["report", str(f), "--format", "markdown"]) == 0
    page = markdown_it.MarkdownIt("commonmark").enable("table").render(capsys.readouterr().out)
    first = page.split("</p>", 1)[0]
    assert "<b>" not in first and "<em>" not in first
    assert f"cuptiprof report: {f}" in html_mod.unescape(re.sub(r"<[^>]+>", "", first))


def test_report_summary_counts_a_single_step_row_left_out(run_file, capsys):
    """--top one short of the steps report: that one row is counted, not printed nor lost."""
    import cuptiprof
    from cuptiprof.cli import main
    with cuptiprof.open(run_file) as prof:
        n = len(prof.report("steps").fetchall())
    assert main(["report", str(run_file), "--format", "markdown", "--top", str(n - 1)]) == 0
    steps = capsys.readouterr().out.split("### steps:", 1)[1].split("### step_spread:", 1)[0]
    assert len([ln for ln in steps.splitlines() if ln.startswith("| ")]) == 1 + n - 1
    assert "... 1 more row: `cuptiprof report" in steps


def test_report_summary_leaves_out_the_ranges_of_a_program_without_any(tmp_path, capsys):
    """A program that opened no range of its own gets no empty ranges table in its summary."""
    from cuptiprof.cli import main
    f = write_synthetic(tmp_path / "bare.duckdb", steps=3, kernels_per_step=6, devices=1)
    assert main(["report", str(f)]) == 0
    assert "\nranges: " in capsys.readouterr().out
    with duckdb.connect(str(f)) as con:
        con.execute("DELETE FROM range_rows")
    for fmt in ("table", "markdown"):
        assert main(["report", str(f), "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "ranges: " not in out.replace("step_ranges", "") and "kinds: " in out
    # asked for by name, the empty breakdown is shown: its title says what it would hold
    assert main(["report", str(f), "--by", "range"]) == 0
    assert capsys.readouterr().out.startswith("ranges: ")



def test_report_summary_shows_quality_only_where_it_has_rows(tmp_path, capsys):
    """A file whose data misses nothing gets no empty quality table in its summary; one that
    misses something (here a memcpy after the last step) gets it."""
    from cuptiprof.cli import main
    f = write_synthetic(tmp_path / "q.duckdb", steps=3, kernels_per_step=6, devices=1)
    assert main(["report", str(f)]) == 0
    assert "\nquality: " in capsys.readouterr().out
    with duckdb.connect(str(f)) as con:
        con.execute("DELETE FROM data_quality")
    for fmt in ("table", "markdown"):
        assert main(["report", str(f), "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "quality: " not in out and "step_spread: " in out
    assert main(["report", str(f), "--by", "quality"]) == 0   # asked for: shown, empty
    assert capsys.readouterr().out.startswith("quality: ")


def test_quality_details_are_shown_whole_in_a_table(tmp_path, capsys):
    """A quality row's detail is the sentence that says what the data misses and where it is
    still found: a table shows it whole (the last column), not cut at a name's 70 characters
    as the summary and --by quality cut it before."""
    from cuptiprof.cli import main
    f = write_synthetic(tmp_path / "q.duckdb", steps=3, kernels_per_step=6, devices=1)
    detail = ("705 kernel rows in rank0.json.gz were launched outside every ProfilerStep (or by "
              "no recorded API call); they have no step")
    with duckdb.connect(str(f)) as con:
        con.execute("DELETE FROM data_quality")
        con.execute("INSERT INTO data_quality (run_id, pid, check_name, subject, count, detail) "
                    "SELECT run_id, 1, 'unclaimed_records', 'kernel', 705, ? FROM runs", [detail])
    for args in ([], ["--by", "quality"]):
        assert main(["report", str(f), *args]) == 0
        out = capsys.readouterr().out
        assert detail in out, out
    # names in other tables are still cut to fit
    assert main(["report", str(f), "--by", "overview"]) == 0


def test_report_summary_cuts_its_steps_where_the_help_says(tmp_path):
    """`report --help` promises a summary's steps cut at "the first N rows": a summary shows N."""
    import re
    n = int(re.search(r"the first (\d+)\s+rows", " ".join(cli("report", "--help").stdout.split()))[1])
    f = write_synthetic(tmp_path / "loop.duckdb", steps=n + 2, kernels_per_step=4, seed=1,
                        devices=1, n_names=3, api=False)
    r = cli("report", f)
    steps = r.stdout.split("\nsteps:", 1)[1].split("\nstep_spread:", 1)[0]
    assert len([ln for ln in steps.splitlines()[3:] if ln.strip() and not ln.startswith("...")]) == n
    assert "... 2 more rows" in steps

def test_long_names_that_share_their_start_stay_apart_in_a_table():
    # CUTLASS / Triton kernels and module paths often share far more than the 70 characters a
    # table cell shows: cut at the end, every row read the same
    import pyarrow as pa
    from cuptiprof.render.table import render
    stem = ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, "
            "int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmma")
    names = [stem + f"<{k}, cute::C<{t}> >, Epilogue<variant_{v}> >(Params)"
             for k, t, v in [(2, 64, 1), (2, 64, 10), (2, 128, 1), (3, 64, 1)]]
    names += [names[0], "short_kernel"]   # the same name twice stays the same
    out = io.StringIO()
    render(pa.table({"name": names, "ms": [1.0] * len(names)}), "table", out=out, max_width=70)
    cells = [ln[:70].rstrip() for ln in out.getvalue().splitlines()[2:] if ln.strip()]
    assert len(cells) == 6 and all(len(c) <= 70 for c in cells)
    assert len(set(cells[:4])) == 4 and cells[4] == cells[0] and cells[5] == "short_kernel"
    assert all(c.startswith("void cutlass::device_ke\u2026") for c in cells[:4])   # its head, then where it parts


def test_two_names_that_share_their_start_are_cut_apart_and_marked_cut_at_both_ends():
    import pyarrow as pa
    from cuptiprof.render.table import render
    stem = "x" * 80
    out = io.StringIO()
    render(pa.table({"name": [stem + "_alpha_kernel_end", stem + "_beta_kernel_end", "y" * 10]}),
           "table", out=out, max_width=30)
    # the head, then a little of what they share before where they part, each cut at its end too
    assert out.getvalue().splitlines()[2:5] == ["x" * 10 + "\u2026" + "x" * 7 + "_alpha_kern\u2026",
                                                "x" * 10 + "\u2026" + "x" * 7 + "_beta_kerne\u2026",
                                                "y" * 10]


def test_a_name_as_long_as_a_cell_is_shown_whole():
    import pyarrow as pa
    out = io.StringIO()
    render(pa.table({"name": ["a" * 10, "b" * 11]}), "table", out=out, max_width=10)
    assert out.getvalue().splitlines()[2:4] == ["a" * 10, "b" * 9 + "\u2026"]


def test_a_plain_table_hides_keys_of_one_value_and_right_aligns_numbers():
    import pyarrow as pa
    out = io.StringIO()
    render(pa.table({"run_id": [1, 1], "pid": [7, 8], "name": ["a", "bbb"], "ms": [1.5, 10.25]}),
           "table", out=out, title="ops")
    assert out.getvalue() == ("ops\npid  name      ms\n---  ----  ------\n  7  a      1.500\n"
                              "  8  bbb   10.250\n\n")
    out = io.StringIO()
    render(pa.table({"name": pa.array([], pa.string())}), "table", out=out)
    assert out.getvalue() == "name\n----\n(no rows)\n\n"


def test_a_plain_table_lines_up_names_of_wide_and_combining_characters():
    # a range named in Chinese, an emoji, an accent written as a combining mark, a zero-width
    # joiner: each takes the terminal columns it shows in, not one per character
    import pyarrow as pa
    out = io.StringIO()
    render(pa.table({"range": ["注意力", "🙂x", "e\u0301", "a\u200db", "ascii"],
                     "ms": [1.5, 2.5, 3.5, 4.5, 5.5]}), "table", out=out)
    assert out.getvalue() == ("range      ms\n------  -----\n注意力  1.500\n🙂x     2.500\n"
                              "e\u0301       3.500\na\u200db      4.500\nascii   5.500\n\n")


def test_a_long_name_is_cut_at_its_end_and_a_line_break_in_a_name_is_a_space():
    import pyarrow as pa
    out = io.StringIO()
    render(pa.table({"name": ["abcdefghijklmnopqrstuvwxyz", "x\ny\tz"]}), "table", out=out,
           max_width=10)
    assert out.getvalue() == "name\n----------\nabcdefghi\u2026\nx y z\n\n"


def test_markdown_and_csv_cells_read_back_as_the_names_written():
    # `gemm<float>` is an HTML tag to CommonMark, `*` emphasis, `|` a new cell; a lone "\r" a
    # line end to CSV readers
    import pyarrow as pa
    names = ["gemm<float, 4>*x|y", "a\rb"]
    out = io.StringIO()
    render(pa.table({"name": names}), "markdown", out=out)
    assert "| gemm\\<float, 4\\>\\*x\\|y |" in out.getvalue().splitlines()
    out = io.StringIO()
    render(pa.table({"name": names}), "csv", out=out)
    assert [r[0] for r in csv.reader(io.StringIO(out.getvalue(), newline=""))] == ["name", *names]


@pytest.mark.parametrize("value, shown", [
    (100.0, "100.0"), (99.99, "99.990"), (1234.56, "1,234.6"), (1.0, "1.000"), (0.5, "0.5"),
    (0.000123456, "0.0001235"), (-250.0, "-250.0"), (0.0, "0"), (float("nan"), ""), (None, ""),
    (7, "7"), (True, "True"), (68340276, "68340276"), (-(10**13), "-10000000000000"),
])
def test_numbers_in_tables_keep_their_digits_by_size(value, shown):
    from cuptiprof.render.table import fmt_value
    assert fmt_value(value) == shown


@pytest.mark.parametrize("by,first_col", [("op", "name"), ("step", "run_id"), ("device", "run_id"),
                                          ("kind", "kind"), ("stream", "run_id")])
def test_report_by_csv(run_file, by, first_col):
    r = cli("report", run_file, "--by", by, "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0][0] == first_col and len(rows) > 1


def test_report_top_steps_and_json(run_file):
    r = cli("report", run_file, "--by", "op", "--top", "3", "--format", "json")
    assert r.returncode == 0, r.stderr
    ops = json.loads(r.stdout)
    assert len(ops) == 3 and ops[0]["total_ms"] >= ops[1]["total_ms"] >= ops[2]["total_ms"]
    r = cli("report", run_file, "--by", "step", "--steps", "2:3", "--format", "json")
    assert sorted({row["step"] for row in json.loads(r.stdout)}) == [2, 3]
    r = cli("report", run_file, "--format", "json")
    doc = json.loads(r.stdout)
    assert set(doc["reports"]) >= {"ops", "steps", "kinds"} and doc["scope"] == "all recorded steps"


def test_report_top_leaves_the_kinds_whole(run_file, capsys):
    """--help: kinds (as overview and quality) are always shown whole, whatever --top says."""
    from cuptiprof.cli import main
    assert main(["report", str(run_file), "--by", "kind", "--format", "csv"]) == 0
    whole = capsys.readouterr().out
    assert len(whole.splitlines()) > 2
    assert main(["report", str(run_file), "--by", "kind", "--format", "csv", "--top", "1"]) == 0
    assert capsys.readouterr().out == whole


def test_report_by_range_shows_15_ranges_unless_top_says_otherwise(tmp_path, capsys):
    """--help: 15 rows by default for ops, ranges, streams and outliers."""
    from cuptiprof.cli import main
    f = write_synthetic(tmp_path / "blocks.duckdb", steps=2, kernels_per_step=40, devices=1,
                        n_names=30, blocks=20)
    for extra, rows in (([], 15), (["--top", "18"], 18)):
        assert main(["report", str(f), "--by", "range", "--format", "json", *extra]) == 0
        assert len(json.loads(capsys.readouterr().out)) == rows


def test_a_report_cut_at_its_default_length_says_how_many_rows_it_left_out(tmp_path):
    """ops, ranges, streams and outliers stop at 15 rows unless --top is given: the table says
    how many more there are and the command that prints them; CSV and JSON stay data alone
    and say it on stderr."""
    f = write_synthetic(tmp_path / "many.duckdb", steps=2, kernels_per_step=60, devices=1,
                        n_names=40)
    n = len(json.loads(cli("report", f, "--by", "op", "--format", "json", "--top", "1000").stdout))
    assert n > 15
    r = cli("report", f, "--by", "op")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    hint = f"... {n - 15} more rows: `cuptiprof report {f} --by ops --top {n}` shows every one"
    assert hint in r.stdout.splitlines(), r.stdout[-400:]
    whole = cli("report", f, "--by", "ops", "--top", str(n))
    assert "more row" not in whole.stdout and len(whole.stdout.splitlines()) > n
    r = cli("report", f, "--by", "op", "--format", "csv")
    assert len(list(csv.reader(io.StringIO(r.stdout)))) == 16 and "more row" not in r.stdout
    assert r.stderr == f"cuptiprof: note: ops: the first 15 of {n} rows; --top {n} gives every one\n"
    r = cli("report", f, "--by", "op", "--format", "csv", "--top", "15")
    assert len(list(csv.reader(io.StringIO(r.stdout)))) == 16 and r.stderr == ""
    r = cli("report", f, "--format", "json")
    assert len(json.loads(r.stdout)["reports"]["ops"]) == 15
    assert f"ops: the first 15 of {n} rows" in r.stderr, r.stderr
    r = cli("report", f)   # the summary: the ops table counts the rest too
    assert f"... {n - 15} more rows: `cuptiprof report {f} --top {n}` shows every one" in r.stdout


def test_a_report_cut_by_an_explicit_top_says_how_many_rows_it_left_out(tmp_path, capsys):
    """--top 3 cuts the ops and ranges tables (alone or in a summary) as the default length
    does: the rows left out are counted in the same words, or the table reads as complete."""
    from cuptiprof.cli import main
    f = write_synthetic(tmp_path / "top.duckdb", steps=2, kernels_per_step=40, devices=1,
                        n_names=30, blocks=20)
    import cuptiprof
    with cuptiprof.open(f) as prof:
        n_ops, n_ranges = len(prof.report("ops").fetchall()), len(prof.report("ranges").fetchall())
    assert n_ops > 3 and n_ranges > 3
    for by, n in (("ops", n_ops), ("ranges", n_ranges)):
        assert main(["report", str(f), "--by", by, "--top", "3"]) == 0
        out = capsys.readouterr().out
        assert f"... {n - 3} more rows: `cuptiprof report {f} --by {by} --top {n}` shows every one" \
            in out.splitlines(), out[-400:]
    assert main(["report", str(f), "--top", "3"]) == 0   # the summary
    out = capsys.readouterr().out
    ops = out.split("\nops:", 1)[1].split("\nranges:", 1)[0]
    ranges = out.split("\nranges:", 1)[1].split("\nkinds:", 1)[0]
    assert f"... {n_ops - 3} more rows: `cuptiprof report {f} --top {n_ops}` shows every one" in ops
    assert f"... {n_ranges - 3} more rows: `cuptiprof report {f} --top {n_ranges}` shows every one" in ranges
    # a --top that leaves nothing out says nothing
    assert main(["report", str(f), "--by", "ops", "--top", str(n_ops)]) == 0
    assert "more row" not in capsys.readouterr().out


def test_the_command_a_cut_report_names_keeps_its_steps(tmp_path, capsys):
    """A report of some steps, cut at its default length, names the command that shows every
    row of those steps: with its --steps, as the count it gives is of them (without, the command
    printed the rows of every step); a path with a space is quoted to paste as one argument."""
    import shlex

    from cuptiprof.cli import main
    f = write_synthetic(tmp_path / "my run.duckdb", steps=4, kernels_per_step=60, devices=1,
                        n_names=40, seed=2)
    assert main(["report", str(f), "--by", "op", "--steps", "1:2", "--format", "json", "--top", "1000"]) == 0
    n = len(json.loads(capsys.readouterr().out))
    assert n > 15
    path = shlex.quote(str(f))
    for args, hint in ((["--by", "op"], f"`cuptiprof report {path} --by ops --steps 1:2 --top {n}`"),
                       ([], f"`cuptiprof report {path} --steps 1:2 --top {n}`")):
        assert main(["report", str(f), *args, "--steps", "1:2"]) == 0
        out = capsys.readouterr().out
        assert f"... {n - 15} more rows: {hint} shows every one" in out, out[-600:]
        assert main(shlex.split(hint.strip("`"))[1:]) == 0   # as pasted: every row, none left out
        assert "more row" not in capsys.readouterr().out.split("\nranges:")[0]
    # an open or negative range is given as written
    assert main(["report", str(f), "--by", "op", "--steps=-5:"]) == 0
    assert f"`cuptiprof report {path} --by ops --steps=-5: --top" in capsys.readouterr().out


def test_steps_that_begin_with_a_minus_are_taken_as_written(run_file):
    """Step numbers may be negative: `--steps -2:1` failed with argparse's "expected one
    argument", and only `--steps=-2:1` worked."""
    every = cli("report", run_file, "--by", "step", "--format", "json")
    want = sorted({row["step"] for row in json.loads(every.stdout) if row["step"] <= 1})
    assert want
    for spec in (["--steps", "-2:1"], ["--steps=-2:1"]):
        r = cli("report", run_file, "--by", "step", *spec, "--format", "json")
        assert r.returncode == 0, r.stderr
        assert sorted({row["step"] for row in json.loads(r.stdout)}) == want


def test_steps_that_begin_with_a_minus_after_an_abbreviated_option(run_file, capsys):
    """argparse takes `--step 2:3` for `--steps 2:3`: `--step -2:1` failed with "expected one
    argument" where `--steps -2:1` worked."""
    from cuptiprof.cli import main
    assert main(["report", str(run_file), "--by", "step", "--format", "csv", "--steps", "-2:1"]) == 0
    want = capsys.readouterr().out
    assert len(want.splitlines()) > 1
    for opt in ("--step", "--ste"):
        assert main(["report", str(run_file), "--by", "step", "--format", "csv", opt, "-2:1"]) == 0
        assert capsys.readouterr().out == want


def test_a_profiled_commands_arguments_are_left_as_typed():
    """Only cuptiprof's own --steps is glued to its negative value: the arguments of the command
    `run` profiles (with `--` or without) and anything after `--` reach it as typed."""
    from cuptiprof.cli import _glue_negative_steps
    for argv in (["run", "python", "gen.py", "--steps", "-3:-1"],
                 ["run", "-o", "x.duckdb", "--", "python", "gen.py", "--steps", "-3:"],
                 ["sql", "f.duckdb", "--", "--steps", "-3:-1"]):
        assert _glue_negative_steps(argv) == argv
    assert _glue_negative_steps(["report", "f.duckdb", "--steps", "-3:-1", "--", "--steps", "-1:"]) == [
        "report", "f.duckdb", "--steps=-3:-1", "--", "--steps", "-1:"]


def test_report_markdown(run_file):
    r = cli("report", run_file, "--by", "kind", "--format", "markdown")
    assert r.returncode == 0
    assert r.stdout.startswith("### kinds:") and "| kind | detail |" in r.stdout


def test_report_list_documents_every_report():
    r = cli("report", "--list")
    assert r.returncode == 0
    for name in ("ops", "steps", "step_spread", "devices", "kinds", "streams", "outliers", "ranges",
                 "step_ranges"):
        assert any(line.startswith(name + " ") for line in r.stdout.splitlines()), name
    out = cli("report", "--list", "--format", "json").stdout
    assert out.endswith("]\n")   # a whole last line, as every other output ends
    listed = json.loads(out)
    ops = next(x for x in listed if x["report"] == "ops")
    assert "ALL GPU time" in ops["columns"]["pct_gpu_time"] and "BUSY" in ops["columns"]["pct_busy"]
    # --format csv and markdown are honoured, as for every report
    rows = list(csv.reader(io.StringIO(cli("report", "--list", "--format", "csv").stdout)))
    assert rows[0] == ["report", "--by", "description"] and ["ops", "op"] in [r[:2] for r in rows]
    md = cli("report", "--list", "--format", "markdown").stdout.splitlines()
    assert md[0] == "| report | --by | description |" and any(l.startswith("| step\\_spread | spread | ") for l in md)


def test_every_report_documents_exactly_its_columns_and_every_by_names_a_report(run_file):
    import cuptiprof
    from cuptiprof.analyse import catalog
    assert set(catalog.BY.values()) == set(catalog.report_names())
    with cuptiprof.open(run_file) as prof:
        for name in catalog.report_names():
            doc = catalog.report_doc(name)
            assert doc.summary and doc.name == name
            # --list's column descriptions are the report's own columns, in order
            assert [c for c, _ in doc.columns] == prof.report(name).columns, name
            assert all(text for _, text in doc.columns), name
        for by, name in catalog.BY.items():
            assert prof.report(by).columns == prof.report(name).columns


def test_report_list_with_a_file_is_refused_not_ignored(run_file):
    """`report FILE --list` printed the catalogue and read nothing: a user asked for the file."""
    r = cli("report", run_file, "--list", "--by", "op")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "cuptiprof: error: --list lists the reports and reads no file; leave out FILE, --by, or --list"]


@pytest.mark.parametrize("extra,named", [(["--top", "3"], "--top"), (["--steps", "1:2"], "--steps"),
                                         (["--html", "page.html"], "--html")])
def test_report_list_with_an_option_that_reads_a_file_is_refused(tmp_path, capsys, extra, named):
    """`report --list --top 3` (or --steps, --html) printed the catalogue and dropped the option:
    it is refused, naming it, and nothing is written."""
    from cuptiprof.cli import main
    assert main(["report", "--list", *[a.replace("page.html", str(tmp_path / a)) for a in extra]]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("cuptiprof: error: --list lists the reports")
    assert f"leave out {named}, or --list" in err and not (tmp_path / "page.html").exists()


def test_sql_query_and_schema(run_file):
    r = cli("sql", run_file, "SELECT count(*) AS n FROM kernels WHERE step = 2", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "n" and int(r.stdout.splitlines()[1]) > 0
    # A table shows every column the query selected, one-valued keys included.
    r = cli("sql", run_file, "SELECT run_id, pid, device_id, count(*) AS n FROM kernels "
            "WHERE device_id = 0 GROUP BY ALL")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:4] == ["run_id", "pid", "device_id", "n"]
    r = cli("schema")
    assert r.returncode == 0 and "CREATE TABLE kernel_rows" in r.stdout
    # Two statements: only the last one's rows would show, so it is refused in one line.
    r = cli("sql", run_file, "SELECT 1 AS a; SELECT 2 AS b")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.strip() == (
        "cuptiprof: error: the query holds 2 statements; give one at a time (only the last "
        "one's rows would show)"), r.stderr
    for blank in ("", "  ", "-- a comment only"):   # not "returned no rows": there was no query
        r = cli("sql", run_file, blank)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith(
            "cuptiprof: error: the query is empty; give one SQL query"), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = cli("sql", run_file, "SELECT 'x;y' AS s;")   # a semicolon in a string, one at the end
    assert r.returncode == 0 and "x;y" in r.stdout, r.stderr


def test_sql_columns_of_the_same_name_all_show_under_duckdbs_names(run_file):
    """JSON keeps one value per key: `SELECT 1 AS a, 2 AS a` lost a column there. Every format
    names them as DuckDB's own COPY does (a, a_1; a name already taken gets another suffix)."""
    q = "SELECT 1 AS a, 2 AS a, 3 AS a_1, 4 AS A"
    names = ["a", "a_1", "a_1_1", "A_2"]
    r = cli("sql", run_file, q, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [dict(zip(names, (1, 2, 3, 4)))]
    r = cli("sql", run_file, q, "--format", "csv")
    assert r.stdout.splitlines() == [",".join(names), "1,2,3,4"]
    assert cli("sql", run_file, q).stdout.split()[:4] == names
    assert cli("sql", run_file, q, "--format", "markdown").stdout.startswith(
        "| " + " | ".join(n.replace("_", "\\_") for n in names) + " |")


def test_sql_json_writes_nan_and_infinity_as_null(run_file):
    """json writes NaN and Infinity, which no JSON parser other than Python's takes: --format
    json is read by jq, JavaScript, DuckDB's read_json."""
    def strict(text):
        def refuse(name):
            raise ValueError(f"not JSON: {name}")
        return json.loads(text, parse_constant=refuse)
    r = cli("sql", run_file, "SELECT 'nan'::DOUBLE AS x, 'inf'::DOUBLE AS y, "
            "[1.5, -'inf'::DOUBLE] AS l, {'z': 'nan'::DOUBLE} AS s", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert strict(r.stdout) == [{"x": None, "y": None, "l": [1.5, None], "s": {"z": None}}]


def test_csv_writes_nan_and_infinity_as_an_empty_field_like_null(run_file):
    """CSV has no NULL: an empty field is one, as the table shows it and JSON writes null. A
    NaN or an infinity (a ratio to 0 in compare or diff) is written the same, not as `nan`."""
    r = cli("sql", run_file, "SELECT 'nan'::DOUBLE AS x, 'inf'::DOUBLE AS y, -'inf'::DOUBLE AS z, "
            "NULL::DOUBLE AS n, 1.5 AS f", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["x,y,z,n,f", ",,,,1.5"]
    import pyarrow as pa   # compare and diff render Arrow tables
    buf = io.StringIO()
    render(pa.table({"key": list("abcd"), "ratio": [float("nan"), -float("inf"), None, 2.0]}),
           "csv", out=buf)
    assert buf.getvalue().splitlines() == ["key,ratio", "a,", "b,", "c,", "d,2.0"]


def test_sql_shows_blobs_intervals_and_nested_values_as_duckdb_prints_them(run_file):
    """Python's reprs are no way to show a query's values: `b'ab'`, `3 days, 0:00:00`, an
    interval of a month as 30 days, `[datetime.date(2024, 1, 2)]`. Each shows as DuckDB's own
    text, in every format; JSON keeps the lists and structs that hold neither a BLOB nor an
    INTERVAL as JSON arrays and objects."""
    q = (r"SELECT 'ab'::BLOB AS b, '\xFF'::BLOB AS b, INTERVAL 3 DAY AS i, INTERVAL 1 MONTH AS m, "
         r"['a'::BLOB] AS lb, [DATE '2024-01-02'] AS ld")
    want = ["ab", "\\xFF", "3 days", "1 month", "[a]", "[2024-01-02]"]
    names = ["b", "b_1", "i", "m", "lb", "ld"]
    r = cli("sql", run_file, q, "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert list(csv.reader(io.StringIO(r.stdout))) == [names, want]
    r = cli("sql", run_file, q, "--format", "markdown")
    assert r.stdout.splitlines()[2] == "| " + " | ".join(
        ["ab", "\\\\xFF", "3 days", "1 month", "\\[a\\]", "\\[2024-01-02\\]"]) + " |", r.stdout
    r = cli("sql", run_file, q)
    assert r.stdout.splitlines()[2].split("  ") == want, r.stdout
    r = cli("sql", run_file, q + ", {'d': INTERVAL 2 DAY} AS s, [1, 2] AS l", "--format", "json")
    got = want[:5] + [["2024-01-02"], "{'d': 2 days}", [1, 2]]
    assert json.loads(r.stdout) == [dict(zip(names + ["s", "l"], got))]



def test_sql_shows_nanosecond_times_to_the_nanosecond(run_file):
    """make_timestamp_ns(start_ns) (the file's clocks are nanoseconds) came back as a Python
    datetime, which holds microseconds: its last three digits were dropped, in every format
    (make_timestamp_ns(1) read 1970-01-01 00:00:00). They show as DuckDB prints them."""
    q = ("SELECT make_timestamp_ns(1700000000123456789) AS t, TIME_NS '12:00:00.123456789' AS tn, "
         "make_timestamp_ns(start_ns) = make_timestamp_ns(start_ns + 1) AS same "
         "FROM (FROM kernels LIMIT 1)")
    want = ["2023-11-14 22:13:20.123456789", "12:00:00.123456789", "False"]
    r = cli("sql", run_file, q, "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert list(csv.reader(io.StringIO(r.stdout))) == [["t", "tn", "same"], want]
    r = cli("sql", run_file, q)
    assert r.stdout.splitlines()[2].split("  ") == want, r.stdout
    r = cli("sql", run_file, q, "--format", "json")
    assert json.loads(r.stdout) == [{"t": want[0], "tn": want[1], "same": False}]

def test_sql_json_of_every_kind_of_value_is_json(run_file):
    """Dates, times, decimals, UUIDs, 128-bit integers, lists, structs and maps: valid JSON
    that a strict parser reads, with the values the query returned."""
    def strict(text):
        def refuse(name):
            raise ValueError(f"not JSON: {name}")
        return json.loads(text, parse_constant=refuse)
    q = ("SELECT DATE '2024-01-02' AS d, TIMESTAMP '2024-01-02 03:04:05.5' AS ts, "
         "TIMESTAMPTZ '2024-01-02 03:04:05+00' AS tz, TIME '03:04:05' AS t, "
         "1.25::DECIMAL(10, 2) AS dec, '12345678-1234-5678-1234-567812345678'::UUID AS u, "
         "170141183460469231731687303715884105727::HUGEINT AS h, [1, NULL] AS l, "
         "{'x': 1, 'y': 'a'} AS s, MAP {'k': [1]} AS m, MAP {1: 'a'} AS mi, '0101'::BIT AS bits")
    r = cli("sql", run_file, q, "--format", "json")
    assert r.returncode == 0, r.stderr
    got = strict(r.stdout)
    assert got == [{"d": "2024-01-02", "ts": "2024-01-02T03:04:05.500000", "tz": got[0]["tz"],
                    "t": "03:04:05", "dec": 1.25, "u": "12345678-1234-5678-1234-567812345678",
                    "h": 2**127 - 1, "l": [1, None], "s": {"x": 1, "y": "a"},
                    "m": {"k": [1]}, "mi": {"1": "a"}, "bits": "0101"}]
    assert got[0]["tz"].startswith("2024-01-02")



def test_sql_json_of_maps_keyed_by_decimals_dates_or_infinities_is_json(run_file):
    """histogram() of rounded times (DECIMAL), of timestamps or of a ratio to 0 returns a MAP
    with keys json refuses (a Decimal, a datetime, inf): a traceback, where each key is now
    its text, as the values are."""
    q = ("SELECT histogram(round((end_ns - start_ns) / 1000.0, 1)) FILTER (WHERE false) AS e, "
         "histogram(1.5) AS dec, histogram(TIMESTAMP '2024-01-02 03:04:05') AS ts, "
         "histogram(DATE '2024-01-02') AS d, histogram('inf'::DOUBLE) AS inf, "
         "MAP {DATE '2024-01-02': ['nan'::DOUBLE]} AS m FROM (FROM kernels LIMIT 1)")
    r = cli("sql", run_file, q, "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    got, = json.loads(r.stdout, parse_constant=lambda name: pytest.fail(f"not JSON: {name}"))
    assert got == {"e": None, "dec": {"1.5": 1}, "ts": {"2024-01-02T03:04:05": 1},
                   "d": {"2024-01-02": 1}, "inf": {"inf": 1}, "m": {"2024-01-02": [None]}}

def test_sql_column_names_are_shown_as_text_in_tables_and_markdown(run_file):
    """A query names its columns: in a terminal table a name's control characters are dropped
    (as a cell's are), in Markdown its `|` is escaped, or the header has a column too many."""
    q = 'SELECT 1 AS "a|b", 2 AS "x\x1b[31m\nred"'
    r = cli("sql", run_file, q, "--format", "markdown")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == ["| a\\|b | x\\[31m red |", "|---|---|"]
    r = cli("sql", run_file, q)
    assert r.returncode == 0 and "\x1b" not in r.stdout, r.stderr
    assert r.stdout.splitlines()[0].split("  ") == ["a|b", "x[31m red"]


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_both_entry_points_report(run_file, entry):
    r = cli("report", run_file, "--by", "device", "--format", "csv", entry=entry)
    assert r.returncode == 0, r.stderr
    assert "NVIDIA H200" in r.stdout


# -- bad input ------------------------------------------------------------------------------

def _bad_files(tmp: Path, good: Path) -> dict[str, Path]:
    files = {}
    files["missing"] = tmp / "nope.duckdb"
    p = tmp / "text.duckdb"
    p.write_text("this is not a database\n" * 50)
    files["not_duckdb"] = p
    p = tmp / "empty.duckdb"
    p.write_bytes(b"")
    files["empty"] = p
    data = good.read_bytes()
    p = tmp / "truncated.duckdb"
    p.write_bytes(data[: 3 * 4096 + 100])
    files["truncated"] = p
    p = tmp / "corrupt.duckdb"
    buf = bytearray(data)
    for off in range(8192, len(buf), 4096):  # trash every block after the headers
        buf[off + 8: off + 264] = os.urandom(256)
    p.write_bytes(bytes(buf))
    files["corrupt"] = p
    p = tmp / "foreign.duckdb"
    con = duckdb.connect(str(p))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    files["foreign"] = p
    p = tmp / "newer.duckdb"
    shutil.copyfile(good, p)
    con = duckdb.connect(str(p))
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.close()
    files["newer"] = p
    return files


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, run_file):
    return _bad_files(tmp_path_factory.mktemp("bad"), run_file)


EXPECT = {  # a word the one line must contain
    "missing": "no such file", "not_duckdb": "not a DuckDB file", "empty": "not a DuckDB file",
    "truncated": "", "corrupt": "", "foreign": "not a cuptiprof file (no schema version); give one that cuptiprof run, import or merge "
    "wrote", "newer": "newer cuptiprof",
}


@pytest.mark.parametrize("kind", ["json", "json.gz", "sqlite", "bom.json", "spaced.json",
                                  "spaced.json.gz", "bom.spaced.json", "spaced.bom.json"])
def test_a_trace_given_for_a_cuptiprof_file_says_to_import_it(run_file, tmp_path, kind):
    """A torch.profiler trace or an nsys export handed to report/compare/merge is not just
    'not a DuckDB file': the line says how to read it, however much whitespace the JSON text
    begins with (the import reads past all of it)."""
    import gzip
    import sqlite3

    trace = tmp_path / f"t.{kind}"
    doc = b'{"traceEvents": []}'
    if "spaced" in kind:
        doc = b" \r\n\t" * 5000 + doc
    if kind.startswith("bom."):   # a UTF-8 byte-order mark, as the import reads past
        doc = b"\xef\xbb\xbf\n" + doc
    if kind == "spaced.bom.json":   # one out of place: the import says where the JSON breaks
        doc = b"  \xef\xbb\xbf" + doc
    if kind == "sqlite":
        sqlite3.connect(trace).execute("CREATE TABLE StringIds (id INTEGER)").connection.commit()
    else:
        trace.write_bytes(gzip.compress(doc) if kind.endswith("gz") else doc)
    for args in (["report", trace], ["sql", trace, "SELECT 1"], ["compare", run_file, trace],
                 ["merge", run_file, trace, "-o", tmp_path / "m.duckdb"]):
        r = cli(*args)
        line = _one_clean_line(r)
        assert r.returncode == 2 and line == (
            f"cuptiprof: error: {trace}: looks like a trace or an Nsight Systems export, not a "
            f"cuptiprof file; import it first: cuptiprof import {trace} -o OUT.duckdb"), args
    assert not (tmp_path / "m.duckdb").exists()


def _one_clean_line(r):
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("cuptiprof: error:"), lines[0]
    assert "Traceback" not in r.stderr
    return lines[0]


@pytest.mark.parametrize("case", sorted(EXPECT))
@pytest.mark.parametrize("command", ["report", "sql"])
def test_bad_file_one_line(bad_files, case, command):
    path = bad_files[case]
    before = digest(path) if path.exists() else None
    args = ["report", path] if command == "report" else ["sql", path, "SELECT 1"]
    r = cli(*args)
    line = _one_clean_line(r)
    assert r.returncode == 2, line
    assert EXPECT[case] in line
    assert str(path.name) in line
    assert (digest(path) if path.exists() else None) == before


@pytest.mark.parametrize("args,word", [
    (["report", "{f}", "--by", "nonsense"], "invalid choice"),
    (["report", "{f}", "--steps", "5:2"], "before the start"),
    (["report", "{f}", "--steps", "a:b"], "expected A:B"),
    (["report", "{f}", "--steps", "90:99"], "no recorded step"),
    (["report", "{f}", "--top", "0"], "at least 1"),
    (["report", "{f}", "--by", "op", "--top", "999999999999999999999"], "at most"),
    (["report", "{f}", "--by", "op", "--top", "\u0663"], "'\u0663' is not a whole number in ASCII digits"),
    (["report"], "needs a FILE"),
    (["report", "{f}", "--html", "{f}"], "is also an input; write to another path"),
    (["sql", "{f}", "SELECT 1", "--steps", "5:2"], "--steps '5:2': the end (2) is before the start (5)"),
    # int() reads every script's digits: Arabic-Indic 3:5 was steps 3 to 5, full-width 3 step 3
    (["report", "{f}", "--steps", "\u0663:\u0665"], "--steps '\u0663:\u0665': step numbers are "
     "written in ASCII digits (0-9); '\u0663' is not one"),
    (["report", "{f}", "--steps", "\uff13"], "ASCII digits (0-9); '\uff13' is not one"),
    (["sql", "{f}", "SELECT 1", "--steps", "1:\u0663"], "ASCII digits (0-9); '\u0663' is not one"),
    (["export", "{f}", "--chrome", "{f}.json", "--steps", "\u0661"], "ASCII digits (0-9)"),
    # a number longer than int() converts was a traceback
    (["report", "{f}", "--steps", "9" * 5000], "a step number of 5000 digits is no step"),
    (["sql", "{f}", "SELECT 1", "--steps", "1:" + "9" * 30], "a step number of 30 digits is no step"),
    # beyond the step columns: said as such, not "no recorded step"
    (["report", "{f}", "--steps", "2147483648"], "--steps '2147483648': step 2147483648 is no step "
     "(steps are numbered from -2147483648 to 2147483647)"),
    (["sql", "{f}", "SELEC count(*) FROM kernels"], "SQL error"),
    (["sql", "{f}", "SELECT no_such_column FROM kernels"], "SQL error"),
    # a placeholder: DuckDB's words say values were not given, not that none can be
    (["sql", "{f}", "SELECT * FROM kernels WHERE step = ?"], "Values were not provided for the "
     "following parameters: 1; cuptiprof sql takes no parameter values: write the value into "
     "the query in place of ? or $1"),
    (["sql", "{f}", "DELETE FROM kernel_rows"], "read-only"),
    (["sql", "{f}", "DROP TABLE strings"], "read-only"),
    (["sql", "{f}", "UPDATE runs SET label = 'x'"], "read-only"),
    (["sql", "{f}", "CREATE TABLE x AS SELECT 1"], "read-only"),
    (["sql", "{f}", "ATTACH '/tmp/cuptiprof-other.duckdb' AS o"], ""),
])
def test_bad_arguments_one_line(run_file, args, word):
    before = digest(run_file)
    r = cli(*[a.replace("{f}", str(run_file)) for a in args])
    line = _one_clean_line(r)
    assert word in line
    assert digest(run_file) == before


@pytest.mark.parametrize("query", ["SELECT * FROM read_csv('{other}')", "SELECT * FROM read_text('{other}')",
                                   "SELECT file FROM glob('{dir}/*')"])
def test_sql_reads_no_other_file(run_file, tmp_path, capsys, query):
    """A plain SELECT over another file (read_csv, read_text, glob) is refused as read-only
    writes are: `cuptiprof sql` reads the one file it is given."""
    from cuptiprof.cli import main
    other = tmp_path / "secret.csv"
    other.write_text("token\nhunter2\n")
    assert main(["sql", str(run_file), query.format(other=other, dir=tmp_path), "--format", "csv"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"cuptiprof: error: {run_file}: cuptiprof sql is read-only (no writes, no other files or "
        "extensions); nothing was modified"]


@pytest.mark.parametrize("query", ["CREATE TEMP TABLE t AS SELECT 1", "CREATE TEMP MACRO m(x) AS x",
                                   "PREPARE p AS SELECT 1"])
def test_sql_refuses_statements_that_are_no_query_even_where_the_file_would_allow_them(
        run_file, capsys, query):
    """A temporary table, a macro or a prepared statement leaves the file as it is, yet is no
    query: refused as every other statement that is not one, and nothing printed."""
    from cuptiprof.cli import main
    assert main(["sql", str(run_file), query, "--format", "csv"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"cuptiprof: error: {run_file}: cuptiprof sql is read-only (no writes, no other files or "
        "extensions); nothing was modified"]


@pytest.mark.parametrize("query", ["PRAGMA enable_progress_bar", "PRAGMA threads=1",
                                   "CALL enable_logging()"])
def test_sql_refuses_a_setting_changed_through_a_pragma_or_call_as_read_only(run_file, capsys, query):
    """PRAGMA and CALL pass as queries; one that changes a setting meets the locked
    configuration, said as the read-only line, not as an SQL error of the user's."""
    from cuptiprof.cli import main
    assert main(["sql", str(run_file), query]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"cuptiprof: error: {run_file}: cuptiprof sql is read-only (no writes, no other files or "
        "extensions); nothing was modified"]


@pytest.mark.parametrize("query", ["BEGIN TRANSACTION", "START TRANSACTION READ ONLY", "CHECKPOINT",
                                   "FORCE CHECKPOINT", "CALL checkpoint()"])
def test_sql_refuses_a_statement_that_returns_nothing(run_file, capsys, query):
    """A transaction or a checkpoint returns no rows, as any statement that is no query: one
    line and exit 2, not an empty 'Success' table as if a query had found nothing."""
    from cuptiprof.cli import main
    before = digest(run_file)
    assert main(["sql", str(run_file), query]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "cuptiprof: error: the statement returned no rows to show (only queries are allowed)"]
    assert digest(run_file) == before


def test_sql_shows_a_query_that_finds_nothing_as_an_empty_table(run_file, capsys):
    from cuptiprof.cli import main
    assert main(["sql", str(run_file), "SELECT true AS Success WHERE false", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["Success"]


def test_sql_with_a_wrong_name_says_what_to_use(run_file):
    """A misspelt table or column: the one line keeps DuckDB's suggestion (a line of its own in
    DuckDB's message) and says where the names are documented."""
    line = _one_clean_line(cli("sql", run_file, "SELECT * FROM kernel"))
    assert 'Did you mean "kernels"' in line and "`cuptiprof schema`" in line
    line = _one_clean_line(cli("sql", run_file, "SELECT demangle FROM kernels"))
    assert '"demangled"' in line and "`cuptiprof schema`" in line



def test_sql_error_quoting_a_line_separator_is_said_whole(run_file, capsys):
    """DuckDB's message quotes the value or name the query got wrong; one holding a Unicode
    line or paragraph separator (or a form feed) was cut there, as str.splitlines() takes it
    for a line break: 'Table with name ker', no suggestion, no word of what went wrong."""
    from cuptiprof.cli import main
    for query, says in (('SELECT * FROM "ker\u2029nels"',
                         'Table with name ker nels does not exist! (Did you mean "kernels"?)'),
                        ("SELECT 'x\u2028y'::INT", "Could not convert string 'x y' to INT32"),
                        ("SELECT 'x\x0cy'::INT", "Could not convert string 'x y' to INT32")):
        capsys.readouterr()
        assert main(["sql", str(run_file), query]) == 2
        line, = capsys.readouterr().err.split("\n")[:-1]
        assert says in line, line


def test_sql_with_a_syntax_error_says_what_a_query_looks_like(run_file, capsys):
    """A typo in the SQL itself (a DuckDB parser error) got DuckDB's words alone, where a
    wrong name gets where the names are documented."""
    from cuptiprof.cli import main
    for query, says in (("SELEC 1", 'syntax error at or near "SELEC"'),
                        ("SELECT 'abc", "unterminated string literal")):
        capsys.readouterr()
        assert main(["sql", str(run_file), query]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"cuptiprof: error: SQL error: Parser Error: {says}; a query is DuckDB SQL, e.g. "
            '"SELECT name, count(*) FROM kernels GROUP BY 1"; `cuptiprof schema` documents every '
            "table and column, `cuptiprof sql --help` the sel_* views"]


@pytest.mark.parametrize("args,command", [
    (["sql", "", "SELECT 1"], "sql"), (["report", ""], "report"),
    (["export", "", "--chrome", "t.json"], "export"), (["compare", "a.duckdb", ""], "compare"),
    (["merge", "", "a.duckdb", "-o", "m.duckdb"], "merge"), (["diff", "", "b.duckdb"], "diff"),
    (["import", "", "-o", "m.duckdb"], "import"),
])
def test_an_empty_file_name_is_named_as_empty(tmp_path, args, command):
    """`cuptiprof sql "$FILE" ...` with FILE unset: said as an empty name, not as `.` (the
    current directory) being no cuptiprof file."""
    r = cli(*args, cwd=tmp_path)
    line = _one_clean_line(r)
    assert r.returncode == 2 and "the file name is empty" in line and ".:" not in line, line
    assert line.endswith(f"(see cuptiprof {command} --help)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,word,command", [
    (["report", "x.duckdb", "--by", "nonsense"], "invalid choice", "report"),
    (["diff", "a.duckdb", "b.duckdb"], "--fail-above", "diff"),
    (["run", "--warmup", "x", "--", "true"], "is not a whole number", "run"),
    (["import", "t.json"], "-o/--output", "import"),
    (["merge", "a.duckdb"], "-o/--output", "merge"),
    (["report", "x.duckdb", "--top", "1000000001"], "at most 1000000000", "report"),
    (["compare", "a.duckdb", "b.duckdb", "--top", "0"], "at least 1", "compare"),
    (["--bogus"], "unrecognized arguments", ""),
    # given before the subcommand, it went to cuptiprof itself: its help lists what that takes
    (["--bogus", "report", "x.duckdb"], "unrecognized arguments: --bogus", ""),
    (["--bogus", "sql", "x.duckdb", "SELECT 1", "--bogus"], "unrecognized arguments: --bogus", ""),
    # an option the subcommand does not have: its own help lists what it has
    (["report", "x.duckdb", "--bogus"], "unrecognized arguments: --bogus", "report"),
    (["sql", "x.duckdb", "SELECT 1", "--bogus"], "unrecognized arguments: --bogus", "sql"),
    (["diff", "a.duckdb", "b.duckdb", "--fail-above", "5", "--bogus", "1"],
     "unrecognized arguments: --bogus 1", "diff"),
])
def test_argument_mistakes_begin_like_every_other_error(tmp_path, args, word, command):
    """A mistake the argument parser finds reads as any other error does: one line begun
    `cuptiprof: error:`, naming the help to read, exit 2, nothing on stdout."""
    r = cli(*args, cwd=tmp_path)
    line = _one_clean_line(r)
    assert r.returncode == 2 and r.stdout == ""
    assert word in line
    assert line.endswith(f"(see cuptiprof{' ' + command if command else ''} --help)")


def test_no_command_prints_the_commands_on_stderr_and_exits_2(capsys):
    """`cuptiprof` alone: the usage with every command, on stderr (stdout stays empty for a
    script that reads it), an error line, and exit 2 as for any other usage mistake."""
    from cuptiprof.cli import COMMANDS, main
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: cuptiprof")
    assert all(name in err for name in COMMANDS)
    # and ends as every usage mistake does: one error line saying what to do
    assert err.splitlines()[-1].startswith("cuptiprof: error: no command given")


@pytest.mark.parametrize("args", [["report", "{f}"], ["sql", "{f}", "SELECT * FROM kernels"],
                                  ["schema"]])
def test_a_reader_that_went_away_is_no_error(run_file, args):
    """`cuptiprof report FILE | head`: the reader closing the pipe ends the command quietly,
    exit 0, no traceback, no error line."""
    r, w = os.pipe()
    os.close(r)   # gone before the first byte: every write fails with EPIPE
    try:
        p = subprocess.run([*ENTRY_POINTS["module"], *(a.format(f=run_file) for a in args)],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        os.close(w)
    assert p.returncode == 0 and p.stderr == "", p.stderr[-500:]


@pytest.mark.parametrize("exc,code,line", [
    (PermissionError(13, "Permission denied", "out.duckdb"), 1,
     "cuptiprof: error: out.duckdb: Permission denied"),
    (OSError(28, "No space left on device"), 1, "cuptiprof: error: No space left on device"),
    (KeyboardInterrupt(), 130, "cuptiprof: interrupted"),
    # a Ctrl-C in a DuckDB statement (sql of a long query, merge): DuckDB raises this instead
    (RuntimeError("Query interrupted"), 130, "cuptiprof: interrupted"),
    (duckdb.IOException("Corrupt database file: block checksum mismatch"), 2,
     "cuptiprof: error: the file is damaged (Corrupt database file: block checksum mismatch); it "
     "cannot be read in full: record or import it again"),   # what to do, as on opening it
    (duckdb.IOException("Could not write file: No space left on device"), 1,
     "cuptiprof: error: cannot write: the disk is full (or a file-size limit was reached)"),
    # the file DuckDB names is the one the line names
    (duckdb.IOException('Could not write to file "/data/out.duckdb": No space left on device'), 1,
     "cuptiprof: error: /data/out.duckdb: cannot write: the disk is full"),
    # the environment cannot do what was asked (no GPU, CUPTI taken): 3, not a usage mistake
    (SubscriberConflict("CUPTI is held by another profiler"), 3,
     "cuptiprof: error: CUPTI is held by another profiler"),
])
def test_what_a_command_meets_ends_as_one_line_and_its_status(monkeypatch, capsys, exc, code, line):
    """An OS error, Ctrl-C, and a DuckDB storage error met mid-statement (a full disk: 1, a
    corrupt block: 2): one line on stderr and the status a script can tell apart."""
    from cuptiprof.cli import main
    from cuptiprof.commands import schema

    def meets(args):
        raise exc
    monkeypatch.setattr(schema, "run", meets)
    assert main(["schema"]) == code
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(line), err


def test_a_bug_in_a_command_is_not_passed_off_as_a_users_mistake(monkeypatch):
    """An exception that is neither cuptiprof's, nor the OS's, nor DuckDB's is a bug: it goes on
    with its traceback, not as one line that would read like a storage error."""
    from cuptiprof.cli import main
    from cuptiprof.commands import schema

    def meets(args):
        raise ValueError("a bug")
    monkeypatch.setattr(schema, "run", meets)
    with pytest.raises(ValueError, match="a bug"):
        main(["schema"])


def test_a_command_left_out_of_the_build_is_skipped_but_a_missing_library_is_not(monkeypatch):
    """A subcommand module this build lacks is left out of the parser; a library such a module
    needs that is missing is said as such, not hidden as an unknown command."""
    from cuptiprof.cli import build_parser
    monkeypatch.setitem(sys.modules, "cuptiprof.commands.schema", None)
    assert "schema" not in build_parser()._defaults["_commands"]
    monkeypatch.delitem(sys.modules, "cuptiprof.commands.sql", raising=False)
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(ModuleNotFoundError) as e:
        build_parser("sql")
    assert e.value.name == "duckdb"


def test_every_command_help_says_what_it_does_and_names_its_inputs():
    """Each `cuptiprof CMD --help` opens with a description, documents its positional
    arguments, spells the file it reads FILE as the others do, and offers the same formats."""
    from cuptiprof.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in COMMANDS:
        p = sub.choices[name]
        assert p.description, name
        for a in p._actions:
            if not a.option_strings and a.dest not in ("help", "cmd"):
                assert a.help and a.metavar, (name, a.dest)
                assert a.metavar != a.dest, (name, a.dest)   # FILE, not `file`
            if a.dest == "format":
                assert tuple(a.choices) == ("table", "csv", "json", "markdown"), name
            if a.dest == "steps":   # a count for run, step numbers elsewhere: each help says which
                if name == "run":
                    assert a.metavar == "N" and "a count" in a.help, a.help
                else:
                    assert a.metavar == "A:B" and "step numbers" in a.help, (name, a.help)


def test_unknown_report_name_from_the_api(run_file):
    import cuptiprof
    from cuptiprof.errors import UsageError

    with cuptiprof.open(run_file) as prof, pytest.raises(UsageError, match="unknown report 'nope'"):
        prof.report("nope")


def test_file_being_written_by_another_process(tmp_path):
    path = tmp_path / "busy.duckdb"
    code = ("import sys, time; from cuptiprof.store.writer import Writer, RunInfo; "
            "w = Writer(sys.argv[1], RunInfo(source='synthetic')); print('ready', flush=True); time.sleep(60)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "ready"
        r = cli("report", path)
        line = _one_clean_line(r)
        assert "another process" in line and str(holder.pid) in line
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("args", [["--help"], ["report", "{file}"], ["sql", "{file}",
                                                                     "SELECT count(*) FROM kernels"]])
def test_reading_commands_do_not_load_the_writers_libraries(run_file, args):
    """`--help`, `report` and `sql` read a file through DuckDB only: loading pyarrow and numpy
    (the writer's and the comparisons' engines) would add ~0.25 s to every call."""
    code = ("import sys; from cuptiprof.cli import main\n"
            "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('LOADED', sorted(m for m in ('pyarrow', 'numpy') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code, *(a.format(file=run_file) for a in args)],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "LOADED []" in r.stdout, r.stdout[-300:] + r.stderr[-300:]


def test_report_html_with_by_prints_that_breakdown_too(run_file, tmp_path):
    page = tmp_path / "q.html"
    r = cli("report", run_file, "--by", "step", "--format", "csv", "--html", page)
    assert r.returncode == 0, r.stderr
    assert page.read_text().startswith("<!DOCTYPE html>")
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0][:2] == ["run_id", "pid"] and "busy_ms" in rows[0] and len(rows) == 1 + 4 * 2
    # without --by only the page is written
    r = cli("report", run_file, "--html", page)
    assert r.returncode == 0 and r.stdout == "" and "wrote" in r.stderr
    assert "printed as well" in " ".join(cli("report", "--help").stdout.split())


def test_report_html_keeps_the_top_asked_for(run_file, tmp_path, capsys):
    """--top N with --html: the page's ops table holds N rows (15 without --top)."""
    from cuptiprof.cli import main

    def ops_rows(page):
        ops = page.read_text().split("<h2>Ops</h2>", 1)[1].split("</table>", 1)[0]
        return ops.split("<tbody>", 1)[1].count("<tr>")

    assert main(["report", str(run_file), "--html", str(tmp_path / "top2.html"), "--top", "2"]) == 0
    assert main(["report", str(run_file), "--html", str(tmp_path / "all.html")]) == 0
    capsys.readouterr()
    assert ops_rows(tmp_path / "top2.html") == 2 and ops_rows(tmp_path / "all.html") == 15


def test_report_csv_without_by_is_one_table_of_ops(run_file):
    """A CSV holds one table: without --by the summary's several tables would not load as one."""
    r = cli("report", run_file, "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0][:2] == ["name", "kind"]
    assert all(len(row) == len(rows[0]) for row in rows) and len(rows) > 1
    assert "one table: the ops report (--by picks another)" in r.stderr
    out = run_file.parent / "ops.csv"
    out.write_text(r.stdout)
    assert duckdb.sql(f"SELECT count(*) FROM read_csv('{out}')").fetchall() == [(len(rows) - 1,)]


def test_report_html_with_a_format_and_nothing_to_print_is_refused(run_file, tmp_path):
    """`--html page --format json` printed nothing in JSON: the format was silently dropped."""
    page = tmp_path / "f.html"
    r = cli("report", run_file, "--html", page, "--format", "json")
    assert r.returncode == 2 and r.stdout == "" and not page.exists()
    assert r.stderr.strip() == ("cuptiprof: error: --format json formats a printed breakdown and "
                                "--html prints none; add --by NAME to print one beside the page, "
                                "or leave out --format")
    r = cli("report", run_file, "--html", page, "--format", "table")   # the default, said aloud
    assert r.returncode == 0 and page.exists(), r.stderr


def test_report_by_takes_a_reports_name_too(tmp_path, capsys):
    """`--by devices` (the name --list shows) prints what `--by device` prints, as
    Profile.report() takes either; anything else is still refused with the choices."""
    from cuptiprof.cli import main
    db = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=10)
    assert main(["report", str(db), "--by", "device"]) == 0
    want = capsys.readouterr().out
    assert main(["report", str(db), "--by", "devices"]) == 0
    assert capsys.readouterr().out == want and want.startswith("devices:")
    assert main(["report", str(db), "--by", "step_spread"]) == 0
    assert capsys.readouterr().out.startswith("step_spread:")
    with pytest.raises(SystemExit):
        main(["report", str(db), "--by", "gpus"])
    assert "invalid choice: 'gpus'" in capsys.readouterr().err


_PEAK = ("import runpy, sys\n"
         "sys.argv = ['cuptiprof'] + sys.argv[1:]\n"
         "try:\n"
         "    runpy.run_module('cuptiprof', run_name='__main__')\n"
         "finally:\n"
         "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
         "    print('PEAK', int(hwm.split()[1]) // 1024, file=sys.stderr)\n")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM (Linux)")
def test_sql_writes_a_large_result_as_it_comes_not_held_whole(run_file):
    """A result of millions of rows (every kernel of a long run) as CSV, JSON or Markdown: the
    rows are written a batch at a time. Held whole, 600,000 rows took ~55 MB more as CSV and
    ~280 MB as JSON (Python objects per row); a file's whole kernels table killed the process."""
    n = 600_000
    peaks = {}
    for what, q in (("small", "SELECT 1 AS i"), ("large", f"SELECT i FROM range({n}) r(i)")):
        for fmt in ("csv", "json"):
            r = subprocess.run([sys.executable, "-c", _PEAK, "sql", str(run_file), q, "--format",
                                fmt], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
            assert r.returncode == 0, r.stderr
            lines = r.stdout.splitlines()
            if what == "large":   # every row is there, in order
                if fmt == "csv":
                    assert lines == ["i", *map(str, range(n))]
                else:
                    assert json.loads(r.stdout) == [{"i": i} for i in range(n)]
            peaks[what, fmt] = int(r.stderr.split("PEAK")[-1])
    for fmt in ("csv", "json"):
        assert peaks["large", fmt] - peaks["small", fmt] < 30, peaks


def test_sql_table_shows_its_first_rows_and_says_the_rest_are_left_out(run_file):
    """A terminal table is sized to every row it shows: it shows the first 10,000 and says on
    stderr how to get every row; a result that fits shows whole, without the note."""
    from cuptiprof.commands.sql import TABLE_ROWS
    r = cli("sql", run_file, f"SELECT i FROM range({TABLE_ROWS + 5}) r(i)")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.split()[2:]   # past the header and its rule
    assert rows == [str(i) for i in range(TABLE_ROWS)]
    assert f"the first {TABLE_ROWS:,} rows" in r.stderr and "--format csv" in r.stderr
    r = cli("sql", run_file, f"SELECT i FROM range({TABLE_ROWS}) r(i)")
    assert r.returncode == 0 and r.stdout.split()[2:] == [str(i) for i in range(TABLE_ROWS)]
    assert "note" not in r.stderr


@pytest.mark.parametrize("fmt", ["csv", "markdown", "json", "table"])
def test_sql_whose_rows_fail_as_they_are_made_prints_the_error_alone(run_file, capsys, fmt):
    """An error that arises as the result's rows are made (a cast DuckDB cannot do, error()),
    not as the query is read: the CSV header, or Markdown's, came out on stdout above the error
    line. The command prints the result whole or the error alone."""
    from cuptiprof.cli import main
    for query in ("SELECT 1::UUID", "SELECT 'x' AS a UNION ALL SELECT 'b'::INT::VARCHAR",
                  "SELECT i, CASE WHEN i = 2999 THEN error('boom') ELSE i END AS v FROM range(3000) t(i)"):
        capsys.readouterr()
        assert main(["sql", str(run_file), query, "--format", fmt]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and "SQL error" in err, (query, out, err)


def test_sql_explain_in_a_table_shows_each_plan_whole_line_by_line(run_file, capsys):
    """EXPLAIN's plan is one multi-line cell: the table joined its lines into one and cut it at
    70 characters. Each plan is shown whole, by its lines, under its key."""
    import cuptiprof
    from cuptiprof.cli import main
    query = "SELECT name, count(*) FROM kernels GROUP BY 1"
    with cuptiprof.open(run_file) as prof:
        (key, plan), = prof.sql(f"EXPLAIN {query}").fetchall()
    assert key == "physical_plan" and plan.count("\n") > 5
    capsys.readouterr()
    assert main(["sql", str(run_file), f"EXPLAIN {query}"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == ["physical_plan", *(ln.rstrip() for ln in plan.rstrip("\n").split("\n")), ""]
    assert "\u2026" not in out
    capsys.readouterr()
    assert main(["sql", str(run_file), f"EXPLAIN ANALYZE {query}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("analyzed_plan\n") and "Total Time:" in out and "\u2026" not in out
    assert len(out.splitlines()) > 10
