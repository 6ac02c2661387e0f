"""Why queued jobs wait, in the driver's words: one answer for the driver, ``onite status`` and ``onite list``.

The reasons come from queue.evaluate (onite.core.queue) with the driver's own
dependency rule (onite.spool.deps), and for room from the driver's own
admission rule (onite.core.admission.admit), so that status never tells a
different story from the driver. A reason needs the job file, which is private to its
owner: it is read only for jobs the asker owns (every job for root), and
only among the first EXAMINE queued jobs in queue order (a queue of 100,000
costs 200 reads, not 100,000). A held job is held for everyone to see (its
marker says so); another user's job that is not held is only counted (so a
user who is not root sees room decided without the requests of other users'
queued jobs, which their files keep private).
"""

from __future__ import annotations

from datetime import datetime

from onite.core.errors import JobFormatError
from onite.core.policy import owner_or_root
from onite.core.queue import READY, DepState, Fail, Meta, evaluate
from onite.spool.deps import dependency_of, dependency_state
from onite.spool.filecheck import BadFile, read_job_file
from onite.spool.holds import read_holds
from onite.spool.paths import SpoolDir
from onite.spool.queued import live_state, queued_folder_stats
from onite.spool.scan import Withdrawn, user_name

EXAMINE = 200  # queued jobs, from the head of the queue, whose reason for waiting is looked up


def waiting_jobs(spool: SpoolDir, head: list[tuple[int, int, str, int, int]], now: datetime, *, euid: int,
                 host: str) -> list[dict]:
    """Why each of these queued jobs (``(rank, ctime_ns, name, uid, held)``, in run order) cannot start now.

    Jobs that may start are left out, as are other users' jobs that are not held.
    """
    users: dict[int, str] = {}
    found = []
    room = _Room(spool, host, now)
    # cancel/ and hold/ are looked at once for the whole look, however many jobs it explains: anyone
    # may fill them, and one listing each per job examined made root's status take minutes
    withdrawn = Withdrawn(spool)
    holds: dict | None = None
    for position, (rank, ctime_ns, name, uid, held) in enumerate(head, 1):
        user = users.get(uid) or users.setdefault(uid, user_name(uid))
        row = {"name": name, "user": user, "uid": uid, "priority": rank or None, "urgent": rank == 0,
               "position": position, "state": "held" if held else "queued", "kind": "", "reason": "",
               "until": None, "dependency": None, "private": False}
        if not owner_or_root(euid, uid):
            if held:  # the marker is public; what the file says is not
                found.append({**row, "kind": "held", "reason": "held", "private": True})
            continue
        try:
            job, _ = read_job_file(spool.folder_for(rank, rank == 0) / name, spool.config.max_job_size, one_link=True)
        except FileNotFoundError:
            continue  # claimed or cancelled while we looked
        except (OSError, BadFile, JobFormatError) as err:
            found.append({**row, "kind": "unreadable", "reason": f"cannot be read: {err}"})
            continue
        asked: list[tuple[str, DepState, tuple[str, int | None]]] = []  # (after:, its state, its job and owner)

        def dependency(dep: str) -> DepState:
            job_and_owner = dependency_of(dep, uid)
            state = dependency_state(spool, *job_and_owner, withdrawn)
            asked.append((dep, state, job_and_owner))
            return state

        meta = Meta(after=job.after, not_before=job.not_before, pin=job.pin, retrying=job.attempt > 1)
        verdict = evaluate(meta, held=held, now=now, host=host, dependency=dependency)
        if verdict is READY:
            kind, reason = room.verdict(name, job.mem, job.cpus, job.timeout)
            if reason:
                found.append({**row, "kind": kind, "reason": reason})
            continue
        row["reason"] = verdict.reason
        if isinstance(verdict, Fail):
            row["kind"] = "will_fail"
            row["reason"] = f"will fail: {verdict.reason}"
        elif verdict.reason == "held":
            row["kind"] = "held"
        elif verdict.until is not None:
            row["until"] = verdict.until.isoformat()
            row["kind"] = "retry" if meta.retrying else "not_before"
            if meta.retrying:
                row["reason"] = f"retry back-off: attempt {job.attempt} {verdict.reason}"
        elif asked and asked[-1][1] is DepState.PENDING:
            dep, _, job_and_owner = asked[-1]
            if holds is None:
                holds = read_holds(spool.hold_dir)
            dep_state = live_state(spool, *job_and_owner, holds=holds) or "finishing"
            row.update(kind="after", dependency={"name": dep, "state": dep_state},
                       reason=f"{verdict.reason} ({dep_state})")
        else:
            row["kind"] = "pinned"
        found.append(row)
    return found


class _Room:
    """What the driver of this host would decide for the ready jobs, in queue order, by its own rule
    (onite.core.admission.admit) and in its words: the capacity it works out, and the running jobs as
    their run records (world-readable) say they were admitted (``mem``, ``cpus``, ``deadline``).

    A job the rule starts is counted as running for the jobs behind it, as the driver's next pick
    would. Slots are not a reason shown here: a job that waits only for a free slot is simply queued
    (the room is measured as when the next slot frees, and a job counted as started takes none)."""

    def __init__(self, spool: SpoolDir, host: str, now: datetime) -> None:
        self.spool, self.host, self.now = spool, host, now
        self.room = None  # onite.core.admission.Room, measured when the first ready job asks
        self.head = None  # the first job that waits for room (onite.core.admission.Head)
        self.problem = ""  # why no driver can start on this host (its capacity is empty)

    def _measure(self):
        from onite.core.admission import Busy, room
        from onite.core.resources import host_capacity
        from onite.exec.limits import machine
        from onite.spool.runrecords import host_records
        from onite.spool.settings import default_host

        config = self.spool.config
        running = [Busy(rec.need, rec.latest_end()) for rec in host_records(self.spool, self.host)]
        slots = max(config.slots_for(self.host), len(running) + 1)
        capacity = host_capacity(config, self.host, machine() if self.host == default_host(config) else (None, None),
                                 slots=slots)
        return room(self.host, capacity, running)

    def verdict(self, name: str, mem: int | None, cpus: int | None, timeout) -> tuple[str, str]:
        """Why a job that may start as far as the queue goes waits for room (``kind``, ``reason``), or
        ("", "") if the driver would start it."""
        from onite.core.errors import ConfigError
        from onite.core.admission import Admit, Busy, admit, head_of, latest_end
        from onite.core.resources import Need, request_of

        config = self.spool.config
        if config.executor != "local" or self.problem:
            return ("resources", self.problem) if self.problem else ("", "")
        if self.room is None:
            try:
                self.room = self._measure()
            except ConfigError as err:
                self.problem = f"waits: {err.what}"  # the driver refuses to start (onite.drain.pack)
                return "resources", self.problem
        need, ends = request_of(mem, cpus), latest_end(self.now, timeout, config.kill_grace)
        said = admit(name, need, ends, self.room, self.head, backfill=config.backfill)
        if said.verdict is Admit.NEVER:
            return "will_fail", f"will fail: {said.reason}"
        self.head = said.head
        if said.verdict in (Admit.START, Admit.BACKFILL):
            self.room = self.room.with_started(Busy(Need(need.mem, need.cpus, 0), ends))
            if self.head is not None:  # the driver's next pick measures the head's reservation again
                self.head = head_of(self.head.name, self.head.need, self.room, backfill=config.backfill)
            return "", ""
        return "resources", said.reason


SHOWN_IDLE = 3  # waiting jobs named in a drain's "nothing is due" line


# What the log, which every user reads, says of a waiting job: its kind of wait, never what its
# file says (a dependency's name, a time, a host, a request: `onite status` shows those to the owner)
PUBLIC_REASONS = {"held": "held", "not_before": "not before a set time", "retry": "retry back-off",
                  "after": "waits for a dependency", "pinned": "pinned to another host",
                  "resources": "waits for room (memory or CPUs)", "will_fail": "will fail when picked",
                  "unreadable": "its file cannot be read"}


def idle_summary(spool: SpoolDir, now: datetime, *, euid: int, host: str) -> tuple[int, str]:
    """Why a drain started nothing, for the log: how many jobs are queued, and one line saying why
    none can start now, by the kind of each job's wait (waiting_jobs), in words that tell no one
    what another user's job file says.

    Raises:
        SpoolIOError: a folder cannot be listed.
    """
    total, head = 0, []
    for rank, rows in queued_folder_stats(spool):
        total += len(rows)
        if len(head) < EXAMINE:
            head.extend((rank, *row) for row in rows[:EXAMINE - len(head)])
    if not total:
        return 0, "nothing is due: the queue is empty"
    rows = waiting_jobs(spool, head, now, euid=euid, host=host)
    parts = [f"{row['name']}: {PUBLIC_REASONS.get(row['kind'], 'cannot start yet')}" for row in rows[:SHOWN_IDLE]]
    more = total - len(parts)
    return total, (f"nothing is due: {total} queued, none can start now ("
                   + "; ".join(parts + ([f"{more} more"] if more else [])) + ")")
