"""The queued jobs as anyone may see them: in queue order (onite.core.queue), held ones marked,
without opening a file."""

from __future__ import annotations

from collections.abc import Iterator

from onite.spool.holds import held_by
from onite.spool.paths import SpoolDir
from onite.spool.scan import Entry, Marker, find_running, job_stats, key_uid, read_markers, stat_entry


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
    """The queued files of job ``name`` (a key; normally one), each ``held`` if a marker holds it; a
    forgery at the key is none. ``holds``: hold/ as the caller read it (read_markers), else it is read here if needed."""
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
    """Where job ``name`` (a key) is: "queued", "held" (every queued file of it is held), "running", or
    None; and its files there. The queue is looked at before running/, so a job claimed meanwhile is found.
    Raises SpoolIOError: a folder cannot be looked into."""
    queued = find_queued(spool, name, holds)
    if queued:
        return "held" if all(e.held for e in queued) else "queued", queued
    running = find_running(spool, name)
    return "running" if running else None, running
