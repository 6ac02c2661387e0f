"""Why queued jobs wait, in the driver's words: one answer for the driver, ``onite status`` and ``onite list``.

The same onite.core.queue.evaluate, dependency rule and admission rule the driver goes by. A job
file is private to its owner: it is read only for the asker's jobs (root: all), among the first
EXAMINE in queue order; another user's job is shown only if held (its marker is public).
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property

from onite.core.admission import Admit, Busy, admit, head_of, latest_end, room
from onite.core.errors import ConfigError, JobFormatError
from onite.core.names import shown
from onite.core.policy import owner_or_root
from onite.core.queue import READY, DepState, Fail, Meta, evaluate
from onite.core.resources import Need, host_capacity, never_fits, request_of, too_big
from onite.exec.limits import machine
from onite.spool.deps import dependency_state
from onite.spool.edits import edited, read_edited, trusted
from onite.spool.filecheck import BadFile, read_job_head
from onite.spool.paths import SpoolDir
from onite.spool.runrecords import host_records
from onite.spool.accounts import user_name
from onite.spool.scan import Withdrawn, find_queued, live_entries, queued_stats, read_markers
from onite.spool.settings import default_host

EXAMINE = 200  # queued jobs, from the head of the queue, whose reason for waiting is looked up
ELSEWHERE = "waits for another host"  # a job too big for this host: no room freed here starts it


def waiting_jobs(spool: SpoolDir, head: list[tuple[int, int, str, int, int]], now: datetime, *, euid: int,
                 host: str | None = None, limits: dict | None = None) -> list[dict]:
    """Why each of these queued jobs (``(rank, ctime_ns, name, uid, held)``, in run order) cannot start
    now on ``host`` (default: this machine's); jobs that may start, and other users' jobs that are not held,
    are left out. A job a reason names is named as ``euid``'s user writes it (NAME for their own,
    USER:NAME for another's). ``limits``, if given, gets ``(name, uid) → (mem, cpus, timeout)`` of each job read,
    as edited."""
    host = host or default_host(spool.config)
    reader = user_name(euid)
    users: dict[int, str] = {}
    folders: dict[int, str] = {}  # each rank's queue folder as a path
    found = []
    room = _Room(spool, host, now)
    # cancel/, hold/ and edit/ are listed once for the whole look: anyone may fill them
    withdrawn = Withdrawn(spool)
    doomed = _Doomed(spool, withdrawn, now, host, euid, reader)
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
            folder = folders.get(rank) or folders.setdefault(rank, str(spool.folder_for(rank, rank == 0)))
            job, _ = read_job_head(f"{folder}/{name}", spool.config.max_job_size, one_link=True)
        except FileNotFoundError:
            continue  # claimed or cancelled while we looked
        except (OSError, BadFile, JobFormatError) as err:
            found.append({**row, "kind": "unreadable", "reason": f"cannot be read: {err}"})
            continue
        job, _ = edited(job, trusted(doomed.edit_markers, name), spool.config.max_job_size)  # as the driver sees it
        if limits is not None:
            limits[(name, uid)] = (job.mem, job.cpus, job.timeout)
        asked: list[tuple[str, DepState]] = []  # (after: a key, its state)
        dependency = _asking(spool, withdrawn, asked, doomed)
        meta = Meta.of(job)
        verdict = evaluate(meta, held=held, now=now, host=host, dependency=dependency, owner=reader)
        verdict = chained(verdict, asked, doomed, reader)
        if verdict is READY:
            kind, reason = room.verdict(name, job.mem, job.cpus, job.timeout, pinned=job.pin is not None)
            if reason and room.head is not None:
                reason = reason.replace(room.head.name, shown(room.head.name, reader))
            if reason:
                found.append({**row, "kind": kind, "reason": reason})
            continue
        row["reason"] = verdict.reason
        if isinstance(verdict, Fail):
            row.update(kind="will_fail", reason=f"will fail: {verdict.reason}")
        elif verdict.reason == "held":
            row["kind"] = "held"
        elif verdict.until is not None:
            row.update(until=verdict.until.isoformat(), kind="retry" if meta.retrying else "not_before")
            if meta.retrying:
                row["reason"] = f"retry back-off: attempt {job.attempt} {verdict.reason}"
            then = evaluate(meta._replace(not_before=None), held=False, now=now, host=host, dependency=dependency,
                            owner=reader) if job.after else READY
            then = chained(then, asked, doomed, reader)
            if isinstance(then, Fail):  # the driver fails it once its time comes, unless the dependency reruns
                row["reason"] += f"; then will fail: {then.reason}"
        elif asked and asked[-1][1] is DepState.PENDING:
            dep = asked[-1][0]
            dep_state = live_entries(spool, dep, holds=doomed.holds)[0] or "finishing"
            row.update(kind="after", dependency={"name": shown(dep, reader), "state": dep_state},
                       reason=f"{verdict.reason} ({dep_state})")
        else:
            row["kind"] = "pinned"
            row["reason"] += room.unknown(job.pin)
        found.append(row)
    return found


def _asking(spool: SpoolDir, withdrawn: Withdrawn, asked: list[tuple[str, DepState]], doomed: "_Doomed | None" = None):
    """onite.spool.deps.dependency_state, each key asked and its answer appended to ``asked``; with ``doomed``, a
    queued dependency the driver fails when it picks it is failed: so is the job that waits for it."""
    def dependency(dep: str) -> DepState:
        state = dependency_state(spool, dep, withdrawn)
        asked.append((dep, state))
        return DepState.FAILED if doomed is not None and state is DepState.PENDING and doomed(dep) else state
    return dependency


def chained(verdict, asked: list[tuple[str, DepState]], doomed: "_Doomed", reader: str):
    """``verdict``, its reason saying why, where it fails for a queued dependency the driver will fail first."""
    if isinstance(verdict, Fail) and asked and asked[-1][1] is DepState.PENDING:
        dep = asked[-1][0]
        return Fail(f"dependency {shown(dep, reader)} will fail ({doomed(dep)})")
    return verdict


class _Doomed:
    """Why a queued job (a key) that a dependant waits for will fail when the driver picks it ("" if it need
    not): the driver's rule (onite.core.queue.evaluate) for it as if its time had come, followed down a
    chain of such jobs to the first that fails by itself. Only a job the asker may read is judged; a chain
    that comes back on itself is not followed round."""

    def __init__(self, spool: SpoolDir, withdrawn: Withdrawn, now: datetime, host: str, euid: int,
                 reader: str) -> None:
        self.spool, self.withdrawn, self.now, self.host, self.euid, self.reader = (spool, withdrawn, now, host,
                                                                                   euid, reader)
        self.known: dict[str, str] = {}

    @cached_property
    def edit_markers(self) -> dict:
        return read_markers(self.spool.edit_dir)

    @cached_property
    def holds(self) -> dict:
        return read_markers(self.spool.hold_dir)

    def __call__(self, key: str) -> str:
        path: list[str] = []  # followed one link at a time, not by recursion: a chain may be any length
        while key not in self.known:
            self.known[key] = ""  # while it is judged: a cycle is the driver's to fail (onite.drain.pick)
            path.append(key)
            reason, waits_for = self._judge(key)
            if waits_for is None:
                break
            key = waits_for
        else:
            reason = self.known[key]
        for judged in path:  # each job of the chain fails for the reason its end fails
            self.known[judged] = reason
        return reason

    def _judge(self, key: str) -> tuple[str, str | None]:
        """Why queued job ``key`` fails by itself, or the queued dependency it waits for first, whose fate
        is its own; ("", None): it need not fail."""
        entries = [entry for entry in find_queued(self.spool, key, self.holds) if owner_or_root(self.euid, entry.uid)]
        if not entries:
            return "", None  # running, or not the asker's to read: it may yet succeed
        job = read_edited(entries[0].path, key, entries[0].uid, self.edit_markers, self.spool.config.max_job_size)
        if job is None:
            return "", None  # gone meanwhile, or its driver sets it aside and says why
        asked: list[tuple[str, DepState]] = []
        verdict = evaluate(Meta(after=job.after), held=False, now=self.now, host=self.host,
                           dependency=_asking(self.spool, self.withdrawn, asked), owner=self.reader)
        if isinstance(verdict, Fail):
            return verdict.reason, None
        if asked and asked[-1][1] is DepState.PENDING:
            return "", asked[-1][0]
        return "", None


class _Room:
    """What this host's driver would decide for the ready jobs, in queue order, by its own rule, from its
    capacity and the running jobs' (world-readable) run records. A job it starts counts as running for
    those behind it; waiting for a slot is no reason shown."""

    def __init__(self, spool: SpoolDir, host: str, now: datetime) -> None:
        self.spool, self.host, self.now = spool, host, now
        self.room = None  # onite.core.admission.Room, measured when the first ready job asks
        self.head = None  # the first job that waits for room (onite.core.admission.Head)
        self.problem = ""  # why no driver can start on this host (its capacity is empty)

    def _measure(self):
        config = self.spool.config
        running = [Busy(rec.need, rec.latest_end()) for rec in host_records(self.spool, self.host)]
        slots = max(config.slots_for(self.host), len(running) + 1)
        capacity = host_capacity(config, self.host, machine() if self.host == default_host(config) else (None, None),
                                 slots=slots, source=str(self.spool.config_path))
        return room(self.host, capacity, running)

    @cached_property
    def hosts(self) -> dict:
        """The spool's hosts (heartbeat.spool_hosts), read once, if a job asks."""
        from onite.drain.heartbeat import spool_hosts  # only here: list imports no heartbeat code

        return spool_hosts(self.spool, self.now)

    def unknown(self, pin: str) -> str:
        """"" if ``pin`` is a host of the spool, else what that means for a job pinned to it (a misspelt,
        renamed or retired host)."""
        from onite.drain.heartbeat import RETIRED_AFTER

        return "" if pin in self.hosts else f", which no driver drains (none has in {RETIRED_AFTER / 86400:.0f} days)"

    def verdict(self, name: str, mem: int | None, cpus: int | None, timeout, *, pinned: bool = False) -> tuple[str, str]:
        """Why a ready job waits for room (``kind``, ``reason``), or ("", "") if the driver would start it."""
        config = self.spool.config
        if config.executor != "local" or self.problem:
            return ("resources", self.problem) if self.problem else ("", "")
        if self.room is None:
            try:
                self.room = self._measure()
            except ConfigError as err:
                self.problem = f"waits: {err.what}"  # the driver refuses to start (onite.drain.pick)
                return "resources", self.problem
        need, ends = request_of(mem, cpus), latest_end(self.now, timeout, config.kill_grace)
        said = admit(name, need, ends, self.room, self.head, backfill=config.backfill)
        if said.verdict is Admit.NEVER:
            try:
                elsewhere = not pinned and not never_fits(
                    config, need, {host: size for host, size in self.hosts.items() if host != self.host},
                    source=str(self.spool.config_path))
            except ConfigError as err:  # as the driver does: the config stops the job, not its request
                return "resources", f"waits: {err.what}"
            if elsewhere:
                why = too_big(need, self.room.capacity)
                return "resources", f"{ELSEWHERE}: {why} (host {self.host})"
            return "will_fail", f"will fail: {said.reason}"
        self.head = said.head
        if said.verdict in (Admit.START, Admit.BACKFILL):
            self.room = self.room.with_started(Busy(Need(need.mem, need.cpus, 0), ends))
            if self.head is not None:  # the driver's next pick measures the head's reservation again
                self.head = head_of(self.head.name, self.head.need, self.room, backfill=config.backfill)
            return "", ""
        return "resources", said.reason


SHOWN_IDLE = 3  # waiting jobs named in a drain's "nothing is due" line


# what the log, which every user reads, says of a waiting job: its kind of wait, never what its file says
PUBLIC_REASONS = {"held": "held", "not_before": "not before a set time", "retry": "retry back-off",
                  "after": "waits for a dependency", "pinned": "pinned to another host",
                  "resources": "waits for room (memory or CPUs)", "will_fail": "will fail when picked",
                  "unreadable": "its file cannot be read"}


def idle_summary(spool: SpoolDir, now: datetime, *, euid: int, host: str) -> tuple[int, str]:
    """Why a drain started nothing, for the log: how many jobs are queued, and why none can start, by
    the kind of each wait, in words that tell no one what a file says.
    Raises SpoolIOError: a folder cannot be listed."""
    stats = queued_stats(spool)
    total = len(stats)
    if not total:
        return 0, "nothing is due: the queue is empty"
    rows = waiting_jobs(spool, stats[:EXAMINE], now, euid=euid, host=host)
    parts = [f"{row['name']}: " + (ELSEWHERE if row["reason"].startswith(ELSEWHERE)
                                   else PUBLIC_REASONS.get(row["kind"], "cannot start yet")) for row in rows[:SHOWN_IDLE]]
    more = total - len(parts)
    return total, (f"nothing is due: {total} queued, none can start now ("
                   + "; ".join(parts + ([f"{more} more"] if more else [])) + ")")
