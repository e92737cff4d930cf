"""Read a (possibly gzip-compressed) text file as a stream of uncompressed blocks.

Decompression runs in a background thread: the inflater releases the GIL, so on two cores the
gunzip of block N+1 overlaps the JSON decoding of block N. ISA-L's inflate (the `isal`
package, a dependency) runs about twice as fast as zlib's; zlib is the fallback where it is
not installed.
"""
from __future__ import annotations

import os
import queue
import re
import threading
import zlib
from pathlib import Path
from typing import Callable, Iterator

from cuptiprof.errors import InputError

try:
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - a platform without isal wheels
    _inflate = zlib
_ERRORS = (zlib.error, _inflate.error)

BLOCK = 1 << 20  # compressed bytes read per step
OUT_BLOCK = 2 << 20  # most uncompressed bytes handed on at once (small: decoding starts early)
AHEAD = 8            # blocks the reader may run ahead of the decoder

# UTF-8's byte-order mark: some editors and Windows tools write one at the start of a file;
# Python's json reads past it (utf-8-sig), and so does the importer
BOM = b"\xef\xbb\xbf"
_TEXT = re.compile(rb"[^ \t\r\n]")   # the first byte that is not JSON whitespace


def text_start(buf, file_start: bool = True) -> int | None:
    """Where the JSON text in `buf` starts: past a UTF-8 byte-order mark (when `buf` is the
    start of the file) and JSON whitespace, however much. None: nothing else yet (read on)."""
    skip = 0
    if file_start:
        if len(buf) < len(BOM) and BOM.startswith(bytes(buf)):   # (b"": too)
            return None
        if buf[:len(BOM)] == BOM:
            skip = len(BOM)
    m = _TEXT.search(buf, skip)
    return None if m is None else m.start()


def _text_head(path: Path, head: bytes, n: int) -> bytes:
    """The first `n` bytes of the JSON text of an uncompressed file, from text_start on."""
    at = text_start(head)
    if at is not None and at + n <= len(head):
        return head[at:at + n]
    with open(path, "rb") as fh:
        chunk, first, offset = fh.read(1 << 16), True, 0
        while chunk:
            at = text_start(chunk, first)
            if at is not None:
                fh.seek(offset + at)
                return fh.read(n)
            offset += len(chunk)
            chunk, first = fh.read(1 << 16), False
    return b""


def looks_like_json(path: Path, head: bytes) -> bool:
    """Whether `path` (`head`: its first bytes) is what the JSON importer reads: gzip (its text
    is checked as it is read) or an object or array past a byte-order mark and whitespace,
    however much. A byte-order mark after the whitespace is JSON text damaged (an editor
    joined two files, say): the importer reads it, to say where, as it does when gzipped."""
    if head[:2] == b"\x1f\x8b":
        return True
    text = _text_head(path, head, len(BOM))
    return text[:1] in (b"{", b"[") or text == BOM


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def blocks(path: Path, on_read: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """Uncompressed blocks of `path`, read on the calling thread (read_blocks: on a thread of
    its own, ahead of the reader)."""
    gz = is_gzip(path)
    with open(path, "rb") as fh:
        if not gz:
            while True:
                raw = fh.read(BLOCK)
                if not raw:
                    return
                if on_read:
                    on_read(len(raw))
                yield raw
        d = _inflate.decompressobj(wbits=47)
        while True:
            raw = fh.read(BLOCK)
            if on_read and raw:
                on_read(len(raw))
            if not raw:
                if not d.eof:
                    raise InputError(f"{path}: truncated gzip file (the compressed stream ends "
                                     "early); the file was cut off while being written or copied")
                return
            while raw:
                try:
                    out = d.decompress(raw, OUT_BLOCK)
                except _ERRORS as exc:
                    raise InputError(f"{path}: corrupt gzip data ({exc})") from None
                if out:
                    yield out
                if d.eof:  # concatenated gzip members
                    raw = d.unused_data
                    if raw:
                        d = _inflate.decompressobj(wbits=47)
                else:
                    raw = d.unconsumed_tail


def read_blocks(path: str | os.PathLike, on_read: Callable[[int], None] | None = None
                ) -> Iterator[bytes]:
    """Uncompressed blocks of `path`, produced by a reader thread up to AHEAD blocks ahead."""
    path = Path(path)
    q: queue.Queue = queue.Queue(maxsize=AHEAD)
    stop = threading.Event()
    done = object()

    def work():
        try:
            for b in blocks(path, on_read):
                while not stop.is_set():
                    try:
                        q.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as exc:  # handed to the consumer
            q.put(exc)

    t = threading.Thread(target=work, name="cuptiprof-gunzip", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.05)
