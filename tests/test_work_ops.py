"""Which CPU op does the work among nested ops (cuptiprof.work_ops): the rule an imported
torch.profiler trace without CUDA activity and a run without a GPU share, so that each op's
time is counted once, under the op that does it."""
from __future__ import annotations

import numpy as np
import pytest

from cuptiprof.work_ops import _composite, intervals_work


def doing_work(ops) -> list[str]:
    """ops: (name, parent index or -1, duration in us), parents first; the names chosen."""
    names = [n for n, _, _ in ops]
    parent = np.array([p for _, p, _ in ops])
    dur_ns = np.array([int(us * 1000) for _, _, us in ops])
    return [n for n, w in zip(names, intervals_work(names, parent, dur_ns)) if w]


def test_a_label_that_only_wraps_an_op_gives_it_its_time():
    # 'forward' spends 1 of its 10 us itself: the op inside does the work
    assert doing_work([("forward", -1, 10), ("aten::mm", 0, 9)]) == ["aten::mm"]


def test_a_label_that_does_its_own_work_is_the_op_and_nothing_under_it_counts_again():
    # 'load_batch' (no op torch knows) spends 9 of 10 us itself: it is the op; its child, and
    # the child's own leaf deeper down, are part of it
    got = doing_work([("load_batch", -1, 10), ("my_wrapper", 0, 1), ("aten::copy_", 1, 0.9)])
    assert got == ["load_batch"]


def test_an_op_whose_children_are_views_does_the_work_whatever_its_timing():
    # aten::mm calling aten::resolve_conj is aten::mm's work, even when the view takes long
    assert doing_work([("aten::mm", -1, 10), ("aten::resolve_conj", 0, 9)]) == ["aten::mm"]


def test_ops_of_no_duration_are_judged_without_dividing_by_it():
    # a timer too coarse for the op: 0 us around 0 us; the wrapper is not the op
    assert doing_work([("aten::relu", -1, 0), ("aten::clamp_min", 0, 0)]) == ["aten::clamp_min"]


@pytest.mark.parametrize("name", ["aten::linear", "aten::softmax"])
def test_a_composite_op_with_an_out_form_of_its_own_is_still_a_wrapper(name):
    """aten::linear.out and aten::softmax.int_out have kernels; every other overload only calls
    other ops, so aten::linear and aten::softmax are wrappers, however long they take."""
    pytest.importorskip("torch")
    assert _composite(name)
    assert doing_work([(name, -1, 10), ("aten::addmm", 0, 1)]) == ["aten::addmm"]


@pytest.mark.parametrize("label", ["my_block", "mymodel::forward"])
def test_a_label_torch_does_not_know_is_judged_by_its_timing(label):
    # a label named like an op ('mymodel::forward') is no op torch knows, so no wrapper by name
    pytest.importorskip("torch")
    assert not _composite(label) and not _composite("aten::mm")
    assert doing_work([(label, -1, 10), ("aten::mm", 0, 1)]) == [label]
