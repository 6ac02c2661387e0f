"""What ``onite list`` and ``onite status`` show: one JobView per job, from the file system.

Invariant: queued and running jobs are described from what anyone may see (folder, owner, hold
marker, ctime, the run records), never by reading job files but the first EXAMINE the caller may
read (why they wait); finished jobs come from their result records.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from json.encoder import encode_basestring_ascii as quoted

from onite.app.common import label, me
from onite.spool import runrecords
from onite.spool.paths import SpoolDir
from onite.spool.queued import queued_folder_stats, queued_stats
from onite.spool.results import read_results, result_names
from onite.spool.scan import Entry, withdrawn_entries, running_entries, user_name
from onite.spool.settings import default_host
from onite.core import values as v
from onite.core.config import MAX_PRIORITIES, MAX_RETRIES
from onite.core.jobview import JobView, result_view
from onite.core.jsontext import dumps
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


def _why(spool: SpoolDir, head: list[tuple[int, int, str, int, bool]], now: datetime | None,
         euid: int | None) -> Callable[[str, int, bool], tuple[str | None, str | None]]:
    """``(name, uid, held) → (waiting, waiting_kind)`` of queued jobs: as onite.drain.verdicts decides
    it for the jobs of ``head`` whose files ``euid`` may read ("" for one that may start now), "held"
    for any held job, unknown (None) for the rest, and for every job without ``now``."""
    if now is None:
        return lambda name, uid, held: (None, None)
    from onite.drain.verdicts import waiting_jobs  # the driver's rules: not what wait or status need of listing

    euid = os.geteuid() if euid is None else euid
    known = {(row["name"], row["uid"]): (row["reason"], row["kind"])
             for row in waiting_jobs(spool, head, now, euid=euid, host=default_host(spool.config))}
    for _, _, name, uid, _ in head:
        if owner_or_root(euid, uid):
            known.setdefault((name, uid), ("", ""))
    return lambda name, uid, held: known.get((name, uid)) or (("held", "held") if held else (None, None))


def queued_views(spool: SpoolDir, now: datetime | None = None, *, euid: int | None = None) -> list[JobView]:
    """Queued jobs in run order; with ``now``, each with why it waits (``_why``)."""
    from onite.drain.verdicts import EXAMINE

    users, clock = functools.cache(user_name), _clock()
    rows = queued_stats(spool, drain_usage(spool))
    why = _why(spool, rows[:EXAMINE], now, euid)
    views = []
    for position, (rank, ctime_ns, name, uid, held) in enumerate(rows, 1):
        waiting, kind = why(name, uid, held)
        views.append(JobView(name=name, uid=uid, user=users(uid), state="held" if held else "queued",
                             priority=rank or None, urgent=rank == 0, submitted=clock(ctime_ns), position=position,
                             waiting=waiting, waiting_kind=kind))
    return views


def drain_usage(spool: SpoolDir) -> dict[str, float] | None:
    """With ``order = "fair"``: each user's running time in the drain running now (its results since
    the drain began, and its running jobs so far), as its driver orders by it; else None."""
    if spool.config.order != "fair":
        return None
    from onite.core.clock import SYSTEM
    from onite.drain.heartbeat import live_beats

    now = SYSTEM.now()
    beats = live_beats(spool.root, now)
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


def running_views(spool: SpoolDir) -> list[JobView]:
    views = []
    for entry in running_entries(spool):
        info = _runinfo(spool, entry.host, entry.name)
        rank = info.get("rank")
        views.append(JobView(name=entry.name, uid=entry.uid, user=user_name(entry.uid), state="running",
                             priority=rank or None, urgent=rank == 0,
                             submitted=info.get("queued") or _when(entry.ctime_ns), host=entry.host,
                             started=info.get("started"), attempt=info.get("attempt"),
                             external_id=info.get("external_id")))
    return views


def withdrawn_view(entry: Entry) -> JobView:
    """A job cancelled while queued that no driver has filed yet (its file in cancel/)."""
    when, user = _when(entry.ctime_ns), user_name(entry.uid)
    return JobView(name=entry.name, uid=entry.uid, user=user, state="cancelled", priority=None, urgent=False,
                   submitted=when, finished=when, reason=f"cancelled by {user}")


def finished_views(spool: SpoolDir, damaged: list[str] | None = None) -> list[JobView]:
    """Finished jobs: results, and cancelled jobs not yet filed; damaged records' names go to ``damaged``."""
    views = [result_view(r) for r in read_results(spool, damaged)]
    return views + [withdrawn_view(entry) for entry in withdrawn_entries(spool)]


def list_jobs(spool: SpoolDir, *, include_all: bool = False, now: datetime | None = None,
              damaged: list[str] | None = None) -> list[JobView]:
    """Queued jobs in run order (with ``now``: why each waits); with ``include_all``, running and finished too."""
    views = queued_views(spool, now)
    if include_all:
        views = running_views(spool) + views + finished_views(spool, damaged)
    return views


def jobs_json(spool: SpoolDir, views: list[JobView]) -> str:
    return dumps({"version": 1, "spool": str(spool.root), "jobs": [{**v.to_json(), "name": label(v.name)} for v in views]})


def list_json(spool: SpoolDir, *, include_all: bool = False, now: datetime | None = None,
              damaged: list[str] | None = None) -> str:
    """``onite list --json``: ``jobs_json(spool, list_jobs(…))``'s text, with no JobView of a queued job."""
    elements = [_element(v) for v in running_views(spool)] if include_all else []
    elements += _queued_elements(spool, now)
    if include_all:
        elements += [_element(v) for v in finished_views(spool, damaged)]
    head = dumps({"version": 1, "spool": str(spool.root), "jobs": []})
    if not elements:
        return head
    return head[:-len("[]\n}")] + "[\n  " + ",\n  ".join(elements) + "\n ]\n}"


def _element(view: JobView) -> str:
    return dumps({**view.to_json(), "name": label(view.name)}, depth=2)


def _queued_elements(spool: SpoolDir, now: datetime | None = None) -> list[str]:
    """The JSON text of each queued job, as ``dumps(view.to_json(), depth=2)`` would write it.

    The text between the template's pieces (``_queued_template``) depends on the owner, the hold and
    the folder, on the ctime, or on why the job waits: each is made once for the jobs that share it.
    """
    pieces = _queued_template()
    start, name_to_position = pieces[0], pieces[1:7]
    users = functools.cache(lambda uid: quoted(user_name(uid)))
    middles: dict[tuple[int, bool, int], str] = {}
    ends: dict[int, str] = {}  # a batch of jobs shares a few thousand kernel ticks
    tails: dict[tuple, str] = {}
    clock = _clock()
    elements = []
    position = 0
    folders = list(queued_folder_stats(spool, drain_usage(spool)))
    from onite.drain.verdicts import EXAMINE

    head = [(rank, *row) for rank, rows in folders for row in rows[:EXAMINE]][:EXAMINE]
    why = _why(spool, head, now, None)
    for rank, rows in folders:
        for ctime_ns, name, uid, held in rows:
            position += 1
            middle = middles.get((uid, held, rank))
            if middle is None:
                values = (users(uid), str(uid), '"held"' if held else '"queued"', str(rank) if rank else "null",
                          "true" if rank == 0 else "false")
                middle = middles[(uid, held, rank)] = "".join(
                    piece + value for piece, value in zip(name_to_position, values)) + name_to_position[-1]
            end = ends.get(ctime_ns)
            if end is None:
                end = ends[ctime_ns] = pieces[7] + quoted(clock(ctime_ns).isoformat()) + pieces[8]
            key = why(name, uid, held)
            tail = tails.get(key)
            if tail is None:
                tail = tails[key] = "".join(("null" if value is None else quoted(value)) + piece
                                            for value, piece in zip(key, pieces[9:]))
            elements.append(start + quoted(label(name)) + middle + str(position) + end + tail)
    return elements


_FIELDS = ("name", "user", "uid", "state", "priority", "urgent", "position", "submitted", "waiting", "waiting_kind")


@functools.cache
def _queued_template() -> list[str]:
    """JobView.to_json of a queued job (depth 2), cut where each of _FIELDS goes: to_json stays the one definition
    (RuntimeError, which a test catches, if it no longer writes _FIELDS in that order)."""
    class Stamp:
        def isoformat(self) -> str:
            return "\0submitted"

    text = dumps(JobView(**{f: "\0" + f for f in _FIELDS if f != "submitted"}, submitted=Stamp()).to_json(), depth=2)
    pieces = []
    for field in _FIELDS:
        before, marker, text = text.partition(json.dumps("\0" + field))
        if not marker:
            raise RuntimeError(f"JobView.to_json changed: update onite.app.listing._FIELDS ({field})")
        pieces.append(before)
    return pieces + [text]


def _runinfo(spool: SpoolDir, host: str | None, name: str) -> dict:
    """What a listing shows of a running job's run record: ``rank``, ``attempt``, ``external_id``, and
    ``queued`` and ``started`` as datetimes; a field missing or damaged is left out, an unreadable
    record gives {}."""
    record = runrecords.read(spool.run_record_path(host, name)) if host else None
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
    """The sorted names, as the caller types them, of their queued, running and, with ``finished``, kept
    jobs that start with ``prefix`` (root: everyone's, as USER:NAME)."""
    keys = {name for _, _, name, _, _ in queued_stats(spool)} | {e.name for e in running_entries(spool)}
    if finished:
        keys.update(result_names(spool))  # names only: no record is read
    own = f"{me()}:"
    names = (label(k) for k in keys if os.geteuid() == 0 or k.startswith(own))
    return sorted(n for n in names if n.startswith(prefix))
