"""Interval bookkeeping shared by the importers: range nesting, launch attribution, steps.

Ranges on one thread nest (a CPU op inside an annotation inside a step); an API call belongs
to the innermost range open on its thread when it started. One sorted sweep per thread
answers both, the way the CUPTI collector decides it at collection time.
"""
from __future__ import annotations

import numpy as np

from cuptiprof.interop import pieces
from cuptiprof.store.arrow import distinct


def nest(r_key, r_start, r_end, r_is_op, c_key, c_start, c_end):
    """Parent index and depth of each range; innermost range and innermost op of each call.

    Keys group rows by thread (ranges and calls nest only within one key). Indices are
    positions in the inputs, -1 for none.
    """
    n, m = len(r_start), len(c_start)
    keys = np.concatenate([np.asarray(r_key, np.int64), np.asarray(c_key, np.int64)])
    starts = np.concatenate([np.asarray(r_start, np.int64), np.asarray(c_start, np.int64)])
    ends = np.concatenate([np.asarray(r_end, np.int64), np.asarray(c_end, np.int64)])
    typ = np.concatenate([np.zeros(n, np.int8), np.ones(m, np.int8)])
    # thread, then start; at equal starts ranges before calls, longer ranges first.
    order = np.lexsort((-ends, typ, starts, keys))
    is_op = np.ascontiguousarray(r_is_op, np.int8)
    if pieces.native_enabled():  # the sweep in C (the native module is built and not off)
        parent, depth, c_range, c_op = pieces.native().sweep(order.astype(np.int64), keys,
                                                             starts, ends, is_op, n)
        return (np.frombuffer(parent, np.int64), np.frombuffer(depth, np.int32),
                np.frombuffer(c_range, np.int64), np.frombuffer(c_op, np.int64))
    return _sweep(order.tolist(), keys.tolist(), starts.tolist(), ends.tolist(),
                  is_op.astype(bool).tolist(), n, m)


def _sweep(order, keys_l, starts_l, ends_l, is_op, n, m):
    """The sweep in Python (the native one does the same)."""
    parent = [-1] * n
    depth = [0] * n
    c_range = [-1] * m
    c_op = [-1] * m
    s_end: list[int] = []
    s_idx: list[int] = []
    s_op: list[int] = []
    cur = None
    for i in order:
        k = keys_l[i]
        if k != cur:
            cur = k
            s_end.clear(); s_idx.clear(); s_op.clear()
        s = starts_l[i]
        while s_end and s_end[-1] <= s:
            s_end.pop(); s_idx.pop(); s_op.pop()
        if i < n:
            if s_idx:
                parent[i] = s_idx[-1]
                depth[i] = len(s_idx)
                op = i if is_op[i] else s_op[-1]
            else:
                op = i if is_op[i] else -1
            s_end.append(ends_l[i]); s_idx.append(i); s_op.append(op)
        elif s_idx:
            j = i - n
            c_range[j] = s_idx[-1]
            c_op[j] = s_op[-1]
    return (np.array(parent, np.int64), np.array(depth, np.int32),
            np.array(c_range, np.int64), np.array(c_op, np.int64))


def steps_at(times, step_start, step_end, step_n, keys=None, step_keys=None):
    """Step index whose [start, end) holds each time; -1 where none does.

    Steps of one thread do not overlap (each ProfilerStep ends where the next begins); those of
    several processes in one file can (an exported merge of ranks). keys / step_keys: the
    thread of each time and step; given, a time takes a step of its own thread first, then
    the latest-started step that holds it.
    """
    times = np.asarray(times, np.int64)
    out = np.full(len(times), -1, np.int64)
    if len(step_start) == 0 or len(times) == 0:
        return out
    order = np.argsort(step_start, kind="stable")
    ss = np.asarray(step_start, np.int64)[order]
    se = np.asarray(step_end, np.int64)[order]
    sn = np.asarray(step_n, np.int64)[order]
    overlap = len(ss) > 1 and bool((ss[1:] < np.maximum.accumulate(se)[:-1]).any())
    if overlap and keys is not None and step_keys is not None:
        keys = np.asarray(keys, np.int64)
        sk = np.asarray(step_keys, np.int64)[order]
        for k in distinct(sk):
            mine, at = np.flatnonzero(sk == k), np.flatnonzero(keys == k)
            out[at] = _latest_holding(times[at], ss[mine], se[mine], sn[mine])
        left = np.flatnonzero(out < 0)
        out[left] = _latest_holding(times[left], ss, se, sn)
    else:
        out = _latest_holding(times, ss, se, sn)
    if overlap:   # a time past the latest-started step's end may be inside an earlier one
        reach = np.maximum.accumulate(se)
        idx = np.searchsorted(ss, times, side="right") - 1
        left = np.flatnonzero((out < 0) & (idx >= 0))
        left = left[times[left] < reach[idx[left]]]
        for i in range(len(ss) - 1, -1, -1):
            if not len(left):
                break
            hit = (times[left] >= ss[i]) & (times[left] < se[i])
            out[left[hit]] = sn[i]
            left = left[~hit]
    return out


def _latest_holding(times, ss, se, sn):
    """Over steps sorted by start: the step of the latest-started step if it holds the time."""
    out = np.full(len(times), -1, np.int64)
    if len(ss) == 0 or len(times) == 0:
        return out
    idx = np.searchsorted(ss, times, side="right") - 1
    ok = idx >= 0
    ok[ok] = times[ok] < se[idx[ok]]
    out[ok] = sn[idx[ok]]
    return out
