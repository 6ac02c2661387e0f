"""Processes named by their pids, safely: a pid is given again once its process is reaped, so
what is sent to a process goes through a pidfd checked against its start time, and never reaches
a later process of the same number. Runs in the monitor: imports only os, signal and
onite.exec.contain.
"""

from __future__ import annotations

import os

from onite.exec.contain import process_start_ticks, stat_fields


def listed():
    """(pid, /proc/PID/stat fields) of every process listed now."""
    for entry in os.listdir("/proc"):
        fields = stat_fields(int(entry)) if entry.isdigit() else None
        if fields is not None:
            yield int(entry), fields


def descendants(pid: int) -> list[tuple[int, int]]:
    """Every live descendant of ``pid`` (parents before children), each with its start time."""
    tree: dict[int, list[tuple[int, int]]] = {}
    for child, fields in listed():
        tree.setdefault(int(fields[1]), []).append((child, int(fields[19])))
    found, todo = [], list(tree.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(tree.get(child[0], ()))
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


def group_has_others(leader: int) -> bool:
    """Is any process but ``leader`` (whose unreaped zombie keeps the group's number) alive in its
    process group? Read from /proc: a signal 0 to the group would count the zombie."""
    return any(pid != leader and int(fields[2]) == leader and fields[0] not in (b"Z", b"X")
               for pid, fields in listed())
