"""cuptiprof.run.nested: an inner function decorated by compiling its enclosing function again."""
from __future__ import annotations

import sys
import textwrap
import traceback

import pytest

from cuptiprof.run import nested


def _load(tmp_path, body, name="mod_nested", encoding="utf-8"):
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(body), encoding=encoding)
    sys.path.insert(0, str(tmp_path))
    try:
        mod = __import__(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
    return mod, p


def _counting(calls, key=lambda f: f.__name__):
    """A decorator whose wrapper appends key(f) to calls at each call of the function f."""
    def deco(f):
        def w(*a, **kw):
            calls.append(key(f))
            return f(*a, **kw)
        return w
    return deco


BODY = """
    def outer(k, fail=False):
        \"\"\"Doc.\"\"\"
        def inner(x, y=3):
            if fail:
                raise ValueError("boom")
            return x * k + y
        return inner(1)
"""


def test_inner_function_is_decorated_and_keeps_closure_defaults_and_lines(tmp_path):
    mod, _ = _load(tmp_path, BODY)
    calls = []
    deco = _counting(calls)

    before = mod.outer(2)
    nested.decorate_inner(mod.outer, ["inner"], deco, "__test_deco__")
    assert mod.outer(2) == before == 5 and calls == ["inner"]
    assert mod.outer.__doc__ == "Doc." and mod.outer.__code__.co_firstlineno == 2
    with pytest.raises(ValueError) as exc:
        mod.outer(2, fail=True)
    line = traceback.extract_tb(exc.value.__traceback__)[-1].lineno
    assert line == 6   # the inner function's own line, as in the file


def test_a_changed_source_or_missing_inner_function_is_not_reachable(tmp_path):
    mod, p = _load(tmp_path, BODY, name="mod_nested2")
    with pytest.raises(nested.NotReachable, match="defines no function nope"):
        nested.decorate_inner(mod.outer, ["nope"], lambda f: f, "__t__")
    p.write_text("\n\n\n" + p.read_text())   # the function moved
    with pytest.raises(nested.NotReachable, match="changed since outer was defined"):
        nested.decorate_inner(mod.outer, ["inner"], lambda f: f, "__t__")
    with pytest.raises(nested.NotReachable, match="not a Python function"):
        nested.decorate_inner(len, ["x"], lambda f: f, "__t__")


def test_a_method_of_the_same_name_in_a_class_inside_is_left_alone(tmp_path):
    """Only the function `outer` itself defines is decorated, not a method of the same name of
    a class that `outer` defines."""
    mod, _ = _load(tmp_path, """
        def outer():
            class Helper:
                def inner(self):
                    return "method"
            def inner():
                return "function"
            return Helper().inner(), inner()
    """, name="mod_nested3")
    calls = []
    deco = _counting(calls, key=lambda f: f.__qualname__)

    nested.decorate_inner(mod.outer, ["inner"], deco, "__test_deco__")
    assert mod.outer() == ("method", "function") and calls == ["outer.<locals>.inner"]


def test_a_closure_changed_since_it_was_defined_is_not_reachable(tmp_path):
    """The enclosing function is itself a closure, and its file changed since (at the same line,
    another variable of the function around it is used): its code is not replaced by one that
    would read the wrong variable."""
    mod, p = _load(tmp_path, """
        def make(a, b):
            def outer():
                def inner():
                    return a
                return inner()
            return outer
        outer = make(1, 2)
    """, name="mod_nested4")
    p.write_text(p.read_text().replace("return a", "return b"))
    with pytest.raises(nested.NotReachable, match="could not be compiled again to the same closure"):
        nested.decorate_inner(mod.outer, ["inner"], lambda f: f, "__t__")
    assert mod.outer() == 1


def test_the_decorator_goes_outside_the_inner_functions_own(tmp_path):
    """The inner function's own decorators (a cache, torch.no_grad) stay inside the one added:
    each call of the inner function goes through it first, even one its own decorator answers
    without calling the function."""
    mod, _ = _load(tmp_path, """
        import functools
        seen = []

        def outer():
            @functools.lru_cache
            def inner(x):
                seen.append("body")
                return x
            return inner(1), inner(1)
    """, name="mod_nested5")

    def deco(f):
        def w(*a, **kw):
            mod.seen.append("added")
            return f(*a, **kw)
        return w

    nested.decorate_inner(mod.outer, ["inner"], deco, "__test_deco__")
    assert mod.outer() == (1, 1) and mod.seen == ["added", "body", "added"]


def test_a_method_whose_name_another_class_shares(tmp_path):
    """`B.run.step` where class A above it has a `run` too: B.run gets its own code again, with
    the step decorated, not A's."""
    mod, _ = _load(tmp_path, """
        class A:
            def run(self):
                def step():
                    return "A"
                return step()

        class B:
            def run(self):
                def step():
                    return "B"
                return step()
    """, name="mod_nested6")
    calls = []
    deco = _counting(calls, key=lambda f: f.__qualname__)

    nested.decorate_inner(mod.B.run, ["step"], deco, "__test_deco__")
    assert (mod.A().run(), mod.B().run()) == ("A", "B") and calls == ["B.run.<locals>.step"]


def test_the_enclosing_function_compiled_again_keeps_its_files_annotations(tmp_path):
    """The code compiled again is compiled as its own file was (no `from __future__` of
    cuptiprof's): the inner function's annotations stay the objects, not strings."""
    mod, _ = _load(tmp_path, """
        def outer():
            def inner(x: int) -> int:
                return x
            return inner(1)
    """, name="mod_nested7")
    seen = []

    def deco(f):
        seen.append(f.__annotations__)
        return f

    nested.decorate_inner(mod.outer, ["inner"], deco, "__test_deco__")
    assert mod.outer() == 1 and seen == [{"x": int, "return": int}]


def test_a_file_in_the_encoding_its_coding_line_names(tmp_path):
    """The source is read again in the encoding its `# -*- coding -*-` line names (as Python
    read it), not in the locale's."""
    mod, _ = _load(tmp_path, """
        # -*- coding: latin-1 -*-
        def outer():
            def inner():
                return "café"
            return inner()
    """, name="mod_nested8", encoding="latin-1")
    calls = []

    def deco(f):
        calls.append(f.__name__)
        return f

    nested.decorate_inner(mod.outer, ["inner"], deco, "__test_deco__")
    assert mod.outer() == "café" and calls == ["inner"]


def _pythons():
    from test_run_step_fn_main import _other_pythons
    return _other_pythons("import sys; sys.orig_argv")


@pytest.mark.parametrize("exe", _pythons() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no other Python 3.10+ on PATH or under pyenv"))])
def test_on_other_pythons(tmp_path, exe):
    import subprocess
    from pathlib import Path

    (tmp_path / "mod_other.py").write_text(textwrap.dedent(BODY))
    root = Path(__file__).resolve().parents[1]
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(root)!r}, {str(tmp_path)!r}]
        from cuptiprof.run import nested
        import mod_other
        seen = []
        def deco(f):
            def w(*a):
                seen.append(1)
                return f(*a)
            return w
        nested.decorate_inner(mod_other.outer, ["inner"], deco, "__t__")
        print(mod_other.outer(2), len(seen))
    """)
    r = subprocess.run([exe, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["5", "1"]


def test_an_enclosing_function_under_a_decorator_of_its_own(tmp_path):
    """`@torch.inference_mode()` on main: the name in the module is the wrapper, and the
    function's first line is its decorator's."""
    mod, _ = _load(tmp_path, """
        import functools

        def keep(f):
            @functools.wraps(f)
            def w(*a, **kw):
                return f(*a, **kw)
            return w

        @keep
        def outer(k):
            def inner(x):
                return x + k
            return inner(1)
    """, name="mod_nested_wrapped")
    calls = []
    nested.decorate_inner(mod.outer, ["inner"], _counting(calls), "__test_deco__")
    assert mod.outer(2) == 3 and calls == ["inner"]


def test_each_definition_of_the_inner_function_is_decorated(tmp_path):
    """An inner function defined in both branches of an if: whichever a call defines is a step."""
    mod, _ = _load(tmp_path, """
        def outer(fast):
            if fast:
                def inner():
                    return "fast"
            else:
                def inner():
                    return "slow"
            return inner()
    """, name="mod_nested_branches")
    calls = []
    nested.decorate_inner(mod.outer, ["inner"], _counting(calls, key=lambda f: f()), "__test_deco__")
    assert (mod.outer(True), mod.outer(False)) == ("fast", "slow")
    assert calls == ["fast", "slow"]
