"""What ``onite list`` and ``onite status`` show: one JobView per job, from the file system.

Queued and running jobs are described from what anyone may see (folder,
owner, hold marker, ctime, the driver's world-readable run records), never by
reading job files: other users' jobs are private, and listing 100,000 jobs
must not open 100,000 files. Finished jobs come from their result records.

``--json`` is documented in docs/json.md; its field names are stable.
"""

from __future__ import annotations

import json
import time

from datetime import datetime, timedelta, timezone

from onite.spool.paths import SpoolDir
from onite.spool.queued import queued_folder_stats, queued_stats
from onite.spool.results import read_results, result_names
from onite.spool.scan import withdrawn_entries, running_entries, user_name
from onite.core.jobview import JobView, result_view
from onite.drain.verdicts import EXAMINE, waiting_jobs
from onite.core.policy import owner_or_root


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
    """``user_name``, asked once per uid of a listing rather than once per job."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def __call__(self, uid: int) -> str:
        name = self._names.get(uid)
        if name is None:
            name = self._names[uid] = user_name(uid)
        return name


def queued_views(spool: SpoolDir, now: datetime | None = None, *, euid: int | None = None) -> list[JobView]:
    """Queued jobs in run order; with ``now``, each with why it waits (``waiting_reasons``)."""
    users, clock = _Users(), _Clock()
    rows = queued_stats(spool)
    why = _Why(spool, rows, now, euid)
    return [JobView(name=name, uid=uid, user=users(uid), state="held" if held else "queued",
                    priority=rank or None, urgent=rank == 0, submitted=clock(ctime_ns), position=position,
                    **why(name, uid, held))
            for position, (rank, ctime_ns, name, uid, held) in enumerate(rows, 1)]




def waiting_reasons(spool: SpoolDir, head: list[tuple[int, int, str, int, bool]], now: datetime, *, euid: int,
                    host: str) -> dict[tuple[str, int], tuple[str, str]]:
    """``(name, uid) → (kind, reason)`` for the queued jobs of ``head`` (``(rank, ctime_ns, name, uid, held)``)
    whose files ``euid`` may read (root: all), as ``onite status`` decides them (onite.drain.verdicts.waiting_jobs,
    over queue.evaluate): ``("", "")`` for one that may start now; another user's held job is held.
    By owner too: another user's namesake's reason is never this job's.

    Raises:
        SpoolIOError: a folder cannot be listed.
    """
    found = {(row["name"], row["uid"]): (row["kind"], row["reason"])
             for row in waiting_jobs(spool, head, now, euid=euid, host=host)}
    for _, _, name, uid, _ in head:
        if (name, uid) not in found and owner_or_root(euid, uid):
            found[(name, uid)] = ("", "")
    return found


class _Why:
    """The waiting fields of each queued job: read from the first EXAMINE jobs' files (those the
    caller may read), known from its marker for every held job, unknown (None) for the rest."""

    HELD = {"waiting": "held", "waiting_kind": "held"}
    UNKNOWN: dict = {}

    def __init__(self, spool: SpoolDir, rows: list[tuple[int, int, str, int, bool]], now: datetime | None,
                 euid: int | None) -> None:
        self.known: dict[tuple[str, int], tuple[str, str]] = {}
        if now is None:
            self.off = True
            return
        import os

        from onite.spool.settings import default_host

        self.off = False
        self.known = waiting_reasons(spool, rows[:EXAMINE], now, euid=os.geteuid() if euid is None else euid,
                                     host=default_host(spool.config))

    def __call__(self, name: str, uid: int, held: bool) -> dict:
        if self.off:
            return self.UNKNOWN
        found = self.known.get((name, uid))
        if found is not None:
            return {"waiting": found[1], "waiting_kind": found[0]}
        return self.HELD if held else self.UNKNOWN


def running_views(spool: SpoolDir) -> list[JobView]:
    views = []
    for entry in running_entries(spool):
        info = _runinfo(spool, entry.host, entry.name)
        rank = info.get("rank")
        views.append(JobView(
            name=entry.name, uid=entry.uid, user=user_name(entry.uid), state="running",
            priority=rank or None, urgent=rank == 0,
            submitted=info.get("queued") or _when(entry.ctime_ns),
            host=entry.host,
            started=info.get("started"),
            attempt=info.get("attempt"), external_id=info.get("external_id"),
        ))
    return views


def finished_views(spool: SpoolDir, damaged: list[str] | None = None) -> list[JobView]:
    """Finished jobs: kept result records, and cancelled jobs not yet filed. The names of damaged
    records are added to ``damaged`` (spool.results)."""
    views = [result_view(r) for r in read_results(spool, damaged)]
    for entry in withdrawn_entries(spool):
        views.append(JobView(name=entry.name, uid=entry.uid, user=user_name(entry.uid), state="cancelled",
                             priority=None, urgent=False, submitted=_when(entry.ctime_ns),
                             finished=_when(entry.ctime_ns), reason=f"cancelled by {user_name(entry.uid)}"))
    return views


def list_jobs(spool: SpoolDir, *, include_all: bool = False, now: datetime | None = None,
              damaged: list[str] | None = None) -> list[JobView]:
    """Queued jobs in run order (with ``now``: why each waits); with ``include_all`` also running and
    finished ones (the names of damaged result records left out are added to ``damaged``)."""
    views = queued_views(spool, now)
    if include_all:
        views = running_views(spool) + views + finished_views(spool, damaged)
    return views


def jobs_json(spool: SpoolDir, views: list[JobView]) -> str:
    from onite.core.jsontext import dumps

    return dumps({"version": 1, "spool": str(spool.root), "jobs": [v.to_json() for v in views]})


def list_json(spool: SpoolDir, *, include_all: bool = False, now: datetime | None = None,
              damaged: list[str] | None = None) -> str:
    """``onite list --json``: ``jobs_json(spool, list_jobs(spool, include_all, now, damaged))``, the same
    text, in a fraction of the time for a long queue (queued jobs never become JobViews)."""
    from onite.core.jsontext import dumps

    elements = [dumps(v.to_json(), depth=2) for v in running_views(spool)] if include_all else []
    elements += _queued_elements(spool, now)
    if include_all:
        elements += [dumps(v.to_json(), depth=2) for v in finished_views(spool, damaged)]
    head = dumps({"version": 1, "spool": str(spool.root), "jobs": []})
    if not elements:
        return head
    return head[:-len("[]\n}")] + "[\n  " + ",\n  ".join(elements) + "\n ]\n}"


def _queued_elements(spool: SpoolDir, now: datetime | None = None) -> list[str]:
    """The JSON text of each queued job, as ``dumps(view.to_json(), depth=2)`` would write it.

    A template made from JobView.to_json (``_queued_template``) is cut where
    the fields that vary go; the text between the name and the position
    depends only on the owner, the hold and the folder, the text from the position to
    the waiting fields only on the ctime, the rest only on why the job waits,
    and each is made once for all the jobs that share it.
    """
    from json.encoder import encode_basestring_ascii as text

    pieces = _queued_template()
    users: dict[int, str] = {}
    middles: dict[tuple[int, bool, int], str] = {}
    ends: dict[int, str] = {}  # a batch of jobs shares a few thousand kernel ticks
    tails: dict[tuple, str] = {}
    clock = _Clock()
    start, name_to_position = pieces[0], pieces[1:7]
    elements = []
    append = elements.append
    position = 0
    folders = list(queued_folder_stats(spool))
    head = [(rank, *row) for rank, rows in folders for row in rows[:EXAMINE]][:EXAMINE]
    why = _Why(spool, head, now, None)
    for rank, rows in folders:
        for ctime_ns, name, uid, held in rows:
            position += 1
            queued = not held
            middle = middles.get((uid, queued, rank))
            if middle is None:
                user = users.get(uid)
                if user is None:
                    user = users[uid] = text(user_name(uid))
                values = (user, str(uid), '"queued"' if queued else '"held"', str(rank) if rank else "null",
                          "true" if rank == 0 else "false")
                middle = middles[(uid, queued, rank)] = "".join(
                    piece + value for piece, value in zip(name_to_position, values)) + name_to_position[-1]
            end = ends.get(ctime_ns)
            if end is None:
                end = ends[ctime_ns] = pieces[7] + text(clock(ctime_ns).isoformat()) + pieces[8]
            fields = why(name, uid, held)
            key = (fields.get("waiting"), fields.get("waiting_kind"))
            tail = tails.get(key)
            if tail is None:
                tail = tails[key] = "".join(("null" if value is None else text(value)) + piece
                                            for value, piece in zip(key, pieces[9:]))
            append(start + text(name) + middle + str(position) + end + tail)
    return elements


_FIELDS = ("name", "user", "uid", "state", "priority", "urgent", "position", "submitted", "waiting", "waiting_kind")
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
        from onite.core.jsontext import dumps

        text = dumps(sample.to_json(), depth=2)
        pieces = []
        for field in _FIELDS:
            before, marker, text = text.partition(json.dumps("\0" + field))
            if not marker:
                raise RuntimeError(f"JobView.to_json changed: update onite.app.listing._FIELDS ({field})")
            pieces.append(before)
        _TEMPLATE.append(pieces + [text])
    return _TEMPLATE[0]


def _runinfo(spool: SpoolDir, host: str | None, name: str) -> dict:
    """What a listing shows of a running job's run record (running/HOST/NAME@run, onite.core.runrecord):
    ``rank``, ``attempt``, ``external_id``, and ``queued`` and ``started`` as datetimes. A field
    that is missing or damaged is left out, and a record that cannot be read gives {}: a listing
    shows what it can (the record is the driver's, written as the job starts)."""
    from onite.spool import runrecords
    from onite.core import values as v
    from onite.core.config import MAX_PRIORITIES
    from onite.core.job import MAX_RETRIES
    from onite.core.timeparse import parse_stamp

    if not host:
        return {}
    record = runrecords.read(spool.run_record_path(host, name))
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


def completion_names(spool: SpoolDir, prefix: str, *, finished: bool) -> list[str]:
    """Names of queued and running jobs (and, with ``finished``, kept results) that start with
    ``prefix``, sorted: what a shell completes after ``onite cancel`` or ``onite output``."""
    names = {name for _, _, name, _, _ in queued_stats(spool)} | {e.name for e in running_entries(spool)}
    if finished:
        names.update(result_names(spool))  # names only: no record is read
    return sorted(n for n in names if n.startswith(prefix))
