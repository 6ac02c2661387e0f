"""Durations, clock times and dates as users type them (pure: the clock is an argument).

    parse_duration("1h30m") -> timedelta(hours=1, minutes=30)
    parse_clock("07:00")    -> time(7, 0)
    parse_when("02:00", now) -> the next 02:00 after ``now`` (aware datetime)
"""

from __future__ import annotations

import math
import re
from datetime import datetime, time, timedelta

from onite.errors import InvalidInput

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """Parse ``90s``, ``2h``, ``1h30m``, ``1d`` or a bare number of seconds.

    Raises:
        InvalidInput: the text is not a positive duration.
    """
    raw = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        seconds = float(raw)
    else:
        pos, seconds = 0, 0.0
        for match in _DURATION.finditer(raw):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(raw) or not raw:
            raise InvalidInput(
                f"bad {what} {text!r}",
                "write it like 90s, 45m, 2h, 1h30m or 1d",
            )
    if seconds <= 0:
        raise InvalidInput(f"bad {what} {text!r}: it must be longer than zero", "write it like 90s or 2h")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The shortest exact spelling parse_duration accepts: ``1h30m``, ``90s`` -> ``1m30s``."""
    total = delta.total_seconds()
    if total != int(total):
        return f"{total:g}s"
    rest, parts = int(total), []
    for unit, size in _UNITS.items():
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"


def parse_stamp(text: str | None) -> datetime | None:
    """A time onite wrote in ISO 8601 (a lock file's, a log field's), or None if absent or unreadable:
    such a file may be half-written or from another version, and one bad field must not stop a listing.

    Raises: nothing.
    """
    try:
        return datetime.fromisoformat(text) if text else None
    except (TypeError, ValueError):
        return None


def parse_clock(text: str, *, what: str = "time") -> time:
    """Parse a wall-clock time ``HH:MM`` (24-hour), or ``HH:MM:SS``.

    Raises:
        InvalidInput: not a valid time of day.
    """
    match = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", text.strip())
    if not match or int(match.group(1)) > 23 or int(match.group(2)) > 59 or int(match.group(3) or 0) > 59:
        raise InvalidInput(f"bad {what} {text!r}", "write it as HH:MM, e.g. 07:00")
    return time(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def parse_when(text: str, now: datetime) -> datetime:
    """A not-before time: ``now``, ``HH:MM`` (the next such time after ``now``), an ISO date-time
    (``2026-11-23T02:00``, ``2026-11-23 02:00``, optionally with an offset), ``+2h``
    (a duration from now), or ``tomorrow HH:MM``. Naive inputs are local (TZ) times.

    Raises:
        InvalidInput: none of those forms.
    """
    raw = text.strip()
    if raw.lower() == "now":  # a timed job that is due at once: a daemon runs it when it next looks
        return now
    if raw.startswith("+"):
        return now + parse_duration(raw[1:], what="delay")
    if raw.lower().startswith("tomorrow"):
        clock = parse_clock(raw[len("tomorrow"):].strip() or "00:00")
        day = (now + timedelta(days=1)).date()
        return _local(datetime.combine(day, clock), now)
    if re.fullmatch(r"\d{1,2}:\d{2}", raw):
        return next_clock(parse_clock(raw), now)
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(
            f"bad time {text!r}",
            "write now, HH:MM, YYYY-MM-DDTHH:MM, 'tomorrow HH:MM' or +DURATION (e.g. +2h)",
        ) from None
    return parsed if parsed.tzinfo else _local(parsed, now)


def _local(naive: datetime, now: datetime) -> datetime:
    """A naive wall-clock time in the machine's zone (TZ), with that date's own UTC offset, under
    schedule.py's DST policy: a time the clocks repeat is its first pass, and a time they skip is
    the instant they jump (naive ``astimezone()`` would put it an hour early, before the jump).
    """
    if now.tzinfo is None:
        return naive
    # PEP 495: fold=0 reads a repeated time with the earlier offset (its first pass), and a
    # skipped time with the offset before the jump, which lands after the jump
    first = datetime.fromtimestamp(naive.replace(fold=0).timestamp()).astimezone()
    if first.replace(tzinfo=None) == naive:
        return first
    before = math.floor(naive.replace(fold=1).timestamp())  # the skipped time read as if already jumped
    after = math.ceil(first.timestamp())
    while after - before > 1:  # the jump: the first second whose wall clock is past ``naive``
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle) >= naive:
            after = middle
        else:
            before = middle
    return datetime.fromtimestamp(after).astimezone()


def next_clock(clock: time, after: datetime) -> datetime:
    """The first instant strictly after ``after`` whose local wall clock reads ``clock``."""
    candidate = _local(datetime.combine(after.date(), clock), after)
    if candidate <= after:
        candidate = _local(datetime.combine(after.date() + timedelta(days=1), clock), after)
    return candidate


def local_time(naive: datetime, now: datetime) -> datetime:
    """A naive wall-clock time in the machine's zone (TZ) as an aware datetime with that date's own
    UTC offset, under the DST policy of ``parse_when`` (``now`` only says whether to be aware)."""
    return _local(naive, now)
