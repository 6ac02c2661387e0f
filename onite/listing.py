"""What ``onite list`` and ``onite status`` show: one JobView per job, from the file system.

Queued and running jobs are described from what anyone may see (folder,
owner, mode, ctime, the driver's world-readable run records), never by
reading job files: other users' jobs are private, and listing 100,000 jobs
must not open 100,000 files. Finished jobs come from their result records.

``--json`` is documented in docs/json.md; its field names are stable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from onite import spool as sp
from onite.state import Result


@dataclass(frozen=True, kw_only=True)
class JobView:
    name: str
    uid: int
    user: str
    state: str
    priority: int | None  # None: urgent (runs before every priority)
    urgent: bool
    submitted: datetime  # when it entered its queue (queued), or was spooled (finished)
    position: int | None = None
    host: str | None = None
    started: datetime | None = None
    finished: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    attempt: int | None = None
    external_id: str | None = None

    @property
    def duration(self) -> float | None:
        if self.started and self.finished:
            return (self.finished - self.started).total_seconds()
        return None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "user": self.user,
            "uid": self.uid,
            "state": self.state,
            "priority": self.priority,
            "urgent": self.urgent,
            "position": self.position,
            "submitted": self.submitted.isoformat(),
            "host": self.host,
            "started": self.started.isoformat() if self.started else None,
            "finished": self.finished.isoformat() if self.finished else None,
            "duration": self.duration,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "attempt": self.attempt,
            "external_id": self.external_id,
        }


def _when(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9).astimezone()


def queued_views(spool: sp.Spool) -> list[JobView]:
    views = []
    for position, entry in enumerate(sp.queued(spool), 1):
        views.append(JobView(
            name=entry.name, uid=entry.uid, user=sp.user_name(entry.uid),
            state="held" if entry.held else "queued", priority=entry.rank or None, urgent=entry.rank == 0,
            submitted=_when(entry.ctime_ns), position=position,
        ))
    return views


def running_views(spool: sp.Spool) -> list[JobView]:
    views = []
    for entry in sp.running(spool):
        info = _runinfo(spool, entry.host, entry.name)
        rank = info.get("rank")
        views.append(JobView(
            name=entry.name, uid=entry.uid, user=sp.user_name(entry.uid), state="running",
            priority=rank or None, urgent=rank == 0,
            submitted=datetime.fromisoformat(info["queued"]) if info.get("queued") else _when(entry.ctime_ns),
            host=entry.host,
            started=datetime.fromisoformat(info["started"]) if info.get("started") else None,
            attempt=info.get("attempt"), external_id=info.get("external_id"),
        ))
    return views


def finished_views(spool: sp.Spool) -> list[JobView]:
    views = [result_view(r) for r in sp.results(spool)]
    for entry in sp.cancelled_pending(spool):
        views.append(JobView(name=entry.name, uid=entry.uid, user=sp.user_name(entry.uid), state="cancelled",
                             priority=None, urgent=False, submitted=_when(entry.ctime_ns),
                             finished=_when(entry.ctime_ns), reason=f"cancelled by {sp.user_name(entry.uid)}"))
    return views


def result_view(result: Result) -> JobView:
    return JobView(
        name=result.name, uid=result.uid, user=result.user, state=str(result.state),
        priority=result.priority or None, urgent=result.urgent, submitted=result.submitted,
        host=result.host or None, started=result.started, finished=result.finished,
        exit_code=result.exit_code, signal=result.signal, reason=result.reason, attempt=result.attempt,
        external_id=result.external_id,
    )


def list_jobs(spool: sp.Spool, *, include_all: bool = False) -> list[JobView]:
    """Queued jobs in run order; with ``include_all`` also running and finished ones."""
    views = queued_views(spool)
    if include_all:
        views = running_views(spool) + views + finished_views(spool)
    return views


def jobs_json(spool: sp.Spool, views: list[JobView]) -> str:
    from onite.jsontext import dumps

    return dumps({"version": 1, "spool": str(spool.root), "jobs": [v.to_json() for v in views]})


def _runinfo(spool: sp.Spool, host: str | None, name: str) -> dict:
    if not host:
        return {}
    try:
        return json.loads((spool.running_dir(host) / f"{name}{sp.RUNINFO}").read_bytes())
    except (OSError, ValueError):
        return {}
