"""Which CPU op does the work, where no GPU kernel says it: the rule `cuptiprof run` without a
GPU uses to store torch.profiler ops as `kernels` rows on device -1, and the one an imported
torch.profiler trace recorded without CUDA activity gets, so that the two compare op for op.

Events follow torch.profiler's FunctionEvent (name, cpu_children, cpu_parent,
self_cpu_time_total, time_range.elapsed_us()); `intervals_work` builds such events from nested
intervals.
"""
from __future__ import annotations

import functools


# Child ops that do no work of their own: an op whose children are all of these is still the
# op that does the work (aten::mm calls aten::resolve_conj; aten::linear's aten::t is a view).
METADATA_OPS = frozenset(
    "aten::" + n for n in (
        "resolve_conj resolve_neg as_strided view empty empty_strided empty_like t transpose "
        "expand reshape _reshape_alias unsqueeze squeeze permute slice select detach alias "
        "lift_fresh _unsafe_view result_type stride size numpy_T split chunk narrow unbind "
        "is_nonzero _local_scalar_dense item").split())


def judge_names(events, decided: dict) -> None:
    """Decide, per op name not yet decided, whether its calls with real children do their own
    work. Once per name for the whole process, so that the same op is (or is not) the one doing
    the work in every step: judged per call or per batch of steps, an op near the line
    (aten::relu around aten::clamp_min, aten::matmul around a small aten::mm) flipped with timing
    noise. A composite op of torch's dispatcher (aten::matmul, aten::linear, aten::softmax) has
    no kernel of its own, so it is a wrapper whatever its timing; any other goes by its self time
    over its duration, summed over its calls (aten::addmm around a small aten::copy_ works)."""
    self_t: dict = {}
    dur_t: dict = {}
    for e in events:
        if e.name not in decided and e.cpu_children:
            self_t[e.name] = self_t.get(e.name, 0.0) + e.self_cpu_time_total
            dur_t[e.name] = dur_t.get(e.name, 0.0) + e.time_range.elapsed_us()
    for name, d in dur_t.items():
        if d > 0:
            decided[name] = not _composite(name) and self_t[name] / d >= 0.5


@functools.lru_cache(maxsize=None)
def _composite(name: str) -> bool:
    """Every overload of the op (its out= forms aside) is CompositeImplicitAutograd: it only
    calls other ops. False for names torch does not know (user ops, record_function labels)."""
    try:
        import torch

        has = torch._C._dispatch_has_kernel_for_dispatch_key
        found = []
        for schema in torch._C._jit_get_schemas_for_operator(name):
            overload = schema.overload_name
            if overload.endswith("out"):
                continue
            try:
                found.append(has(f"{name}.{overload}" if overload else name,
                                 "CompositeImplicitAutograd"))
            except RuntimeError:    # a TorchScript-only overload (aten::add.str)
                continue
        return bool(found) and all(found)
    except Exception:               # no torch, or a torch without these internals
        return False


def _is_work(e, decided: dict) -> bool:
    """The op does its own work: its children are metadata only, or its name was judged to
    (`judge_names`), unlike wrappers such as aten::linear whose time is their children's."""
    if all(c.name in METADATA_OPS for c in e.cpu_children):
        return True
    return decided.get(e.name, False)


def is_kernel(e, decided: dict) -> bool:
    """The op that does the work: its children are metadata only, and no ancestor is such an op
    (so time is counted once)."""
    if not _is_work(e, decided):
        return False
    p, d = e.cpu_parent, 0
    while p is not None and d < 256:
        if _is_work(p, decided):
            return False
        p, d = p.cpu_parent, d + 1
    return True


class _Op:
    """A FunctionEvent's shape, from an interval of an imported trace (times in microseconds)."""
    __slots__ = ("name", "cpu_children", "cpu_parent", "self_cpu_time_total", "_us")

    def __init__(self, name: str, us: float):
        self.name, self._us = name, us
        self.cpu_children: list = []
        self.cpu_parent = None
        self.self_cpu_time_total = us

    @property
    def time_range(self):
        return self

    def elapsed_us(self) -> float:
        return self._us


def intervals_work(names: list, parent, dur_ns, decided: dict | None = None):
    """The ops that do the work among nested intervals (parent: index of the enclosing one, -1
    for none; its children's time is not its own), by `judge_names` and `is_kernel`: a numpy
    bool array. (numpy is imported here: a profiled process loads this module for the rule
    alone, and an interpreter without numpy must still run its program.)"""
    import numpy as np

    ops = [_Op(n, d / 1000) for n, d in zip(names, dur_ns.tolist())]
    for op, p in zip(ops, parent.tolist()):
        if p >= 0:
            up = ops[p]
            op.cpu_parent = up
            up.cpu_children.append(op)
            up.self_cpu_time_total -= op._us
    decided = {} if decided is None else decided
    judge_names(ops, decided)
    return np.fromiter((is_kernel(op, decided) for op in ops), bool, len(ops))
