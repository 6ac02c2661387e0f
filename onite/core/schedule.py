"""Fire times of the drain schedule and of recurring jobs, strictly increasing, under docs/scheduling.md's DST
policy, in the zone of the time they follow (the machine's local offset as the machine's zone, TZ).

Night windows: a schedule time opens one, closing at the first ``until`` after it; a drain that would start
after its window closed is a missed night, skipped (docs/scheduling.md).
"""

from __future__ import annotations

import time as _time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time, timedelta, timezone
from itertools import islice

from onite.core.errors import InvalidInput
from onite.core.policy import window_end
from onite.core.record import Record
from onite.core.rules import (MAX_YEARS_BETWEEN_FIRES, Cron, CronRule, EveryRule, Rule, compile_cron, describe,
                               matching_day)
from onite.core.timeparse import EARLIEST, LATEST, MACHINE, Zone

_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)
_HOUR = timedelta(hours=1)


def zone_of(at: datetime) -> Zone:
    """Raises ValueError: ``at`` is naive."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"a time must be an aware datetime (got naive {at.isoformat()})")
    tz = at.tzinfo
    if isinstance(tz, timezone) and tz is not timezone.utc and at.tzname() in _time.tzname:
        return MACHINE
    return Zone(tz)


def _day_fires(rule: Rule, cron: Cron | None, day: date, zone: Zone) -> list[datetime]:
    """The fire instants (UTC, sorted, unique) of the local date ``day``. An interval's are clock times
    ``offset + k × interval`` up to the next midnight (``--every 1d`` fires once on a 23- or 25-hour day too);
    one of at most an hour is periodic, as an hourly cron rule is, and counts real time."""
    start, end = zone.midnight(day), zone.midnight(day + _DAY)
    if cron is None:
        walls = [rule.offset + k * rule.interval for k in range(1, (_DAY - rule.offset) // rule.interval + 1)]
        clock_hours, at_midnight = rule.interval > _HOUR, walls[-1] == _DAY
        walls = walls[:-1] if at_midnight else walls
    else:
        walls, clock_hours, at_midnight = [m * _MINUTE for m in cron.minutes], cron.clock_hours, False
    if end - start == _DAY:  # no clock change today: wall time and elapsed time agree
        fires = [start + wall for wall in walls]
    else:
        base = datetime.combine(day, time())
        found = set()
        for offset in walls:
            wall = base + offset
            if clock_hours:
                found.add(zone.clock_instant(wall))
                continue
            # a periodic rule fires at every instant that reads `wall`: none in a gap, two in a repeat
            for fold in (0, 1):
                at = zone.instant(wall, fold)
                if zone.wall(at) == wall:
                    found.add(at)
        fires = sorted(found)
    return fires + [end] if at_midnight else fires


def fires_after(rule: Rule, after: datetime) -> Iterator[datetime]:
    """Fire times strictly after ``after``, in its zone. Raises ValueError: ``after`` is naive; InvalidInput: a
    cron rule stops firing, or the next fire time would be at or after LATEST."""
    zone = zone_of(after)
    cron = compile_cron(rule.expr) if isinstance(rule, CronRule) else None
    last = after.astimezone(timezone.utc)
    day = zone.wall(after).date()
    while True:
        if day.year >= LATEST.year - 1 or (cron is not None and day.year >= LATEST.year - MAX_YEARS_BETWEEN_FIRES):
            raise InvalidInput(f"{describe(rule)}: no fire time after {last:%Y-%m-%d %H:%M} UTC can be computed "
                               f"(onite's times end before the year {LATEST.year})",
                               "ask for fewer fire times (-n), or from an earlier time")
        if cron is not None:
            matching = matching_day(cron, day)
            if matching is None:
                raise InvalidInput(f"{describe(rule)} does not fire within {MAX_YEARS_BETWEEN_FIRES} years after {day}",
                                   "check its day-of-month, month and day-of-week fields")
            day = matching
        fires = _day_fires(rule, cron, day, zone)
        # skipping up to the last fire: a jump at midnight may give two dates one instant
        for at in fires[bisect_right(fires, last):]:
            yield at.astimezone(zone.tz)
            last = at
        day += _DAY


def next_fire(rule: Rule, after: datetime) -> datetime:
    """The first fire time strictly after ``after``. Raises as fires_after."""
    return next(fires_after(rule, after))


def fire_times(rule: Rule, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times strictly after ``start``. Raises as fires_after."""
    return list(islice(fires_after(rule, start), count))


def next_drain(schedule: Sequence[str], after: datetime) -> datetime | None:
    """The earliest next fire of the drain schedule; None if it is empty. Raises as last_fire."""
    zone_of(after)
    return min((next_fire(CronRule(expr), after) for expr in validate_schedule(tuple(schedule))), default=None)


def last_fire(rule_or_schedule: Rule | Sequence[str], at_or_before: datetime, *, since: datetime) -> datetime | None:
    """The latest fire time in ``(since, at_or_before]``, or None: missed fires are caught up once.
    Raises ValueError: a naive datetime; InvalidInput: a schedule expression is not valid."""
    zone = zone_of(at_or_before)
    zone_of(since)
    if isinstance(rule_or_schedule, (CronRule, EveryRule)):
        rules: list[Rule] = [rule_or_schedule]
    else:
        rules = [CronRule(expr) for expr in validate_schedule(tuple(rule_or_schedule))]
    found = [_last_fire(rule, at_or_before, since, zone) for rule in rules]
    latest = max((at for at in found if at is not None), default=None)
    return latest.astimezone(zone.tz) if latest is not None else None


def _last_fire(rule: Rule, at_or_before: datetime, since: datetime, zone: Zone) -> datetime | None:
    cron = compile_cron(rule.expr) if isinstance(rule, CronRule) else None
    if since >= at_or_before:
        return None
    day = zone.wall(at_or_before).date()
    while True:
        if day.year <= EARLIEST.year or (cron is not None and day.year <= EARLIEST.year + MAX_YEARS_BETWEEN_FIRES):
            return None  # no time onite takes is earlier
        if cron is not None:
            day = matching_day(cron, day, backward=True)
            if day is None:
                return None
        # a date's fires are all before its end: once a date ends at or before `since`, no earlier one counts
        if zone.midnight(day + _DAY) <= since:
            return None
        fires = _day_fires(rule, cron, day, zone)
        before = fires[: bisect_right(fires, at_or_before)]
        if before:
            return before[-1] if before[-1] > since else None
        day -= _DAY


def validate_schedule(schedule: tuple[str, ...]) -> tuple[str, ...]:
    """onite.toml's ``schedule``, every expression checked. Raises InvalidInput, naming the key."""
    for expr in schedule:
        try:
            compile_cron(expr)
        except InvalidInput as err:
            raise InvalidInput(f"onite.toml: schedule: {err.what}", err.hint) from None
    return schedule


LOOKBACK = timedelta(hours=24)  # --scheduled: how far back a schedule time may open tonight's window


class Window(Record):
    """The night window that the schedule time ``opened`` began; ``closes`` None: no end."""

    opened: datetime
    closes: datetime | None

    def is_open(self, now: datetime) -> bool:
        return self.opened <= now and (self.closes is None or now < self.closes)


def window_of(fire: datetime, until: time | None) -> Window:
    return Window(fire, window_end(fire, until))


def scheduled_window(schedule: Sequence[str], until: time | None, now: datetime, *,
                     since: datetime | None = None) -> Window | None:
    """The window, perhaps closed, of the latest schedule time in (``since``, ``now``], or None. Raises InvalidInput."""
    fire = last_fire(schedule, now, since=now - LOOKBACK if since is None else since)
    return window_of(fire, until) if fire is not None else None


class Plan(Record):
    """What the daemon does about the schedule at ``now``."""

    drain: datetime | None  # the schedule time whose night to drain now (None: nothing due)
    skipped: Window | None  # a due schedule time whose window already closed: log it, drain nothing
    handled: datetime | None  # the new "last schedule time handled" to remember (None: unchanged)
    next: datetime | None  # the next schedule time after ``handled`` (or after the old one)


def plan(schedule: Sequence[str], until: time | None, last: datetime, now: datetime) -> Plan:
    """Is a scheduled drain due at ``now``, every time up to ``last`` handled? Of missed times only the latest
    counts, while its window is open. Raises InvalidInput: a schedule expression is not valid."""
    upcoming = next_drain(schedule, last)
    if upcoming is None or upcoming > now:
        return Plan(None, None, None, upcoming)
    window = scheduled_window(schedule, until, now, since=last)
    assert window is not None  # upcoming lies in (last, now]
    following = next_drain(schedule, window.opened)
    if window.is_open(now):
        return Plan(window.opened, None, window.opened, following)
    return Plan(None, window, window.opened, following)
