"""SQL that builds an event's JSON text, and SQL literals."""
from __future__ import annotations

import json

SEP = ",\n"  # between events; every event's text starts with it


class _Sql(str):
    """SQL expression whose value is JSON text (never NULL)."""


def _lit(v) -> str:
    return "NULL" if v is None else str(int(v))


# A query's event is a list of pieces: constant JSON text (str) and _Sql expressions, joined by
# one concat() per row. Every _Sql value is wrapped so that NULL becomes `null`: concat() would
# drop a NULL silently and leave invalid JSON.


def _q(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _val(x: str) -> _Sql:
    """A number (or JSON value) column as JSON."""
    return _Sql(f"coalesce(CAST({x} AS VARCHAR), 'null')")


def _str(x: str) -> _Sql:
    """A string as JSON (quotes, backslashes and control characters escaped)."""
    return _Sql(f"coalesce(CAST(to_json({x}) AS VARCHAR), 'null')")


def _us(ns: str) -> _Sql:
    """`ns` nanoseconds as exact microseconds with three decimals (integer arithmetic: a
    double would round away nanoseconds far from the base)."""
    return _Sql(f"concat(CASE WHEN {ns} < 0 THEN '-' END, abs({ns}) // 1000, '.', "
                f"lpad(CAST(abs({ns}) % 1000 AS VARCHAR), 3, '0'))")


def _case(col: str, texts: dict[str, str], default: str) -> _Sql:
    """`col` mapped through `texts` (else `default`), as a JSON string."""
    whens = " ".join(f"WHEN {_q(k)} THEN {_q(json.dumps(v))}" for k, v in texts.items())
    return _Sql(f"CASE {col} {whens} ELSE {_q(json.dumps(default))} END")


def _optional(key: str, cond: str, value: str) -> tuple:
    """An object member written only where `cond` holds (as the Python writer left keys out)."""
    return None, _Sql(f"CASE WHEN {cond} THEN concat({_q(',' + json.dumps(key) + ':')}, {value}) "
                      "ELSE '' END")


def _obj(*pairs) -> list:
    """Pieces of a JSON object: each value is an _Sql expression, a list of pieces (a nested
    object) or a constant; a (None, _Sql) pair is an `_optional` member."""
    pieces: list = ["{"]
    for i, (key, value) in enumerate(pairs):
        if key is not None:
            pieces.append(("," if i else "") + json.dumps(key) + ":")
        if isinstance(value, _Sql):
            pieces.append(value)
        elif isinstance(value, list):
            pieces.extend(value)
        else:
            pieces.append(json.dumps(value))
    pieces.append("}")
    return pieces


def _concat(pieces: list) -> str:
    """One SQL concat() of the pieces, adjacent constants merged."""
    args: list[str] = []
    text = ""
    for p in pieces:
        if isinstance(p, _Sql):
            if text:
                args.append(_q(text))
                text = ""
            args.append(p)
        else:
            text += p
    if text:
        args.append(_q(text))
    return f"concat({', '.join(args)})"


def _select(source: str, cols: dict[str, str], event: list, flow: list | None = None,
            where: str = "", flows: str | None = None) -> str:
    """Columns `text`: SEP + the event, and SEP + the flow event where the row has an arrow's
    end (`_fl`); `flow`: 1 where it does. `flows`: the flow events' text instead (each with its
    SEP), `_n` of them. `cols` are computed once per row, inside."""
    inner = ", ".join(f"{expr} AS {name}" for name, expr in cols.items())
    pieces = [SEP, *event]
    has_flow = "0"
    if flows is not None:
        has_flow = "CASE WHEN _fl THEN _n ELSE 0 END"
        pieces.append(_Sql(f"CASE WHEN _fl THEN {flows} ELSE '' END"))
    elif flow is not None:
        has_flow = "CAST(_fl AS INTEGER)"
        pieces.append(_Sql(f"CASE WHEN _fl THEN {_concat([SEP, *flow])} ELSE '' END"))
    return (f"SELECT {_concat(pieces)} AS text, {has_flow} AS flow "
            f"FROM (SELECT *, {inner} FROM {source}{where})")


def _times(base: int) -> dict[str, str]:
    return {"_ts": _us(f"(start_ns - {base})"), "_dur": _us("(end_ns - start_ns)")}


def _x(cat, name: _Sql, pid: _Sql, tid: _Sql, args: list) -> list:
    return _obj(("ph", "X"), ("cat", cat), ("name", name), ("pid", pid), ("tid", tid),
                ("ts", _Sql("_ts")), ("dur", _Sql("_dur")), ("args", args))


def _flow(ph: str, fid: _Sql, pid: _Sql, tid: _Sql, *extra) -> list:
    """An `ac2g` arrow's end on this row ("s" on the call, "f" on its GPU work)."""
    return _obj(("ph", ph), ("id", fid), ("pid", pid), ("tid", tid),
                ("ts", _Sql("_ts")), ("cat", "ac2g"), ("name", "ac2g"), *extra)
