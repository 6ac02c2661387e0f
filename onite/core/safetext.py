"""Text from users made safe for a terminal or the log: ``printable`` spells every character a terminal would
act on, or a reader break a line at, as an escape (``\\n``, ``\\e``, ``\\xHH``).
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, line and paragraph separators, bidirectional overrides and marks, invisible ones
# (zero-width, word joiner, BOM), letters drawn as blanks (Hangul fillers, braille blank) and lone surrogates
UNSAFE_CHARS = ("\x00-\x1f\x7f-\x9f\u061c\u115f\u1160\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060"
                "\u2066-\u2069\u2800\u3164\ufeff\uffa0\ud800-\udfff")
BLANKS = "[\u115f\u1160\u2800\u3164\uffa0]"  # of those, the ones str.isprintable passes
UNSAFE = f"[{UNSAFE_CHARS}]"
_OUTPUT_UNSAFE = UNSAFE.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f")  # as UNSAFE, less newline and tab
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}


def _spell(match: re.Match) -> str:
    ch = match.group()
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, smuggled by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _is_safe(text: str) -> bool:
    """No unsafe character in ``text``: the common case, told cheaply."""
    return text.isprintable() and (text.isascii() or not re.search(BLANKS, text))


def printable(text: str) -> str:
    """``text`` with every unsafe character spelt out (``\\n``, ``\\e``, ``\\x07``, ``\\u202e``, ``\\xff``)."""
    return text if _is_safe(text) else re.sub(UNSAFE, _spell, text)


def phrase(text: str) -> str:
    """``text`` as part of a sentence or a cell: ``printable``, each run of blanks one space, stripped."""
    shown = printable(text)
    return re.sub(r"\s{2,}", " ", shown).strip() if "  " in shown else shown.strip()


def quoted(text: str, limit: int = 40) -> str:
    """``text`` in single quotes, ``printable``, cut to ``limit`` characters with ``...``: how messages quote users."""
    return "'" + printable(text if len(text) <= limit else text[:limit - 3] + "...") + "'"


def printable_output(text: str) -> str:
    """A job's output as another user's terminal may show it: ``printable``, but newlines and tabs kept."""
    return text if _is_safe(text) else re.sub(_OUTPUT_UNSAFE, _spell, text)
