"""``onite output NAME --follow``: print a job's output as it grows, and stop when the job has finished.

A queued job is waited for until it starts; the end is ``onite wait``'s (onite.app.wait). A new run
replaces the output by a new file (onite.spool.outputs.open_output), so a file is this run's only if it
differs (inode and ctime) from the one there when the follow began, and a file replaced while followed
is finished, then the new one followed. Only the job's owner and root may read it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from onite.core.errors import JobFormatError, NotFound, Refused
from onite.spool.filecheck import BadFile, read_job_head
from onite.spool.outputs import copy_data, open_job_output
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result
from onite.spool.accounts import user_name
from onite.spool.scan import find_queued, find_running, key_uid
from onite.core.policy import owner_or_root
from onite.app.common import label
from onite.app.wait import PENDING, Final, judge, look, start, undrained, unfiled
from onite.core.clock import SYSTEM

POLL = 0.2  # seconds between looks while the output does not grow


def follow(spool: SpoolDir, name: str, out: BinaryIO, *, stderr: bool, announce: Callable[[str], None]) -> Final:
    """Copy the output of job ``name`` (with ``stderr``: its kept-apart stderr) to ``out`` as it is
    written, until the job has finished; return how it ended. ``announce`` is told once if the job has
    not started yet. Only an output file of the job's owner (its key's user) is copied; Refused: another's job."""
    shown = label(name)  # as the caller writes it: NAME for their own job
    watch = start(spool, [shown])[shown]
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
            watch, final = judge(watch, look(spool, name, with_result=not watch.seen_live))
            if final is PENDING and watch.live == "running":  # ended, its driver dead: nothing files it soon
                final = unfiled(spool, name, SYSTEM.now())
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
                note = undrained(spool, [watch.name], SYSTEM.now()) if watch.live == "queued" else ""
                announce(f"{note}{shown} is {watch.live}; waiting for it to start")
            time.sleep(POLL)
    finally:
        if handle is not None:
            handle.close()


def _check_separate(spool: SpoolDir, name: str, live: list | None) -> None:
    """NotFound where the job (its ``live`` queued or running files, else its result) keeps stderr with its
    stdout, so that ``--follow --stderr`` would print nothing."""
    separate = None
    if live is not None:
        for entry in live:
            try:
                separate = read_job_head(entry.path, spool.config.max_job_size)[0].stderr_separate
                break
            except (OSError, BadFile, JobFormatError):  # moved on, or unreadable: the follow itself will tell
                continue
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
    """The followed job's output, or None if not there yet or not its owner's (an earlier run's, chmod-ed)."""
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
