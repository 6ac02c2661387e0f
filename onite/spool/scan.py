"""A spool's folders looked at without reading a file: queued jobs in queue order, claims, the cancel inbox.

No job file is opened: other users' jobs are private, and 100,000 of them must not cost 100,000 opens.
A name that is no job name is never an entry (the driver's queue index moves those aside).
"""

from __future__ import annotations

import functools
import os
import pwd
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from onite.core.errors import NotFound, OniteError, SpoolIOError, not_yours
from onite.core.names import SIDE, is_valid_key
from onite.core.policy import owner_or_root
from onite.core.record import Record
from onite.spool.paths import SpoolDir

RACY_NS = 20_000_000  # a listing this soon after its folder's mtime may have missed an entry made in that tick


class Entry(Record):
    """A queued job, a claim or an entry of cancel/, as the file system shows it, without reading it."""

    name: str
    path: Path
    uid: int
    mode: int
    ctime_ns: int
    rank: int | None = None  # queued: 0 urgent, k for Pk
    host: str | None = None  # running: the claiming host
    size: int = 0
    held: bool = False  # queued: a hold marker holds it
    ino: int = 0  # the file's inode (stat_entry): it keeps it through each rename from state to state


def listing(folder: Path) -> Iterator[os.DirEntry]:
    """The entries of ``folder``; none if it is gone. Raises SpoolIOError: the folder cannot be listed."""
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as err:
        raise SpoolIOError(folder, "listing", err) from None
    with it:
        yield from it


def key_stats(folder: Path) -> Iterator[tuple[os.DirEntry, os.stat_result]]:
    """The entries of ``folder`` named as jobs (keys), with their lstat. Raises SpoolIOError."""
    for entry in listing(folder):
        if is_valid_key(entry.name):
            try:
                yield entry, entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # claimed or cancelled while we looked


def job_stats(folder: Path) -> Iterator[tuple[os.DirEntry, os.stat_result]]:
    """``key_stats`` owned by the key's user (a forgery is the driver's to set aside). Raises SpoolIOError."""
    return ((entry, st) for entry, st in key_stats(folder) if st.st_uid == key_uid(entry.name))


def running_entries(spool: SpoolDir, host: str | None = None) -> list[Entry]:
    """The claims on ``host`` (else on every host), each host's oldest first."""
    result: list[Entry] = []
    for h in [host] if host else spool.hosts():
        claims = [Entry(entry.name, Path(entry.path), st.st_uid, st.st_mode, st.st_ctime_ns, host=h)
                  for entry, st in job_stats(spool.running_dir(h))]
        result.extend(sorted(claims, key=lambda e: (e.ctime_ns, e.name)))
    return result


def find_running(spool: SpoolDir, name: str) -> list[Entry]:
    """The claims of job ``name`` (a key), at most one a host; a forgery at the key is none."""
    uid = key_uid(name)
    return [entry for host in spool.hosts()
            if (entry := stat_entry(spool.running_dir(host), name, host=host)) and entry.uid == uid]


def stat_entry(folder: Path, name: str, **extra) -> Entry | None:
    """The entry ``folder/name``, or None if there is none. Raises SpoolIOError."""
    try:
        st = os.lstat(f"{folder}/{name}")  # a Path only for what is found
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise SpoolIOError(folder / name, "looking at", err) from None
    return Entry(name, folder / name, st.st_uid, st.st_mode, st.st_ctime_ns, ino=st.st_ino, **extra)


def token_entries(folder: Path) -> Iterator[tuple[str, os.DirEntry, os.stat_result]]:
    for name, entry in token_names(folder):
        try:
            yield name, entry, entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue


def token_names(folder: Path) -> Iterator[tuple[str, os.DirEntry]]:
    """The ``NAME@TOKEN`` entries of cancel/ or hold/ whose NAME is a job name. Raises SpoolIOError."""
    for entry in listing(folder):
        name, sep, _ = entry.name.partition(SIDE)
        if sep and is_valid_key(name):
            yield name, entry


class Marker(Record):
    """A regular file ``NAME@TOKEN`` of hold/ or edit/: its path, owner and ctime."""

    path: Path
    uid: int
    ctime_ns: int


def read_markers(folder: Path) -> dict[str, list[Marker]]:
    """The markers in ``folder`` (hold/, edit/) by job name, oldest first. Anyone may add one to these sticky
    folders: whose it is decides whether it counts. Raises SpoolIOError."""
    found: dict[str, list[Marker]] = {}
    for name, entry, st in token_entries(folder):
        if stat.S_ISREG(st.st_mode):
            found.setdefault(name, []).append(Marker(Path(entry.path), st.st_uid, st.st_ctime_ns))
    for markers in found.values():
        markers.sort(key=lambda m: (m.ctime_ns, m.path.name))
    return found


def held_by(holds: dict[str, list[Marker]], name: str, uid: int) -> bool:
    """Does a marker of ``uid`` or root in ``holds`` (hold/, read_markers) hold ``uid``'s job ``name``?"""
    return any(owner_or_root(marker.uid, uid) for marker in holds.get(name, ()))


def queued_stats(spool: SpoolDir, used: dict[str, float] | None = None) -> list[tuple[int, int, str, int, bool]]:
    """Every queued job as ``(rank, ctime_ns, name, uid, held)``, in queue order: one lstat a job."""
    return [(rank, *row) for rank, rows in queued_folder_stats(spool, used) for row in rows]


def queued_folder_stats(spool: SpoolDir, used: dict[str, float] | None = None
                        ) -> Iterator[tuple[int, list[tuple[int, str, int, bool]]]]:
    """``queued_stats`` a folder at a time: its rank, and its jobs as ``(ctime_ns, name, uid, held)``.
    With ``order = "fair"``, in the order the users take turns (``used``: their running time this drain)."""
    from onite.core.queue import fair_order, sort_folder  # not at import: a submit never sorts

    holds = read_markers(spool.hold_dir)
    for rank, folder in spool.queue_folders():
        rows = [(st.st_ctime_ns, entry.name, st.st_uid, bool(holds) and held_by(holds, entry.name, st.st_uid))
                for entry, st in job_stats(folder)]
        sort_folder(rows, ctime=0, name=1)
        if spool.config.order == "fair":
            rows = fair_order(rows, lambda row: row[1].partition(":")[0], used or {})
        yield rank, rows


def find_queued(spool: SpoolDir, name: str, holds: dict[str, list[Marker]] | None = None) -> list[Entry]:
    """The queued files of job ``name`` (a key; normally one, a forgery none), each ``held`` if a marker holds
    it. ``holds``: hold/ as the caller read it, else read here if needed."""
    uid = key_uid(name)
    found = [entry for rank, folder in spool.queue_folders()
             if (entry := stat_entry(folder, name, rank=rank)) and entry.uid == uid]
    if found:
        if holds is None:
            holds = read_markers(spool.hold_dir)
        if holds:
            found = [e._replace(held=True) if held_by(holds, e.name, e.uid) else e for e in found]
    return found


def live_entries(spool: SpoolDir, name: str, *,
                 holds: dict[str, list[Marker]] | None = None) -> tuple[str | None, list[Entry]]:
    """Where job ``name`` (a key) is: "queued", "held" (every queued file of it), "running", or None; and its
    files there. The queue is looked at first, so a job claimed meanwhile is found. Raises SpoolIOError."""
    queued = find_queued(spool, name, holds)
    if queued:
        return "held" if all(e.held for e in queued) else "queued", queued
    running = find_running(spool, name)
    return "running" if running else None, running


def cancel_inbox(spool: SpoolDir) -> list[Entry]:
    """cancel/: withdrawn jobs (non-empty files) and cancel requests (empty ones). Raises SpoolIOError."""
    return [Entry(name, Path(entry.path), st.st_uid, st.st_mode, st.st_ctime_ns, size=st.st_size, ino=st.st_ino)
            for name, entry, st in token_entries(spool.cancel_dir)]


def withdrawn_entries(spool: SpoolDir) -> list[Entry]:
    """Jobs withdrawn from their queue that no driver has filed yet (forgeries left out)."""
    return [e for e in cancel_inbox(spool) if e.size and stat.S_ISREG(e.mode) and e.uid == key_uid(e.name)]


class Withdrawn:
    """cancel/ listed once, when first asked, and the withdrawers of each name looked up once: anyone may
    fill cancel/, so a look that explains 200 jobs costs one listing of it, not 200."""

    def __init__(self, spool: SpoolDir) -> None:
        self._folder = spool.cancel_dir
        self._paths: dict[str, list[str]] | None = None
        self._owners: dict[str, frozenset[int]] = {}
        self._mtime_ns: int | None = None
        self._racy = False

    def owners(self, name: str) -> frozenset[int]:
        """The uids whose job ``name`` is withdrawn and not yet filed. Raises SpoolIOError."""
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
        """Is cancel/ as it was when listed (or not listed yet)? A listing within RACY_NS of its mtime never is."""
        return self._paths is None or (self._mtime() == self._mtime_ns and not self._racy)

    def _mtime(self) -> int | None:
        try:
            return os.stat(self._folder).st_mtime_ns
        except OSError:
            return None

    def _listing(self) -> dict[str, list[str]]:
        if self._paths is None:
            self._mtime_ns = self._mtime()
            self._racy = self._mtime_ns is None or time.time_ns() - self._mtime_ns < RACY_NS
            self._paths = {}
            for name, entry in token_names(self._folder):
                self._paths.setdefault(name, []).append(entry.path)
        return self._paths


def is_live(spool: SpoolDir, name: str, hosts: list[str] | None = None) -> bool:
    """Is job ``name`` (a key) queued or running (``hosts``: spool.hosts(), if known)? A forgery is not.
    One lstat a folder: retention asks it of every job it removes. Raises SpoolIOError."""
    uid = key_uid(name)
    hosts = spool.hosts() if hosts is None else hosts
    for folder in [folder for _, folder in spool.queue_folders()] + [spool.running_dir(host) for host in hosts]:
        try:
            if os.lstat(f"{folder}/{name}").st_uid == uid:
                return True
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as err:
            raise SpoolIOError(folder / name, "looking at", err) from None
    return False


def name_taken(spool: SpoolDir, name: str) -> bool:
    """Used by a live job, a kept result or an output (so --unique never reuses an output)."""
    return is_live(spool, name) or spool.result_path(name).exists() or spool.output_path(name).exists()


def namesake_error(spool: SpoolDir, name: str, caller_uid: int, *, others: bool = False,
                   kind: type[OniteError] = NotFound) -> OniteError | None:
    """``no job 'NAME' of yours`` where the bare ``name`` is no job of the caller's but other users' (queued,
    running or kept finished), saying whose it is, or the keys it may have meant to one who may act on them
    (root; anyone where ``others``: wait, --after); None if no one's."""
    hint = namesake_hints(spool, [name], caller_uid, others=others).get(name)
    return None if hint is None else not_yours(name, hint, kind)


def namesake_hints(spool: SpoolDir, names: list[str], caller_uid: int, *, others: bool = False) -> dict[str, str]:
    """``namesake_error``'s hint for each of ``names`` that has one, from one listing of the spool's folders."""
    wanted = {name for name in names if ":" not in name}
    keys: dict[str, set[str]] = {}
    folders = [f for _, f in spool.queue_folders()] + [spool.running_dir(h) for h in spool.hosts()] + [spool.done_dir]
    for folder in folders:
        try:
            # a name's end first: the lstat only for a namesake, never for each of 100,000 queued jobs
            found = [e for e in listing(folder) if e.name.partition(":")[2] in wanted]
        except SpoolIOError:  # a folder this caller may not list: a hint is no reason to fail
            continue
        for entry in found:
            try:
                uid = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if is_valid_key(entry.name) and uid == key_uid(entry.name) and uid != caller_uid:  # no forgery
                keys.setdefault(entry.name.partition(":")[2], set()).add(entry.name)
    return {name: _namesakes_said(sorted(keys[name]), others or caller_uid == 0) for name in names if name in keys}


def _namesakes_said(said: list[str], may_act: bool) -> str:
    if len(said) > 4:  # one line, however many users share a common name
        said[3:] = [f"{len(said) - 3} more"]
    head, last = ", ".join(said[:-1]), said[-1]
    if may_act:
        return f"did you mean {head + ' or ' if head else ''}{last}?"
    if not head:
        return f"{last} is {last.partition(':')[0]}'s job, not yours"
    return f"{head} and {last} are other users' jobs, not yours"


def key_uid(key: str) -> int | None:
    """The uid of the user a key (``USER:NAME``) names, or None: the file at a key is that job only if it owns it."""
    return uid_of(key.partition(":")[0])


def forget_accounts() -> None:
    """Look every key's user up afresh (at each drain of the daemon): a uid given to another account must not
    keep vouching for the old account's keys."""
    uid_of.cache_clear()


@functools.lru_cache(maxsize=4096)
def uid_of(user: str) -> int | None:
    """The uid of the account ``user``, or None: no such account."""
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError):  # no such account; a NUL, which no account name holds
        return None
