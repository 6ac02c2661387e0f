"""Values read back from JSON records, which may be torn, damaged or written by a user: each reader returns a
value of the right type and range, ``default`` when the key is absent, or raises ValueError naming the field.
"""

from __future__ import annotations

import re
from datetime import datetime

from onite.core.timeparse import parse_stamp

_MISSING = object()


def loads_object(raw: bytes | str) -> dict:
    """The JSON object ``raw`` holds. Raises ValueError: not JSON, nested too deeply, or not an object."""
    import json

    try:
        data = json.loads(raw)
    except RecursionError:  # "[[[[…" a hundred thousand deep
        raise ValueError("nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    return data


def is_whole(value: object, low: int, high: int) -> bool:
    """Is ``value`` a whole number (not a bool) from ``low`` to ``high``?"""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


_DIGITS = {10: re.compile(r"[0-9]{1,30}"), 8: re.compile(r"[0-7]{1,30}")}  # ASCII digits: \d takes any Unicode digit


def whole_text(text: str, what: str, *, base: int = 10) -> int:
    """``text``, a whole number as onite writes one: ASCII digits only (int() also takes '+3', ' 3 ', '1_0', '0o17'
    and other scripts' digits, which a shell reads otherwise). Raises ValueError naming ``what``."""
    if not isinstance(text, str) or _DIGITS[base].fullmatch(text) is None:
        kind = "an octal number" if base == 8 else "a whole number"
        raise ValueError(f"{what} {_short(text)} is not {kind} (digits 0 to {base - 1} only)")
    return int(text, base)


def _get(data: dict, key: str, default: object) -> object:
    value = data.get(key, default)
    if value is _MISSING:
        raise ValueError(f"{key}: missing")
    return value


def integer(data: dict, key: str, low: int, high: int, default: object = _MISSING) -> int:
    value = _get(data, key, default)
    if not is_whole(value, low, high):
        raise ValueError(f"{key}: {_short(value)} is not a whole number from {low} to {high}")
    return value


def optional_integer(data: dict, key: str, low: int, high: int) -> int | None:
    """``data[key]`` as ``integer`` reads it, or None if absent or null."""
    return None if data.get(key) is None else integer(data, key, low, high)


def text(data: dict, key: str, default: object = _MISSING) -> str:
    value = _get(data, key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key}: {_short(value)} is not a string")
    return value


def optional_text(data: dict, key: str) -> str | None:
    """``data[key]``, a string, or None if it is absent or null."""
    return None if data.get(key) is None else text(data, key)


def boolean(data: dict, key: str, default: object = _MISSING) -> bool:
    value = _get(data, key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key}: {_short(value)} is not true or false")
    return value


def time(data: dict, key: str) -> datetime:
    """``data[key]``, an ISO 8601 time with its UTC offset, in onite's bounds."""
    value = _get(data, key, _MISSING)
    when = parse_stamp(value)
    if when is None:
        raise ValueError(f"{key}: {_short(value)} is not a time with its UTC offset, in the years 1900 to 9998")
    return when


def optional_time(data: dict, key: str) -> datetime | None:
    """``data[key]`` as ``time`` reads it, or None if it is absent, null or empty."""
    return None if data.get(key) in (None, "") else time(data, key)


def _short(value: object) -> str:
    try:
        shown = repr(value)
    except ValueError:  # an int of more digits than Python will print
        return f"a {type(value).__name__}"
    return shown if len(shown) <= 40 else shown[:37] + "..."
