"""Durations, clock times and dates as users type them (pure: the clock is an argument).

    parse_duration("1h30m") -> timedelta(hours=1, minutes=30)
    parse_clock("07:00")    -> time(7, 0)
    parse_when("02:00", now) -> the next 02:00 after ``now`` (aware datetime)

Every value is bounded, so that nothing a user types (or a file holds) can overflow
the date arithmetic done with it later: a duration is longer than zero and at
most MAX_DURATION (366 days); a time is aware (it carries its UTC offset) and lies
in [EARLIEST, LATEST), the years 1900 to 9998, where converting it to any zone
and adding a day to it stay within what ``datetime`` can hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, time, timedelta, timezone

from onite.core.errors import InvalidInput
from onite.core.safetext import printable

MAX_DURATION = timedelta(days=366)  # the longest duration onite takes: timeouts, delays, intervals
EARLIEST = datetime(1900, 1, 1, tzinfo=timezone.utc)  # the earliest time onite takes
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc)  # times must be before this one

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """Parse ``90s``, ``2h``, ``1h30m``, ``1d`` or a bare number of seconds.

    Raises:
        InvalidInput: the text is not a duration longer than zero and at most MAX_DURATION.
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
                f"bad {what} {_shown(text)}",
                "write it like 90s, 45m, 2h, 1h30m or 1d",
            )
    if not seconds <= MAX_DURATION.total_seconds():  # also inf, from a number of 400 digits
        raise InvalidInput(f"bad {what} {_shown(text)}: it is longer than {format_duration(MAX_DURATION)}",
                           f"write at most {format_duration(MAX_DURATION)}")
    delta = timedelta(seconds=seconds)
    if delta <= timedelta(0):  # also a fraction of a microsecond, which rounds to zero
        raise InvalidInput(f"bad {what} {_shown(text)}: it must be longer than zero", "write it like 90s or 2h")
    return delta


def _shown(text: str) -> str:
    """``text`` quoted for an error message, cut short if it is long."""
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def is_valid_time(when: object) -> bool:
    """Is ``when`` a time onite takes: an aware datetime in [EARLIEST, LATEST)?"""
    return (isinstance(when, datetime) and when.tzinfo is not None and when.utcoffset() is not None
            and EARLIEST <= when < LATEST)


def check_time(when: datetime, text: str, *, what: str = "time") -> datetime:
    """``when`` (parsed from ``text``) if it lies in [EARLIEST, LATEST).

    Raises:
        InvalidInput: it is outside those years.
    """
    if not is_valid_time(when):
        raise _out_of_bounds(text, what)
    return when


def _out_of_bounds(text: str, what: str) -> InvalidInput:
    return InvalidInput(f"bad {what} {_shown(text)}: it is not between the years {EARLIEST.year} and "
                        f"{LATEST.year - 1}", "give a time in those years, e.g. 2026-11-23T02:00")


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


def parse_stamp(text: object) -> datetime | None:
    """A time onite wrote in ISO 8601 (a lock file's, a log field's, a record's), or None if absent or
    unreadable, naive or out of bounds (``is_valid_time``): such a file may be half-written, damaged or
    from another version, and one bad field must not stop a listing.

    Raises: nothing.
    """
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if is_valid_time(when) else None


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
        InvalidInput: none of those forms, or a time not between the years 1900 and 9998.
    """
    raw = text.strip()
    if raw.lower() == "now":  # a timed job that is due at once: a daemon runs it when it next looks
        return now
    if raw.startswith("+"):
        return check_time(now + parse_duration(raw[1:], what="delay"), text)
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
            f"bad time '{printable(text)}'",
            "write now, HH:MM, YYYY-MM-DDTHH:MM, 'tomorrow HH:MM' or +DURATION (e.g. +2h)",
        ) from None
    if parsed.tzinfo:
        return check_time(parsed, text)
    if not EARLIEST.year <= parsed.year < LATEST.year:  # the local clock of year 1 or 9999 may not convert
        raise _out_of_bounds(text, "time")
    return check_time(_local(parsed, now), text)


def resolve_wall(wall: datetime, instant: Callable[[datetime, int], datetime],
                 wall_of: Callable[[datetime], datetime]) -> datetime:
    """The instant a naive wall-clock reading names in a zone, under onite's DST policy (cronie's): a
    time the clocks repeat is its first pass, and a time they skip is the first instant after the
    jump. The one DST resolver of onite: ``parse_when`` and the schedule (onite.core.schedule) use it.

    ``instant(wall, fold)``: the aware instant of a wall reading, with PEP 495's ``fold``;
    ``wall_of(at)``: the naive wall reading at an instant.
    """
    first = instant(wall, 0)
    if wall_of(first) == wall:
        return first
    # In a gap, fold=1 maps before the jump and fold=0 after it (PEP 495). The jump lies between
    # the two: find the first second whose wall clock is past ``wall``.
    low, high = instant(wall, 1), first
    while high - low > timedelta(seconds=1):
        middle = low + timedelta(seconds=(high - low) // timedelta(seconds=1) // 2)
        if wall_of(middle) > wall:
            high = middle
        else:
            low = middle
    return high


def machine_instant(wall: datetime, fold: int) -> datetime:
    """The instant (UTC) of a naive wall reading in the machine's zone (TZ), with PEP 495's ``fold``."""
    # naive timestamp() reads a wall clock in the machine's zone and follows PEP 495 for fold
    # (naive astimezone() does not: it swaps the folds in a gap, CPython 3.11)
    return datetime.fromtimestamp(wall.replace(fold=fold).timestamp(), timezone.utc)


def _machine_wall(at: datetime) -> datetime:
    return datetime.fromtimestamp(at.timestamp())


def _local(naive: datetime, now: datetime) -> datetime:
    """A naive wall-clock time in the machine's zone (TZ), with that date's own UTC offset, under
    onite's DST policy (``resolve_wall``: naive ``astimezone()`` would put a skipped time an hour
    early, before the jump).
    """
    if now.tzinfo is None:
        return naive
    return resolve_wall(naive, machine_instant, _machine_wall).astimezone()


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
