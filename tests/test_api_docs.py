"""The public Python API says what it does: help() on each name a user meets answers."""
from __future__ import annotations

import inspect
import re

import cuptiprof
from cuptiprof.analyse.profile import Profile


def test_every_public_profile_method_has_a_docstring():
    missing = [name for name, m in inspect.getmembers(Profile, inspect.isfunction)
               if not name.startswith("_") and not (m.__doc__ or "").strip()]
    assert not missing, f"Profile methods without a docstring: {missing}"


def test_report_docstring_names_every_report():
    from cuptiprof.analyse import catalog
    doc = Profile.report.__doc__
    names = catalog.report_names()
    assert len(names) >= 10
    assert all(f"'{n}'" in doc for n in names), doc


def test_profile_names_where_its_parameters_are_documented():
    """profile() points at a class a user can find, and that class documents every parameter."""
    import importlib
    doc = cuptiprof.profile.__doc__
    path = "cuptiprof.collect.session.Session"
    assert path in doc
    mod, cls = path.rsplit(".", 1)
    session = getattr(importlib.import_module(mod), cls)
    session_doc = session.__doc__
    for p in inspect.signature(cuptiprof.profile).parameters:
        if p != "options" and p != "path":
            assert f"{p}:" in session_doc, p
    assert "cuptiprof run --light" in session_doc   # the two meanings of light told apart
    # ... and the keyword options profile(**options) passes on: flush_every_s (README's way to
    # commit every step) was told only inside flush_every's entry, pid nowhere
    keywords = [p.name for p in inspect.signature(session.__init__).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert "flush_every_s" in keywords
    entry = re.compile(r"^\s*(\w+(?:, \w+)*):", re.M)
    documented = {n for m in entry.finditer(session_doc) for n in m.group(1).split(", ")}
    documented |= set(re.findall(r"\. (\w+):", session_doc))   # two entries on one line
    missing = [p for p in keywords if p not in documented]
    assert not missing, f"Session options without an entry in help(Session): {missing}"


def test_dir_lists_every_public_name():
    """range, step and profile load on first use: dir() (and a notebook's tab completion) did
    not list them."""
    assert set(cuptiprof.__all__) <= set(dir(cuptiprof))
    assert "annotations" not in dir(cuptiprof)   # the __future__ import is no API


def test_every_public_signature_is_annotated():
    """cuptiprof ships py.typed: open() without annotations made every Profile a type checker
    saw Any, and report methods without a return type handed their relations on untyped."""
    public = [cuptiprof.open, cuptiprof.profile, cuptiprof.step, cuptiprof.range.__init__]
    public += [m for name, m in inspect.getmembers(Profile, inspect.isfunction)
               if not name.startswith("_")]
    bare = [f"{f.__qualname__}({p.name})" for f in public
            for p in inspect.signature(f).parameters.values()
            if p.name != "self" and p.annotation is inspect.Parameter.empty]
    bare += [f"{f.__qualname__} -> ?" for f in public if f.__name__ != "__init__"
             and inspect.signature(f).return_annotation is inspect.Signature.empty]
    assert not bare, f"public signatures without annotations: {bare}"


def test_repr_names_the_file_and_where_it_stands(tmp_path):
    """A Profile or a profile() in a notebook's output was `<... object at 0x7f...>`."""
    p = tmp_path / "r.duckdb"
    s = cuptiprof.profile(p, warmup=1, steps=2, source="none", quiet=True)
    assert repr(s) == f"<cuptiprof.profile({str(p)!r}, warmup=1, steps=2): not started>"
    with s:
        assert repr(s) == f"<cuptiprof.profile({str(p)!r}, warmup=1, steps=2): warm-up>"
        for i in range(2):
            with cuptiprof.step(i):
                pass
        assert repr(s) == f"<cuptiprof.profile({str(p)!r}, warmup=1, steps=2): recording, 1 step>"
    assert repr(s) == f"<cuptiprof.profile({str(p)!r}, warmup=1, steps=2): stopped, 1 step>"
    with cuptiprof.open(p, steps=1) as prof:
        assert repr(prof) == f"<cuptiprof.Profile {str(p)!r}: steps 1:1>"
    assert repr(prof) == f"<cuptiprof.Profile {str(p)!r}: closed>"


def test_readme_layout_lists_every_package_folder():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1]
    folders = sorted(p.name for p in (root / "cuptiprof").iterdir()
                     if p.is_dir() and not p.name.startswith(("_", ".")))
    assert folders
    missing = [f for f in folders if f"cuptiprof/{f}" not in layout]
    assert not missing, f"README's Layout does not say what these hold: {missing}"


def test_sql_help_names_every_scoped_view():
    """`cuptiprof sql --help` names each sel_* view a query may read (they are in no schema)."""
    import subprocess
    import sys
    from cuptiprof.analyse import catalog
    env = {"PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[1]),
           "COLUMNS": "400", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "cuptiprof", "sql", "--help"], env=env,
                         capture_output=True, text=True, check=True).stdout
    views = catalog.scope_views("TRUE")
    assert len(views) >= 5
    missing = [v for v in views if v not in out]
    assert not missing, f"sql --help does not name {missing}"
    # ... and says what each holds: a bare name tells a user nothing
    bare = [v for v in views if not re.search(rf"{v} \(", " ".join(out.split()))]
    assert not bare, f"sql --help names {bare} without saying what they hold"


def test_readme_in_code_example_runs_as_pasted(tmp_path):
    """The README's Python example, with a stand-in for the user's pipeline, records a file and
    reads it back with every call it shows (the fake CUPTI delivers kernels: no GPU needed)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    code = readme.split("In code:", 1)[1]
    code = re.search(r"```python\n(.*?)```", code, re.S).group(1)
    assert "pipeline.denoise_step" in code and "prof.steps()" in code
    # .df() needs pandas, which cuptiprof does not install: an example that uses it says so
    assert ".df()" not in code or ".df() (needs pandas)" in code
    import importlib.util
    if importlib.util.find_spec("pandas") is None:
        code = code.replace(".df()", ".fetchall()")
    stand_in = ("import time, types\n"
                "pipeline = types.SimpleNamespace(denoise_step=lambda i: time.sleep(0.001))\n")
    shown = "\nfor rel in (prof.ops(top=10), prof.steps()):\n    print(len(rel.fetchall()))\n"
    env = dict(os.environ, CUPTIPROF_FAKE_CUPTI="1", PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, "-c", stand_in + code + shown], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ops, steps = map(int, r.stdout.split())
    assert ops > 0 and steps == 5   # warmup=2, steps=5 of the 7 the loop runs


def test_every_cuptiprof_command_the_docs_show_parses():
    """Each `cuptiprof CMD ...` line of README.md and docs/ (sh blocks and inline code) names
    options, choices and arguments that CMD accepts, as a user would paste it."""
    import shlex
    from pathlib import Path

    from cuptiprof.cli import COMMANDS, build_parser
    root = Path(__file__).resolve().parents[1]
    cmd = re.compile(rf"(?:^|\s)(?:python -m )?cuptiprof ((?:{'|'.join(COMMANDS)})\b.*)")
    shown = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text()
        lines = [l for b in re.findall(r"```sh\n(.*?)```", text, re.S) for l in b.splitlines()]
        lines += re.findall(r"`((?:python -m )?cuptiprof [^`]*)`", " ".join(text.split()))
        for line in lines:
            m = cmd.search(line)
            if m:
                argv = shlex.split(m.group(1).split(" #")[0].split(" > ")[0])
                if len(argv) > 1:   # not a mention of the command alone
                    shown.append((doc.name, argv))
    assert len(shown) >= 20
    parser = build_parser()
    bad = []
    for doc, argv in shown:
        try:
            parser.parse_args(argv)
        except SystemExit:
            bad.append((doc, argv))
    assert not bad, f"commands in the docs that cuptiprof refuses: {bad}"


def _cli_options() -> set[str]:
    """Every --option of every cuptiprof subcommand."""
    import argparse

    from cuptiprof.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {o for p in sub.choices.values() for a in p._actions for o in a.option_strings}


# options the README shows for other programs: the bundled example, nsys
_OTHER_PROGRAMS_OPTIONS = {"--no-markers", "--type"}


def test_every_option_the_readme_names_is_an_option_of_cuptiprof():
    """An option named in prose (`--fail-above`, `--table NAME`, `--flops/--bytes`) exists, as
    the command lines of the README are parsed in full above."""
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", readme))
    assert {"--fail-above", "--sigmas", "--min-ms", "--flops", "--bytes", "--label"} <= named
    unknown = sorted(named - _cli_options() - _OTHER_PROGRAMS_OPTIONS)
    assert not unknown, f"README names options no cuptiprof command has: {unknown}"


def test_every_option_of_cuptiprof_is_in_the_readme():
    """The other way round: each option a subcommand's --help lists (under one of its
    spellings) is shown in README.md, the user's manual (`run --no-report`, `diff --all` and
    `report --top` were in --help alone)."""
    import argparse
    from pathlib import Path

    from cuptiprof.cli import build_parser
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    named = set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*[a-z]?", readme))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = sorted(f"{cmd} {a.option_strings[-1]}" for cmd, p in sub.choices.items()
                     for a in p._actions if a.option_strings and a.dest != "help"
                     and not named & set(a.option_strings))
    assert not missing, f"options README.md does not show: {missing}"


def _fresh_file_relations():
    """name -> (type, columns) of every table and view of a file made from the schema."""
    import duckdb

    from cuptiprof.store.schema import schema_sql
    con = duckdb.connect()
    con.execute(schema_sql())
    rels = {}
    for name, kind in con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall():
        cols = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [name]).fetchall()}
        rels[name] = ("view" if kind == "VIEW" else "table", cols)
    return rels


def test_every_table_view_and_column_the_docs_name_is_in_a_fresh_file():
    """README's list of views and tables says which is which, and each `table.column` that
    README or docs/ name (`processes.ended_early`, `runs.cupti_version`) exists."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    readme = " ".join((root / "README.md").read_text().split())
    rels = _fresh_file_relations()
    m = re.search(r"the views (.*?) and the tables (.*?) are documented in", readme)
    assert m, "README no longer lists the file's views and tables"
    views, tables = (re.findall(r"`(\w+)`", g) for g in m.groups())
    assert len(views) >= 4 and len(tables) >= 8
    wrong = [(n, want, rels.get(n, ("missing",))[0]) for want, names in (("view", views), ("table", tables))
             for n in names if rels.get(n, ("missing",))[0] != want]
    assert not wrong, f"README calls these (name, what it says) otherwise: {wrong}"
    named = set()
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        named |= {(t, c) for t, c in re.findall(r"`(\w+)\.(\w+)`", doc.read_text()) if t in rels}
    assert ("processes", "ended_early") in named and ("runs", "status") in named
    missing = sorted(f"{t}.{c}" for t, c in named if c not in rels[t][1])
    assert not missing, f"columns the docs name that a file does not have: {missing}"


def test_every_data_quality_check_the_readme_names_is_a_check_of_the_schema():
    """A name in backticks where README speaks of data_quality is a check the schema lists for
    `data_quality.check_name`, or one of the file's tables and columns."""
    from pathlib import Path

    from cuptiprof.store.schema import schema_sql
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    line = next(ln for ln in schema_sql().splitlines() if ln.strip().startswith("check_name VARCHAR"))
    checks = set(re.findall(r"'(\w+)'", line))
    assert len(checks) >= 20
    rels = _fresh_file_relations()
    known = set(rels) | {c for _, cols in rels.values() for c in cols}
    known |= {"cuptiprof_log", "flush_every_s", "imported_from"}   # a Chrome category, a parameter, a key
    named = set()
    for para in re.split(r"\n\s*\n|\n\|", readme):   # paragraphs and table rows
        if "data_quality" in para:
            named |= set(re.findall(r"`([a-z]+(?:_[a-z]+)+)`", " ".join(para.split())))
    assert {"steps_mixed", "process_exec", "no_gpu", "run_recovered"} <= named
    unknown = sorted(named - checks - known)
    assert not unknown, f"README names data_quality checks the schema does not list: {unknown}"


def test_every_compare_sql_documents_exactly_its_columns(tmp_path):
    """The `-- column: what` lines of sql/compare/*.sql name the columns the query gives, in
    order, as those of sql/reports/ do for `report --list` (cpu_time's light and cpu_runs were
    documented the other way round)."""
    from cuptiprof.analyse import catalog, compare
    from cuptiprof.analyse.compare import Comparison, work_list
    from cuptiprof.analyse.diff import diff
    from cuptiprof.synthetic import write_synthetic
    a = write_synthetic(tmp_path / "a.duckdb", steps=3, kernels_per_step=40, seed=1)
    b = write_synthetic(tmp_path / "b.duckdb", steps=3, kernels_per_step=40, seed=2)
    got = {}
    with Comparison([a, b], work=work_list(["*=1"], ["*=0.001"])) as cmp:
        for name in ("ops", "kinds", "steps", "steps_wall", "devices", "bandwidth", "throughput",
                     "items"):
            got[name] = getattr(cmp, name)().columns
        for name in ("act", "regions", "busy"):   # the temp tables the others read
            got[name] = cmp.con.sql(f"SELECT * FROM cmp_{name} LIMIT 0").columns
        got["keyed"] = cmp.con.sql("SELECT * FROM cmp_keyed LIMIT 0").columns[-2:]   # cmp_act's, then its own
    got["diff"] = diff(a, b, 5).items.column_names
    with cuptiprof.open(a) as prof:
        got["cpu_time"] = compare.cpu_time(prof).columns
        got["step_parts"] = compare.step_parts(prof).columns
        got["timeline_processes"] = compare.timeline_processes(prof).columns
        got["timeline"] = compare.step_timeline(prof, 0).columns
    wrong = {}
    for name, cols in got.items():
        doc = [c for c, _ in catalog.report_doc(name, "compare").columns]
        if doc != list(cols):
            wrong[name] = (doc, list(cols))
    assert not wrong, f"sql/compare files whose column lines differ from their columns (doc, got): {wrong}"
