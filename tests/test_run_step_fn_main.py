"""--step-fn on a function of the main script itself (`__main__:step`, or the script's own name),
which runs as __main__ and is never imported; and child processes that must not break or lose
data when the recorder cannot work."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _run_helpers import ROOT, cli, env, q, script

PY = sys.executable

# Imports before the def (the usual script), a class, the step, a loop at module level. It
# prints whether a trace function (or an import hook) is left installed once the def has run.
MAIN = """
    import builtins
    import json
    import sys
    try:
        import probe    # where present, says whether its import ran under a trace function
    except ImportError:
        pass

    class Pipe:
        def denoise(self, x):
            return x + 1

    def step(x):
        return x * 2

    print("trace after def:", sys.gettrace())
    print("import after def:", builtins.__import__.__module__)
    x, p = 1, Pipe()
    for i in range(6):
        x = step(x)
        p.denoise(0)
    print("x", x)
"""


PROBE = """
    import sys
    print("traced in import:", sys.gettrace() is not None)
"""


def _steps(out):
    return q(out, "SELECT kind, step FROM ranges WHERE kind IN ('step', 'warmup') ORDER BY start_ns")


@pytest.mark.parametrize("spec", ["__main__:step", "infer:step", "__main__:Pipe.denoise"])
def test_step_fn_in_the_main_script(tmp_path, spec):
    p = script(tmp_path, MAIN, name="infer.py")
    script(tmp_path, PROBE, name="probe.py")
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-fn", spec, "--warmup", "2",
             "--steps", "3", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 64" in r.stdout                          # the wrapped function still works
    assert "trace after def: None" in r.stdout         # nothing left slowing the program
    assert "import after def: builtins" in r.stdout    # nor in its imports
    assert "traced in import: False" in r.stdout       # imports before the def run untraced
    assert _steps(tmp_path / "m.duckdb") == [("warmup", 0), ("warmup", 1), ("step", 2), ("step", 3),
                                             ("step", 4)]


@pytest.mark.parametrize("spec, before", [("__main__:step", "    def step(x):"),
                                          ("__main__:Pipe.denoise", "    class Pipe:")])
def test_step_fn_bound_to_none_before_its_def(tmp_path, spec, before):
    """A name the script binds to None before its def or class (a fallback for an optional
    import) is hooked once the def has run: not taken for the function while it is None, and
    the attribute None lacks is no error in the program."""
    name = before.split()[1].split("(")[0].rstrip(":")
    p = script(tmp_path, MAIN.replace(before, f"    {name} = None\n\n{before}"), name="infer.py")
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-fn", spec, "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 64" in r.stdout
    assert [k for k, _ in _steps(tmp_path / "m.duckdb")] == ["step"] * 6


@pytest.mark.parametrize("spec, code", [
    ("__main__:step", "def step(x):\n    return x + 1\n"),
    ("c_mod:step", "from c_mod import step\n")], ids=["main", "module"])
def test_step_fn_in_code_given_with_python_c(tmp_path, spec, code):
    """`python -c CODE` runs CODE as __main__ with no script file (the main module has no name):
    `__main__:step` is found in it, and a module it imports is hooked as in any program."""
    script(tmp_path, "def step(x):\n    return x + 1\n", name="c_mod.py")
    code += "for i in range(3):\n    step(i)\nprint('ran')\n"
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--step-fn", spec, "--", PY, "-c", code],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ran" in r.stdout
    assert _steps(tmp_path / "c.duckdb") == [("step", 0), ("step", 1), ("step", 2)]


@pytest.mark.parametrize("argv", [["-"], []], ids=["dash", "bare"])
def test_step_fn_in_a_script_read_from_stdin(tmp_path, argv):
    """`python - < app.py` (or a script piped to `python`) runs the code as __main__ from
    <stdin>: `__main__:step` is found in it, as in code given with -c."""
    code = "def step(x):\n    return x + 1\nfor i in range(3):\n    step(i)\nprint('ran')\n"
    r = subprocess.run([PY, "-m", "cuptiprof", "run", "-o", "s.duckdb", "--no-report",
                        "--step-fn", "__main__:step", "--", PY, *argv], cwd=tmp_path, env=env(),
                       input=code, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ran" in r.stdout
    assert _steps(tmp_path / "s.duckdb") == [("step", 0), ("step", 1), ("step", 2)]


def test_step_fn_in_a_script_named_by_a_relative_path(tmp_path):
    """`python infer.py` from the script's folder: the code of the script Python runs is named
    by its absolute path, and the script is still found by the one it was given."""
    script(tmp_path, MAIN, name="infer.py")
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-fn", "__main__:step", "--",
             PY, "infer.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 64" in r.stdout
    assert [k for k, _ in _steps(tmp_path / "m.duckdb")] == ["step"] * 6

def test_step_fn_inside_steps_the_program_marks(tmp_path):
    """The program marks its steps itself; the wrapped function runs inside them: each call is
    a range of the program's step, not a step of its own."""
    p = script(tmp_path, """
        import cuptiprof

        def sched_step(x):
            return x + 1

        x = 0
        for i in range(4):
            with cuptiprof.range("step", step=i):
                x = sched_step(x)
        print("x", x)
    """, name="loop.py")
    r = cli(["run", "-o", "s.duckdb", "--no-report", "--step-fn", "__main__:sched_step",
             "--warmup", "1", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 4" in r.stdout
    assert _steps(tmp_path / "s.duckdb") == [("warmup", 0), ("step", 1), ("step", 2), ("step", 3)]
    inner = q(tmp_path / "s.duckdb", "SELECT kind, step FROM ranges WHERE depth = 1 "
              "ORDER BY start_ns")
    assert inner[-3:] == [("user", 1), ("user", 2), ("user", 3)]   # and ("user", 0) in warm-up


NESTED = """
    import functools

    def deco(f):
        @functools.wraps(f)
        def w(*a, **k):
            return f(*a, **k)
        return w

    @deco
    def main(n=6):
        scale = 2
        def denoise_step(x):
            return x * scale          # a closure: it must survive the recompile
        x = 1
        for i in range(n):
            x = denoise_step(x)
        print("x", x)

    if __name__ == "__main__":
        main()
"""


@pytest.mark.parametrize("spec", ["__main__:main.denoise_step", "__main__:main.<locals>.denoise_step",
                                  "nest:main.denoise_step"])
def test_step_fn_defined_inside_a_function_of_the_main_script(tmp_path, spec):
    p = script(tmp_path, NESTED, name="nest.py")
    r = cli(["run", "-o", "n.duckdb", "--no-report", "--step-fn", spec, "--warmup", "2", "--",
             PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 64" in r.stdout
    assert _steps(tmp_path / "n.duckdb") == [("warmup", 0), ("warmup", 1)] + [
        ("step", i) for i in range(2, 6)]


def test_step_fn_defined_two_functions_deep(tmp_path):
    """`main.run.denoise_step`: a function defined inside one defined inside main; the names
    left once main is reached are followed into it."""
    p = script(tmp_path, """
        def main():
            def run(n):
                def denoise_step(x):
                    return x * 2
                x = 1
                for _ in range(n):
                    x = denoise_step(x)
                return x
            print("x", run(3))

        main()
    """, name="deep.py")
    r = cli(["run", "-o", "d.duckdb", "--no-report", "--step-fn", "__main__:main.run.denoise_step",
             "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 8" in r.stdout
    assert [k for k, _ in _steps(tmp_path / "d.duckdb")] == ["step"] * 3

def test_step_fn_defined_inside_a_method_of_a_module(tmp_path):
    script(tmp_path, """
        class Runner:
            def run(self, n):
                def inner(x):
                    return x + 1
                x = 0
                for _ in range(n):
                    x = inner(x)
                return x
    """, name="runner_mod.py")
    p = script(tmp_path, """
        from runner_mod import Runner
        print("x", Runner().run(3))
    """)
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-fn", "runner_mod:Runner.run.inner",
             "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 3" in r.stdout
    assert [k for k, _ in _steps(tmp_path / "m.duckdb")] == ["step"] * 3


@pytest.mark.parametrize("file, step_fn, module", [
    ("run.py", "app.run:step", "app.run"),
    # `python -m app` runs app/__main__.py as __main__: app.__main__:step names its function
    # (it was never hooked, and the run had no steps)
    ("__main__.py", "app.__main__:step", "app"),
], ids=["module", "package"])
def test_step_fn_in_code_run_with_python_m(tmp_path, file, step_fn, module):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    script(tmp_path / "app", MAIN, name=file)
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-fn", step_fn, "--",
             PY, "-m", module], tmp_path)
    assert r.returncode == 0, r.stderr
    assert [k for k, _ in _steps(tmp_path / "m.duckdb")] == ["step"] * 6


@pytest.mark.parametrize("spec, code, said", [
    ("app:step", 0, None),              # the package has no step, its __main__.py has
    ("app:nothere", 2, "module app has no nothere")])
def test_step_fn_named_by_the_package_run_with_python_m(tmp_path, spec, code, said):
    """`python -m app`: runpy imports the package app, then runs app/__main__.py as __main__;
    app:step names the step of either, and steps recorded are not reported missing."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    script(tmp_path / "app", MAIN, name="__main__.py")
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-fn", spec, "--", PY, "-m", "app"],
            tmp_path)
    assert r.returncode == code, r.stderr
    if said is None:
        assert [ln for ln in r.stderr.splitlines() if "cuptiprof" in ln] == [
            "cuptiprof: wrote m.duckdb"], r.stderr
        assert [k for k, _ in _steps(tmp_path / "m.duckdb")] == ["step"] * 6
    else:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("cuptiprof: error:") and said in lines[0] and "no steps" in lines[0]
        assert _steps(tmp_path / "m.duckdb") == []


def test_step_fn_missing_in_one_process_hooked_in_another(tmp_path):
    """One process imports a module without the function, another one with it and records
    steps: a warning, the command's own status, not 'has no steps'."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    script(tmp_path / "a", "def other(): pass\n", name="mod_s.py")
    script(tmp_path / "b", "def step(i):\n    return i\n", name="mod_s.py")
    worker = script(tmp_path / "b", """
        import mod_s
        for i in range(3):
            mod_s.step(i)
    """, name="worker.py")
    parent = script(tmp_path / "a", f"""
        import subprocess, sys
        import mod_s
        subprocess.run([sys.executable, {str(worker)!r}], check=True)
    """, name="launch.py")
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--step-fn", "mod_s:step", "--", PY, parent],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cuptiprof: error" not in r.stderr and r.stderr.count("mod_s has no step") == 1, r.stderr
    assert r.stderr.strip().startswith("cuptiprof: warning:")
    assert [k for k, _ in _steps(tmp_path / "w.duckdb")] == ["step"] * 3


@pytest.mark.parametrize("body, spec, said", [
    (MAIN, "__main__:denoise_step", "the main script defined no denoise_step"),
    (NESTED, "__main__:main.nothere", "main defines no function nothere")])
def test_step_fn_missing_from_the_main_script(tmp_path, body, spec, said):
    p = script(tmp_path, body, name="infer.py")
    r = cli(["run", "-o", "n.duckdb", "--no-report", "--step-fn", spec, "--", PY, p], tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuptiprof: error:") and said in lines[0], r.stderr


def test_step_fn_found_in_one_of_several_processes(tmp_path):
    # Like torchrun: the parent's own main script has no step; the worker's has.
    worker = script(tmp_path, MAIN, name="worker.py")
    parent = script(tmp_path, f"""
        import subprocess, sys
        subprocess.run([sys.executable, {str(worker)!r}], check=True)
    """, name="launch.py")
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--step-fn", "__main__:step", "--",
             PY, parent], tmp_path)
    assert r.returncode == 0, r.stderr
    # the parent's script without it is no problem once a worker's has it: no warning either
    assert "warning" not in r.stderr and "defined no" not in r.stderr, r.stderr
    assert [k for k, _ in _steps(tmp_path / "w.duckdb")] == ["step"] * 6


def _other_pythons(probe: str = "import sys; sys.monitoring"):
    """Other interpreters on PATH or under pyenv (where its shims may not run them) that run
    `probe`: by default Python 3.12+."""
    cands = [shutil.which(n) for n in ("python3.10", "python3.12", "python3.13")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    cands += sorted(str(p) for p in pyenv.glob("3.1[02-9]*/bin/python3"))
    found = []
    for exe in filter(None, cands):
        try:
            ok = subprocess.run([exe, "-c", probe], capture_output=True,
                                timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            found.append(exe)
    return found


def _with_site(tmp_path, site: str):
    """An environment whose Python runs `site` (cuptiprof importable) as its sitecustomize."""
    d = tmp_path / "site"
    d.mkdir(exist_ok=True)
    (d / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                                        + textwrap.dedent(site))
    return {**os.environ, "PYTHONPATH": str(d)}


# A watch for `step` that counts the calls of the function it hooks, said at exit.
COUNTED_STEP = """
    import atexit
    from cuptiprof.run import main_hook
    calls = []
    def found(mod):
        f = mod.step
        def wrapped(*a):
            calls.append(1)
            return f(*a)
        mod.step = wrapped
    main_hook.watch("step", found)
    atexit.register(lambda: print("state", main_hook.state(), "calls", len(calls)))
"""


@pytest.mark.parametrize("exe", _other_pythons("import sys; sys.orig_argv") or [pytest.param(
    None, marks=pytest.mark.skip(reason="no other Python 3.10+ on PATH or under pyenv"))])
def test_main_hook_on_other_pythons(tmp_path, exe):
    """Python 3.12+ watches only the main script's own lines (sys.monitoring) and gives the
    tool id back once the def is found; 3.10 uses the trace function and removes it."""
    env = _with_site(tmp_path, COUNTED_STEP)
    p = script(tmp_path, MAIN.replace(
        'print("trace after def:", sys.gettrace())',
        'print("after def:", sys.gettrace(), getattr(sys, "monitoring", None) and '
        'sys.monitoring.get_tool(3))'))
    script(tmp_path, PROBE, name="probe.py")
    p.write_text(p.read_text().replace("import sys\n", "import sys\n"
                                       "print('traced before def:', sys.gettrace() is not None)\n"))
    r = subprocess.run([exe, str(p)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    monitoring = subprocess.run([exe, "-c", "import sys; sys.monitoring"],
                                capture_output=True).returncode == 0
    assert f"traced before def: {not monitoring}" in r.stdout
    assert "after def: None None" in r.stdout
    assert "import after def: builtins" in r.stdout
    assert "traced in import: False" in r.stdout
    assert "x 64" in r.stdout and "state found calls 6" in r.stdout
    # A script without the function: the watch ends with the script.
    q_ = script(tmp_path, "x = 1\n", name="plain.py")
    r = subprocess.run([exe, str(q_)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "state missing calls 0" in r.stdout


def test_main_hook_keeps_a_trace_function_set_before_the_script(tmp_path):
    """A debugger or coverage tool whose trace function was set before the main script ran
    still sees every line of the script, before the def and after it, while the def is
    watched for; and it is still set once the def is found."""
    env = _with_site(tmp_path, COUNTED_STEP + """
    lines = set()
    def tracer(frame, event, arg):
        if frame.f_code.co_filename.endswith("traced.py") and frame.f_code.co_name == "<module>":
            def local(frame, event, arg):
                lines.add(frame.f_lineno)
                return local
            return local
    sys.settrace(tracer)
    atexit.register(lambda: print("lines", sorted(lines)))
    """)
    p = script(tmp_path, MAIN, name="traced.py")
    r = subprocess.run([PY, str(p)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "state found calls 6" in r.stdout and "trace after def: <function tracer" in r.stdout
    src = p.read_text().splitlines()
    want = [src.index(ln) + 1 for ln in ("class Pipe:", "x, p = 1, Pipe()", 'print("x", x)')]
    seen = eval(next(ln for ln in r.stdout.splitlines() if ln.startswith("lines "))[6:])
    assert set(want) <= set(seen), (want, seen)

def test_main_module_name():
    from cuptiprof.run.main_hook import main_module_name

    assert main_module_name(["python", "-u", "-X", "dev", "dir/infer.py", "a"]) == "infer"
    assert main_module_name(["python", "-m", "pkg.app", "x.py"]) == "pkg.app"
    assert main_module_name(["python", "-mpkg.app"]) == "pkg.app"
    assert main_module_name(["python", "-c", "import infer"]) is None
    assert main_module_name(["python"]) is None
    assert main_module_name(["/usr/bin/torchrun-script", "--nproc", "2"]) is None


def test_main_module_name_with_options_run_together():
    """Python takes short options run together (`python -um pkg.app`, `-uW ignore`) and the
    values of -W and --check-hash-based-pycs as the next word: the script's name is found
    past them, so `--step-fn infer:step` watches the script that runs as __main__."""
    from cuptiprof.run.main_hook import main_module_name

    assert main_module_name(["python", "-um", "pkg.app"]) == "pkg.app"
    assert main_module_name(["python", "-Bmpkg.app"]) == "pkg.app"
    assert main_module_name(["python", "-uW", "ignore", "infer.py"]) == "infer"
    assert main_module_name(["python", "-W", "ignore", "infer.py"]) == "infer"
    assert main_module_name(["python", "-uWignore", "infer.py"]) == "infer"
    assert main_module_name(["python", "-OX", "dev", "infer.py"]) == "infer"
    assert main_module_name(["python", "--check-hash-based-pycs", "always", "infer.py"]) == "infer"
    assert main_module_name(["python", "-Bc", "run.py"]) is None         # code, not a script
    assert main_module_name(["python", "-", "infer.py"]) is None    # the script is stdin


def test_a_run_that_ends_in_warmup_keeps_its_ranges(tmp_path):
    """Everything is written at exit; pyarrow's first array imports pandas when installed, which
    at exit used to fail and lose the process's part file. A stand-in pandas does what pandas'
    import does first (concurrent.futures' thread pool registers an exit hook)."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pandas.py").write_text("import concurrent.futures.thread\n"
                                    "raise ImportError('stand-in pandas')\n")
    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.range("step", step=0):
            pass
    """)
    r = cli(["run", "-o", "e.duckdb", "--no-report", "--warmup", "2", "--steps", "3", "--", PY, p],
            tmp_path, PYTHONPATH=f"{ROOT}{os.pathsep}{fake}")
    assert r.returncode == 0, r.stderr
    assert "could not finish" not in r.stderr
    assert _steps(tmp_path / "e.duckdb") == [("warmup", 0)]
    assert q(tmp_path / "e.duckdb", "SELECT count(*) FROM processes WHERE ended_early") == [(0,)]


@pytest.mark.skipif(not _other_pythons(), reason="no other Python on PATH")
def test_a_python_without_the_libraries_is_not_profiled_and_not_broken(tmp_path):
    exe = _other_pythons()[0]   # a bare interpreter: no numpy, pyarrow or duckdb
    if subprocess.run([exe, "-c", "import duckdb"], capture_output=True).returncode == 0:
        pytest.skip(f"{exe} has duckdb")
    p = script(tmp_path, MAIN, name="infer.py")
    r = cli(["run", "-o", "b.duckdb", "--no-report", "--step-fn", "__main__:step", "--", exe, p],
            tmp_path)
    assert "x 64" in r.stdout                         # the program ran untouched
    assert "cannot import" in r.stderr and "this process is not profiled" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_step_fn_never_found_leaves_no_parts_folder_beside_the_file(tmp_path):
    """The program recorded ranges but --step-fn found nothing to mark: one error line, the
    file with its ranges written, and its OUT.parts folder (holding a part) removed."""
    p = script(tmp_path, """
        import cuptiprof
        with cuptiprof.range("attention"):
            pass
    """, name="infer.py")
    r = cli(["run", "-o", "n.duckdb", "--no-report", "--step-fn", "__main__:nothere", "--", PY,
             p], tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuptiprof: error:"), r.stderr
    assert q(tmp_path / "n.duckdb", "SELECT name FROM ranges WHERE kind = 'user'") == [("attention",)]
    assert not (tmp_path / "n.duckdb.parts").exists()
