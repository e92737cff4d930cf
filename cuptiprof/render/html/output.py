"""The HTML output file: the path checked before the report is computed (check_html_output:
only an HTML file is replaced) and the page written whole or not at all (_write)."""
from __future__ import annotations

import os
from pathlib import Path

from cuptiprof.errors import InputError
from cuptiprof.outputs import check_output, publish, temp_beside, write_failed


def _not_html(path: Path) -> str | None:
    """An existing HTML file is replaced (re-running a report refreshes it); anything else is
    refused, so a report never overwrites a profile or a file the user keeps."""
    if not path.is_file():   # a FIFO or a terminal (/dev/stdout): reading its head would block
        return "is not a regular file; give the path of a file to write"
    try:
        with open(path, "rb") as fh:
            head = fh.read(64).lstrip().lower()
    except OSError:
        head = b""
    if head.startswith((b"<!doctype html", b"<html")):
        return None
    return "exists and is not an HTML file; choose another path (or remove it first)"


def check_html_output(out: str | os.PathLike, inputs=()) -> Path:
    """Refuse an HTML output path before the report is computed."""
    if not os.fspath(out):   # `--html ""` (an unset shell variable) must not pass for no --html
        raise InputError("--html needs a file name, e.g. --html report.html")
    return check_output(out, inputs=inputs, force=True, replaceable=_not_html)


def taken(out: str | os.PathLike) -> bool:
    """Whether something is at `out` (a link to nothing too): what the page may replace, told
    when its path is checked; a file that appears there later is never replaced."""
    return os.path.lexists(out)


def _write(text: str, out: str | os.PathLike, replace: bool) -> Path:
    """Write the page whole under a temporary name, then give it its name. replace: something
    was at `out` when its path was checked (an HTML page, check_html_output), and is replaced;
    otherwise a file that appeared there meanwhile (another report of the same output) is kept
    and the page refused, as import, merge and export do (publish)."""
    path = Path(out)
    tmp = temp_beside(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        publish(tmp, path, replace=replace, taken_hint="choose another path (or remove it first)")
    except InputError:
        tmp.unlink(missing_ok=True)
        raise
    except OSError as exc:   # name the file the user asked for, leave nothing
        tmp.unlink(missing_ok=True)
        raise write_failed(path, exc) from None
    except BaseException:   # a Ctrl-C mid-write: no half-written page left beside the output
        tmp.unlink(missing_ok=True)
        raise
    return path
