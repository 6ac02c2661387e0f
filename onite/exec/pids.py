"""Processes named by their pids, safely: a pid is a number the kernel gives again once its
process is reaped, so what is read of a process (its parent, group, start time, from /proc) and what
is sent to it (through a pidfd, checked against that start time) never reaches a later process that
got the same number.

Used by a job's monitor after fork: imports only os and (lazily) signal, and onite.exec.contain.
"""

from __future__ import annotations

import os

from onite.exec.contain import process_start_ticks, stat_fields


def descendants(pid: int) -> list[tuple[int, int]]:
    """Every live descendant of ``pid``, from /proc (parents before children), each with its start
    time (``process_start_ticks``), which tells it from a later process given the same pid."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child[0], ()))
    return found


def signal_exact(pid: int, ticks: int, sig: int) -> None:
    """Send ``sig`` to the process ``pid`` that started at ``ticks``, never to a later one given its
    pid: through a pidfd, opened, then checked against the start time (a pidfd names one process,
    whatever becomes of its number)."""
    import signal  # here: submit reads boot_id() from this module and need not pay for signal's enums

    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if process_start_ticks(pid) == ticks:
            signal.pidfd_send_signal(fd, sig)
    except OSError:
        pass
    finally:
        os.close(fd)


def group_has_others(pgid: int, leader: int) -> bool:
    """Is any process but ``leader`` (whose unreaped zombie keeps the group's number) left alive in
    group ``pgid``? From /proc: a signal of 0 to the group would count the zombie."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != leader:
            fields = stat_fields(int(entry))
            if fields is not None and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


def parent_of(pid: int) -> int | None:
    """The parent of ``pid`` (None if it is gone)."""
    fields = stat_fields(pid)
    return int(fields[1]) if fields is not None else None


def with_argument(argument: bytes, uid: int) -> list[tuple[int, int]]:
    """The live processes of ``uid`` (their /proc folder's owner) that have ``argument`` as one of their
    command-line words, each with its start time (``process_start_ticks``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                words = handle.read(1 << 20).split(b"\0")
        except OSError:
            continue
        fields = stat_fields(int(entry))
        if argument in words and fields is not None and fields[0] not in (b"Z", b"X"):
            found.append((int(entry), int(fields[19])))
    return found
