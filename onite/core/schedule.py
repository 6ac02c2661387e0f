"""Fire times for the drain schedule and for recurring jobs (pure: time is an argument).

Invariant: every function here is a pure function of its arguments. No clock reads, no
I/O. Fire times come back strictly increasing and never duplicated, also when the
clocks change.

Rules
    ``CronRule`` and ``EveryRule`` (onite.core.rules, where they are checked). An
    EveryRule counts time from the local midnight of each day: ``every 25m offset 2m``
    gives 00:27, 00:52, ... 23:47, then 00:27 the next day; ``every 4m`` gives 00:04 ...
    23:56, 24:00, that last one the next day's 00:00, fired once, as the old day's last.

Zone
    Times are wall-clock times in the zone of the ``after``/``start`` argument, and
    results come back in that zone.
    - A ``zoneinfo.ZoneInfo`` (or another PEP 495 tzinfo) is used as given, with its
      DST rules.
    - The fixed-offset ``datetime.timezone`` that ``datetime.now().astimezone()``
      attaches stands for the machine's zone (TZ), with its DST rules. It is recognised
      by its name being one of ``time.tzname``. This way the CLI and the daemon pass
      ``datetime.now().astimezone()`` and get local times.
    - ``timezone.utc`` and any other fixed offset are used literally, with no DST.
    A naive datetime is a programming error and raises ValueError.

DST (the policy of cronie/Vixie cron, which onite's overnight jobs are written against)
    Clock-time rules have an hour field that names hours (``30 2 * * *``, ``0 20-23 * * *``).
    For these rules a wall time fires once on the night the clocks change:
    - A time that does not exist (spring forward, 02:30 in Europe/Berlin on 2026-03-29)
      fires at the first instant after the jump (03:00 local), as cronie does. Several
      such times fire once together there.
    - A time that happens twice (fall back) fires at its first occurrence only.
    Periodic rules have an hour field that starts with ``*`` (``17 * * * *``,
    ``0 */2 * * *``). They count real hours, so they fire at every instant whose wall
    clock matches: both passes of a repeated hour, and not at all in a skipped hour (no
    real time is lost there). Like cronie's "wildcard" jobs, except that only the hour
    field decides. ``*/15 2 * * *`` still names 02:00 and must run on the spring-forward
    night.
    EveryRule counts real elapsed time, so DST needs no special case. Its days are just
    23 or 25 hours long.

Catch-up
    ``last_fire`` returns only the latest missed fire in a window. A driver that was
    down for three nights catches up once, not three times (APScheduler's "coalesce").

croniter
    croniter is imported inside functions because the CLI must start fast. It sees wall
    clocks as aware UTC datetimes. That is a zone without DST, so croniter does only
    calendar matching (which dates match, and which minutes of the day). Turning wall
    times into instants under the policy above is done here, not by croniter. In
    croniter 7.0.0, for example, a fixed 02:30 fires twice when the clocks fall back.
"""

from __future__ import annotations

import time as _time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache

from onite.core.errors import InvalidInput
from onite.core.rules import (MAX_YEARS_BETWEEN_FIRES, Cron, CronRule, EveryRule, Rule, compile_cron, describe,
                               matching_day, validate_cron)
from onite.core.timeparse import EARLIEST, LATEST, machine_instant, resolve_wall

_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)

__all__ = ["describe", "fire_times", "last_fire", "next_drain", "next_fire", "validate_schedule"]

# ---------------------------------------------------------------------------- zones


class _Zone:
    """Wall clock <-> instants in one zone. ``tz=None`` is the machine's zone (TZ)."""

    __slots__ = ("tz",)

    def __init__(self, tz: tzinfo | None) -> None:
        self.tz = tz

    def wall(self, at: datetime) -> datetime:
        """The naive wall-clock reading at the instant ``at``."""
        return at.astimezone(self.tz).replace(tzinfo=None)

    def instant(self, wall: datetime, fold: int) -> datetime:
        """The instant (UTC) of a naive wall-clock reading. ``fold`` follows PEP 495."""
        if self.tz is None:
            return machine_instant(wall, fold)
        return wall.replace(tzinfo=self.tz, fold=fold).astimezone(timezone.utc)

    def present(self, at: datetime) -> datetime:
        """``at`` in this zone, the way callers passed their own times."""
        return at.astimezone(self.tz)


def zone_of(at: datetime, name: str) -> _Zone:
    if not isinstance(at, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (got naive {at.isoformat()})")
    tz = at.tzinfo
    if hasattr(tz, "localize"):
        raise ValueError(f"{name} has a pytz zone, which breaks wall-clock arithmetic: use zoneinfo.ZoneInfo")
    if isinstance(tz, timezone) and tz is not timezone.utc and at.tzname() in _time.tzname:
        return _Zone(None)
    return _Zone(tz)


def _clock_instant(wall: datetime, zone: _Zone) -> datetime:
    """The instant a clock-time rule fires for ``wall``: onite.core.timeparse.resolve_wall's (the first
    occurrence of a time that happens twice; the first instant after the jump for one that does not
    exist, as cronie does)."""
    return resolve_wall(wall, zone.instant, zone.wall)


def _midnight(day: date, zone: _Zone) -> datetime:
    """The instant the local date ``day`` begins (first occurrence; after the jump if
    00:00 does not exist).
    """
    return _clock_instant(datetime.combine(day, time()), zone)


# ---------------------------------------------------------------------------- the engine


def _day_fires(rule: Rule, cron: Cron | None, day: date, zone: _Zone) -> list[datetime]:
    """The fire instants (UTC, sorted, unique) that belong to the local date ``day``."""
    start, end = _midnight(day, zone), _midnight(day + _DAY, zone)
    if cron is None:
        assert isinstance(rule, EveryRule)
        first = start + rule.offset + rule.interval
        if first > end:
            return []
        return [first + k * rule.interval for k in range((end - first) // rule.interval + 1)]
    if end - start == _DAY:
        # No clock change today, so wall time and elapsed time agree.
        return [start + m * _MINUTE for m in cron.minutes]
    base = datetime.combine(day, time())
    fires = set()
    for m in cron.minutes:
        wall = base + m * _MINUTE
        if cron.clock_hours:
            fires.add(_clock_instant(wall, zone))
            continue
        # A periodic rule fires at every instant that reads `wall`: none in a gap, two in a repeat.
        for fold in (0, 1):
            at = zone.instant(wall, fold)
            if zone.wall(at) == wall:
                fires.add(at)
    return sorted(fires)


def _compiled(rule: Rule) -> Cron | None:
    if isinstance(rule, CronRule):
        return compile_cron(rule.expr)
    if isinstance(rule, EveryRule):
        return None
    raise TypeError(f"not a schedule rule: {rule!r}")


def fires_after(rule: Rule, after: datetime, name: str = "after") -> Iterator[datetime]:
    """Fire times strictly after ``after``, in increasing order, in ``after``'s zone, all before
    timeparse.LATEST (the times onite takes end there).

    Raises:
        InvalidInput: a cron rule stops firing (a gap longer than MAX_YEARS_BETWEEN_FIRES), or the
            next fire time would be at or after LATEST.
    """
    zone = zone_of(after, name)
    cron = _compiled(rule)
    last = after.astimezone(timezone.utc)
    day = zone.wall(after).date()
    while True:
        if day.year >= LATEST.year - 1 or (cron is not None and day.year >= LATEST.year - MAX_YEARS_BETWEEN_FIRES):
            _past_latest(rule, last)
        if cron is not None:
            matching = matching_day(cron, day)
            if matching is None:
                raise InvalidInput(
                    f"{describe(rule)} does not fire within {MAX_YEARS_BETWEEN_FIRES} years after {day}",
                    "check its day-of-month, month and day-of-week fields",
                )
            day = matching
        fires = _day_fires(rule, cron, day, zone)
        # Skipping everything up to the last fire keeps the sequence strictly increasing,
        # also where a jump at midnight gives two dates the same instant.
        for at in fires[bisect_right(fires, last):]:
            if at >= LATEST:
                _past_latest(rule, last)
            yield zone.present(at)
            last = at
        day += _DAY


def _past_latest(rule: Rule, last: datetime) -> None:
    """Raises:
        InvalidInput: always: the fire after ``last`` would not be before timeparse.LATEST.
    """
    raise InvalidInput(f"{describe(rule)}: no fire time after {last:%Y-%m-%d %H:%M} UTC can be computed "
                       f"(onite's times end before the year {LATEST.year})",
                       "ask for fewer fire times (-n), or from an earlier time")


def next_fire(rule: Rule, after: datetime) -> datetime:
    """The first fire time strictly after ``after`` (aware), in ``after``'s zone.

    Raises:
        ValueError: ``after`` is naive.
        InvalidInput: a cron rule does not fire within MAX_YEARS_BETWEEN_FIRES years.
    """
    return next(fires_after(rule, after))


def fire_times(rule: Rule, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times strictly after ``start`` (aware), for previews.

    Raises:
        ValueError: ``start`` is naive or ``count`` is negative.
        InvalidInput: a cron rule does not fire within MAX_YEARS_BETWEEN_FIRES years.
    """
    if count < 0:
        raise ValueError(f"count must be 0 or more, not {count}")
    fires = fires_after(rule, start, "start")
    return [next(fires) for _ in range(count)]


def next_drain(schedule: Sequence[str], after: datetime) -> datetime | None:
    """The earliest next fire over the drain schedule's cron expressions; None if it is empty.

    Raises:
        ValueError: ``after`` is naive.
        InvalidInput: an expression is not valid.
    """
    zone_of(after, "after")
    return min((next_fire(CronRule(expr), after) for expr in _schedule(schedule)), default=None)


def last_fire(
    rule_or_schedule: Rule | Sequence[str],
    at_or_before: datetime,
    *,
    since: datetime,
) -> datetime | None:
    """The latest fire time in ``(since, at_or_before]``, or None. It is used for catch-up:
    however many fires were missed, only the latest is returned, so a driver that missed
    three nights drains once, not three times.

    Raises:
        ValueError: a naive datetime.
        InvalidInput: a schedule expression is not valid.
    """
    zone = zone_of(at_or_before, "at_or_before")
    zone_of(since, "since")
    if isinstance(rule_or_schedule, (CronRule, EveryRule)):
        rules: list[Rule] = [rule_or_schedule]
    else:
        rules = [CronRule(expr) for expr in _schedule(rule_or_schedule)]
    found = [_last_fire(rule, at_or_before, since, zone) for rule in rules]
    latest = max((at for at in found if at is not None), default=None)
    return zone.present(latest) if latest is not None else None


def _last_fire(rule: Rule, at_or_before: datetime, since: datetime, zone: _Zone) -> datetime | None:
    cron = _compiled(rule)
    if since >= at_or_before:
        return None
    day = zone.wall(at_or_before).date()
    while True:
        if day.year <= EARLIEST.year or (cron is not None and day.year <= EARLIEST.year + MAX_YEARS_BETWEEN_FIRES):
            return None  # no time onite takes is earlier: nothing fired before
        if cron is not None:
            matching = matching_day(cron, day, backward=True)
            if matching is None:
                return None
            day = matching
        # A date's fires are all at or before its end, so once a date ends at or before
        # `since`, no earlier date can have a fire inside the window.
        if _midnight(day + _DAY, zone) <= since:
            return None
        fires = _day_fires(rule, cron, day, zone)
        before = fires[: bisect_right(fires, at_or_before)]
        if before:
            return before[-1] if before[-1] > since else None
        day -= _DAY


def _schedule(schedule: Sequence[str]) -> Sequence[str]:
    if isinstance(schedule, str):
        # A bare string is a sequence of characters: refuse it rather than parse "0", " ", ...
        raise TypeError(f"a schedule is a list of cron expressions, not the string {schedule!r}")
    return validate_schedule(tuple(schedule))


@lru_cache(maxsize=8)
def validate_schedule(schedule: tuple[str, ...]) -> tuple[str, ...]:
    """``schedule`` of onite.toml, every expression checked (once per distinct schedule).

    Raises:
        InvalidInput: an expression is not valid cron; the message names onite.toml's key.
    """
    for expr in schedule:
        try:
            validate_cron(expr)
        except InvalidInput as err:
            raise InvalidInput(f"onite.toml: schedule: {err.what}", err.hint) from None
    return schedule
