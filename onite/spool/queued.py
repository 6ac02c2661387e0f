"""The queued jobs as anyone may see them: in queue order (onite.core.queue), held ones marked,
without opening a file."""

from __future__ import annotations

from collections.abc import Iterator

from onite.spool.holds import held_by, read_holds
from onite.spool.paths import SpoolDir
from onite.spool.scan import Entry, find_running, job_stats, listing, stat_entry

TICK_WAIT_LIMIT = 0.1  # s: at most this long for the kernel's coarse clock to pass a new file's ctime
CLOCK_REALTIME_COARSE = 5  # Linux's id of the clock that stamps a new file's ctime (the time module has no name for it)


def queued_stats(spool: SpoolDir) -> list[tuple[int, int, str, int, bool]]:
    """Every queued job as ``(rank, ctime_ns, name, uid, held)``, in queue order: one lstat a job."""
    return [(rank, *row) for rank, rows in queued_folder_stats(spool) for row in rows]


def queued_folder_stats(spool: SpoolDir) -> Iterator[tuple[int, list[tuple[int, str, int, bool]]]]:
    """``queued_stats`` a folder at a time: its rank, and its jobs as ``(ctime_ns, name, uid, held)``."""
    from onite.core.queue import sort_folder  # not at import: a submit never sorts

    holds = read_holds(spool.hold_dir)
    for rank, folder in spool.queue_folders():
        rows = [(st.st_ctime_ns, entry.name, st.st_uid, bool(holds) and held_by(holds, entry.name, st.st_uid))
                for entry, st in job_stats(folder)]
        sort_folder(rows, ctime=0, name=1)
        yield rank, rows


def find_queued(spool: SpoolDir, name: str, holds: dict[str, frozenset[int]] | None = None) -> list[Entry]:
    """Queued jobs called ``name`` (normally one), each ``held`` if a marker holds it. ``holds``: hold/
    as the caller read it (read_holds), else it is read here if needed."""
    found = [entry for rank, folder in spool.queue_folders() if (entry := stat_entry(folder, name, rank=rank))]
    if found:
        if holds is None:
            holds = read_holds(spool.hold_dir)
        if holds:
            found = [e._replace(held=True) if held_by(holds, e.name, e.uid) else e for e in found]
    return found


def live_state(spool: SpoolDir, name: str, uid: int | None = None, *,
               holds: dict[str, frozenset[int]] | None = None) -> str | None:
    """Where job ``name`` (``uid``'s, if given) is: "queued", "held" (every queued file of it is held),
    "running", or None. The queue is looked at before running/, so a job claimed meanwhile is found.
    Raises SpoolIOError: a folder cannot be looked into."""
    queued = [e for e in find_queued(spool, name, holds) if uid is None or e.uid == uid]
    if queued:
        return "held" if all(e.held for e in queued) else "queued"
    return "running" if any(uid is None or e.uid == uid for e in find_running(spool, name)) else None


def contested(spool: SpoolDir, names: set[str], uid: int) -> list[Entry]:
    """Queued files of ``names`` of users other than ``uid`` that got their place no later than ``uid``'s
    file of the name (just created), looked at once the kernel's clock has passed its ctime.

    A check that a name is free, made before a job file gets the name, can be raced by a file put
    in the queue by hand; looked at again here, such a file is seen, and one put there later has a
    later ctime, so the driver gives the name to the earlier file (onite.drain.pick).
    Raises SpoolIOError: a queue folder cannot be looked into."""
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
    """The queued files of ``names``, by name: an lstat a name for a few, a listing a folder for many."""
    found: dict[str, list[Entry]] = {}
    for rank, folder in spool.queue_folders():
        here = names if len(names) <= 8 else names.intersection(entry.name for entry in listing(folder))
        for name in here:
            if entry := stat_entry(folder, name, rank=rank):
                found.setdefault(name, []).append(entry)
    return found
