"""Durations, clock times and dates as users type them, bounded so that no date arithmetic overflows: a
duration is in (0, MAX_DURATION], a time aware and in [EARLIEST, LATEST).
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, time, timedelta, timezone, tzinfo

from onite.core.errors import InvalidInput, bad_value
from onite.core.record import Record

MAX_DURATION = timedelta(days=366)  # the longest duration onite takes: timeouts, delays, intervals
EARLIEST = datetime(1900, 1, 1, tzinfo=timezone.utc)  # the earliest time onite takes
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc)  # times must be before this one

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([dhms])")


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """Parse ``90s``, ``2h``, ``1h30m``, ``1d`` or bare seconds. Raises InvalidInput: not in (0, MAX_DURATION]."""
    raw = text.strip().lower()
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", raw):
        raw += "s"
    parts = _DURATION.findall(raw)
    units = [unit for _, unit in parts]  # each once, the largest first: 1h30m, not 30m1h nor 1h1h (a typo)
    if not re.fullmatch(r"(?:[0-9]+(?:\.[0-9]+)?[dhms])+", raw) or units != sorted(set(units), key="dhms".index):
        raise bad_value(what, text, "a duration such as 90s, 45m, 2h, 1h30m or 1d (a bare number is seconds)")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if not seconds <= MAX_DURATION.total_seconds():  # also inf, from a number of 400 digits
        raise bad_value(what, text, f"a duration of at most {format_duration(MAX_DURATION)}")
    delta = timedelta(seconds=seconds)
    if delta <= timedelta(0):  # also a fraction of a microsecond, which rounds to zero
        raise bad_value(what, text, "a duration longer than zero, such as 90s or 2h")
    return delta


def is_valid_time(when: object) -> bool:
    """Is ``when`` a time onite takes: an aware datetime in [EARLIEST, LATEST)?"""
    return (isinstance(when, datetime) and when.tzinfo is not None and when.utcoffset() is not None
            and EARLIEST <= when < LATEST)


def _bounded(when: datetime, text: str, what: str) -> datetime:
    if not is_valid_time(when):
        raise bad_value(what, text, f"a time between the years {EARLIEST.year} and {LATEST.year - 1}, "
                        "e.g. 2026-11-23T02:00")
    return when


_ROUND_LIMITS = (5, 10, 30, 60, 120, 300, 600, 900, 1800, 2700, 3600, 5400, 7200, 10800, 14400, 21600, 28800, 43200,
                 86400)  # seconds: the time limits a person would write


def longer_limit(seconds: float) -> timedelta:
    """What to give a job that timed out after ``seconds``: twice that, rounded up to a limit a person would write."""
    want = 2 * max(seconds, 1.0)
    limit = next((step for step in _ROUND_LIMITS if step >= want), 86400 * math.ceil(want / 86400))
    return min(timedelta(seconds=limit), MAX_DURATION)


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


def clock_text(when: datetime) -> str:
    """``05:00``, or ``04:55:55`` where the seconds count (``--at +90s``)."""
    return f"{when:%H:%M:%S}" if when.second or when.microsecond else f"{when:%H:%M}"


def parse_stamp(text: object) -> datetime | None:
    """A time onite wrote in ISO 8601, or None if absent, unreadable, naive or out of bounds."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if is_valid_time(when) else None


def parse_clock(text: str, *, what: str = "time") -> time:
    """Parse a wall-clock time ``HH:MM`` (24-hour) or ``HH:MM:SS``. Raises InvalidInput."""
    match = re.fullmatch(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?", text.strip())
    if not match or int(match.group(1)) > 23 or int(match.group(2)) > 59 or int(match.group(3) or 0) > 59:
        raise bad_value(what, text, "a time of day as HH:MM, e.g. 07:00")
    return time(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def parse_when(text: str, now: datetime, *, what: str = "--at") -> datetime:
    """A not-before time: ``now``, ``HH:MM`` (the next such time), an ISO date-time (local unless it has an
    offset), ``+2h`` or ``tomorrow HH:MM``. Raises InvalidInput: none of those, or out of bounds."""
    raw = text.strip()
    if raw.lower() == "now":  # a timed job that is due at once: a daemon runs it when it next looks
        return now
    if raw.startswith("+"):
        try:
            delay = parse_duration(raw[1:])
        except InvalidInput:
            raise _bad_when(text, what) from None
        return _bounded(now + delay, text, what)
    if raw.lower().startswith("tomorrow"):
        try:
            clock = parse_clock(raw[len("tomorrow"):].strip() or "00:00")
        except InvalidInput:
            raise _bad_when(text, what) from None
        return local_time(datetime.combine((now + timedelta(days=1)).date(), clock), now)
    if re.fullmatch(r"[0-9]{1,2}:[0-9]{2}", raw):
        return next_clock(parse_clock(raw, what=what), now)
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise _bad_when(text, what) from None
    if parsed.tzinfo is None and EARLIEST.year <= parsed.year < LATEST.year:  # year 1 or 9999 may not convert
        parsed = local_time(parsed, now)
    return _bounded(parsed, text, what)


def _bad_when(text: str, what: str) -> InvalidInput:
    return bad_value(what, text, "now, HH:MM (24-hour), YYYY-MM-DDTHH:MM, 'tomorrow HH:MM' or +DURATION (e.g. +2h)")


class Zone(Record):
    """Wall clock <-> instants in one zone. ``tz=None`` is the machine's zone (TZ)."""

    tz: tzinfo | None

    def wall(self, at: datetime) -> datetime:
        """The naive wall-clock reading at the instant ``at``."""
        return at.astimezone(self.tz).replace(tzinfo=None)

    def instant(self, wall: datetime, fold: int) -> datetime:
        """The instant (UTC) of a naive wall-clock reading, ``fold`` as in PEP 495."""
        if self.tz is None:
            # naive timestamp() follows PEP 495 for fold (naive astimezone() swaps the folds in a gap, CPython 3.11)
            return datetime.fromtimestamp(wall.replace(fold=fold).timestamp(), timezone.utc)
        return wall.replace(tzinfo=self.tz, fold=fold).astimezone(timezone.utc)

    def clock_instant(self, wall: datetime) -> datetime:
        """The instant a naive wall-clock reading names under onite's DST policy (cronie's): a repeated time is
        its first pass, a skipped one the first instant after the jump. The one DST resolver."""
        first = self.instant(wall, 0)
        if self.wall(first) == wall:
            return first
        # in a gap fold=1 maps before the jump, fold=0 after it (PEP 495): find the first second past ``wall``
        low, high = self.instant(wall, 1), first
        while high - low > timedelta(seconds=1):
            middle = low + timedelta(seconds=(high - low) // timedelta(seconds=1) // 2)
            if self.wall(middle) > wall:
                high = middle
            else:
                low = middle
        return high

    def midnight(self, day: date) -> datetime:
        """The instant the local date ``day`` begins."""
        return self.clock_instant(datetime.combine(day, time()))


MACHINE = Zone(None)


def local_time(naive: datetime, now: datetime) -> datetime:
    """A naive wall-clock time in the machine's zone as ``Zone.clock_instant`` resolves it (naive if ``now`` is)."""
    if now.tzinfo is None:
        return naive
    return MACHINE.clock_instant(naive).astimezone()


def next_clock(clock: time, after: datetime) -> datetime:
    """The first instant strictly after ``after`` whose local wall clock reads ``clock``."""
    candidate = local_time(datetime.combine(after.date(), clock), after)
    if candidate <= after:
        candidate = local_time(datetime.combine(after.date() + timedelta(days=1), clock), after)
    return candidate
