"""``onite wait``: block until named jobs, or the drains running now, have finished; say how they ended. And
``onite output --follow``, which waits as it copies.

Wait only looks at what every user may see. A job's outcome is the newer of a result record written since the
wait began (or the one filed with the very file last seen live) and its withdrawal into cancel/."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from onite.core.record import Record
from onite.spool import runrecords
from onite.spool.accounts import user_name
from onite.spool.filecheck import BadFile, read_job_head
from onite.spool.outputs import copy_data, open_job_output
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result, read_results
from onite.spool.scan import (find_queued, find_running, key_uid, live_entries, namesake_hints, stat_entry,
                              withdrawn_entries)
from onite.core.cells import outcome_text
from onite.core.errors import EXIT_OK, NotFound, OniteError, Refused, not_yours
from onite.core.job import Job
from onite.core.jobview import JobView, outcome_counts, result_view
from onite.core.policy import owner_or_root
from onite.app.common import key_for, label, me
from onite.core.state import Result
from onite.core.clock import SYSTEM, Clock

EXIT_FAILED = 5  #: a job failed, was cancelled, or its outcome is unknown
EXIT_TIMEOUT = 6  #: --timeout passed before every job (or drain) finished
POLL_FIRST, POLL_MAX, POLL_GROWTH = 0.1, 1.0, 1.5  # seconds between looks: 0.1, 0.15, … up to 1
GONE_LOOKS = 3  # looks that find a job nowhere (a requeue passes through nowhere), with no new record, before "unknown"
SHOWN_NAMES = 10  # names of failed jobs in a drain's summary line
FOLLOW_POLL = 0.2  # seconds between looks while a followed output does not grow


class Seen(Record):
    name: str
    live: str | None  # "queued", "held" or "running": still to finish; None: neither
    result: Result | None = None  # its latest result record (read only when asked or not live)
    withdrawn: JobView | None = None  # cancelled while queued, not yet filed by a driver
    files: frozenset[int] = frozenset()  # live: the inodes of its files there
    filed: int | None = None  # not live: the inode of jobsdone/NAME, looked at before its result was read


def look(spool: SpoolDir, name: str, *, with_result: bool = False) -> Seen:
    """Where job ``name`` (a key) is now, looked for in the order a job moves, so that one moving meanwhile is
    still found. Only its key's user's files and records are its."""
    live, entries = live_entries(spool, name)
    files = frozenset(e.ino for e in entries)
    if live and not with_result:
        return Seen(name, live, files=files)
    withdrawn, filed, uid = None, None, key_uid(name)
    if not live:
        pending = [e for e in withdrawn_entries(spool) if e.name == name]
        if pending:
            from onite.app.listing import withdrawn_view  # a job cancelled while queued, not yet filed: rare

            withdrawn = withdrawn_view(max(pending, key=lambda e: e.ctime_ns))
        done = stat_entry(spool.done_dir, name)
        filed = done.ino if done is not None and done.uid == uid else None
    result = read_result(spool, name)
    if result is not None and result.uid != uid:
        result = None  # not its key's user's: not how this job ended
    return Seen(name, live, result, withdrawn, files, filed)


class Watch(Record):
    """What the waiter knows of one name between looks."""

    name: str
    stale: tuple | None = None  # key of the record of an earlier run, seen while this one was live
    seen_live: bool = False
    files: frozenset[int] = frozenset()  # the inodes of its files at the last look that found it live
    gone: int = 0  # looks in a row that found it nowhere, with no new record
    live: str | None = None  # where it was at the last look


class Final(Record):
    """How a waited-for job ended: ``done``, ``failed``, ``cancelled``, or ``unknown``."""

    name: str
    state: str
    view: JobView | None = None  # None when unknown
    reason: str = ""

    def to_json(self) -> dict:
        if self.view is not None:
            return {**self.view.to_json(), "name": label(self.name)}
        return {"name": label(self.name), "state": self.state, "reason": self.reason}


PENDING = None  # judge's verdict while a job is still to finish
UNKNOWN_REASON = "it left the queue, but no record of how it ended is left (removed by retention or by hand)"


def record_key(result: Result | None) -> tuple | None:
    return None if result is None else (result.run_id, result.finished.isoformat(), str(result.state))


def judge(watch: Watch, seen: Seen) -> tuple[Watch, Final | None]:
    """The next Watch and, once the job has finished, its Final (else PENDING)."""
    if seen.live:
        stale = record_key(seen.result) if not watch.seen_live else watch.stale
        return watch._replace(stale=stale, seen_live=True, gone=0, live=seen.live, files=seen.files), PENDING
    # the file last seen live is in jobsdone/: the result read after is its own, though it was there already
    filed = seen.filed is not None and seen.filed in watch.files
    candidates: list[tuple[datetime, Final]] = []
    if seen.result is not None and (not watch.seen_live or record_key(seen.result) != watch.stale or filed):
        view = result_view(seen.result, me())
        candidates.append((seen.result.finished, Final(seen.name, view.state, view, view.reason)))
    if seen.withdrawn is not None:
        candidates.append((seen.withdrawn.finished, Final(seen.name, "cancelled", seen.withdrawn,
                                                            seen.withdrawn.reason)))
    if candidates:
        return watch._replace(gone=0, live=None), max(candidates, key=lambda c: c[0])[1]
    watch = watch._replace(gone=watch.gone + 1, live=None)
    if watch.gone >= GONE_LOOKS:
        return watch, Final(seen.name, "unknown", None, UNKNOWN_REASON)
    return watch, PENDING


def exit_status(finals: list[Final] | list[JobView], *, timed_out: bool = False) -> int:
    """0 every job done, 5 one failed, was cancelled or is unknown, 6 the timeout came first."""
    if timed_out:
        return EXIT_TIMEOUT
    return EXIT_OK if all(f.state == "done" for f in finals) else EXIT_FAILED


def job_line(final: Final) -> str:
    """``build: done``, ``build: failed (exit 3)``, ``build: cancelled by alice``, ``build: unknown (…)``."""
    name = label(final.name)
    if final.state == "done":
        return f"{name}: done" + (f" ({final.reason})" if final.view is None and final.reason else "")
    if final.state == "cancelled":
        return f"{name}: {final.reason or 'cancelled'}"
    why = outcome_text(final.view) if final.state == "failed" and final.view is not None else final.reason
    return f"{name}: {final.state}" + (f" ({why})" if why else "")


def _pause(clock: Clock, delay: float, deadline: float | None) -> float:
    """Sleep ``delay`` seconds, or until ``deadline``; the next delay."""
    clock.sleep(delay if deadline is None else min(delay, max(deadline - clock.monotonic(), 0.0)))
    return min(delay * POLL_GROWTH, POLL_MAX)


class JobsWaited(Record):
    """What ``wait_jobs`` found: each name's Final, or where it still was when time ran out."""

    names: list[str]
    finals: dict[str, Final]
    still: dict[str, str]  # name → "queued", "held", "running" (or "finishing": left, no record yet) at the timeout
    timed_out: bool = False
    why: dict[str, str] = {}  # name → why a running one has not started (in Slurm), at the timeout

    @property
    def exit_code(self) -> int:
        return exit_status(list(self.finals.values()), timed_out=self.timed_out)

    def lines(self) -> list[str]:
        return [job_line(self.finals[n]) if n in self.finals else f"{n}: still {self.still[n]}"
                + (f" ({self.why[n]})" if n in self.why else "") for n in self.names]


def start(spool: SpoolDir, names: list[str], *, others: bool = True) -> dict[str, Watch | Final]:
    """The first look at each name (``NAME`` or ``USER:NAME``): its Watch, or its Final where only the log tells
    its end. ``others``: another user's job is the caller's to name (wait's, not output's). NotFound: a user that
    does not exist, else every name never queued, running or finished."""
    watches, unknown = {n: Watch(key_for(n)) for n in names}, []
    for name, watch in watches.items():
        if key_uid(watch.name) is None:
            raise NotFound(f"no user {watch.name.partition(':')[0]!r} (onite wait {name})", "see onite list --all")
    for name, watch in watches.items():
        seen, told = _found(spool, watch.name, looks=2), None
        if seen is None:  # none kept: the log may tell how it ended, before retention pruned its record
            from onite.app.report import pruned_reason, pruned_run

            told = pruned_run(spool, watch.name)
            seen = _found(spool, watch.name, looks=1)  # a look after the log's: one in a move was not pruned
        if seen is not None:
            watches[name] = judge(watch, seen)[0] if seen.live else watch
        elif told is not None:
            watches[name] = Final(name, told[0].state, None, pruned_reason(*told))
        else:
            unknown.append(name)
    hints = list(namesake_hints(spool, unknown, os.geteuid(), others=others).values()) if unknown else []
    if len(unknown) == 1 and hints:
        raise not_yours(unknown[0], hints[0])
    if unknown:
        listed = ", ".join(repr(n) for n in unknown)
        raise NotFound(f"no job {listed} is queued, running or finished" if len(unknown) == 1
                       else f"no jobs {listed} are queued, running or finished",
                       "; ".join(hints) or "see onite list --all")
    return watches


def _found(spool: SpoolDir, key: str, *, looks: int):
    """What a look at ``key`` sees, if one of ``looks`` looks finds it (a requeue passes through nowhere)."""
    for _ in range(looks):
        seen = look(spool, key, with_result=True)
        if seen.live or seen.result is not None or seen.withdrawn is not None:
            return seen
    return None


def wait_jobs(spool: SpoolDir, names: list[str], *, timeout: float | None = None, clock: Clock = SYSTEM,
              announce: Callable[[str], None] | None = None) -> JobsWaited:
    """Look at each job until none is queued, held or running, or ``timeout`` seconds passed."""
    watches = start(spool, names)
    order = list(watches)
    deadline = None if timeout is None else clock.monotonic() + timeout
    finals = {name: final for name, final in watches.items() if isinstance(final, Final)}
    delay = POLL_FIRST
    while True:
        for name in order:
            if name in finals:
                continue
            watches[name], final = step(spool, watches[name], clock.now())
            if final is not PENDING:
                finals[name] = final._replace(name=name)  # said as it was asked for (daemon:build)
        if len(finals) == len(order):
            return JobsWaited(order, finals, {})
        if deadline is not None and clock.monotonic() >= deadline:
            still = {n: watches[n].live or "finishing" for n in order if n not in finals}
            why = {}
            if "running" in still.values():
                from onite.app.listing import slurm_wait_of  # a timeout with jobs running: rare

                why = {n: w for n, live in still.items()
                       if live == "running" and (w := slurm_wait_of(spool, watches[n].name))}
            return JobsWaited(order, finals, still, timed_out=True, why=why)
        if announce is not None and delay == POLL_FIRST:
            left = [n for n in order if n not in finals]
            queued = [watches[n].name for n in left if watches[n].live == "queued"]
            note = undrained(spool, queued, clock.now()) if queued else ""
            note += stranded(spool, [watches[n].name for n in left if watches[n].live == "running"], clock.now())
            note += "".join(f"{n} is held: nothing runs it until onite release {n}; " for n in left
                            if watches[n].live == "held")
            announce(note + "waiting for " + ", ".join(f"{n} ({watches[n].live or 'finishing'})" for n in left))
        delay = _pause(clock, delay, deadline)


def step(spool: SpoolDir, watch: Watch, now: datetime) -> tuple[Watch, Final | None]:
    """The next look at a watched job: the next Watch, and its Final once it has finished (or ended unfiled)."""
    watch, final = judge(watch, look(spool, watch.name, with_result=not watch.seen_live))
    if final is PENDING and watch.live == "running":  # ended, its driver dead: nothing files it soon
        final = unfiled(spool, watch.name, now)
    elif final is not PENDING and final.state == "unknown":  # retention pruned its record while we looked away:
        from onite.app.report import pruned_reason, pruned_run  # the log's last line of it tells, as at the start

        told = pruned_run(spool, watch.name)
        if told is not None:
            final = Final(watch.name, told[0].state, None, pruned_reason(*told))
    return watch, final


def _head(spool: SpoolDir, entry) -> Job | None:
    """The job of a queued or running ``entry``, its header only; None: gone, or not for the caller to read."""
    try:
        return read_job_head(entry.path, spool.config.max_job_size)[0]
    except (OSError, BadFile, OniteError):
        return None


def unfiled(spool: SpoolDir, key: str, now: datetime) -> Final | None:
    """How a running job ended whose run record says it ended while no driver runs on its host to file it.
    None: it still runs, a live driver files it soon, or the next drain runs it again (retries left)."""
    from onite.drain.heartbeat import driver_gone

    for entry in find_running(spool, key):
        record = runrecords.read(spool.run_record_path(entry.host, key))
        outcome = record.outcome(record.need) if record is not None and record.ended else None
        # the heartbeat is read only once a run has ended (each poll of a running job)
        if outcome is None or not (gone := driver_gone(spool, entry.host, now)):
            continue
        job = _head(spool, entry)
        if job is None or outcome.retried(job.attempt, job.retries):
            continue  # the next drain there runs it again: it has not ended yet
        why = "; ".join(filter(None, (outcome.describe(), f"not filed yet, as {gone}")))
        return Final(key, str(outcome.state), None, why)
    return None


def undrained(spool: SpoolDir, keys: list[str], now: datetime) -> str:
    """``no drain is scheduled, so nothing will start one — FIX; `` if nothing will drain the spool; else the same
    for each of the queued ``keys`` the caller may read that no scheduled or running drain may run."""
    from onite.drain.nextdrain import no_drain_text, plan

    drain = plan(spool, now)
    heads = []  # the keys a drain must start, and whether one scheduled or running may (another user's: it says)
    for key in keys:
        for entry in find_queued(spool, key)[:1]:
            job = _head(spool, entry)
            if job is None:
                heads.append((key, None, True))
                continue
            starters, draining, daemons = drain.for_job(spool, job, now)
            if job.not_before is None or not daemons:  # a live daemon starts a timed job when it is due
                heads.append((key, job, bool(starters or draining)))
    if not (drain.starters or drain.draining) and (heads or not drain.timed):
        return f"{no_drain_text(drain)}; "
    said = ""
    for key, job, runs in heads:
        if not runs:
            where = f"only host {job.pin}" if job.pin else "one that can give what it asks for"
            said += f"no drain is scheduled on a host that may run {label(key)} ({where}), so nothing will start it; "
    return said


def stranded(spool: SpoolDir, keys: list[str], now: datetime) -> str:
    """``NAME is running, but its host H has no live driver: …; `` for each of the running ``keys`` whose host's
    driver is gone (waited for all the same: it ends once recovered)."""
    from onite.drain.heartbeat import driver_gone

    return "".join(f"{_stranded_text(key, gone)}; " for key in keys for entry in find_running(spool, key)
                   if (gone := driver_gone(spool, entry.host, now)))


def _stranded_text(key: str, gone: str) -> str:
    return f"{label(key)} is running, but {gone}"


def draining(spool: SpoolDir, now: datetime) -> dict[str, datetime]:
    """The hosts draining at ``now``, each with when its drain began (a daemon drains only while jobs run on its
    host, since the earliest of them started)."""
    from onite.app.listing import running_views  # wait_drains only: not wait NAME's
    from onite.drain.heartbeat import Role, live_beats

    found, running = {}, None
    for beat in live_beats(spool, now):
        if beat.role != Role.DAEMON:
            found[beat.host] = beat.since
            continue
        if running is None:
            running = running_views(spool)
        jobs = [v for v in running if v.host == beat.host]
        if jobs:
            found[beat.host] = min((v.started for v in jobs if v.started), default=now)
    return found


class DrainsWaited(Record):
    """What ``wait_drains`` found: the drains' hosts and the jobs that finished since they began."""

    hosts: list[str]
    since: datetime | None
    jobs: list[JobView]
    still: list[str]  # hosts still draining at the timeout
    timed_out: bool = False
    unfiled: dict[str, str] = {}  # job of the drain left claimed on a host with no live driver (killed -9) → why

    @property
    def counts(self) -> dict[str, int]:
        return outcome_counts(self.jobs)

    @property
    def exit_code(self) -> int:
        if self.unfiled and not self.timed_out:
            return EXIT_FAILED  # a job of the drain left no record of how it ended
        return exit_status(self.jobs, timed_out=self.timed_out)

    def summary(self) -> str:
        """``drain finished: 12 done, 1 failed (build)``, or why there was nothing to wait for."""
        if not self.hosts:
            return "no drain is running"
        if self.timed_out:
            return f"timed out: still draining on {', '.join(self.still)}"
        parts = [f"{self.counts['done']} done"]
        for state in ("failed", "cancelled"):
            names = [label(j.name) for j in self.jobs if j.state == state]
            if names:
                more = f", … {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
                parts.append(f"{len(names)} {state} ({', '.join(names[:SHOWN_NAMES])}{more})")
        return "; ".join([f"drain finished: {', '.join(parts)}",
                          *(_stranded_text(key, gone) for key, gone in self.unfiled.items())])


def wait_drains(spool: SpoolDir, *, timeout: float | None = None, clock: Clock = SYSTEM,
                announce: Callable[[str], None] | None = None) -> DrainsWaited:
    """Wait while a driver (or a daemon with running jobs) drains; gather what finished since."""
    busy = draining(spool, clock.now())
    if not busy:
        return DrainsWaited([], None, [], [])
    since = min(busy.values())
    hosts = sorted(busy)
    deadline = None if timeout is None else clock.monotonic() + timeout
    delay = POLL_FIRST
    if announce is not None:
        announce(f"waiting for the drain on {', '.join(hosts)} (since {since:%Y-%m-%d %H:%M:%S})")
    while busy:
        if deadline is not None and clock.monotonic() >= deadline:
            return DrainsWaited(hosts, since, [], sorted(busy), timed_out=True)
        delay = _pause(clock, delay, deadline)
        busy = draining(spool, clock.now())
        since = min([since, *busy.values()])  # a driver that started meanwhile joins the wait
        hosts = sorted(set(hosts) | set(busy))
    jobs = [result_view(r, me()) for r in read_results(spool) if r.finished >= since]
    # a driver killed mid-job ends its drain too: what it left claimed waits for the next driver of its host
    from onite.app.listing import running_views
    from onite.drain.heartbeat import driver_gone

    now = clock.now()
    unfiled = {v.name: gone for v in running_views(spool)
               if v.host in hosts and (gone := driver_gone(spool, v.host, now))}
    return DrainsWaited(hosts, since, jobs, [], unfiled=unfiled)


def wait_json(spool: SpoolDir, waited: JobsWaited | DrainsWaited) -> str:
    """``onite wait --json`` (docs/json.md)."""
    doc: dict = {"version": 1, "spool": str(spool.root), "exit_code": waited.exit_code,
                 "timed_out": waited.timed_out}
    if isinstance(waited, JobsWaited):
        doc["waited"] = "jobs"
        doc["jobs"] = [waited.finals[n].to_json() if n in waited.finals
                       else {"name": label(n), "state": waited.still[n],
                          "reason": waited.why.get(n) or "not finished"}
                       for n in waited.names]
    else:
        doc.update({"waited": "drain", "drivers": waited.hosts,
                    "since": waited.since.isoformat() if waited.since else None, "still": waited.still,
                    "counts": waited.counts, "summary": waited.summary(),
                    "unfiled": [label(key) for key in waited.unfiled],
                    "jobs": [{**j.to_json(), "name": label(j.name)} for j in waited.jobs]})
    return json.dumps(doc, indent=1)


def follow(spool: SpoolDir, name: str, out: BinaryIO, *, stderr: bool, announce: Callable[[str], None]) -> Final:
    """``onite output NAME --follow``: copy job ``name``'s output (``stderr``: its kept-apart stderr) to ``out`` as
    it is written, until the job has finished; how it ended. ``announce`` is told once if it has not started yet.
    A new run makes a new file: one replaced while followed is finished, then the new one followed. Only an output
    file of the job's owner is copied; Refused: another's job."""
    shown = label(name)  # as the caller writes it: NAME for their own job
    watch = start(spool, [shown], others=False)[shown]
    if isinstance(watch, Final):  # its record pruned: no output is kept, as onite output says
        from onite.app.report import pruned_output

        raise pruned_output(spool, name, os.geteuid()) or NotFound(f"no output of job {shown!r} is kept")
    entries = find_queued(spool, name) + find_running(spool, name)
    if entries and not owner_or_root(os.geteuid(), entries[0].uid):
        raise Refused(f"the output of {shown!r} belongs to {user_name(entries[0].uid)}",
                      "only its owner and root may read it")
    if stderr:
        _check_separate(spool, name, entries if watch.live is not None else None)
    path = spool.stderr_path(name) if stderr else spool.output_path(name)
    earlier = _key(path) if watch.live in ("queued", "held") else None  # an earlier run's, not this one's
    handle: BinaryIO | None = None
    told = False
    final = PENDING
    try:
        while True:
            grew = handle is not None and _copy(handle, out)
            if final is not PENDING:
                return final
            watch, final = step(spool, watch, SYSTEM.now())
            key = _key(path)
            if key is not None and key != earlier and (handle is None or key[0] != os.fstat(handle.fileno()).st_ino):
                if handle is not None:  # a new run replaced the file: the rest of the old one first
                    _copy(handle, out)
                    handle.close()
                handle = _open(spool, name, stderr)
                if handle is not None:
                    continue
                earlier = key  # someone else's file: looked at again only once it changes
            if final is not PENDING or grew:
                continue
            if not told and watch.live in ("queued", "held"):
                told = True
                if watch.live == "queued":
                    announce(f"{undrained(spool, [watch.name], SYSTEM.now())}{shown} is queued; waiting for it to start")
                else:
                    announce(f"{shown} is held; waiting for it to start (nothing runs it until onite release {shown})")
            time.sleep(FOLLOW_POLL)
    finally:
        if handle is not None:
            handle.close()


def _check_separate(spool: SpoolDir, name: str, live: list | None) -> None:
    """NotFound where the job (its ``live`` files, else its result) keeps stderr with its stdout, so that
    ``--follow --stderr`` would print nothing."""
    if live is not None:  # a file moved on, or unreadable: the follow itself will tell
        separate = next((job.stderr_separate for e in live if (job := _head(spool, e)) is not None), None)
    else:
        result = read_result(spool, name)
        separate = None if result is None else result.stderr == "separate"
    if separate is False:
        raise NotFound(f"job {label(name)!r} keeps stderr with its stdout (it was spooled without --stderr-separate)",
                       f"follow it with: onite output {label(name)} --follow")


def _key(path: Path) -> tuple[int, int, int] | None:
    """Which file is at ``path`` now (inode, device, change time), or None."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_ino, st.st_dev, st.st_ctime_ns


def _open(spool: SpoolDir, name: str, stderr: bool) -> BinaryIO | None:
    """The followed job's output; None if not there yet or not its owner's."""
    try:
        handle = open_job_output(spool, name, os.geteuid(), stderr=stderr)
    except NotFound:  # removed between the lstat and the open (retention): look again
        return None
    if os.fstat(handle.fileno()).st_uid != key_uid(name):
        handle.close()
        return None
    return handle


def _copy(handle: BinaryIO, out: BinaryIO) -> bool:
    """Copy what ``handle`` has past its position to ``out``; True if there was anything."""
    copied = copy_data(handle.fileno(), out.write)
    if copied:
        out.flush()
    return copied
