"""Results of con.execute() are read to their end. DuckDB 2 keeps a result that fetchone() read
only part of open, and then refuses con.sql(), con.table() and every relation of that connection
("connection has an unfinished result from execute()"); cuptiprof reads single rows through
store.files.first_row, which fetches them all."""
from __future__ import annotations

import ast
from pathlib import Path

import duckdb
import pytest

import cuptiprof
from cuptiprof.store.files import first_row

PACKAGE = Path(cuptiprof.__file__).parent


def test_first_row_ends_the_result():
    con = duckdb.connect()
    try:
        assert first_row(con.execute("SELECT * FROM range(5) ORDER BY 1")) == (0,)
        assert con.sql("SELECT 42").fetchall() == [(42,)]
        assert first_row(con.execute("SELECT 1 WHERE false")) is None
        assert con.sql("SELECT 43").fetchall() == [(43,)]
        assert first_row(con.execute("SELECT ?, ?", [1, "a"])) == (1, "a")
        con.execute("CREATE TABLE t AS SELECT 7 AS x")
        assert first_row(con.execute("SELECT x FROM t")) == (7,)
        assert con.table("t").fetchall() == [(7,)]
    finally:
        con.close()


def _fetchone_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "fetchone"]


def test_no_fetchone_in_cuptiprof():
    """A fetchone() of an execute() result left the connection refusing its relations (DuckDB 2):
    single rows are read with store.files.first_row."""
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
             for line in _fetchone_calls(p)]
    assert not found, ("fetchone() leaves a DuckDB 2 result unfinished; use "
                       f"cuptiprof.store.files.first_row(con.execute(...)) at {', '.join(found)}")


@pytest.mark.parametrize("src", ["row = con.execute('SELECT 1').fetchone()",
                                 "n = con.execute(\n    'SELECT 1'\n).fetchone()[0]"])
def test_the_scan_finds_a_fetchone(tmp_path, src):
    f = tmp_path / "m.py"
    f.write_text(src + "\n# .fetchone() in a comment is no call\n")
    assert _fetchone_calls(f) == [1]
