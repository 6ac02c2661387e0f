"""``onite edit NAME``: change a queued job's limits, priority, not-before time or dependencies.

A job keeps its place when its priority stays: the new limits are an edit beside its file (onite.spool.edits),
which the driver honours from its next pick. A new priority moves the job to the end of its new folder. Either
the edit applies before the job starts, or it fails with nothing changed."""

from __future__ import annotations

import os
from datetime import datetime

from onite.app.common import key_for, label, refuse_finished
from onite.app.submit import check_after, check_capacity, ended_badly
from onite.core.errors import DamagedRecord, InvalidInput, JobFormatError, NotFound, Refused, SpoolIOError
from onite.core.policy import owner_or_root
from onite.core.request import JobChanges
from onite.spool.edits import add_edit, edited, move_edited, trusted, withdraw_edit
from onite.spool.filecheck import BadFile, read_job_file
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result
from onite.spool.accounts import user_name
from onite.spool.scan import find_queued, find_running, read_markers, withdrawn_entries


def edit(spool: SpoolDir, text: str, caller_uid: int, now: datetime, changes: JobChanges) -> str:
    """Change queued job ``text`` as ``changes`` say; what became of it, in words. Refused: another's job, one
    running or finished, or one that started while being changed (nothing changed)."""
    said, new = _edit(spool, text, caller_uid, now, changes)
    if changes.after is None:
        return said
    doomed = ended_badly(spool, new)  # ", which failed: it will fail too, unless …"
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
            there = os.lstat(entry.path)
        except FileNotFoundError:
            there = None
        if there is not None and there.st_ino == st.st_ino:
            _withdraw_older(spool, name, marker)
            return f"{label(name)}: changed; it keeps its place", new
        if not withdraw_edit(marker):  # the driver took it as it claimed the job, or a cancel took it
            if _cancelled(spool, name, job, st.st_ino):
                raise _left(text, "nothing left to change", cancelled=True)
            return f"{label(name)}: changed as it started", new
    raise _left(text, "nothing changed", _cancelled(spool, name, job, st.st_ino), _moved(spool, name))


def _cancelled(spool: SpoolDir, name: str, job, ino: int = 0) -> bool:
    """Was this queued job (``job`` as read, else None; ``ino`` its file's, else 0) cancelled before it started?"""
    try:
        if any(e.name == name and (not ino or e.ino == ino) for e in withdrawn_entries(spool)):
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
    raise NotFound(f"no queued job {text!r}", "see onite list")

