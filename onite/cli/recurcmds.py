"""``onite recur``: recurring jobs, templates spooled as a job each time their rule fires."""

import os
from typing import Annotated, Optional

from onite.app.common import label, read_job_text
from onite.cli.options import (GROUPS, AfterOpt, Arg, CpusOpt, HostOpt, JsonOpt, MemOpt, NotifyOnOpt, NotifyOpt,
                               Opt, PlainOpt, PriorityOpt, RetriesOpt, SpoolOpt, StderrOpt, TimeoutOpt, UrgentOpt,
                               command, open_spool, say, terminal)
from onite.core.clock import SYSTEM
from onite.core.errors import InvalidInput

GROUPS["recur"] = "Recurring jobs: templates spooled as a job each time their rule fires."
CronOpt = Annotated[Optional[str], Opt("--cron", metavar="EXPR",
                                       help="Five-field cron expression, e.g. '0 20 * * 1-5'.")]
EveryOpt = Annotated[Optional[str], Opt("--every", metavar="DUR",
                                        help="Interval from local midnight: 25m, 2h, 1d "
                                        "(a bare number is seconds).")]
OffsetOpt = Annotated[Optional[str], Opt("--offset", metavar="DUR",
                                         help="With --every: shift every fire by this much: 2m "
                                         "(a bare number is seconds).")]


@command("add", group="recur")
def recur_add(
    name: Annotated[str, Arg(metavar="NAME", help="Template name (instances are "
                             "NAME-YYYYMMDDTHHMM).")],
    cron_expr: CronOpt = None,
    every: EveryOpt = None,
    offset: OffsetOpt = None,
    priority: PriorityOpt = None,
    urgent: UrgentOpt = False,
    after: AfterOpt = None,
    timeout: TimeoutOpt = None,
    retries: RetriesOpt = 0,
    host: HostOpt = None,
    stderr_separate: StderrOpt = None,
    notify: NotifyOpt = None,
    notify_on: NotifyOnOpt = None,
    mem: MemOpt = None,
    cpus: CpusOpt = None,
    spool: SpoolOpt = None,
) -> None:
    """Store the job text on stdin as a recurring job, with your environment, directory and umask."""
    from onite.app.recur import add, spooled_when
    from onite.app.submit import capture
    from onite.core.request import SubmitRequest
    from onite.core.rules import describe
    from onite.core.schedule import next_fire
    from onite.exec import identity

    target = open_spool(spool)
    text = read_job_text(target.config.max_job_size, f"onite recur add {name} --every 1d < job.sh")
    request = SubmitRequest.of(name, text, dict(
        priority=priority, urgent=urgent, after=after, timeout=timeout, retries=retries, host=host,
        stderr_separate=stderr_separate, notify=notify, notify_on=notify_on, mem=mem, cpus=cpus))
    when = SYSTEM.now()
    job, rule = add(target, request, capture(when), identity.current(), cron=cron_expr, every=every, offset=offset)
    print(f"{name}: {describe(rule)}; next at {next_fire(rule, when).isoformat(timespec='seconds')}")
    say(spooled_when(target, job, when))


@command("list", group="recur")
def recur_list(as_json: JsonOpt = False, plain: PlainOpt = False, spool: SpoolOpt = None) -> None:
    """Recurring jobs: name, owner, rule, next fire, priority."""
    from onite.app.recur import templates, templates_json
    from onite.spool.recurstate import set_aside_text

    when = SYSTEM.now()
    target, aside = open_spool(spool, reading=True), {}
    views = templates(target, when, aside)
    for uid, count in sorted(aside.items()):
        say(set_aside_text(target, uid, count))
    if as_json:
        print(templates_json(views, when))
        return
    if not views:
        print("no recurring jobs")
        return
    from onite.cli.render import print_recur_list

    out, plain = terminal(plain)
    print_recur_list(views, when, out=out, plain=plain)


@command("remove", group="recur")
def recur_remove(names: Annotated[list[str], Arg(metavar="NAME")], spool: SpoolOpt = None) -> int | None:
    """Remove recurring jobs (your own, unless you are root). Instances already spooled stay."""
    from onite.app.recur import remove
    from onite.cli.jobcmds import _each

    target = open_spool(spool, reading=True)

    def remove_one(name: str) -> None:
        runs = [label(run) for run in remove(target, name, os.geteuid())]
        print(f"{name}: removed" + (f"; its run {', '.join(runs)} is still queued or running and goes on "
                                    f"(cancel it: onite cancel {' '.join(runs)})" if runs else ""))

    return _each(names, remove_one)  # as rm(1): one that fails is said, the others are still removed


@command("next", group="recur")
def recur_next(
    name: Annotated[Optional[str], Arg(metavar="NAME", help="A recurring job; or give a rule with "
                                       "--cron/--every.")] = None,
    count: Annotated[int, Opt("-n", "--count", metavar="N", min=1, max=10000,
                              help="How many fire times.")] = 5,
    start: Annotated[Optional[str], Opt("--from", metavar="WHEN", help="Start after this time (default: now): "
                                        "2026-01-05T00:00, HH:MM, +2h.")] = None,
    cron_expr: CronOpt = None,
    every: EveryOpt = None,
    offset: OffsetOpt = None,
    spool: SpoolOpt = None,
) -> None:
    """Print the next fire times, one per line, in ISO 8601 (local time)."""
    from onite.app.recur import template_rule
    from onite.core.rules import parse_rule
    from onite.core.schedule import fire_times
    from onite.core.timeparse import parse_when

    if (name is not None) == any(v is not None for v in (cron_expr, every, offset)):
        raise InvalidInput("give a recurring job's NAME or a rule (--cron EXPR, or --every DUR [--offset DUR])",
                           "e.g. onite recur next nightly, or onite recur next --every 25m --offset 2m")
    rule = parse_rule(cron=cron_expr, every=every, offset=offset) if name is None else None
    when = SYSTEM.now()
    start_at = parse_when(start, when, what="--from") if start else when
    rule = rule or template_rule(open_spool(spool, reading=True), name)
    for fire in fire_times(rule, start_at, count):
        print(fire.isoformat(timespec="seconds"))
