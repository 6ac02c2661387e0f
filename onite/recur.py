"""Recurring jobs: templates in SPOOL/recur/, and the instances spooled from them.

A template is a job file (onite.jobfile, format 1) in the sticky, world-
writable folder recur/, created mode 0600 by its owner with the same
all-or-nothing, never-replace write as a job (spool.create_file). Its header
carries the rule in two or three extra keys that older readers keep as they
are::

    recur-cron: 0 20 * * 1-5          or      recur-every: 25m
                                              recur-offset: 2m

As for jobs, the file's owner uid (set by the kernel) is the template's
owner; nothing inside it decides who runs it.

When a rule fires, a driver (the daemon on its wakes, ``onite run`` when it
starts) spools an *instance*: an ordinary job named ``NAME-YYYYMMDDTHHMM``
after the fire's local wall time (``SS`` added for fires off the minute,
``.2`` for the second pass of an hour the clocks repeat), with ``recur:
NAME``, not-before = the fire time, owned by the template's owner. The name
is a function of the fire, and the job is created with a no-replace write,
so one fire is never spooled twice.

Missed fires are coalesced: each check spools at most ONE instance per
template, for the latest fire since the last one spooled; the others are
counted in the log. What was last spooled is kept in SPOOL/recur.state,
written by the driver (root on a system spool, in a folder only root may
write), so users cannot forge it.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from onite import spool as sp
from onite.errors import InvalidInput, JobFormatError, NotFound, OniteError, Refused, SpoolError, SpoolIOError
from onite.filecheck import BadFile, file_problem, read_job_file
from onite.identity import Identity, resolve
from onite.jobfile import Job, encode
from onite.names import MAX_NAME, SIDE, check_name, is_valid_name
from onite.policy import is_admin

RULE_KEYS = ("recur-cron", "recur-every", "recur-offset")
STATE_FORMAT = 1
# An instance adds "-YYYYMMDDTHHMM" (14), seconds (2), microseconds (6) and ".2" (2).
MAX_TEMPLATE_NAME = MAX_NAME - 24
REFRESH_EVERY = 2.0  # seconds between looks at recur/ while the daemon runs
RETRY_AFTER = timedelta(minutes=1)  # after an instance could not be written (full disk, ...)


# ---- templates: pure -----------------------------------------------------------------------


def rule_fields(rule) -> tuple[tuple[str, str], ...]:
    """The header lines that store ``rule`` in a template."""
    from onite.schedule import CronRule
    from onite.timeparse import format_duration

    if isinstance(rule, CronRule):
        return (("recur-cron", rule.expr),)
    fields = (("recur-every", format_duration(rule.interval)),)
    return fields + ((("recur-offset", format_duration(rule.offset)),) if rule.offset else ())


def rule_of(job: Job):
    """The rule a template's header stores.

    Raises:
        JobFormatError: no rule in it (it is not a template).
        InvalidInput: the rule is not valid (an edited template).
    """
    from onite.schedule import parse_rule

    fields = {k: v for k, v in job.extra if k in RULE_KEYS}
    if "recur-cron" not in fields and "recur-every" not in fields:
        raise JobFormatError("not a recurring-job template (no recur-cron or recur-every line)",
                             "add it again with onite recur add")
    return parse_rule(cron=fields.get("recur-cron"), every=fields.get("recur-every"),
                      offset=fields.get("recur-offset"))


def _is_second_pass(fire: datetime) -> bool:
    """Is ``fire`` the second time its wall clock reads this (an hour the clocks repeat)?"""
    from onite.schedule import _zone_of  # the module's own notion of "the machine's zone"

    zone = _zone_of(fire, "fire")
    first = zone.instant(zone.wall(fire), 0)
    return fire.astimezone(timezone.utc) - first >= timedelta(seconds=1)


def instance_name(template: str, fire: datetime) -> str:
    """``NAME-20261122T2000``: the job name of the instance for ``fire`` (local wall time)."""
    wall = fire.replace(tzinfo=None)
    stamp = wall.strftime("%Y%m%dT%H%M")
    if wall.second or wall.microsecond:
        stamp += wall.strftime("%S")
    if wall.microsecond:
        stamp += wall.strftime("%f")
    if _is_second_pass(fire):
        stamp += ".2"
    return f"{template}-{stamp}"


def instance_job(template: Job, name: str, fire: datetime, now: datetime, priorities: int) -> Job:
    """The job an instance is: the template's text, world and options, not before ``fire``."""
    return replace(
        template,
        name=instance_name(name, fire),
        priority=min(template.priority, priorities),
        submitted=now,
        not_before=fire,
        recur=name,
        attempt=1,
        tried=(),
        extra=tuple((k, v) for k, v in template.extra if k not in RULE_KEYS),
    )


def check_template_name(name: str) -> str:
    """Raises:
        InvalidInput: not a job name, or too long to leave room for the instances' suffix.
    """
    check_name(name, what="recurring job name")
    if len(name) > MAX_TEMPLATE_NAME:
        raise InvalidInput(f"recurring job name {name[:37]!r}... is {len(name)} characters long",
                           f"use at most {MAX_TEMPLATE_NAME}: its instances add the fire time to it")
    return name


# ---- templates: add, remove, look ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RecurRequest:
    """``onite recur add`` as typed."""

    name: str
    body: bytes
    cron: str | None = None
    every: str | None = None
    offset: str | None = None
    priority: int | None = None
    urgent: bool = False
    after: tuple[str, ...] = ()
    timeout: str | None = None
    retries: int = 0
    host: str | None = None


def add(spool: sp.Spool, request: RecurRequest, captured, caller: Identity) -> tuple[Job, object]:
    """Store a template (mode 0600, owned by the caller); return it and its rule.

    Raises:
        InvalidInput: a bad name, rule, priority or option (exit 2).
        Refused: a template of that name exists, or --urgent without the right (exit 3).
        SpoolError, SpoolIOError: no recur/ folder, or the write failed.
    """
    from onite.schedule import parse_rule
    from onite.submit import SubmitRequest, build_job

    check_template_name(request.name)
    rule = parse_rule(cron=request.cron, every=request.every, offset=request.offset)
    config = spool.config
    job = build_job(SubmitRequest(name=request.name, body=request.body, priority=request.priority,
                                  urgent=request.urgent, after=request.after, timeout=request.timeout,
                                  retries=request.retries, host=request.host),
                    captured, default_priority=config.default_priority, priorities=config.priorities,
                    default_timeout=config.timeout)
    job = replace(job, extra=job.extra + rule_fields(rule))
    spool.check()
    if request.urgent and not is_admin(caller.uid, caller.name, caller.group_names(), config.admins):
        raise Refused("only root and the admins named in onite.toml may add urgent recurring jobs",
                      "drop --urgent, or ask an admin")
    if not spool.recur_dir.is_dir():
        raise SpoolError(f"{spool.recur_dir} is missing (a spool made by an older onite)",
                            "run onite init to add it")
    try:
        sp.create_file(spool.recur_dir, request.name, encode(job), mode=0o600)
    except Refused:
        owner = _owner_of(spool.recur_dir / request.name)
        raise Refused(f"a recurring job named {request.name!r} already exists ({owner})",
                      "pick another name, or remove it first: onite recur remove NAME") from None
    return job, rule


def remove(spool: sp.Spool, name: str, caller_uid: int) -> None:
    """Remove the template ``name`` (instances already spooled stay: cancel them as jobs).

    Raises:
        NotFound: no such template.
        Refused: it belongs to someone else and the caller is not root.
    """
    check_name(name, what="recurring job name")
    path = spool.recur_dir / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotFound(f"no recurring job {name!r}", "see onite recur list") from None
    if caller_uid != 0 and st.st_uid != caller_uid:
        raise Refused(f"recurring job {name!r} belongs to {sp.user_name(st.st_uid)}",
                      "you may remove only your own recurring jobs")
    if not sp.remove(path):
        raise NotFound(f"no recurring job {name!r}", "see onite recur list")


@dataclass(frozen=True, kw_only=True)
class TemplateView:
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

    def to_json(self) -> dict:
        return {"name": self.name, "user": self.user, "uid": self.uid, "rule": self.rule,
                "priority": self.priority, "urgent": self.urgent,
                "next": self.next.isoformat() if self.next else None,
                "last": self.last.isoformat() if self.last else None, "problem": self.problem or None}


def templates(spool: sp.Spool, now: datetime) -> list[TemplateView]:
    """Every template, by name. Templates the caller cannot read (other users') are
    described from recur.state, which the driver keeps world-readable.
    """
    from onite.schedule import describe, next_fire

    state = load_state(spool)
    views = []
    for name, path, st in _template_files(spool):
        known = state.get(name, {}) if state.get(name, {}).get("uid") == st.st_uid else {}
        last = _parse_time(known.get("last"))
        try:
            job, rule = _read_template(spool, path, st)
        except PermissionError:
            rule = _rule_from_state(known)
            views.append(TemplateView(
                name=name, uid=st.st_uid, user=sp.user_name(st.st_uid), rule=describe(rule) if rule else "?",
                priority=known.get("priority"), urgent=bool(known.get("urgent")),
                next=next_fire(rule, now) if rule else None, last=last))
            continue
        except (OSError, BadFile, OniteError) as err:
            views.append(TemplateView(name=name, uid=st.st_uid, user=sp.user_name(st.st_uid), rule="?",
                                      priority=None, urgent=False, next=None, last=last, problem=str(err)))
            continue
        views.append(TemplateView(name=name, uid=st.st_uid, user=sp.user_name(st.st_uid), rule=describe(rule),
                                  priority=job.priority, urgent=job.urgent, next=next_fire(rule, now), last=last))
    return views


def upcoming(spool: sp.Spool, now: datetime, limit: int = 10) -> list[dict]:
    """The next due recurring jobs, soonest first, for ``onite status``."""
    views = sorted((v for v in templates(spool, now) if v.next), key=lambda v: (v.next, v.name))
    return [{"name": v.name, "user": v.user, "rule": v.rule, "next": v.next.isoformat(),
             "priority": v.priority, "urgent": v.urgent} for v in views[:limit]]


def preview(spool: sp.Spool | None, name: str | None, rule, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times after ``start`` of the template ``name``, or of ``rule``.

    Raises:
        NotFound: no such template. InvalidInput: a bad rule or count.
    """
    from onite.schedule import fire_times

    if count < 0:
        raise InvalidInput(f"invalid count {count}", "use -n 1 or more")
    if name is not None:
        rule = _rule_of_template(spool, name)
    return fire_times(rule, start, count)


def _read_template(spool: sp.Spool, path: Path, st: os.stat_result) -> tuple[Job, object]:
    """For display only (the scheduler checks more). Never opens what is not a regular file:
    root opening a device someone planted in recur/ could have effects.

    Raises:
        BadFile, OSError (PermissionError: another user's template), JobFormatError, InvalidInput.
    """
    if not stat.S_ISREG(st.st_mode):
        raise BadFile("not a regular file")
    job, _ = read_job_file(path, spool.config.max_job_size)
    return job, rule_of(job)


def _rule_of_template(spool: sp.Spool, name: str):
    check_name(name, what="recurring job name")
    path = spool.recur_dir / name
    try:
        return _read_template(spool, path, os.lstat(path))[1]
    except FileNotFoundError:
        raise NotFound(f"no recurring job {name!r}", "see onite recur list") from None
    except PermissionError:
        known = load_state(spool).get(name, {})
        rule = _rule_from_state(known)
        if rule is None:
            raise Refused(f"cannot read {name!r}: it belongs to {_owner_of(path)}",
                          "only its owner and root can see its rule until a driver has read it") from None
        return rule
    except (OSError, BadFile) as err:
        raise NotFound(f"cannot read recurring job {name!r}: {err}", "see onite recur list") from None


def _template_files(spool: sp.Spool) -> Iterator[tuple[str, Path, os.stat_result]]:
    try:
        it = os.scandir(spool.recur_dir)
    except FileNotFoundError:
        return
    except OSError as err:
        raise SpoolIOError(spool.recur_dir, "listing", err) from None
    with it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.name[0] == "." or SIDE in entry.name or not is_valid_name(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        yield entry.name, Path(entry.path), st


def _owner_of(path: Path) -> str:
    try:
        return sp.user_name(os.lstat(path).st_uid)
    except OSError:
        return "?"


# ---- recur.state: what was spooled -----------------------------------------------------------


def load_state(spool: sp.Spool) -> dict[str, dict]:
    """NAME → {uid, template, last, rule, priority, urgent}; empty if missing or damaged."""
    try:
        data = json.loads(spool.root.joinpath("recur.state").read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STATE_FORMAT or not isinstance(data.get("templates"), dict):
        return {}
    return {k: v for k, v in data["templates"].items() if isinstance(v, dict)}


def save_state(spool: sp.Spool, state: dict[str, dict]) -> None:
    """Raises:
        SpoolIOError: it cannot be written.
    """
    data = {"version": STATE_FORMAT, "templates": dict(sorted(state.items()))}
    sp.replace_file(spool.root / "recur.state", (json.dumps(data, indent=1) + "\n").encode(), mode=0o644)


@contextmanager
def _state_lock(spool: sp.Spool):
    """Drivers of several hosts may share a spool: one read-modify-write of recur.state at a time."""
    path = spool.root / "recur.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise SpoolIOError(path, "opening", err) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _parse_time(text) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except (TypeError, ValueError):
        return None


def _rule_from_state(known: dict):
    from onite.schedule import parse_rule

    fields = known.get("fields")
    if not isinstance(fields, dict):
        return None
    try:
        return parse_rule(cron=fields.get("recur-cron"), every=fields.get("recur-every"),
                          offset=fields.get("recur-offset"))
    except (InvalidInput, TypeError):
        return None


# ---- spooling instances -------------------------------------------------------------------------


@dataclass
class _Template:
    key: tuple[int, int, int]  # inode, ctime, size: a changed file is read again
    uid: int
    gid: int
    job: Job
    rule: object
    next: datetime | None = None


class RecurScheduler:
    """Spools due instances. The daemon keeps one for its whole life (it looks at recur/
    every REFRESH_EVERY seconds and reads a template again only when it changed);
    ``onite run`` makes one, calls ``spool_due`` once and drops it.
    """

    def __init__(self, spool: sp.Spool, log, *, euid: int | None = None, clock=None) -> None:
        import time

        self.spool = spool
        self.log = log
        self.euid = os.geteuid() if euid is None else euid
        self.clock = clock or time.monotonic
        self.templates: dict[str, _Template] = {}
        self._refreshed = float("-inf")
        self._reported: dict[str, tuple] = {}  # name → what was last logged about it (log once)
        self._state: dict[str, dict] = {}

    def next_fire(self) -> datetime | None:
        """The earliest next fire over all usable templates (after ``refresh``)."""
        return min((t.next for t in self.templates.values() if t.next is not None), default=None)

    def refresh(self, *, force: bool = False) -> None:
        """Look at recur/ again (at most every REFRESH_EVERY seconds unless forced)."""
        now_mono = self.clock()
        if not force and now_mono - self._refreshed < REFRESH_EVERY:
            return
        self._refreshed = now_mono
        self._state = load_state(self.spool)
        seen = set()
        for name, path, st in _template_files(self.spool):
            seen.add(name)
            key = (st.st_ino, st.st_ctime_ns, st.st_size)
            known = self.templates.get(name)
            if known is not None and known.key == key:
                continue
            self.templates.pop(name, None)
            loaded = self._load(name, path, st)
            if loaded is not None:
                loaded.next = self._next_after(name, loaded, self._baseline(name, loaded))
                self.templates[name] = loaded
        for name in set(self.templates) - seen:
            del self.templates[name]
        for name in set(self._reported) - seen:
            del self._reported[name]

    def _load(self, name: str, path: Path, st: os.stat_result) -> _Template | None:
        import time

        config = self.spool.config
        problem = file_problem(st, max_size=config.max_job_size, now_ns=time.time_ns())
        if problem == "settling":
            self._refreshed = float("-inf")  # look again at the next chance
            return None
        if not problem and self.euid != 0 and st.st_uid != self.euid:
            problem = (f"owned by {sp.user_name(st.st_uid)}; this driver runs as {sp.user_name(self.euid)} "
                       "and spools only its own recurring jobs")
        if not problem:
            try:
                job, fst = read_job_file(path, config.max_job_size)
                if (fst.st_ino, fst.st_uid) != (st.st_ino, st.st_uid):
                    return None  # replaced while we looked: the next refresh sees the new one
                rule = rule_of(job)
                return _Template(key=(st.st_ino, st.st_ctime_ns, st.st_size), uid=fst.st_uid,
                                 gid=fst.st_gid, job=job, rule=rule)
            except FileNotFoundError:
                return None
            except (OSError, BadFile, OniteError) as err:
                problem = str(err)
        self._report(name, (st.st_ino, st.st_ctime_ns), "recur-refused", owner=sp.user_name(st.st_uid),
                     reason=problem, note="this template is not used until it is fixed")
        return None

    def _report(self, name: str, key: tuple, event: str, **fields) -> None:
        if self._reported.get(name) != (key, event):
            self._reported[name] = (key, event)
            self.log.event(event, name, **fields)

    def _baseline(self, name: str, tpl: _Template) -> datetime:
        """Fires after this time are due: the last one spooled, or the template's creation."""
        known = self._state.get(name, {})
        last = _parse_time(known.get("last"))
        if last is not None and known.get("uid") == tpl.uid and known.get("template") == tpl.job.submitted.isoformat():
            return last
        return tpl.job.submitted

    @staticmethod
    def _next_after(name: str, tpl: _Template, after: datetime) -> datetime | None:
        from onite.schedule import next_fire

        try:
            return next_fire(tpl.rule, after.astimezone())
        except OniteError:
            return None

    def spool_due(self, now: datetime) -> list[str]:
        """Spool one instance for each template whose latest fire in (last spooled, now] is
        not spooled yet; return the instances' names.
        """
        self.refresh(force=not self.templates)
        due = [name for name, t in self.templates.items() if t.next is not None and t.next <= now]
        if not due:
            return []
        spooled = []
        with _state_lock(self.spool):
            self._state = load_state(self.spool)
            for name in sorted(due):
                made = self._spool_one(name, self.templates[name], now)
                if made:
                    spooled.append(made)
            present = {name for name, _, _ in _template_files(self.spool)}
            state = {k: v for k, v in self._state.items() if k in present}
            try:
                save_state(self.spool, state)
            except OniteError as err:
                self.log.event("recur-error", error=str(err), note="recur.state not saved")
        return spooled

    def _spool_one(self, name: str, tpl: _Template, now: datetime) -> str | None:
        from onite.schedule import describe, last_fire

        baseline = self._baseline(name, tpl)
        fire = last_fire(tpl.rule, now, since=baseline.astimezone(now.tzinfo))
        if fire is None:
            tpl.next = self._next_after(name, tpl, now)
            return None
        missed = _count_fires(tpl.rule, baseline, fire)
        job = instance_job(tpl.job, name, fire, now, self.spool.config.priorities)
        spooled = self._write_instance(name, tpl, job)
        if spooled is False:
            tpl.next = now + RETRY_AFTER
            return None
        self._state[name] = {"uid": tpl.uid, "template": tpl.job.submitted.isoformat(), "last": fire.isoformat(),
                             "rule": describe(tpl.rule), "fields": dict(rule_fields(tpl.rule)),
                             "priority": tpl.job.priority, "urgent": tpl.job.urgent}
        tpl.next = self._next_after(name, tpl, now)
        if spooled:
            self.log.event("recur-spooled", job.name, template=name, user=sp.user_name(tpl.uid),
                           fire=fire.isoformat(timespec="seconds"), priority=job.priority,
                           coalesced=f"{missed} earlier fire(s) not spooled" if missed else None)
            return job.name
        return None

    def _write_instance(self, name: str, tpl: _Template, job: Job) -> bool | None:
        """True: spooled. None: not spooled, and never will be (already there, or refused).
        False: a write error; try again later.
        """
        try:
            owner = resolve(tpl.uid)
        except Refused as err:
            self.log.event("recur-refused", name, reason=str(err))
            return None
        if job.urgent and not is_admin(owner.uid, owner.name, owner.group_names(), self.spool.config.admins):
            self.log.event("recur-refused", job.name, template=name, user=owner.name,
                           reason=f"urgent jobs need an admin; {owner.name} is not one")
            return None
        if sp.is_live(self.spool, job.name) or self.spool.result_path(job.name).exists():
            self.log.event("recur-skip", job.name, template=name, reason="this fire was spooled already")
            return None
        folder = self.spool.folder_for(job.priority, job.urgent)
        try:
            sp.create_file(folder, job.name, encode(job), mode=0o600, owner=(tpl.uid, tpl.gid))
        except Refused:
            self.log.event("recur-skip", job.name, template=name, reason="a job of that name is queued")
            return None
        except OniteError as err:
            self.log.event("recur-error", job.name, template=name, error=str(err), note="trying again later")
            return False
        return True


def _count_fires(rule, since: datetime, fire: datetime, cap: int = 10_000) -> int:
    """How many fires in (since, fire) were coalesced into ``fire`` (at most ``cap``)."""
    from onite.schedule import _fires_after  # the lazy generator: stop at `fire` without a list

    count = 0
    for at in _fires_after(rule, since.astimezone(fire.tzinfo)):
        if at >= fire or count >= cap:
            break
        count += 1
    return count
