"""Spooling the instances of recurring jobs when their rules fire.

An instance is its template owner's job, named after the fire (onite.core.recurring), written with
no replace; a fire whose instance is queued, running or has a result is never spooled again. Missed
fires are coalesced into the latest (SPOOL/recur.state keeps the last spooled).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice, takewhile, zip_longest
from pathlib import Path

from onite.core.clock import SYSTEM, Clock, set_back_since
from onite.core.errors import OniteError, Refused, SpoolIOError
from onite.core.job import Job
from onite.core.jobfile import encode
from onite.core.policy import may_be_urgent, owner_or_root, urgent_refusal
from onite.core.names import split_key
from onite.core.queue import DepState
from onite.core.recurring import instance_job, rule_fields, rule_of, waited_for
from onite.core.rules import describe
from onite.core.schedule import fires_after, last_fire, next_fire
from onite.core.timeparse import parse_stamp
from onite.exec.identity import resolve
from onite.spool.deps import dependency_state
from onite.spool.filecheck import SETTLING, BadFile, is_settling, read_job_file, read_job_head
from onite.spool.files import create_displacing, move_file
from onite.spool.paths import SpoolDir
from onite.spool.recurstate import (load_state, runs_in_flight, save_state, set_aside_text, state_lock, template_files,
                                    template_problem, used_templates)
from onite.spool.accounts import user_name
from onite.spool.scan import Withdrawn

REFRESH_EVERY = 2.0  # seconds between looks at recur/ while the daemon runs
RETRY_AFTER = timedelta(minutes=1)  # after an instance could not be written (full disk, ...), while one runs, an error
COUNT_BACK = timedelta(days=7)  # how far before a fire the earlier fires it coalesced are counted
READ_BUDGET = 0.25  # s of reading templates a daemon's look at recur/ may spend (new versions wait for the next)
_GAP = object()  # where one owner has no more items


@dataclass
class _Template:
    """A template as last read: its rule and next fire, not its job, which is read again when it fires
    (users' templates would otherwise sit in root's memory for the daemon's life)."""

    key: tuple[int, int, int]  # inode, ctime, size: a changed file is read again
    uid: int
    gid: int
    submitted: datetime
    rule: object
    next: datetime | None = None


class RecurScheduler:
    """Spools due instances; the daemon keeps one for its life, ``onite run`` uses one once.
    ``read_budget``: the seconds one look may spend reading templates (the daemon's loop must not stall);
    the rest wait for the next looks, one owner's after another's, so that no user's many large
    templates delay anyone else's. None: read them all."""

    def __init__(self, spool: SpoolDir, log, *, euid: int | None = None, clock: Clock = SYSTEM,
                 read_budget: float | None = None) -> None:
        self.spool = spool
        self.log = log
        self.euid = os.geteuid() if euid is None else euid
        self.clock = clock
        self.read_budget = read_budget
        self._looks = 0  # which owner's templates are read first at a look (each owner in turn)
        self.templates: dict[str, _Template] = {}
        self._refreshed = float("-inf")
        self._refused: dict[str, tuple] = {}  # name → the version of it refused (read and logged once)
        self._capped: set[int] = set()  # owners whose templates beyond max_templates were logged (once a run)
        self._state: dict[str, dict] = {}
        self._waiting: dict[str, str] = {}  # template → the queued or running run its fires wait for (logged)
        self._queued_runs: dict[str, list[str]] | None = None  # template → its runs in the queues and running/
        self._withdrawn = Withdrawn(spool)  # cancel/ by name: listed afresh at each look (and once it changed)
        self._paused: datetime | None = None  # after an error (logged), nothing is tried until then

    def next_fire(self) -> datetime | None:
        """The earliest next fire of the usable templates (after ``refresh``); after an error, when to try again."""
        return self._paused or min((t.next for t in self.templates.values() if t.next is not None), default=None)

    def refresh(self, *, force: bool = False) -> None:
        """Look at recur/ again (at most every REFRESH_EVERY seconds unless forced)."""
        now_mono = self.clock.monotonic()
        if not force and now_mono - self._refreshed < REFRESH_EVERY:
            return
        self._refreshed = now_mono
        self._state = load_state(self.spool)
        seen = set()
        changed: list[tuple[str, Path, os.stat_result]] = []
        used, aside = used_templates(self.spool)
        for uid in sorted(set(aside) - self._capped):
            self._capped.add(uid)
            self.log.event("recur-refused", owner=user_name(uid), reason=set_aside_text(self.spool, uid, aside[uid]))
        for name, path, st in used:
            seen.add(name)
            key = (st.st_ino, st.st_ctime_ns, st.st_size)
            known = self.templates.get(name)
            if (known is not None and known.key == key) or self._refused.get(name) == key:
                continue  # read once per version, a refused one too
            changed.append((name, path, st))
        started = time.monotonic()
        self._looks += 1
        for i, (name, path, st) in enumerate(_by_owner_in_turn([(f[2].st_uid, f) for f in changed], self._looks)):
            if i and self.read_budget is not None and time.monotonic() - started > self.read_budget:
                self._refreshed = float("-inf")  # the rest at the next chance
                break
            self.templates.pop(name, None)
            self._load(name, path, st)
        for known in (self.templates, self._refused, self._waiting):  # a daemon of weeks keeps no template gone
            for name in set(known) - seen:
                del known[name]

    def _load(self, name: str, path: Path, st: os.stat_result, *, whole: bool = False) -> tuple[_Template, Job] | None:
        """Read, check and keep the template ``name`` (``st``: as found) with its next fire; it and its job
        (``whole``: all of it; else its header, which holds its rule: a body may be a sparse hole of
        max_job_size); None if it is refused (logged once per version), settling or replaced meanwhile."""
        config = self.spool.config
        key = (st.st_ino, st.st_ctime_ns, st.st_size)
        problem = template_problem(name, st, config.max_job_size, resolve, may_settle=is_settling(st, time.time_ns()))
        if problem is SETTLING:
            self._refreshed = float("-inf")  # look again at the next chance
            return None
        if not problem and not owner_or_root(self.euid, st.st_uid):
            problem = (f"owned by {user_name(st.st_uid)}; this driver runs as {user_name(self.euid)} "
                       "and spools only its own recurring jobs")
        if not problem:
            try:
                job, fst = (read_job_file if whole else read_job_head)(path, config.max_job_size)
                if (fst.st_ino, fst.st_uid) != (st.st_ino, st.st_uid):
                    return None  # replaced while we looked: the next refresh sees the new one
                tpl = _Template(key=key, uid=fst.st_uid, gid=fst.st_gid, submitted=job.submitted, rule=rule_of(job))
            except FileNotFoundError:
                return None
            except (OSError, BadFile, OniteError) as err:
                problem = str(err)
            else:
                tpl.next = _next_after(tpl, self._baseline(name, tpl, self.clock.now()))
                self.templates[name] = tpl
                return tpl, job
        if self._refused.get(name, ())[:2] != key[:2]:  # once per version (inode, ctime)
            self.log.event("recur-refused", name, owner=user_name(st.st_uid), reason=problem,
                           note="this template is not used until it is fixed")
        self._refused[name] = key
        return None

    def _baseline(self, name: str, tpl: _Template, now: datetime) -> datetime:
        """Fires after this time are due: the last one spooled, or the template's creation. A last one
        recorded under a clock set back since does not count (every fire would wait for the clock to come
        back there)."""
        known = self._state.get(name, {})
        last = parse_stamp(known.get("last"))
        if (last is not None and known.get("uid") == tpl.uid and known.get("template") == tpl.submitted.isoformat()
                and not set_back_since(last, now)):
            return last
        return tpl.submitted

    def try_spool_due(self, now: datetime) -> None:
        """``spool_due``, an error logged, not raised (what users put in recur/ never stops a night); after
        one, nothing is tried for RETRY_AFTER."""
        if self._paused is not None and now < self._paused:
            return
        self._paused = None
        try:
            self.spool_due(now)
        except Exception as err:  # noqa: BLE001 - see the docstring
            known = isinstance(err, (OniteError, OSError))
            if not known:
                traceback.print_exc(file=sys.stderr)
            self.log.event("recur-error", error=str(err) if known else f"{type(err).__name__}: {err}",
                           note="recurring jobs were not spooled; they are tried again later")
            self._paused = now + RETRY_AFTER

    def spool_due(self, now: datetime) -> list[str]:
        """Spool one instance for each template whose latest fire in (last spooled, now] is not
        spooled yet; the instances' names."""
        self.refresh()
        due = [name for name, t in self.templates.items() if t.next is not None and t.next <= now]
        if not due:
            return []
        spooled = []
        started = time.monotonic()
        self._looks += 1
        with state_lock(self.spool):
            self._state = load_state(self.spool)
            self._withdrawn = Withdrawn(self.spool)  # what it learnt of a name is not kept for the daemon's life
            self._queued_runs = None  # listed afresh at each look, once a fire asks
            # each fire reads its template again, within the read budget, one owner's after another's
            for i, name in enumerate(_by_owner_in_turn([(self.templates[n].uid, n) for n in sorted(due)], self._looks)):
                if i and self.read_budget is not None and time.monotonic() - started > self.read_budget:
                    break
                current = self._reread(name)
                if current is None:
                    continue  # gone, refused or changed: the next look reads it as it is now
                tpl, job = current
                try:
                    made = self._spool_one(name, tpl, job, now)
                except Exception as err:  # noqa: BLE001 - one user's template must never stop the others' fires
                    traceback.print_exc(file=sys.stderr)
                    self.log.event("recur-error", name, error=f"{type(err).__name__}: {err}",
                                   note="this template is not used until it changes; please report this")
                    tpl.next = None
                    continue
                if made:
                    spooled.append(made)
            try:
                save_state(self.spool, _kept_state(self._state, {name for name, _, _ in template_files(self.spool)}))
            except OniteError as err:
                self.log.event("recur-error", error=str(err), note="recur.state not saved")
        return spooled

    def _reread(self, name: str) -> tuple[_Template, Job] | None:
        """The template ``name`` and its job, read again as it fires; None (forgotten) if it is gone,
        refused or replaced."""
        self.templates.pop(name, None)
        path = self.spool.recur_dir / name
        try:
            st = os.lstat(path)
        except OSError:
            return None
        loaded = self._load(name, path, st, whole=True)
        return loaded if loaded is not None and loaded[0].next is not None else None

    def _spool_one(self, name: str, tpl: _Template, template: Job, now: datetime) -> str | None:
        baseline = self._baseline(name, tpl, now)
        fire = last_fire(tpl.rule, now, since=baseline.astimezone(now.tzinfo))
        if fire is None:
            tpl.next = _next_after(tpl, now)
            return None
        # a run of this template still queued (held too) or running, for a fire up to ``fire``: later fires
        # wait for it and are coalesced, never piled up. Found by name, so also one spooled by a driver killed
        # before it saved recur.state; one for a later fire (a clock set ahead since) holds nothing back
        if self._queued_runs is None:  # listed once a look
            self._queued_runs = runs_in_flight(self.spool, {n: t.uid for n, t in self.templates.items()})
        running = waited_for(self._queued_runs.get(name, []), name, fire)
        if running is not None:
            tpl.next = now + RETRY_AFTER
            if self._waiting.get(name) != running:  # once a run waited for, not at each look
                self._waiting[name] = running
                self.log.event("recur-skip", name, user=user_name(tpl.uid), fire=fire.isoformat(timespec="seconds"),
                               reason=f"its last run {split_key(running)[1]} is still queued or running",
                               note="its latest fire is spooled once that run ends")
            return None
        job = instance_job(template, name, fire, now, self.spool.config.priorities)
        spooled = self._write_instance(name, tpl, job)
        if spooled is False:
            tpl.next = now + RETRY_AFTER
            return None
        self._state[name] = {"uid": tpl.uid, "template": tpl.submitted.isoformat(), "last": fire.isoformat(),
                             "rule": describe(tpl.rule), "fields": dict(rule_fields(tpl.rule)),
                             "priority": template.priority, "urgent": template.urgent}
        tpl.next = _next_after(tpl, now)
        if spooled:
            self.log.event("recur-spooled", job.name, template=name, user=user_name(tpl.uid),
                           fire=fire.isoformat(timespec="seconds"), priority=job.priority,
                           coalesced=_coalesced(tpl.rule, baseline, fire))
            return job.name
        return None

    def _write_instance(self, name: str, tpl: _Template, job: Job) -> bool | None:
        """True: spooled. None: never will be (already there, or refused). False: a write error, for later."""
        try:
            owner = resolve(tpl.uid)
        except Refused as err:
            self.log.event("recur-refused", name, reason=str(err))
            return None
        if job.urgent and not may_be_urgent(owner, self.spool.config.admins):
            self.log.event("recur-refused", job.name, template=name, user=owner.name, reason=urgent_refusal(owner.name))
            return None
        if self._spooled_already(job.name):
            self.log.event("recur-skip", job.name, template=name, reason="this fire was spooled already")
            return None
        folder = self.spool.folder_for(job.priority, job.urgent)
        try:
            # a forgery at the run's key is swapped out as the run is written: moved aside first, it could be put back
            displaced = create_displacing(folder, job.name, encode(job), tpl.uid, mode=0o600, owner=(tpl.uid, tpl.gid))
        except Refused:
            self.log.event("recur-skip", job.name, template=name, reason="a job of that name is queued")
            return None
        except OniteError as err:
            self.log.event("recur-error", job.name, template=name, error=str(err), note="trying again later")
            return False
        if displaced:
            with suppress(OniteError, OSError):  # its owner removed it meanwhile
                owner_name = user_name(os.lstat(displaced).st_uid)
                move_file(Path(displaced), self.spool.refused_path(job.name, self.clock.now()), "moving aside")
                self.log.event("refused", job.name, owner=owner_name,
                               reason="a forgery at the key of a recurring job's run")
        return True

    def _spooled_already(self, name: str) -> bool:
        """Is the instance ``name`` queued, running, withdrawn (cancelled, not yet filed) or filed already?"""
        if not self._withdrawn.unchanged():
            self._withdrawn = Withdrawn(self.spool)
        try:
            return dependency_state(self.spool, name, self._withdrawn) is not DepState.MISSING
        except SpoolIOError:
            return True  # cannot tell: a fire is never spooled twice


def _next_after(tpl: _Template, after: datetime) -> datetime | None:
    try:
        return next_fire(tpl.rule, after.astimezone())
    except OniteError:
        return None


MAX_GONE = 10_000  # entries of recur.state kept for templates no longer in recur/


def _kept_state(state: dict[str, dict], present: set[str]) -> dict[str, dict]:
    """The entries of recur.state to keep: every present template's, and the latest MAX_GONE of those gone
    (a template moved out of recur/ and back must find its last fire, or it would spool it again)."""
    gone = sorted((name for name in state if name not in present), key=lambda name: str(state[name].get("last")),
                  reverse=True)
    kept = set(gone[:MAX_GONE]) | present
    return {name: entry for name, entry in state.items() if name in kept}


def _by_owner_in_turn(items: list[tuple[int, object]], look: int) -> list:
    """``items`` ((owner's uid, item)) taken one owner's after another's; who goes first changes with ``look``."""
    queues: dict[int, list] = {}
    for uid, item in items:
        queues.setdefault(uid, []).append(item)
    owners = sorted(queues)
    first = look % len(owners) if owners else 0
    turns = zip_longest(*(queues[uid] for uid in owners[first:] + owners[:first]), fillvalue=_GAP)
    return [item for turn in turns for item in turn if item is not _GAP]


def _coalesced(rule, since: datetime, fire: datetime) -> str | None:
    """What the log says of the fires in (since, fire) coalesced into ``fire``: how many, counted (at most
    10,000) back to COUNT_BACK before it. ``since`` may be a template's ``submitted``, its owner's word: from
    1900, a cron rule's count would cost seconds of root's drain."""
    start = max(since, fire - COUNT_BACK)
    earlier = takewhile(lambda at: at < fire, fires_after(rule, start.astimezone(fire.tzinfo)))
    missed = sum(1 for _ in islice(earlier, 10_000))
    if start > since:
        return f"{missed} earlier fire(s) not spooled in the {COUNT_BACK.days} days before it (earlier not counted)"
    return f"{missed} earlier fire(s) not spooled" if missed else None
