"""Decorate a function defined inside another function (`--step-fn __main__:main.denoise_step`)
without touching the program's files: the enclosing function's source is compiled again with one
more decorator on the inner `def`, and the new code replaces the enclosing function's
`__code__`. Every later call of the enclosing function then defines the inner function already
decorated; names, line numbers, closures and defaults stay as they were.

Standard library only: imported in every process `cuptiprof run` starts that asks for it.
"""
from __future__ import annotations

import ast
import inspect
import tokenize
import types
from typing import Callable

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


class NotReachable(Exception):
    """The inner function cannot be decorated this way; the message says why."""


def _first_line(node: ast.AST) -> int:
    return min([d.lineno for d in node.decorator_list] + [node.lineno])


def _inner_defs(node: ast.AST, name: str) -> list:
    """`def name` statements in `node`'s own body (inside if/for/with/try blocks too, not inside
    other functions or classes)."""
    found, todo = [], list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        if isinstance(n, _DEFS) and n.name == name:
            found.append(n)
        elif not isinstance(n, (*_DEFS, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(n))
    return found


def _code_in(code: types.CodeType, name: str, first_line: int) -> types.CodeType | None:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name and c.co_firstlineno == first_line:
                return c
            hit = _code_in(c, name, first_line)
            if hit is not None:
                return hit
    return None


def decorate_inner(func: Callable, path: list[str], decorator: Callable, tag: str) -> None:
    """Give the function nested in `func` at `path` (names of inner functions, outermost first)
    `decorator` as its outermost decorator. `tag` names the decorator in func's globals."""
    raw = inspect.unwrap(func)
    code = getattr(raw, "__code__", None)
    if not isinstance(raw, types.FunctionType) or code is None:
        raise NotReachable(f"{func!r} is not a Python function")
    try:
        with tokenize.open(code.co_filename) as fh:
            source = fh.read()
        tree = ast.parse(source, code.co_filename)
    except (OSError, SyntaxError, ValueError) as exc:
        raise NotReachable(f"the source of {code.co_qualname if hasattr(code, 'co_qualname') else code.co_name} "
                           f"cannot be read again ({exc})") from None
    outer = [n for n in ast.walk(tree) if isinstance(n, _DEFS) and n.name == code.co_name
             and _first_line(n) == code.co_firstlineno]
    if len(outer) != 1:
        raise NotReachable(f"{code.co_filename} changed since {code.co_name} was defined")
    nodes = outer
    for name in path:
        nodes = [d for n in nodes for d in _inner_defs(n, name)]
        if not nodes:
            raise NotReachable(f"{code.co_name} defines no function {name}")
    for n in nodes:
        n.decorator_list.insert(0, ast.copy_location(ast.Name(id=tag, ctx=ast.Load()), n))
    ast.fix_missing_locations(tree)
    new_module = compile(tree, code.co_filename, "exec", dont_inherit=True)
    new = _code_in(new_module, code.co_name, code.co_firstlineno)
    if new is None or new.co_freevars != code.co_freevars:
        raise NotReachable(f"{code.co_name} could not be compiled again to the same closure")
    raw.__globals__[tag] = decorator
    raw.__code__ = new
