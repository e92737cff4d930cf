"""Where commands may write: each refusal of an output path is one line naming what is wrong
with it, given before anything is computed, and leaves the place as it was."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuptiprof.cli import main
from cuptiprof.errors import CuptiprofError, InputError, shell_word
from cuptiprof.outputs import check_output, say, temp_beside, write_failed


@pytest.fixture(scope="module")
def run_file(tmp_path_factory) -> Path:
    from cuptiprof.synthetic import write_synthetic
    return write_synthetic(tmp_path_factory.mktemp("out") / "run.duckdb", steps=2, kernels_per_step=5)


def refused(argv, capsys) -> str:
    """The one line a refused command prints (exit 2)."""
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("cuptiprof: error: "), err
    return err[0][len("cuptiprof: error: "):]


def listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_a_file_output_in_a_missing_directory(run_file, tmp_path, capsys):
    out = tmp_path / "nodir" / "t.json"
    assert refused(["export", run_file, "--chrome", out], capsys) == \
        f"{out}: directory {out.parent} does not exist"
    assert listing(tmp_path) == []


def test_a_file_output_under_a_file(run_file, tmp_path, capsys):
    (tmp_path / "f").write_text("mine\n")
    out = tmp_path / "f" / "t.json"
    assert refused(["export", run_file, "--chrome", out], capsys) == \
        f"{out}: {tmp_path / 'f'} is a file, not a directory; give a path in a directory"
    assert (tmp_path / "f").read_text() == "mine\n"


def test_a_file_output_in_a_directory_that_cannot_be_written(run_file, tmp_path, capsys,
                                                              monkeypatch):
    # as root every directory is writable: the check is staged
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == tmp_path else real(p, m))
    out = tmp_path / "t.json"
    assert refused(["export", run_file, "--chrome", out], capsys) == \
        f"{out}: directory {tmp_path} is not writable"
    assert listing(tmp_path) == []


def test_a_file_output_that_is_a_directory(run_file, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    assert refused(["export", run_file, "--chrome", tmp_path / "d", "--force"], capsys) == \
        f"{tmp_path / 'd'}: is a directory; give a file name"
    assert listing(tmp_path) == ["d"]


def test_an_existing_file_output_needs_force(run_file, tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text("old\n")
    assert refused(["export", run_file, "--chrome", out], capsys) == \
        f"{out}: already exists; choose another path or pass --force"
    assert out.read_text() == "old\n"
    assert main(["export", str(run_file), "--chrome", str(out), "--force"]) == 0
    assert out.read_text().lstrip().startswith("{") and listing(tmp_path) == ["t.json"]


def test_an_output_that_is_an_input_under_another_name(run_file, tmp_path, capsys):
    """A hard link is the input itself, whatever its name."""
    link = tmp_path / "alias.duckdb"
    os.link(run_file, link)
    size = run_file.stat().st_size
    assert refused(["export", run_file, "--chrome", link, "--force"], capsys) == \
        f"{link}: is also an input; write to another path"
    assert run_file.stat().st_size == size


def test_a_directory_output_that_is_a_file(run_file, tmp_path, capsys):
    (tmp_path / "pq").write_text("mine\n")
    assert refused(["export", run_file, "--parquet", tmp_path / "pq", "--force"], capsys) == \
        f"{tmp_path / 'pq'}: is a file; give a directory"
    assert (tmp_path / "pq").read_text() == "mine\n"


def test_a_directory_output_holding_the_input(run_file, tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    inside = d / "run.duckdb"
    inside.write_bytes(run_file.read_bytes())
    assert refused(["export", inside, "--parquet", d, "--force"], capsys) == \
        f"{d}: holds the input {inside}; write to another directory"
    assert listing(tmp_path) == ["d", "d/run.duckdb"]


def test_a_directory_output_above_the_current_one(run_file, tmp_path, capsys, monkeypatch):
    (tmp_path / "w").mkdir()
    monkeypatch.chdir(tmp_path / "w")
    assert refused(["export", run_file, "--parquet", "..", "--force"], capsys) == \
        "..: is the current directory or above it; give a new directory name"
    assert listing(tmp_path) == ["w"]


def test_an_empty_directory_is_no_conflict_and_a_full_one_needs_force(run_file, tmp_path, capsys):
    pq = tmp_path / "pq"
    pq.mkdir()
    assert main(["export", str(run_file), "--parquet", str(pq)]) == 0
    assert (pq / "kernels").is_dir()
    assert refused(["export", run_file, "--parquet", pq], capsys) == \
        f"{pq}: already exists; choose another path or pass --force"


def test_temporary_outputs_are_hidden_beside_the_output():
    # beside: renamed into place on the same file system; hidden: no `ls` or glob lists it
    tmp = temp_beside(Path("/some/dir/r.html"))
    assert tmp.parent == Path("/some/dir") and tmp.name.startswith(".r.html.")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT])
def test_a_write_that_runs_out_of_room_is_a_full_disk(code):
    err = write_failed("out.duckdb", OSError(code, os.strerror(code)))
    assert type(err) is CuptiprofError and err.exit_code == 1
    assert str(err).startswith("out.duckdb: cannot write: the disk is full")


def test_a_write_refused_by_the_place_is_a_bad_path():
    err = write_failed("out.duckdb", OSError(errno.EACCES, "Permission denied"))
    assert isinstance(err, InputError) and err.exit_code == 2
    assert str(err) == ("out.duckdb: cannot write (Permission denied); give a path in a "
                        "directory you can write to")


def test_a_line_to_a_reader_gone_is_dropped_and_later_lines_too(tmp_path):
    r, w = os.pipe()
    os.close(r)
    stream = os.fdopen(w, "w")
    try:
        say("first", stream)        # EPIPE: dropped, no exception
        say("second", stream)
        print("at exit", file=stream, flush=True)   # Python's own flush at exit must not fail
    finally:
        stream.close()


def _started_without(fd: int, args, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI started with descriptor `fd` (1: stdout, 2: stderr) closed, as `>&-` does."""
    from _run_helpers import env
    return subprocess.run([sys.executable, "-m", "cuptiprof", *map(str, args)], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.close(fd))


def test_a_closed_stdout_is_one_line_and_an_output_file_is_still_written(run_file, tmp_path):
    """`cuptiprof report f >&-`: Python leaves sys.stdout None, and the first line printed
    failed with an AttributeError traceback."""
    for args in (["schema"], ["report", run_file], ["sql", run_file, "SELECT 1"]):
        r = _started_without(1, args, tmp_path)
        assert (r.returncode, r.stderr) == (2, STDOUT_CLOSED), args
    r = _started_without(1, ["report", run_file, "--html", tmp_path / "r.html"], tmp_path)
    assert r.returncode == 0 and (tmp_path / "r.html").is_file(), r.stderr


def _started_with(args, cwd: Path, *, buffered: bool, **streams) -> subprocess.CompletedProcess:
    """The CLI with its streams as given (stderr captured unless given), buffered as Python's
    are by default (a failed write is met at the flush at exit) or not (PYTHONUNBUFFERED: met
    at the write)."""
    from _run_helpers import env
    e = env()
    e.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        e["PYTHONUNBUFFERED"] = "1"
    streams.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "cuptiprof", *map(str, args)], cwd=cwd, env=e,
                          text=True, timeout=120, **streams)


def _reader_gone() -> int:
    """The write end of a pipe whose reader went away before the first byte (`| head -c0`):
    every write fails with EPIPE. The caller closes it."""
    r, w = os.pipe()
    os.close(r)
    return w


STDOUT_FULL = "cuptiprof: error: cannot write to stdout: No space left on device\n"
STDOUT_CLOSED = ("cuptiprof: error: standard output is closed, so the output has nowhere to go; "
                 "redirect it to a file, or to /dev/null to discard it\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_stdout_that_cannot_be_written_is_named_in_one_line(run_file, tmp_path):
    """`cuptiprof report f > out.txt` on a full disk: the line said "No space left on device",
    as if the profile could not be written, or (stdout buffered, as it is by default) Python's
    flush at exit printed "Exception ignored ..." and the exit status was 120."""
    import shutil
    other = shutil.copyfile(run_file, tmp_path / "other.duckdb")
    for buffered in (True, False):
        for args in (["schema"], ["report", run_file], ["sql", run_file, "SELECT 1"],
                     ["compare", run_file, other]):
            with open("/dev/full", "w") as full:
                r = _started_with(args, tmp_path, buffered=buffered, stdout=full)
            assert (r.returncode, r.stderr) == (1, STDOUT_FULL), (args, buffered)


def _help_and_version():
    from cuptiprof.cli import COMMANDS
    return [["--help"], ["--version"], *([name, "--help"] for name in COMMANDS)]


@pytest.mark.parametrize("args", _help_and_version(), ids=" ".join)
def test_help_and_version_meet_their_stdout_as_a_command_does(tmp_path, args):
    """argparse prints --help and --version itself and drops a failed write: into /dev/full
    they said nothing and exited 0 (unbuffered) or printed "Exception ignored ..." and exited
    120, as they did into a reader gone; with stdout closed, the help went to stderr. Each now
    ends as a command's output does."""
    for buffered in (True, False):
        if os.path.exists("/dev/full"):
            with open("/dev/full", "w") as full:
                r = _started_with(args, tmp_path, buffered=buffered, stdout=full)
            assert (r.returncode, r.stderr) == (1, STDOUT_FULL), buffered
        w = _reader_gone()
        try:
            r = _started_with(args, tmp_path, buffered=buffered, stdout=w)
        finally:
            os.close(w)
        assert (r.returncode, r.stderr) == (0, ""), buffered
    r = _started_without(1, args, tmp_path)
    assert (r.returncode, r.stderr) == (2, STDOUT_CLOSED)


def test_a_closed_stderr_drops_the_messages_not_the_work(tmp_path):
    """`2>&-`: import read sys.stderr.isatty() and failed (exit 1, its traceback unseen), and
    error lines went to stdout, into what a --format csv > out.csv was writing."""
    from cuptiprof.synthetic import write_synthetic
    run = write_synthetic(tmp_path / "run.duckdb", steps=2, kernels_per_step=3)
    assert main(["export", str(run), "--chrome", str(tmp_path / "t.json")]) == 0   # to import
    r = _started_without(2, ["import", tmp_path / "t.json", "-o", tmp_path / "i.duckdb"], tmp_path)
    assert r.returncode == 0 and (tmp_path / "i.duckdb").is_file() and r.stdout == ""
    r = _started_without(2, ["report", tmp_path / "missing.duckdb"], tmp_path)
    assert (r.returncode, r.stdout) == (2, "")
    r = _started_without(2, ["report", "--bogus"], tmp_path)   # argparse's mistake, too
    assert (r.returncode, r.stdout) == (2, "")


def test_a_stderr_that_cannot_be_written_drops_the_messages_not_the_status(run_file, tmp_path):
    """`2> /dev/full`, or `2>&1 | head -c0`: a usage mistake exited 120 (Python's flush at exit
    failed), a bad file or no command at all 1 (the error line's own failure, a traceback no one
    saw), and a command whose work was done, whose `wrote` line or note could not be shown, 1 or
    120. As with a closed stderr, the message is dropped and the status is the command's."""
    import shutil
    same = shutil.copyfile(run_file, tmp_path / "same.duckdb")
    cases = [(["report", "--bogus"], 2), (["report", run_file, "--top", "x"], 2),
             (["report", tmp_path / "missing.duckdb"], 2), ([], 2),
             # its hint on stderr (0.5 is 0.5%), then no regression: a CI gate that must pass
             (["diff", run_file, same, "--fail-above", "0.5"], 0),
             (["report", run_file, "--format", "csv"], 0)]   # its note goes to stderr
    unwritable = ["/dev/full"] if os.path.exists("/dev/full") else []
    for buffered in (True, False):
        for where in unwritable + [None]:   # None: a reader gone
            out = tmp_path / f"t-{buffered}-{where is None}.json"
            for args, code in cases + [(["export", run_file, "--chrome", out], 0)]:
                err = os.open(where, os.O_WRONLY) if where else _reader_gone()
                try:
                    r = _started_with(args, tmp_path, buffered=buffered, stdout=subprocess.DEVNULL,
                                      stderr=err)
                finally:
                    os.close(err)
                assert r.returncode == code, (args, where, buffered)
            assert out.is_file()   # the export's work was done


def test_an_output_name_that_is_no_utf8_is_printed_as_bash_reads_it(run_file, tmp_path, capsys):
    """A name with bytes that are no UTF-8 (`--html $'r\\xff.html'`) was printed as `r\\udcff.html`,
    which names no file, or failed to print (UnicodeEncodeError) on a stream that does not
    escape surrogates; it is printed in bash's $'...' quoting, which names the file again."""
    import shutil
    html = tmp_path / os.fsdecode(b"r\xff.html")
    trace = tmp_path / os.fsdecode(b"t\xfe'1.json")
    capsys.readouterr()
    assert main(["report", str(run_file), "--html", str(html)]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == f"cuptiprof: wrote $'{tmp_path}/r\\xff.html'"
    assert main(["export", str(run_file), "--chrome", str(trace)]) == 0
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"-> $'{tmp_path}/t\\xfe\\'1.json'")
    if shutil.which("bash"):   # pasted, the words name those files
        for path in (html, trace):
            word = shell_word(path)
            r = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, timeout=60)
            assert r.stdout == os.fsencode(path), word
    assert shell_word(os.fsdecode(b"a\nb")) == "$'a\\x0ab'"   # a newline would break the line
    assert shell_word("my file.html") == "'my file.html'"
    # stderr closed: a message naming such a file went to a /dev/null that took no surrogate, and
    # the command ended with a hidden UnicodeEncodeError (exit 1) where its refusal is exit 2
    r = _started_without(2, ["export", run_file, "--chrome", trace], tmp_path)
    assert (r.returncode, r.stdout) == (2, "")


def test_force_does_not_replace_a_file_another_process_is_writing(run_file, tmp_path, capsys):
    """A profile() writing x.duckdb in a notebook, and `import ... -o x.duckdb --force` in a
    terminal: the file was replaced under the writer, which went on writing into a file no
    longer there (all it recorded lost), as Writer(mode="overwrite") refuses."""
    import shutil
    out = tmp_path / "x.duckdb"
    shutil.copyfile(run_file, out)
    held = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                             "print('held', flush=True); sys.stdin.read()", str(out)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline() == "held\n"
        before = out.read_bytes()
        for argv in (["merge", run_file, "-o", out, "--force"],
                     ["export", run_file, "--chrome", out, "--force"],
                     ["run", "-o", out, "--force", "--", sys.executable, "-c", "pass"]):
            assert refused(argv, capsys) == (f"{out}: another process (pid {held.pid}) is writing "
                                             "this file; wait for it to finish before writing it, "
                                             "or write to another path"), argv
        assert out.read_bytes() == before and listing(tmp_path) == ["x.duckdb"]
    finally:
        held.communicate("")


def test_a_dangling_symbolic_link_at_the_output_is_replaced_with_force_only(tmp_path):
    """A link to nothing at -o: merge replaced it without --force (and, refusing a file made
    there meanwhile, then said another command had written it); it is there as a file is."""
    from cuptiprof.store.merge import merge_files
    from cuptiprof.synthetic import write_synthetic

    src = write_synthetic(tmp_path / "s.duckdb", steps=1, kernels_per_step=5)
    link = tmp_path / "out.duckdb"
    link.symlink_to("gone/run.duckdb")
    with pytest.raises(InputError, match=r"out\.duckdb: already exists, a symbolic link to "
                                         r"gone/run\.duckdb \(which does not exist\); choose"):
        check_output(link)
    with pytest.raises(InputError, match="a symbolic link to gone/run.duckdb"):
        merge_files([src], link)
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == [
        "out.duckdb", "s.duckdb"]
    assert check_output(link, force=True) == link
    merge_files([src], link, overwrite=True)   # the link replaced, not written through
    assert not link.is_symlink() and link.is_file() and not (tmp_path / "gone").exists()
