"""Retention: keep each user's last ``keep`` finished jobs (result, job file, output); remove older ones.

"Last" by the result record's mtime, "each user's" by the uid it names: counted over the whole spool,
one user's jobs would push everyone else's out. Nothing of a name queued or running again is removed
until it is filed anew.
"""

from __future__ import annotations

import os
import stat

from onite.core.errors import DamagedRecord, SpoolIOError
from onite.core.names import SIDE
from onite.spool.files import remove_file
from onite.spool.paths import RESULT, STDERR, SpoolDir
from onite.spool.results import read_result
from onite.spool.scan import is_live, listing

UNKNOWN_OWNER = -1  # a damaged record's: such records are kept ``keep`` among themselves
TEMP_AGE = 3600  # seconds after which a dot-name .tmp file is a write that died (a crash, a kill)
_OWNERS: dict[tuple[str, int, int], int] = {}  # (name, inode, mtime) → uid: records rarely change


def prune(spool: SpoolDir, keep: int, *, protect: set[str] = frozenset(), strays: bool = True) -> int:
    """Remove each user's finished jobs beyond their newest ``keep``; return how many. ``strays``: also what no
    kept result explains (left by a crash or a cancel), older than every kept one. Raises SpoolIOError."""
    records: list[tuple[int, str, int]] = []
    for entry in listing(spool.done_dir):
        if entry.name.endswith(RESULT) and entry.name[0] != ".":
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            records.append((st.st_mtime_ns, entry.name[: -len(RESULT)], st.st_ino))
    if len(records) <= keep:
        return 0  # no one can have more than all of them
    records.sort(reverse=True)
    counts: dict[int, int] = {}
    kept: list[tuple[int, str]] = []  # each owner's newest ``keep``
    beyond: list[tuple[int, str]] = []
    seen: dict[tuple[str, int, int], int] = {}
    for mtime, name, ino in records:
        key = (name, ino, mtime)
        owner = _OWNERS.get(key)
        if owner is None:
            try:
                result = read_result(spool, name)
                owner = None if result is None else result.uid
            except DamagedRecord:
                owner = UNKNOWN_OWNER
            except SpoolIOError:
                owner = None
            if owner is None:
                kept.append((mtime, name))  # unreadable for now: counted against no one, removed by no one
                continue
        seen[key] = owner
        counts[owner] = counts.get(owner, 0) + 1
        (kept if counts[owner] <= keep else beyond).append((mtime, name))
    _OWNERS.clear()
    _OWNERS.update(seen)
    hosts = spool.hosts()  # listed once, not once per record removed
    removed = 0
    for _, name in beyond:
        # looked at just before its files go: another host's driver may be filing it as this one prunes
        if name in protect or is_live(spool, name, hosts):
            continue
        for path in spool.finished_files(name):
            remove_file(path)
        removed += 1
    if strays:
        _remove_strays(spool, {n for _, n in kept} | protect, kept[-1][0] if kept else None)
    return removed


def remove_temp_files(spool: SpoolDir, now: float) -> int:
    """Remove the ``.tmp`` dot-names of writers killed mid-write, once TEMP_AGE old (the writer may be another
    machine's); return how many."""
    folders = [spool.done_dir, spool.stdout_dir, spool.cancel_dir, spool.recur_dir, spool.jobs_dir]
    folders += [folder for _, folder in spool.queue_folders()]
    folders += [spool.running_dir(host) for host in spool.hosts()]
    removed = 0
    for folder in folders:
        try:
            with os.scandir(folder) as it:
                entries = [entry for entry in it if entry.name.startswith(".") and entry.name.endswith(".tmp")]
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if now - st.st_mtime >= TEMP_AGE and not stat.S_ISDIR(st.st_mode) and remove_file(entry.path):
                removed += 1
    return removed


def _remove_strays(spool: SpoolDir, kept: set[str], oldest_kept_ns: int | None) -> None:
    """Outputs and job files in jobsdone/ that no kept result explains, older than every kept one."""
    hosts = spool.hosts()
    for folder in (spool.stdout_dir, spool.done_dir):
        for entry in list(listing(folder)):
            name = entry.name
            if folder == spool.stdout_dir and name.endswith(STDERR):
                name = name[: -len(STDERR)]  # NAME@stderr goes with NAME's output
            if not name or name[0] == "." or SIDE in name or name in kept:
                continue
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime_ns
            except FileNotFoundError:
                continue
            if oldest_kept_ns is not None and mtime >= oldest_kept_ns:
                continue
            if not spool.result_path(name).exists() and not is_live(spool, name, hosts):
                remove_file(folder / entry.name)
