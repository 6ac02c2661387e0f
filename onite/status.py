"""``onite status``: which drivers run, what is queued and running, when the next drain is."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from onite import spool as sp
from onite.listing import JobView, running_views
from onite.locks import is_held, lock_files, lock_owner


@dataclass
class StatusInfo:
    """What ``onite status`` shows: drivers, queue sizes, running jobs, what comes next."""

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


def gather(spool: sp.Spool, now: datetime) -> StatusInfo:
    config = spool.config
    drivers = []
    for host, path in lock_files(spool.root):
        if is_held(path):
            drivers.append({"host": host, "running": True, "holder": lock_owner(path)})
    queue: dict[str, int] = {"urgent": 0, **{f"P{p}": 0 for p in range(1, config.priorities + 1)}}
    held = 0
    for rank, rows in sp.queued_folder_stats(spool):  # counts need no JobView (100,000 queued)
        queue["urgent" if rank == 0 else f"P{rank}"] += len(rows)
        held += sum(sp.is_held(mode) for _, _, _, mode in rows)
    next_drain = None
    if config.schedule:
        from onite.schedule import next_drain as next_fire

        next_drain = next_fire(config.schedule, now)
    from onite.recur import upcoming

    recurring = upcoming(spool, now, limit=10)
    return StatusInfo(
        spool=str(spool.root), now=now, drivers=drivers, queue=queue, held=held, running=running_views(spool),
        next_drain=next_drain, schedule=config.schedule,
        until=config.until.strftime("%H:%M") if config.until else None, recurring=recurring,
    )


def status_json(info: StatusInfo) -> str:
    return json.dumps({
        "version": 1,
        "spool": info.spool,
        "now": info.now.isoformat(),
        "drivers": info.drivers,
        "queue": info.queue,
        "queued": sum(info.queue.values()),
        "held": info.held,
        "running": [v.to_json() for v in info.running],
        "schedule": list(info.schedule),
        "until": info.until,
        "next_drain": info.next_drain.isoformat() if info.next_drain else None,
        "recurring": info.recurring,
    }, indent=1)


def render_status(console, info: StatusInfo) -> None:
    from onite.render import human_duration, jobs_table

    console.print(f"spool     {info.spool}")
    if info.drivers:
        for d in info.drivers:
            console.print(f"driver    running on {d['host']} ({d['holder'] or 'pid unknown'})")
    else:
        console.print("driver    not running")
    if info.next_drain:
        wait = human_duration((info.next_drain - info.now).total_seconds())
        console.print(f"next run  {info.next_drain:%Y-%m-%d %H:%M} (in {wait})"
                      + (f", until {info.until}" if info.until else ""))
    else:
        console.print("next run  none scheduled (schedule is empty)")
    counts = ", ".join(f"{k} {v}" for k, v in info.queue.items() if v) or "empty"
    console.print(f"queued    {sum(info.queue.values())} ({counts})" + (f"; {info.held} held" if info.held else ""))
    if info.running:
        console.print(f"running   {len(info.running)}")
        console.print(jobs_table(info.running, info.now, detailed=True))
    for rec in info.recurring:
        when = datetime.fromisoformat(rec["next"])
        wait = human_duration((when - info.now).total_seconds())
        pri = "urgent" if rec.get("urgent") else f"P{rec['priority']}" if rec.get("priority") else "?"
        console.print(f"recurring {rec['name']} ({rec['user']}, {pri}, {rec['rule']}) next {when:%Y-%m-%d %H:%M} (in {wait})")
