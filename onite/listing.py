"""What ``onite list`` and ``onite status`` show: one JobView per job, from the file system.

Queued and running jobs are described from what anyone may see (folder,
owner, mode, ctime, the driver's world-readable run records), never by
reading job files: other users' jobs are private, and listing 100,000 jobs
must not open 100,000 files. Finished jobs come from their result records.

``--json`` is documented in docs/json.md; its field names are stable.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from onite import spool as sp
from onite.state import Result


@dataclass(frozen=True, kw_only=True)
class JobView:
    """One job as ``onite list`` and ``onite status`` show it."""

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
    stderr: str | None = None  # finished jobs: "separate" or "merged" (from the result record)

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
            "stderr": self.stderr,
        }


def _when(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9).astimezone()


class _Clock:
    """``_when`` for many timestamps: the same values (but within half a microsecond of a change of
    UTC offset), the local time zone looked up once per second of timestamps, not once per job."""

    def __init__(self) -> None:
        self._zones: dict[int, timezone] = {}

    def __call__(self, ns: int) -> datetime:
        second = ns // 1_000_000_000
        zone = self._zones.get(second)
        if zone is None:
            local = time.localtime(second)
            zone = self._zones[second] = timezone(timedelta(seconds=local.tm_gmtoff), local.tm_zone)
        return datetime.fromtimestamp(ns / 1e9, zone)


class _Users:
    """``sp.user_name``, asked once per uid of a listing rather than once per job."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def __call__(self, uid: int) -> str:
        name = self._names.get(uid)
        if name is None:
            name = self._names[uid] = sp.user_name(uid)
        return name


def queued_views(spool: sp.Spool) -> list[JobView]:
    users, clock = _Users(), _Clock()
    return [JobView(name=name, uid=uid, user=users(uid), state="held" if sp.is_held(mode) else "queued",
                    priority=rank or None, urgent=rank == 0, submitted=clock(ctime_ns), position=position)
            for position, (rank, ctime_ns, name, uid, mode) in enumerate(sp.queued_stats(spool), 1)]


def running_views(spool: sp.Spool) -> list[JobView]:
    views = []
    for entry in sp.running(spool):
        info = _runinfo(spool, entry.host, entry.name)
        rank = info.get("rank")
        views.append(JobView(
            name=entry.name, uid=entry.uid, user=sp.user_name(entry.uid), state="running",
            priority=rank or None, urgent=rank == 0,
            submitted=info.get("queued") or _when(entry.ctime_ns),
            host=entry.host,
            started=info.get("started"),
            attempt=info.get("attempt"), external_id=info.get("external_id"),
        ))
    return views


def finished_views(spool: sp.Spool, damaged: list[str] | None = None) -> list[JobView]:
    """Finished jobs: kept result records, and cancelled jobs not yet filed. The names of damaged
    records are added to ``damaged`` (spool.results)."""
    views = [result_view(r) for r in sp.results(spool, damaged)]
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
        external_id=result.external_id, stderr=result.stderr,
    )


def outcome_counts(views) -> dict[str, int]:
    """How many of ``views`` (finished jobs) ended done, failed and cancelled: always those three keys."""
    counts = {"done": 0, "failed": 0, "cancelled": 0}
    for view in views:
        counts[view.state] = counts.get(view.state, 0) + 1
    return counts


def list_jobs(spool: sp.Spool, *, include_all: bool = False, damaged: list[str] | None = None) -> list[JobView]:
    """Queued jobs in run order; with ``include_all`` also running and finished ones (the names of
    damaged result records left out are added to ``damaged``)."""
    views = queued_views(spool)
    if include_all:
        views = running_views(spool) + views + finished_views(spool, damaged)
    return views


def jobs_json(spool: sp.Spool, views: list[JobView]) -> str:
    from onite.jsontext import dumps

    return dumps({"version": 1, "spool": str(spool.root), "jobs": [v.to_json() for v in views]})


def list_json(spool: sp.Spool, *, include_all: bool = False, damaged: list[str] | None = None) -> str:
    """``onite list --json``: ``jobs_json(spool, list_jobs(spool, include_all, damaged))``, the same text,
    in a fraction of the time for a long queue (queued jobs never become JobViews)."""
    from onite.jsontext import dumps

    elements = [dumps(v.to_json(), depth=2) for v in running_views(spool)] if include_all else []
    elements += _queued_elements(spool)
    if include_all:
        elements += [dumps(v.to_json(), depth=2) for v in finished_views(spool, damaged)]
    head = dumps({"version": 1, "spool": str(spool.root), "jobs": []})
    if not elements:
        return head
    return head[:-len("[]\n}")] + "[\n  " + ",\n  ".join(elements) + "\n ]\n}"


def _queued_elements(spool: sp.Spool) -> list[str]:
    """The JSON text of each queued job, as ``dumps(view.to_json(), depth=2)`` would write it.

    A template made from JobView.to_json (``_queued_template``) is cut where
    the fields that vary go; the text between the name and the position
    depends only on the owner, mode and folder, the text after the position
    only on the ctime, and both are made once for all the jobs that share them.
    """
    from json.encoder import encode_basestring_ascii as text

    pieces = _queued_template()
    users: dict[int, str] = {}
    middles: dict[tuple[int, bool, int], str] = {}
    ends: dict[int, str] = {}  # a batch of jobs shares a few thousand kernel ticks
    clock = _Clock()
    start, name_to_position = pieces[0], pieces[1:7]
    elements = []
    append = elements.append
    position = 0
    for rank, rows in sp.queued_folder_stats(spool):
        for ctime_ns, name, uid, mode in rows:
            position += 1
            queued = not sp.is_held(mode)
            middle = middles.get((uid, queued, rank))
            if middle is None:
                user = users.get(uid)
                if user is None:
                    user = users[uid] = text(sp.user_name(uid))
                values = (user, str(uid), '"queued"' if queued else '"held"', str(rank) if rank else "null",
                          "true" if rank == 0 else "false")
                middle = middles[(uid, queued, rank)] = "".join(
                    piece + value for piece, value in zip(name_to_position, values)) + name_to_position[-1]
            end = ends.get(ctime_ns)
            if end is None:
                end = ends[ctime_ns] = pieces[7] + text(clock(ctime_ns).isoformat()) + pieces[8]
            append(start + text(name) + middle + str(position) + end)
    return elements


_FIELDS = ("name", "user", "uid", "state", "priority", "urgent", "position", "submitted")
_TEMPLATE: list[list[str]] = []


def _queued_template() -> list[str]:
    """JobView.to_json of a queued job, at depth 2, cut where the JSON text of each of _FIELDS goes.

    Made from JobView.to_json itself, with markers in those fields, so that
    the document keeps following whatever to_json says.

    Raises:
        RuntimeError: to_json no longer writes _FIELDS, in that order (a test catches it).
    """
    if not _TEMPLATE:
        class Stamp:
            def isoformat(self) -> str:
                return "\0submitted"

        sample = JobView(**{f: "\0" + f for f in _FIELDS if f != "submitted"}, submitted=Stamp())
        from onite.jsontext import dumps

        text = dumps(sample.to_json(), depth=2)
        pieces = []
        for field in _FIELDS:
            before, marker, text = text.partition(json.dumps("\0" + field))
            if not marker:
                raise RuntimeError(f"JobView.to_json changed: update onite.listing._FIELDS ({field})")
            pieces.append(before)
        _TEMPLATE.append(pieces + [text])
    return _TEMPLATE[0]


def _runinfo(spool: sp.Spool, host: str | None, name: str) -> dict:
    """What a listing shows of a running job's run record (running/HOST/NAME@run, onite.runrecord):
    ``rank``, ``attempt``, ``external_id``, and ``queued`` and ``started`` as datetimes. A field
    that is missing or damaged is left out, and a record that cannot be read gives {}: a listing
    shows what it can (the record is the driver's, written as the job starts)."""
    from onite import runrecord
    from onite import values as v
    from onite.config import MAX_PRIORITIES
    from onite.jobfile import MAX_RETRIES
    from onite.timeparse import parse_stamp

    if not host:
        return {}
    record = runrecord.read(spool.running_dir(host) / f"{name}{sp.RUNINFO}")
    if record is None:
        return {}
    data = record.info
    info: dict = {"queued": parse_stamp(data.get("queued")), "started": parse_stamp(data.get("started"))}
    for key, read in (("rank", lambda: v.integer(data, "rank", 0, MAX_PRIORITIES)),
                      ("attempt", lambda: v.integer(data, "attempt", 1, MAX_RETRIES + 1)),
                      ("external_id", lambda: v.optional_text(data, "external_id"))):
        try:
            info[key] = read()
        except ValueError:
            pass
    return info


def completion_names(spool: sp.Spool, prefix: str, *, finished: bool) -> list[str]:
    """Names of queued and running jobs (and, with ``finished``, kept results) that start with
    ``prefix``, sorted: what a shell completes after ``onite cancel`` or ``onite output``."""
    names = {name for _, _, name, _, _ in sp.queued_stats(spool)} | {e.name for e in sp.running(spool)}
    if finished:
        names.update(sp.result_names(spool))  # names only: no record is read
    return sorted(n for n in names if n.startswith(prefix))
