"""Looking at a spool's folders without reading a file: entries, claims, the cancel inbox, live names.

An *entry* is a file in a spool folder as the file system shows it (name,
owner, mode, ctime; onite.core.names decides what is a job name). Nothing
here opens a job file: other users' jobs are private, and a listing of
100,000 jobs must not open 100,000 files. Names that are no job names
(dot-names of writes in progress, side files, whatever a user planted) are
never entries; the driver finds those in its queue index and moves them
aside. Queued jobs, with their holds, are onite.spool.queued's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from onite.core.errors import SpoolIOError
from onite.core.names import SIDE, is_valid_name
from onite.spool.paths import SpoolDir


class Entry(NamedTuple):
    """A file in a spool folder as the file system shows it, without reading it: a queued job, a
    claim, or an entry of cancel/."""

    name: str
    path: Path
    uid: int
    mode: int
    ctime_ns: int
    rank: int | None = None  # queued: 0 urgent, k for Pk
    host: str | None = None  # running: the claiming host
    size: int = 0
    held: bool = False  # queued: a hold marker holds it (onite.spool.queued.find_queued)


def job_stats(folder: Path) -> Iterator[tuple[os.DirEntry, os.stat_result]]:
    """The job files of ``folder`` with their lstat; nothing if it is gone. Entries whose names are
    not job names (dot-names of writes in progress, side files, and whatever a user planted: a
    newline, an escape sequence, bytes that are not UTF-8) are not jobs and are left out; the driver
    finds those in its queue index (onite.spool.index.QueueIndex.strays) and moves them aside.

    Raises:
        SpoolIOError: the folder cannot be listed.
    """
    try:
        it = os.scandir(folder)
    except FileNotFoundError:
        return
    except OSError as err:
        raise SpoolIOError(folder, "listing", err) from None
    with it:
        for entry in it:
            if not is_valid_name(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # claimed or cancelled while we looked
            yield entry, st


def _entries(folder: Path, **extra) -> Iterator[Entry]:
    for entry, st in job_stats(folder):
        yield Entry(entry.name, Path(entry.path), st.st_uid, st.st_mode, st.st_ctime_ns, **extra)


def running_entries(spool: SpoolDir, host: str | None = None) -> list[Entry]:
    """The claims of drivers (running/HOST/NAME): on ``host``, or on every host; oldest claim first."""
    hosts = [host] if host else spool.hosts()
    result: list[Entry] = []
    for h in hosts:
        result.extend(sorted(_entries(spool.running_dir(h), host=h), key=lambda e: (e.ctime_ns, e.name)))
    return result


def of_the_job(entries: list[Entry], owner: int | None, caller: int | None) -> list[Entry]:
    """Of the queued (or running) ``entries`` of one name, those of the job it stands for: ``owner``'s
    once known, else the ``caller``'s own, else those of the one that got its place first (the
    kernel's ctime, as the driver rules): a namesake another user planted beside it is not it."""
    if not entries:
        return entries
    if owner is None:
        own = [entry for entry in entries if entry.uid == caller]
        owner = own[0].uid if own else min(entries, key=lambda entry: entry.ctime_ns).uid
    return [entry for entry in entries if entry.uid == owner]


def find_running(spool: SpoolDir, name: str) -> list[Entry]:
    """The claims of job ``name`` (normally none or one; one a host)."""
    found = []
    for host in spool.hosts():
        entry = stat_entry(spool.running_dir(host), name, host=host)
        if entry:
            found.append(entry)
    return found


def stat_entry(folder: Path, name: str, **extra) -> Entry | None:
    """The entry ``folder/name``, or None if there is none.

    Raises:
        SpoolIOError: it cannot be looked at.
    """
    try:
        st = os.lstat(f"{folder}/{name}")  # a Path is made only for what is found
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise SpoolIOError(folder / name, "looking at", err) from None
    return Entry(name, folder / name, st.st_uid, st.st_mode, st.st_ctime_ns, **extra)


def token_entries(folder: Path) -> Iterator[tuple[str, os.DirEntry, os.stat_result]]:
    """The ``NAME@TOKEN`` entries of a folder users write (cancel/, hold/) whose NAME is a job name,
    each with its lstat: anything else there is nothing onite acts on. No folder: nothing.

    Raises:
        SpoolIOError: the folder cannot be listed.
    """
    for name, entry in token_names(folder):
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        yield name, entry, st


def token_names(folder: Path) -> Iterator[tuple[str, os.DirEntry]]:
    """``token_entries`` without their lstat: only the listing.

    Raises:
        SpoolIOError: the folder cannot be listed.
    """
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as err:
        raise SpoolIOError(folder, "listing", err) from None
    with it:
        for entry in it:
            name, sep, _ = entry.name.partition(SIDE)
            if sep and is_valid_name(name):
                yield name, entry


def cancel_inbox(spool: SpoolDir) -> list[Entry]:
    """Everything in cancel/: withdrawn jobs (non-empty files) and cancel requests (empty ones).

    Raises:
        SpoolIOError: cancel/ cannot be listed.
    """
    return [Entry(name, Path(entry.path), st.st_uid, st.st_mode, st.st_ctime_ns, size=st.st_size)
            for name, entry, st in token_entries(spool.cancel_dir)]


def withdrawn_entries(spool: SpoolDir) -> list[Entry]:
    """Queued jobs that users cancelled and no driver has filed yet (cancel/NAME@…)."""
    return [e for e in cancel_inbox(spool) if e.size and stat.S_ISREG(e.mode)]


class Withdrawn:
    """cancel/ listed once, when first asked (for one look of ``onite status``; for the driver, while
    the folder is unchanged), by job name: whose jobs of a name are withdrawn (non-empty regular files
    there) is looked up only for the names asked about, once each. Anyone may fill cancel/: a look
    that explains 200 jobs costs one listing of it, not one each, and 100,000 entries of one name
    one lstat each.
    """

    def __init__(self, spool: SpoolDir) -> None:
        self._folder = spool.cancel_dir
        self._paths: dict[str, list[str]] | None = None
        self._owners: dict[str, frozenset[int]] = {}
        self._mtime_ns: int | None = None

    def owners(self, name: str) -> frozenset[int]:
        """The uids whose job ``name`` is withdrawn and not yet filed.

        Raises:
            SpoolIOError: cancel/ cannot be listed.
        """
        found = self._owners.get(name)
        if found is None:
            uids = set()
            for path in self._listing().get(name, ()):
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if st.st_size and stat.S_ISREG(st.st_mode):
                    uids.add(st.st_uid)
            found = self._owners[name] = frozenset(uids)
        return found

    def unchanged(self) -> bool:
        """Is cancel/ as it was when listed (or not listed yet)? Its mtime moves with every entry made
        or removed; one made in the clock tick of the listing may be missed until the next change,
        which for a dependency means only "cancelled" said as "no longer exists": it fails either way."""
        if self._paths is None:
            return True
        try:
            return os.stat(self._folder).st_mtime_ns == self._mtime_ns
        except OSError:
            return False

    def _listing(self) -> dict[str, list[str]]:
        if self._paths is None:
            try:
                self._mtime_ns = os.stat(self._folder).st_mtime_ns
            except OSError:
                self._mtime_ns = None
            paths: dict[str, list[str]] = {}
            for name, entry in token_names(self._folder):
                paths.setdefault(name, []).append(entry.path)
            self._paths = paths
        return self._paths


def is_live(spool: SpoolDir, name: str, hosts: list[str] | None = None) -> bool:
    """Is a job of this name queued or running (on any host; ``hosts``: spool.hosts(), if the caller has it)?

    Raises:
        SpoolIOError: a folder of the spool cannot be looked into.
    """
    return any(True for _ in _live_stats(spool, name, hosts))  # stops at the first found


def live_owners(spool: SpoolDir, name: str) -> set[int]:
    """The uids of the queued and running jobs of this name (normally none or one: a name is one
    job's at a time, but a file written into a queue folder by hand is checked only by the driver).

    Raises:
        SpoolIOError: a folder of the spool cannot be looked into.
    """
    return {st.st_uid for st in _live_stats(spool, name, None)}


def _live_stats(spool: SpoolDir, name: str, hosts: list[str] | None) -> Iterator[os.stat_result]:
    # find_queued and find_running, without their Entry objects: retention asks is_live of every job it removes
    hosts = spool.hosts() if hosts is None else hosts
    folders = [folder for _, folder in spool.queue_folders()] + [spool.running_dir(host) for host in hosts]
    for folder in folders:
        try:
            yield os.lstat(f"{folder}/{name}")
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as err:
            raise SpoolIOError(folder / name, "looking at", err) from None


def name_taken(spool: SpoolDir, name: str) -> bool:
    """Used by a live job, a filed cancellation or a kept result (so --unique never reuses output)."""
    return is_live(spool, name) or spool.result_path(name).exists() or spool.output_path(name).exists()


def user_name(uid: int) -> str:
    """The account name of the owner ``uid`` of a spool file, or the number if it has none."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
