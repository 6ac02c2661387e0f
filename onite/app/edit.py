"""``onite edit NAME``: change a queued job's limits, priority, not-before time or dependencies; ``onite restart
NAME``: spool a finished job again, changed the same way, its last run's state reset.

A job keeps its place when its priority stays: the new limits are an edit beside its file (onite.spool.edits),
which the driver honours from its next pick. A new priority moves the job to the end of its new folder. Either
the edit applies before the job starts, or it fails with nothing changed. Only its owner or root may restart a
job; the new file is the job's owner's whoever restarts it, and everything a submit checks is checked again."""

from __future__ import annotations

import os
from datetime import datetime

from onite.app.common import key_for, label, refuse_finished
from onite.app.submit import (check_after, check_capacity, check_policy, ended_badly, refuse_taken, uniqname,
                              write_job)
from onite.core.errors import DamagedRecord, InvalidInput, JobFormatError, NotFound, Refused, SpoolIOError
from onite.core.identity import Identity
from onite.core.job import Job
from onite.core.names import check_base, check_name, job_key, split_key
from onite.core.policy import owner_or_root
from onite.core.request import JobChanges
from onite.exec import identity
from onite.spool.edits import add_edit, edited, move_edited, trusted, withdraw_edit
from onite.spool.filecheck import BadFile, file_problem, read_job_file
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result
from onite.spool.accounts import user_name
from onite.spool.scan import find_queued, find_running, is_live, namesake_error, read_markers, withdrawn_entries


def edit(spool: SpoolDir, text: str, caller_uid: int, now: datetime, changes: JobChanges) -> str:
    """Change queued job ``text`` as ``changes`` say; what became of it, in words. Refused: another's job, one
    running or finished, or one that started while being changed (nothing changed)."""
    said, new = _edit(spool, text, caller_uid, now, changes)
    doomed = "" if changes.after is None else ended_badly(spool, new)  # ", which failed: it will fail too, unless …"
    return f"{said}; waits for {', '.join(map(label, new.after))}{doomed}" if doomed else said  # as submit says it


def _edit(spool: SpoolDir, text: str, caller_uid: int, now: datetime, changes: JobChanges):
    """``edit``'s work: its words, and the job as edited."""
    name = key_for(text)
    if not changes:
        raise InvalidInput("nothing to change", "give one of --timeout, -p, --retries, --mem, --cpus, --at, --after")
    entry = _queued(spool, name, text, caller_uid)
    try:
        job, st = read_job_file(entry.path, spool.config.max_job_size)
    except FileNotFoundError:
        raise _left(text, "it cannot be edited any more", _cancelled(spool, name, None, entry.ino),
                    _moved(spool, name)) from None
    except (BadFile, JobFormatError) as err:
        raise Refused(f"job {text!r} cannot be edited: {getattr(err, 'what', err)}",
                      "cancel it and spool it anew") from None
    except OSError as err:
        raise SpoolIOError(entry.path, "reading", err) from None
    owner = None if st.st_uid == caller_uid else (st.st_uid, st.st_gid)
    current, _ = edited(job, trusted(read_markers(spool.edit_dir), name), spool.config.max_job_size)
    new = changes.apply(current, spool.config, now, user_name(caller_uid))
    if new == current:  # nothing to write: no edit, no move
        return f"{label(name)}: unchanged (it is so already)", new
    if changes.mem is not None or changes.cpus is not None:
        check_capacity(spool, new)
    if changes.after is not None:
        check_after(spool, [new])
    if new.priority != job.priority:  # the job, edited, at the end of its new folder
        if job.urgent:
            raise InvalidInput(f"job {text!r} is urgent: it runs before every priority", "leave out -p")
        # its limits are an edit too, the newest, so that no older edit undoes them, whichever file a claim takes
        marker = add_edit(spool.edit_dir, new, owner) if os.path.isdir(spool.edit_dir) else None
        try:
            done = move_edited(entry.path, spool.folder_for(new.priority, False), new, owner)
        except BaseException:
            if marker is None or withdraw_edit(marker):
                raise
            done = "changed"  # a claim took the edit meanwhile: the run goes by it
        if done == "started" and marker is not None and not withdraw_edit(marker):
            done = "changed"
        if done == "changed":
            if _cancelled(spool, name, job, st.st_ino):
                raise _left(text, "nothing left to change", cancelled=True)
            if _moved(spool, name):  # no claim took it: another edit moved it, from the file it read
                raise _left(text, "your change may not be in it", False, moved=True)
            return f"{label(new.name)}: changed as it started (in its old priority)", new
        if done != "started":
            if marker is not None:
                _withdraw_older(spool, name, marker)
            return f"{label(new.name)}: changed; moved to P{new.priority}, after the jobs there", new
    else:
        if not os.path.isdir(spool.edit_dir):
            raise Refused(f"this spool has no {spool.edit_dir} folder yet", "ask root to run onite init")
        marker = add_edit(spool.edit_dir, new, owner)
        try:
            kept = os.lstat(entry.path).st_ino == st.st_ino
        except FileNotFoundError:
            kept = False
        if kept:
            _withdraw_older(spool, name, marker)
            return f"{label(name)}: changed; it keeps its place", new
        if not withdraw_edit(marker):  # the driver took it as it claimed the job, or a cancel took it
            if _cancelled(spool, name, job, st.st_ino):
                raise _left(text, "nothing left to change", cancelled=True)
            return f"{label(name)}: changed as it started", new
    raise _left(text, "nothing changed", _cancelled(spool, name, job, st.st_ino), _moved(spool, name))


def _cancelled(spool: SpoolDir, name: str, job, ino: int) -> bool:
    """Was this queued job (``job`` as read, else None; ``ino``: its file's) cancelled before it started?"""
    try:
        if any(e.name == name and e.ino == ino for e in withdrawn_entries(spool)):
            return True
    except SpoolIOError:
        pass
    try:
        record = read_result(spool, name)
    except (DamagedRecord, SpoolIOError):
        return False
    return (record is not None and record.started is None and record.state == "cancelled"
            and (job is None or record.submitted == job.submitted))


def _moved(spool: SpoolDir, name: str) -> bool:
    """Is job ``name`` still queued and not running: another ``onite edit`` moved its file (a new priority)?"""
    return bool(find_queued(spool, name)) and not find_running(spool, name)


def _left(text: str, what: str, cancelled: bool, moved: bool = False) -> Refused:
    """The job left its queue as it was being edited: a cancel took it, another edit moved it, or a driver
    claimed it."""
    if cancelled:
        return Refused(f"job {text!r} was cancelled just now: {what}", "see onite list --all")
    if moved:
        return Refused(f"job {text!r} was moved by another onite edit just now: {what}",
                       f"see onite list, then edit it again: onite edit {text} …")
    return Refused(f"job {text!r} started just now: {what}", f"change it for its next run: onite restart {text} …")


def _withdraw_older(spool: SpoolDir, name: str, marker) -> None:
    """Remove the caller's earlier edits of job ``name``: ``marker``, the newest, says it all."""
    for older in trusted(read_markers(spool.edit_dir), name):
        if older.path != marker and older.uid == os.geteuid():
            withdraw_edit(older.path)


def _queued(spool: SpoolDir, name: str, text: str, caller_uid: int):
    """The earliest queued file of job ``name`` the caller may edit. Raises NotFound, Refused: as ``edit``."""
    entries = sorted(find_queued(spool, name), key=lambda e: (e.rank, e.ctime_ns))
    mine = [e for e in entries if owner_or_root(caller_uid, e.uid)]
    if mine:
        return mine[0]
    if entries:
        raise Refused(f"job {text!r} belongs to {user_name(entries[0].uid)}", "only its owner or root may edit it")
    if find_running(spool, name):
        raise Refused(f"job {text!r} is running: a running job cannot be edited",
                      f"cancel it, or change it for its next run: onite restart {text} … once it has finished")
    refuse_finished(spool, name, text, "edited", caller_uid)
    if error := namesake_error(spool, text, caller_uid):
        raise error
    raise NotFound(f"no queued job {text!r}", "see onite list")


def restart(spool: SpoolDir, text: str, caller: Identity, now: datetime, *, new_name: str | None = None,
            unique: bool = False, hold: bool = False, changes: JobChanges = JobChanges()) -> Job:
    """Spool the finished job ``text`` again (as ``new_name``, or made unique) under its owner's name, with
    ``changes``; the job spooled."""
    name = key_for(text)
    user, plain = split_key(name)
    new = plain if new_name is None else new_name  # --name "" is a bad name, not no --name
    (check_base if unique else check_name)(new)
    job, st = read_finished(spool, name, caller.uid)
    job = changes.apply(job._replace(attempt=1, tried=()), spool.config, now, caller.name)  # a rerun starts at 1
    if changes.mem is not None or changes.cpus is not None:
        check_capacity(spool, job)
    check_policy(spool, job.urgent, now, caller)
    target = job_key(user, uniqname(spool, new, user) if unique else new)
    try:
        check_after(spool, [job._replace(name=target)])
    except InvalidInput as err:
        raise InvalidInput(f"restarting {text!r}: {err.what}",
                           "restart it with other dependencies (--after NAME), or spool it anew without them") from None
    if not unique:
        if is_live(spool, target):
            raise Refused(f"a job named {label(target)!r} is already queued or running",
                          f"restart it as another job: onite restart {text} --name NEW, or --unique")
        refuse_taken(spool, [target], st.st_uid)
    not_before = job.not_before if job.not_before is not None and job.not_before > now else None
    job = job._replace(name=target, submitted=now, host=os.uname().nodename, not_before=not_before)
    write_job(spool, job, caller, hold=hold, owner=None if st.st_uid == caller.uid else (st.st_uid, st.st_gid))
    return job


def read_finished(spool: SpoolDir, name: str, caller_uid: int):
    """The job of finished job ``name`` and its file's stat. Refused: someone else's, or a file onite may not
    trust."""
    path = _finished_path(spool, name, caller_uid)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotFound(f"no finished job {label(name)!r} is kept",
                       "it was filed or removed just now: try again") from None
    except OSError as err:
        raise SpoolIOError(path, "looking at", err) from None
    if not owner_or_root(caller_uid, st.st_uid):
        raise Refused(f"job {label(name)!r} belongs to {user_name(st.st_uid)}", "only its owner or root may restart it")
    try:
        job, opened = read_job_file(path, spool.config.max_job_size)
    except (BadFile, JobFormatError) as err:
        raise Refused(f"{path} cannot be restarted: {getattr(err, 'what', err)}",
                      "spool the job anew with onite submit") from None
    except FileNotFoundError:
        raise NotFound(f"no finished job {label(name)!r} is kept", "retention removed it just now") from None
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    # as the driver trusts a queued file: its owner's alone, one link, an account
    problem = "it changed as it was read" if opened.st_uid != st.st_uid else file_problem(
        opened, max_size=spool.config.max_job_size, resolve_uid=identity.resolve, may_settle=False)
    if problem:
        raise Refused(f"{path} cannot be restarted: {problem}", "spool the job anew with onite submit")
    # a job cancelled while queued was never claimed: its edits are still beside it, and it reruns as edited
    job = edited(job, trusted(read_markers(spool.edit_dir), name), spool.config.max_job_size)[0]
    return job, opened


def _finished_path(spool: SpoolDir, name: str, caller_uid: int):
    """jobsdone/NAME, else the caller's own latest withdrawn file of the name (anyone may write cancel/)."""
    path = spool.done_dir / name
    if os.path.lexists(path):
        return path
    withdrawn = [e for e in withdrawn_entries(spool) if e.name == name and e.uid == caller_uid]
    if withdrawn:
        return max(withdrawn, key=lambda e: e.ctime_ns).path
    if is_live(spool, name):
        raise NotFound(f"no finished job {label(name)!r} is kept", "it is queued or running; restart it once it has "
                       "finished")
    if error := namesake_error(spool, label(name), caller_uid):
        raise error
    raise NotFound(f"no finished job {label(name)!r} is kept",
                   "see onite list --all; each user's last `keep` finished jobs are kept")

