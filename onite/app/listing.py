"""What ``onite list`` and ``onite status`` show: one JobView per job, from the file system.

Queued and running jobs are described from what anyone may see, never by reading job files but the first
EXAMINE the caller may read (why they wait); finished jobs come from their result records."""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from onite.app.common import label, me
from onite.spool import runrecords
from onite.spool.paths import SpoolDir
from onite.spool.results import read_results, result_names
from onite.spool.accounts import user_name
from onite.spool.scan import Entry, find_running, queued_stats, running_entries, withdrawn_entries
from onite.core import values as v
from onite.core.config import MAX_PRIORITIES, MAX_RETRIES
from onite.core.jobview import JobView, result_view
from onite.core.policy import owner_or_root
from onite.core.timeparse import parse_stamp


def _when(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9).astimezone()


def _clock() -> Callable[[int], datetime]:
    """``_when`` for many timestamps, the local zone looked up once per second of them, not once per job."""
    @functools.cache
    def zone(second: int) -> timezone:
        local = time.localtime(second)
        return timezone(timedelta(seconds=local.tm_gmtoff), local.tm_zone)

    return lambda ns: datetime.fromtimestamp(ns / 1e9, zone(ns // 1_000_000_000))


def _why(spool: SpoolDir, head: list[tuple[int, int, str, int, bool]],
         now: datetime | None) -> Callable[[str, int, bool], tuple[str | None, str | None, tuple]]:
    """``(name, uid, held) → (waiting, waiting_kind, (mem, cpus, timeout))`` of queued jobs: the driver's verdict on
    the jobs of ``head`` this process may read ("" for one that may start now), "held" for any held job, else None;
    and the limits of each it read."""
    if now is None:
        return lambda name, uid, held: (None, None, (None, None, None))
    from onite.drain.verdicts import waiting_jobs  # the driver's rules: not what wait or status need of listing

    euid = os.geteuid()
    limits: dict = {}
    known = {(row["name"], row["uid"]): (row["reason"], row["kind"])
             for row in waiting_jobs(spool, head, now, euid=euid, limits=limits)}
    for _, _, name, uid, _ in head:
        if owner_or_root(euid, uid):
            known.setdefault((name, uid), ("", ""))
    return lambda name, uid, held: (*(known.get((name, uid)) or (("held", "held") if held else (None, None))),
                                    limits.get((name, uid), (None, None, None)))


def queued_views(spool: SpoolDir, now: datetime | None = None) -> list[JobView]:
    """Queued jobs in run order; with ``now``, each with why it waits (``_why``)."""
    from onite.drain.verdicts import EXAMINE

    users, clock = functools.cache(user_name), _clock()
    rows = queued_stats(spool, drain_usage(spool))
    why = _why(spool, rows[:EXAMINE], now)
    views = []
    for position, (rank, ctime_ns, name, uid, held) in enumerate(rows, 1):
        waiting, kind, (mem, cpus, timeout) = why(name, uid, held)
        views.append(JobView(name=name, uid=uid, user=users(uid), state="held" if held else "queued",
                             priority=rank or None, urgent=rank == 0, submitted=clock(ctime_ns), position=position,
                             waiting=waiting, waiting_kind=kind, mem=mem, cpus=cpus,
                             timeout=timeout.total_seconds() if timeout is not None else None))
    return views


def drain_usage(spool: SpoolDir) -> dict[str, float] | None:
    """With ``order = "fair"``: each user's running time in the drain running now, as its driver orders by it."""
    if spool.config.order != "fair":
        return None
    from onite.core.clock import SYSTEM
    from onite.drain.heartbeat import live_beats

    now = SYSTEM.now()
    beats = live_beats(spool, now)
    if not beats:
        return {}
    since = min(beat.since for beat in beats)
    used: dict[str, float] = {}
    for record in read_results(spool):
        if record.started is not None and record.started >= since and record.duration is not None:
            used[record.user] = used.get(record.user, 0.0) + record.duration
    for view in running_views(spool):
        if view.started is not None:
            used[view.user] = used.get(view.user, 0.0) + max(0.0, (now - view.started).total_seconds())
    return used


ENDED_NOT_FILED = "ended, not filed yet"  # a running job's reason once its monitor recorded its end


def running_views(spool: SpoolDir) -> list[JobView]:
    """The claimed jobs; one whose run ended and that no driver has filed yet, with when it ended."""
    return [running_view(spool, entry) for entry in running_entries(spool)]


def withdrawn_view(entry: Entry) -> JobView:
    """A job cancelled while queued that no driver has filed yet (its file in cancel/)."""
    when, user = _when(entry.ctime_ns), user_name(entry.uid)
    return JobView(name=entry.name, uid=entry.uid, user=user, state="cancelled", priority=None, urgent=False,
                   submitted=when, finished=when, reason=f"cancelled by {user}")


def list_jobs(spool: SpoolDir, *, include_all: bool = False, now: datetime | None = None,
              damaged: list[str] | None = None) -> list[JobView]:
    """Queued jobs in run order (with ``now``: why each waits); with ``include_all``, running and finished too
    (damaged records' names go to ``damaged``)."""
    views = queued_views(spool, now)
    if include_all:
        finished = [result_view(r, me()) for r in read_results(spool, damaged)]
        views = running_views(spool) + views + finished + [withdrawn_view(e) for e in withdrawn_entries(spool)]
    return views


def list_json(spool: SpoolDir, *, include_all: bool = False, now: datetime | None = None,
              damaged: list[str] | None = None) -> str:
    """``onite list --json`` (docs/json.md)."""
    views = list_jobs(spool, include_all=include_all, now=now, damaged=damaged)
    return json.dumps({"version": 1, "spool": str(spool.root), "jobs": [{**v.to_json(), "name": label(v.name)}
                                                                         for v in views]}, indent=1)


def waits_in_slurm(view: JobView) -> bool:
    """Is this running view a job handed to Slurm that has not started there (its reason says why)?"""
    return view.state == "running" and view.started is None and bool(view.reason) and view.reason != ENDED_NOT_FILED


def slurm_wait_of(spool: SpoolDir, key: str) -> str:
    """Why running job ``key`` has not started in Slurm (``pending in Slurm (Resources)``); "" if it has."""
    views = (running_view(spool, entry) for entry in find_running(spool, key))
    return next((view.reason for view in views if waits_in_slurm(view)), "")


def running_view(spool: SpoolDir, entry: Entry) -> JobView:
    """A claimed job as its run record tells it (priority, attempt, external id, when it was queued, started and
    ended; a Slurm job's nodes, and why it waits until it starts there); a field missing or damaged is left out."""
    record = runrecords.read(spool.run_record_path(entry.host, entry.name))
    data = record.info if record is not None else {}
    started, nodes, reason, ended = parse_stamp(data.get("started")), None, "", None
    if record is not None and record.slurm_state is not None:  # handed to Slurm: it started when Slurm says
        # Slurm's start is cut to the second: the hand-over, if later, as the result will say (SlurmRunner)
        began, nodes = parse_stamp(record.slurm_started), record.slurm_nodes
        started = max(began, started) if began is not None and started is not None else began
        if started is None:  # ``pending in Slurm (Resources)``
            why = record.slurm_reason
            reason = f"{record.slurm_state.lower()} in Slurm" + (f" ({why})" if why and why != "None" else "")
    if record is not None and record.ended and (ended := parse_stamp(record.ended_at)):
        reason = ENDED_NOT_FILED
    rank, attempt, external = data.get("rank"), data.get("attempt"), data.get("external_id")
    rank = rank if v.is_whole(rank, 0, MAX_PRIORITIES) else None
    return JobView(name=entry.name, uid=entry.uid, user=user_name(entry.uid), state="running",
                   priority=rank or None, urgent=rank == 0,
                   submitted=parse_stamp(data.get("queued")) or _when(entry.ctime_ns), host=entry.host,
                   started=started, finished=ended, reason=reason, nodes=nodes,
                   attempt=attempt if v.is_whole(attempt, 1, MAX_RETRIES + 1) else None,
                   external_id=external if isinstance(external, str) else None)


def completion_names(spool: SpoolDir, prefix: str, *, live: bool = True, finished: bool = False,
                     held: bool | None = None) -> list[str]:
    """The sorted names, as the caller types them, of their (``live``) queued and running and (``finished``) kept
    jobs that start with ``prefix`` (root: everyone's). ``held``: only the queued jobs a hold holds (True) or not
    (False)."""
    keys = set()
    if live:
        keys.update(name for _, _, name, _, is_held in queued_stats(spool) if held is None or is_held == held)
    if live and held is None:
        keys.update(e.name for e in running_entries(spool))
    if finished:
        keys.update(result_names(spool))  # names only: no record is read
    own = f"{me()}:"
    if os.geteuid() == 0:
        names = (label(k) for k in keys)
    else:  # their own jobs, by NAME, or by key once they type their own ``USER:``
        names = (k if prefix.startswith(own) else label(k) for k in keys if k.startswith(own))
    return sorted(n for n in names if n.startswith(prefix))
