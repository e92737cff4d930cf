"""One query per table that builds its events' JSON text (_EVENTS, in the order written)."""
from __future__ import annotations

import json

from cuptiprof.interop.chrome.json_sql import (SEP, _Sql, _case, _concat, _flow, _obj,
                                               _optional, _q, _select, _str, _times, _us,
                                               _val, _x)
from cuptiprof.interop.chrome.pids import _Pids
from cuptiprof.interop.chrome.tracks import NO_THREAD, _TID, _stream_sql, _track
from cuptiprof.interop.kineto import LOG_CATEGORY


def _ranges(source: str, base: int, pids: _Pids, last: int | None = None,
            streams: dict[str, int] | None = None) -> str:
    # GPU user annotations sit on their device's stream: attrs is {"device": d, "stream": s}.
    gpu = "domain = 'gpu_user_annotation'"
    attrs = "CASE WHEN json_valid(attrs) THEN attrs END"
    dev, stream = (f"json_extract({attrs}, '$.{k}')" for k in ("device", "stream"))
    stream = _stream_sql(stream, streams or {})
    cat = (f"CASE WHEN {gpu} THEN 'gpu_user_annotation' WHEN kind = 'step' THEN 'user_annotation' "
           "WHEN domain IN ('cpu_op', 'user_annotation', 'python_function') THEN domain "
           "WHEN kind = 'op' THEN 'cpu_op' ELSE 'user_annotation' END")
    gpu_pid = pids.gpu_sql(f"CASE WHEN {dev} IS NULL THEN 0 ELSE TRY_CAST({dev} AS BIGINT) END")
    # an annotation of no device is drawn on device 0's pid, which the importer reads as its
    # device where the args name none: where that pid is not the ordinal, args name device 0
    # and its step as recorded, that of the host annotation it mirrors (by time on the GPU,
    # the importer would put it in the step its work ran in, often a later one)
    gpu_args = _concat(_obj(("device", _val(f"coalesce({dev}, '0')" if pids.single and
                                            pids.gpu_base else dev)), ("stream", _val(stream)),
                            _optional("cuptiprof step", "step IS NOT NULL", _val("step"))))
    # What the category cannot say, in args of cuptiprof's own (Kineto readers show them and
    # read nothing into them): a domain other than the category (an NVTX domain, 'cuptiprof';
    # null: NVTX's default domain), and a warm-up step, which is not a step (no ProfilerStep#:
    # tools that read traces would count it as one) but a range under its own name.
    host_args = _concat(_obj(
        ("External id", _val("range_id")),
        _optional("cuptiprof domain", "domain IS DISTINCT FROM _cat", _str("domain")),
        _optional("cuptiprof kind", "kind = 'warmup'", "'\"warmup\"'"),
        _optional("cuptiprof step", "kind = 'warmup' AND step IS NOT NULL", _val("step")),
        _optional("cuptiprof open", "end_ns IS NULL", "'1'")))
    host_args = _with_attrs(host_args)
    # A range never closed (one entered around a serving loop and never left, say) ends at the
    # export's last time, which holds what ran inside it; "cuptiprof open" says it had no end.
    end = f"coalesce(end_ns, greatest({last if last is not None else 'start_ns'}, start_ns))"
    # an annotation's track is its stream's, as its kernels' (_track: a negative stream as an
    # unsigned 32-bit number, which the importer maps back)
    s = f"TRY_CAST({stream} AS BIGINT)"
    cols = {"_ts": _us(f"(start_ns - {base})"), "_dur": _us(f"({end} - start_ns)"),
            "_cat": cat,
            "_pid": f"CASE WHEN {gpu} THEN {gpu_pid} ELSE {pids.cpu_sql()} END",
            "_tid": f"CASE WHEN {gpu} THEN coalesce(CAST(CASE WHEN {s} IS NOT NULL THEN "
                    f"{_track(s)} END AS VARCHAR), CAST({stream} AS VARCHAR), {_val(_TID)}) "
                    f"ELSE {_val(_TID)} END",
            "_rest": _attrs_rest(gpu),
            "_args": f"CASE WHEN {gpu} THEN {gpu_args} ELSE {host_args} END"}
    # A step is ProfilerStep#N whatever the program called it: how torch.profiler marks steps,
    # and what the importer reads back as steps.
    name = "CASE WHEN kind = 'step' AND step IS NOT NULL THEN concat('ProfilerStep#', step) ELSE name END"
    event = _x(_Sql("concat('\"', _cat, '\"')"), _str(name), _val("_pid"), _Sql("_tid"),
               [_Sql("_args")])
    return _select(source, cols, event)


# the args of cuptiprof's own on a host range: on a clash with a key of its attrs, cuptiprof's
# win (the importer reads them back as columns), and those it leaves out on a row are dropped
# from its attrs too (an attr named "cuptiprof kind" would read back as a warm-up)
_OWN_KEYS = ("External id", "cuptiprof domain", "cuptiprof kind", "cuptiprof step",
             "cuptiprof open")


def _attrs_rest(gpu: str) -> str:
    """A host range's attrs less cuptiprof's own keys, as JSON object text, where they are a
    JSON object; NULL elsewhere (no attrs, not an object, a GPU annotation's). Parsed once,
    to check them, unless they name a key of cuptiprof's (then rewritten without it)."""
    drop = _q(json.dumps(dict.fromkeys(_OWN_KEYS)))
    text = "ltrim(attrs, ' \t\n\r')"
    return (f"CASE WHEN attrs IS NULL OR {gpu} THEN NULL "
            f"WHEN NOT json_valid(attrs) OR NOT starts_with({text}, '{{') THEN NULL "
            # an object without a quote has no key
            "WHEN NOT contains(attrs, '\"') THEN '{}' "
            "WHEN contains(attrs, '\"External id\"') OR contains(attrs, '\"cuptiprof ') "
            f"THEN CAST(json_merge_patch(attrs, {drop}) AS VARCHAR) ELSE {text} END")


def _with_attrs(own: str) -> str:
    """A host range's args: cuptiprof's own (`own`, JSON text), then the other keys of its
    attrs (cuptiprof.range's keywords, the parts of an op imported from Nsight Systems) from
    `_rest` (_attrs_rest). Attrs that are not a JSON object (not JSON, an array) go whole, as
    text, under "cuptiprof attrs". Rows of no attrs (most) are not parsed."""
    # not json_merge_patch(attrs, own): own's nulls ("cuptiprof domain": null) would delete
    return (f"CASE WHEN attrs IS NULL OR _rest = '{{}}' THEN {own} "
            f"WHEN _rest IS NOT NULL THEN concat(left({own}, -1), ',', substr(_rest, 2)) "
            f"ELSE concat(left({own}, -1), ',\"cuptiprof attrs\":', {_str('attrs')}, '}}') END")


def _api_calls(source: str, base: int, pids: _Pids) -> str:
    cols = {**_times(base), "_pid": pids.cpu_sql()}
    args = _obj(("correlation", _val("correlation_id")), ("External id", _val("range_id")),
                _optional("cbid", "cbid IS NOT NULL", "cbid"),
                _optional("cuptiprof return code", "return_code IS NOT NULL", _val("return_code")))
    cat = _case("api_kind", {"driver": "cuda_driver"}, "cuda_runtime")
    event = _x(cat, _str("name"), _val("_pid"), _val(_TID), args)
    # one "s" per GPU row of the call: flow ids as in _fid, m from 0 to _n - 1
    start = _flow("s", _Sql(f"CAST(correlation_id + {pids.flow_stride} * m AS VARCHAR)"),
                  _val("_pid"), _val(_TID))
    one = _flow("s", _Sql("correlation_id"), _val("_pid"), _val(_TID))   # _n = 1: most calls
    flows = (f"CASE WHEN _n = 1 THEN {_concat([SEP, *one])} ELSE array_to_string(list_transform("
             f"range(_n), lambda m: {_concat([SEP, *start])}), '') END")
    return _select(source, cols, event, flows=flows)


# The CUDA graph a kernel, copy or memset was launched from, under Kineto's keys (written by
# Kineto built with CUDA 12 on; left out where none, which Kineto says as 0); and, what Kineto
# has no key for, in args of cuptiprof's own that the importer reads back: a copy's
# asynchrony, a memset's value, a pool allocation (0 or 1 for a boolean).
_GRAPH = (_optional("graph id", "graph_id IS NOT NULL", _val("graph_id")),
          _optional("graph node id", "graph_node_id IS NOT NULL", _val("graph_node_id")))


def _flag(key: str, col: str) -> tuple:
    return _optional(key, f"{col} IS NOT NULL", f"CASE WHEN {col} THEN '1' ELSE '0' END")


def _gpu(source: str, base: int, pids: _Pids, cat: str, name: _Sql, extra: tuple,
         stream: str = "stream_id") -> str:
    """Kernels, copies, memsets and syncs: one frame, their own name and extra args (the
    stream as recorded; the track of a row without one is -1)."""
    cols = {**_times(base), "_pid": pids.gpu_sql("device_id"), "_stream": stream,
            "_track": _track(stream)}
    # A row whose launching call is not in the export (API calls not recorded, or a sync's)
    # says its step and innermost range, which the importer would otherwise take from that
    # call; so does one whose range is not its call's (an NVTX range the call does not name).
    # no device: -1 where the pid is not -1, which the importer would read instead
    dev = "coalesce(device_id, -1)" if pids.single and pids.gpu_base else "device_id"
    args = _obj(("device", _val(dev)), ("context", _val("context_id")),
                ("stream", _val("_stream")), ("correlation", _val("correlation_id")),
                ("External id", _val("op_id")), *extra,
                _optional("cuptiprof step", "step IS NOT NULL AND NOT _call", _val("step")),
                _optional("cuptiprof range", "range_id IS NOT NULL AND (NOT _call OR _apart)",
                          _val("range_id")))
    event = _x(cat, name, _val("_pid"), _val("_track"), args)
    fid = _Sql(f"CAST(correlation_id + {pids.flow_stride} * _m AS VARCHAR)")
    return _select(source, cols, event, _flow("f", fid, _val("_pid"), _val("_track"), ("bp", "e")))


def _kernels(source: str, base: int, pids: _Pids) -> str:
    def dims(key: str) -> tuple:  # [x, y, z], left out unless all three are known (Kineto
        # readers, cuptiprof's own import included, take three integers or no grid at all)
        xyz = ", ',', ".join(_val(f"{key}_{c}") for c in "xyz")
        known = " AND ".join(f"{key}_{c} IS NOT NULL" for c in "xyz")
        return _optional(key, known, f"'[', {xyz}, ']'")
    # Kineto's "shared memory" is static plus dynamic; the dynamic part is said apart, so
    # that the importer splits the sum again
    smem = ("CASE WHEN static_smem IS NOT NULL OR dynamic_smem IS NOT NULL THEN "
            "coalesce(static_smem, 0) + coalesce(dynamic_smem, 0) END")
    return _gpu(source, base, pids, "kernel", _str("name"),
                (("registers per thread", _val("registers")), ("shared memory", _val(smem)),
                 _optional("cuptiprof dynamic smem", "static_smem IS NOT NULL AND dynamic_smem "
                           "IS NOT NULL", _val("dynamic_smem")),
                 dims("grid"), dims("block"), *_GRAPH))


# CUPTI's memory kinds in Kineto's words (the importer reads them back)
_MEM = {"pageable": "Pageable", "pinned": "Pinned", "device": "Device", "array": "Array",
        "managed": "Managed", "device_static": "Device Static", "managed_static": "Managed Static"}


def _mem(col: str) -> str:
    whens = " ".join(f"WHEN {_q(k)} THEN {_q(v)}" for k, v in _MEM.items())
    return f"CASE {col} {whens} ELSE 'Unknown' END"


def _bandwidth() -> tuple:
    """bytes and bytes/ns (= GB/s); 0.0 where the duration is not positive."""
    bw = ("CASE WHEN bytes IS NOT NULL AND end_ns > start_ns THEN bytes / (end_ns - start_ns) "
          "ELSE 0.0 END")
    return (("bytes", _val("bytes")),
            ("memory bandwidth (GB/s)", _Sql(f"CAST(to_json(CAST({bw} AS DOUBLE)) AS VARCHAR)")))


def _memcpys(source: str, base: int, pids: _Pids) -> str:
    name = (f"concat('Memcpy ', coalesce(copy_kind, 'None'), ' (', {_mem('src_kind')}, ' -> ', "
            f"{_mem('dst_kind')}, ')')")
    # a peer copy's source and destination devices (NULL for the other copies), under
    # Kineto's keys
    peer = tuple(_optional(key, f"{k}_device_id IS NOT NULL", _val(f"{k}_device_id"))
                 for key, k in (("fromDevice", "src"), ("toDevice", "dst")))
    return _gpu(source, base, pids, "gpu_memcpy", _str(name),
                (*_bandwidth(), *_GRAPH, _flag("cuptiprof async", "is_async"), *peer))


def _memsets(source: str, base: int, pids: _Pids) -> str:
    name = f"concat('Memset (', {_mem('memory_kind')}, ')')"
    return _gpu(source, base, pids, "gpu_memset", _str(name),
                (*_bandwidth(), *_GRAPH,
                 _optional("cuptiprof value", "value IS NOT NULL", _val("value"))))


_SYNC_NAME = {"event_synchronize": "Event Sync", "stream_synchronize": "Stream Sync",
              "context_synchronize": "Context Sync", "stream_wait_event": "Stream Wait Event"}


def _syncs(source: str, base: int, pids: _Pids) -> str:
    # A context-wide sync has no stream: it goes on tid -1.
    return _gpu(source, base, pids, "cuda_sync", _case("sync_type", _SYNC_NAME, "Sync"),
                (_optional("wait_on_cuda_event_id", "cuda_event_id IS NOT NULL",   # Kineto's key
                           _val("cuda_event_id")),),
                stream="coalesce(stream_id, -1)")


def _memory_events(source: str, base: int, pids: _Pids) -> str:
    # torch.profiler's `[memory]` instants (what the importer reads back): on the process's CPU
    # track (no thread is recorded), Device Type 1 (CUDA), Bytes negative for a free.
    cols = {"_ts": _us(f"(time_ns - {base})"), "_pid": pids.cpu_sql()}
    args = _obj(("Device Type", 1), ("Device Id", _val("device_id")), ("Addr", _val("address")),
                ("Bytes", _val("CASE WHEN operation = 'free' THEN -bytes ELSE bytes END")),
                _optional("cuptiprof step", "step IS NOT NULL", _val("step")),
                _flag("cuptiprof pool", "pool"),
                # not Kineto's: the allocating call's correlation id (moved apart with the
                # calls' in an export of several processes), and a memory kind other than
                # 'device', which an import without it takes (a NULL one comes back 'device':
                # the collector always names one)
                _optional("cuptiprof correlation", "correlation_id IS NOT NULL",
                          _val("correlation_id")),
                _optional("cuptiprof kind", "memory_kind IS NOT NULL AND memory_kind <> 'device'",
                          _str("memory_kind")))
    event = _obj(("ph", "i"), ("s", "t"), ("cat", "cpu_instant_event"), ("name", "[memory]"),
                 ("pid", _val("_pid")), ("tid", NO_THREAD), ("ts", _Sql("_ts")), ("args", args))
    return _select(source, cols, event)


def _logs(source: str, base: int, pids: _Pids) -> str:
    # Python logging records: instants on their thread's track in a category of cuptiprof's own
    # (Kineto readers skip categories they do not know; the importer reads them back into
    # `logs`), the message as the name, the step as recorded ("cuptiprof step")
    cols = {"_ts": _us(f"(time_ns - {base})"), "_pid": pids.cpu_sql()}
    args = _obj(("level", _str("level")), ("logger", _str("logger")),
                _optional("cuptiprof step", "step IS NOT NULL", _val("step")))
    event = _obj(("ph", "i"), ("s", "t"), ("cat", LOG_CATEGORY), ("name", _str("message")),
                 ("pid", _val("_pid")), ("tid", _val(_TID)), ("ts", _Sql("_ts")), ("args", args))
    return _select(source, cols, event, where=" WHERE time_ns IS NOT NULL")


# In the order they are written: ranges and calls (CPU), then GPU work, then log records.
_EVENTS = {"ranges": _ranges, "api_calls": _api_calls, "kernels": _kernels, "memcpys": _memcpys,
           "memsets": _memsets, "syncs": _syncs, "memory_events": _memory_events, "logs": _logs}
