"""Containment: every process a job starts ends when the job ends (or is stopped).

A process group is not a container (``setsid`` leaves it); a cgroup is. Where the driver can, each
job runs in a cgroup v2 of its own under the driver's own cgroup; elsewhere the job's monitor is a
subreaper that ends what the job left; ``contain = false`` stops only the job's process group. A
process named by its pid is signalled through a pidfd checked against its start time. Reads no file a
user can write.
"""

from __future__ import annotations

import errno
import os
import time
from contextlib import suppress

CGROUP2 = "cgroup2"
SUBREAPER = "subreaper"
OFF = "off"

SUBTREE = "onite"  # the folder under the driver's own cgroup that holds one cgroup per job
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")  # the cgroup v1 hierarchies onite.exec.limits may use
PR_SET_CHILD_SUBREAPER = 36
PROBE = ".probe-"  # the cgroup ``discover`` makes and removes at once to learn it may: PROBE + its pid
SLOT = "monitor-"  # a job's cgroups: SLOT + its monitor's pid + "-" + a count (onite.exec.monitor.Slot)
STALE_CGROUP_AGE = 600  # s: a job joins its cgroup within moments of its creation; one this old and empty is left over


class Containment:
    """``kind``: CGROUP2, SUBREAPER or OFF; ``base``: the folder of the jobs' cgroups (CGROUP2); ``why``."""

    def __init__(self, kind: str, base: str | None = None, why: str = "") -> None:
        self.kind = kind
        self.base = base
        self.why = why

    def describe(self) -> str:
        """``cgroup2 /sys/fs/cgroup/onite``, ``subreaper (why)``, ``off (why)``."""
        if self.kind == CGROUP2:
            return f"cgroup2 {self.base}"
        return f"{self.kind} ({self.why})" if self.why else self.kind


def make_cgroup(path: str) -> bool:
    """Make a cgroup (or v1 group), and its folder first if another driver removed it as it ended; False if
    it cannot be made."""
    return _mkdir(path) or (_mkdir(os.path.dirname(path)) and _mkdir(path))


def _mkdir(path: str) -> bool:
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError:
        return False
    return True


def remove_base(found: Containment) -> None:
    """As the driver ends: remove the jobs' cgroup folder if empty and holding no controllers (left there, it
    would keep a supervisor other than systemd from removing the driver's cgroup)."""
    if found.kind != CGROUP2 or found.base is None:
        return
    with suppress(OSError):  # a job's cgroup is in it (another driver's, a dead run's), or it is gone
        if not read_file(f"{found.base}/cgroup.subtree_control").strip():
            os.rmdir(found.base)


def discover(enabled: bool) -> Containment:
    """The containment this process can give jobs: the jobs' folder goes under the driver's own cgroup v2
    (under systemd, inside the service's delegated subtree)."""
    if not enabled:
        return Containment(OFF, why="contain = false in onite.toml")
    if os.geteuid() != 0:
        return Containment(SUBREAPER, why="not root: no cgroup of its own")
    mount = cgroup_mounts("/proc/self/mountinfo").get(CGROUP2)
    if mount is None:
        return Containment(SUBREAPER, why="no cgroup v2 file system is mounted")
    relative = own_cgroups("/proc/self/cgroup").get(CGROUP2)
    if relative is None:
        return Containment(SUBREAPER, why="this process is in no cgroup v2")
    base = os.path.normpath(f"{mount}/{relative}/{SUBTREE}")
    try:
        try:
            _probe(base)
        except FileNotFoundError:  # another driver in this cgroup ended and removed it meanwhile
            _probe(base)
    except OSError as err:
        return Containment(SUBREAPER, why=f"cannot make cgroups in {mount}: {err.strerror}")
    if not os.path.exists(f"{base}/cgroup.procs"):
        return Containment(SUBREAPER, why=f"{base} is not a cgroup")
    return Containment(CGROUP2, base)


def _probe(base: str) -> None:
    """Make the jobs' folder, and a cgroup in it, removed at once; OSError if this process may not."""
    os.makedirs(base, 0o755, exist_ok=True)
    probe = f"{base}/{PROBE}{os.getpid()}"
    os.mkdir(probe)
    os.rmdir(probe)


def cgroup_mounts(mountinfo: str) -> dict[str, str]:
    """Where each cgroup hierarchy is mounted first: CGROUP2 → its mount, and each v1 controller's."""
    found: dict[str, str] = {}
    with suppress(OSError), open(mountinfo, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            # ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPEROPTIONS
            left, sep, right = line.partition(" - ")
            fields, parts = left.split(" "), right.split()
            if not sep or not parts or len(fields) < 5:
                continue
            names = [CGROUP2] if parts[0] == CGROUP2 else \
                parts[2].split(",") if parts[0] == "cgroup" and len(parts) >= 3 else []
            for name in names:
                if name == CGROUP2 or name in V1_CONTROLLERS:
                    found.setdefault(name, fields[4].replace("\\040", " "))
    return found


def own_cgroups(own: str) -> dict[str, str]:
    """This process's cgroups: CGROUP2 → its v2 path (``0::``), each v1 controller → its group."""
    found: dict[str, str] = {}
    with suppress(OSError), open(own, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            number, _, rest = line.rstrip("\n").partition(":")
            controllers, _, path = rest.partition(":")
            for name in [CGROUP2] if number == "0" and not controllers else controllers.split(","):
                if name == CGROUP2 or name in V1_CONTROLLERS:
                    found.setdefault(name, path or "/")
    return found


def read_file(path: str) -> bytes:
    """A small kernel file (a cgroup's, /proc's); OSError if it cannot be read."""
    with open(path, "rb") as handle:
        return handle.read()


def write_file(path: str, text: str) -> int:
    """Write ``text`` to a control file in one write: 0, or the errno that refused it."""
    try:
        with open(path, "wb", buffering=0) as handle:
            handle.write(text.encode("ascii"))
        return 0
    except OSError as err:
        return err.errno or errno.EIO


def cgroup_pids(path: str) -> list[int]:
    try:
        return [int(word) for word in read_file(f"{path}/cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def is_populated(path: str) -> bool:
    try:
        events = read_file(f"{path}/cgroup.events")
    except OSError:  # gone, or a cgroup v1 group, which has no cgroup.events
        events = b""
    for line in events.splitlines():
        if line.startswith(b"populated "):
            return line.split()[1] != b"0"
    return bool(cgroup_pids(path))


def kill_cgroup(path: str) -> None:
    """SIGKILL every process in the cgroup: ``cgroup.kill``, or one by one (frozen) before Linux 5.14."""
    if write_file(f"{path}/cgroup.kill", "1") != 0:
        import signal

        signal_cgroup(path, signal.SIGKILL)


def kill_groups(groups: tuple[str, ...], rounds: int = 50) -> bool:
    """SIGKILL every process in these v1 groups, looking again up to ``rounds`` times; True if any was there.
    Their pids group first takes no new process (``pids.max`` 0): a process that keeps forking a successor
    and exiting cannot outrun the kills."""
    for group in groups:
        write_file(f"{group}/pids.max", "0")  # only the pids group has the file
    killed = False
    for group in groups:
        for round_ in range(rounds):  # a process still exiting (or forking, with no pids group) is caught later
            if not cgroup_pids(group):
                break
            killed = True
            kill_cgroup(group)
            if round_ + 1 < rounds:
                time.sleep(0.01)
    return killed


def signal_cgroup(path: str, sig: int) -> None:
    """Send ``sig`` to every process of the cgroup, frozen meanwhile (at most 0.2 s is waited for it) where a
    cgroup v2 freezer can (a frozen process can neither fork nor exit nor reap), so no pid read is given to
    another process before it is signalled."""
    frozen = write_file(f"{path}/cgroup.freeze", "1") == 0
    deadline = time.monotonic() + 0.2
    try:
        with suppress(OSError):
            while frozen and time.monotonic() < deadline and b"frozen 1" not in read_file(f"{path}/cgroup.events"):
                time.sleep(0.002)
        for pid in cgroup_pids(path):
            signal_pid(pid, sig)
    finally:
        if frozen:
            write_file(f"{path}/cgroup.freeze", "0")


def remove_cgroup(path: str, wait: float = 2.0) -> None:
    """Remove an emptied cgroup (it stays busy for a moment after its last process was killed)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(path)
        except OSError as err:
            if err.errno == errno.EBUSY and time.monotonic() <= deadline:
                time.sleep(0.01)
                continue
        return


def set_subreaper() -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after its name (state, ppid, pgrp, … start time at [19]), or None."""
    try:
        data = read_file(f"/proc/{pid}/stat")
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    return fields if len(fields) > 19 else None


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a process from a later one that reused its pid."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def is_zombie(pid: int) -> bool:
    """Has ``pid`` exited (unreaped, or gone)?"""
    fields = stat_fields(pid)
    return fields is None or fields[0] in (b"Z", b"X")


def boot_id() -> str:
    """This boot of the machine ("" if unknown)."""
    try:
        return read_file("/proc/sys/kernel/random/boot_id").decode("ascii", "replace").strip()
    except OSError:
        return ""


def signal_pid(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False if none of it is left (or ours to signal)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def sweep_stale(folders: list[str], *, older_than: float = STALE_CGROUP_AGE, only=None) -> int:
    """Remove the empty slots and probes under ``folders`` older than ``older_than`` s, of those ``only(name)``
    says (a young one may be about to be joined); how many."""
    now = time.time()
    removed = 0
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            ours = (_numbered(entry.name, PROBE) or _numbered(entry.name, SLOT)) and (only is None or only(entry.name))
            try:
                if not (ours and entry.is_dir(follow_symlinks=False)):
                    continue
                if now - entry.stat(follow_symlinks=False).st_ctime < older_than or is_populated(entry.path):
                    continue
                os.rmdir(entry.path)
                removed += 1
            except OSError:
                continue  # busy, gone, or not ours to remove
    return removed


def _numbered(name: str, prefix: str) -> bool:
    """Is ``name`` ``prefix`` and numbers joined by "-" (a probe's, a slot's)?"""
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return bool(rest) and all(part.isdigit() for part in rest.split("-"))


def listed():
    """(pid, /proc/PID/stat fields) of every process."""
    for entry in os.listdir("/proc"):
        fields = stat_fields(int(entry)) if entry.isdigit() else None
        if fields is not None:
            yield int(entry), fields


def descendants(pid: int) -> list[tuple[int, int]]:
    """Every live descendant of ``pid`` (parents before children), each with its start time."""
    tree: dict[int, list[tuple[int, int]]] = {}
    for child, fields in listed():
        tree.setdefault(int(fields[1]), []).append((child, int(fields[19])))
    found = list(tree.get(pid, ()))
    for child, _ in found:  # grows as it goes: each child's children after it
        found.extend(tree.get(child, ()))
    return found


def signal_exact(pid: int, ticks: int | None, sig: int) -> bool:
    """Send ``sig`` to the process ``pid`` that started at ``ticks`` (None: whichever has the pid now), through
    a pidfd opened before its start time is checked; whether it was sent."""
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
    """Is any process but ``leader`` (an unreaped zombie) alive in its process group? From /proc: a signal 0
    to the group would count the zombie."""
    return any(pid != leader and int(fields[2]) == leader and fields[0] not in (b"Z", b"X")
               for pid, fields in listed())
