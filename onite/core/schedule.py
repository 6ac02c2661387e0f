"""Fire times for the drain schedule and for recurring jobs (pure: time is an argument).

Invariant: every function here is a pure function of its arguments. No clock reads, no
I/O. Fire times come back strictly increasing and never duplicated, also when the
clocks change.

Rules
    ``CronRule("0 20 * * *")``: a five-field cron expression (minute hour day-of-month
    month day-of-week). Validated when the rule is built.
    ``EveryRule(interval, offset)``: ``every 25m offset 2m``. It fires at local midnight
    + offset + k*interval for k = 1, 2, ... while that instant is at or before the next
    local midnight. Time is counted as real elapsed time from the local midnight of each
    day, and the count starts again every day. A recurring job therefore has the same
    times every day, and a preview does not depend on the day it starts from:
    ``every 25m offset 2m`` gives 00:27, 00:52, ... 23:47, then 00:27 the next day.
    ``every 4m`` gives 00:04 ... 23:56, 24:00. That last one is the next day's 00:00,
    and it fires once, as the last fire of the old day. The interval must be between 1m
    and 1d. The offset must be at least 0 and shorter than the interval.

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

import re
import time as _time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache

from onite.core.errors import InvalidInput
from onite.core.timeparse import EARLIEST, LATEST, format_duration, parse_duration

__all__ = [
    "CronRule",
    "EveryRule",
    "Rule",
    "describe",
    "fire_times",
    "last_fire",
    "next_drain",
    "next_fire",
    "parse_rule",
    "validate_cron",
]

# croniter's own default is 50 years. An expression that cannot match (or matches only
# every few decades, like `0 0 * 2 1#5`) would then cost a long search on every call.
# 10 years still covers the longest gap a sensible expression has: 29 February, 8 years
# across 2100.
MAX_YEARS_BETWEEN_FIRES = 10

_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD_RANGES = ("0-59", "0-23", "1-31 or L", "1-12 or jan-dec", "0-7 or sun-sat")
_FIVE_FIELDS_HINT = "write five fields: minute hour day-of-month month day-of-week, e.g. '0 20 * * *'"
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# croniter's `R` picks a random value. Fire times must be the same on every computation.
# (A pattern string, not a compiled one: re caches it, and import stays cheap.)
_RANDOM = r"(?<![a-z])r(?![a-z])"
# Any date croniter can start from will do; a fixed one keeps validation deterministic.
_PROBE_FROM = datetime(2000, 1, 1, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class CronRule:
    """A five-field cron expression, validated (and its spacing normalised) when built.

    Raises:
        InvalidInput: the expression is not a valid five-field cron expression.
    """

    expr: str

    def __post_init__(self) -> None:
        validate_cron(self.expr)
        # Normalise spacing so that equal rules compare equal and describe() reads well.
        object.__setattr__(self, "expr", " ".join(self.expr.split()))


@dataclass(frozen=True)
class EveryRule:
    """Every ``interval`` from local midnight + ``offset`` (see the module docstring).

    Raises:
        InvalidInput: interval not within 1m..1d, or offset negative or not shorter
            than the interval.
    """

    interval: timedelta
    offset: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        every, offset = format_duration(self.interval), _format_offset(self.offset)
        if self.interval < _MINUTE:
            raise InvalidInput(
                f"interval {every} is too short: recurring jobs run at most once a minute",
                "use --every 1m or longer",
            )
        if self.interval > _DAY:
            raise InvalidInput(
                f"interval {every} is longer than a day: the count restarts at every local midnight",
                "use --every 1d or shorter, or --cron for weekly or monthly jobs (e.g. --cron '0 3 * * 1')",
            )
        if self.offset < timedelta(0):
            raise InvalidInput(f"offset {offset} is negative", f"use an offset from 0 up to less than {every}")
        if self.offset >= self.interval:
            raise InvalidInput(
                f"offset {offset} is not shorter than the interval {every}",
                f"use an offset from 0 up to less than {every}",
            )
        if self.offset + self.interval > _DAY:
            raise InvalidInput(
                f"--every {every} --offset {offset} never fires: its first run would come after midnight",
                "make offset + interval at most 1d",
            )


Rule = CronRule | EveryRule


def parse_rule(*, cron: str | None = None, every: str | None = None, offset: str | None = None) -> Rule:
    """Build a rule from the user's ``--cron EXPR`` or ``--every DURATION [--offset DURATION]``.

    Raises:
        InvalidInput: neither or both of cron/every, offset without every, or a bad value.
    """
    if cron is not None and every is not None:
        raise InvalidInput(
            f"both --cron {cron!r} and --every {every!r} given",
            "give one of them: --cron '0 20 * * *' or --every 25m [--offset 2m]",
        )
    if cron is not None:
        if offset is not None:
            raise InvalidInput(
                f"--offset {offset!r} goes with --every, not with --cron {cron!r}",
                "put the offset into the cron expression's minute field, e.g. '2-59/25 * * * *'",
            )
        return CronRule(cron)
    if every is not None:
        interval = parse_duration(every, what="interval")
        return EveryRule(interval, _parse_offset(offset) if offset is not None else timedelta(0))
    if offset is not None:
        raise InvalidInput(f"--offset {offset!r} needs --every", "write e.g. --every 25m --offset 2m")
    raise InvalidInput(
        "a recurring job needs a rule",
        "give --cron '0 20 * * *' or --every 25m [--offset 2m]",
    )


def _parse_offset(text: str) -> timedelta:
    """Like parse_duration, but 0 (``0``, ``0m``) is a valid offset and a minus sign is named."""
    raw = text.strip()
    if raw.startswith("-"):
        raise InvalidInput(f"offset {text!r} is negative", "use an offset of 0 or more, e.g. --offset 2m")
    if re.fullmatch(r"(?:0+(?:\.0*)?[dhms]?)+", raw.lower()):
        return timedelta(0)
    return parse_duration(raw, what="offset")


def _format_offset(delta: timedelta) -> str:
    if delta < timedelta(0):
        return "-" + format_duration(-delta)
    return format_duration(delta)


def describe(rule: Rule) -> str:
    """``cron '0 20 * * *'`` or ``every 25m offset 2m``, for lists and logs."""
    if isinstance(rule, CronRule):
        return f"cron '{rule.expr}'"
    if isinstance(rule, EveryRule):
        text = f"every {format_duration(rule.interval)}"
        return f"{text} offset {format_duration(rule.offset)}" if rule.offset else text
    raise TypeError(f"not a schedule rule: {rule!r}")


# ------------------------------------------------------------------------- cron validation


class _Cron:
    """What the day-by-day engine needs from one validated expression (read-only by
    convention; a plain class because each dataclass costs a millisecond at import).
    """

    __slots__ = ("expr", "minutes", "clock_hours", "every_day")

    def __init__(self, expr: str, minutes: tuple[int, ...], clock_hours: bool, every_day: bool) -> None:
        self.expr = expr
        self.minutes = minutes  # the minutes of the day (hour*60 + minute) it fires, sorted
        self.clock_hours = clock_hours  # the hour field names hours (DST policy: fire once)
        self.every_day = every_day  # day-of-month, month and day-of-week are all wildcards


def validate_cron(expr: str) -> None:
    """Check a user's cron expression: five fields, valid, and firing at least once in 10 years.

    Raises:
        InvalidInput: it names what is wrong and what to write instead.
    """
    _compile(expr)


@lru_cache(maxsize=256)
def _compile(expr: str) -> _Cron:
    from croniter import CroniterError, croniter

    if not isinstance(expr, str):
        raise InvalidInput(f"cron expression {expr!r} is not text", _FIVE_FIELDS_HINT)
    text = " ".join(expr.split())
    if not text:
        raise InvalidInput("empty cron expression", _FIVE_FIELDS_HINT)
    if text.startswith("@"):
        five = _MACROS.get(text.lower())
        if five is None:
            raise InvalidInput(f"cron expression {expr!r} is not a time", _FIVE_FIELDS_HINT)
        raise InvalidInput(f"cron shorthand {expr!r} is not supported", f"write the five fields instead: '{five}'")
    fields = text.split(" ")
    if len(fields) == 6:
        raise InvalidInput(
            f"cron expression {expr!r} has 6 fields: onite takes no seconds or year field",
            _FIVE_FIELDS_HINT,
        )
    if len(fields) != 5:
        count = f"{len(fields)} field" + ("" if len(fields) == 1 else "s")
        raise InvalidInput(f"cron expression {expr!r} has {count}, not 5", _FIVE_FIELDS_HINT)
    if re.search(_RANDOM, text, re.IGNORECASE):
        raise InvalidInput(
            f"cron expression {expr!r} uses R (a random value)",
            "write the exact minutes and hours, so that fire times are predictable",
        )
    if not _is_valid(croniter, text):
        for i, field in enumerate(fields):
            alone = " ".join(field if j == i else "*" for j in range(5))
            if not _is_valid(croniter, alone):
                raise InvalidInput(
                    f"bad cron expression {expr!r}: {field!r} is not a valid {_FIELDS[i]} field",
                    f"the {_FIELDS[i]} field takes {_FIELD_RANGES[i]}, lists (1,5), ranges (1-5) and steps (*/2)",
                )
        raise InvalidInput(
            f"cron expression {expr!r} never fires: day {fields[2]!r} does not occur in month {fields[3]!r}",
            "pick a day that every chosen month has, or L for the month's last day",
        )
    try:
        probe = croniter(text, _PROBE_FROM, max_years_between_matches=MAX_YEARS_BETWEEN_FIRES)
        probe.get_next(datetime)
    except CroniterError:
        raise InvalidInput(
            f"cron expression {expr!r} fires less than once in {MAX_YEARS_BETWEEN_FIRES} years",
            "check its day-of-month, month and day-of-week fields",
        ) from None
    minute_field, hour_field = probe.expanded[0], probe.expanded[1]
    minutes = range(60) if minute_field == ["*"] else minute_field
    hours = range(24) if hour_field == ["*"] else hour_field
    return _Cron(
        expr=text,
        minutes=tuple(sorted({h * 60 + m for h in hours for m in minutes})),
        clock_hours=not fields[1].startswith(("*", "?")),
        every_day=(
            all(f == ["*"] for f in probe.expanded[2:5])
            and not probe.nth_weekday_of_month
            and not getattr(probe, "nearest_weekday", None)
        ),
    )


def _is_valid(croniter: type, text: str) -> bool:
    try:
        return croniter.is_valid(text, strict=True)
    except TypeError:
        # Older croniter has no `strict`. The probe in _compile still refuses dates that
        # never occur (30 February), with a less precise message.
        return croniter.is_valid(text)


def _matching_day(cron: _Cron, day: date, *, backward: bool = False) -> date | None:
    """The first date on or after ``day`` (on or before, if backward) that the expression
    matches, or None if there is none within MAX_YEARS_BETWEEN_FIRES.
    """
    if cron.every_day:
        return day
    from croniter import CroniterBadDateError, croniter

    # The clock-time part of an expression does not depend on the date, so "does it
    # match on this date" is a question about dates only. Ask it in UTC (see module doc).
    if backward:
        start = datetime.combine(day + _DAY, time(), timezone.utc)
    else:
        start = datetime.combine(day, time(), timezone.utc) - _MINUTE
    found = croniter(cron.expr, start, max_years_between_matches=MAX_YEARS_BETWEEN_FIRES)
    try:
        hit = found.get_prev(datetime) if backward else found.get_next(datetime)
    except CroniterBadDateError:
        return None
    return hit.date()


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
            # Naive timestamp() reads the wall clock in the machine's zone and follows PEP 495
            # for fold. Naive astimezone() does not: it swaps the folds in a gap (CPython 3.11).
            return datetime.fromtimestamp(wall.replace(fold=fold).timestamp(), timezone.utc)
        return wall.replace(tzinfo=self.tz, fold=fold).astimezone(timezone.utc)

    def present(self, at: datetime) -> datetime:
        """``at`` in this zone, the way callers passed their own times."""
        return at.astimezone(self.tz)


def _zone_of(at: datetime, name: str) -> _Zone:
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
    """The instant a clock-time rule fires for ``wall``. For a time that happens twice,
    that is the first occurrence. For a time that does not exist, it is the first instant
    after the jump (cronie).
    """
    first = zone.instant(wall, 0)
    if zone.wall(first) == wall:
        return first
    # In a gap, fold=1 maps before the jump and fold=0 after it (PEP 495). The jump
    # lies between the two: find the first second whose wall clock is past `wall`.
    lo, hi = zone.instant(wall, 1), first
    while hi - lo > timedelta(seconds=1):
        mid = lo + timedelta(seconds=(hi - lo) // timedelta(seconds=1) // 2)
        if zone.wall(mid) > wall:
            hi = mid
        else:
            lo = mid
    return hi


def _midnight(day: date, zone: _Zone) -> datetime:
    """The instant the local date ``day`` begins (first occurrence; after the jump if
    00:00 does not exist).
    """
    return _clock_instant(datetime.combine(day, time()), zone)


# ---------------------------------------------------------------------------- the engine


def _day_fires(rule: Rule, cron: _Cron | None, day: date, zone: _Zone) -> list[datetime]:
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


def _compiled(rule: Rule) -> _Cron | None:
    if isinstance(rule, CronRule):
        return _compile(rule.expr)
    if isinstance(rule, EveryRule):
        return None
    raise TypeError(f"not a schedule rule: {rule!r}")


def _fires_after(rule: Rule, after: datetime, name: str = "after") -> Iterator[datetime]:
    """Fire times strictly after ``after``, in increasing order, in ``after``'s zone, all before
    timeparse.LATEST (the times onite takes end there).

    Raises:
        InvalidInput: a cron rule stops firing (a gap longer than MAX_YEARS_BETWEEN_FIRES), or the
            next fire time would be at or after LATEST.
    """
    zone = _zone_of(after, name)
    cron = _compiled(rule)
    last = after.astimezone(timezone.utc)
    day = zone.wall(after).date()
    while True:
        if day.year >= LATEST.year - 1 or (cron is not None and day.year >= LATEST.year - MAX_YEARS_BETWEEN_FIRES):
            _past_latest(rule, last)
        if cron is not None:
            matching = _matching_day(cron, day)
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
    return next(_fires_after(rule, after))


def fire_times(rule: Rule, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times strictly after ``start`` (aware), for previews.

    Raises:
        ValueError: ``start`` is naive or ``count`` is negative.
        InvalidInput: a cron rule does not fire within MAX_YEARS_BETWEEN_FIRES years.
    """
    if count < 0:
        raise ValueError(f"count must be 0 or more, not {count}")
    fires = _fires_after(rule, start, "start")
    return [next(fires) for _ in range(count)]


def next_drain(schedule: Sequence[str], after: datetime) -> datetime | None:
    """The earliest next fire over the drain schedule's cron expressions; None if it is empty.

    Raises:
        ValueError: ``after`` is naive.
        InvalidInput: an expression is not valid.
    """
    _zone_of(after, "after")
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
    zone = _zone_of(at_or_before, "at_or_before")
    _zone_of(since, "since")
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
            matching = _matching_day(cron, day, backward=True)
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


def crontab_entries(spool_root: object, schedule: Sequence[str], command: str) -> list[str]:
    """The crontab entries (no comments) that start ``onite run`` at each time of ``schedule``.

    Each says ``ONITE_STARTED_BY=cron``, so that the driver records who started it (onite.drain.heartbeat).

    Raises:
        InvalidInput: an expression in the schedule is not valid cron.
    """
    import shlex

    _schedule(schedule)
    # --quiet: cron would mail every night's log lines; onite.log keeps them, and failures notify
    return [f"{' '.join(expr.split())} ONITE_STARTED_BY=cron {command} run --quiet --spool {shlex.quote(str(spool_root))}"
            for expr in schedule]


def crontab_lines(spool_root: object, schedule: Sequence[str], command: str) -> str:
    """Root crontab lines that start ``onite run`` at each time of ``schedule``.

    Raises:
        InvalidInput: an expression in the schedule is not valid cron.
    """
    entries = crontab_entries(spool_root, schedule, command)
    lines = [
        f"# onite: drain the spool {spool_root} at the times of `schedule` in its onite.toml",
        "# install them with: onite cron --install (it keeps root's other entries, and tells users a drain is scheduled)",
    ]
    return "\n".join(lines + entries) + "\n"
