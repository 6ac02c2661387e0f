"""``onite status``: drivers, what runs, what is queued and why it waits, the next drain, how last night went.

Only what every user may see is read, but for why a queued job waits: the caller's own job files among the first
EXAMINE, by the driver's own rules."""

from __future__ import annotations

import json
import os
from datetime import datetime

from onite.app.common import label, pam_fix
from onite.app.listing import running_views
from onite.app.recur import TemplateView, upcoming
from onite.app.report import build, night_of
from onite.core.record import Record
from onite.drain import heartbeat as hb
from onite.drain.nextdrain import DrainPlan, plan
from onite.drain.verdicts import EXAMINE, waiting_jobs
from onite.spool.log import parse_line, tail, unreadable
from onite.spool.paths import SpoolDir
from onite.spool.scan import queued_folder_stats, running_entries
from onite.spool.settings import spooling
from onite.core.errors import SpoolIOError
from onite.core.jobview import JobView
from onite.core.policy import CutoffState
from onite.core.schedule import next_drain

SHOWN_FAILED = 10  # names of failed jobs in last night's summary


class StatusInfo(Record):
    """What ``onite status`` shows: drivers, queue sizes, running and waiting jobs, what comes next."""

    spool: str
    now: datetime
    drivers: list[dict]
    queue: dict[str, int]
    held: int
    running: list[JobView]
    schedule: tuple[str, ...]
    until: str | None
    drain: DrainPlan  # what will drain the spool next, or why nothing will
    recurring: list[TemplateView]  # the next due
    location: str  # which spool, and why: "system spool /var/spool/onite (default: it exists)"
    schedule_next: datetime | None  # the next time of `schedule`, whether or not anything starts a drain then
    warnings: list[str]
    last_driver: dict | None  # the latest heartbeat of a driver that is no longer alive
    waiting: list[dict]
    not_examined: int  # queued jobs beyond the first EXAMINE, whose reasons were not looked up
    last_night: dict
    containment: dict | None  # how jobs are contained, as the last driver said: {"host", "kind"}
    spooling: CutoffState  # whether submissions are refused now (the cutoff), and until when
    cutoff: str | None  # onite.toml's, HH:MM


def gather(spool: SpoolDir, now: datetime) -> StatusInfo:
    """Look at the spool as this process's user, on this host."""
    config = spool.config
    running = running_views(spool)
    every_beat = hb.beats(spool)
    alive = [beat for beat in every_beat if hb.is_alive(beat, now)]
    live = {b.host for b in alive}
    drivers = [{"host": beat.host, "running": True, "holder": beat.holder, "pid": beat.pid,
                "since": beat.since, "role": beat.kind, "started_by": beat.started_by,
                "state": str(beat.state), "jobs": [label(v.name) for v in running if v.host == beat.host]}
               for beat in alive]
    dead = [beat for beat in every_beat if beat.host not in live]
    warnings = [f"the driver of host {beat.host} (pid {beat.pid}, started by {beat.started_by} at "
                f"{beat.since:%Y-%m-%d %H:%M}) died without finishing" for beat in dead if beat.state != "exited"]
    last = max(dead, key=lambda beat: beat.updated, default=None)
    last_driver = last and {"host": last.host, "pid": last.pid, "role": last.kind, "started_by": last.started_by,
                            "since": last.since, "ended": last.ended, "died": last.state != "exited",
                            "updated": last.updated}
    for where in sorted({v.host for v in running}):
        if gone := hb.driver_gone(spool, where, now):
            # a driver that filed its job and exited since the listing is no dead one: only jobs still there count
            still = {e.name for e in running_entries(spool, where)}
            warnings += [f"{label(v.name)} is running, but {gone}" for v in running if v.host == where and v.name in still]
    queue: dict[str, int] = {"urgent": 0, **{f"P{p}": 0 for p in range(1, config.priorities + 1)}}
    held = 0
    head: list[tuple[int, int, str, int, bool]] = []  # (rank, ctime_ns, name, uid, held) of the first EXAMINE
    for rank, rows in queued_folder_stats(spool):  # counts need no JobView (100,000 queued)
        key = "urgent" if rank == 0 else f"P{rank}"
        if rows or key in queue:  # a folder beyond priorities (lowered since) is shown only while it holds jobs
            queue[key] = queue.get(key, 0) + len(rows)
        held += sum(row[3] for row in rows)
        head.extend((rank, *row) for row in rows[:EXAMINE - len(head)])
    drain = plan(spool, now)
    schedule_next = next_drain(config.schedule, now)  # onite.toml's check refused a bad one (a warning above)
    return StatusInfo(
        spool=str(spool.root), now=now, drivers=drivers, queue=queue, held=held, running=running,
        schedule=config.schedule,
        until=config.until.strftime("%H:%M") if config.until else None, recurring=upcoming(spool, now),
        waiting=[{**row, "name": label(row["name"])} for row in waiting_jobs(spool, head, now, euid=os.geteuid())],
        not_examined=sum(queue.values()) - len(head), last_night=last_night(spool, now),
        location=spool.location.describe() if spool.location else str(spool.root), drain=drain,
        schedule_next=schedule_next,
        warnings=[*warnings, *unread_log(spool), *untrusted(spool.root), *full_disk(spool.root), *drain.problems],
        last_driver=last_driver,
        containment=containment_said(spool), spooling=spooling(config, now),
        cutoff=config.cutoff.strftime("%H:%M") if config.cutoff else None,
    )


def unread_log(spool: SpoolDir) -> list[str]:
    """A warning if onite.log cannot be read: last night's counts and the drivers' own lines come from it."""
    problem = unreadable(spool.log_path)
    if problem is None:
        return []
    return [f"{problem}: last night is not shown — ask root to make it readable (onite makes it 0644)"]


def untrusted(root) -> list[str]:
    """A warning if its driver (run by the spool's owner: root for a system spool) would refuse the spool, as
    someone else could have changed it (onite.spool.trust): each drain would start, say so and exit."""
    from onite.core.errors import Refused
    from onite.spool import trust

    try:
        owner = os.stat(root).st_uid
        trust.check(trust.resolve(root, owner, "onite run"), owner, "onite run")  # a link on its path too
    except Refused as err:
        return [str(err)]
    except OSError:
        pass
    return []


FULL_BYTES, FULL_INODES = 256 << 10, 64  # less free than this on the spool's file system: it is full


def full_disk(root) -> list[str]:
    """A warning if the spool's file system is (nearly) full, as a user's job sees it."""
    try:
        st = os.statvfs(root)
    except OSError:
        return []
    free = st.f_bavail * st.f_frsize
    inodes = st.f_favail if st.f_files else None  # 0 files: a file system that does not count inodes
    if free >= FULL_BYTES and (inodes is None or inodes >= FULL_INODES):
        return []
    return [f"the spool's file system is full ({free >> 10} KiB" + (f", {inodes} inodes" if inodes is not None else "")
            + " free): jobs' output is cut short, and a driver that cannot record a run starts nothing more"
            " until there is room (root: the largest files of stdout/ are jobs' output)"]


def containment_said(spool: SpoolDir) -> dict | None:
    """How jobs are contained, as the latest ``driver-start`` line says (only root's driver can tell)."""
    try:
        lines = tail(spool.log_path, 2000)
    except SpoolIOError:
        return None
    for line in reversed(lines):
        if " driver-start " not in line:
            continue
        event = parse_line(line)
        if event is not None and event["event"] == "driver-start" and event["fields"].get("contain"):
            fields = event["fields"]
            return {"host": event["host"], "kind": fields["contain"], "since": event["time"],
                    "limits": fields.get("limits"), "capacity": fields.get("capacity"), "pam": fields.get("pam"),
                    "pam_fix": pam_fix(spool) if fields.get("pam") else None}  # as it is now, not as it was
    return None


def last_night(spool: SpoolDir, now: datetime) -> dict:
    """How the last drain session (else yesterday's night) went, so far, as onite.log tells it."""
    data = build(spool, now, records=False)
    if data.kind != "drain":
        data = build(spool, now, night="yesterday", records=False)
    failed = list(dict.fromkeys(label(j.name) for j in data.jobs if j.state == "failed"))
    return {"window": data.kind, "night": (data.night or night_of(data.since)).isoformat(),
            "since": data.since.isoformat(), "until": data.until.isoformat(), "counts": data.counts,
            "timed_out": data.timed_out, "failed": failed[:SHOWN_FAILED], "failed_total": len(failed),
            "draining": data.kind == "drain" and data.draining, "next": _next_steps(data)}


def _next_steps(data) -> list[str]:
    """The next step for the caller's own failures among the first SHOWN_FAILED. Read without records, every run
    looks pruned: a pruned one's restart says itself that it is not kept."""
    if not data.failures:  # a night without failures has no step to tell: the report's wording is not imported
        return []
    from onite.app.reporttext import next_step, told_failures

    data = data._replace(pruned=set())
    steps = (next_step(data, job) for job in told_failures(data)[0][:SHOWN_FAILED])
    return [step for step in steps if step]


def status_json(info: StatusInfo) -> str:
    nxt = info.drain.next
    return json.dumps({
        "version": 1,
        "spool": info.spool,
        "now": info.now.isoformat(),
        "drivers": info.drivers,
        "queue": info.queue,
        "queued": sum(info.queue.values()),
        "held": info.held,
        "running": [{**v.to_json(), "name": label(v.name),
                     "elapsed": (info.now - v.started).total_seconds() if v.started else None}
                    for v in info.running],
        "waiting": info.waiting,
        "not_examined": info.not_examined,
        "schedule": list(info.schedule),
        "until": info.until,
        "next_drain": nxt.when.isoformat() if nxt else None,
        "recurring": [{key: doc[key] for key in ("name", "user", "rule", "next", "priority", "urgent", "waits_for")}
                      for doc in (view.to_json() for view in info.recurring)],
        "last_night": info.last_night,
        "spool_location": info.location,
        "drain_scheduled": nxt is not None,
        "next_drain_by": nxt.by if nxt else None,
        "next_drain_host": nxt.host if nxt else None,
        "drain_starters": [s.to_json() for s in info.drain.starters],
        "no_drain_fix": None if nxt else info.drain.fix,
        "schedule_next": info.schedule_next.isoformat() if info.schedule_next else None,
        "last_driver": info.last_driver,
        "warnings": info.warnings,
        "containment": info.containment,
        "spooling": {"open": not info.spooling.closed, "cutoff": info.cutoff,
                     "reopens": info.spooling.reopens.isoformat() if info.spooling.reopens else None},
    }, indent=1, default=datetime.isoformat)  # the drivers' times
