"""``onite recur``: add, remove, list and preview recurring jobs (templates in SPOOL/recur/).

A template is a job file whose header carries its rule, written like a job into the sticky recur/; its file's
owner is its owner. Other users' rules are shown from recur.state, which the driver keeps public."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from onite.core.record import Record
from onite.spool.files import create_file, remove_file
from onite.spool.paths import SpoolDir
from onite.spool.accounts import user_name
from onite.core.errors import InvalidInput, NotFound, OniteError, Refused, SpoolError
from onite.spool.filecheck import BadFile, read_job_file, read_job_head
from onite.core.job import Job
from onite.core.jobfile import encode
from onite.app.common import key_for, label
from onite.core.policy import check_urgent, owner_or_root
from onite.core.recurring import check_template_name, from_state, rule_fields, rule_of, waited_for
from onite.core.rules import describe, parse_rule
from onite.core.schedule import next_fire
from onite.core.timeparse import parse_stamp
from onite.spool.recurstate import (is_template, load_state, runs_in_flight, template_files, template_problem,
                                   used_templates)

if TYPE_CHECKING:
    from onite.core.identity import Identity
    from onite.core.request import SubmitRequest


def add(spool: SpoolDir, request: SubmitRequest, captured, caller: Identity, *, cron: str | None = None,
        every: str | None = None, offset: str | None = None) -> tuple[Job, object]:
    """Store a template of the jobs ``request`` asks for, spooled by the rule ``cron``, or ``every`` with its
    ``offset``; it and its rule. Refused: the name is taken."""
    from onite.app.submit import check_capacity, check_mail
    from onite.core.request import build_job  # not at import: onite status lists templates, it adds none

    check_template_name(request.name)
    rule = parse_rule(cron=cron, every=every, offset=offset)
    config = spool.config
    job = build_job(request, captured, config, caller.name)
    check_capacity(spool, job)
    job = job._replace(extra=job.extra + rule_fields(rule))
    check_mail(request.notify, config)
    spool.check()
    for dep in job.after:  # a template is no job: its runs are NAME-STAMP, and a run waiting for NAME always failed
        # itself (not in recur/ yet), or the user's own: anyone may put a file in recur/ under another's key
        if dep == job.name or is_template(spool, dep):
            raise InvalidInput(f"--after {label(dep)} names a recurring job: --after waits for a job of that exact "
                               f"name, and {label(dep)}'s runs are named {label(dep)}-YYYYMMDDTHHMM",
                               "put both steps in one recurring job, or give this one a later time")
    if request.urgent:
        check_urgent(caller, config.admins, "add urgent recurring jobs")
    # a file of several links may be another user's link to one of the caller's (used_templates)
    mine = sum(st.st_uid == caller.uid and st.st_nlink == 1 and name != job.name
               for name, _, st in template_files(spool))
    if caller.uid and mine >= config.max_templates:  # root's have no limit
        raise InvalidInput(f"you have {mine} recurring job{'s' if mine != 1 else ''}; each user may have "
                           f"{config.max_templates} (max_templates)",
                           "remove one first (onite recur remove NAME), or ask the admin to raise max_templates")
    for last in (False, True):  # a name taken and freed again (a concurrent add, then a remove) is tried twice
        try:
            create_file(spool.recur_dir, job.name, encode(job), mode=0o600)
            break
        except Refused:
            owner = _owner_of(spool.recur_dir / job.name)
            if owner == "?" and not last:
                continue
            raise Refused(f"a recurring job named {request.name!r} already exists ({owner})",
                          f"pick another name, or remove it first: onite recur remove {label(job.name)}") from None
    return job, rule


def spooled_when(spool: SpoolDir, job: Job, now: datetime) -> str:
    """What will spool the runs of the template ``job``, as ``recur add`` says it."""
    from onite.drain.nextdrain import LABEL, no_drain_text, plan, starter_text

    drain, name = plan(spool, now), label(job.name)
    fits = drain.starters_for(job.pin)
    daemons = [host for host in drain.timed if not job.pin or host == job.pin]
    if daemons:
        said = f"{name}: {LABEL['daemon']} on host {daemons[0]} spools and runs each run as it fires"
    elif fits:
        said = f"{name}: each run is spooled by the first drain after it fires; {starter_text(fits[0], now)}"
    else:
        said = f"{name}: {no_drain_text(drain, for_job='it')}"
    # a job spooled later each day may be what it waits for, so no refusal: a typo is said now, not at each run
    from onite.core.queue import DepState
    from onite.spool.deps import dependency_state

    missing = [label(dep) for dep in job.after if dependency_state(spool, dep) is DepState.MISSING]
    if missing:
        said += (f"\n{name}: no job {', '.join(map(repr, missing))} is queued, running or finished now: each run "
                 "fails unless one is by the time it fires")
    return said


def remove(spool: SpoolDir, name: str, caller_uid: int) -> list[str]:
    """Remove the template ``name`` (its owner or root only); its runs still queued or running, which go on."""
    name = key_for(name, what="recurring job name")
    path = spool.recur_dir / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not owner_or_root(caller_uid, st.st_uid):
        raise Refused(f"recurring job {label(name)!r} belongs to {user_name(st.st_uid)}",
                      "you may remove only your own recurring jobs")
    if st is None or not remove_file(path):  # not there, or removed meanwhile
        raise NotFound(f"no recurring job {label(name)!r}", "see onite recur list")
    return sorted(runs_in_flight(spool, {name: st.st_uid}).get(name, ()))


class TemplateView(Record):
    """What ``onite recur list`` and ``onite status`` show of one template."""

    name: str
    uid: int
    user: str
    rule: str  # describe(rule), or "?" when neither readable nor known from recur.state
    priority: int | None
    urgent: bool
    next: datetime | None
    last: datetime | None  # the latest fire spooled (from recur.state)
    problem: str = ""
    waits_for: str = ""  # its last run, still queued or running: its fires are skipped until it ends

    def to_json(self) -> dict:
        return {"name": label(self.name), "user": self.user, "uid": self.uid, "rule": self.rule,
                "priority": self.priority, "urgent": self.urgent,
                "next": self.next.isoformat() if self.next else None,
                "last": self.last.isoformat() if self.last else None, "problem": self.problem or None,
                "waits_for": self.waits_for or None}


def templates(spool: SpoolDir, now: datetime, set_aside: dict[int, int] | None = None) -> list[TemplateView]:
    """Every template used, by name; other users' as recur.state tells them. ``set_aside`` gets by uid how many
    of each user's are not used."""
    state = load_state(spool)
    views = []
    used, aside = used_templates(spool)
    if used:  # owners are looked up (grp, the account database) as the driver does: status with none imports neither
        from onite.exec.identity import resolve
    runs = runs_in_flight(spool, {name: st.st_uid for name, _, st in used})
    if set_aside is not None:
        set_aside.update(aside)
    for name, path, st in used:
        known = state.get(name, {}) if state.get(name, {}).get("uid") == st.st_uid else {}
        problem = template_problem(name, st, spool.config.max_job_size, resolve)  # as the driver refuses it
        problem = f"{problem}; it is not used" if problem else ""
        try:  # its header only: a body may be a hole of max_job_size, costing its owner no disk
            job, rule = _read_template(spool, path, st, head=True)
            priority, urgent = job.priority, job.urgent
        except PermissionError:  # another user's: as the driver saw it
            rule, priority, urgent = from_state(known)
        except (OSError, BadFile, OniteError) as err:
            rule, priority, urgent, problem = None, None, False, str(err)
        upcoming_fire = None
        if rule is not None and not problem:
            with contextlib.suppress(InvalidInput):  # a cron rule that stops firing, or one past onite's last time
                upcoming_fire = next_fire(rule, now)
        waits = waited_for(runs.get(name, []), name, upcoming_fire)  # as the driver will look at that fire
        views.append(TemplateView(name=name, uid=st.st_uid, user=user_name(st.st_uid),
                                  rule=describe(rule) if rule is not None else "?", priority=priority, urgent=urgent,
                                  next=upcoming_fire, last=parse_stamp(known.get("last")), problem=problem,
                                  waits_for=label(waits) if waits else ""))
    return views


def templates_json(views: list[TemplateView], now: datetime) -> str:
    """``onite recur list --json``: the document of ``templates(spool, now)`` (docs/json.md)."""
    return json.dumps({"version": 1, "now": now.isoformat(), "recurring": [v.to_json() for v in views]}, indent=1)


def upcoming(spool: SpoolDir, now: datetime) -> list[TemplateView]:
    """The next 10 due recurring jobs, soonest first, for ``onite status``."""
    return sorted((v for v in templates(spool, now) if v.next), key=lambda v: (v.next, v.name))[:10]


def _read_template(spool: SpoolDir, path: Path, st: os.stat_result, *, head: bool = False) -> tuple[Job, object]:
    """The template and its rule (``head``: its header only); only from a regular file (root opening a planted
    device could have effects). PermissionError: another user's template."""
    if not stat.S_ISREG(st.st_mode):
        raise BadFile("not a regular file")
    job, _ = (read_job_head if head else read_job_file)(path, spool.config.max_job_size, one_link=True)
    return job, rule_of(job)


def template_rule(spool: SpoolDir, name: str):
    """The rule of the template ``name``; another user's as recur.state tells it (Refused until it does)."""
    name = key_for(name, what="recurring job name")
    path = spool.recur_dir / name
    try:
        return _read_template(spool, path, os.lstat(path))[1]
    except FileNotFoundError:
        raise NotFound(f"no recurring job {label(name)!r}", "see onite recur list") from None
    except PermissionError:
        rule = from_state(load_state(spool).get(name, {}))[0]
        if rule is None:
            raise Refused(f"cannot read {label(name)!r}: it belongs to {_owner_of(path)}",
                          "only its owner and root can see its rule until a driver has read it") from None
        return rule
    except (OSError, BadFile) as err:
        raise SpoolError(f"cannot read recurring job {name!r}: {err}",
                         f"fix or remove it: onite recur remove {name}") from None


def _owner_of(path: Path) -> str:
    try:
        return user_name(os.lstat(path).st_uid)
    except OSError:
        return "?"
