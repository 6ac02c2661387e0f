"""Text from users, made safe to show (pure).

Job names are checked wherever they are read, but other text that reaches a
terminal or the activity log comes from users too: a reason that quotes a
directory name, a hook's last line of stderr, a file name found in a spool
folder, a user name. A terminal acts on control characters (escape
sequences can retitle a window, move the cursor, or hide what follows), and
a newline in a log field would forge a second log line. ``printable``
spells every such character as ``\\xHH`` (``\\n``, ``\\t`` and the escape
character by name), so what is shown is exactly what was there, and inert.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the Unicode line and paragraph separators (a terminal or a
# log reader may break a line at them), plus the bidirectional overrides and marks that reorder what
# is shown, the invisible ones that hide a difference (zero-width spaces and joiners, the word
# joiner, the byte-order mark), the letters and symbols drawn as blanks (the Hangul fillers, the
# braille blank: padding that would pass for spaces, which are squeezed where that matters: ``phrase``),
# and lone surrogates (a file name's bytes that are not UTF-8: no terminal can be sent one).
UNSAFE_CHARS = ("\x00-\x1f\x7f-\x9f\u061c\u115f\u1160\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060"
                "\u2066-\u2069\u2800\u3164\ufeff\uffa0\ud800-\udfff")
BLANKS = "[\u115f\u1160\u2800\u3164\uffa0]"  # of those, the ones str.isprintable passes
UNSAFE = f"[{UNSAFE_CHARS}]"  # compiled on first use (re caches it): most text needs no spelling
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}


def _spell(match: re.Match) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named:
        return named
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, smuggled by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character spelt out (``\\n``, ``\\e``, ``\\x07``, ``\\u202e``; a byte
    that is not UTF-8, smuggled in by surrogateescape, as ``\\xff``)."""
    if text.isprintable() and (text.isascii() or not re.search(BLANKS, text)):  # the common case, cheap
        return text
    return re.sub(UNSAFE, _spell, text)


_SPACES = re.compile(r"\s{2,}")


def phrase(text: str) -> str:
    """``text`` as part of a sentence or a cell: ``printable``, each run of spaces one space, no space
    at either end (a run of spaces in a user's text could push what follows to a line of its own)."""
    shown = printable(text)
    return _SPACES.sub(" ", shown).strip() if "  " in shown else shown.strip()


_OUTPUT_UNSAFE = UNSAFE.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f")  # as UNSAFE, less newline and tab


def printable_output(text: str) -> str:
    """A job's output as another user's terminal may show it: ``printable``, but its lines kept as
    lines (newlines and tabs stay; a carriage return, which would let a line overwrite itself, is
    spelt out like every other control character)."""
    if text.isprintable():
        return text
    return re.sub(_OUTPUT_UNSAFE, _spell, text)
