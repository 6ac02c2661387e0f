"""What a report's window left, as the spool is now: jobs running, queued (and why each waits), held, refused.

Invariant: nothing is written; why a job waits is onite.drain.verdicts' answer, from the caller's own
files (root: all) among the first EXAMINE queued; for a job that could start, the drain's end says why.
"""

from __future__ import annotations

import contextlib
import functools
from datetime import datetime, timedelta

from onite.app.common import label
from onite.app.listing import running_views
from onite.drain.heartbeat import live_beats
from onite.drain.verdicts import EXAMINE, waiting_jobs
from onite.spool import runrecords
from onite.spool.log import CANNOT_RECORD
from onite.spool.paths import SpoolDir
from onite.spool.queued import queued_stats
from onite.spool.scan import user_name
from onite.spool.settings import default_host
from onite.core.errors import InvalidInput
from onite.core.policy import owner_or_root
from onite.core.schedule import next_drain

PRIVATE = "another user's job: other details private"


def unfinished(data, spool: SpoolDir, refused: list):
    """``data`` (a report.ReportData) with what its window left: jobs running now, queued (left before the
    window's end, or spooled since) with why each waits, held, and ``refused`` (log lines)."""
    owner = functools.cache(user_name)
    queue = [row for row in queued_stats(spool) if data.user is None or owner(row[3]) == data.user]
    # the log's times are whole seconds: a job spooled in the drain's last second came before its end
    end = data.until + timedelta(seconds=1) if data.kind == "drain" else data.until
    end_ns = int(end.timestamp() * 1e9)
    held = sum(row[4] for row in queue)
    since = sum(not row[4] and row[1] > end_ns for row in queue)
    running = [v for v in running_views(spool) if data.user is None or v.user == data.user]
    left = {"queued": len(queue) - held - since, "since": since, "held": held, "running": len(running),
            "refused": len(refused)}
    waiting = []
    live = {beat.host for beat in live_beats(spool.root, data.now)}
    for view in running:
        waiting.append({"name": label(view.name), "user": view.user, "uid": view.uid, "priority": view.priority,
                        "urgent": view.urgent, "state": "running", "kind": "running",
                        "reason": running_reason(spool, view, view.host in live, data.drains), "command": None})
    head = queue[:EXAMINE]
    why = {row["name"]: row for row in waiting_jobs(spool, head, data.now, euid=data.reader,
                                                     host=default_host(spool.config))}
    last = max(data.drains, key=lambda d: d.ended or data.now, default=None)
    for rank, ctime_ns, name, uid, held in head:
        mine = owner_or_root(data.reader, uid)
        row = why.get(name)
        if row is None:  # it could start now, or it is another user's and not held: its file is private
            kind, reason = "left", left_reason(last, ctime_ns > end_ns, ready=mine)
        else:
            kind, reason = row["kind"], row["reason"]
        state = "held" if held else "queued"
        if not mine:  # "held: held (another user's …)" said nothing twice
            reason = PRIVATE if reason == state else f"{reason} ({PRIVATE})"
        waiting.append({"name": label(name), "user": owner(uid), "uid": uid, "priority": rank or None,
                        "urgent": rank == 0, "state": state, "kind": kind, "reason": reason,
                        "command": f"onite release {label(name)}" if state == "held" and mine else None})
    for event in refused:
        waiting.append({"name": label(event.name), "user": event.fields.get("owner", "?"), "uid": None,
                        "priority": None, "urgent": False, "state": "refused", "kind": "refused",
                        "reason": event.fields.get("reason", ""), "command": None})
    drain = None
    with contextlib.suppress(InvalidInput):
        drain = next_drain(spool.config.schedule, data.now)
    return data._replace(left=left, waiting=waiting, next_drain=drain)


def running_reason(spool: SpoolDir, view, alive: bool, drains) -> str:
    """``running on vm since 20:14``; for a claim no live driver watches, what its run record says of it."""
    since = f" since {view.started.astimezone():%H:%M}" if view.started else ""
    if alive:
        return f"running on {view.host}{since}"
    record = runrecords.read(spool.run_record_path(view.host, view.name))
    ended = None
    if record is not None and record.ended and record.ended_at:
        with contextlib.suppress(ValueError):
            ended = datetime.fromisoformat(record.ended_at).astimezone()
    what = f"ended at {ended:%H:%M}" if ended else f"started on {view.host}{since}"
    last = max((d for d in drains if d.host == view.host), key=lambda d: d.started, default=None)
    why = ": the drain stopped, as it could not record a run" if last is not None and last.reason == CANNOT_RECORD else ""
    return f"{what}, not filed: no driver runs on {view.host}{why}; the next drain there files it"


def left_reason(last, spooled_after: bool, *, ready: bool) -> str:
    """Why a job that could start (``ready``; else: whose reasons are private) is still queued."""
    if spooled_after:
        return "spooled after the drain"
    if last is not None and last.reason == "window closed":
        return f"{'ready; ' if ready else ''}left when the window closed" + (f" at {last.until}" if last.until else "")
    if last is not None and last.reason == "stopped":
        return f"{'ready; ' if ready else ''}left when the drain was stopped"
    if last is not None and last.reason == CANNOT_RECORD:
        return f"{'ready; ' if ready else ''}left when the drain stopped, as it could not record a run (a full disk?)"
    if last is not None and last.ended is None:
        return "ready: waits for a free slot of the drain running now" if ready else "waits"
    return "ready: waits for the next drain" if ready else "waits"
