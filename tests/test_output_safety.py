"""Safety of what cuptiprof writes and prints: `sql` never modifies the file, names from traces
are escaped in every output format, and every command that writes a file honours the umask and
never writes through a pre-existing symbolic link."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
from pathlib import Path

import duckdb
import pytest

import hostile_corpus as H
from _run_helpers import cli

# A kernel name as hostile as a trace can carry: NUL, escape sequences, bell, bidi override,
# markup, quotes, a CSV separator, a newline, a Markdown pipe.
NASTY = "k\x00ern\x1b[31mel\x07\u202e<script>alert(1)</script>,\"q\";\n|x|&amp;"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
PY = sys.executable


@pytest.fixture(scope="module")
def nasty(tmp_path_factory) -> Path:
    """A cuptiprof file imported from a trace whose kernel is called NASTY."""
    from cuptiprof.interop.importing import import_traces

    d = tmp_path_factory.mktemp("nasty")
    src = d / "t.json"
    src.write_text(json.dumps(H.good_trace(kernel=NASTY)))
    out = d / "nasty.duckdb"
    import_traces([src], out)
    import_traces([src], d / "nasty2.duckdb")    # compare needs two different files
    return out


def other(path: Path) -> Path:
    return path.with_name("nasty2.duckdb")


def stored_name(path: Path) -> str:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT name FROM kernels").fetchone()[0]
    finally:
        con.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- sql is read-only ---------------------------------------------------------------------------
WRITES = ["DELETE FROM kernel_rows", "DROP TABLE meta", "UPDATE meta SET value = '99'",
          "INSERT INTO meta VALUES ('x', 'y')", "CREATE TABLE t AS SELECT 1",
          "ALTER TABLE meta ADD COLUMN z INT", "CREATE VIEW v AS SELECT 1",
          "SELECT 1; DELETE FROM kernel_rows", "BEGIN; DELETE FROM kernel_rows; COMMIT",
          "ATTACH 'other.duckdb' AS o; CREATE TABLE o.t AS SELECT 1",
          "COPY kernel_rows TO 'other.csv'", "EXPORT DATABASE 'other_dir'", "INSTALL httpfs",
          "SET enable_external_access = true"]


def test_sql_cannot_modify_the_file(nasty, tmp_path):
    before = digest(nasty)
    tasks = [(f"w{i}", ["sql", nasty, q]) for i, q in enumerate(WRITES)]
    tasks += [("checkpoint", ["sql", nasty, "CHECKPOINT"]), ("vacuum", ["sql", nasty, "VACUUM"])]
    res = H.cli_batch(tasks, tmp_path, timeout=60)
    for i, q in enumerate(WRITES):
        d = res[f"w{i}"]
        assert d["rc"] == 2, (q, d)
        lines = d["stderr"].strip().splitlines()
        assert len(lines) == 1 and "read-only" in lines[0], (q, d["stderr"])
    for name in ("checkpoint", "vacuum"):
        assert "Traceback" not in res[name]["stderr"]
    assert digest(nasty) == before
    assert not (tmp_path / "other.duckdb").exists()
    assert not (tmp_path / "other.csv").exists() and not (tmp_path / "other_dir").exists()
    assert stored_name(nasty) == NASTY


# -- names are escaped in every format ----------------------------------------------------------
def test_names_escaped_in_every_format(nasty, tmp_path):
    from cuptiprof.render.html import write_report  # noqa: F401 - the HTML writer must exist

    html = tmp_path / "r.html"
    chrome = tmp_path / "c.json"
    tasks = [(f, ["report", nasty, "--by", "op", "--format", f])
             for f in ("table", "csv", "json", "markdown")]
    tasks += [("summary_json", ["report", nasty, "--format", "json"]),
              ("sql_csv", ["sql", nasty, "SELECT name FROM kernels", "--format", "csv"]),
              ("sql_json", ["sql", nasty, "SELECT name FROM kernels", "--format", "json"]),
              ("sql_table", ["sql", nasty, "SELECT name FROM kernels"]),
              ("html", ["report", nasty, "--html", html]),
              ("chrome", ["export", nasty, "--chrome", chrome]),
              ("compare", ["compare", nasty, other(nasty)]),
              ("compare_csv", ["compare", nasty, other(nasty), "--format", "csv"])]
    res = H.cli_batch(tasks, tmp_path / "work", timeout=60)
    for name, d in res.items():
        assert d["rc"] == 0, (name, d["stderr"])
        assert "Traceback" not in d["stderr"]
    # terminal and Markdown: no control character, no bidi override, the pipe escaped
    for name in ("table", "markdown", "sql_table", "compare"):
        out = res[name]["stdout"]
        assert not CONTROL.search(out.replace("\n", "")), (name, repr(out[:400]))
        assert "alert(1)" in out                       # the visible part of the name is shown
    assert "\\|x\\|" in res["markdown"]["stdout"]
    # CSV: quoted so that it parses back to the same cells
    for name in ("csv", "sql_csv"):
        rows = list(csv.reader(io.StringIO(res[name]["stdout"].replace("\x00", "\\0"))))
        names = [r[0] for r in rows[1:] if r]
        assert NASTY.replace("\x00", "\\0") in names, (name, rows)
    # JSON: valid, and the name comes back exactly
    got = json.loads(res["json"]["stdout"])
    assert NASTY in [r["name"] for r in got]
    assert json.loads(res["sql_json"]["stdout"]) == [{"name": NASTY}]
    def values(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from values(v)
        elif isinstance(x, list):
            for v in x:
                yield from values(v)
        else:
            yield x

    assert NASTY in set(values(json.loads(res["summary_json"]["stdout"])))
    # HTML: no live markup from the name
    page = html.read_text()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x00" not in page and "\x1b" not in page
    # Chrome trace: valid JSON with the name intact
    events = json.loads(chrome.read_text())["traceEvents"]
    assert NASTY in [e.get("name") for e in events]


def test_terminal_table_on_a_tty_strips_control_characters(nasty):
    """The rich table path (stdout is a terminal) must strip them as well."""
    from cuptiprof.analyse.profile import open_profile
    from cuptiprof.render.table import render

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    with open_profile(nasty) as prof:
        render(prof.sql("SELECT name, 1 AS n FROM kernels"), "table", out=out, title=NASTY)
    text = out.getvalue()
    assert "kern[31mel" in text                  # shown, without its escape character
    assert "\x1b[31m" not in text                # rich's own styling escapes are fine, the name's not
    assert not CONTROL.search(text.replace("\n", "").replace("\x1b", "")), repr(text)


# -- umask and symbolic links for every command that writes ---------------------------------------
WRITERS = {
    # name: (argv with {o} for the output and {f} for a good input, output is a folder)
    "import": (["import", "{t}", "-o", "{o}"], False),
    "merge": (["merge", "{f}", "-o", "{o}"], False),
    "export_chrome": (["export", "{f}", "--chrome", "{o}"], False),
    "export_parquet": (["export", "{f}", "--parquet", "{o}"], True),
    "report_html": (["report", "{f}", "--html", "{o}"], False),
    "compare_html": (["compare", "{f}", "{g}", "--html", "{o}"], False),
    "run": (["run", "-o", "{o}", "--no-report", "--", PY, "-c", "pass"], False),
}
SUFFIX = {"import": ".duckdb", "merge": ".duckdb", "export_chrome": ".json",
          "export_parquet": "", "report_html": ".html", "compare_html": ".html", "run": ".duckdb"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, nasty):
    d = tmp_path_factory.mktemp("inputs")
    trace = d / "t.json"
    trace.write_text(json.dumps(H.good_trace()))
    return {"f": nasty, "g": other(nasty), "t": trace}


def _argv(name: str, out: Path, inputs: dict) -> list[str]:
    return [a.format(o=out, **inputs) for a in WRITERS[name][0]]


def test_outputs_follow_the_umask(tmp_path, inputs, mask=0o027):
    tasks = []
    for name in WRITERS:
        out = tmp_path / f"{name}{SUFFIX[name]}"
        tasks.append((name, _argv(name, out, inputs), {"umask": mask, "cwd": str(tmp_path)}))
    res = H.cli_batch(tasks, tmp_path / "work", timeout=120)
    for name, (argv, is_dir) in WRITERS.items():
        d = res[name]
        assert d["rc"] == 0, (name, d["stderr"])
        out = tmp_path / f"{name}{SUFFIX[name]}"
        want = (0o777 if is_dir else 0o666) & ~mask
        assert stat.S_IMODE(out.stat().st_mode) == want, (name, oct(out.stat().st_mode))
        if is_dir:
            for p in out.rglob("*"):
                full = 0o777 if p.is_dir() else 0o666
                assert stat.S_IMODE(p.stat().st_mode) == full & ~mask, (name, p)


@pytest.mark.parametrize("dangling", [False, True])
def test_outputs_never_write_through_a_symlink(tmp_path, inputs, dangling):
    """OUT is a symbolic link to a victim file (or to a path that does not exist yet): the
    command refuses with one line, or replaces the link itself; the victim is never written."""
    tasks = []
    victims = {}
    for name in WRITERS:
        victim = tmp_path / f"victim-{name}"
        if not dangling:
            victim.write_text("precious\n")
        link = tmp_path / f"{name}{SUFFIX[name]}"
        link.symlink_to(victim)
        victims[name] = (victim, link)
        argv = _argv(name, link, inputs)
        if name.startswith("export") or name in ("import", "merge"):
            argv.append("--force")       # even when asked to replace the output
        elif name == "run":
            argv.insert(1, "--force")    # before the command's `--`
        tasks.append((name, argv, {"cwd": str(tmp_path)}))
    res = H.cli_batch(tasks, tmp_path / "work", timeout=120)
    for name, (victim, link) in victims.items():
        d = res[name]
        assert "Traceback" not in d["stderr"], (name, d["stderr"])
        if dangling:
            assert not victim.exists(), f"{name} created the symlink's target"
        else:
            assert victim.read_text() == "precious\n", f"{name} wrote through the symlink"
        if d["rc"] != 0:
            lines = d["stderr"].strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("cuptiprof: error:"), (name, d["stderr"])
        else:
            assert not link.is_symlink(), f"{name} succeeded but left the link in place"


def test_outputs_never_replace_a_device_or_a_pipe(tmp_path, inputs):
    """OUT is a FIFO (as /dev/null is a device): renaming the output into place would leave a
    regular file where it was, so every command refuses it with one line, --force or not."""
    tasks, fifos = [], {}
    for name, (_, is_dir) in WRITERS.items():
        if is_dir:
            continue
        fifo = tmp_path / f"{name}{SUFFIX[name]}"
        os.mkfifo(fifo)
        fifos[name] = fifo
        argv = _argv(name, fifo, inputs)
        if name in ("import", "export_chrome", "merge"):
            argv.append("--force")
        elif name == "run":
            argv.insert(1, "--force")
        tasks.append((name, argv, {"cwd": str(tmp_path)}))
    res = H.cli_batch(tasks, tmp_path / "work", timeout=120)
    for name, fifo in fifos.items():
        d = res[name]
        assert d["rc"] == 2, (name, d["stderr"])
        lines = d["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cuptiprof: error:"), (name, d["stderr"])
        assert "not a regular file" in lines[0], (name, lines[0])
        assert stat.S_ISFIFO(fifo.lstat().st_mode), f"{name} replaced the FIFO"
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


def test_an_input_that_is_a_pipe_is_refused_at_once(tmp_path, inputs):
    """A FIFO with no writer would block the first read forever, and a pipe with one (`import
    <(zcat t.json.gz)`) cannot be read twice as a trace file is: one line, at once."""
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    tasks = [("report", ["report", fifo], {"cwd": str(tmp_path)}),
             ("import", ["import", fifo, "-o", tmp_path / "o.duckdb"], {"cwd": str(tmp_path)}),
             ("merge", ["merge", inputs["f"], fifo, "-o", tmp_path / "m.duckdb"], {"cwd": str(tmp_path)})]
    res = H.cli_batch(tasks, tmp_path / "work", timeout=20)
    for name, d in res.items():
        assert d["rc"] == 2, (name, d["stderr"])
        assert d["stderr"].strip() == (f"cuptiprof: error: {fifo}: is not a regular file (a pipe "
                                       "or a device); save it to a file and give that file"), name
    assert not (tmp_path / "o.duckdb").exists() and not (tmp_path / "m.duckdb").exists()


# -- outputs never replace inputs or files cuptiprof did not write ------------------------------
def test_outputs_never_replace_inputs_or_unrelated_files(nasty, tmp_path):
    import shutil

    w = tmp_path / "w"
    (w / "keep").mkdir(parents=True)
    (w / "notes").mkdir()
    shutil.copy(nasty, w / "p.duckdb")
    shutil.copy(other(nasty), w / "q.duckdb")
    shutil.copy(nasty, w / "keep" / "p2.duckdb")
    (w / "notes" / "notes.txt").write_text("mine\n")
    (w / "notes.txt").write_text("mine\n")
    (w / "t.json").write_text(json.dumps(H.good_trace()))
    kept = {p: digest(p) for p in w.rglob("*") if p.is_file()}
    refused = {
        "parquet_holding_input": ["export", "keep/p2.duckdb", "--parquet", "keep", "--force"],
        "parquet_over_other_files": ["export", "p.duckdb", "--parquet", "notes", "--force"],
        "parquet_cwd": ["export", "p.duckdb", "--parquet", ".", "--force"],
        "chrome_over_input": ["export", "p.duckdb", "--chrome", "p.duckdb", "--force"],
        "chrome_and_parquet_one_path": ["export", "p.duckdb", "--chrome", "x.json", "--parquet", "x.json"],
        "html_over_input": ["report", "p.duckdb", "--html", "p.duckdb"],
        "compare_html_over_input": ["compare", "p.duckdb", "q.duckdb", "--html", "q.duckdb"],
        "html_over_other_file": ["report", "p.duckdb", "--html", "notes.txt"],
        "html_into_directory": ["report", "p.duckdb", "--html", "keep"],
        "html_missing_directory": ["report", "p.duckdb", "--html", "nodir/r.html"],
        "compare_html_missing_directory": ["compare", "p.duckdb", "q.duckdb", "--html", "nodir/r.html"],
        "import_into_directory": ["import", "t.json", "-o", "keep", "--force"],
        "html_to_a_new_directory": ["report", "p.duckdb", "--html", "newdir/"],   # not a file `newdir`
        "chrome_to_a_new_directory": ["export", "p.duckdb", "--chrome", "newdir/"],
        "import_to_a_new_directory": ["import", "t.json", "-o", "newdir/"],
        "merge_to_a_new_directory": ["merge", "p.duckdb", "q.duckdb", "-o", "newdir/"],
        "import_same_trace_twice": ["import", "t.json", "./t.json", "-o", "tw.duckdb"],
        "merge_a_trace": ["merge", "p.duckdb", "t.json", "-o", "m.duckdb"],
        "merge_a_directory": ["merge", "p.duckdb", "keep", "-o", "m.duckdb"],
        "merge_over_input": ["merge", "p.duckdb", "q.duckdb", "-o", "q.duckdb", "--force"],
        "merge_into_directory": ["merge", "p.duckdb", "q.duckdb", "-o", "keep", "--force"],
        "run_into_directory": ["run", "-o", "keep", "--force", "--", PY, "-c", "pass"],
    }
    tasks = [(n, a, {"cwd": str(w)}) for n, a in refused.items()]
    # An HTML report and a Parquet export are replaced by the same command run again.
    tasks += [("html", ["report", "p.duckdb", "--html", "r.html"], {"cwd": str(w)}),
              ("html_again", ["report", "p.duckdb", "--html", "r.html"], {"cwd": str(w)}),
              ("parquet", ["export", "p.duckdb", "--parquet", "pq"], {"cwd": str(w)}),
              ("parquet_again", ["export", "p.duckdb", "--parquet", "pq", "--force"], {"cwd": str(w)})]
    res = H.cli_batch(tasks, tmp_path / "work", timeout=60)
    for name in refused:
        d = res[name]
        lines = d["stderr"].strip().splitlines()
        assert d["rc"] == 2 and len(lines) == 1 and lines[0].startswith("cuptiprof: error:"), (name, d)
        assert ".tmp-" not in d["stderr"], (name, d["stderr"])   # the path the user gave
    for name in ("html", "html_again", "parquet", "parquet_again"):
        assert res[name]["rc"] == 0, (name, res[name]["stderr"])
    assert {p: digest(p) for p in kept} == kept
    assert not [p for p in w.rglob("*") if ".tmp-" in p.name]
    assert not any((w / n).exists() for n in ("tw.duckdb", "m.duckdb", "x.json", "nodir", "newdir"))
    assert (w / "r.html").read_text().lstrip().startswith("<!DOCTYPE html>") and (w / "pq" / "kernels").is_dir()


def test_a_dataset_into_an_empty_current_directory_is_refused(nasty, tmp_path, monkeypatch, capsys):
    """`--parquet .` in an empty directory holds no input and replaces nothing, yet the current
    directory cannot be renamed into place: refused in one line (it ended in a traceback)."""
    from cuptiprof.cli import main
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["export", str(nasty), "--parquet", "."]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "cuptiprof: error: .: is the current directory or above it; give a new directory name"]
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("cmd", ["merge", "import"])
def test_a_file_output_that_cannot_be_created_names_the_path_asked_for(nasty, tmp_path, cmd):
    """/proc passes the up-front check as root; creating the temporary file beside it fails:
    the line names the output given, not the temporary name the user never saw."""
    import os
    import subprocess

    if not os.access("/proc", os.W_OK):
        pytest.skip("/proc is refused up front when not root")
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(H.good_trace()))
    args = [nasty] if cmd == "merge" else [trace]
    r = subprocess.run([PY, "-m", "cuptiprof", cmd, *map(str, args), "-o", "/proc/cuptiprof-x.duckdb"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("cuptiprof: error: /proc/cuptiprof-x.duckdb: cannot write (No such "
                                "file or directory); give a path in a directory you can write to")


@pytest.mark.parametrize("command", ["import", "merge"])
def test_an_empty_output_path_is_named_as_empty(tmp_path, capsys, monkeypatch, command):
    """`-o "$OUT"` with OUT unset: import and merge said `.: is a directory`, a path the user
    never gave; they say, as run does, that the output path is empty."""
    from cuptiprof.cli import main
    from cuptiprof.synthetic import write_synthetic
    src = write_synthetic(tmp_path / "s.duckdb", steps=2, kernels_per_step=5)
    monkeypatch.chdir(tmp_path)
    if command == "import":
        assert main(["export", str(src), "--chrome", "t.json"]) == 0
        inputs = ["t.json"]
    else:
        inputs = [str(src), str(write_synthetic(tmp_path / "b.duckdb", steps=2, kernels_per_step=5))]
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    for out in ("", "  "):   # blanks too, as run refuses them
        assert main([command, *inputs, "-o", out]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"cuptiprof: error: -o {out!r}: the output path is empty; give a file name"], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# A name as bytes that are no UTF-8 (Latin-1 é, an old archive's file): Python carries them as
# surrogates, which DuckDB cannot take.
NOT_UTF8 = b"caf\xe9.duckdb"


BAD_IN = "argument FILE: caf\\xe9.duckdb: the file name is not UTF-8"
BAD_OUT = "-o caf\\xe9-new.duckdb: the output path is not UTF-8"


@pytest.mark.parametrize("args,said", [
    (["report", "{bad}"], BAD_IN),
    (["sql", "{bad}", "SELECT 1"], BAD_IN),
    (["export", "{bad}", "--chrome", "out.json"], BAD_IN),
    (["compare", "{bad}", "{good}"], BAD_IN),
    (["diff", "{good}", "{bad}", "--fail-above", "5"], BAD_IN.replace("FILE", "NEW.duckdb")),
    (["merge", "{good}", "{bad}", "-o", "m.duckdb"], BAD_IN),
    (["import", "{badtrace}", "-o", "m.duckdb"],
     "argument TRACE: caf\\xe9.json: the file name is not UTF-8"),
    (["merge", "{good}", "{good2}", "-o", "{new}"], BAD_OUT),
    (["import", "t.json", "-o", "{new}"], BAD_OUT),
    (["run", "-o", "{new}", "--", PY, "-c", "pass"], BAD_OUT),
    (["export", "{good}", "--parquet", "{newdir}"], "--parquet caf\\xe9-pq: the output path is not UTF-8"),
])
def test_a_file_name_that_is_not_utf8_is_refused_in_one_line(tmp_path, args, said):
    """DuckDB opens and writes only UTF-8 file names: another name ended in a traceback
    (std::bad_cast) or in DuckDB's conversion error; it is refused in one line, exit 2, and
    nothing is written."""
    from cuptiprof.synthetic import write_synthetic
    good = write_synthetic(tmp_path / "good.duckdb", steps=2, kernels_per_step=5)
    write_synthetic(tmp_path / "good2.duckdb", steps=2, kernels_per_step=5, seed=3)
    shutil.copy(good, os.path.join(os.fsencode(tmp_path), NOT_UTF8))
    (tmp_path / "t.json").write_text(json.dumps(H.good_trace()))
    shutil.copy(tmp_path / "t.json", os.path.join(os.fsencode(tmp_path), b"caf\xe9.json"))
    names = {"badtrace": os.fsdecode(b"caf\xe9.json"), "bad": os.fsdecode(NOT_UTF8), "good": "good.duckdb", "good2": "good2.duckdb",
             "new": os.fsdecode(b"caf\xe9-new.duckdb"), "newdir": os.fsdecode(b"caf\xe9-pq")}
    before = sorted(os.listdir(os.fsencode(tmp_path)))
    r = cli([a.format(**names) for a in args], tmp_path)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1 and said in lines[0], r.stderr[-2000:]
    assert lines[0].startswith("cuptiprof: error:") and r.stdout == ""
    assert sorted(os.listdir(os.fsencode(tmp_path))) == before


BACKSLASH = "the path holds a backslash, which DuckDB takes for a folder separator (/)"


@pytest.mark.parametrize("args,said", [
    (["report", "in\\put.duckdb"], "in\\put.duckdb: " + BACKSLASH),
    (["sql", "in\\put.duckdb", "SELECT 1"], "in\\put.duckdb: " + BACKSLASH),
    (["compare", "in\\put.duckdb", "good2.duckdb"], "in\\put.duckdb: " + BACKSLASH),
    (["merge", "good2.duckdb", "in\\put.duckdb", "-o", "m.duckdb"], "in\\put.duckdb: " + BACKSLASH),
    (["merge", "good.duckdb", "good2.duckdb", "-o", "m\\x.duckdb"], "-o m\\x.duckdb: " + BACKSLASH),
    (["import", "t.json", "-o", "o\\ut.duckdb"], "-o o\\ut.duckdb: " + BACKSLASH),
    (["run", "-o", "r\\un.duckdb", "--", PY, "-c", "pass"], "-o r\\un.duckdb: " + BACKSLASH),
    (["export", "good.duckdb", "--parquet", "p\\q"], "--parquet p\\q: " + BACKSLASH),
])
def test_a_path_holding_a_backslash_is_refused_in_one_line_before_duckdb_opens_another(
        tmp_path, args, said):
    r"""DuckDB reads a backslash as a folder separator: `report 'in\put.duckdb'` reported
    in/put.duckdb, another file, without a word; `run -o 'r\un.duckdb'` ran the whole program,
    then could not write ('No such file or directory'). Refused in one line before anything
    is read or run, exit 2, nothing written."""
    from cuptiprof.synthetic import write_synthetic
    good = write_synthetic(tmp_path / "good.duckdb", steps=2, kernels_per_step=5)
    write_synthetic(tmp_path / "good2.duckdb", steps=2, kernels_per_step=5, seed=3)
    shutil.copy(good, tmp_path / "in\\put.duckdb")
    (tmp_path / "in").mkdir()
    shutil.copy(tmp_path / "good2.duckdb", tmp_path / "in" / "put.duckdb")   # what DuckDB opened
    (tmp_path / "t.json").write_text(json.dumps(H.good_trace()))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = cli(args, tmp_path)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and lines == [f"cuptiprof: error: {said}" + (
        "; give a path without one" if said.startswith("-") else "; rename the file (or its folder)")], \
        r.stderr[-2000:]
    assert r.stdout == "" and sorted(p.name for p in tmp_path.rglob("*")) == before

@pytest.mark.parametrize("args,option", [
    (["export", "good.duckdb", "--chrome", "-"], "--chrome"),
    (["export", "good.duckdb", "--parquet", "-"], "--parquet"),
    (["report", "good.duckdb", "--html", "-"], "--html"),
    (["compare", "good.duckdb", "good2.duckdb", "--html", "-"], "--html"),
    (["import", "t.json", "-o", "-"], "-o"),
    (["merge", "good.duckdb", "good2.duckdb", "-o", "-"], "-o"),
    (["run", "-o", "-", "--", PY, "-c", "pass"], "-o"),
])
def test_an_output_named_dash_is_refused_not_written_as_a_file_named_dash(tmp_path, args, option):
    """`--chrome -` reads as "to stdout", which cuptiprof does not write to: it wrote a file
    named `-` into the current folder, and said `wrote ... -> -`. It is refused in one line;
    `./-` still names such a file."""
    from cuptiprof.synthetic import write_synthetic
    write_synthetic(tmp_path / "good.duckdb", steps=2, kernels_per_step=5)
    write_synthetic(tmp_path / "good2.duckdb", steps=2, kernels_per_step=5, seed=3)
    (tmp_path / "t.json").write_text(json.dumps(H.good_trace()))
    before = sorted(os.listdir(tmp_path))
    r = cli(args, tmp_path)
    assert r.returncode == 2 and r.stdout == "", r.stderr[-2000:]
    what = "directory" if option == "--parquet" else "file"   # --parquet writes a directory
    assert r.stderr.splitlines() == [f"cuptiprof: error: {option} -: cuptiprof writes a {what}, "
                                     f"not stdout; give a {what} name (./- for a {what} named -)"]
    assert sorted(os.listdir(tmp_path)) == before


def test_an_output_named_dot_slash_dash_is_that_file(tmp_path):
    from cuptiprof.synthetic import write_synthetic
    write_synthetic(tmp_path / "good.duckdb", steps=2, kernels_per_step=5)
    r = cli(["export", "good.duckdb", "--chrome", "./-"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "-").read_text())["traceEvents"]


def test_outputs_python_writes_take_a_name_that_is_not_utf8(tmp_path):
    """A Chrome trace and an HTML page are written by Python, which takes any file name: only
    what DuckDB writes needs a UTF-8 one."""
    from cuptiprof.synthetic import write_synthetic
    write_synthetic(tmp_path / "good.duckdb", steps=2, kernels_per_step=5)
    for args, name in ((["export", "good.duckdb", "--chrome"], b"caf\xe9.json"),
                       (["report", "good.duckdb", "--html"], b"caf\xe9.html")):
        r = cli([*args, os.fsdecode(name)], tmp_path)
        assert r.returncode == 0, r.stderr
        assert os.path.getsize(os.path.join(os.fsencode(tmp_path), name)) > 0
