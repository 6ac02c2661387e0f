"""Edits: a queued job's new limits, kept beside its file so that the job keeps its place (its ctime).

An edit is a file edit/KEY@TOKEN, the job's header as edited (no environment, no text), honoured only
when its owner is the key's user or root and it names the job's submit time; the latest wins, and only
its limits count (docs/job-control.md, "Editing a queued job"). The driver takes a job's edits as it
claims it, each with one rename or unlink, and an editor that finds the job claimed unlinks its own:
the one call that succeeds says whether the edit applies. The latest waits beside the claim
(running/HOST/KEY@edit) until the claimed file holds it, for recovery to put back. A change of priority
swaps the job file for the edited one (RENAME_EXCHANGE: a claim takes one or the other whole) and moves it.
"""

from __future__ import annotations

import os
from pathlib import Path

from onite.core.errors import JobFormatError, NotFound, Refused, SpoolIOError
from onite.core.job import Job, with_limits
from onite.core.jobfile import decode, encode, waits_for_nothing
from onite.core.names import SIDE
from onite.core.policy import owner_or_root
from onite.spool.filecheck import BadFile, read_head_bytes, read_job_head
from onite.spool.files import (create_file, discard, fsync_dir, move_file, rename_exchange, rename_noreplace, token,
                               write_unnamed)
from onite.spool.scan import Marker, key_uid

EDIT_TEXT = b"true\n"  # an edit's job text: never run, never read
EDITS_READ = 4  # a job's newest edits read, at most: `onite edit` removes the older ones; more are a flood


def trusted(markers: dict[str, list[Marker]], key: str) -> list[Marker]:
    """The edits of job ``key`` among ``markers`` (edit/) made by the key's user or root, oldest first."""
    owner = key_uid(key)
    return [e for e in markers.get(key, []) if owner is not None and owner_or_root(e.uid, owner)]


def edited(job: Job, edits: list[Marker], max_size: int) -> tuple[Job, Marker | None]:
    """``job`` with the limits of the latest of its trusted ``edits`` that applies (``_apply``), and that edit.
    Only the newest EDITS_READ count: a user's thousands would have every look read them all."""
    for edit in reversed(edits[-EDITS_READ:]):
        new = _apply(edit, job, max_size)
        if new is not None:
            return new, edit
    return job, None


def _apply(edit: Marker, job: Job, max_size: int) -> Job | None:
    """``job`` with the limits of ``edit``; None if it cannot be read, is of an earlier job of the name, or
    leaves the job out of range (``retries`` below the queued file's ``attempt``)."""
    try:
        limits, _ = read_job_head(edit.path, max_size)
    except (OSError, BadFile, JobFormatError):
        return None
    if (limits.name, limits.submitted) != (job.name, job.submitted):
        return None
    try:
        return with_limits(job, limits)
    except ValueError:
        return None


def read_edited(path: Path | str, key: str, uid: int, markers: dict[str, list[Marker]], max_size: int, *,
                waiting: bool = False) -> Job | None:
    """The queued job ``key`` at ``path`` (``uid``'s file) with its trusted edits among ``markers``, as the
    driver judges it; None for a file not to read (gone, private, no job, a second link, swapped since), and
    with ``waiting``, for a job with no edit and no ``after:`` line, which is not decoded."""
    try:
        data, st = read_head_bytes(path, max_size, one_link=True)
    except (OSError, BadFile):  # anyone may put a file in a queue: it stops no reader
        return None
    mine = trusted(markers, key)
    if st.st_uid != uid or (waiting and not mine and waits_for_nothing(data)):
        return None
    try:
        job = decode(data)
    except JobFormatError:
        return None
    return edited(job, mine, max_size)[0]


def waits_for(path: Path | str, key: str, uid: int, markers: dict[str, list[Marker]], max_size: int) -> tuple[str, ...]:
    """The keys the queued job ``key`` at ``path`` waits for, as read_edited judges it, else () (``onite cancel``
    asks this of every queued job, nearly all of which wait for nothing)."""
    job = read_edited(path, key, uid, markers, max_size, waiting=True)
    return () if job is None else job.after


def take(edits: list[Marker], job: Job, max_size: int, kept: Path) -> tuple[Job, bool]:
    """The driver, having claimed ``job``: take its trusted ``edits`` (oldest first); return it with the limits
    of the latest that applies (as ``edited`` judges), and whether one did. That one is renamed to ``kept``, for
    recovery to put back (``put_back``) if the driver dies before the claimed file holds it; the rest go unread."""
    latest = None
    for i, edit in enumerate(reversed(edits)):
        new = _apply(edit, job, max_size) if latest is None and i < EDITS_READ else None
        if new is None:
            withdraw_edit(edit.path)
        elif _rename(edit.path, kept, "taking an edit: moving"):
            latest = new
    return (job, False) if latest is None else (latest, True)


def put_back(kept: Path, folder: Path, name: str) -> bool:
    """Put back into ``folder`` (edit/), as the newest, the edit a driver killed before its claimed file held it
    took (``take``), for the job's next claim. False if there was none. Raises SpoolIOError."""
    return _rename(kept, folder / f"{name}{SIDE}{token()}", "putting back an edit: moving")


def _rename(path: Path, target: Path | None, action: str) -> bool:
    """Rename ``path`` (``target`` None: unlink it); False if another call took it first. Raises SpoolIOError."""
    try:
        if target is None:
            os.unlink(path)
        else:
            os.rename(path, target)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise SpoolIOError(path, action, err) from None
    return True


def add_edit(folder: Path, job: Job, owner: tuple[int, int] | None) -> Path:
    """Write ``job``'s limits as a new edit of it, ``owner``'s. Raises SpoolError: no edit/; SpoolIOError."""
    name = f"{job.name}{SIDE}{token()}"
    create_file(folder, name, encode(job._replace(env={}, body=EDIT_TEXT)), owner=owner)
    return folder / name


def withdraw_edit(path: Path) -> bool:
    """Unlink an edit: True if this call (an editor's or the driver's) took it. Raises SpoolIOError."""
    return _rename(path, None, "taking an edit: removing")


def move_edited(path: Path, folder: Path, job: Job, owner: tuple[int, int] | None) -> str:
    """Put ``job`` (the queued file at ``path`` with a new priority) at the end of ``folder``: swap the file for
    the edited one in one step, then move it. ``"moved"``; ``"started"``: a claim took the file first (nothing
    changed); ``"changed"``: a claim took the edited file before it moved (it runs edited).
    Raises Refused: no swap on this file system, or a job of the name is in ``folder``; SpoolError, SpoolIOError."""
    tmp = write_unnamed(path.parent, path.name, encode(job), 0o600, owner, durable=True)
    target = folder / path.name
    try:
        try:
            swapped = rename_exchange(tmp, str(path))
        except OSError as err:
            raise SpoolIOError(path, "swapping a job for its edited self", err) from None
        if swapped is None:
            raise Refused(f"this file system cannot swap two files in one step, so job {job.name!r} cannot change "
                          "its priority here", "cancel it and spool it again with -p")
        if not swapped:
            return "started"
        try:
            if not rename_noreplace(str(path), str(target)):  # a file system without renameat2's flags
                if os.path.lexists(target):
                    raise FileExistsError(target)
                move_file(path, target, "moving an edited job to its new priority")
        except (FileNotFoundError, NotFound):
            return "changed"
        except FileExistsError:
            raise Refused(f"job {job.name!r} was edited but stays in its old folder: a file of its name is in "
                          f"{folder}", "see onite list") from None
        except OSError as err:
            raise SpoolIOError(path, "moving an edited job to its new priority", err) from None
        fsync_dir(folder)
        return "moved"
    finally:
        discard(tmp)
