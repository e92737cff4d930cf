"""Steps without editing the code (--step-fn, --step-range), --warmup/--steps counts, logs,
light mode and --overhead, on real child processes."""
from __future__ import annotations

import os
import sys
import textwrap

import pytest

from _run_helpers import cli, one_line_error, q, script

PY = sys.executable


# Five "iteration" NVTX ranges with an inner range each (the --step-range tests).
NVTX_ITERATIONS = """
        import nvtx
        for i in range(5):
            nvtx.push_range("iteration")
            nvtx.push_range("inner")
            nvtx.pop_range()
            nvtx.pop_range()
"""


def _steps(out):
    return q(out, "SELECT kind, step FROM ranges WHERE kind IN ('step', 'warmup') ORDER BY start_ns")


def test_step_fn_wraps_a_real_method(tmp_path):
    script(tmp_path, """
        class Scheduler:
            calls = 0
            def step(self, x, eta=0.0):
                Scheduler.calls += 1
                return x + 1
    """, name="sched_mod.py")
    p = script(tmp_path, """
        import inspect
        from sched_mod import Scheduler
        s = Scheduler()
        x = 0
        for i in range(6):
            x = s.step(x)
        assert x == 6 and Scheduler.calls == 6      # the wrapped method still works
        # and still looks like itself to a program that inspects it (diffusers passes `eta`
        # only to a scheduler whose step's signature has it)
        assert s.step.__name__ == "step" and "eta" in inspect.signature(s.step).parameters
        print("x", x)
    """)
    r = cli(["run", "-o", "f.duckdb", "--no-report", "--step-fn", "sched_mod:Scheduler.step",
             "--warmup", "2", "--steps", "3", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 6" in r.stdout
    # two warm-up steps, three recorded, then nothing more
    assert _steps(tmp_path / "f.duckdb") == [("warmup", 0), ("warmup", 1), ("step", 2), ("step", 3),
                                             ("step", 4)]


@pytest.mark.parametrize("qual", ["Sched.scale", "Sched.make", "Sched.make.inner", "Sub.scale",
                                  "Sub.make"])
def test_step_fn_on_static_and_class_methods(tmp_path, qual):
    """A staticmethod or classmethod stays one, called on the class or an instance, also when
    named through a subclass that inherits it; a function defined inside a classmethod is
    reached through it: each call is one step."""
    script(tmp_path, """
        class Sched:
            @staticmethod
            def scale(x):
                return x * 2

            @classmethod
            def make(cls, x):
                def inner(y):
                    return y + 1
                return cls.__name__, inner(x)

        class Sub(Sched):
            pass
    """, name="kinds_mod.py")
    p = script(tmp_path, """
        from kinds_mod import Sub
        s = Sub()
        print("calls", Sub.scale(1), s.scale(2), Sub.make(1), s.make(2))
    """)
    r = cli(["run", "-o", "k.duckdb", "--no-report", "--step-fn", f"kinds_mod:{qual}", "--", PY, p],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert "calls 2 4 ('Sub', 2) ('Sub', 3)" in r.stdout, r.stdout + r.stderr
    assert _steps(tmp_path / "k.duckdb") == [("step", 0), ("step", 1)]

def test_step_fn_missing_attribute(tmp_path):
    script(tmp_path, "def other(): pass\n", name="mod_a.py")
    p = script(tmp_path, "import mod_a\n")
    r = cli(["run", "-o", "g.duckdb", "--no-report", "--step-fn", "mod_a:nothere", "--", PY, p],
            tmp_path)
    assert r.returncode == 2
    # one line, said once (not also as a warning by the process that imported mod_a)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuptiprof: error:"), r.stderr
    assert "mod_a has no nothere" in lines[0] and "no steps" in lines[0]


def test_step_fn_that_calls_itself_is_one_step_a_call(tmp_path):
    """The calls a --step-fn function makes of itself are part of the step of the outermost
    call: three calls are three steps with no range inside them, however deep each went."""
    script(tmp_path, "def walk(n):\n    return 0 if n == 0 else 1 + walk(n - 1)\n",
           name="rec_mod.py")
    p = script(tmp_path, "import rec_mod\nprint('depths', [rec_mod.walk(4) for _ in range(3)])\n")
    r = cli(["run", "-o", "r.duckdb", "--no-report", "--step-fn", "rec_mod:walk", "--", PY, p],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert "depths [4, 4, 4]" in r.stdout
    assert q(tmp_path / "r.duckdb", "SELECT kind, step FROM ranges ORDER BY start_ns") == [
        ("step", 0), ("step", 1), ("step", 2)]


def test_step_fn_call_that_raises_ends_its_step(tmp_path):
    """A call of the --step-fn function that raises (the program catches it and goes on) ends
    its step there, flagged step_incomplete, and the next call is the next step."""
    script(tmp_path, "def work(i):\n    if i == 1:\n        raise ValueError('oom')\n    return i\n",
           name="exc_mod.py")
    p = script(tmp_path, """
        import exc_mod
        for i in range(3):
            try:
                exc_mod.work(i)
            except ValueError:
                print("retry", i)
    """)
    r = cli(["run", "-o", "e.duckdb", "--no-report", "--step-fn", "exc_mod:work", "--", PY, p],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert "retry 1" in r.stdout
    out = tmp_path / "e.duckdb"
    assert _steps(out) == [("step", 0), ("step", 1), ("step", 2)]
    assert q(out, "SELECT subject, detail LIKE '%ValueError%' FROM data_quality "
                  "WHERE check_name = 'step_incomplete'") == [("1", True)]


@pytest.mark.parametrize("qual", ["denoise", "frames", "stream"])
def test_step_fn_on_async_and_generator_functions_covers_their_run(tmp_path, qual):
    """An async def's step holds what it does until it returns, not only the creation of its
    coroutine; a generator's (sync or async) holds its whole iteration: each call is one step
    with the work ranges it opened inside it."""
    script(tmp_path, """
        import asyncio, cuptiprof

        async def denoise(i):
            await asyncio.sleep(0)
            with cuptiprof.range("work"):
                pass
            return i

        def frames(n):
            for i in range(n):
                with cuptiprof.range("work"):
                    pass
                got = yield i
                assert got is None

        async def stream(n):
            for i in range(n):
                await asyncio.sleep(0)
                with cuptiprof.range("work"):
                    pass
                yield i
    """, name="gen_mod.py")
    p = script(tmp_path, """
        import asyncio, gen_mod

        async def main():
            return [await gen_mod.denoise(i) for i in range(3)], \
                   [[x async for x in gen_mod.stream(2)] for _ in range(3)]
        print("got", asyncio.run(main()), [list(gen_mod.frames(2)) for _ in range(3)])
    """)
    r = cli(["run", "-o", "a.duckdb", "--no-report", "--step-fn", f"gen_mod:{qual}", "--", PY, p],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert "got ([0, 1, 2], [[0, 1], [0, 1], [0, 1]]) [[0, 1], [0, 1], [0, 1]]" in r.stdout
    per = 1 if qual == "denoise" else 2
    assert q(tmp_path / "a.duckdb", f"""
        SELECT s.step, count(w.range_id) FROM ranges s
        LEFT JOIN ranges w ON w.name = 'work' AND w.start_ns >= s.start_ns AND w.end_ns <= s.end_ns
        WHERE s.kind = 'step' GROUP BY s.step ORDER BY s.step""") == [(i, per) for i in range(3)]


def test_step_fn_naming_something_not_a_function(tmp_path):
    """--step-fn naming a module's constant: the one error says it is not a function (not that
    the program never called it)."""
    script(tmp_path, "LIMIT = 3\n", name="mod_c.py")
    p = script(tmp_path, "import mod_c\n")
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--step-fn", "mod_c:LIMIT", "--", PY, p],
            tmp_path)
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert "--step-fn mod_c:LIMIT: LIMIT is not a function" in r.stderr


@pytest.mark.parametrize("spec", ["builtins:len", "builtins:str.join"])
def test_step_fn_naming_a_builtin_is_refused_before_the_program_runs(tmp_path, spec):
    """--step-fn builtins:len wrapped every len() of the process, cuptiprof's own included: a
    C function has no step of the program in it. The launcher tells before the program runs."""
    r = cli(["run", "-o", "b.duckdb", "--no-report", "--step-fn", spec, "--", PY, "-c",
             "print('ran')"], tmp_path)
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert f"--step-fn {spec}:" in r.stderr and "needs a Python function" in r.stderr, r.stderr
    assert "ran" not in r.stdout and not (tmp_path / "b.duckdb").exists()


@pytest.mark.parametrize("qual", ["fast", "Words.join"])
def test_step_fn_naming_a_c_function_of_a_python_module_is_refused(tmp_path, qual):
    """A C function (a builtin under another name, a method a class inherits from a C type)
    is found only as the process imports the module: refused there, said by the launcher."""
    script(tmp_path, "fast = len\nclass Words(str):\n    pass\n", name="mod_k.py")
    p = script(tmp_path, "import mod_k\nprint(mod_k.fast('ab'), mod_k.Words(',').join('xy'))\n")
    r = cli(["run", "-o", "k.duckdb", "--no-report", "--step-fn", f"mod_k:{qual}", "--", PY, p],
            tmp_path)
    assert "2 x,y" in r.stdout, r.stderr
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert f"--step-fn mod_k:{qual}:" in r.stderr and "needs a Python function" in r.stderr, \
        r.stderr


def test_step_fn_naming_a_class_leaves_the_class_alone(tmp_path):
    """--step-fn naming a class (its method left off): the class stays a class, so the
    program's isinstance checks and subclasses still work, and the one error says to name a
    method of it."""
    script(tmp_path, "class UNet:\n    def forward(self, x):\n        return x\n", name="cls_mod.py")
    p = script(tmp_path, """
        import cls_mod
        class Big(cls_mod.UNet):
            pass
        print("isinstance", isinstance(Big().forward(Big()), cls_mod.UNet))
    """)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--step-fn", "cls_mod:UNet", "--", PY, p],
            tmp_path)
    assert "isinstance True" in r.stdout, r.stderr
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert "--step-fn cls_mod:UNet: UNet is a class: name one of its methods" in r.stderr


@pytest.mark.parametrize("name, says", [
    ("model", "model is a Denoiser object, not a function: name a method of its class "
              "(obj_mod:Denoiser.forward)"),
    ("part", "part is a functools.partial, not a function: name the function it calls (scale)"),
    # a decorator's wrapper, a callable of C code: "name a method of its class
    # (functools:_lru_cache_wrapper.__call__)", a method no one can name
    ("cached", "cached is a _lru_cache_wrapper object, not a function: it wraps the function "
               "obj_mod:cached; name a function that calls it, or mark its calls with "
               "cuptiprof.step(...)"),
    ("first", "first is an itemgetter object, not a function: name a function that calls it, or "
              "mark its calls with cuptiprof.step(...)"),
])
def test_step_fn_naming_a_callable_object_leaves_it_alone(tmp_path, name, says):
    """--step-fn naming a model instance or a functools.partial put a function in its place:
    the program's model.eval() (or part.func) then failed with AttributeError, the run ended
    after one step. The object stays as it was, and the one error names what to give."""
    script(tmp_path, """
        import functools
        import operator

        class Denoiser:
            def forward(self, x):
                return x

            def __call__(self, x):
                return self.forward(x)

            def eval(self):
                return self

        def scale(k, x):
            return k * x

        model = Denoiser()
        part = functools.partial(scale, 2)
        first = operator.itemgetter(0)

        @functools.lru_cache
        def cached(x):
            return x
    """, name="obj_mod.py")
    p = script(tmp_path, """
        import obj_mod
        for i in range(3):
            obj_mod.model.eval()(i)
            print("part", obj_mod.part.func.__name__, obj_mod.part(i))
        print("done")
    """)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--light", "--step-fn", f"obj_mod:{name}",
             "--", PY, p], tmp_path)
    assert "done" in r.stdout, r.stderr
    assert r.returncode == 2
    one_line_error(r.stderr)
    assert f"--step-fn obj_mod:{name}: {says}" in r.stderr, r.stderr


def test_step_range_from_nvtx(tmp_path):
    p = script(tmp_path, NVTX_ITERATIONS)
    r = cli(["run", "-o", "r.duckdb", "--no-report", "--step-range", "iteration", "--warmup", "1",
             "--steps", "2", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _steps(tmp_path / "r.duckdb") == [("warmup", 0), ("step", 1), ("step", 2)]


@pytest.mark.parametrize("use", ["with", "decorator"])
def test_step_range_from_nvtx_annotate(tmp_path, use):
    """nvtx.annotate pushes through the C library, past nvtx.push_range: it is hooked too."""
    pytest.importorskip("nvtx")
    body = ("with nvtx.annotate('iteration', color='blue'):\n                sum(range(100))" if use == "with"
            else "step_fn()")
    p = script(tmp_path, f"""
        import nvtx
        @nvtx.annotate("iteration")
        def step_fn():
            return sum(range(100))
        for i in range(4):
            {body}
        with nvtx.annotate("other"):
            pass
    """)
    r = cli(["run", "-o", "a.duckdb", "--no-report", "--step-range", "iteration", "--warmup", "1",
             "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _steps(tmp_path / "a.duckdb") == [("warmup", 0), ("step", 1), ("step", 2), ("step", 3)]


@pytest.mark.parametrize("use", ["with", "decorator"])
def test_a_step_range_from_nvtx_annotate_that_raises_is_marked_incomplete(tmp_path, use):
    pytest.importorskip("nvtx")
    body = ("with nvtx.annotate('iteration'):\n                    step_fn(i)" if use == "with"
            else "step_fn(i)")
    p = script(tmp_path, f"""
        import nvtx
        def step_fn(i):
            if i == 1:
                raise ValueError("bad batch")
        if {use == "decorator"}:
            step_fn = nvtx.annotate("iteration")(step_fn)
        for i in range(3):
            try:
                {body}
            except ValueError:
                pass
    """)
    r = cli(["run", "-o", "a.duckdb", "--no-report", "--light", "--step-range", "iteration",
             "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "a.duckdb"
    assert _steps(out) == [("step", 0), ("step", 1), ("step", 2)]
    assert q(out, "SELECT subject FROM data_quality WHERE check_name = 'step_incomplete' "
                  "AND detail LIKE '%ValueError%'") == [("1",)]


def test_warmup_and_steps_with_cuptiprof_range(tmp_path):
    p = script(tmp_path, """
        import cuptiprof
        for i in range(10):
            with cuptiprof.range("step", step=i):
                with cuptiprof.range("inner"):
                    pass
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--warmup", "3", "--steps", "4", "--", PY, p],
            tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "w.duckdb"
    assert [s for k, s in _steps(out) if k == "step"] == [3, 4, 5, 6]
    assert [s for k, s in _steps(out) if k == "warmup"] == [0, 1, 2]
    # user ranges carry the step that encloses them; none after the recorded steps
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE name='inner' AND kind='user'") \
        == [([0, 1, 2, 3, 4, 5, 6],)]


@pytest.mark.parametrize("mode, extra", [(["--light"], {}), ([], {}),
                                         ([], {"CUPTIPROF_FAKE_CUPTI": "1"})],
                         ids=["light", "cpu", "collector"])
@pytest.mark.parametrize("counts, short", [
    (["--warmup", "1", "--steps", "5"], (2, "5 steps were asked for after 1 warm-up steps; 2 were recorded")),
    (["--warmup", "5"], (0, "3 steps were marked, all within the 5 warm-up steps")),
    (["--warmup", "1", "--steps", "2"], None)])
def test_fewer_steps_than_asked_for_are_said_in_data_quality(tmp_path, mode, extra, counts, short):
    """A program that marks fewer steps than --warmup/--steps ask for gets a steps_short row,
    with the CUPTI collector and without (the CPU ops, --light) alike."""
    p = script(tmp_path, """
        import subprocess, sys, cuptiprof
        subprocess.run([sys.executable, "-c", "pass"], check=True)   # a helper marks no step
        for i in range(3):
            with cuptiprof.step(i):
                pass
    """)
    r = cli(["run", "-o", "s.duckdb", "--no-report", *mode, *counts, "--", PY, p], tmp_path,
            **extra)
    assert r.returncode == 0, r.stderr
    rows = q(tmp_path / "s.duckdb", "SELECT count, detail FROM data_quality "
                                    "WHERE check_name = 'steps_short'")
    if short is None:
        assert rows == []
    else:
        assert len(rows) == 1 and rows[0][0] == short[0] and rows[0][1].startswith(short[1]), rows


@pytest.mark.parametrize("option, says", [
    (["--step-range", "nope"], "--step-range nope: the program opened no range named 'nope'"),
    (["--step-fn", "stepmod:never"], "--step-fn stepmod:never: the program never called it"),
])
def test_a_step_option_that_marked_nothing_beside_the_programs_own_steps_is_said(
        tmp_path, option, says):
    """The steps then are the program's own cuptiprof.range('step'), not those the option
    asked for: a line says so, where it said nothing."""
    script(tmp_path, "def never():\n    pass\n", name="stepmod.py")
    p = script(tmp_path, """
        import cuptiprof, stepmod
        for i in range(3):
            with cuptiprof.step(i):
                pass
    """)
    r = cli(["run", "-o", "o.duckdb", "--no-report", "--light", *option, "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: warning:")]
    assert len(warnings) == 1 and says in warnings[0], r.stderr
    assert "cuptiprof.range('step')" in warnings[0]
    assert [s for k, s in _steps(tmp_path / "o.duckdb")] == [0, 1, 2]


@pytest.mark.parametrize("mode, extra", [(["--light"], {}), ([], {"CUPTIPROF_FAKE_CUPTI": "1"})],
                         ids=["light", "collector"])
@pytest.mark.parametrize("option, says", [
    (["--step-range", "attn"], "--step-range attn: every range named 'attn' the program opened was "
                               "inside a step the program marks itself, where it is a range of "
                               "that step"),
    (["--step-fn", "__main__:attn"], "--step-fn __main__:attn: every call of it was inside a step "
                                     "the program marks itself, where it is a range of that step"),
])
def test_a_step_option_whose_every_range_was_inside_the_programs_own_steps_is_said(
        tmp_path, option, says, mode, extra):
    """A --step-range/--step-fn named a range or function the program opens or calls only
    inside its own cuptiprof.range('step'): the run's steps were the program's. --step-range
    said nothing, --step-fn said the program never called it (it did, three times)."""
    p = script(tmp_path, """
        import cuptiprof

        def attn():
            pass

        for i in range(3):
            with cuptiprof.step(i):
                with cuptiprof.range("attn"):
                    attn()
    """)
    r = cli(["run", "-o", "o.duckdb", "--no-report", *mode, *option, "--", PY, p], tmp_path,
            **extra)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: warning:")]
    assert warnings == [f"cuptiprof: warning: {says}; the steps in o.duckdb are the ones it marks "
                        "itself with cuptiprof.range('step')"], r.stderr
    assert [s for k, s in _steps(tmp_path / "o.duckdb")] == [0, 1, 2]


@pytest.mark.parametrize("option, says", [
    (["--step-range", "attn"], "--step-range attn: every range named 'attn' the program "
                               "opened was inside a step the program marks itself"),
    (["--step-range", "nope"], "--step-range nope: the program opened no range named 'nope'"),
], ids=["inside", "never"])
def test_overhead_says_once_that_the_steps_measured_are_the_programs_own(tmp_path, option, says):
    """Under --overhead the line saying that a --step-range/--step-fn marked no step beside the
    program's own steps was never shown (the measurement runs are quiet): the steps measured
    were the program's, without a word. It is said once, after the runs."""
    p = script(tmp_path, """
        import cuptiprof

        for i in range(3):
            with cuptiprof.step(i):
                with cuptiprof.range("attn"):
                    pass
    """)
    r = cli(["run", "--overhead", "--repeat", "1", "--light", *option, "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("cuptiprof: warning:")]
    assert len(warnings) == 1 and says in warnings[0], r.stderr
    assert warnings[0].endswith("; the steps measured are the ones it marks itself with "
                                "cuptiprof.range('step')"), r.stderr
    assert "/tmp/cuptiprof-overhead-" not in r.stderr


@pytest.mark.parametrize("mode, extra", [(["--light"], {}), ([], {"CUPTIPROF_FAKE_CUPTI": "1"})],
                         ids=["light", "collector"])
@pytest.mark.parametrize("name", ["step", "iteration"])
def test_a_step_range_the_program_opens_with_cuptiprof_range_is_the_step(tmp_path, name, mode,
                                                                         extra):
    """--step-range NAME makes a cuptiprof.range(NAME) a step, with the CUPTI collector as
    without it (the collector took it for a user range: a run without steps), and no warning."""
    p = script(tmp_path, f"""
        import cuptiprof
        for i in range(3):
            with cuptiprof.range({name!r}):
                pass
    """)
    r = cli(["run", "-o", "o.duckdb", "--no-report", *mode, "--step-range", name, "--", PY, p],
            tmp_path, **extra)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr
    assert q(tmp_path / "o.duckdb", "SELECT name, step FROM ranges WHERE kind = 'step' "
                                    "ORDER BY step") == [(name, 0), (name, 1), (name, 2)]


def test_a_step_inside_a_step_is_a_range_of_it(tmp_path):
    """Steps do not nest: a range named step opened inside a step is a range of that step, and
    counts for neither warm-up nor --steps."""
    p = script(tmp_path, """
        import cuptiprof
        for i in range(3):
            with cuptiprof.range("step"):
                with cuptiprof.range("step"):
                    pass
    """)
    r = cli(["run", "-o", "n.duckdb", "--no-report", "--light", "--warmup", "1", "--steps", "1",
             "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "n.duckdb", "SELECT kind, step, depth FROM ranges ORDER BY start_ns") == [
        ("warmup", 0, 0), ("user", 0, 1), ("step", 1, 0), ("user", 1, 1)]


def test_logs_table(tmp_path):
    p = script(tmp_path, """
        import logging, cuptiprof
        logging.basicConfig(level=logging.DEBUG, format="PROG %(levelname)s %(message)s")
        log = logging.getLogger("app")
        log.debug("debug detail")
        with cuptiprof.range("step", step=0):
            log.info("VAE decode started")
        log.warning("careful")
    """)
    r = cli(["run", "-o", "l.duckdb", "--no-report", "--log-level", "INFO", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "PROG INFO VAE decode started" in r.stderr      # the program's own logging still works
    assert "step 0:" not in r.stderr      # cuptiprof's step durations: the logs table, not its handlers
    out = tmp_path / "l.duckdb"
    rows = q(out, "SELECT level, logger, message, step FROM logs WHERE logger='app' ORDER BY time_ns")
    assert rows == [("INFO", "app", "VAE decode started", 0), ("WARNING", "app", "careful", None)]
    own = q(out, "SELECT message FROM logs WHERE logger='cuptiprof'")
    assert len(own) == 1 and own[0][0].startswith("step 0: ") and own[0][0].endswith(" ms")
    assert q(out, "SELECT thread_id IS NOT NULL AND time_ns > 0 FROM logs LIMIT 1") == [(True,)]
    # INFO is the default level (run --help): without --log-level, the same records
    r = cli(["run", "-o", "d.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "d.duckdb", "SELECT level, logger, message, step FROM logs WHERE "
             "logger='app' ORDER BY time_ns") == rows


def test_logs_of_warm_up_steps_and_steps_beyond_the_last_have_no_step_in_light_mode(tmp_path):
    """As with the collector: a record logged in a warm-up step, or in a step beyond --steps,
    belongs to no recorded step."""
    p = script(tmp_path, """
        import logging, cuptiprof
        for i in range(3):
            with cuptiprof.range("step", step=i):
                logging.getLogger("app").warning("in step %d", i)
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--light", "--warmup", "1", "--steps", "1",
             "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "w.duckdb", "SELECT message, step FROM logs WHERE logger = 'app' "
                                    "ORDER BY time_ns") == [
        ("in step 0", None), ("in step 1", 1), ("in step 2", None)]

def test_light_mode_says_what_is_missing(tmp_path):
    p = script(tmp_path, "import cuptiprof\nwith cuptiprof.range('step', step=0): pass\n")
    r = cli(["run", "-o", "li.duckdb", "--no-report", "--light", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "li.duckdb"
    assert q(out, "SELECT count(*) FROM kernel_rows") == [(0,)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name='missing_kind'") == [(1,)]
    assert q(out, "SELECT source FROM runs") == [("light",)]   # not 'cpu' / 'cupti': no op was timed


def test_overhead_reports_both_latencies(tmp_path):
    p = script(tmp_path, """
        import time, cuptiprof
        for i in range(4):
            with cuptiprof.range("step", step=i):
                time.sleep(0.01)
    """)
    r = cli(["run", "--overhead", "--repeat", "1", "--warmup", "1", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "per step" in r.stdout and "end to end" in r.stdout and "diff_pct" in r.stdout
    line = next(l for l in r.stdout.splitlines() if l.startswith("per step"))
    base_ms = float(line.split(")", 1)[1].split()[0])   # 'per step (...)  X ms  Y ms ...'
    assert 9.0 <= base_ms < 200                 # the 10 ms sleep, measured without profiling
    assert not list(tmp_path.glob("*.duckdb"))  # the measurement runs leave nothing behind
    assert "note: one run of each kind: run-to-run noise is unknown" in r.stdout


def test_overhead_says_when_the_difference_is_within_the_noise():
    """On a busy machine the runs with profiling can read faster than those without: when the
    spreads overlap the table's difference is noise, and a line says so."""
    from cuptiprof.run.overhead import noise_notes
    # (ms per step, wall s) of each run
    overlap = {"base": [(6.7, 1.47), (0.1, 1.40)], "prof": [(1.4, 2.80), (9.0, 2.90)]}
    notes = noise_notes(overlap)
    assert len(notes) == 1 and notes[0].startswith("note: per step: the spreads with and without "
                                                   "profiling overlap")
    apart = {"base": [(1.0, 1.0), (1.1, 1.1)], "prof": [(2.0, 2.0), (2.2, 2.1)]}
    assert noise_notes(apart) == []


def test_existing_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    p = script(tmp_path, """
        import os, cuptiprof
        print("site:", os.environ.get("USER_SITECUSTOMIZE"))
        with cuptiprof.range("step", step=0):
            pass
    """)
    from _run_helpers import ROOT

    r = cli(["run", "-o", "sc.duckdb", "--no-report", "--", PY, p], tmp_path,
            PYTHONPATH=f"{ROOT}{os.pathsep}{site}")
    assert r.returncode == 0, r.stderr
    assert "site: ran" in r.stdout
    assert q(tmp_path / "sc.duckdb", "SELECT count(*) FROM ranges WHERE kind='step'") == [(1,)]


def test_step_range_from_torch_nvtx_on_cpu(tmp_path):
    import pytest

    pytest.importorskip("torch")
    p = script(tmp_path, """
        import torch
        x = torch.ones(8, 8)
        for i in range(4):
            torch.cuda.nvtx.range_push("denoise_step")   # raises on a CPU build without cuptiprof
            x = x @ x / 8
            torch.cuda.nvtx.range_pop()
    """)
    r = cli(["run", "-o", "tn.duckdb", "--no-report", "--step-range", "denoise_step", "--steps", "3",
             "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "tn.duckdb"
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE kind='step'") == [([0, 1, 2],)]
    assert q(out, "SELECT count(*) > 0 FROM kernels WHERE name = 'aten::mm'") == [(True,)]


def test_step_range_drives_the_collector(tmp_path):
    """--step-range over Python NVTX calls counts warm-up and recorded steps live in the CUPTI
    collector too (fake CUPTI): kernels only in the recorded steps, one step range per step."""
    p = script(tmp_path, NVTX_ITERATIONS)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--step-range", "iteration", "--warmup", "1",
             "--steps", "2", "--", PY, p], tmp_path, CUPTIPROF_FAKE_CUPTI="1")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "c.duckdb"
    assert _steps(out) == [("warmup", 0), ("step", 1), ("step", 2)]
    assert q(out, "SELECT list(DISTINCT step ORDER BY step) FROM kernels") == [([1, 2],)]


def test_a_step_cut_by_ctrl_c_is_marked_incomplete(tmp_path):
    p = script(tmp_path, """
        import os, signal, time
        import cuptiprof
        for i in range(5):
            with cuptiprof.range("step", step=i):
                time.sleep(0.01)
                if i == 3:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)
    """)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 130, r.stderr
    out = tmp_path / "c.duckdb"
    assert _steps(out) == [("step", 0), ("step", 1), ("step", 2), ("step", 3)]
    assert q(out, "SELECT subject FROM data_quality WHERE check_name = 'step_incomplete' "
                  "AND detail LIKE '%KeyboardInterrupt%'") == [("3",)]


def test_step_fn_in_a_lazily_loaded_package(tmp_path):
    """Packages such as diffusers replace themselves in sys.modules with a lazy module that
    imports a class on first access: --step-fn pkg:Class.method reaches the class through it."""
    pkg = tmp_path / "lazypkg"
    pkg.mkdir()
    (pkg / "models.py").write_text("class UNet:\n    def forward(self, x):\n        return x + 1\n")
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import importlib, sys, types

        class _Lazy(types.ModuleType):
            def __getattr__(self, name):
                if name == "UNet":
                    return importlib.import_module(__name__ + ".models").UNet
                raise AttributeError(name)

        lazy = _Lazy(__name__)
        lazy.__path__ = __path__
        sys.modules[__name__] = lazy
    """))
    p = script(tmp_path, """
        from lazypkg import UNet
        m, x = UNet(), 0
        for i in range(4):
            x = m.forward(x)
        print("x", x)
    """)
    r = cli(["run", "-o", "z.duckdb", "--no-report", "--step-fn", "lazypkg:UNet.forward", "--",
             PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x 4" in r.stdout
    assert _steps(tmp_path / "z.duckdb") == [("step", i) for i in range(4)]


def test_step_fn_on_a_torch_compiled_module_leaves_its_graph_alone(tmp_path):
    """torch.compile must not trace the step wrapper or the bookkeeping: the program compiles to
    the same graphs with and without --step-fn (it was 7 graphs and 14 graph breaks)."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import torch
        from torch._dynamo.utils import counters

        class M(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x * 2 + 1)

        m = torch.compile(M(), backend="eager")
        x = torch.ones(8)
        for i in range(5):
            y = m(x)
        print("y", float(y.sum()))
        print("graphs", counters["stats"]["unique_graphs"],
              "breaks", sum(counters["graph_break"].values()))
    """)
    r = cli(["run", "-o", "t.duckdb", "--no-report", "--step-fn", "__main__:M.forward",
             "--warmup", "1", "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "y 24.0" in r.stdout
    assert "graphs 1 breaks 0" in r.stdout, r.stdout + r.stderr
    assert "Dynamo" not in r.stderr and "marking a step failed" not in r.stderr
    assert _steps(tmp_path / "t.duckdb") == [("warmup", 0)] + [("step", i) for i in range(1, 5)]


def test_cuptiprof_range_inside_compiled_code_leaves_the_graph_alone(tmp_path):
    """A cuptiprof.range inside code torch.compile traces stays out of the graph: the frame
    compiles to one graph with no break (it was not compiled at all: 0 graphs), and the
    kernels count for the enclosing step."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import torch, cuptiprof
        from torch._dynamo.utils import counters

        class M(torch.nn.Module):
            def forward(self, x):
                with cuptiprof.range("inner"):
                    return torch.relu(x * 2 + 1)

        m = torch.compile(M(), backend="eager")
        x = torch.ones(8)
        for i in range(3):
            with cuptiprof.range("step", step=i):
                y = m(x)
        print("y", float(y.sum()))
        print("graphs", counters["stats"]["unique_graphs"],
              "breaks", sum(counters["graph_break"].values()))
    """)
    r = cli(["run", "-o", "g.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "y 24.0" in r.stdout and "graphs 1 breaks 0" in r.stdout, r.stdout + r.stderr
    assert "Dynamo" not in r.stderr
    assert _steps(tmp_path / "g.duckdb") == [("step", 0), ("step", 1), ("step", 2)]


@pytest.mark.parametrize("collector", [False, True], ids=["recorder", "collector"])
def test_step_fn_and_the_programs_own_steps_mixed_are_flagged(tmp_path, collector):
    """--step-fn steps and the program's own cuptiprof.range('step') outside them form one
    numbering: the run says so (a warning, a data_quality row). Nested, they do not mix: the
    inner one is a range of the outer step, and nothing is flagged."""
    script(tmp_path, "def work(x):\n    return x + 1\n", name="work_mod.py")
    p = script(tmp_path, """
        import sys
        import cuptiprof
        from work_mod import work
        for i in range(3):
            if sys.argv[1] == "mixed":
                work(i)                          # a --step-fn step
                with cuptiprof.range("step"):    # and one of the program's own
                    pass
            else:
                with cuptiprof.range("step"):
                    work(i)                      # inside the program's step: a range of it
    """)
    extra = {"CUPTIPROF_FAKE_CUPTI": "1"} if collector else {}
    for how in ("mixed", "nested"):
        out = f"{how}.duckdb"
        r = cli(["run", "-o", out, "--no-report", "--step-fn", "work_mod:work", "--", PY, p, how],
                tmp_path, **extra)
        assert r.returncode == 0, r.stderr
        rows = q(tmp_path / out, "SELECT detail FROM data_quality WHERE check_name = 'steps_mixed'")
        steps = q(tmp_path / out, "SELECT count(*) FROM ranges WHERE kind = 'step'")[0][0]
        if how == "mixed":
            assert len(rows) == 1 and rows[0][0].startswith(
                "3 steps came from --step-fn and 3 from the program's own"), rows
            assert "numbered as one sequence" in r.stderr and steps == 6
        else:
            assert rows == [] and "numbered as one sequence" not in r.stderr and steps == 3


def test_cpu_ops_nest_in_the_programs_ranges(tmp_path):
    """Without a GPU, torch ops recorded by torch.profiler nest in the cuptiprof.range open on
    their thread when they ran, so `report --by range` finds the work of each range."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import threading, torch, cuptiprof
        x = torch.ones(64, 64)
        for i in range(3):
            with cuptiprof.range("step", step=i):
                with cuptiprof.range("attention"):
                    y = x @ x
                with cuptiprof.range("mlp"):
                    with cuptiprof.range("inner"):
                        y = torch.relu(y + 1)
        print("tid", threading.get_native_id())
    """)
    r = cli(["run", "-o", "cr.duckdb", "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "cr.duckdb"
    tid = int(r.stdout.split("tid")[1].split()[0])
    # Every op's outermost ancestor is a user range or a step, on the program's own thread id.
    assert q(out, "SELECT DISTINCT thread_id FROM ranges") == [(tid,)]
    parents = q(out, "SELECT DISTINCT p.name, o.depth - p.depth FROM ranges o JOIN ranges p "
                     "ON p.range_id = o.parent_id AND p.pid = o.pid "
                     "WHERE o.kind = 'op' AND p.kind <> 'op' ORDER BY 1")
    assert parents == [("attention", 1), ("inner", 1)]
    assert q(out, "SELECT DISTINCT p.name FROM ranges o JOIN ranges p ON p.range_id = o.parent_id "
                  "AND p.pid = o.pid WHERE o.name = 'aten::matmul'") == [("attention",)]
    with __import__("cuptiprof").open(out) as prof:
        rel = prof.report("ranges")
        got = {row[0]: dict(zip(rel.columns, row)) for row in rel.fetchall()}
    assert set(got) == {"attention", "mlp", "inner"}
    assert got["attention"]["gpu_calls"] == 3 and got["attention"]["top_kernel"] == "aten::mm"
    assert got["inner"]["gpu_ms"] > 0 and got["mlp"]["gpu_ms"] == pytest.approx(got["inner"]["gpu_ms"])
    assert got["mlp"]["self_gpu_ms"] == 0
    # The summary `run` prints shows the report when the program has ranges of its own.
    assert "ranges: the program's own ranges" in r.stderr


def test_the_programs_own_torch_profiler_keeps_its_ops_and_ours_stands_aside(tmp_path):
    """Without a GPU, run records CPU ops with a torch.profiler of its own, and torch runs one
    at a time: the program's own (torch.profiler.profile, the older autograd profile) failed to
    start ("Profiler is already enabled") or lost the ops ours took when it cycled, and ours
    lost every op without a word. Ours stands aside while the program's runs, and says so."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import time, torch, cuptiprof
        from torch.profiler import profile, ProfilerActivity
        x = torch.ones(32, 32)
        def mm(prof):
            return sum(e.name == "aten::mm" for e in prof.events())
        for i in range(2):
            with cuptiprof.step(i):
                x @ x
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for i in range(2, 4):
                with cuptiprof.step(i):
                    x @ x
                    time.sleep(0.6)   # past CUPTIPROF_OPS_EVERY_S: ours would cycle
        with cuptiprof.step(4):
            x @ x
        time.sleep(1.1)
        with cuptiprof.step(5):
            x @ x
        with torch.autograd.profiler.profile() as lp:
            with cuptiprof.step(6):
                x @ x
        with cuptiprof.step(7):
            x @ x
        print("mm", mm(p), sum(e.name == "aten::mm" for e in lp.function_events))
    """)
    r = cli(["run", "-o", "own.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "mm 2 1" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "own.duckdb"
    assert q(out, "SELECT step, count(*) FROM kernels WHERE name = 'aten::mm' GROUP BY 1 "
                  "ORDER BY 1") == [(0, 1), (1, 1), (4, 1), (5, 1), (7, 1)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name = 'cpu_profiler_failed' "
                  "AND detail LIKE '%torch.profiler of its own%'") == [(1,)]


def test_a_ctrl_c_the_program_catches_in_the_cpu_op_profilers_cycle_leaves_it_recording(tmp_path):
    """Without a GPU, a step's end cycles torch.profiler (stop, write its ops, start again). A
    Ctrl-C that landed there stopped it for good: a program that catches KeyboardInterrupt and
    goes on (a server dropping a request) had no CPU op in any later step, each said empty. It
    is raised once the cycle is done."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import os, signal, torch, torch.profiler, cuptiprof
        stop_profiler = torch.profiler.profile.stop
        stops = []
        def stop(self):
            stops.append(1)
            if len(stops) == 2:   # the Ctrl-C lands as the run's profiler stops
                os.kill(os.getpid(), signal.SIGINT)
            return stop_profiler(self)
        torch.profiler.profile.stop = stop
        x = torch.ones(16, 16)
        caught = []
        for i in range(6):
            try:
                with cuptiprof.step(i):
                    x @ x
            except KeyboardInterrupt:
                caught.append(i)
        print("caught", caught)
    """)
    r = cli(["run", "-o", "cc.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300,
            CUPTIPROF_OPS_EVERY_S="0")
    assert r.returncode == 0 and "caught [1]" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "cc.duckdb"
    assert q(out, "SELECT step, count(*) FROM kernels WHERE name = 'aten::mm' GROUP BY 1 "
                  "ORDER BY 1") == [(i, 1) for i in range(6)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name = 'empty_step'") == [(0,)]


# torch imported by a thread that then ends (a model loaded in the background)
TORCH_ON_A_THREAD = """
        def load():
            global torch
            import torch
        loader = threading.Thread(target=load)
        loader.start()
        loader.join()
"""


def test_cpu_ops_of_a_torch_imported_on_a_thread_that_ended_are_written_as_steps_end(tmp_path):
    """Without a GPU, torch.profiler starts as torch is imported and is cycled (its ops written)
    on that thread alone. Imported by a thread that then ended (a model loaded in the
    background), it was never cycled: a crash lost every op. The thread that ends a step takes
    it over."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import os, threading, cuptiprof
""" + TORCH_ON_A_THREAD + """
        x = torch.ones(16, 16)
        for i in range(5):
            with cuptiprof.step(i):
                x @ x
        os._exit(3)   # a crash: the ops of every step that ended are kept
    """)
    r = cli(["run", "-o", "ld.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300,
            CUPTIPROF_OPS_EVERY_S="0")
    assert r.returncode == 3, r.stderr
    assert q(tmp_path / "ld.duckdb", "SELECT step, count(*) FROM kernels WHERE name = 'aten::mm' "
                                     "GROUP BY 1 ORDER BY 1") == [(i, 1) for i in range(5)]


def test_cpu_ops_of_a_step_still_open_as_the_process_ends_are_kept(tmp_path):
    """Without a GPU, a step the process ended inside (opened and never closed, a thread's step
    at exit) is written as incomplete, with its host time: the CPU ops that ran in it are kept
    too (they had no step window and were dropped: the step said it recorded no op)."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import torch, cuptiprof
        x = torch.ones(16, 16)
        with cuptiprof.range("step"):
            x @ x
        cuptiprof.range("step").__enter__()
        x @ x
    """)
    r = cli(["run", "-o", "op.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "op.duckdb"
    assert q(out, "SELECT step, count(*) FROM kernels WHERE name = 'aten::mm' GROUP BY 1 "
                  "ORDER BY 1") == [(0, 1), (1, 1)]
    assert q(out, "SELECT check_name, subject FROM data_quality WHERE check_name <> 'no_gpu'") \
        == [("step_incomplete", "1")]


def test_cpu_ops_of_a_step_numbered_below_zero_are_kept(tmp_path):
    """Step numbers run from -2**31: without a GPU, the ops of a step numbered -1 or -5 were
    taken for ops outside every step (-1 was that mark) and dropped, the step said empty."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import torch, cuptiprof
        x = torch.ones(16, 16)
        for i in (-5, -1, 0):
            with cuptiprof.step(i):
                x @ x
    """)
    r = cli(["run", "-o", "neg.duckdb", "--no-report", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "neg.duckdb"
    assert q(out, "SELECT step, count(*) FROM kernels WHERE name = 'aten::mm' GROUP BY 1 "
                  "ORDER BY 1") == [(-5, 1), (-1, 1), (0, 1)]
    assert q(out, "SELECT count(*) FROM data_quality WHERE check_name = 'empty_step'") == [(0,)]


def test_cpu_ops_of_worker_threads_stay_theirs_after_the_torch_importing_thread_ended(tmp_path):
    """torch imported by a thread that ended, steps on worker threads: a worker that got the
    ended thread's ident (Python reuses them) was taken for it and cycled torch.profiler while
    the others ran ops, which went to its steps. Only the thread itself, or the main thread
    after it ended, cycles it."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import threading, time, cuptiprof
""" + TORCH_ON_A_THREAD + """
        torch.set_num_threads(1)
        x = torch.ones(32, 32)
        def worker(base):
            for j in range(6):
                with cuptiprof.step(base + j):
                    for _ in range(j + 1):
                        x @ x
                    time.sleep(0.01)
        workers = [threading.Thread(target=worker, args=(b,)) for b in (0, 100, 200)]
        [t.start() for t in workers]
        [t.join() for t in workers]
    """)
    r = cli(["run", "-o", "wk.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300,
            CUPTIPROF_OPS_EVERY_S="0")
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "wk.duckdb", "SELECT step, count(*) FROM kernels WHERE name = 'aten::mm' "
                                     "GROUP BY 1 ORDER BY 1") == \
        [(b + j, j + 1) for b in (0, 100, 200) for j in range(6)]


@pytest.mark.parametrize("api", ["torch", "nvtx"])
def test_step_range_pushed_inside_compiled_code(tmp_path, api):
    """--step-range over an NVTX push inside code torch.compile traces: the push is counted when
    the compiled code runs (never traced into the graph), so every call is one step."""
    pytest.importorskip("torch")
    push, pop = (("torch.cuda.nvtx.range_push", "torch.cuda.nvtx.range_pop") if api == "torch"
                 else ("nvtx.push_range", "nvtx.pop_range"))
    p = script(tmp_path, f"""
        import nvtx, torch
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(16, 16)
            def forward(self, x):
                {push}("denoise")
                y = self.lin(x).relu()
                {pop}()
                return y
        m = torch.compile(M())
        x = torch.randn(4, 16)
        for i in range(5):
            x = m(x)
        print("ok", tuple(x.shape))
    """)
    r = cli(["run", "-o", "cn.duckdb", "--no-report", "--step-range", "denoise", "--warmup", "1",
             "--", PY, p], tmp_path, timeout=600)   # an empty compile cache on a loaded machine: 120 s seen
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ok (4, 16)" in r.stdout
    assert _steps(tmp_path / "cn.duckdb") == [("warmup", 0)] + [("step", i) for i in range(1, 5)]


def _op_call(parent_name, child_name, self_us, child_us):
    """One call of an op with one child, as torch.profiler's events show it."""
    from types import SimpleNamespace as NS

    outer = NS(name=parent_name, cpu_parent=None, self_cpu_time_total=self_us,
               time_range=NS(elapsed_us=lambda: self_us + child_us))
    inner = NS(name=child_name, cpu_parent=outer, cpu_children=[],
               self_cpu_time_total=child_us, time_range=NS(elapsed_us=lambda: child_us))
    outer.cpu_children = [inner]
    return outer, inner


def test_the_op_doing_the_work_is_judged_per_name_not_per_call():
    """aten::relu around aten::clamp_min: per call its self share wanders around one half, and
    per call the recorded op flipped between steps; per name every step records the same op."""
    from cuptiprof.run.recorder import _is_kernel, _judge_names

    steps = [_op_call("aten::relu", "aten::clamp_min", *t) for t in ((6.0, 4.0), (4.0, 6.0), (3.0, 7.0))]
    decided: dict = {}
    _judge_names([e for pair in steps for e in pair], decided)   # 60%, 40%, 30% own
    picked = [[e.name for e in pair if _is_kernel(e, decided)] for pair in steps]
    assert picked == [["aten::clamp_min"]] * 3          # 13 of 30 us own: relu is a wrapper


def test_the_op_doing_the_work_stays_the_same_in_later_batches():
    """Ops are handed over in batches (a step or a second at a time): a later batch where the
    wrapper's share crosses one half records the same op as the first, not the other one."""
    from cuptiprof.run.recorder import _is_kernel, _judge_names

    decided: dict = {}
    first = _op_call("aten::relu", "aten::clamp_min", 3.0, 7.0)
    _judge_names(list(first), decided)
    later = _op_call("aten::relu", "aten::clamp_min", 9.0, 1.0)     # 90% own this time
    _judge_names(list(later), decided)
    assert [e.name for e in later if _is_kernel(e, decided)] == ["aten::clamp_min"]
    fresh: dict = {}
    _judge_names(list(later), fresh)                                 # judged on its own: relu
    assert [e.name for e in later if _is_kernel(e, fresh)] == ["aten::relu"]


def test_a_composite_op_is_a_wrapper_whatever_its_timing():
    """aten::matmul only calls other ops (CompositeImplicitAutograd): on small matrices its own
    share crossed one half now and then, and a step recorded aten::matmul instead of aten::mm."""
    pytest.importorskip("torch")
    from cuptiprof.run.recorder import _is_kernel, _judge_names

    decided: dict = {}
    calls = [_op_call("aten::matmul", "aten::mm", 9.0, 1.0), _op_call("aten::addmm", "aten::copy_", 9.0, 1.0)]
    _judge_names([e for pair in calls for e in pair], decided)
    assert [[e.name for e in pair if _is_kernel(e, decided)] for pair in calls] == \
        [["aten::mm"], ["aten::addmm"]]


@pytest.mark.parametrize("mode", [[], ["--light"]], ids=["cpu", "light"])
def test_steps_of_concurrent_threads_stop_at_n(tmp_path, mode):
    """--steps N counts steps as they begin: threads whose steps all begin before the first
    ends record N steps, not one per thread."""
    p = script(tmp_path, """
        import threading, cuptiprof
        b = threading.Barrier(3)
        def work():
            for i in range(2):
                with cuptiprof.range("step"):
                    b.wait()   # every thread's step is open at once
        ts = [threading.Thread(target=work) for _ in range(3)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    """)
    r = cli(["run", "-o", "t.duckdb", "--no-report", *mode, "--steps", "2", "--", PY, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "t.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(2,)]


def test_cpu_ops_of_concurrent_steps_stay_with_their_thread(tmp_path):
    """Without a GPU, an op belongs to the step open on its own thread: steps two threads run at
    once keep their own ops, and a warm-up step's ops are not counted in a step that overlaps it."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import threading, torch, cuptiprof
        x = torch.ones(32, 32)
        began = [threading.Event() for _ in range(3)]
        b = threading.Barrier(3)
        def work(i, op):
            if i:
                began[i - 1].wait()   # steps begin in thread order: thread 0's is the warm-up
            with cuptiprof.range("step"):
                began[i].set()
                b.wait()
                op(x)
                b.wait()
        ops = [torch.mm, torch.tanh, torch.sigmoid]
        ts = [threading.Thread(target=work, args=(i, lambda x, f=f: f(x, x) if f is torch.mm else f(x)))
              for i, f in enumerate(ops)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    """)
    r = cli(["run", "-o", "c.duckdb", "--no-report", "--warmup", "1", "--", PY, p], tmp_path,
            timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "c.duckdb"
    got = q(out, "SELECT k.step, k.name, k.stream_id = s.thread_id FROM kernels k JOIN ranges s "
                 "ON s.kind = 'step' AND s.step = k.step ORDER BY 1")
    assert got == [(1, "aten::tanh", True), (2, "aten::sigmoid", True)]


def test_a_cpu_op_outside_its_threads_steps_takes_the_latest_begun_step(tmp_path):
    """Without a GPU, an op on a thread with no step of its own takes the latest-started step
    open when it began (the rule of the schema's `step`, as the collector follows it), not the
    one that happens to end last."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import threading, torch, cuptiprof
        x = torch.ones(32, 32)
        inner_began, op_done = threading.Event(), threading.Event()
        def pool():                      # a thread with no step of its own
            inner_began.wait()
            torch.tanh(x)                # steps 0 and 1 are open: 1 began last
            op_done.set()
        def inner():
            with cuptiprof.range("step", step=1):
                inner_began.set()
                op_done.wait()
                torch.sigmoid(x)
        with cuptiprof.range("step", step=0):   # begins first, ends last
            torch.mm(x, x)
            ts = [threading.Thread(target=f) for f in (pool, inner)]
            [t.start() for t in ts]
            [t.join() for t in ts]
    """)
    r = cli(["run", "-o", "l.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    got = dict(q(tmp_path / "l.duckdb", "SELECT name, step FROM kernels"))
    assert got == {"aten::mm": 0, "aten::tanh": 1, "aten::sigmoid": 1}
    # steps of different threads overlap, each thread's own stay nested: nothing interleaved
    assert q(tmp_path / "l.duckdb", "SELECT list(check_name) FROM data_quality") == [(["no_gpu"],)]


def test_cpu_ops_of_interleaved_asyncio_steps_are_said_in_data_quality(tmp_path):
    """Without a GPU, steps of asyncio tasks that interleave on one thread cannot tell their CPU
    ops apart (they go to the step begun last, as GPU work does under CUPTI): data_quality says
    so with `ranges_interleaved`, as the collector does."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import asyncio, torch, cuptiprof
        x = torch.ones(32, 32)
        async def request(r):
            for i in range(2):
                with cuptiprof.range("step", step=10 * r + i):
                    torch.mm(x, x)
                    await asyncio.sleep(0.01)
                    torch.tanh(x)
        async def main():
            await asyncio.gather(request(1), request(2))
        asyncio.run(main())
    """)
    r = cli(["run", "-o", "a.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "a.duckdb"
    assert q(out, "SELECT list(step ORDER BY step) FROM ranges WHERE kind = 'step'") == [([10, 11, 20, 21],)]
    (n, detail), = q(out, "SELECT count, detail FROM data_quality WHERE check_name = 'ranges_interleaved'")
    assert n >= 1 and "asyncio" in detail and "begun last" in detail


def test_cpu_ops_of_asyncio_steps_that_overlap_and_end_in_order_are_said(tmp_path):
    """A short request's step opened during a long one's and ended before it: the long one's
    CPU ops meanwhile went to the short one's step, and data_quality said nothing (only steps
    that ended out of order were counted)."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import asyncio, torch, cuptiprof
        x = torch.ones(32, 32)
        async def long(started, go, done):
            with cuptiprof.step(0):
                started.set()
                await go.wait()
                torch.mm(x, x)             # while step 1 is open
                await done.wait()
        async def short(started, go, done):
            await started.wait()
            with cuptiprof.step(1):
                go.set()
                await asyncio.sleep(0)
                torch.tanh(x)
            done.set()
        async def main():
            started, go, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
            await asyncio.gather(long(started, go, done), short(started, go, done))
        asyncio.run(main())
    """)
    r = cli(["run", "-o", "a.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "a.duckdb"
    assert q(out, "SELECT step FROM ranges WHERE kind = 'step' ORDER BY end_ns") == [(1,), (0,)]
    (n, detail), = q(out, "SELECT count, detail FROM data_quality WHERE check_name = 'ranges_interleaved'")
    assert n == 1 and "asyncio" in detail and "begun last" in detail, detail


def test_a_range_outside_steps_takes_the_step_still_open_on_another_thread_under_run(tmp_path):
    """As in profile(): a range opened outside its own thread's steps while another thread's
    step still ran got no step once any step had ended."""
    from _run_helpers import STEP_OPEN_ELSEWHERE

    p = script(tmp_path, "launch = print\n" + STEP_OPEN_ELSEWHERE)
    r = cli(["run", "-o", "r.duckdb", "--no-report", "--light", "--", sys.executable, p], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "r.duckdb", "SELECT name, step FROM ranges WHERE kind = 'user' "
                                     "ORDER BY start_ns") == [("io", 0), ("after", None)]



def test_a_range_and_a_log_outside_steps_take_the_latest_begun_of_the_steps_open(tmp_path):
    """Two threads' steps open at once (0 begun first, then 1): a range or a log record of a
    third thread, outside every step of its own, is the latest begun one's, as in the collector."""
    p = script(tmp_path, """
        import logging, threading, cuptiprof
        a_in, b_in, done = threading.Event(), threading.Event(), threading.Event()
        def a():
            with cuptiprof.step(0):
                a_in.set()
                done.wait()
        def b():
            a_in.wait()
            with cuptiprof.step(1):
                b_in.set()
                done.wait()
        def c():
            b_in.wait()
            with cuptiprof.range("io"):
                pass
            logging.getLogger("app").warning("loaded")
            done.set()
        threads = [threading.Thread(target=t) for t in (a, b, c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """)
    r = cli(["run", "-o", "r.duckdb", "--no-report", "--light", "--", sys.executable, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "r.duckdb"
    assert q(out, "SELECT name, step FROM ranges WHERE kind = 'user'") == [("io", 1)]
    assert q(out, "SELECT message, step FROM logs WHERE logger = 'app'") == [("loaded", 1)]


@pytest.mark.parametrize("mode, extra", [(["--light"], {}), ([], {"CUPTIPROF_FAKE_CUPTI": "1"})],
                         ids=["light", "collector"])
def test_a_range_and_a_log_inside_their_threads_step_keep_that_step_while_a_later_one_is_open(
        tmp_path, mode, extra):
    """Thread a's step 0 is open when thread b begins step 1: a range a opens after that, inside
    its own step, and a log record there, are step 0's, not the latest begun step's (the log
    record was step 1's)."""
    p = script(tmp_path, """
        import logging, threading, cuptiprof
        a_in, b_in, done = threading.Event(), threading.Event(), threading.Event()
        def a():
            with cuptiprof.step(0):
                a_in.set()
                b_in.wait()
                with cuptiprof.range("attn"):
                    logging.getLogger("app").warning("in attn")
                logging.getLogger("app").warning("in step")
            done.set()
        def b():
            a_in.wait()
            with cuptiprof.step(1):
                b_in.set()
                done.wait()
        threads = [threading.Thread(target=t) for t in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """)
    r = cli(["run", "-o", "r.duckdb", "--no-report", *mode, "--", sys.executable, p], tmp_path,
            **extra)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "r.duckdb"
    assert q(out, "SELECT name, step FROM ranges WHERE kind = 'user'") == [("attn", 0)]
    assert q(out, "SELECT message, step FROM logs WHERE logger = 'app' ORDER BY time_ns") == \
        [("in attn", 0), ("in step", 0)]


@pytest.mark.parametrize("mode", [["--light"], []], ids=["light", "cpu-ops"])
def test_a_range_in_a_step_beyond_the_last_is_no_range_of_an_earlier_one(tmp_path, mode):
    """--steps 2: a thread's third step began while step 0 still ran on another thread; a range
    inside that third step, and its CPU ops, were recorded as step 0's."""
    pytest.importorskip("torch")
    p = script(tmp_path, """
        import threading, torch, cuptiprof
        x = torch.ones(16, 16)
        first_in, second_done = threading.Event(), threading.Event()
        def first():
            with cuptiprof.step(0):
                torch.mm(x, x)
                first_in.set()
                second_done.wait()
                with cuptiprof.range("late"):
                    pass
        def second():
            first_in.wait()
            with cuptiprof.step(1):
                torch.mm(x, x)
            with cuptiprof.step(2):
                with cuptiprof.range("beyond"):
                    with cuptiprof.step(3):
                        torch.mm(x, x)
                        torch.mm(x, x)
            second_done.set()
        threads = [threading.Thread(target=t) for t in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """)
    r = cli(["run", "-o", "r.duckdb", "--no-report", *mode, "--steps", "2", "--",
             sys.executable, p], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "r.duckdb"
    assert q(out, "SELECT name, kind, step FROM ranges WHERE kind <> 'op' ORDER BY start_ns") == [
        ("step", "step", 0), ("step", "step", 1), ("late", "user", 0)]
    if not mode:
        assert q(out, "SELECT step, count(*) FROM ranges WHERE name = 'aten::mm' GROUP BY 1 "
                      "ORDER BY 1") == [(0, 1), (1, 1)]


def test_mixed_steps_row_goes_through_the_collector(monkeypatch):
    """At the end of a run, the steps_mixed row is handed to the collector, which writes it
    beside a flush another thread may be in; writing it on the file's one connection directly
    could abort that flush's transaction."""
    from cuptiprof.run.child import ending, shared

    class Writer:
        def add_quality(self, *a):
            raise AssertionError("written beside the collector's flush")

    class Collector:
        writer = Writer()
        notes: list = []

        def _note_problem(self, check, detail):
            self.notes.append((check, detail))

        def stop(self, status):
            self.status = status

    col = Collector()
    monkeypatch.setattr(shared, "_collector", col)
    monkeypatch.setattr(shared, "_rec", None)
    monkeypatch.setattr(ending, "_mixed_steps", lambda: "3 steps came from --step-fn and 2 ...")
    monkeypatch.setattr(ending, "warn", lambda msg: None)
    ending._close_recording("complete")
    assert col.notes == [("steps_mixed", "3 steps came from --step-fn and 2 ...")]
    assert col.status == "complete"


def test_closing_while_another_thread_cycles_the_cpu_profiler_stops_each_profiler(tmp_path,
                                                                                   monkeypatch):
    """The process ending (close) while a step ends on another thread, which hands torch.profiler's
    ops over by stopping it and starting a new one: close waits for that, then stops the new
    one; it used to finish first and leave a profiler started after it, never stopped."""
    import threading
    import types

    from cuptiprof.run.recorder import Recorder
    from cuptiprof.run.settings import ChildSettings

    started, stopped = [], []
    release, stopping = threading.Event(), threading.Event()

    class Prof:   # torch.profiler.profile, counting starts and stops
        def __init__(self, **kw):
            self.profiler = object()

        def start(self):
            started.append(self)

        def stop(self):
            stopped.append(self)
            if len(stopped) == 1:   # the step's end cycling it: held here
                stopping.set()
                release.wait(10)

    tp = types.ModuleType("torch.profiler")
    tp.profile, tp.ProfilerActivity = Prof, types.SimpleNamespace(CPU="cpu")
    torch = types.ModuleType("torch")
    torch.profiler = tp
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.profiler", tp)
    monkeypatch.setenv("CUPTIPROF_OPS_EVERY_S", "0")
    rec = Recorder(ChildSettings(), str(tmp_path), "cpu")
    monkeypatch.setattr(rec, "_write_ops", lambda prof: None)

    def step():
        rec.end(rec.begin("step", is_step=True))
    stepper = threading.Thread(target=step)
    stepper.start()
    assert stopping.wait(10)
    closer = threading.Thread(target=rec.close)
    closer.start()
    closer.join(0.5)   # it must wait for the cycle (it used to be done by now)
    release.set()
    stepper.join(10)
    closer.join(10)
    assert not stepper.is_alive() and not closer.is_alive()
    assert len(started) == 2 and stopped == started   # each stopped, once


def test_step_fn_module_beside_the_script_run_from_another_folder(tmp_path):
    """`cuptiprof run --step-fn model:step -- python app/main.py` from above app/: Python finds
    app/model.py (the script's folder is on its path), so the check made before the run does too."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "app_model_x.py").write_text("def step():\n    return sum(range(1000))\n")
    script(app, "import app_model_x\nfor _ in range(2):\n    app_model_x.step()\n",
           name="main.py")
    r = cli(["run", "-o", "s.duckdb", "--no-report", "--step-fn", "app_model_x:step", "--",
             PY, "app/main.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "s.duckdb", "SELECT count(*) FROM ranges WHERE kind = 'step'") == [(2,)]


def test_steps_two_threads_begin_at_once_are_not_taken_for_the_programs_own(monkeypatch):
    """--step-fn steps begun on two threads at once: the count of steps it began is exact, so
    no steps_mixed note says some came from the program's own cuptiprof.range('step'). The
    recorder below stands for a thread switch while the first thread adds its step to that
    count (it read the count, then the second thread's step began and was counted, then the
    first thread stored its sum); where the count is kept under a lock, the second thread
    cannot begin meanwhile and the first one's wait times out."""
    import threading

    from cuptiprof.run.child import shared, steps

    first_in, second_in = threading.Event(), threading.Event()
    reads = threading.local()

    class Rec:
        _seen = 0
        s = type("S", (), {"step_fn": "m:step"})()

        @property
        def seen(self):
            reads.n = getattr(reads, "n", 0) + 1
            value = self._seen
            if reads.n == 2:   # the read after this thread's step began
                if threading.current_thread().name == "first":
                    first_in.set()
                    second_in.wait(0.5)
                else:
                    second_in.set()
            return value

        def begin(self, name, is_step, step):
            self._seen += 1
            return object()

    monkeypatch.setattr(shared, "_collector", None)
    monkeypatch.setattr(shared, "_rec", Rec())
    monkeypatch.setattr(shared, "_marked", 0)
    monkeypatch.setattr(shared, "_seen_base", 0)
    monkeypatch.setattr(steps, "_steps_failed", lambda exc: (_ for _ in ()).throw(exc))

    def begin_step():
        steps._Step("step").__enter__()

    first = threading.Thread(target=begin_step, name="first")
    second = threading.Thread(target=begin_step, name="second")
    first.start()
    assert first_in.wait(5)
    second.start()
    first.join(5)
    second.join(5)
    assert shared._marked == 2
    assert steps._mixed_steps() is None


def test_a_step_that_cannot_be_marked_runs_and_is_said_once(monkeypatch, capsys):
    """--step-fn whose bookkeeping fails at every call: the program's function still runs and
    returns, and one warning line says so, not one a step."""
    from cuptiprof.run.child import shared, steps

    class Broken:
        seen = 0

        def begin(self, *a, **kw):
            raise RuntimeError("no room")
    monkeypatch.setattr(shared, "_rec", Broken())
    monkeypatch.setattr(shared, "_collector", None)
    monkeypatch.setattr(steps, "_steps_warned", False)
    step = steps._wrap_step(lambda x: x + 1)
    assert [step(i) for i in range(3)] == [1, 2, 3]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cuptiprof: warning: marking a step failed"), err


def test_the_overhead_baseline_keeps_no_ranges_it_never_writes(tmp_path):
    """--overhead's baseline (time mode) keeps each step's duration only: the ranges of a long
    program, before, inside and after its steps, are not held in memory until it ends."""
    import json

    from cuptiprof.run.recorder import Recorder
    from cuptiprof.run.settings import ChildSettings

    rec = Recorder(ChildSettings(mode="time", warmup=1, steps=2), str(tmp_path), "time")
    for i in range(5):
        rec.end(rec.begin("before"))
        st = rec.begin("step", is_step=True)
        for _ in range(100):
            rec.end(rec.begin("op"))
        rec.end(st)
    assert rec.ranges == []
    rec.close()
    (steps,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.steps.json")]
    assert [s for s, _ in steps["steps"]] == [1, 2]


@pytest.mark.parametrize("mode", ["time", "light"])
def test_after_the_last_step_the_baseline_does_no_more_range_work_than_a_profiled_run(tmp_path, mode):
    """Once --steps are recorded, ranges are no longer begun in the profiled modes; the
    --overhead baseline (time mode) stops at the same point, or its timing would include
    bookkeeping the profiled run no longer does (and the overhead read too low)."""
    from cuptiprof.run.recorder import Recorder
    from cuptiprof.run.settings import ChildSettings

    import contextvars

    rec = Recorder(ChildSettings(mode=mode, warmup=0, steps=1), str(tmp_path), mode)
    inside = rec.begin("step", is_step=True)
    # another task's step, beyond the one asked for, while this one runs: nothing inside it
    other = contextvars.Context()
    beyond = other.run(rec.begin, "step", is_step=True)
    assert other.run(rec.begin, "op in beyond") is None
    other.run(rec.end, beyond)
    op = rec.begin("op")
    assert op is not None   # inside a recorded step: a range
    rec.end(op)
    rec.end(inside)
    assert rec.done
    ids = rec.next_id
    assert rec.begin("after") is None
    assert rec.begin("step", is_step=True) is None
    assert rec.next_id == ids and rec._stack() == ()
    rec.close()


def test_step_fn_on_an_async_def_gives_overlapping_tasks_each_their_own_step(tmp_path, monkeypatch):
    """--step-fn on an `async def` that two asyncio tasks run at once on one thread: each call
    is its own step (as cuptiprof.range('step') in each task would be), and a range one task
    opens after the other task's step ended belongs to its own step, not to none."""
    import asyncio

    from cuptiprof.run.child import shared, steps
    from cuptiprof.run.recorder import Recorder
    from cuptiprof.run.settings import ChildSettings

    rec = Recorder(ChildSettings(mode="light", step_fn="m:denoise"), str(tmp_path), "light")
    monkeypatch.setattr(shared, "_collector", None)
    monkeypatch.setattr(shared, "_rec", rec)
    monkeypatch.setattr(shared, "_marked", 0)
    monkeypatch.setattr(shared, "_seen_base", 0)
    monkeypatch.setattr(steps, "_steps_failed", lambda exc: (_ for _ in ()).throw(exc))

    async def main():
        a_in, a_out = asyncio.Event(), asyncio.Event()

        async def denoise(name):
            if name == "a":
                a_in.set()
                await a_out.wait()         # b's step begins while a's runs
            else:
                await a_in.wait()
                a_out.set()
                await asyncio.sleep(0)     # a's step ends while b's runs
                await asyncio.sleep(0)
            h = rec.begin(f"work {name}")  # what cuptiprof.range does in the program
            rec.end(h)
            return name

        step = steps._wrap_step(denoise)
        return await asyncio.gather(step("a"), step("b"))

    assert asyncio.run(main()) == ["a", "b"]
    assert shared._marked == 2 and steps._mixed_steps() is None
    rec.close()
    got = q(rec.part_path(".duckdb"),
               "SELECT w.name, s.step FROM ranges w JOIN ranges s ON w.parent_id = s.range_id "
               "WHERE w.kind = 'user' AND s.kind = 'step' ORDER BY w.name")
    assert got == [("work a", 0), ("work b", 1)]


@pytest.mark.parametrize("mode", ["light", "cpu"])
def test_a_range_left_open_inside_a_step_ends_with_it(tmp_path, mode):
    """A range the program never ended (an exception skipped its end) inside a step ends with
    the step: written with the step's end, and not the parent of what the next step records."""
    from cuptiprof.run.recorder import Recorder
    from cuptiprof.run.settings import ChildSettings

    rec = Recorder(ChildSettings(mode=mode), str(tmp_path), mode)
    first = rec.begin("step", is_step=True)
    rec.begin("forgot")
    rec.begin("forgot inner")
    rec.end(first)
    second = rec.begin("step", is_step=True)
    after = rec.begin("after")
    rec.end(after)
    rec.end(second)
    rec.close()
    rows = {rid: (name, parent, end, step) for rid, parent, name, end, step in q(
        rec.part_path(".duckdb"), "SELECT range_id, parent_id, name, end_ns, step FROM ranges "
                                  "WHERE kind <> 'op'")}
    by_name = {name: rid for rid, (name, *_) in rows.items()}
    assert rows[second.range_id][1] is None and second.depth == 0
    assert rows[after.range_id][1:] == (second.range_id, rows[after.range_id][2], 1)
    forgot, inner = by_name["forgot"], by_name["forgot inner"]
    assert rows[forgot][1:] == (first.range_id, rows[first.range_id][2], 0)
    assert rows[inner][1:] == (forgot, rows[first.range_id][2], 0)
    assert rows[first.range_id][2] is not None


def test_a_forked_baseline_process_times_its_own_steps_only(tmp_path):
    """--overhead's baseline in a worker forked after the parent timed steps: the worker's
    steps file holds its own steps, numbered from its first, or the parent's durations would
    count twice in the baseline's median."""
    import json

    from cuptiprof.run.recorder import Recorder
    from cuptiprof.run.settings import ChildSettings

    rec = Recorder(ChildSettings(mode="time"), str(tmp_path), "time")
    for _ in range(2):
        rec.end(rec.begin("step", is_step=True))
    rec.forget_after_fork()
    rec.end(rec.begin("step", is_step=True))
    rec.close()
    (steps,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.steps.json")]
    assert [s for s, _ in steps["steps"]] == [0]


@pytest.mark.parametrize("collector", [False, True], ids=["recorder", "collector"])
def test_step_range_of_cuptiprof_ranges_and_the_programs_own_steps_mixed_are_flagged(
        tmp_path, collector):
    """--step-range NAME over cuptiprof.range(NAME) (the bundled example's `transformer` in its
    warm-up) beside the program's own cuptiprof.range('step') outside them: one numbering, as
    with --step-fn, which the run says (it said nothing, and both had steps 0 and 1)."""
    p = script(tmp_path, """
        import cuptiprof
        for i in range(2):
            with cuptiprof.range("iteration"):
                pass
        for i in range(3):
            with cuptiprof.range("step"):
                pass
    """)
    extra = {"CUPTIPROF_FAKE_CUPTI": "1"} if collector else {}
    r = cli(["run", "-o", "m.duckdb", "--no-report", "--step-range", "iteration", "--", PY, p],
            tmp_path, **extra)
    assert r.returncode == 0, r.stderr
    rows = q(tmp_path / "m.duckdb", "SELECT detail FROM data_quality "
                                    "WHERE check_name = 'steps_mixed'")
    assert len(rows) == 1 and rows[0][0].startswith(
        "2 steps came from --step-range and 3 from the program's own"), rows
    assert "numbered as one sequence" in r.stderr


@pytest.mark.parametrize("mode, extra", [(["--light"], {}), ([], {}),
                                         ([], {"CUPTIPROF_FAKE_CUPTI": "1"})],
                         ids=["light", "cpu", "collector"])
def test_a_warmup_range_inside_a_recorded_step_is_of_no_step(tmp_path, mode, extra):
    """A cuptiprof.range("warmup") inside a recorded step was stored with step NULL by the
    collector but with the step's number under --light: there the 'warmup' row made the
    reports take the whole step for a warm-up step and leave it out."""
    p = script(tmp_path, """
        import cuptiprof

        for i in range(2):
            with cuptiprof.step(i):
                with cuptiprof.range("warmup"):
                    with cuptiprof.range("compile"):
                        pass
                with cuptiprof.range("denoise"):
                    pass
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", *mode, "--", PY, p], tmp_path, **extra)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "w.duckdb"
    assert q(out, "SELECT kind, name, step FROM ranges WHERE kind <> 'op' ORDER BY start_ns") == [
        ("step", "step", 0), ("warmup", "warmup", None), ("user", "compile", None),
        ("user", "denoise", 0),
        ("step", "step", 1), ("warmup", "warmup", None), ("user", "compile", None),
        ("user", "denoise", 1)]


@pytest.mark.parametrize("mode, extra", [(["--light"], {}), ([], {}),
                                         ([], {"CUPTIPROF_FAKE_CUPTI": "1"})],
                         ids=["light", "cpu", "collector"])
def test_logs_of_a_warmup_range_inside_a_recorded_step_are_of_no_step(tmp_path, mode, extra):
    """A record logged inside a cuptiprof.range("warmup") in a recorded step (or in a range
    inside it) is of no step, as the range, the ranges in it and its work are: it kept the
    step's number in every path."""
    p = script(tmp_path, """
        import logging, cuptiprof
        log = logging.getLogger("app")
        for i in range(2):
            with cuptiprof.step(i):
                log.warning("step %d", i)
                with cuptiprof.range("warmup"):
                    log.warning("warmup %d", i)
                    with cuptiprof.range("compile"):
                        log.warning("compile %d", i)
                log.warning("after %d", i)
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", *mode, "--", PY, p], tmp_path, **extra)
    assert r.returncode == 0, r.stderr
    assert q(tmp_path / "w.duckdb", "SELECT message, step FROM logs WHERE logger = 'app' "
                                    "ORDER BY time_ns") == [
        ("step 0", 0), ("warmup 0", None), ("compile 0", None), ("after 0", 0),
        ("step 1", 1), ("warmup 1", None), ("compile 1", None), ("after 1", 1)]


@pytest.mark.parametrize("extra", [{}, {"CUPTIPROF_FAKE_CUPTI": "1"}], ids=["cpu", "collector"])
def test_the_work_of_a_warmup_range_inside_a_recorded_step_is_of_no_step(tmp_path, extra):
    """What a cuptiprof.range("warmup") inside a recorded step runs (and the ranges inside it)
    is warm-up, of no step, as its ranges are: the CPU ops run's recording without a GPU took
    for the step (only step ranges made its step windows), and so did the collector's GPU work
    (the range was not pushed to CUPTI, and the ranges inside it went by launch time)."""
    p = script(tmp_path, """
        import cuptiprof, torch

        a = torch.ones(64, 64)
        for i in range(2):
            with cuptiprof.step(i):
                with cuptiprof.range("warmup"):
                    torch.relu(a)
                    with cuptiprof.range("compile"):
                        torch.relu(a)
                with cuptiprof.range("denoise"):
                    a @ a
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", "--", PY, p], tmp_path, timeout=300,
            **extra)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "w.duckdb"
    up = {rid: (parent, name) for rid, parent, name in q(out, "SELECT range_id, parent_id, name "
                                                             "FROM ranges")}

    def in_warmup(rid):
        while rid is not None:
            rid, name = up[rid]
            if name == "warmup":
                return True
        return False

    steps = {}
    for rid, step in q(out, "SELECT range_id, step FROM kernels"):
        steps.setdefault(in_warmup(rid), set()).add(step)
    assert steps[False] == {0, 1}, steps
    assert steps.get(True, {None}) == {None}, steps


@pytest.mark.parametrize("mode, extra", [(["--light"], {}), ([], {}),
                                         ([], {"CUPTIPROF_FAKE_CUPTI": "1"})],
                         ids=["light", "cpu", "collector"])
def test_ranges_opened_while_warming_up_are_recorded_as_without_cupti(tmp_path, mode, extra):
    """With --warmup, the CUPTI collector recorded no range but steps until the first recorded
    step began, where --light and the CPU-op recording keep them: a range around the steps
    (the loop) was missing, so report --by range left it out and put the ranges inside it one
    level higher than at --warmup 0. What is inside a warm-up step stays out of every step."""
    p = script(tmp_path, """
        import cuptiprof

        with cuptiprof.range("load"):
            pass
        with cuptiprof.range("loop"):
            for i in range(3):
                with cuptiprof.step(i):
                    with cuptiprof.range("inner"):
                        pass
                with cuptiprof.range("between"):
                    pass
    """)
    r = cli(["run", "-o", "w.duckdb", "--no-report", *mode, "--warmup", "1", "--steps", "2",
             "--", PY, p], tmp_path, **extra)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "w.duckdb"
    assert q(out, "SELECT kind, name, step, depth FROM ranges WHERE kind <> 'op' "
                  "ORDER BY start_ns") == [
        ("user", "load", None, 0), ("user", "loop", None, 0),
        ("warmup", "step", 0, 1), ("user", "inner", 0, 2), ("user", "between", None, 1),
        ("step", "step", 1, 1), ("user", "inner", 1, 2), ("user", "between", None, 1),
        ("step", "step", 2, 1), ("user", "inner", 2, 2)]
    rep = cli(["report", "w.duckdb", "--by", "range", "--format", "csv"], tmp_path)
    assert rep.returncode == 0, rep.stderr
    rows = [ln.split(",")[:3] for ln in rep.stdout.splitlines()[1:]]
    assert ["inner", "2", "2"] in rows, rep.stdout   # range, depth, calls (warm-up's left out)
    if extra:   # the GPU work of the steps inside it
        assert ["loop", "0", "0"] in rows, rep.stdout
