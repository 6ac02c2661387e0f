"""Bytes as one line of text and back (pure): how a job file's header holds any environment.

A header value is UTF-8 text in which a backslash escapes ``\\\\``, ``\\n``,
``\\r``, ``\\t``, ``\\e`` and ``\\xHH`` (any other control byte, and every byte
that is not valid UTF-8), so that multi-line values, quotes, ``$``, non-UTF-8
bytes and names such as ``BASH_FUNC_f%%`` round-trip exactly:
``unescape(escape(b)) == b`` for all bytes ``b``, and ``escape`` never writes
a newline or a control character.
"""

from __future__ import annotations

import re

from onite.core.errors import JobFormatError


_NAMED = {0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x1B: "\\e"}
_PLAIN = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")  # printable ASCII but the backslash
_UNESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_UNNAMED = {"\\": 0x5C, "n": 0x0A, "r": 0x0D, "t": 0x09, "e": 0x1B}


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
    """The inverse of ``escape``.

    Raises:
        JobFormatError: a backslash sequence that ``escape`` never writes.
    """
    if "\\" not in text:
        return text.encode("utf-8", "surrogateescape")
    parts: list[bytes] = []
    pos = 0
    for match in _UNESCAPE.finditer(text):
        parts.append(text[pos:match.start()].encode("utf-8", "surrogateescape"))
        code = match.group(1)
        if code[0] == "x" and len(code) == 3:
            parts.append(bytes([int(code[1:], 16)]))
        elif code in _UNNAMED:
            parts.append(bytes([_UNNAMED[code]]))
        else:
            raise JobFormatError(f"bad escape '\\{code}' in a job file header", "the job file is damaged; spool it again")
        pos = match.end()
    parts.append(text[pos:].encode("utf-8", "surrogateescape"))
    return b"".join(parts)
