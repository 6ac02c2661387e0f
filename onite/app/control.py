"""What users do to jobs already spooled: cancel (by name, pattern or --all), hold, release.

Cancelling your own queued job withdraws it at once; anything else is a request a driver honours if the rules
allow. A hold is a marker hold/KEY@TOKEN that leaves the job file, so its place, alone."""

from __future__ import annotations

import os
import pwd
import time
from datetime import datetime
from fnmatch import fnmatchcase

from onite.core.names import split_key
from onite.core.record import Record
from onite.spool.cancels import Filed, file_withdrawn, request_cancel, tell_filed, withdraw
from onite.spool.files import remove_file
from onite.spool.holds import add_hold, remove_holds
from onite.spool.paths import SpoolDir
from onite.spool.recurstate import is_template
from onite.spool.results import read_result
from onite.spool.accounts import user_name
from onite.spool.scan import Entry, find_queued, find_running, job_stats, namesake_error, read_markers
from onite.spool.settings import default_host
from onite.core.errors import DamagedRecord, NotFound, Refused, SpoolIOError
from onite.core.policy import may_touch, owner_or_root
from onite.app.common import key_for, label, me, refuse_finished


class CancelReport(Record):
    """What ``cancel`` did to a job: "cancelled", or "requested" of its driver (or "not cancelled": it was gone)."""

    name: str  # the job's key
    action: str  # "cancelled", "requested", "not cancelled"
    detail: str = ""
    waitable: bool = True  # a live driver will act on the request soon (await_cancel may wait for it)


def _no_job(spool: SpoolDir, name: str, text: str, caller_uid: int, where: str, *, others: bool = False) -> NotFound:
    """A name that is no job ``where`` ("queued" …): another user's namesake (``others``: the caller may act on it),
    or a recurring job's name, which is no job (its runs are NAME-STAMP), is said."""
    if error := namesake_error(spool, text, caller_uid, others=others):
        return error
    if is_template(spool, name):  # its user's own, not a file anyone put in recur/ under that key
        return NotFound(f"no job {text!r} is {where}", f"{text} is a recurring job: onite recur remove {text} stops "
                        f"its fires; its runs are {text}-YYYYMMDDTHHMM (see onite list)")
    return NotFound(f"no job {text!r} is {where}", "see onite list")


def cancel(spool: SpoolDir, text: str, caller_uid: int, now: datetime) -> CancelReport:
    """Cancel the queued or running job ``text`` (NAME: the caller's; USER:NAME); Refused where own_only forbids it."""
    name = key_for(text)
    # the queue, running/, the queue again: a claim, or a requeue, between two looks is not taken for no job
    queued, running = find_queued(spool, name), find_running(spool, name)
    if not running and not queued:
        queued = find_queued(spool, name)
    if not running and not queued:
        refuse_finished(spool, name, text, "cancelled", caller_uid)
        raise _no_job(spool, name, text, caller_uid, "queued or running", others=not spool.config.own_only)
    allowed = [entry for entry in running + queued if may_touch(caller_uid, entry.uid, spool.config.own_only)]
    if not allowed:
        owner = user_name((running + queued)[0].uid)
        raise Refused(f"job {text!r} belongs to {owner}", "you may cancel only your own jobs (own_only = true)")
    if any(entry in allowed for entry in running):
        from onite.drain.heartbeat import driver_gone

        request_cancel(spool, name)
        host = next(entry for entry in running if entry in allowed).host
        if gone := driver_gone(spool, host, now):
            return CancelReport(name, "requested", f"running, but {gone}; the cancel is honoured then", waitable=False)
        return CancelReport(name, "requested", f"running on {host}; its driver stops it within a second")
    for entry in allowed:
        if not owner_or_root(caller_uid, entry.uid):
            request_cancel(spool, name)
            return CancelReport(name, "requested", "a driver cancels it the next time it runs")
        pending = withdraw(spool, entry)
        if os.access(spool.done_dir, os.W_OK):  # root, or a personal spool's owner: file it now
            by = user_name(caller_uid)
            try:
                filed = file_withdrawn(spool, pending, by=by, now=now, rank=entry.rank)
            except SpoolIOError as err:  # it is withdrawn all the same: back in cancel/, never to run
                return CancelReport(name, "cancelled", f"it will not run; its result could not be written "
                                    f"({err.cause.strerror or err.cause}): a drain writes it once there is room")
            if filed is not None:
                file_cancelled(spool, filed, by, name)
    return CancelReport(name, "cancelled")


def await_cancel(spool: SpoolDir, report: CancelReport) -> CancelReport:
    """How the job ended if its driver (which alone may signal it) stops it soon; else ``report``."""
    name = report.name
    if not report.waitable or not find_running(spool, name):
        return report
    deadline = time.monotonic() + 5 + spool.config.kill_grace.total_seconds()
    while time.monotonic() < deadline:
        if not find_running(spool, name):
            try:
                result = read_result(spool, name)
            except DamagedRecord:
                return CancelReport(name, "stopped", "its result record is damaged")
            return CancelReport(name, str(result.state) if result else "stopped", result.reason if result else "")
        time.sleep(0.1)
    return report


def is_pattern(word: str) -> bool:
    """Is this ``onite cancel`` argument a glob pattern (``'build-*'``)? No job name holds ``*?[``."""
    return not frozenset("*?[").isdisjoint(word)


class Selection(Record):
    """The jobs a pattern (or ``--all``) picks for a caller: theirs, and others' it leaves alone."""

    chosen: list  # JobViews, running then queued, each name once
    skipped: list  # other users' matching jobs
    namesakes: list  # other users' jobs whose NAME a pattern without a ``:`` matches: said if none is chosen


def select_jobs(spool: SpoolDir, patterns: list[str], caller_uid: int, *, every: bool = False) -> Selection:
    """The jobs matching ``patterns`` (on the key: ``b*`` is the caller's, ``*:b*`` anyone's), or ``every`` job:
    the caller's (root: anyone's) chosen, others' skipped, running then queued; and others' jobs whose NAME a
    pattern without a ``:`` matches."""
    from onite.app.listing import queued_views, running_views

    bare = [p for p in patterns if ":" not in p]
    keyed = [p if ":" in p else f"{me()}:{p}" for p in patterns]
    chosen, skipped, namesakes, seen = [], [], [], set()
    for view in running_views(spool) + queued_views(spool):
        if view.name in seen:
            continue
        if every or any(fnmatchcase(view.name, p) for p in keyed):
            (chosen if owner_or_root(caller_uid, view.uid) else skipped).append(view)
        elif any(fnmatchcase(split_key(view.name)[1], p) for p in bare):
            namesakes.append(view)
        seen.add(view.name)
    return Selection(chosen, skipped, namesakes)


def reach(patterns: list[str], *, every: bool = False) -> str:
    """Whose jobs root's ``patterns`` (``every``: --all) cancel: "every user's jobs", "bob's jobs" …"""
    users = sorted({p.partition(":")[0] if ":" in p else me() for p in patterns})
    if every or "*" in users:
        return "every user's jobs"
    return " and ".join(f"the jobs of every user matching {u!r}" if is_pattern(u) else f"{u}'s jobs" for u in users)


def none_chosen(picked: Selection, patterns: list[str], what: str, caller_uid: int, own_only: bool) -> NotFound:
    """NotFound for a pattern (``what``: as typed, or --all) that chose none of the caller's jobs: whose it matches,
    and how those may be cancelled."""
    others = picked.skipped + picked.namesakes
    if not others:
        return NotFound(f"no queued or running job of yours matches {what}", "see onite list")
    names: dict[str, list[str]] = {}
    for view in others:
        names.setdefault(view.user, []).append(split_key(view.name)[1])
    said = [f"{user}'s {', '.join(ns)}" if len(ns) <= 3 else f"{user}'s {len(ns)} jobs ({', '.join(ns[:3])}, …)"
            for user, ns in sorted(names.items())]
    whose = said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"
    bare = [p for p in patterns if ":" not in p]
    if caller_uid == 0:  # root's NAME pattern is root's jobs: USER:NAME, or *:NAME, reaches others'
        how = f"'*:{bare[0]}' matches every user's jobs"
    elif not own_only:
        how = f"a pattern reaches only your jobs: cancel theirs by name (onite cancel {others[0].name})"
    else:
        owners = next(iter(names)) if len(names) == 1 else "their owners"
        how = "only root may cancel them" if owners == "root" else f"only {owners} or root may cancel them"
    return NotFound(f"{what} matches none of your jobs", f"it matches {whose}; {how}")


def doomed_by(spool: SpoolDir, cancelled: list, caller_uid: int) -> list[str]:
    """The queued jobs the caller may read that can no longer run once ``cancelled`` (each with a key as ``name``)
    are, in queue order, each as ``will fail: NAME (waits for DEP)``. A file that cannot be read is left out (its
    driver says why); a forgery is never read (job_stats leaves it out)."""
    from onite.spool.edits import waits_for

    gone = {view.name for view in cancelled}
    waiting, edits, limit = [], read_markers(spool.edit_dir), spool.config.max_job_size
    for _, folder in spool.queue_folders():
        for entry, st in job_stats(folder):
            if entry.name not in gone and owner_or_root(caller_uid, st.st_uid):
                after = waits_for(entry.path, entry.name, st.st_uid, edits, limit)
                if after:
                    waiting.append((entry.name, after))
    doomed: list[str] = []
    changed = True
    while changed:  # a job that waits for a doomed one is doomed too
        changed = False
        for key, after in waiting:
            dep = None if key in gone else next((dep for dep in after if dep in gone), None)
            if dep is not None:
                gone.add(key)
                doomed.append(f"will fail: {label(key)} (waits for {label(dep)})")
                changed = True
    return doomed


def file_cancelled(spool: SpoolDir, filed: Filed, by: str, name: str) -> None:
    """What a driver does on filing a cancelled job: the log line, its count, the owner's notice if wanted."""
    from onite.spool.log import ActivityLog
    from onite.core.clock import SYSTEM
    from onite.drain.metrics import Metrics
    from onite.exec.notify import Notifier

    log = ActivityLog(spool.log_path, default_host(spool.config))
    try:
        metrics, notifier = Metrics(spool, default_host(spool.config), log, SYSTEM), Notifier(spool, log)
        tell_filed(filed, name, by, log, metrics.filed, notifier, spool.config)
        metrics.flush()
        notifier.finish()
    finally:
        log.close()


def set_hold(spool: SpoolDir, text: str, caller_uid: int, held: bool) -> bool:
    """Hold (or release) a queued job, keeping its place; False: nothing to do (a hold of a held job, a release of
    one no marker held). Refused: another's job, one that started as it was held, or a hold of root's left on it."""
    name = key_for(text)
    entries = find_queued(spool, name)
    if not entries:
        if find_running(spool, name):
            raise Refused(f"job {text!r} is already running", f"use onite cancel {text} to stop it")
        refuse_finished(spool, name, text, "held" if held else "released", caller_uid)
        raise _no_job(spool, name, text, caller_uid, "queued")
    mine = [entry for entry in entries if owner_or_root(caller_uid, entry.uid)]
    if not mine:
        raise Refused(f"job {text!r} belongs to {user_name(entries[0].uid)}",
                      "only its owner or root may hold or release it")
    owner = mine[0].uid
    if held:
        if all(e.held for e in mine):
            return False  # a second marker would hold it no more
        # root holding a user's job: the marker is the user's, to release
        marker = add_hold(spool, name, None if caller_uid == owner else (owner, _gid_of(mine[0])))
        if not find_queued(spool, name):  # a driver claimed it as we held it: no marker may outlive the job
            remove_file(marker)
            raise Refused(f"job {text!r} started running as you held it", f"use onite cancel {text} to stop it")
        return True
    removed = remove_holds(spool, name, {owner, caller_uid} if caller_uid == 0 else {caller_uid})
    if any(e.held for e in find_queued(spool, name)):
        raise Refused(f"job {text!r} is still held by a hold of root's", "ask root to release it")
    return bool(removed) or any(e.held for e in mine)


def _gid_of(entry: Entry) -> int:
    """The group of the job's file, else its owner's primary group."""
    try:
        return os.lstat(entry.path).st_gid
    except OSError:
        try:
            return pwd.getpwuid(entry.uid).pw_gid
        except KeyError:
            return entry.uid
