"""Mistakes in calls of cuptiprof.profile() and cuptiprof.open(): one clear message naming what
is wrong, nothing left behind or held open, and the corrected call works."""
from __future__ import annotations

import re

import duckdb
import pytest

import cuptiprof
from cuptiprof import markers
from cuptiprof.collect import session as session_mod
from cuptiprof.errors import UsageError


@pytest.fixture(autouse=True)
def _no_leftover_session():
    yield
    assert session_mod.current() is None, "a test left a session active"
    assert markers._session is None


def test_unknown_source_leaves_no_file_and_the_retry_works(tmp_path):
    p = tmp_path / "s.duckdb"
    with pytest.raises(UsageError, match="unknown source 'gpu'; use 'cupti', 'fake' or 'none'"):
        cuptiprof.profile(p, source="gpu").start()
    assert list(tmp_path.iterdir()) == []
    cuptiprof.profile(p, source="none", quiet=True).start().stop()
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT status FROM runs").fetchall() == [("complete",)]



def test_profile_and_open_of_a_path_holding_a_backslash_say_why_in_one_line(tmp_path):
    """DuckDB takes a backslash for a folder separator: profile('w\\x.duckdb') said it cannot
    open w/x.duckdb ('No such file or directory'), a path the user never gave, and open() of
    such a file read another one (w/x.duckdb) where that existed."""
    from cuptiprof.errors import StoreError
    p = tmp_path / "w\\x.duckdb"
    why = "the path holds a backslash, which DuckDB takes for a folder separator"
    with pytest.raises(StoreError, match=re.escape(f"{p}: {why}")):
        with cuptiprof.profile(p, source="none", quiet=True):
            pass
    assert list(tmp_path.iterdir()) == []
    cuptiprof.profile(tmp_path / "ok.duckdb", source="none", quiet=True).start().stop()
    (tmp_path / "w").mkdir()
    (tmp_path / "ok.duckdb").rename(tmp_path / "w" / "x.duckdb")   # the file DuckDB would open
    p.write_bytes((tmp_path / "w" / "x.duckdb").read_bytes())
    with pytest.raises(StoreError, match=re.escape(f"{p}: {why}")):
        cuptiprof.open(p)

@pytest.mark.parametrize("kw, says", [
    ({"warmup": "2"}, "warmup must be a whole number >= 0, not '2'"),
    ({"steps": 2.5}, "steps must be a whole number >= 1 or None, not 2.5"),
    ({"warmup": True}, "warmup must be a whole number >= 0, not True"),
    ({"warmup": None}, "warmup must be a whole number >= 0, not None"),
    ({"steps": -1}, "steps must be a whole number >= 1 or None, not -1"),
    # no step recorded after warm-up, every launch before the first one unclaimed; as run --steps 0
    ({"steps": 0}, "steps must be a whole number >= 1 or None, not 0"),
    # a count no step number reaches was taken, as `run --steps` took one
    ({"warmup": 2 ** 31}, "warmup: 2147483648 is more steps than can be numbered; give at most "
     "2147483647 (steps are numbered from -2147483648 to 2147483647)"),
    ({"steps": 10 ** 30}, "steps: a count of 31 digits is more steps than can be numbered"),
    ({"range_filter": 5}, "range_filter must be a glob, a list of globs or a function"),
    ({"range_filter": ["attn*", 3]}, "range_filter must be a glob, a list of globs or a function"),
    # a mode of no meaning appended to an existing file; a source of no use failed in start()
    # with an AttributeError after making the file; kinds=3 failed with a TypeError; a step_range
    # that is no name matched no range, silently
    ({"mode": "replace"}, "mode must be one of 'create', 'overwrite', 'append', not 'replace'"),
    ({"source": 3}, "unknown source 3; use 'cupti', 'fake' or 'none'"),
    ({"kinds": 3}, "unknown kind(s) 3; choose from kernel, memcpy"),
    ({"kinds": ["kernel", 3]}, "unknown kind(s) 3; choose from kernel, memcpy"),
    # a blank string (kinds=os.environ.get("KINDS", "")) chose no kind, silently; as
    # `run --kinds ""` is refused
    ({"kinds": ""}, "kinds '': no kind given; choose from kernel, memcpy"),
    ({"kinds": " , "}, "kinds ' , ': no kind given; choose from kernel, memcpy"),
    ({"step_range": 3}, "step_range must be a range's name (a str) or None, not 3"),
    # a blank name marked no step and recorded a run without steps, as `run --step-range ""` did
    ({"step_range": ""}, "step_range '': empty; give the name of the range, or None"),
    ({"step_range": " "}, "step_range ' ': empty; give the name of the range, or None"),
    # a blank glob (read from an unset variable) matched no range: every range of the program
    # went unrecorded, silently
    ({"range_filter": ""}, "range_filter '': empty; give a glob of range names, or None"),
    ({"range_filter": ["attn*", " "]}, "range_filter ' ': empty; give a glob of range names, or None"),
])
def test_profile_refuses_bad_arguments_in_python_words(tmp_path, kw, says):
    """A string count compared with an int (TypeError), a fractional step count (one more step
    recorded than asked), a number as a filter (not iterable): each is refused when called."""
    with pytest.raises(UsageError, match=re.escape(says)):
        cuptiprof.profile(tmp_path / "p.duckdb", **{"source": "none", **kw})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kw, says", [
    # pid="x" failed at the first write with DuckDB's conversion error; light="no" and
    # quiet="no" were taken for their truth (light, quiet)
    ({"pid": "x"}, "pid must be a process id (a whole number from 1 to 2**31 - 1) or None, not 'x'"),
    ({"pid": 2 ** 31}, "pid must be a process id (a whole number from 1 to 2**31 - 1) or None, "
     "not 2147483648"),
    ({"pid": 0}, "pid must be a process id"), ({"pid": True}, "pid must be a process id"),
    ({"pid": 12.0}, "pid must be a process id"),
    ({"light": "no"}, "light must be True or False, not 'no'"),
    ({"light": 1}, "light must be True or False, not 1"),
    ({"quiet": "yes"}, "quiet must be True or False, not 'yes'"),
    ({"quiet": None}, "quiet must be True or False, not None"),
])
def test_profile_refuses_a_pid_or_flag_of_another_type_in_python_words(tmp_path, kw, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        cuptiprof.profile(tmp_path / "p.duckdb", **{"source": "none", **kw})
    assert list(tmp_path.iterdir()) == []


def test_profile_takes_a_pid_and_flags_of_numpy_types(tmp_path):
    np = pytest.importorskip("numpy")
    with cuptiprof.profile(tmp_path / "p.duckdb", source="none", pid=np.int64(4242),
                           light=np.bool_(True), quiet=np.bool_(False)) as p:
        assert (p.pid, p.light, p.quiet) == (4242, True, False)
        assert type(p.pid) is int and type(p.light) is bool


@pytest.mark.parametrize("top", [0, -1, "3", 2.0])
def test_report_methods_refuse_a_top_that_is_not_a_positive_count(tmp_path, top):
    """top=-1 returned no rows without a word; "3" failed inside DuckDB with a TypeError."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        with pytest.raises(UsageError, match=re.escape(f"top must be a whole number >= 1 or None, not {top!r}")):
            prof.steps_report(top=top)
        assert len(prof.steps_report(top=2).fetchall()) == 2


def test_profile_takes_kinds_as_the_command_line_writes_them(tmp_path):
    import numpy as np

    s = cuptiprof.profile(tmp_path / "p.duckdb", steps=np.int64(2), kinds="kernel, memcpy",
                          source="none")
    assert s.kinds == ["kernel", "memcpy"] and s.steps == 2 and type(s.steps) is int
    with pytest.raises(UsageError, match="unknown kind.s. kernal; choose from kernel"):
        cuptiprof.profile(tmp_path / "p.duckdb", kinds="kernal")


def test_profile_into_a_directory_says_it_is_one(tmp_path):
    with pytest.raises(cuptiprof.errors.InputError, match=r": is a directory; give a file name"):
        cuptiprof.profile(tmp_path, source="none", quiet=True).start()
    assert list(tmp_path.iterdir()) == []


def record(path, steps=3):
    with cuptiprof.profile(path, source="none", quiet=True):
        for i in range(steps):
            with cuptiprof.step(i):
                pass


@pytest.mark.parametrize("bad", [
    {"steps": "5"},                  # no such step
    {"steps": "x"},                  # not a step range
])
def test_failed_open_keeps_nothing_open(tmp_path, bad):
    p = tmp_path / "o.duckdb"
    record(p)
    with pytest.raises(UsageError) as err:
        cuptiprof.open(p, **bad)
    # what a notebook keeps of the failure (the traceback and its frames) holds no connection:
    # the same process can profile into the path again and open it with other settings
    kept = err  # noqa: F841
    p.unlink()
    record(p, steps=2)
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT count(*) FROM ranges WHERE kind = 'step'").fetchall() == [(2,)]


def test_open_while_this_process_writes_says_so(tmp_path):
    from cuptiprof.errors import StoreError

    p = tmp_path / "w.duckdb"
    with cuptiprof.profile(p, source="none", quiet=True):
        with pytest.raises(StoreError) as err:
            cuptiprof.open(p)
    msg = str(err.value)
    assert "already open in this process" in msg and "profile()" in msg, msg
    assert "not a readable" not in msg and "\n" not in msg


def test_profile_into_a_file_open_for_reading_says_so(tmp_path):
    from cuptiprof.errors import StoreError

    p = tmp_path / "r.duckdb"
    record(p)
    prof = cuptiprof.open(p)
    try:
        with pytest.raises(StoreError) as err:
            cuptiprof.profile(p, source="none", quiet=True, mode="overwrite").start()
        msg = str(err.value)
        assert msg.startswith(f"{p}: already open in this process"), msg
        assert "prof.close()" in msg and "not a readable" not in msg
    finally:
        prof.close()
    assert session_mod.current() is None


@pytest.mark.parametrize("steps, scope", [
    (1, "steps 1:1"), ("1", "steps 1:1"), ((0, 1), "steps 0:1"), ([1, 2], "steps 1:2"),
    ((1, None), "steps 1:"), ((None, 1), "steps :1"), (range(0, 3), "steps 0:2"),
    (range(2, 3), "steps 2:2"), ("1:", "steps 1:"),
])
def test_open_takes_python_step_forms(tmp_path, steps, scope):
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p, steps) as prof:
        assert prof.scope == scope
        lo, hi = prof.step_range
        want = [s for s in range(3) if (lo is None or s >= lo) and (hi is None or s <= hi)]
        assert prof.sql("SELECT step FROM sel_ranges WHERE kind = 'step' ORDER BY step"
                        ).fetchall() == [(s,) for s in want]


@pytest.mark.parametrize("steps, says", [
    ((2, 1), "steps=(2, 1): the end (1) is before the start (2)"),
    ("2:1", "steps='2:1': the end (1) is before the start (2)"),
    (range(0, 6, 2), "steps=range(0, 6, 2): expected a range of consecutive steps"),
    (range(3, 3), "steps=range(3, 3): an empty range holds no step"),
    (1.5, "steps=1.5: expected an int N, a (first, last) pair"),
    (True, "steps=True: expected an int N"),
    ((1, 2, 3), "steps=(1, 2, 3): expected an int N"),
    # the steps 0 and 2, or 0 to 2: read as the latter, it selected step 1 too, without a word
    ([0, 2], "steps=[0, 2]: a list of two steps is not taken (the steps 0 and 2, or 0 to 2?); "
             "give (0, 2) or '0:2' for steps 0 to 2"),
    (("a", 2), "steps=('a', 2): expected an int N"),
    (7, "no recorded step in steps=7; its steps are 0 to 2 (cuptiprof.open("),
    ("0-2", "steps='0-2': expected A:B, A:, :B or N (step numbers, inclusive); steps 0 to 2 are 0:2"),
    ("0 2", "steps='0 2': expected A:B"),   # two numbers, no colon: not step 0 alone
    (":", "steps=':': expected A:B, A:, :B or N"),   # no step at all: not every step
    # a blank string is no step spec: every step is steps=None, as the command line's
    # `--steps ""` is refused and not read as every step
    ("", "steps='': empty; give A:B, A:, :B or N (step numbers, inclusive), or leave it out"),
    ("  ", "steps='  ': empty; give A:B"),
    ("\u0663", "steps='\u0663': step numbers are written in ASCII digits (0-9); '\u0663' is not one"),
])
def test_open_refuses_bad_steps_in_python_words(tmp_path, steps, says):
    p = tmp_path / "f.duckdb"
    record(p)
    with pytest.raises(UsageError) as err:
        cuptiprof.open(p, steps)
    msg = str(err.value)
    assert says in msg and "--steps" not in msg and "\n" not in msg, msg


def test_steps_not_in_a_file_of_one_step_name_that_step(tmp_path):
    p = tmp_path / "f.duckdb"
    record(p, steps=1)
    with pytest.raises(UsageError, match=r"no recorded step in steps=3; its only step is 0 \("):
        cuptiprof.open(p, 3)


@pytest.mark.parametrize("bad", [7, "x", range(3, 3)])
def test_a_refused_set_steps_keeps_the_scope_before_it(tmp_path, bad):
    """A step range the file does not hold left DuckDB a result unfinished: every later query
    of the Profile failed ("connection has an unfinished result"). And the description (printed
    as a report's scope) named the refused steps while the reports read the ones before."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p, "1:2") as prof:
        with pytest.raises(UsageError):
            prof.set_steps(bad)
        assert (prof.scope, prof.step_range) == ("steps 1:2", (1, 2))
        assert prof.sql("SELECT step FROM sel_ranges ORDER BY step").fetchall() == [(1,), (2,)]


def test_a_report_made_before_set_steps_keeps_its_steps(tmp_path):
    """A relation runs its query again each time it is read: one made before set_steps() read
    the new steps, so `all_ops = p.ops(); p.set_steps(1); p.ops()` gave the same table twice."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        steps, ops = prof.steps(), prof.ops()
        every = ops.fetchall()
        prof.set_steps(1)
        assert [r[3] for r in steps.fetchall()] == [0, 1, 2]
        assert ops.fetchall() == every
        assert [r[3] for r in prof.steps().fetchall()] == [1]
        assert prof.sql("SELECT step FROM sel_steps").fetchall() == [(1,)]


@pytest.mark.parametrize("use", [lambda p: p.ops(), lambda p: p.steps(top=2),
                                 lambda p: p.report("kinds"), lambda p: p.data_quality(),
                                 lambda p: p.runs(), lambda p: p.sql("SELECT count(*) FROM sel_steps")])
def test_reports_after_a_fetchone_of_the_users_own_query(tmp_path, use):
    """DuckDB 2 keeps the result of `prof.con.execute(q)` open after a fetchone() that did not
    read it to its end, and refused every report and sql() of the Profile after it ("connection
    has an unfinished result from execute()"); DuckDB 1 dropped it when the next query ran."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        expected = use(prof).fetchall()
        assert prof.con.execute("SELECT step FROM ranges WHERE kind = 'step' ORDER BY step"
                                ).fetchone() == (0,)
        assert use(prof).fetchall() == expected
        prof.con.execute("SELECT step FROM ranges ORDER BY step").fetchmany(1)
        assert use(prof).fetchall() == expected
        # the user's own next execute() works as it did, and its rows are all there
        assert prof.con.execute("SELECT count(*) FROM ranges WHERE kind = 'step'").fetchall() == [(3,)]


@pytest.mark.parametrize("use", [lambda p: p.ops(), lambda p: p.sql("SELECT 1"),
                                 lambda p: p.set_steps(1), lambda p: p.data_quality()])
def test_a_closed_profile_says_so(tmp_path, use):
    """DuckDB's own 'Connection already closed' named neither the file nor what to do."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        pass
    with pytest.raises(UsageError, match=re.escape(
            f"{p}: this Profile is closed (close(), or the end of its `with`); cuptiprof.open() "
            "the file again to read it")):
        use(prof)
    prof.close()   # again: nothing to do


def test_the_cli_keeps_its_option_wording(tmp_path):
    from _run_helpers import cli

    p = tmp_path / "f.duckdb"
    record(p)
    r = cli(["report", p, "--steps", "90:99"], tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"cuptiprof: error: {p}: no recorded step in --steps '90:99'; "
                                f"its steps are 0 to 2 (`cuptiprof report {p} --by step` lists "
                                "them)")
    r = cli(["report", p, "--steps", "0-2"], tmp_path)   # read as step 0 alone, before
    assert r.returncode == 2 and r.stdout == "" and "steps 0 to 2 are 0:2" in r.stderr
    record(tmp_path / "one.duckdb", steps=1)
    r = cli(["sql", tmp_path / "one.duckdb", "SELECT 1", "--steps", "5"], tmp_path)
    assert r.returncode == 2 and "no recorded step in --steps '5'; its only step is 0 (" in r.stderr


@pytest.mark.parametrize("blank", ["", "  "])
@pytest.mark.parametrize("cmd", [["report"], ["sql", "SELECT 1"], ["export", "--chrome", "x.json"]])
def test_empty_steps_is_refused_not_read_as_every_step(tmp_path, capsys, cmd, blank):
    """`--steps "$STEPS"` with STEPS unset read as every step: the report of the whole run,
    under the scope the user meant to narrow."""
    from cuptiprof.cli import main

    p = tmp_path / "f.duckdb"
    record(p)
    out = tmp_path / "x.json"
    args = [a.replace("x.json", str(out)) for a in cmd[1:]]
    assert main([cmd[0], str(p), *args, "--steps", blank]) == 2
    printed, err = capsys.readouterr()
    assert printed == "" and not out.exists()
    assert err.splitlines() == [f"cuptiprof: error: --steps {blank!r}: empty; give A:B, A:, :B "
                                "or N (step numbers, inclusive), or leave it out"]


@pytest.mark.parametrize("cmd", [["report"], ["sql", "SELECT 1"], ["export", "--chrome", "x.json"]])
def test_steps_of_a_file_without_steps_says_it_has_none(tmp_path, cmd):
    """Pointing at `--by step` for the steps a file has does not help when it has none."""
    from _run_helpers import cli

    p = tmp_path / "f.duckdb"
    record(p, steps=0)
    r = cli([cmd[0], p, *cmd[1:], "--steps", "1"], tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (f"cuptiprof: error: {p}: has no recorded steps (no row is tagged "
                                "with a step), so --steps '1' selects nothing; leave out --steps "
                                "to read every row")
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(UsageError, match="has no recorded steps .* leave out steps="):
        cuptiprof.open(p, 1)


def test_steps_of_a_file_whose_steps_are_all_warm_up_say_so(tmp_path):
    """A warm-up longer than the loop: "has no recorded steps (no row is tagged with a step)"
    read as if the program had marked none, when it marked 3 that all went to the warm-up."""
    p = tmp_path / "f.duckdb"
    with cuptiprof.profile(p, source="none", quiet=True, warmup=5):
        for i in range(3):
            with cuptiprof.step(i):
                pass
    with pytest.raises(UsageError) as err:
        cuptiprof.open(p, 1)
    assert str(err.value) == (f"{p}: has no recorded steps: its 3 steps are all warm-up (a "
                              "warm-up as long as the loop or longer), so steps=1 selects "
                              "nothing; leave out steps= to read every row")


# -- Profile.sql() refuses what `cuptiprof sql` refuses ------------------------------------------
@pytest.mark.parametrize("query, kind", [
    ("COPY (SELECT * FROM ranges) TO '{d}/out.csv'", "COPY"),
    ("SELECT 1; COPY ranges TO '{d}/out.csv'", "COPY"),
    ("EXPORT DATABASE '{d}/out'", "EXPORT"),
    ("ATTACH '{d}/out.duckdb' AS o", "ATTACH"),
    ("INSTALL httpfs", "INSTALL"),
    ("SET profiling_output = '{d}/out.json'", "SET"),
    ("PREPARE p AS COPY ranges TO '{d}/out.csv'", "PREPARE"),
    ("CREATE TABLE t AS SELECT 1", "CREATE"),
    ("DELETE FROM range_rows", "DELETE"),
    ("EXPLAIN ANALYZE COPY ranges TO '{d}/out.csv'", "COPY"),   # ANALYZE runs what it explains
    ("explain analyze\n  copy (SELECT 1) TO '{d}/out.csv'", "COPY"),
    ("UPDATE EXTENSIONS", "UPDATE"),   # a kind newer than the binding's StatementType
])
def test_profile_sql_refuses_statements_beyond_queries(tmp_path, query, kind):
    p = tmp_path / "f.duckdb"
    record(p)
    out = tmp_path / "o"
    out.mkdir()
    with cuptiprof.open(p) as prof:
        with pytest.raises(UsageError) as err:
            prof.sql(query.replace("{d}", str(out)))
        msg = str(err.value)
        assert f"); {kind} is refused" in msg and "write_parquet" in msg, msg
        assert prof.sql("SELECT count(*) FROM ranges").fetchall() == [(3,)]
    assert list(out.iterdir()) == []


def test_profile_sql_runs_queries_and_results_can_be_saved(tmp_path):
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT step FROM ranges WHERE step > ? ORDER BY step", [0]).fetchall() \
            == [(1,), (2,)]
        assert ("range_rows",) in prof.sql("SHOW TABLES").fetchall()
        assert prof.sql("PRAGMA table_info('runs')").fetchall()
        assert prof.sql("EXPLAIN SELECT 1").fetchall()
        assert prof.sql("EXPLAIN ANALYZE SELECT count(*) FROM ranges").fetchall()
        prof.sql("SELECT step FROM ranges").write_parquet(str(tmp_path / "steps.parquet"))
    with duckdb.connect() as con:
        assert con.sql(f"SELECT count(*) FROM '{tmp_path / 'steps.parquet'}'").fetchall() == [(3,)]


def test_profile_as_a_decorator_says_what_to_write(tmp_path):
    """Python's "'Session' object is not callable" said neither what was wrong nor what to do."""
    with pytest.raises(UsageError, match=re.escape(
            "is no decorator: write `with cuptiprof.profile(...):` around the code (or call "
            "start() and stop()); @cuptiprof.range(\"...\") marks a function's calls")):
        @cuptiprof.profile(tmp_path / "p.duckdb", source="none")
        def main():
            pass
    assert list(tmp_path.iterdir()) == []


def test_a_step_that_launched_no_gpu_work_is_still_a_recorded_step(tmp_path):
    """Steps 3 and 4 ran (their ranges are recorded) but launched nothing: selecting one is an
    empty scope, not a step that was never recorded, and the span a refusal names ends at 4."""
    from test_compare import make_run
    p = make_run(tmp_path / "f.duckdb", steps=4, empty=(3, 4))
    with cuptiprof.open(p, steps=4) as prof:
        assert prof.scope == "steps 4:4" and prof.ops().fetchall() == []
    with pytest.raises(UsageError, match=r"no recorded step in steps=9; its steps are 1 to 4 \("):
        cuptiprof.open(p, steps=9)


@pytest.mark.parametrize("path, says", [
    (None, "path must be a file's path (a str or os.PathLike), not None"),
    (3, "path must be a file's path (a str or os.PathLike), not 3"),
    (b"f.duckdb", "path must be a file's path (a str or os.PathLike), not b'f.duckdb'"),
    # a path read from an unset variable was taken as the current directory
    ("", "path '': empty; give a file's path"),
])
@pytest.mark.parametrize("call", [lambda p: cuptiprof.open(p),
                                  lambda p: cuptiprof.profile(p, source="none", quiet=True)])
def test_a_path_that_is_no_path_is_refused_in_python_words(tmp_path, monkeypatch, call, path, says):
    """None or a number failed with Python's "expected str, bytes or os.PathLike object"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as err:
        call(path)
    assert str(err.value) == says
    assert list(tmp_path.iterdir()) == []


EMPTY_QUERY = ("Profile.sql(): the query is empty; give one SQL query, e.g. \"SELECT name, "
               "count(*) FROM kernels GROUP BY 1\"")


@pytest.mark.parametrize("query, says", [
    (None, "Profile.sql() takes the query as a str, not None"),
    (3, "Profile.sql() takes the query as a str, not 3"),
    # DuckDB returned None for no statement, not a relation
    ("", EMPTY_QUERY),
    (" ;\n-- a comment", EMPTY_QUERY),
])
def test_profile_sql_refuses_a_query_that_is_none_or_empty(tmp_path, query, says):
    """A query that is no str failed with a TypeError of DuckDB's extract_statements() spread
    over several lines."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        with pytest.raises(UsageError) as err:
            prof.sql(query)
        assert str(err.value) == f"{p}: {says}"
        assert prof.sql("SELECT count(*) FROM ranges").fetchall() == [(3,)]


def test_profile_sql_refuses_several_queries_as_the_command_does(tmp_path):
    """"SELECT 1; SELECT 2" returned the last query's rows alone, the first one's silently lost
    (`cuptiprof sql` refuses it)."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        with pytest.raises(UsageError, match="holds 2 queries; give one at a time"):
            prof.sql("SELECT count(*) FROM ranges; SELECT 2")
        assert prof.sql("SELECT count(*) FROM ranges;").fetchall() == [(3,)]


def test_a_top_beyond_every_row_gives_every_row(tmp_path):
    """A top beyond 64 bits failed inside DuckDB with a ConversionException."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        assert len(prof.steps(top=10**20).fetchall()) == 3
        assert len(prof.steps(top=(1 << 63) - 1).fetchall()) == 3


def test_profile_into_an_existing_file_names_the_modes_that_write_it(tmp_path):
    """The refusal told a Python user to choose another path or remove the file, not of
    mode='overwrite' or mode='append', which the call takes."""
    from cuptiprof.errors import InputError

    p = tmp_path / "f.duckdb"
    record(p)
    with pytest.raises(InputError) as err:
        cuptiprof.profile(p, source="none", quiet=True).start()
    assert str(err.value) == (f"{p}: already exists; profile(..., mode='overwrite') replaces it, "
                              "mode='append' adds a run to it (or choose another path)")
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT count(*) FROM runs").fetchall() == [(1,)]


def test_a_source_class_instead_of_its_instance_is_refused_before_any_file(tmp_path):
    """source=FakeCupti (the class) passed the check, then failed in start() with an
    AttributeError ('kind_enum') and left a file of a failed run behind."""
    from cuptiprof.collect.fake import FakeCupti

    p = tmp_path / "s.duckdb"
    with pytest.raises(UsageError, match=re.escape(
            "source=FakeCupti is a class; pass an instance of it, such as FakeCupti(...)")):
        cuptiprof.profile(p, source=FakeCupti, quiet=True).start()
    assert list(tmp_path.iterdir()) == []
    cuptiprof.profile(p, source=FakeCupti(auto=True), quiet=True).start().stop()
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT source, status FROM runs").fetchall() == [("synthetic", "complete")]


@pytest.mark.parametrize("params", [3, "ab", {1, 2}])
def test_profile_sql_refuses_params_that_are_no_list_or_dict(tmp_path, params):
    """params=3 failed with Python's "'int' object is not iterable"; a string was taken as one
    parameter per character, a set in no order."""
    p = tmp_path / "f.duckdb"
    record(p)
    with cuptiprof.open(p) as prof:
        with pytest.raises(UsageError) as err:
            prof.sql("SELECT ?::VARCHAR", params)
        assert str(err.value) == (f"{p}: Profile.sql() takes params as a list or tuple (for ?) or "
                                  f"a dict (for $name), not {params!r}")
        assert prof.sql("SELECT ?::VARCHAR", ["ab"]).fetchall() == [("ab",)]
        assert prof.sql("SELECT $x::INT", {"x": 3}).fetchall() == [(3,)]


@pytest.mark.parametrize("status", ["done", "running", 3])
def test_stop_refuses_a_status_the_file_has_no_meaning_for(tmp_path, status):
    """stop('done') wrote runs.status 'done', which no report or diff knows (a run is complete,
    interrupted or failed); the profile then stayed closed."""
    p = tmp_path / "f.duckdb"
    s = cuptiprof.profile(p, source="none", quiet=True).start()
    with pytest.raises(UsageError, match=re.escape(
            f"stop(status={status!r}): expected 'complete', 'interrupted' or 'failed'")):
        s.stop(status)
    s.stop("interrupted")   # still running: the corrected call ends it
    with cuptiprof.open(p) as prof:
        assert prof.sql("SELECT status FROM runs").fetchall() == [("interrupted",)]


def test_profile_into_a_pipe_is_refused_whatever_the_mode(tmp_path):
    """A FIFO (as /dev/null is a device) is no file to record into: DuckDB's open of it blocked
    for ever, and mode='overwrite' would have unlinked what is there. In a child process, which
    the old behaviour left blocked."""
    import os
    import stat
    import subprocess
    import sys

    from _run_helpers import env

    fifo = tmp_path / "fifo.duckdb"
    os.mkfifo(fifo)
    code = ("import cuptiprof\n"
            "for mode in ('create', 'overwrite', 'append'):\n"
            "    try:\n"
            f"        cuptiprof.profile({str(fifo)!r}, source='none', quiet=True, mode=mode).start()\n"
            "    except cuptiprof.errors.InputError as e:\n"
            "        print(e)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, env=env())
    assert res.stdout == 3 * (f"{fifo}: is not a regular file (a device, a pipe or a socket); "
                              "give the path of a file to write\n"), res.stdout + res.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_profile_into_a_file_another_process_reads_says_it_reads_it(tmp_path):
    """A file another process has open read-only (a report, a cuptiprof.open() in a notebook)
    cannot be written until it closes it: the line said that process was writing it."""
    import subprocess
    import sys

    from _run_helpers import env

    p = tmp_path / "r.duckdb"
    record(p)
    reader = subprocess.Popen(
        [sys.executable, "-c", f"import cuptiprof, sys; p = cuptiprof.open({str(p)!r}); "
         "print('open', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env())
    try:
        assert reader.stdout.readline() == "open\n"
        with pytest.raises(cuptiprof.errors.WriterBusy) as err:
            cuptiprof.profile(p, source="none", quiet=True, mode="overwrite").start()
    finally:
        reader.communicate("", timeout=60)
    assert str(err.value) == (f"{p}: another process (pid {reader.pid}) has this file open for "
                              "reading (a report, a cuptiprof.open()); wait for it to close the "
                              "file before writing it, or write to another path")
    with cuptiprof.open(p) as prof:   # left as it was
        assert prof.sql("SELECT count(*) FROM ranges WHERE kind = 'step'").fetchall() == [(3,)]
