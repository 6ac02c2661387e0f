"""Picking the next job: the first queued job, in queue order, that may start now on this host.

A candidate's file must be one a root driver may trust, its owner a real account, an urgent job an
admin's; the fields eligibility needs are read once per version of its file. A job that waits for a
reason that lasts (held, pinned elsewhere) is parked in the queue index. A file that can never run is
refused or failed. A ready job must fit what this host has free (local executor only), by
onite.core.admission.admit: in strict order nothing passes the first job that does not fit; with
``backfill`` a later job may where that cannot delay it.
"""

from __future__ import annotations

import os
from contextlib import suppress
from itertools import groupby
from operator import attrgetter
from datetime import datetime, timedelta
from enum import StrEnum

from onite.core.admission import Admission, Admit, Busy, Head, Room, admit, latest_end, room
from onite.core.errors import ConfigError, JobFormatError, Refused
from onite.core.names import split_key
from onite.core.policy import may_be_urgent, owner_or_root, urgent_refusal
from onite.core.queue import READY, DepState, Fail, Meta, Wait, cycle_reason, cycles, evaluate, fair_order
from onite.core.record import Record
from onite.core.resources import Need, host_capacity, never_fits, request_of
from onite.core.state import JobState
from onite.drain import heartbeat as hb
from onite.drain.finish import Finisher
from onite.drain.night import Night
from onite.spool.deps import dependency_state
from onite.exec.limits import machine
from onite.spool.edits import edited
from onite.spool import runrecords
from onite.spool.filecheck import SETTLING, BadFile, Settling, read_job_head
from onite.spool.files import remove_file
from onite.spool.index import Candidate
from onite.spool.accounts import user_name
from onite.spool.scan import Withdrawn, find_running, key_uid

SETTLE_LIMIT = 2.0  # seconds a file with a second link may be a submit in progress (from first sight)


class Look(StrEnum):
    """What a look at a queued file found."""

    OK = "ok"  #: a job this driver may run, its eligibility fields read
    BAD = "bad"  #: never to run: refuse it (the reason says why)
    GONE = "gone"  #: no longer there (claimed, cancelled)
    MOVED = "moved"  #: its file changed: it has a new place in the order
    SETTLING = "settling"  #: a submit's link-then-unlink in progress: look again in a moment
    FOREIGN = "foreign"  #: another user's, and this driver is not root


class Inspection(Record):
    """A look at a queued file, and what the driver needs to act on it."""

    look: Look
    st: os.stat_result | None = None
    meta: Meta | None = None
    reason: str = ""


class Picked(Record):
    """The job a pick chose, and what it was admitted with: the start holds it to exactly that."""

    cand: Candidate
    st: os.stat_result  # the stat it was judged by
    need: Need  # its request, as admitted
    backfilled: bool  # it starts past a job that waits for room
    meta: Meta  # what it was judged by (its edits in it), its time limit as admitted (backfill counted on it)


class Picker:
    """Chooses the next job for a driver; keeps what it read of the queue between picks."""

    def __init__(self, night: Night, finisher: Finisher) -> None:
        self.night = night
        self.finisher = finisher
        self._capacity: Need | None = None
        self._room: Room | None = None  # what the running jobs leave, measured once per pick
        self._head: Head | None = None  # the first job of this pick that waits for room
        self._others: dict | None = None  # the spool's other hosts, read once per pick, not once per job
        self._settling: dict[tuple[int, int], float] = {}  # (dev, ino) of a file with two links → first seen
        self._reported_foreign: set[str] = set()
        self.withdrawn = Withdrawn(night.spool)  # cancel/ by name, listed again once it changed

    def pick(self) -> Picked | None:
        """The first job that may start now; None if none may."""
        night = self.night
        now = night.clock.now()
        night.index.refresh()
        for stray in night.index.strays():  # a queued file whose name is no job's: never run, never listed
            label = os.fsdecode(os.fsencode(stray.name)[:200])  # refused/LABEL@TIME must fit in a file name
            self.finisher.move_aside(stray.path, label, None, "its name is not a job key (USER:NAME)")
        for _ in range(3):  # a file that moved in the order makes us look again, from the top
            moved = False
            self._room = self._head = self._others = None  # measured when the first ready job asks
            for cand in self._in_order(night.index.candidates()):
                seen = self._look(cand)
                if seen is None:
                    continue
                if self._ready(cand, seen, now):
                    need = request_of(seen.meta.mem, seen.meta.cpus)
                    said = self._admit(cand.name, need, seen.meta.timeout, now)
                    if said.verdict in (Admit.START, Admit.BACKFILL):
                        if self._claimed_elsewhere(cand.name):
                            continue  # a copy of a job running on another host: it waits, as on this one
                        return Picked(cand, seen.st, need, said.verdict is Admit.BACKFILL, seen.meta)
                    if said.verdict is Admit.NEVER:
                        if seen.meta.pin is None and self._fits_elsewhere(need):
                            continue  # too big for this host only: left queued for a host of the spool that fits it
                        self.finisher.fail_unstarted(cand, seen.st, said.reason)
                    elif not night.config.backfill:
                        return None  # strict order: nothing behind a job that waits for room starts
                moved = moved or seen.look is Look.MOVED
            if not moved:
                return None
        return None

    def _look(self, cand: Candidate) -> Inspection | None:
        """``inspect`` a candidate, guarded: None if its claim is here (a second one waits) or the guard
        set it aside."""
        night = self.night
        if cand.name in night.running or cand.name in night.ended:
            return None
        seen = None
        with self.finisher.guard(cand.name, cand.path):
            seen = self.inspect(cand)
        if seen is None:
            night.forget(cand)
        return seen

    def _claimed_elsewhere(self, name: str) -> bool:
        """Is ``name`` claimed on another host by a run that has not ended, as its run record (root's) says?
        Its owner may copy a running job back into a queue. A claim whose run ended holds back no retry."""
        night = self.night
        for entry in find_running(night.spool, name):
            if entry.host != night.host:
                record = runrecords.read(night.spool.run_record_path(entry.host, name))
                if record is None or not record.ended:
                    return True
        return False

    def fail_cycles(self) -> bool:
        """Fail each queued job that waits for itself through other queued jobs (made through another user's
        job, which submit cannot read, or by two edits at once), when nothing else can start; True if one was
        failed (what waits for it fails next)."""
        night = self.night
        waiting: dict[str, tuple[Candidate, Inspection]] = {}
        for cand in list(night.index.candidates()):
            seen = self._look(cand)
            if seen is not None and seen.look is Look.OK and seen.meta.after:
                waiting.setdefault(cand.name, (cand, seen))
        found = cycles({key: seen.meta.after for key, (_, seen) in waiting.items()})
        for key, cycle in found.items():
            cand, seen = waiting[key]
            self.finisher.fail_unstarted(cand, seen.st, cycle_reason(cycle, split_key(key)[0]))
        return bool(found)

    def _fits_elsewhere(self, need: Need) -> bool:
        """Could another host of the spool run a job of ``need``? (A config that fits nothing anywhere
        stops the job, not its request: it stays queued.)"""
        night = self.night
        if self._others is None:
            self._others = hb.spool_hosts(night.spool, night.clock.now(), but=night.host)
        try:
            return not never_fits(night.config, need, self._others, source=str(night.spool.config_path))
        except ConfigError:
            return True

    def capacity(self) -> Need:
        """This host's capacity: ``[hosts.NAME] mem, cpus``, else the machine's minus the reserve; slots.
        Raises ConfigError: the reserve leaves nothing of this machine for jobs."""
        if self._capacity is None:
            self._capacity = host_capacity(self.night.config, self.night.host, machine(), slots=self.night.slots,
                                           source=str(self.night.spool.config_path))
        return Need(self._capacity.mem, self._capacity.cpus, self.night.slots)  # slots may change on a reload

    def _admit(self, name: str, need: Need, timeout: timedelta | None, now: datetime) -> Admission:
        """May the ready job ``name`` start now, as far as resources go?"""
        night = self.night
        if night.runner.executor != "local":
            return Admission(Admit.START)
        if self._room is None:
            grace = night.config.kill_grace
            busy = [Busy(run.need, latest_end(run.started, run.job.timeout, grace)) for run in night.running.values()
                    if run.need is not None]
            self._room = room(night.host, self.capacity(), busy)
        said = admit(name, need, latest_end(now, timeout, night.config.kill_grace), self._room, self._head,
                     backfill=night.config.backfill)
        self._head = said.head
        return said

    def _in_order(self, cands):
        if self.night.config.order != "fair":
            return cands
        used = self.night.usage()
        return [c for _, same in groupby(cands, key=attrgetter("rank"))
                for c in fair_order(same, lambda c: split_key(c.name)[0], used)]

    def _ready(self, cand: Candidate, seen: Inspection, now) -> bool:
        """Act on one look: True if the job may start now."""
        night = self.night
        if seen.look is Look.OK:
            if night.only_timed and seen.meta.not_before is None:
                return False  # untimed jobs wait for the scheduled drain
            held = night.index.holds.held(cand.name, seen.st.st_uid)
            verdict = evaluate(seen.meta, held=held, now=now, host=night.host, dependency=self.dependency,
                              owner=split_key(cand.name)[0])
            if verdict is READY:
                return True
            if held or (seen.meta.pin and seen.meta.pin != night.host):
                night.index.park(cand)  # until its file changes: 20,000 held jobs cost nothing per pick
            if isinstance(verdict, Fail):
                self.finisher.fail_unstarted(cand, seen.st, verdict.reason)
            elif isinstance(verdict, Wait) and verdict.until is not None:
                # a retry's back-off is part of tonight's work; any other not-before time
                # is waited for only inside the night's window (`until`)
                if seen.meta.retrying or night.window_end is not None:
                    night.note_wake(verdict.until)
        elif seen.look is Look.FOREIGN:  # another user's, and this driver is not root
            night.index.park(cand)
        elif seen.look is Look.BAD:
            night.forget(cand)
            self.finisher.move_aside(cand.path, cand.name, seen.st, seen.reason)
        elif seen.look is Look.GONE:
            night.forget(cand)
        elif seen.look is Look.SETTLING:
            # look again in a moment; the jobs behind it are not held up by a user's pairs of links
            night.note_wake(now + timedelta(seconds=0.02))
        return False

    def inspect(self, cand: Candidate) -> Inspection:
        """Look at a queued file: may it run, and what does eligibility need of it?"""
        night = self.night
        try:
            st = os.lstat(cand.path)
        except FileNotFoundError:
            return Inspection(Look.GONE)
        # what may never run is judged before its place: changing its ctime over and over keeps none of it
        problem = night.jobs.problem(st)
        if problem is SETTLING:
            problem = self._settling_problem(cand, st)
            if problem is SETTLING:
                return Inspection(Look.SETTLING, st)
            if problem == "moved":
                return Inspection(Look.MOVED)
        if not problem and st.st_ctime_ns != cand.ctime_ns:
            night.index.reorder(cand, st.st_ctime_ns)
            return Inspection(Look.MOVED)
        if not problem and key_uid(cand.name) != st.st_uid:
            problem = f"a forgery: named as {split_key(cand.name)[0]}'s job, but {user_name(st.st_uid)}'s file"
        if problem:
            return Inspection(Look.BAD, st, reason=problem)
        if not owner_or_root(night.euid, st.st_uid):
            if cand.name not in self._reported_foreign:
                self._reported_foreign.add(cand.name)
                night.log.event("skip", cand.name, owner=user_name(st.st_uid),
                            reason=f"this driver runs as {user_name(night.euid)} and runs only its own jobs")
            return Inspection(Look.FOREIGN, st)
        if cand.rank == 0:
            try:
                admin = may_be_urgent(night.jobs.owner(st.st_uid), night.config.admins)
            except Refused:
                admin = False
            if not admin:
                return Inspection(Look.BAD, st, reason=urgent_refusal(user_name(st.st_uid)))
        edits = night.index.edits.of(cand.name)  # its new limits, if it was edited (onite.spool.edits)
        key = (st.st_ino, st.st_ctime_ns, st.st_size, tuple(edits))
        known = night.jobs.meta.get(cand.name)
        if known is not None and known[0] == key:
            return Inspection(Look.OK, st, known[1])
        try:
            job, st2 = read_job_head(cand.path, night.jobs.max_size)  # its body is read as it starts
        except FileNotFoundError:
            return Inspection(Look.GONE)
        except (JobFormatError, BadFile) as err:
            return Inspection(Look.BAD, st, reason=str(err))
        if (st2.st_ino, st2.st_ctime_ns, st2.st_size) != key[:3]:
            return Inspection(Look.MOVED)
        job, _ = edited(job, edits, night.jobs.max_size)
        meta = Meta.of(job)
        night.jobs.meta[cand.name] = (key, meta)
        return Inspection(Look.OK, st, meta)

    def _settling_problem(self, cand: Candidate, st: os.stat_result) -> str | Settling:
        """A queued file with a second link: a submit between its link and its unlink (no renameat2), for
        SETTLE_LIMIT from when this driver first saw it (its owner can keep its ctime fresh). After that the
        submit has died: its own dot-name is removed (the job was whole when linked); any other link is refused."""
        key = (st.st_dev, st.st_ino)
        first = self._settling.setdefault(key, self.night.clock.monotonic())
        if len(self._settling) > 1000:
            self._settling = {key: first}
        if self.night.clock.monotonic() - first < SETTLE_LIMIT:
            return SETTLING
        self._settling.pop(key, None)
        prefix = f".{cand.name}."
        with suppress(OSError), os.scandir(cand.path.parent) as it:
            for entry in it:
                if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                    other = entry.stat(follow_symlinks=False)
                    if (other.st_dev, other.st_ino) == key and other.st_uid == st.st_uid:
                        remove_file(entry.path)
                        self.night.log.event("recovered", cand.name,
                                             action="removed the second link a dead submit left", link=entry.name)
                        return "moved"
        return f"has {st.st_nlink} hard links"

    def dependency(self, key: str) -> DepState:
        """Where the dependency ``key`` stands: this driver's runs first (one that ended with status 0, not
        filed yet, is done; any other waits for its filing), then the spool's answer (onite.spool.deps)."""
        if key in self.night.ended:
            return DepState.OK if self.night.ended[key].state is JobState.DONE else DepState.PENDING
        owner = key_uid(key)
        run = self.night.running.get(key)
        if run is not None and run.owner.uid == owner:
            return DepState.PENDING
        for path in self.night.index.paths(key):  # queued: one look at its owner, not every folder's
            with suppress(OSError):  # gone since: the spool's own answer below says where it went
                if os.lstat(path).st_uid == owner:
                    return DepState.PENDING
        if not self.withdrawn.unchanged():
            self.withdrawn = Withdrawn(self.night.spool)
        return dependency_state(self.night.spool, key, self.withdrawn)
