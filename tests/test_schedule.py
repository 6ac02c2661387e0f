"""onite.core.schedule: exact fire times (pure: no files, no processes, no sleeping)."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from onite.core.errors import InvalidInput
from onite.core.rules import CronRule, EveryRule, compile_cron, describe, parse_rule
from onite.core.schedule import (
    fire_times,
    last_fire,
    next_drain,
    next_fire,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")
DEFAULT_SCHEDULE = ["0 20 * * *", "0 23 * * *"]
# A Monday in winter: no clock change anywhere near it.
MONDAY = datetime(2026, 1, 5, tzinfo=BERLIN)


def hhmm(times: list[datetime]) -> list[str]:
    return [t.strftime("%H:%M") for t in times]


def iso(times: list[datetime]) -> list[str]:
    # isoformat carries the UTC offset, so the two passes of a repeated hour differ
    # (datetimes in the same zone compare equal across folds, PEP 495).
    return [t.isoformat(timespec="minutes") for t in times]


def assert_strictly_increasing(times: list[datetime]) -> None:
    instants = [t.astimezone(timezone.utc) for t in times]
    assert all(a < b for a, b in zip(instants, instants[1:])), iso(times)


def at(text: str, zone=BERLIN, fold: int = 0) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone, fold=fold)


# ------------------------------------------------------------------ seed 002: five jobs


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        pytest.param(parse_rule(cron="17 * * * *"), ["00:17", "01:17", "02:17"], id="job1-hourly-at-17"),
        pytest.param(parse_rule(every="4m"), ["00:04", "00:08", "00:12", "00:16"], id="job2-every-4m"),
        pytest.param(parse_rule(every="6m", offset="1m"), ["00:07", "00:13", "00:19"], id="job3-every-6m-offset-1m"),
        pytest.param(
            parse_rule(every="25m", offset="2m"), ["00:27", "00:52", "01:17", "01:42"], id="job4-every-25m-offset-2m"
        ),
        # The seed says 5:40; every 100 minutes gives 05:00.
        pytest.param(parse_rule(every="100m"), ["01:40", "03:20", "05:00"], id="job5-every-100m"),
    ],
)
def test_seed_002_jobs(rule, expected):
    assert hhmm(fire_times(rule, MONDAY, len(expected))) == expected


def test_issue_example_preview():
    # onite submit --from 2026-01-05T00:00 --every 25m --offset 2m
    fires = fire_times(parse_rule(every="25m", offset="2m"), at("2026-01-05T00:00"), 4)
    assert iso(fires) == [
        "2026-01-05T00:27+01:00",
        "2026-01-05T00:52+01:00",
        "2026-01-05T01:17+01:00",
        "2026-01-05T01:42+01:00",
    ]


# ------------------------------------------------------------------ every: day rollover


def test_every_100m_rolls_over_at_midnight():
    fires = fire_times(parse_rule(every="100m"), MONDAY, 15)
    assert fires[:14] == [MONDAY + k * timedelta(minutes=100) for k in range(1, 15)]
    assert fires[13].strftime("%H:%M") == "23:20"
    assert fires[14] == at("2026-01-06T01:40")


def test_every_25m_offset_2m_rolls_over_at_midnight():
    fires = fire_times(parse_rule(every="25m", offset="2m"), MONDAY, 58)
    assert len({t.date() for t in fires[:57]}) == 1
    assert hhmm(fires[55:]) == ["23:22", "23:47", "00:27"]
    assert fires[57] == at("2026-01-06T00:27")


def test_every_4m_fires_midnight_once():
    fires = fire_times(parse_rule(every="4m"), MONDAY, 362)
    assert hhmm(fires[358:]) == ["23:56", "00:00", "00:04", "00:08"]
    assert fires[359] == at("2026-01-06T00:00")
    assert len(set(fires)) == len(fires)
    # 24:00 is k=360 of the old day; the new day's count starts after it.
    assert next_fire(parse_rule(every="4m"), at("2026-01-05T23:58")) == at("2026-01-06T00:00")
    assert next_fire(parse_rule(every="4m"), at("2026-01-06T00:00")) == at("2026-01-06T00:04")


def test_every_times_are_the_same_whatever_the_start():
    rule = parse_rule(every="25m", offset="2m")
    assert hhmm(fire_times(rule, at("2026-01-07T13:00"), 2)) == ["13:22", "13:47"]
    assert hhmm(fire_times(rule, at("2026-07-07T13:00"), 2)) == ["13:22", "13:47"]
    assert hhmm(fire_times(rule, at("2026-01-07T12:57"), 1)) == ["13:22"]  # strictly after


def test_every_1d_fires_at_midnight():
    fires = fire_times(parse_rule(every="1d"), at("2026-01-05T12:00"), 2)
    assert iso(fires) == ["2026-01-06T00:00+01:00", "2026-01-07T00:00+01:00"]


@pytest.mark.parametrize(
    ("day", "hours"),
    [
        pytest.param(date(2026, 3, 29), 23, id="berlin-spring-forward"),
        pytest.param(date(2026, 10, 25), 25, id="berlin-fall-back"),
        pytest.param(date(2026, 1, 5), 24, id="berlin-winter"),
    ],
)
def test_every_counts_real_time_on_dst_days(day, hours):
    start = datetime.combine(day, datetime.min.time(), BERLIN)
    fires = fire_times(parse_rule(every="4m"), start, hours * 15 + 1)
    assert_strictly_increasing(fires)
    instants = [t.astimezone(timezone.utc) for t in fires]
    assert {b - a for a, b in zip(instants, instants[1:hours * 15])} == {timedelta(minutes=4)}
    # The day's last fire is the next local midnight; then the count restarts.
    assert fires[hours * 15 - 1] == datetime.combine(day + timedelta(days=1), datetime.min.time(), BERLIN)
    assert fires[hours * 15].strftime("%H:%M") == "00:04"


def test_every_100m_keeps_its_clock_times_across_spring_forward():
    fires = fire_times(parse_rule(every="100m"), at("2026-03-29T00:00"), 15)
    # an interval of over an hour names clock times, the same every day: 03:20 comes an hour after 01:40
    assert iso(fires[:3]) == ["2026-03-29T01:40+01:00", "2026-03-29T03:20+02:00", "2026-03-29T05:00+02:00"]
    assert iso(fires[13:]) == ["2026-03-29T23:20+02:00", "2026-03-30T01:40+02:00"]


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK, LONDON])
@pytest.mark.parametrize(("every", "times"), [("1d", ["00:00"]), ("12h", ["00:00", "12:00"]),
                                              ("8h", ["00:00", "08:00", "16:00"]), ("23h", ["23:00"])])
def test_every_of_hours_fires_at_the_same_clock_times_every_day_of_the_year(zone, every, times):
    fires = fire_times(parse_rule(every=every), datetime(2026, 1, 1, tzinfo=zone), 365 * len(times))
    assert_strictly_increasing(fires)
    assert [t.strftime("%H:%M") for t in fires] == times[1:] + times * 364 + times[:1]
    days = [t.date() for t in fires if t.strftime("%H:%M") == times[-1]]
    assert {b - a for a, b in zip(days, days[1:])} == {timedelta(days=1)}  # no day left out


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK, LONDON])
def test_every_hour_fires_once_per_real_hour_all_year(zone):
    fires = fire_times(parse_rule(every="1h"), datetime(2026, 1, 1, tzinfo=zone), 365 * 24)
    instants = [t.astimezone(timezone.utc) for t in fires]
    assert {b - a for a, b in zip(instants, instants[1:])} == {timedelta(hours=1)}


def test_every_is_strictly_increasing_for_a_year_in_both_zones():
    for zone in (BERLIN, NEW_YORK):
        for rule in (parse_rule(every="25m", offset="2m"), parse_rule(every="100m"), parse_rule(every="7h")):
            fires = fire_times(rule, datetime(2026, 1, 1, tzinfo=zone), 3000)
            assert_strictly_increasing(fires)


# ------------------------------------------------------------------ every: validation


@pytest.mark.parametrize(
    ("every", "offset", "message"),
    [
        ("30s", None, r"interval 30s is too short: recurring jobs run at most once a minute"),
        ("2d", None, r"interval 2d is longer than a day"),
        ("25h", None, r"interval 1d1h is longer than a day"),
        ("25m", "25m", r"offset 25m is not shorter than the interval 25m"),
        ("25m", "1h", r"offset 1h is not shorter than the interval 25m"),
        ("25m", "-2m", r"offset '-2m' is negative"),
        ("20h", "5h", r"--every 20h --offset 5h never fires"),
        ("abc", None, r"--every 'abc': expected a duration such as"),
        ("0", None, r"--every '0': expected a duration longer than zero"),
        ("25m", "soon", r"--offset 'soon': expected a duration such as"),
    ],
)
def test_every_validation_messages(every, offset, message):
    with pytest.raises(InvalidInput, match=message) as caught:
        parse_rule(every=every, offset=offset)
    assert caught.value.exit_code == 2
    assert "\n" not in str(caught.value) and (caught.value.hint or ": expected " in caught.value.what)


def test_every_rule_validates_when_built_directly():
    with pytest.raises(InvalidInput, match=r"offset -1m is negative"):
        EveryRule(timedelta(minutes=25), timedelta(minutes=-1))
    with pytest.raises(InvalidInput, match=r"too short"):
        EveryRule(timedelta(seconds=59))


@pytest.mark.parametrize("zero", ["0", "0m", "0s", "0h0m"])
def test_offset_zero_is_allowed(zero):
    assert parse_rule(every="25m", offset=zero) == EveryRule(timedelta(minutes=25))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"a recurring job needs a rule — give --cron"),
        ({"cron": "0 20 * * *", "every": "25m"}, r"both --cron '0 20 \* \* \*' and --every '25m' given"),
        ({"cron": "0 20 * * *", "offset": "2m"}, r"--offset '2m' goes with --every"),
        ({"offset": "2m"}, r"--offset '2m' needs --every"),
    ],
)
def test_parse_rule_needs_exactly_one_rule(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        parse_rule(**kwargs)


def test_rules_are_frozen_and_normalised():
    rule = parse_rule(cron="  0   20 * *  * ")
    assert rule == CronRule("0 20 * * *")
    with pytest.raises(AttributeError):
        rule.expr = "0 21 * * *"  # type: ignore[misc]


def test_describe():
    assert describe(CronRule("0 20 * * *")) == "cron '0 20 * * *'"
    assert describe(parse_rule(every="25m", offset="2m")) == "every 25m offset 2m"
    assert describe(parse_rule(every="4m")) == "every 4m"
    assert describe(parse_rule(every="100m")) == "every 1h40m"


# ------------------------------------------------------------------ cron validation


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 20 * *", r"cron expression '0 20 \* \*' has 4 fields, not 5 — write five fields"),
        ("0 0 20 * * *", r"has 6 fields: onite takes no seconds or year field"),
        ("* * * * * *", r"has 6 fields"),
        ("garbage", r"cron expression 'garbage' has 1 field, not 5"),
        ("a b c d e", r"bad cron expression 'a b c d e': 'a' is not a valid minute field"),
        ("61 0 * * *", r"'61' is not a valid minute field — the minute field takes 0-59"),
        ("0 24 * * *", r"'24' is not a valid hour field — the hour field takes 0-23"),
        ("0 0 * * 8", r"'8' is not a valid day-of-week field"),
        ("0 0 30 2 *", r"cron expression '0 0 30 2 \*' never fires: day '30' does not occur in month '2'"),
        ("0 0 31 4,6 *", r"never fires"),
        ("0 0 * 2 1#5", r"fires less than once in 10 years"),
        ("@daily", r"cron shorthand '@daily' is not supported — write the five fields instead: '0 0 \* \* \*'"),
        ("@reboot", r"cron expression '@reboot' is not a time"),
        ("R 2 * * *", r"uses R \(a random value\)"),
        ("H 2 * * *", r"'H' is not a valid minute field"),
        ("", r"empty cron expression"),
        ("   ", r"empty cron expression"),
    ],
)
def test_cron_validation_messages(expr, message):
    with pytest.raises(InvalidInput, match=message) as caught:
        compile_cron(expr)
    assert caught.value.exit_code == 2
    assert "\n" not in str(caught.value)
    with pytest.raises(InvalidInput):
        CronRule(expr)


@pytest.mark.parametrize(
    "expr",
    ["0 20 * * *", "0 3 L * *", "0 20-23/2 * * 1-5", "0 20 * * MON-FRI", "0 20 * * mon,wed", "0 0 29 2 *",
     "*/15 2 * * *", "0 0 1W * *", "0 0 * * 7", "0 0 13 * 5", "30 2 * * THU"],
)
def test_valid_cron_expressions(expr):
    compile_cron(expr)


# ------------------------------------------------------------------ cron: calendar edge cases


def test_cron_last_day_of_month():
    fires = fire_times(CronRule("0 3 L * *"), MONDAY, 4)
    assert iso(fires) == [
        "2026-01-31T03:00+01:00",
        "2026-02-28T03:00+01:00",
        "2026-03-31T03:00+02:00",
        "2026-04-30T03:00+02:00",
    ]
    assert next_fire(CronRule("0 3 L * *"), at("2028-02-01T00:00")) == at("2028-02-29T03:00")


def test_cron_ranges_and_steps_on_weekdays():
    friday_noon = at("2026-01-09T12:00")
    fires = fire_times(CronRule("0 20-23/2 * * 1-5"), friday_noon, 4)
    assert iso(fires) == [
        "2026-01-09T20:00+01:00",
        "2026-01-09T22:00+01:00",
        "2026-01-12T20:00+01:00",  # Monday: the weekend is skipped
        "2026-01-12T22:00+01:00",
    ]


@pytest.mark.parametrize(
    ("names", "numbers"),
    [("0 20 * * MON-FRI", "0 20 * * 1-5"), ("0 20 * * mon,wed", "0 20 * * 1,3"), ("0 9 * jan,jul sun", "0 9 * 1,7 0")],
)
def test_cron_day_and_month_names(names, numbers):
    assert fire_times(CronRule(names), MONDAY, 12) == fire_times(CronRule(numbers), MONDAY, 12)


def test_cron_day_of_month_or_day_of_week():
    # Like cron: with both fields restricted, either one matching is enough.
    fires = fire_times(CronRule("0 0 13 * 5"), at("2026-01-31T12:00"), 3)
    assert [t.date() for t in fires] == [date(2026, 2, 6), date(2026, 2, 13), date(2026, 2, 20)]


def test_cron_29_february_across_2100():
    # The longest gap a sensible expression has (8 years) is within the search bound.
    assert next_fire(CronRule("0 0 29 2 *"), at("2026-01-05T00:00")) == at("2028-02-29T00:00")
    assert next_fire(CronRule("0 0 29 2 *"), at("2096-03-01T00:00")) == at("2104-02-29T00:00")


def test_cron_strictly_after():
    rule = CronRule("0 20 * * *")
    assert next_fire(rule, at("2026-01-05T20:00")) == at("2026-01-06T20:00")
    assert next_fire(rule, at("2026-01-05T19:59:59")) == at("2026-01-05T20:00")


# ------------------------------------------------------------------ cron: DST


@pytest.mark.parametrize(
    ("zone", "expr", "start", "expected"),
    [
        # Spring forward, Europe/Berlin 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not
        # exist, so it fires once, right after the jump.
        pytest.param(BERLIN, "30 2 * * *", "2026-03-28T12:00",
                     ["2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00"], id="berlin-spring-0230"),
        pytest.param(BERLIN, "*/15 2 * * *", "2026-03-28T12:00",
                     ["2026-03-29T03:00+02:00", "2026-03-30T02:00+02:00"], id="berlin-spring-0200-0245-once"),
        pytest.param(BERLIN, "0,30 2,3 * * *", "2026-03-29T00:00",
                     ["2026-03-29T03:00+02:00", "2026-03-29T03:30+02:00", "2026-03-30T02:00+02:00"],
                     id="berlin-spring-no-duplicate-at-0300"),
        pytest.param(BERLIN, "30 1 * * *", "2026-03-28T12:00",
                     ["2026-03-29T01:30+01:00", "2026-03-30T01:30+02:00"], id="berlin-spring-before-gap"),
        # Fall back, Europe/Berlin 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice,
        # and fires at the first only.
        pytest.param(BERLIN, "30 2 * * *", "2026-10-24T12:00",
                     ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"], id="berlin-fall-0230"),
        pytest.param(BERLIN, "*/30 2 * * *", "2026-10-24T12:00",
                     ["2026-10-25T02:00+02:00", "2026-10-25T02:30+02:00", "2026-10-26T02:00+01:00"],
                     id="berlin-fall-first-pass-only"),
        # America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
        pytest.param(NEW_YORK, "30 2 * * *", "2026-03-07T12:00",
                     ["2026-03-08T03:00-04:00", "2026-03-09T02:30-04:00"], id="newyork-spring-0230"),
        pytest.param(NEW_YORK, "30 1 * * *", "2026-10-31T12:00",
                     ["2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00"], id="newyork-fall-0130"),
        pytest.param(NEW_YORK, "30 2 * * *", "2026-10-31T12:00",
                     ["2026-11-01T02:30-05:00", "2026-11-02T02:30-05:00"], id="newyork-fall-0230-not-repeated"),
        # Periodic rules (hour field '*') count real hours: both passes of a repeated hour
        # fire, and a skipped hour loses no real time.
        pytest.param(BERLIN, "30 * * * *", "2026-10-25T01:00",
                     ["2026-10-25T01:30+02:00", "2026-10-25T02:30+02:00", "2026-10-25T02:30+01:00",
                      "2026-10-25T03:30+01:00"], id="berlin-fall-hourly-both-passes"),
        pytest.param(BERLIN, "30 * * * *", "2026-03-29T01:00",
                     ["2026-03-29T01:30+01:00", "2026-03-29T03:30+02:00"], id="berlin-spring-hourly"),
        pytest.param(NEW_YORK, "0 */1 * * *", "2026-11-01T00:30",
                     ["2026-11-01T01:00-04:00", "2026-11-01T01:00-05:00", "2026-11-01T02:00-05:00"],
                     id="newyork-fall-hourly-both-passes"),
    ],
)
def test_cron_dst(zone, expr, start, expected):
    fires = fire_times(CronRule(expr), at(start, zone), len(expected))
    assert iso(fires) == expected
    assert_strictly_increasing(fires)


@pytest.mark.parametrize(
    ("zone", "expr", "wall", "fold", "expected"),
    [
        # `after` in the first pass of the repeated hour: 02:30 is still to come tonight.
        pytest.param(BERLIN, "30 2 * * *", "2026-10-25T02:15", 0, "2026-10-25T02:30+02:00", id="berlin-first-pass"),
        # `after` in the second pass: tonight's 02:30 fired in the first pass, so the
        # next fire is tomorrow's, not a second 02:30 tonight.
        pytest.param(BERLIN, "30 2 * * *", "2026-10-25T02:15", 1, "2026-10-26T02:30+01:00", id="berlin-second-pass"),
        pytest.param(BERLIN, "45 2 * * *", "2026-10-25T02:50", 0, "2026-10-26T02:45+01:00", id="berlin-fired-already"),
        pytest.param(NEW_YORK, "30 1 * * *", "2026-11-01T01:15", 0, "2026-11-01T01:30-04:00", id="newyork-first-pass"),
        pytest.param(NEW_YORK, "30 1 * * *", "2026-11-01T01:15", 1, "2026-11-02T01:30-05:00", id="newyork-second-pass"),
        # A periodic rule fires in both passes, whichever pass `after` is in.
        pytest.param(BERLIN, "30 * * * *", "2026-10-25T02:15", 0, "2026-10-25T02:30+02:00", id="hourly-first-pass"),
        pytest.param(BERLIN, "30 * * * *", "2026-10-25T02:15", 1, "2026-10-25T02:30+01:00", id="hourly-second-pass"),
        pytest.param(BERLIN, "30 * * * *", "2026-10-25T02:45", 0, "2026-10-25T02:30+01:00", id="hourly-between"),
    ],
)
def test_cron_dst_fold(zone, expr, wall, fold, expected):
    after = at(wall, zone, fold)
    fire = next_fire(CronRule(expr), after)
    assert iso([fire]) == [expected]
    assert fire.astimezone(timezone.utc) > after.astimezone(timezone.utc)


SANTIAGO = ZoneInfo("America/Santiago")


@pytest.mark.parametrize(
    ("rule", "start", "expected"),
    [
        # Chile moves its clocks at midnight: on 2026-09-06 00:00 does not exist (-> 01:00),
        # and on 2026-04-04 24:00 goes back to 23:00.
        pytest.param(CronRule("0 0 * * *"), "2026-09-05T12:00",
                     ["2026-09-06T01:00-03:00", "2026-09-07T00:00-03:00"], id="midnight-missing"),
        pytest.param(parse_rule(every="4m"), "2026-09-05T23:50",
                     ["2026-09-05T23:52-04:00", "2026-09-05T23:56-04:00", "2026-09-06T01:00-03:00",
                      "2026-09-06T01:04-03:00"], id="every-day-starts-after-the-jump"),
        pytest.param(CronRule("30 23 * * *"), "2026-04-04T12:00",
                     ["2026-04-04T23:30-03:00", "2026-04-05T23:30-04:00"], id="repeated-hour-before-midnight"),
        pytest.param(CronRule("30 * * * *"), "2026-04-04T22:00",
                     ["2026-04-04T22:30-03:00", "2026-04-04T23:30-03:00", "2026-04-04T23:30-04:00",
                      "2026-04-05T00:30-04:00"], id="hourly-repeated-hour-before-midnight"),
    ],
)
def test_dst_change_at_midnight(rule, start, expected):
    fires = fire_times(rule, at(start, SANTIAGO), len(expected))
    assert iso(fires) == expected


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK])
@pytest.mark.parametrize("expr", ["30 2 * * *", "0 2 * * *", "30 1 * * *", "59 1 * * *"])
def test_clock_time_fires_exactly_once_every_night_of_the_year(zone, expr):
    fires = fire_times(CronRule(expr), datetime(2026, 1, 1, tzinfo=zone), 365)
    assert_strictly_increasing(fires)
    assert [t.date() for t in fires] == [date(2026, 1, 1) + timedelta(days=d) for d in range(365)]


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK])
def test_hourly_fires_once_per_real_hour_all_year(zone):
    fires = fire_times(CronRule("17 * * * *"), datetime(2026, 1, 1, tzinfo=zone), 365 * 24)
    instants = [t.astimezone(timezone.utc) for t in fires]
    assert {b - a for a, b in zip(instants, instants[1:])} == {timedelta(hours=1)}


# ------------------------------------------------------------------ zones


def test_machine_zone_from_tz_follows_dst(berlin_tz):
    # datetime.now().astimezone() gives a fixed offset named CET/CEST: it stands for TZ.
    after = datetime(2026, 3, 28, 12, 0).astimezone()
    assert after.tzname() == "CET"
    fires = fire_times(CronRule("30 2 * * *"), after, 2)
    assert iso(fires) == ["2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00"]
    fall = fire_times(CronRule("30 2 * * *"), datetime(2026, 10, 24, 12, 0).astimezone(), 2)
    assert iso(fall) == ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"]
    # Arithmetic keeps the CET offset; the machine's zone still decides the wall clock.
    later = after + timedelta(days=10)
    assert iso([next_fire(CronRule("0 20 * * *"), later)]) == ["2026-04-07T20:00+02:00"]


def test_machine_zone_periodic_rule_both_passes(berlin_tz):
    fires = fire_times(CronRule("30 * * * *"), datetime(2026, 10, 25, 1, 0).astimezone(), 4)
    assert iso(fires) == [
        "2026-10-25T01:30+02:00",
        "2026-10-25T02:30+02:00",
        "2026-10-25T02:30+01:00",
        "2026-10-25T03:30+01:00",
    ]


def test_machine_zone_every_rule(berlin_tz):
    fires = fire_times(parse_rule(every="100m"), datetime(2026, 3, 29, 0, 0).astimezone(), 2)
    assert iso(fires) == ["2026-03-29T01:40+01:00", "2026-03-29T03:20+02:00"]


def test_utc_and_fixed_offsets_are_used_literally(berlin_tz):
    utc = datetime(2026, 3, 28, 12, 0, tzinfo=timezone.utc)
    assert iso(fire_times(CronRule("30 2 * * *"), utc, 2)) == ["2026-03-29T02:30+00:00", "2026-03-30T02:30+00:00"]
    india = timezone(timedelta(hours=5, minutes=30))
    assert iso([next_fire(CronRule("0 20 * * *"), datetime(2026, 1, 5, tzinfo=india))]) == ["2026-01-05T20:00+05:30"]


def test_result_is_in_the_zone_of_after():
    fire = next_fire(CronRule("0 20 * * *"), at("2026-01-05T12:00", NEW_YORK))
    assert fire.tzinfo is NEW_YORK and fire.isoformat() == "2026-01-05T20:00:00-05:00"


@pytest.mark.parametrize(
    "call",
    [
        lambda naive: next_fire(CronRule("0 20 * * *"), naive),
        lambda naive: next_fire(parse_rule(every="25m"), naive),
        lambda naive: fire_times(CronRule("0 20 * * *"), naive, 3),
        lambda naive: next_drain(DEFAULT_SCHEDULE, naive),
        lambda naive: next_drain([], naive),
        lambda naive: last_fire(DEFAULT_SCHEDULE, naive, since=MONDAY),
        lambda naive: last_fire(DEFAULT_SCHEDULE, MONDAY, since=naive),
    ],
)
def test_naive_datetime_is_a_programming_error(call):
    with pytest.raises(ValueError, match="must be an aware datetime"):
        call(datetime(2026, 1, 5, 12, 0))


def test_fire_times_count():
    assert fire_times(CronRule("0 20 * * *"), MONDAY, 0) == []


# ------------------------------------------------------------------ the drain schedule


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2026-01-05T12:00", "2026-01-05T20:00"),
        ("2026-01-05T20:00", "2026-01-05T23:00"),
        ("2026-01-05T21:30", "2026-01-05T23:00"),
        ("2026-01-05T23:00", "2026-01-06T20:00"),
    ],
)
def test_next_drain_default_schedule(after, expected):
    assert next_drain(DEFAULT_SCHEDULE, at(after)) == at(expected)


def test_next_drain_several_expressions():
    schedule = ["0 23 * * 1-5", "30 1 * * 6,0", "0 20 L * *"]
    friday = at("2026-01-30T23:30")  # Friday; 31 January is a Saturday
    assert next_drain(schedule, friday) == at("2026-01-31T01:30")
    assert next_drain(schedule, at("2026-01-31T02:00")) == at("2026-01-31T20:00")
    assert next_drain(schedule, at("2026-01-31T20:00")) == at("2026-02-01T01:30")


def test_next_drain_empty_schedule():
    assert next_drain([], MONDAY) is None


def test_next_drain_refuses_bad_expression():
    with pytest.raises(InvalidInput, match=r"'0 25 \* \* \*': '25' is not a valid hour field"):
        next_drain(["0 20 * * *", "0 25 * * *"], MONDAY)


# ------------------------------------------------------------------ catch-up


def test_catch_up_once_for_several_missed_nights():
    # The driver last ran on Sunday 23:00; the machine was off until Wednesday 08:00.
    # Monday's and Tuesday's 20:00 and 23:00 were missed: catch up once, with the latest.
    missed = last_fire(DEFAULT_SCHEDULE, at("2026-01-07T08:00"), since=at("2026-01-04T23:00"))
    assert missed == at("2026-01-06T23:00")


def test_catch_up_nothing_missed():
    assert last_fire(DEFAULT_SCHEDULE, at("2026-01-07T08:00"), since=at("2026-01-06T23:00")) is None
    assert last_fire(DEFAULT_SCHEDULE, at("2026-01-07T19:59"), since=at("2026-01-06T23:00")) is None


def test_catch_up_window_is_since_exclusive_until_inclusive():
    assert last_fire(DEFAULT_SCHEDULE, at("2026-01-05T23:00"), since=at("2026-01-05T20:00")) == at("2026-01-05T23:00")
    assert last_fire(DEFAULT_SCHEDULE, at("2026-01-05T23:00"), since=at("2026-01-05T23:00")) is None
    assert last_fire(DEFAULT_SCHEDULE, at("2026-01-05T12:00"), since=at("2026-01-06T12:00")) is None


def test_last_fire_of_rules():
    every = parse_rule(every="25m", offset="2m")
    assert last_fire(every, at("2026-01-05T13:00"), since=MONDAY) == at("2026-01-05T12:57")
    assert last_fire(every, at("2026-01-06T00:10"), since=MONDAY) == at("2026-01-05T23:47")
    assert last_fire(parse_rule(every="4m"), at("2026-01-06T00:02"), since=MONDAY) == at("2026-01-06T00:00")
    monthly = CronRule("0 3 L * *")
    assert last_fire(monthly, at("2026-03-15T00:00"), since=at("2026-01-01T00:00")) == at("2026-02-28T03:00")
    assert last_fire(monthly, at("2026-03-15T00:00"), since=at("2026-02-28T03:00")) is None


def test_last_fire_across_dst():
    spring = last_fire(CronRule("30 2 * * *"), at("2026-03-29T12:00"), since=at("2026-03-28T12:00"))
    assert iso([spring]) == ["2026-03-29T03:00+02:00"]
    fall = last_fire(CronRule("30 2 * * *"), at("2026-10-25T12:00"), since=at("2026-10-24T12:00"))
    assert iso([fall]) == ["2026-10-25T02:30+02:00"]
    hourly = last_fire(CronRule("30 * * * *"), at("2026-10-25T02:45", fold=1), since=at("2026-10-24T12:00"))
    assert iso([hourly]) == ["2026-10-25T02:30+01:00"]


def test_last_fire_matches_fire_times():
    # The latest fire at or before each fire time is that fire itself.
    for rule in (CronRule("0 20-23/2 * * 1-5"), parse_rule(every="100m"), CronRule("30 2 * * *")):
        start = datetime(2026, 3, 20, tzinfo=BERLIN)
        fires = fire_times(rule, start, 40)  # across the 2026-03-29 spring forward
        for previous, fire in zip([None, *fires], fires):
            assert last_fire(rule, fire, since=start) == fire
            # One real second earlier (aware arithmetic in a ZoneInfo zone is wall-clock
            # arithmetic, and 03:00 - 1s would land in the spring-forward gap).
            just_before = (fire.astimezone(timezone.utc) - timedelta(seconds=1)).astimezone(BERLIN)
            assert last_fire(rule, just_before, since=start) == previous


@pytest.mark.parametrize("expr", ["0 20 * * *", "0 23 * * *", "* * * * *", "0 * * * *", "* 3 * * *", "5,5 20,0 * * *",
                                  "3,1 2,0 * * *", "59 23 * * *", "60 20 * * *", "0 24 * * *", "00 20 * * *"])
def test_a_plain_daily_expression_compiles_as_croniter_compiles_it(expr, monkeypatch):
    """compile_cron reads plain daily minutes and hours without croniter: the same Cron, or the same error."""
    from onite.core import rules

    def compiled():
        try:
            return rules.compile_cron.__wrapped__(expr)
        except InvalidInput as err:
            return str(err)

    plain = compiled()
    monkeypatch.setattr(rules, "_daily", lambda text, fields: None)
    assert plain == compiled()


@pytest.mark.parametrize("expr, minutes", [("*,5 0 * * *", 60), ("0 *,*/1 * * *", 24), ("0,30 *,3 * * 1", 48)])
def test_a_star_in_a_list_is_every_value(expr, minutes):
    """croniter expands '*,5' to ['*', 5]: compile_cron added '*' to a number (TypeError), so that
    `onite recur add --cron '*,5 0 * * *'` crashed; now it fires every minute (hour) the field allows."""
    assert len(compile_cron(expr).minutes) == minutes
    assert len(fire_times(CronRule(expr), MONDAY, minutes)) == minutes
