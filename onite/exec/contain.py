"""Containment: every process a job starts ends when the job ends (or is stopped).

A process group is not a container: a job leaves it with ``setsid`` or
``set -m``. The kernel's container for "everything this job started" is a
cgroup, as systemd (KillMode=control-group) and Slurm (proctrack/cgroup) use
it. So, where the driver can, each job runs in a cgroup v2 of its own,
``<driver's cgroup>/onite/<run id>``, that its process joins before it
executes anything; stopping the job signals every process in it, and
``cgroup.kill`` ends them all at once, however they were started. Where no
writable cgroup v2 tree exists (containers, old kernels), the job's monitor
(onite.exec.monitor) makes itself a child subreaper (PR_SET_CHILD_SUBREAPER):
whatever the job leaves behind is re-parented to the monitor rather than to
init, so the monitor finds it among its own descendants and ends it.
``contain = false`` in onite.toml turns both off (for jobs that must leave a
daemon behind); then only the job's process group is stopped, as before.

Which kind is in effect is decided once per driver (``discover``) and
logged at driver-start; ``onite status`` shows it.

Only this module knows cgroup paths. Everything here runs as root (the
driver) or in a job's monitor; nothing reads files users can write.
"""

from __future__ import annotations

import errno
import os
import time

CGROUP2 = "cgroup2"
SUBREAPER = "subreaper"
OFF = "off"

SUBTREE = "onite"  # the folder under the driver's own cgroup that holds one cgroup per job
PR_SET_CHILD_SUBREAPER = 36
PROBE = ".probe-"  # the cgroup ``discover`` makes and removes at once to learn it may: PROBE + its pid


class Containment:
    """How this driver contains jobs: ``kind`` is CGROUP2, SUBREAPER or OFF; ``base`` the cgroup
    folder that holds the jobs' cgroups (CGROUP2 only)."""

    def __init__(self, kind: str, base: str | None = None, why: str = "") -> None:
        self.kind = kind
        self.base = base
        self.why = why  # for the log: why this kind (e.g. why no cgroup)

    def describe(self) -> str:
        """What the log and ``onite status`` say: ``cgroup2 /sys/fs/cgroup/onite``, ``subreaper``, ``off``."""
        if self.kind == CGROUP2:
            return f"cgroup2 {self.base}"
        return f"{self.kind} ({self.why})" if self.why else self.kind

    def job_cgroup(self, run_id: str) -> str | None:
        """The path of one run's cgroup (its monitor makes it: ``make_cgroup``); None where jobs get no cgroup."""
        if self.kind != CGROUP2:
            return None
        return f"{self.base}/{run_id}"


def make_cgroup(path: str) -> bool:
    """Make a run's cgroup, or v1 group (in its monitor, before the job starts); its folder first
    if another driver in the same cgroup removed it as it ended (``remove_base``,
    onite.exec.limits.Limiter.remove_folders): only the folder, since the driver's own cgroup above
    it holds the driver. A failure to make it (the tree became read-only, a limit on descendants)
    is no reason not to run the job: it falls back to the subreaper, which every monitor is anyway
    (and runs without the limit a group would hold)."""
    return _mkdir(path) or (_mkdir(os.path.dirname(path)) and _mkdir(path))


def _mkdir(path: str) -> bool:
    """Make a folder; True if it is there."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError:
        return False
    return True


def remove_base(found: Containment) -> None:
    """As the driver ends: remove the folder of its jobs' cgroups if none is left in it. Left there
    empty, it keeps whatever made the driver's own cgroup (a supervisor other than systemd, which
    removes a unit's cgroups whole) from removing it. Only a folder with nothing enabled in it: one
    that holds the memory and cpu controllers for limits (onite.exec.limits) would come back
    without them if another driver in the same cgroup made it again (``make_cgroup``)."""
    if found.kind != CGROUP2 or found.base is None:
        return
    try:
        if read_head(f"{found.base}/cgroup.subtree_control", 4096).strip():
            return
        os.rmdir(found.base)
    except OSError:
        pass  # a job's cgroup is in it (another driver's, a dead run's), or it is gone


def discover(enabled: bool, *, mountinfo: str = "/proc/self/mountinfo", own: str = "/proc/self/cgroup") -> Containment:
    """The containment this process can give jobs (root only makes cgroups).

    The cgroup v2 tree is found from the mount table (fstype ``cgroup2``, wherever it is mounted:
    ``/sys/fs/cgroup`` on a pure v2 host, ``/sys/fs/cgroup/unified`` on a hybrid one), and the
    jobs' folder goes under the driver's own cgroup, so that under systemd it lives inside the
    service's delegated subtree (``Delegate=yes`` in systemd/*.service).
    """
    if not enabled:
        return Containment(OFF, why="contain = false in onite.toml")
    if os.geteuid() != 0:
        return Containment(SUBREAPER, why="not root: no cgroup of its own")
    mount = _cgroup2_mount(mountinfo)
    if mount is None:
        return Containment(SUBREAPER, why="no cgroup v2 file system is mounted")
    relative = _own_cgroup(own)
    if relative is None:
        return Containment(SUBREAPER, why="this process is in no cgroup v2")
    base = os.path.normpath(f"{mount}/{relative.strip('/')}/{SUBTREE}") if relative.strip("/") else f"{mount}/{SUBTREE}"
    try:
        try:
            _probe(base)
        except FileNotFoundError:  # another driver in this cgroup ended and removed it meanwhile (remove_base)
            _probe(base)
    except OSError as err:
        return Containment(SUBREAPER, why=f"cannot make cgroups in {mount}: {err.strerror}")
    if not os.path.exists(f"{base}/cgroup.procs"):
        return Containment(SUBREAPER, why=f"{base} is not a cgroup")
    return Containment(CGROUP2, base)


def _probe(base: str) -> None:
    """Make the folder of the jobs' cgroups, and a cgroup in it, removed at once: may this process?

    Raises:
        OSError: it may not (or the folder went meanwhile: FileNotFoundError).
    """
    os.makedirs(base, 0o755, exist_ok=True)
    probe = f"{base}/{PROBE}{os.getpid()}"
    os.mkdir(probe)
    os.rmdir(probe)


def _cgroup2_mount(mountinfo: str) -> str | None:
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                # ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPEROPTIONS
                left, sep, right = line.partition(" - ")
                if sep and right.split(" ", 1)[0] == "cgroup2":
                    fields = left.split(" ")
                    if len(fields) >= 5:
                        return fields[4].replace("\\040", " ")
    except OSError:
        return None
    return None


def _own_cgroup(own: str) -> str | None:
    """This process's cgroup v2 path (the ``0::`` line of /proc/self/cgroup)."""
    try:
        with open(own, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("0::"):
                    return line[3:].strip() or "/"
    except OSError:
        return None
    return None


# ---- acting on a job's processes (the driver and the monitor) ----------------------


def cgroup_pids(path: str) -> list[int]:
    """The processes in the cgroup at ``path`` (none if it is gone)."""
    try:
        with open(f"{path}/cgroup.procs", "rb") as handle:
            return [int(word) for word in handle.read().split()]
    except (OSError, ValueError):
        return []


def is_populated(path: str) -> bool:
    """Does any process live in the cgroup at ``path``?"""
    try:
        for line in read_head(f"{path}/cgroup.events", 4096).splitlines():  # the monitor asks after every job
            if line.startswith(b"populated "):
                return line.split()[1] != b"0"
    except OSError:
        return False
    return bool(cgroup_pids(path))


def read_head(path: str, size: int) -> bytes:
    """The first ``size`` bytes of a cgroup file: one read, without a file object, whose making
    costs as much as the read (a monitor reads several of these between a job's end and telling it).

    Raises:
        OSError: it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def kill_cgroup(path: str) -> None:
    """SIGKILL every process in the cgroup at once (``cgroup.kill``), or one by one where the
    kernel is older than 5.14; the cgroup is frozen meanwhile, so nothing forks in between."""
    try:
        with open(f"{path}/cgroup.kill", "wb") as handle:
            handle.write(b"1")
        return
    except OSError:
        pass
    import signal  # here: submit reads boot_id() from this module and need not pay for signal's enums

    frozen = _freeze(path)
    for pid in cgroup_pids(path):
        signal_pid(pid, signal.SIGKILL)
    if frozen:
        _write(f"{path}/cgroup.freeze", b"0")


def signal_cgroup(path: str, sig: int) -> bool:
    """Send ``sig`` to every process of the cgroup; False if there was none. The cgroup is frozen
    meanwhile (where it can be): a frozen process can neither exit nor reap a child, so no pid read
    from cgroup.procs can be given to another process before it is signalled."""
    frozen = _freeze(path)
    try:
        pids = cgroup_pids(path)
        for pid in pids:
            signal_pid(pid, sig)
    finally:
        if frozen:
            _write(f"{path}/cgroup.freeze", b"0")
    return bool(pids)


def _freeze(path: str, wait: float = 0.2) -> bool:
    """Freeze the cgroup at ``path``, and wait (at most ``wait`` s) until it is: a freeze takes effect
    as each process next stops. False where there is no cgroup v2 freezer."""
    if not _write(f"{path}/cgroup.freeze", b"1"):
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            if b"frozen 1" in read_head(f"{path}/cgroup.events", 4096):
                break
        except OSError:
            break
        time.sleep(0.002)
    return True


def remove_cgroup(path: str, wait: float = 2.0) -> bool:
    """Remove an emptied cgroup (it stays busy for a moment after its last process was killed)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        time.sleep(0.01)


_PRCTL: list = []  # libc's prctl, once loaded (preload): empty until then, [None] where there is none


def preload() -> None:
    """Load libc's prctl now, before any monitor is forked: a monitor that imported ctypes itself
    would spend milliseconds of every job on it (docs/performance.md, the per-job budget)."""
    if not _PRCTL:
        try:
            import ctypes

            _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        except (ImportError, OSError, AttributeError):
            _PRCTL.append(None)


def libc_prctl():
    """libc's prctl (loaded by ``preload``), or None where it cannot be called."""
    preload()
    return _PRCTL[0]


def set_subreaper() -> bool:
    """Make this process the reaper of every orphan among its descendants (Linux 3.4)."""
    preload()
    prctl = _PRCTL[0]
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after its name (state, ppid, pgrp, … start time at [19]), or
    None if it is gone. One read, without a file object (a monitor reads these after every job)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = data[data.rfind(b")") + 2:].split()
    return fields if len(fields) > 19 else None


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a process from a later one that reused its pid."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except ValueError:
        return None


def is_zombie(pid: int) -> bool:
    """Has ``pid`` exited, its status not yet reaped (or is it gone)? A monitor that exited while no
    driver was there to reap it is a zombie of init's until init does."""
    fields = stat_fields(pid)
    return fields is None or fields[0] in (b"Z", b"X")


def boot_id() -> str:
    """This boot of the machine ("" if unknown): what a run record or a heartbeat of another boot
    describes is gone."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8", errors="replace") as handle:
            return handle.read(64).strip()
    except OSError:
        return ""


def signal_pid(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid``; nothing if it is gone (or not ours to signal)."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to every process of group ``pgid``; False if none is left (or none is ours to signal)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_alive(pgid: int) -> bool:
    """Is any process left in group ``pgid``?"""
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _write(path: str, data: bytes) -> bool:
    try:
        with open(path, "wb") as handle:
            handle.write(data)
        return True
    except OSError:
        return False


STALE_CGROUP_AGE = 600  # s: a job joins its cgroup within moments of its creation; one this old and empty is left over


def sweep_stale(folders: list[str], is_run_id, *, older_than: float = STALE_CGROUP_AGE,
                now: float | None = None) -> int:
    """Remove the empty job cgroups (v2, or v1 groups) under ``folders`` that are older than
    ``older_than`` seconds; returns how many.

    A driver killed between making a run's cgroup and writing its run record leaves an empty
    cgroup that no recovery can name, and one killed as it starts may leave the probe of
    ``discover``. Only folders whose name ``is_run_id``, and probes, are looked at; a populated one
    is never removed (rmdir refuses it) and neither is a young one, which a job of another driver
    sharing this subtree may be about to join.
    """
    now = time.time() if now is None else now
    removed = 0
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if not ((is_run_id(entry.name) or _is_probe(entry.name)) and entry.is_dir(follow_symlinks=False)):
                    continue
                if now - entry.stat(follow_symlinks=False).st_ctime < older_than or is_populated(entry.path):
                    continue
                os.rmdir(entry.path)
                removed += 1
            except OSError:
                continue  # busy, gone, or not ours to remove
    return removed


def _is_probe(name: str) -> bool:
    """Is ``name`` that of a probe ``discover`` made (PROBE and a pid)?"""
    return name.startswith(PROBE) and name[len(PROBE):].isdigit()
