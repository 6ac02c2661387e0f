"""Bytes as one line of text and back, for a job file's environment: ``unescape(escape(b)) == b``, and
``escape`` never writes a newline or a control character.
"""

from __future__ import annotations

import re

from onite.core.errors import JobFormatError

_NAMED = {0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x1B: "\\e"}
_PLAIN = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")  # printable ASCII but the backslash
_UNESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_UNNAMED = {b"\\": b"\\", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"e": b"\x1b"}


def escape(raw: bytes) -> str:
    """Bytes → one line of UTF-8 text that ``unescape`` turns back into the same bytes."""
    if _PLAIN.fullmatch(raw):
        return raw.decode("ascii")
    return "".join(map(_escape_char, raw.decode("utf-8", "surrogateescape")))


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code in _NAMED:
        return _NAMED[code]
    if code < 0x20 or code == 0x7F:
        return "\\x%02x" % code
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, smuggled by surrogateescape
        return "\\x%02x" % (code - 0xDC00)
    if 0x80 <= code < 0xA0:  # C1 controls: a terminal would act on them, so spell their bytes
        return "".join("\\x%02x" % b for b in ch.encode())
    return ch


def unescape(text: str) -> bytes:
    """The inverse of ``escape``. Raises JobFormatError: a backslash sequence ``escape`` never writes."""
    raw = text.encode("utf-8", "surrogateescape")  # a backslash is never part of a multi-byte character
    return _UNESCAPE.sub(_unescape_one, raw) if b"\\" in raw else raw


def _unescape_one(match: re.Match) -> bytes:
    code = match.group(1)
    if len(code) == 3 and code.startswith(b"x"):
        return bytes([int(code[1:], 16)])
    if code in _UNNAMED:
        return _UNNAMED[code]
    shown = match.string[match.start():match.start() + 5].decode("utf-8", "surrogateescape")[:2]  # "\\" and a character
    raise JobFormatError(f"bad escape '{shown}' in a job file header", "the job file is damaged; spool it again")
