"""Recurring jobs: a template is a job file whose extra header keys (RULE_KEYS) hold its rule; each fire spools
an instance named after its local wall time (``NAME-YYYYMMDDTHHMM``), so no fire is spooled twice.
"""

from __future__ import annotations

import re
from contextlib import suppress
from datetime import datetime, timedelta, timezone

from onite.core.config import MAX_PRIORITIES
from onite.core.errors import InvalidInput, JobFormatError
from onite.core.job import Job
from onite.core.names import MAX_NAME, check_name
from onite.core.rules import CronRule, parse_rule
from onite.core.schedule import zone_of
from onite.core.timeparse import format_duration
from onite.core.values import is_whole

RULE_KEYS = ("recur-cron", "recur-every", "recur-offset")
# An instance adds "-YYYYMMDDTHHMM" (14), seconds (2), microseconds (6) and ".2" (2).
MAX_TEMPLATE_NAME = MAX_NAME - 24


def rule_fields(rule) -> tuple[tuple[str, str], ...]:
    """The header lines that store ``rule`` in a template."""
    if isinstance(rule, CronRule):
        return (("recur-cron", rule.expr),)
    fields = (("recur-every", format_duration(rule.interval)),)
    return fields + ((("recur-offset", format_duration(rule.offset)),) if rule.offset else ())


def rule_of(job: Job):
    """The rule a template's header stores. Raises JobFormatError: no template; InvalidInput: a bad rule."""
    fields = {k: v for k, v in job.extra if k in RULE_KEYS}
    if "recur-cron" not in fields and "recur-every" not in fields:
        raise JobFormatError("not a recurring-job template (no recur-cron or recur-every line)",
                             "remove it (onite recur remove NAME), then add it again")
    return _rule(fields)


def _rule(fields: dict):
    return parse_rule(cron=fields.get("recur-cron"), every=fields.get("recur-every"), offset=fields.get("recur-offset"))


def check_template_name(name: str) -> None:
    """Raises InvalidInput: not a job name, or too long to leave room for the instances' suffix."""
    check_name(name, what="recurring job name")
    if len(name) > MAX_TEMPLATE_NAME:
        raise InvalidInput(f"recurring job name {name[:37]!r}... is {len(name)} characters long",
                           f"use at most {MAX_TEMPLATE_NAME}: its instances add the fire time to it")


def instance_name(template: str, fire: datetime) -> str:
    """``NAME-20261122T2000``: the job name of the instance for ``fire`` (local wall time)."""
    wall = fire.replace(tzinfo=None)
    stamp = wall.strftime("%Y%m%dT%H%M")
    if wall.second or wall.microsecond:
        stamp += wall.strftime("%S")
    if wall.microsecond:
        stamp += wall.strftime("%f")
    zone = zone_of(fire)
    if fire.astimezone(timezone.utc) - zone.instant(zone.wall(fire), 0) >= timedelta(seconds=1):
        stamp += ".2"  # the second time its wall clock reads this, in an hour the clocks repeat
    return f"{template}-{stamp}"


_STAMP = re.compile(r"-\d{8}T\d{4}(?:\d{2}(?:\d{6})?)?(?:\.2)?\Z")  # what instance_name adds


def template_of(run: str) -> str | None:
    """The template a run's name (``instance_name``'s) is of, None for a name no instance has."""
    stamp = _STAMP.search(run)
    return run[:stamp.start()] if stamp is not None and stamp.start() else None


def waited_for(runs: list[str], template: str, fire: datetime | None) -> str | None:
    """Which of ``runs`` (the template's runs queued or running) its fire at ``fire`` waits for: the first, of a
    fire up to it (one spooled for a later fire, a clock set ahead since, holds nothing back); None: none."""
    latest = instance_name(template, fire) if fire is not None else None
    return min((run for run in runs if latest is None or run <= latest), default=None)


def instance_job(template: Job, name: str, fire: datetime, now: datetime, priorities: int) -> Job:
    """The job an instance is: the template's text, world and options, not before ``fire``."""
    return template._replace(
        name=instance_name(name, fire),
        priority=min(template.priority, priorities),
        submitted=now,
        not_before=fire,
        recur=name,
        attempt=1,
        tried=(),
        extra=tuple((k, v) for k, v in template.extra if k not in RULE_KEYS),
    )


def from_state(known: dict) -> tuple[object, int | None, bool]:
    """The rule, priority and urgency a recur.state entry records: None, None, False where it records none valid."""
    fields, priority = known.get("fields"), known.get("priority")
    rule = None
    if isinstance(fields, dict) and all(isinstance(fields.get(key), (str, type(None))) for key in RULE_KEYS):
        with suppress(InvalidInput):
            rule = _rule(fields)
    return rule, (priority if is_whole(priority, 1, MAX_PRIORITIES) else None), known.get("urgent") is True
