"""``onite status``: which drivers run and since when, what runs for how long, what is queued, what
waits and why, when the next drain is, and how last night went.

Everything comes from what every user may see (folders, owners, hold markers,
the drivers' heartbeats, the driver's run records and the world-readable result records),
except why a queued job waits: that needs its job file, which is private to
its owner. So the reasons are read only for jobs the caller owns (every job
for root), only among the first EXAMINE queued jobs in run order (a queue of
100,000 costs 200 reads, not 100,000), and decided by queue.evaluate with
the driver's own dependency rule (onite.spool.deps), so that status never tells a
different story from the driver. A held job is held for everyone to see
(its marker says so); another user's job that is not held is only counted.

A next drain is shown only when something will start one (onite.drain.nextdrain:
a live daemon, the systemd timer, a cron entry that ``onite cron --install``
wrote); otherwise status says no drain is scheduled and the command that
fixes it. Jobs recorded as running on a host whose driver is not alive are
warned about: nothing will finish them until a driver starts there.

``status_json`` makes the JSON document; onite.cli.statusview draws the text (with rich).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from onite.spool.paths import SpoolDir
from onite.spool.queued import queued_folder_stats
from onite.spool.scan import running_entries
from onite.drain.verdicts import EXAMINE, waiting_jobs
from onite.app.listing import running_views
from onite.core.jobview import JobView

SHOWN_FAILED = 10  # names of failed jobs in last night's summary


@dataclass
class StatusInfo:
    """What ``onite status`` shows: drivers, queue sizes, running and waiting jobs, what comes next."""

    spool: str
    now: datetime
    drivers: list[dict]
    queue: dict[str, int]
    held: int
    running: list[JobView]
    next_drain: datetime | None
    schedule: tuple[str, ...]
    until: str | None
    recurring: list[dict] = field(default_factory=list)
    location: str = ""  # which spool, and why: "system spool /var/spool/onite (default: it exists)"
    drain: object = None  # onite.drain.nextdrain.DrainPlan
    schedule_next: datetime | None = None  # the next time of `schedule`, whether or not anything starts a drain then
    warnings: list[str] = field(default_factory=list)
    last_driver: dict | None = None  # the latest heartbeat of a driver that is no longer alive
    waiting: list[dict] = field(default_factory=list)
    not_examined: int = 0  # queued jobs beyond the first EXAMINE, whose reasons were not looked up
    last_night: dict = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # result records that could not be read (left out)
    containment: dict | None = None  # how jobs are contained, as the last driver said: {"host", "kind"}


def gather(spool: SpoolDir, now: datetime, *, euid: int | None = None, host: str | None = None) -> StatusInfo:
    """Look at the spool as user ``euid`` (default: this process's) on ``host`` (default: this host).

    Raises:
        SpoolIOError: a folder cannot be listed.
    """
    import os

    from onite.spool.settings import default_host

    config = spool.config
    euid = os.geteuid() if euid is None else euid
    running = running_views(spool)
    from onite.drain import heartbeat as hb

    all_beats = hb.beats(spool.root)
    alive = hb.live_beats(spool.root, now)
    live = {b.host for b in alive}
    drivers = [{"host": beat.host, "running": True, "holder": beat.holder, "pid": beat.pid,
                "since": beat.since.isoformat(), "role": beat.kind, "started_by": beat.started_by,
                "state": str(beat.state), "jobs": [v.name for v in running if v.host == beat.host]}
               for beat in alive]
    warnings = []
    last_driver = None
    for beat in all_beats:
        if beat.host in live:
            continue
        if beat.state != "exited":
            warnings.append(f"the driver of host {beat.host} (pid {beat.pid}, started by {beat.started_by} at "
                            f"{beat.since:%Y-%m-%d %H:%M}) died without finishing")
        if last_driver is None or beat.updated > hb_time(last_driver):
            last_driver = {"host": beat.host, "pid": beat.pid, "role": "daemon" if beat.role == "daemon" else "driver",
                           "started_by": beat.started_by, "since": beat.since.isoformat(),
                           "ended": beat.ended.isoformat() if beat.ended else None,
                           "died": beat.state != "exited", "updated": beat.updated.isoformat()}
    this_host = host or default_host(config)
    orphans = [v for v in running if v.host not in live]
    for where in sorted({v.host for v in orphans}):
        # listed before the heartbeats were read: a driver that filed its job and exited in between is not
        # a dead one, so only jobs still there now are warned about
        still = {e.name for e in running_entries(spool, where)}
        names = ", ".join(v.name for v in orphans if v.host == where and v.name in still)
        if not names:
            continue
        fix = "onite run" if where == this_host else f"onite run on {where}, or onite recover --host {where} if it is gone"
        warnings.append(f"recorded as running on host {where} with no live driver there: {names} — nothing finishes "
                        f"or cancels them until a driver starts on {where} and recovers them (root: {fix})")
    queue: dict[str, int] = {"urgent": 0, **{f"P{p}": 0 for p in range(1, config.priorities + 1)}}
    held = 0
    head: list[tuple[int, int, str, int, bool]] = []  # (rank, ctime_ns, name, uid, held) of the first EXAMINE
    for rank, rows in queued_folder_stats(spool):  # counts need no JobView (100,000 queued)
        queue["urgent" if rank == 0 else f"P{rank}"] += len(rows)
        held += sum(row[3] for row in rows)
        if len(head) < EXAMINE:
            head.extend((rank, *row) for row in rows[:EXAMINE - len(head)])
    waiting = waiting_jobs(spool, head, now, euid=euid, host=this_host)
    schedule_next = None
    if config.schedule:
        from onite.core.schedule import next_drain as next_fire

        schedule_next = next_fire(config.schedule, now)  # a bad schedule is an error of every command that reads it
    from onite.drain.nextdrain import plan

    drain = plan(spool, now, host=this_host)
    warnings.extend(drain.problems)
    next_drain = drain.next.when if drain.next else None
    from onite.app.recur import upcoming

    recurring = upcoming(spool, now, limit=10)
    damaged: list[str] = []
    return StatusInfo(
        spool=str(spool.root), now=now, drivers=drivers, queue=queue, held=held, running=running,
        next_drain=next_drain, schedule=config.schedule,
        until=config.until.strftime("%H:%M") if config.until else None, recurring=recurring,
        waiting=waiting, not_examined=sum(queue.values()) - len(head), last_night=last_night(spool, now, damaged),
        damaged=damaged,
        location=spool.location.describe() if spool.location else str(spool.root), drain=drain,
        schedule_next=schedule_next, warnings=warnings, last_driver=last_driver,
        containment=containment_said(spool),
    )


def containment_said(spool: SpoolDir) -> dict | None:
    """How jobs are contained (onite.exec.contain), as the latest ``driver-start`` line in the log says:
    only a driver running as root can tell (a user's look would not find root's cgroups)."""
    from onite.core.errors import SpoolIOError
    from onite.spool.log import parse_line, tail

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
                    "limits": fields.get("limits"), "capacity": fields.get("capacity")}
    return None


def hb_time(row: dict) -> datetime:
    return datetime.fromisoformat(row["updated"])


def last_night(spool: SpoolDir, now: datetime, damaged: list[str] | None = None) -> dict:
    """How the last night went: the last drain session (``onite report``'s window: it may be a drain of
    this afternoon), or, when onite.log tells of no drain, the night of yesterday (noon to noon).
    The names of damaged result records are added to ``damaged``."""
    from onite.app.report import build, night_of

    data = build(spool, now, details=False)
    if data.kind != "drain":
        data = build(spool, now, night="yesterday", details=False)
    if damaged is not None:
        damaged.extend(data.damaged)
    failed = [j.name for j in data.jobs if j.state == "failed"]
    return {"window": data.kind, "night": (data.night or night_of(data.since)).isoformat(),
            "since": data.since.isoformat(), "until": data.until.isoformat(), "counts": data.counts,
            "timed_out": data.timed_out, "failed": failed[:SHOWN_FAILED], "failed_total": len(failed)}


def status_json(info: StatusInfo) -> str:
    def running(view: JobView) -> dict:
        elapsed = (info.now - view.started).total_seconds() if view.started else None
        return {**view.to_json(), "elapsed": elapsed}

    from onite.core.jsontext import dumps as _dumps  # json.dumps(indent=1)'s text, at C speed

    return _dumps({
        "version": 1,
        "spool": info.spool,
        "now": info.now.isoformat(),
        "drivers": info.drivers,
        "queue": info.queue,
        "queued": sum(info.queue.values()),
        "held": info.held,
        "running": [running(v) for v in info.running],
        "waiting": info.waiting,
        "not_examined": info.not_examined,
        "schedule": list(info.schedule),
        "until": info.until,
        "next_drain": info.next_drain.isoformat() if info.next_drain else None,
        "recurring": info.recurring,
        "last_night": info.last_night,
        "spool_location": info.location,
        "drain_scheduled": info.next_drain is not None,
        "next_drain_by": info.drain.next.by if info.drain and info.drain.next else None,
        "next_drain_host": info.drain.next.host if info.drain and info.drain.next else None,
        "drain_starters": [s.to_json() for s in info.drain.starters] if info.drain else [],
        "no_drain_fix": info.drain.fix if info.drain and info.next_drain is None else None,
        "schedule_next": info.schedule_next.isoformat() if info.schedule_next else None,
        "last_driver": info.last_driver,
        "warnings": info.warnings,
        "containment": info.containment,
    })
