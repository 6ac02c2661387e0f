"""Schedule rules, checked when built: a cron expression, or ``EveryRule(interval, offset)``, firing at local
midnight + offset + k*interval up to the next midnight. croniter is asked only which dates match, in UTC.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache

from onite.core.errors import InvalidInput
from onite.core.record import Record
from onite.core.safetext import quoted
from onite.core.timeparse import format_duration, parse_duration

_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)

MAX_YEARS_BETWEEN_FIRES = 10  # croniter's 50 is a long search; 29 February's longest gap is 8 years (2100)
MAX_CRON_LENGTH = 512  # croniter's cost grows with the length; five fields listing every value fit in 400

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
_RANDOM = r"(?<![a-z])r(?![a-z])"  # croniter's R, a random value: fire times must be the same every time
_PLAIN_FIELD = re.compile(r"\*|(?:0|[1-9][0-9]?)(?:,(?:0|[1-9][0-9]?))*")  # *, 5 or 0,30
_PROBE_FROM = datetime(2000, 1, 1, tzinfo=timezone.utc)  # a fixed start keeps validation deterministic


def _shown(text: str) -> str:
    """What a user typed or wrote, quoted whole."""
    return quoted(text, 2 * MAX_CRON_LENGTH)


class Cron(Record):
    """What the day-by-day engine needs from one validated expression."""

    expr: str
    minutes: tuple[int, ...]  # the minutes of the day (hour*60 + minute) it fires, sorted
    clock_hours: bool  # the hour field names hours (DST policy: fire once)
    every_day: bool  # day-of-month, month and day-of-week are all wildcards


@lru_cache(maxsize=256)
def compile_cron(expr: str) -> Cron:
    """A user's cron expression, checked: five valid fields, at most MAX_CRON_LENGTH characters, firing at least
    once in MAX_YEARS_BETWEEN_FIRES. Raises InvalidInput: what is wrong and what to write instead."""
    text, fields = _five_fields(expr)
    daily = _daily(text, fields)
    if daily is not None:
        return daily
    from croniter import CroniterError, croniter

    if not croniter.is_valid(text, strict=True):
        for i, field in enumerate(fields):
            if not croniter.is_valid(" ".join(field if j == i else "*" for j in range(5)), strict=True):
                raise InvalidInput(
                    f"bad cron expression {_shown(expr)}: {_shown(field)} is not a valid {_FIELDS[i]} field",
                    f"the {_FIELDS[i]} field takes {_FIELD_RANGES[i]}, lists (1,5), ranges (1-5) and steps (*/2)",
                )
        raise InvalidInput(
            f"cron expression {_shown(expr)} never fires: day {_shown(fields[2])} does not occur in month "
            f"{_shown(fields[3])}",
            "pick a day that every chosen month has, or L for the month's last day",
        )
    try:
        probe = croniter(text, _PROBE_FROM, max_years_between_matches=MAX_YEARS_BETWEEN_FIRES)
        probe.get_next(datetime)
    except CroniterError:
        raise InvalidInput(f"cron expression {_shown(expr)} fires less than once in {MAX_YEARS_BETWEEN_FIRES} "
                           "years",
                           "check its day-of-month, month and day-of-week fields") from None
    minute_field, hour_field = probe.expanded[0], probe.expanded[1]
    # "*,5": croniter keeps the "*" in the list it expands
    minutes = range(60) if "*" in minute_field else minute_field
    hours = range(24) if "*" in hour_field else hour_field
    return Cron(
        expr=text,
        minutes=tuple(sorted({h * 60 + m for h in hours for m in minutes})),
        clock_hours=not fields[1].startswith(("*", "?")),
        every_day=(all(f == ["*"] for f in probe.expanded[2:5]) and not probe.nth_weekday_of_month
                   and not probe.nearest_weekday),
    )


def _five_fields(expr: str) -> tuple[str, list[str]]:
    """``expr`` with its spacing normalised, and its five fields. Raises InvalidInput."""
    text = " ".join(expr.split())
    if not text:
        raise InvalidInput("empty cron expression", _FIVE_FIELDS_HINT)
    if len(text) > MAX_CRON_LENGTH:
        raise InvalidInput(f"cron expression {quoted(text)} is {len(text)} characters long",
                           f"write it in at most {MAX_CRON_LENGTH}, with ranges (1-5) and steps (*/2)")
    if text.startswith("@"):
        five = _MACROS.get(text.lower())
        if five is None:
            raise InvalidInput(f"cron expression {_shown(expr)} is not a time", _FIVE_FIELDS_HINT)
        raise InvalidInput(f"cron shorthand {_shown(expr)} is not supported",
                           f"write the five fields instead: '{five}'")
    fields = text.split(" ")
    if len(fields) == 6:
        raise InvalidInput(f"cron expression {_shown(expr)} has 6 fields: onite takes no seconds or year field",
                           _FIVE_FIELDS_HINT)
    if len(fields) != 5:
        count = f"{len(fields)} field" + ("" if len(fields) == 1 else "s")
        raise InvalidInput(f"cron expression {_shown(expr)} has {count}, not 5", _FIVE_FIELDS_HINT)
    if "r" in text.lower() and re.search(_RANDOM, text, re.IGNORECASE):  # the regex compiled only where it may match
        raise InvalidInput(f"cron expression {_shown(expr)} uses R (a random value)",
                           "write the exact minutes and hours, so that fire times are predictable")
    return text, fields


def _daily(text: str, fields: list[str]) -> Cron | None:
    """Plain minutes and hours every day (``0 20 * * *``) compiled without importing croniter (a fifth of
    ``onite status``); None: any other expression."""
    if fields[2:] != ["*", "*", "*"] or not all(_PLAIN_FIELD.fullmatch(field) for field in fields[:2]):
        return None
    minutes, hours = ({int(v) for v in field.split(",")} if field != "*" else set(range(size))
                      for field, size in zip(fields, (60, 24)))
    if max(minutes) > 59 or max(hours) > 23:
        return None  # croniter says what is wrong
    return Cron(expr=text, minutes=tuple(sorted({h * 60 + m for h in hours for m in minutes})),
                clock_hours=fields[1] != "*", every_day=True)


def matching_day(cron: Cron, day: date, *, backward: bool = False) -> date | None:
    """The first date from ``day`` on (back, if backward) that ``cron`` matches; None within the years' limit."""
    if cron.every_day:
        return day
    from croniter import CroniterBadDateError, croniter

    # which dates match does not depend on the time of day: ask in UTC
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


class CronRule(Record):
    """A five-field cron expression, validated and its spacing normalised. Raises InvalidInput."""

    expr: str

    def __new__(cls, expr: str) -> CronRule:
        return super().__new__(cls, compile_cron(expr).expr)


class EveryRule(Record):
    """Every ``interval`` from local midnight + ``offset``.
    Raises InvalidInput: interval not within 1m..1d, or offset negative or not shorter than the interval."""

    interval: timedelta
    offset: timedelta = timedelta(0)

    def __new__(cls, interval: timedelta, offset: timedelta = timedelta(0)) -> EveryRule:
        every = format_duration(interval)
        shift = ("-" if offset < timedelta(0) else "") + format_duration(abs(offset))
        if interval < _MINUTE:
            raise InvalidInput(f"interval {every} is too short: recurring jobs run at most once a minute",
                               "use --every 1m or longer")
        if interval > _DAY:
            raise InvalidInput(
                f"interval {every} is longer than a day: the count restarts at every local midnight",
                "use --every 1d or shorter, or --cron for weekly or monthly jobs (e.g. --cron '0 3 * * 1')",
            )
        if offset < timedelta(0):
            raise InvalidInput(f"offset {shift} is negative", f"use an offset from 0 up to less than {every}")
        if offset >= interval:
            raise InvalidInput(f"offset {shift} is not shorter than the interval {every}",
                               f"use an offset from 0 up to less than {every}")
        if offset + interval > _DAY:
            raise InvalidInput(f"--every {every} --offset {shift} never fires: its first run would come after "
                               "midnight", "make offset + interval at most 1d")
        return super().__new__(cls, interval, offset)


Rule = CronRule | EveryRule


def parse_rule(*, cron: str | None = None, every: str | None = None, offset: str | None = None) -> Rule:
    """The rule of ``--cron EXPR`` or ``--every DURATION [--offset DURATION]``.
    Raises InvalidInput: neither or both, offset without every, or a bad value."""
    if cron is not None and every is not None:
        raise InvalidInput(f"both --cron {_shown(cron)} and --every {_shown(every)} given",
                           "give one of them: --cron '0 20 * * *' or --every 25m [--offset 2m]")
    if cron is not None:
        if offset is not None:
            raise InvalidInput(f"--offset {_shown(offset)} goes with --every, not with --cron {_shown(cron)}",
                               "put the offset into the cron expression's minute field, e.g. '2-59/25 * * * *'")
        return CronRule(cron)
    if every is not None:
        interval = parse_duration(every, what="--every")
        return EveryRule(interval, _parse_offset(offset) if offset is not None else timedelta(0))
    if offset is not None:
        raise InvalidInput(f"--offset {_shown(offset)} needs --every", "write e.g. --every 25m --offset 2m")
    raise InvalidInput("a recurring job needs a rule", "give --cron '0 20 * * *' or --every 25m [--offset 2m]")


def _parse_offset(text: str) -> timedelta:
    """Like parse_duration, but 0 (``0``, ``0m``) is a valid offset and a minus sign is named."""
    raw = text.strip()
    if raw.startswith("-"):
        raise InvalidInput(f"offset {_shown(text)} is negative", "use an offset of 0 or more, e.g. --offset 2m")
    if re.fullmatch(r"(?:0+(?:\.0*)?[dhms]?)+", raw.lower()):
        return timedelta(0)
    return parse_duration(raw, what="--offset")


def describe(rule: Rule) -> str:
    """``cron '0 20 * * *'`` or ``every 25m offset 2m``, for lists and logs."""
    if isinstance(rule, CronRule):
        return f"cron '{rule.expr}'"
    text = f"every {format_duration(rule.interval)}"
    return f"{text} offset {format_duration(rule.offset)}" if rule.offset else text
