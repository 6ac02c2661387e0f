"""Processes named by their pids, safely: a pid is given again once its process is reaped, so
what is sent to a process goes through a pidfd checked against its start time, and never reaches
a later process of the same number. Runs in the monitor: imports only os, signal and
onite.exec.contain.
"""

from __future__ import annotations

import os

from onite.exec.contain import process_start_ticks, stat_fields


def descendants(pid: int) -> list[tuple[int, int]]:
    """Every live descendant of ``pid`` (parents before children), each with its start time."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        fields = stat_fields(int(entry)) if entry.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child[0], ()))
    return found


def signal_exact(pid: int, ticks: int | None, sig: int) -> bool:
    """Send ``sig`` to the process ``pid`` that started at ``ticks`` (None: whichever has the pid
    now), through a pidfd opened before its start time is checked; whether it was sent."""
    import signal  # here: submit reads boot_id() from contain and need not pay for signal's enums

    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if ticks is None or process_start_ticks(pid) == ticks:
            signal.pidfd_send_signal(fd, sig)
            return True
    except OSError:
        pass
    finally:
        os.close(fd)
    return False


def group_has_others(pgid: int, leader: int) -> bool:
    """Is any process but ``leader`` (whose unreaped zombie keeps the group's number) alive in group
    ``pgid``? Read from /proc: a signal 0 to the group would count the zombie."""
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
