"""Picking the next job: the first queued job, in queue order, that may start now on this host.

The queue index (onite.spool.index) gives the queued jobs in order without
listing a folder per pick. Each candidate is looked at (``inspect``): its
file must be one a root driver may trust (onite.spool.filecheck), its owner
a real account (remembered for IDENTITY_TTL), and an urgent job an admin's;
then the few fields eligibility needs are read once per file version and
``evaluate``d (onite.core.queue) with the driver's own view of dependencies.
A job that waits for a reason that lasts (held, pinned elsewhere, another
user's under a plain driver) is parked in the index, so that twenty
thousand held jobs cost nothing per pick. A file that can never run is
handed to the finisher to be refused (moved to refused/) or failed.

Invariant: nothing here moves a file; the picker decides, the driver's
other rooms act (onite.drain.start claims, onite.drain.finish files).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from onite.core.errors import JobFormatError, OniteError, Refused
from onite.core.job import Job
from onite.core.policy import may_be_urgent, urgent_refusal
from onite.core.queue import READY, DepState, Fail, Meta, Wait, evaluate
from onite.core.admission import Admit
from onite.core.resources import Need
from onite.exec.identity import Identity, resolve
from onite.spool.deps import dependency_of, dependency_state
from onite.spool.filecheck import SETTLING, BadFile, Settling, file_problem, read_job_file
from onite.spool.holds import is_held
from onite.spool.index import Candidate
from onite.spool.recurstate import run_name_owner
from onite.spool.results import kept_owner
from onite.spool.scan import Withdrawn, stat_entry, user_name

if TYPE_CHECKING:
    from onite.drain.driver import Driver

IDENTITY_TTL = 1.0  # seconds an owner's account, as read from the system, is trusted
SETTLE_LIMIT = 2.0  # seconds a file with a second link may be a submit in progress (from first sight)
PARSED_KEPT = 64  # full jobs kept parsed: only the few near the head of the queue


class Look(StrEnum):
    """What a look at a queued file found."""

    OK = "ok"  #: a job this driver may run, its eligibility fields read
    BAD = "bad"  #: never to run: refuse it (the reason says why)
    GONE = "gone"  #: no longer there (claimed, cancelled)
    MOVED = "moved"  #: its file changed: it has a new place in the order
    SETTLING = "settling"  #: a submit's link-then-unlink in progress: look again in a moment
    FOREIGN = "foreign"  #: another user's, and this driver is not root


@dataclass
class Inspection:
    """A look at a queued file, and what the driver needs to act on it."""

    look: Look
    st: os.stat_result | None = None
    meta: Meta | None = None
    reason: str = ""


class Picked(NamedTuple):
    """The job a pick chose, and what it was admitted with: the start holds it to exactly that, whatever
    its owner writes into its file meanwhile (onite.drain.start)."""

    cand: Candidate
    st: os.stat_result  # the stat it was judged by
    need: Need  # its request, as admitted (onite.drain.pack)
    timeout: timedelta | None  # its time limit, as admitted (backfill counted on it)


class Picker:
    """Chooses the next job for a driver; keeps what it read of the queue between picks."""

    def __init__(self, driver: Driver) -> None:
        self.d = driver
        self.meta: dict[str, tuple[tuple[int, int, int], Meta]] = {}  # name → (file version, eligibility)
        self.parsed: dict[str, tuple[tuple[int, int, int], Job]] = {}  # the few full jobs near the head
        self._identities: dict[int, tuple[float, Identity | Refused]] = {}
        self._settling: dict[tuple[int, int], float] = {}  # (dev, ino) of a file with two links → first seen
        self._reported_foreign: set[str] = set()
        self.backfilled = False  # the job last picked starts past a waiting one (onite.drain.pack)
        self.withdrawn = Withdrawn(driver.spool)  # cancel/ by name, listed again once it changed

    def pick(self) -> Picked | None:
        """The first job that may start now, with the stat it was judged by and what it was admitted
        with; None if none may."""
        d = self.d
        now = d.clock.now()
        d.index.refresh()
        for stray in d.index.strays():  # a queued file whose name is no job's: never run, never listed
            try:
                st = os.lstat(stray.path)
            except OSError:
                continue
            label = os.fsdecode(os.fsencode(stray.name)[:200])  # refused/LABEL@TIME must fit in a file name
            d.finisher.move_aside(stray.path, label, st, "its name is not a job name")
        for _ in range(3):  # a file that moved in the order makes us look again, from the top
            moved = False
            d.packer.begin()
            for cand in d.index.candidates():
                if cand.name in d.running:  # a job of that name runs here: a second one waits its turn
                    continue
                seen = None
                with d.finisher.guard(cand.name, cand.path):
                    seen = self.inspect(cand)
                if seen is None:  # the guard set it aside
                    self.forget(cand)
                    continue
                picked = self._judge(cand, seen, now)
                if picked is True:
                    need = d.packer.need_of(seen.meta.mem, seen.meta.cpus)
                    admit = d.packer.admit(cand.name, need, seen.meta.timeout, now)
                    if admit in (Admit.START, Admit.BACKFILL):
                        problem, own_name = self._namesake_problem(cand, seen.st)
                        if problem:
                            self.forget(cand)  # a result only where the name is not another job's
                            d.finisher.move_aside(cand.path, cand.name, seen.st, problem, file_result=own_name)
                            continue
                        self.backfilled = admit is Admit.BACKFILL
                        return Picked(cand, seen.st, need, seen.meta.timeout)
                    if admit is Admit.NEVER:
                        d.finisher.fail_unstarted(cand, seen.st, d.packer.reason)
                    elif not d.config.backfill:
                        return None  # strict order: nothing behind a job that waits for room starts
                moved = moved or picked is Look.MOVED
            if not moved:
                return None
        return None

    def _judge(self, cand: Candidate, seen: Inspection, now) -> bool | Look | None:
        """Act on one look: True if the job may start now; Look.MOVED if the order changed under us."""
        d = self.d
        if seen.look is Look.OK:
            if d.only_timed and seen.meta.not_before is None:
                return None  # untimed jobs wait for the scheduled drain
            held = is_held(seen.st.st_mode) or d.index.holds.held(cand.name, seen.st.st_uid)
            owner = seen.st.st_uid
            verdict = evaluate(seen.meta, held=held, now=now, host=d.host,
                               dependency=lambda dep: self.dependency(dep, owner))
            if verdict is READY:
                return True
            if held or (seen.meta.pin and seen.meta.pin != d.host):
                d.index.park(cand)  # until its file changes: 20,000 held jobs cost nothing per pick
            if isinstance(verdict, Fail):
                d.finisher.fail_unstarted(cand, seen.st, verdict.reason)
            elif isinstance(verdict, Wait) and verdict.until is not None:
                # a retry's back-off is part of tonight's work; any other not-before time
                # is waited for only inside the night's window (`until`)
                if seen.meta.retrying or d.window_end is not None:
                    d.note_wake(verdict.until)
        elif seen.look is Look.FOREIGN:  # another user's, and this driver is not root
            d.index.park(cand)
        elif seen.look is Look.BAD:
            self.forget(cand)
            d.finisher.move_aside(cand.path, cand.name, seen.st, seen.reason)
        elif seen.look is Look.GONE:
            self.forget(cand)
        elif seen.look is Look.SETTLING:
            # a submit between its link and its unlink (where there is no renameat2): look again in
            # a moment. Jobs behind it are not held up: a user's pairs of links would otherwise
            # delay everyone's night by SETTLE_LIMIT each
            d.note_wake(now + timedelta(seconds=0.02))
        return seen.look if seen.look is Look.MOVED else None

    def _namesake_problem(self, cand: Candidate, st: os.stat_result) -> tuple[str, bool]:
        """Why a job about to start must not, because its name is another user's job's ("" if not),
        and whether its result is its own to write (True where no other job has the name: the name
        of a recurring job's run that is not running).
        onite submit refuses a name that is queued or running, and takes its job back if another
        user's file of the name got its place first while it wrote it (onite.spool.queued.contested);
        a file put in a queue folder by hand beside another user's job of the same name would take
        that job's place, its result and what waits for it (``--after``).

        - The name of a recurring job's run is its template's owner's (if the template is older
          than the file): another user's file of it is refused, whenever it was put there.
        - Otherwise the file that got its place first keeps the name (the kernel's ctime, which no
          user sets); with two of one ctime, neither (either could be the real one).
        - One running on another host keeps it. (One running here is never beside a candidate: the
          candidate waits, ``pick``.) A claim here that this driver does not run is one recovery
          could not put back: the candidate's claim would replace it (a rename), so it is refused."""
        d = self.d
        reserved = run_name_owner(d.spool, cand.name)
        if reserved is not None and reserved[2] < st.st_ctime_ns:
            template, owner = reserved[0], reserved[1]
            if owner != st.st_uid:
                return f"its name is that of {user_name(owner)}'s recurring job {template}'s runs", True
        for other in d.index.namesakes(cand):
            try:
                ost = os.lstat(other.path)
            except OSError:
                continue
            if ost.st_uid == st.st_uid:
                continue  # the owner's own pair (a race of theirs)
            if reserved is not None and reserved[2] < st.st_ctime_ns:  # the name is this job's owner's
                d.finisher.set_aside_namesake(other, f"its name is that of {user_name(st.st_uid)}'s recurring "
                                                     f"job {reserved[0]}'s runs")
                continue
            if ost.st_ctime_ns > st.st_ctime_ns:
                continue  # a later file: refused when it comes to start
            if ost.st_ctime_ns == st.st_ctime_ns:
                d.finisher.set_aside_namesake(other, f"{user_name(st.st_uid)}'s job of that name was queued at "
                                                     "the same moment: which is the real one cannot be told")
                return (f"{user_name(ost.st_uid)}'s job of that name was queued at the same moment: which is the "
                        "real one cannot be told"), False
            return f"another user's job of that name ({user_name(ost.st_uid)}'s) was queued before it", False
        try:
            for host in d.spool.hosts():
                entry = stat_entry(d.spool.running_dir(host), cand.name, host=host)
                if entry is None:
                    continue
                if host == d.host:
                    return (f"a claim of that name ({user_name(entry.uid)}'s) is still in running/{host}, not put "
                            "back in its queue"), False
                if entry.uid != st.st_uid:
                    return f"another user's job of that name ({user_name(entry.uid)}'s) is running on {host}", False
        except OniteError:  # running/ cannot be looked into: the claim that follows will say so
            pass
        try:  # its result would replace another user's kept one, and its output (submit refuses it); one
            kept = kept_owner(d.spool, cand.name)  # queued before that job was (ctime) did not take its name
        except OniteError:
            kept = None
        if kept is not None and kept[0] != st.st_uid and st.st_ctime_ns > kept[1]:
            return f"its name is that of {user_name(kept[0])}'s finished job, whose result is kept", False
        return "", False

    def forget(self, cand: Candidate) -> None:
        """The job left its queue folder (claimed, failed, refused, gone): drop all that is kept of it."""
        self.d.index.forget(cand)
        self.meta.pop(cand.name, None)
        self.parsed.pop(cand.name, None)

    def inspect(self, cand: Candidate) -> Inspection:
        """Look at a queued file: may it run, and what does eligibility need of it?"""
        d = self.d
        try:
            st = os.lstat(cand.path)
        except FileNotFoundError:
            return Inspection(Look.GONE)
        if st.st_ctime_ns != cand.ctime_ns:
            d.index.reorder(cand, st.st_ctime_ns)
            return Inspection(Look.MOVED)
        problem = self.file_problem(st)
        if problem is SETTLING:
            problem = self._settling_problem(cand, st)
            if problem is SETTLING:
                return Inspection(Look.SETTLING, st)
            if problem == "moved":
                return Inspection(Look.MOVED)
        if problem:
            return Inspection(Look.BAD, st, reason=problem)
        if d.euid != 0 and st.st_uid != d.euid:
            if cand.name not in self._reported_foreign:
                self._reported_foreign.add(cand.name)
                d.log.event("skip", cand.name, owner=user_name(st.st_uid),
                            reason=f"this driver runs as {user_name(d.euid)} and runs only its own jobs")
            return Inspection(Look.FOREIGN, st)
        if cand.rank == 0 and not self._may_be_urgent(st.st_uid):
            return Inspection(Look.BAD, st, reason=urgent_refusal(user_name(st.st_uid)))
        key = (st.st_ino, st.st_ctime_ns, st.st_size)
        cached = self.meta.get(cand.name)
        if cached and cached[0] == key:
            return Inspection(Look.OK, st, cached[1])
        try:
            job, st2 = self.read_job(cand.path)
        except FileNotFoundError:
            return Inspection(Look.GONE)
        except (JobFormatError, BadFile) as err:
            return Inspection(Look.BAD, st, reason=str(err))
        if (st2.st_ino, st2.st_ctime_ns, st2.st_size) != key:
            return Inspection(Look.MOVED)
        meta = Meta(after=job.after, not_before=job.not_before, pin=job.pin, retrying=job.attempt > 1,
                    mem=job.mem, cpus=job.cpus, timeout=job.timeout)
        self.meta[cand.name] = (key, meta)
        self.parsed[cand.name] = (key, job)
        if len(self.parsed) > PARSED_KEPT:
            self.parsed.pop(next(iter(self.parsed)))
        return Inspection(Look.OK, st, meta)

    def _settling_problem(self, cand: Candidate, st: os.stat_result) -> str | Settling:
        """A queued file with a second link: a submit between its link and its unlink (where the
        file system has no renameat2), for a moment only. Counted from when this driver first saw
        it, not from the file's ctime, which its owner can keep fresh with chmod: after
        SETTLE_LIMIT the submit has died (or it is no submit at all). Its own dot-name beside it,
        same file, is then removed (the job was complete when it was linked); any other second
        link is refused."""
        key = (st.st_dev, st.st_ino)
        first = self._settling.setdefault(key, self.d.clock.monotonic())
        if len(self._settling) > 1000:
            self._settling = {key: first}
        if self.d.clock.monotonic() - first < SETTLE_LIMIT:
            return SETTLING
        self._settling.pop(key, None)
        prefix = f".{cand.name}."
        try:
            with os.scandir(cand.path.parent) as it:
                for entry in it:
                    if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                        other = entry.stat(follow_symlinks=False)
                        if (other.st_dev, other.st_ino) == key and other.st_uid == st.st_uid:
                            os.unlink(entry.path)
                            self.d.log.event("recovered", cand.name,
                                             action="removed the second link a dead submit left", link=entry.name)
                            return "moved"
        except OSError:
            pass
        return f"has {st.st_nlink} hard links"

    def file_problem(self, st: os.stat_result, *, may_settle: bool = True) -> str | Settling:
        """Why a queued file must never run, SETTLING, or "" if it may (docs/security.md)."""
        # the ctime it is judged by is the kernel's: compared with the kernel's clock
        return file_problem(st, max_size=self.d.config.max_job_size, now_ns=time.time_ns(), resolve_uid=self.resolve,
                            may_settle=may_settle)

    def resolve(self, uid: int) -> Identity:
        """``resolve(uid)``, remembered for IDENTITY_TTL seconds.

        Each job needs its owner's account three times (checking the queued
        file, the claimed file, starting it); reading the account database
        once per job instead keeps its cost out of the drain.

        Raises:
            Refused: no such account.
        """
        now = self.d.clock.monotonic()
        known = self._identities.get(uid)
        if known is None or now - known[0] > IDENTITY_TTL:
            try:
                known = (now, resolve(uid))
            except Refused as err:
                known = (now, err)
            self._identities[uid] = known
        if isinstance(known[1], Refused):
            raise known[1]
        return known[1]

    def _may_be_urgent(self, uid: int) -> bool:
        try:
            ident = self.resolve(uid)
        except Refused:
            return False
        return may_be_urgent(ident, self.d.config.admins)

    def read_job(self, path: Path) -> tuple[Job, os.stat_result]:
        """The job file at ``path``, read as onite.spool.filecheck reads one (no link followed, bounded).

        Raises:
            BadFile, JobFormatError, OSError: as read_job_file.
        """
        return read_job_file(path, self.d.config.max_job_size)

    def claimed_job(self, name: str, path: Path, st_seen: os.stat_result) -> tuple[Job, os.stat_result]:
        """The job of a file just claimed: its parse kept from the pick if the file is the one judged, else read.

        Raises:
            BadFile, JobFormatError, OSError: as read_job_file.
        """
        cached = self.parsed.pop(name, None)
        st = os.lstat(path)  # a symlink or anything but a regular file is refused by file_problem
        if cached and cached[0][0] == st.st_ino and cached[0][2] == st.st_size and st.st_ino == st_seen.st_ino \
                and st.st_mtime_ns == st_seen.st_mtime_ns:
            return cached[1], st
        return self.read_job(path)

    def dependency(self, name: str, uid: int) -> DepState:
        """Where the dependency ``name`` of a job of ``uid`` stands, as this driver knows it: its own
        runs first (onite.spool.deps: only the user's own job of that name counts).
"""
        name, owner = dependency_of(name, uid)
        run = self.d.running.get(name)
        if run is not None and run.owner.uid == owner:
            return DepState.PENDING
        for path in self.d.index.paths(name):  # queued: one look at its owner, not every folder's
            try:
                if os.lstat(path).st_uid == owner:
                    return DepState.PENDING
            except OSError:
                pass  # gone since: the spool's own answer below says where it went
        if not self.withdrawn.unchanged():
            self.withdrawn = Withdrawn(self.d.spool)
        return dependency_state(self.d.spool, name, owner, self.withdrawn)
