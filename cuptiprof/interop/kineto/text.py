"""The trace text cut at event boundaries into pieces of about PIECE_BYTES, each decoded on
its own: by the native scanner where it takes the piece, else by msgspec (a Doc)."""
from __future__ import annotations

import re
from typing import Iterable

import msgspec

from cuptiprof.interop import pieces as P
from cuptiprof.interop.kineto.document import _DECODER
from cuptiprof.interop.textsource import text_start

# Text decoded at once. Small pieces keep the decoder just behind the gunzip thread, and a
# piece's text and its per-event columns stay in cache: faster than 16 MB pieces on every
# shared trace, with a lower peak (bench/import_knobs.py; BENCHMARKS.md, Import).
PIECE_BYTES = 2 << 20

_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\}\s*,\s*\{")
_PREFIX = b'{"traceEvents":['


class _Malformed(Exception):
    def __init__(self, msg: str, offset: int | None, index: int | None):
        super().__init__(msg)
        self.offset, self.index = offset, index


def _decode(piece, consumed: int, prefix_len: int, before: int, scan=None):
    """One piece: the native scanner's columns when it takes it, else msgspec's Doc (whose
    errors become _Malformed)."""
    if scan is not None:
        got = scan(piece)
        if got is not None:
            return got
    try:
        # a copy: each event's "ts" text (msgspec.Raw) holds on to the buffer it was read from
        return _DECODER.decode(bytes(piece) if isinstance(piece, memoryview) else piece)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        m = re.search(r"\$\.traceEvents\[(\d+)\]", msg)
        idx = before + int(m.group(1)) if m else None
        raise _Malformed(msg, None, idx) from None
    except RecursionError:  # hostile input: nesting deeper than any trace has
        raise _Malformed("JSON nested too deeply to be a trace", None, None) from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(byte (\d+)\)", msg)
        off = consumed + int(m.group(1)) - prefix_len if m else None
        raise _Malformed(msg, off, None) from None


def _count(doc) -> int:
    return doc.events if isinstance(doc, P.Piece) else len(doc.traceEvents or ())


def iter_docs(blocks: Iterable[bytes], piece_bytes: int = PIECE_BYTES, scan=None):
    """Decode a trace piece by piece. Yields Doc objects; each holds some of the events and
    whichever top-level keys its text contained. With `scan` (text -> pieces.Piece, or None
    where it declines), a piece it takes is yielded as that Piece instead."""
    buf = bytearray()
    consumed = 0        # bytes of the file dropped from the front of buf
    prefix_len = 0      # bytes of synthetic prefix at the front of buf
    ev_start = -1       # position of the first event in buf
    bare = False        # the file is a bare JSON array of events
    before = 0          # events in pieces already decoded
    want = piece_bytes
    started = False     # buf starts with the text (past a byte-order mark and whitespace)
    for block in blocks:
        buf += block
        if not started:   # the start of the file only
            lead = text_start(buf, consumed == 0)
            if lead is None:   # whitespace (and a byte-order mark) so far: dropped, not held
                if consumed or len(buf) >= 3:   # (else perhaps a byte-order mark cut short)
                    consumed, buf = consumed + len(buf), bytearray()
                continue
            started = True
            if lead:
                consumed, buf = consumed + lead, buf[lead:]   # (once: a new buffer)
        if ev_start < 0:
            if buf[:1] == b"[":
                # the prefix stands for the file's bytes up to and with its "[": the
                # buffer's byte len(_PREFIX) is the file's byte consumed + 1
                consumed, prefix_len = consumed + 1, len(_PREFIX)
                buf = bytearray(_PREFIX) + buf[1:]  # a new buffer: see below
                ev_start, bare = len(_PREFIX), True
            else:
                m = _ARRAY_START.search(buf)
                if not m:
                    continue
                ev_start = m.end()
        if len(buf) - ev_start < want:
            continue
        last = None
        for last in _SEP.finditer(buf, max(ev_start, len(buf) - (1 << 16))):
            pass
        if last is None:
            for last in _SEP.finditer(buf, ev_start):
                pass
        if last is None:
            continue
        end = last.start() + 1
        cut = last.end() - 1
        # Close the array in place over the separator bytes: no copy. In compact JSON ("},{")
        # the second byte is the next event's "{", so the bytes are put back either way.
        saved = bytes(buf[end:end + 2])
        buf[end:end + 2] = b"]}"
        try:
            with memoryview(buf) as mv:
                doc = _decode(mv[:end + 2], consumed, prefix_len, before, scan)
        except _Malformed:
            buf[end:end + 2] = saved
            want *= 2  # a separator inside a string or nested value: cut elsewhere later
            continue
        buf[end:end + 2] = saved
        want = piece_bytes
        consumed += cut - prefix_len
        # The rest (less than an event or two: the cut is at the last separator) starts a new
        # buffer, the prefix written over the piece's last bytes. Not `del buf[:cut]`: a
        # bytearray with free space at its front copies itself whole on every later append.
        buf = buf[cut - len(_PREFIX):]
        buf[:len(_PREFIX)] = _PREFIX
        prefix_len = ev_start = len(_PREFIX)
        before += _count(doc)
        yield doc
    if bare:
        buf += b"}"
    if not started and (not buf or buf.isspace()):   # whitespace (and a byte-order mark)
        raise _Malformed("the file is empty", None, None)
    with memoryview(buf) as mv:  # no copy of the last piece
        doc = _decode(mv, consumed, prefix_len, before, scan)
    yield doc
