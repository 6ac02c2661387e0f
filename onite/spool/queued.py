"""The queued jobs as anyone may see them: in queue order, held ones marked, without opening a file.

Queue order is onite.core.queue's (``order_key``): urgent, then P1 … Pn,
then the kernel's ctime, then the name. A job is held when a marker in
hold/ holds it (onite.spool.holds).
"""

from __future__ import annotations

from collections.abc import Iterator

from onite.spool.holds import held_by, read_holds
from onite.spool.paths import SpoolDir
from onite.spool.scan import Entry, find_running, job_stats, stat_entry


def queued_stats(spool: SpoolDir) -> list[tuple[int, int, str, int, bool]]:
    """Every queued job as ``(rank, ctime_ns, name, uid, held)``, in queue order: for listings of
    100,000 jobs (one lstat a job, and little else)."""
    return [(rank, *row) for rank, rows in queued_folder_stats(spool) for row in rows]


def queued_folder_stats(spool: SpoolDir) -> Iterator[tuple[int, list[tuple[int, str, int, bool]]]]:
    """``queued_stats`` a folder at a time: its rank, and its jobs as ``(ctime_ns, name, uid, held)``."""
    from onite.core.queue import sort_folder  # not at import: a submit, which only looks a name up, never sorts

    holds = read_holds(spool.hold_dir)
    for rank, folder in spool.queue_folders():
        rows = [(st.st_ctime_ns, entry.name, st.st_uid, bool(holds) and held_by(holds, entry.name, st.st_uid))
                for entry, st in job_stats(folder)]
        sort_folder(rows, ctime=0, name=1)
        yield rank, rows


def find_queued(spool: SpoolDir, name: str, holds: dict[str, frozenset[int]] | None = None) -> list[Entry]:
    """Queued jobs called ``name`` (normally one; two only after a race), each ``held`` if a marker
    holds it. ``holds``: hold/ as the caller read it (read_holds) for all the names it asks about;
    else it is read here if needed."""
    found = []
    for rank, folder in spool.queue_folders():
        entry = stat_entry(folder, name, rank=rank)
        if entry:
            found.append(entry)
    if found:
        if holds is None:
            holds = read_holds(spool.hold_dir)
        if holds:
            found = [e._replace(held=True) if held_by(holds, e.name, e.uid) else e for e in found]
    return found


def live_state(spool: SpoolDir, name: str, uid: int | None = None, *,
               holds: dict[str, frozenset[int]] | None = None) -> str | None:
    """Where job ``name`` (``uid``'s, if given: a dependency is its owner's own job) is now: "queued",
    "held" (every queued file of that name is held), "running", or None (neither). Queued folders
    are looked at first, then running/: a job that moves on between the two looks is still found.

    Raises:
        SpoolIOError: a folder cannot be looked into.
    """
    queued = [e for e in find_queued(spool, name, holds) if uid is None or e.uid == uid]
    if queued:
        return "held" if all(e.held for e in queued) else "queued"
    return "running" if any(uid is None or e.uid == uid for e in find_running(spool, name)) else None


TICK_WAIT_LIMIT = 0.1  # s: at most this long for the kernel's coarse clock to pass a new file's ctime
CLOCK_REALTIME_COARSE = 5  # Linux's id of the clock that stamps a new file's ctime (the time module has no name for it)


def contested(spool: SpoolDir, names: set[str], uid: int) -> list[Entry]:
    """Queued files of ``names`` owned by users other than ``uid`` that got their place no later than
    ``uid``'s file of the same name (just created), once the kernel's clock has passed those files'
    ctimes: what a name's new job must give way to.

    Anyone may write into a queue folder, so a check that a name is free, made before a job file
    gets that name, can be raced by a file put there by hand meanwhile (its owner may even have seen
    the writer's temporary file). Looked at again afterwards, and past the clock tick its file was
    stamped in, any such file is seen here; one put there later has a later ctime, and the driver
    gives the name to the earlier file (onite.drain.pick).

    Raises:
        SpoolIOError: a queue folder cannot be looked into.
    """
    settle(spool, names, uid)
    rivals = []
    for entries in _named(spool, names).values():
        mine = [e.ctime_ns for e in entries if e.uid == uid]
        if mine:
            rivals += [e for e in entries if e.uid != uid and e.ctime_ns <= min(mine)]
    return rivals


def settle(spool: SpoolDir, names: set[str], uid: int) -> None:
    """Wait (at most TICK_WAIT_LIMIT) until the kernel's coarse clock, which stamps a new file's ctime,
    has passed the ctimes of ``uid``'s queued files of ``names``: a file put beside them from now on
    has a later ctime."""
    import time

    newest = max((e.ctime_ns for entries in _named(spool, names).values() for e in entries if e.uid == uid),
                 default=0)
    deadline = time.monotonic() + TICK_WAIT_LIMIT
    while time.clock_gettime_ns(CLOCK_REALTIME_COARSE) <= newest and time.monotonic() < deadline:
        time.sleep(0.001)


def _named(spool: SpoolDir, names: set[str]) -> dict[str, list[Entry]]:
    """The queued files of ``names``, by name: an lstat a name and folder for a few names, one
    listing a folder for many (a batch of thousands)."""
    import os
    from pathlib import Path

    found: dict[str, list[Entry]] = {}
    for rank, folder in spool.queue_folders():
        if len(names) <= 8:
            entries = [e for name in names if (e := stat_entry(folder, name, rank=rank))]
        else:
            entries = []
            try:
                with os.scandir(folder) as it:
                    for item in it:
                        if item.name in names:
                            try:
                                st = item.stat(follow_symlinks=False)
                            except FileNotFoundError:
                                continue
                            entries.append(Entry(item.name, Path(item.path), st.st_uid, st.st_mode, st.st_ctime_ns,
                                                 rank=rank, size=st.st_size))
            except FileNotFoundError:
                pass
            except OSError as err:
                from onite.core.errors import SpoolIOError

                raise SpoolIOError(folder, "listing", err) from None
        for entry in entries:
            found.setdefault(entry.name, []).append(entry)
    return found
