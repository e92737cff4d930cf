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
    session_doc = getattr(importlib.import_module(mod), cls).__doc__
    for p in inspect.signature(cuptiprof.profile).parameters:
        if p != "options" and p != "path":
            assert f"{p}:" in session_doc, p
    assert "cuptiprof run --light" in session_doc   # the two meanings of light told apart


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
