"""Driver locks: one ``driver.HOST.lock`` per host, held with flock(2) while a driver runs.

The kernel drops a flock when its holder dies, so a crashed driver never
leaves a stale lock behind (the seed's lock file outlived crashes). The
driver takes its lock through filelock; everyone else only probes.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path


def is_held(path: Path) -> bool:
    """Does a live process hold the lock at ``path``?

    Probes with a shared, non-blocking flock that it drops at once. A driver
    starting in that instant retries its own lock for a moment, so a probe
    never makes a driver give up.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops our shared lock, if we got it
    return False


def lock_files(root: Path) -> list[tuple[str, Path]]:
    """(host, path) of every driver lock file in the spool."""
    found = []
    try:
        with os.scandir(root) as it:
            for entry in it:
                name = entry.name
                if name.startswith("driver.") and name.endswith(".lock") and len(name) > len("driver..lock"):
                    found.append((name[len("driver."):-len(".lock")], Path(entry.path)))
    except OSError:
        return []
    return sorted(found)


def active_hosts(root: Path) -> list[str]:
    """Hosts whose driver is running now."""
    return [host for host, path in lock_files(root) if is_held(path)]


def lock_owner(path: Path) -> str:
    """What the holder wrote into its lock file: ``pid host started``, for messages."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


_PID = re.compile(r"[0-9]{1,10}")


def holder_fields(line: str) -> dict[str, str]:
    """The ``key=value`` words of a lock's holder line (``pid=4711 host=vm since=ISO [role=daemon]``).
    Total: any text gives the words of that form it holds (values unchecked: see held_locks)."""
    fields = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key:
            fields[key] = value
    return fields


@dataclass(frozen=True)
class HeldLock:
    """A driver lock that a live process holds, and what its holder line says."""

    host: str
    holder: str  # the line as written: ``pid=4711 host=vm since=ISO [role=daemon]``
    pid: int | None
    since: str | None  # ISO 8601, as written
    role: str  # "driver", or "daemon" (a daemon holds its lock for its whole life)


def held_locks(root: Path) -> list[HeldLock]:
    """Every driver lock of the spool at ``root`` that is held now, by host."""
    held = []
    for host, path in lock_files(root):
        if is_held(path):
            holder = lock_owner(path)
            fields = holder_fields(holder)
            pid = fields.get("pid", "")
            # isdigit() is also true of "²" and "٣", which int() refuses or reads otherwise
            held.append(HeldLock(host, holder, int(pid) if _PID.fullmatch(pid) else None, fields.get("since"),
                                 fields.get("role", "driver")))
    return held
