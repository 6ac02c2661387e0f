"""Requests held by the kernel: a job's memory and CPU limits in its cgroups, and what it used.

Where the machine has the controllers, each job's request becomes kernel
limits, and its use is read when it ends. Its process is born in its groups,
so everything it takes is counted from the start; its CPU limit is set before
that, its memory limit as soon as its monitor has left the groups (a job past
it by then is killed, as the kernel would have: ``apply_memory``):

- cgroup v2 (``memory`` and ``cpu`` in the jobs' folder's cgroup.controllers,
  enabled in its cgroup.subtree_control): the job's own containment cgroup
  (onite.exec.contain) gets ``memory.max`` (swap off: ``memory.swap.max`` 0)
  and ``cpu.max``; its use is ``memory.peak`` (kernel 5.19 and later),
  ``cpu.stat`` usage_usec and ``memory.events`` oom_kill;
- cgroup v1 (the controllers mounted one per folder, as on hybrid hosts): a
  group per job under the driver's own group of each controller,
  ``<mount>/<driver's path>/onite/<run id>``, which the job's process joins
  before it executes anything; ``memory.limit_in_bytes`` (and
  ``memory.memsw.limit_in_bytes``), ``cpu.cfs_quota_us``; its use is
  ``memory.max_usage_in_bytes``, ``cpuacct.usage`` and ``memory.oom_control``
  oom_kill.

Where neither is there (containers, not root), requests still pack
(onite.core.resources) but nothing holds a job to them: ``describe`` says
so, and the monitor measures the job from its wait4 rusage instead.

The monitor runs after fork(): this module imports only os, errno and
onite.exec.contain (checked by tests/test_layers.py), and nothing here
reads a file a user can write.
"""

from __future__ import annotations

import errno
import os

from onite.exec.contain import make_cgroup, read_head

MIB = 1 << 20
MONITOR_SLACK = 4 * MIB  # at most this much of a job's memory group may be its monitor's (apply_memory)
PERIOD = 100_000  # µs: the CPU quota's period (cpu.max, cpu.cfs_period_us)
SUBTREE = "onite"
V1_CONTROLLERS = ("memory", "cpu", "cpuacct")


class Limiter:
    """How this driver holds jobs to their requests: ``v2`` (the containment cgroup's folder, where
    memory and cpu are enabled) or ``v1`` (controller → the folder of the jobs' groups), or neither."""

    def __init__(self, *, v2: str | None = None, v1: dict[str, str] | None = None, why: str = "") -> None:
        self.v2 = v2
        self.v1 = v1 or {}
        self.why = why

    @property
    def enforced(self) -> bool:
        """Are memory requests held by the kernel here?"""
        return self.v2 is not None or "memory" in self.v1

    def describe(self) -> str:
        """For the log and ``onite status``: ``cgroup v1 (memory, cpu)``, or why limits are not enforced."""
        if self.v2 is not None:
            return "cgroup v2 (memory, cpu)"
        if self.v1:
            return f"cgroup v1 ({', '.join(sorted(self.v1))})"
        return f"not enforced ({self.why})" if self.why else "not enforced"

    def _controllers(self, v2_cgroup: str | None, cpus: int | None) -> list[tuple[str, str]]:
        """The v1 controllers (name, folder) one run gets a group in: only where the group does
        something, since each is a folder made and removed and two moves per job (docs/performance.md).
        memory always (its peak and OOM kills are read there); cpu where the job asks for CPUs (its
        group holds the quota); cpuacct only where no cgroup v2 counts the job's CPU (every v2 cgroup
        has cpu.stat)."""
        return [(controller, base) for controller, base in sorted(self.v1.items())
                if controller == "memory" or (controller == "cpu" and cpus is not None)
                or (controller == "cpuacct" and v2_cgroup is None and self.v2 is None)]

    def groups(self, run_id: str, v2_cgroup: str | None = None, cpus: int | None = None) -> tuple[str, ...]:
        """The v1 groups of one run (made by its monitor: ``apply``), which its process joins; none on
        v2, where its containment cgroup holds the limits. ``v2_cgroup``: its containment cgroup;
        ``cpus``: its CPU request (None: none), as ``steps`` is given it."""
        return tuple(f"{base}/{run_id}" for _, base in self._controllers(v2_cgroup, cpus))

    def steps(self, run_id: str, v2_cgroup: str | None, cpus: int | None) -> tuple[tuple, ...]:
        """What the monitor of one run does before its job's process exists (pure: ``apply`` does it):
        make its v1 groups and set its CPU limit (``cpus``; None: none). Each step is (path, text,
        limit): a folder to make (text None) or a file to write; ``limit`` names the limit a failure
        leaves unset ("": none). Its memory limit comes after the fork: ``memory_steps``."""
        steps: list[tuple] = []
        if self.v2 is not None and cpus is not None:
            steps.append((f"{v2_cgroup or f'{self.v2}/{run_id}'}/cpu.max", f"{cpus * PERIOD} {PERIOD}", "cpu"))
        for controller, base in self._controllers(v2_cgroup, cpus):
            path = f"{base}/{run_id}"
            steps.append((path, None, "cpu" if controller == "cpu" else ""))
            if controller == "cpu":
                steps += [(f"{path}/cpu.cfs_period_us", str(PERIOD), ""),
                          (f"{path}/cpu.cfs_quota_us", str(cpus * PERIOD), "cpu")]
        return tuple(steps)

    def memory_steps(self, run_id: str, v2_cgroup: str | None, mem: int | None) -> tuple[tuple, ...]:
        """The writes that set one run's memory limit (``mem`` MiB; None: none), as ``steps``: taken
        by ``apply_memory`` once the job's process exists and its monitor has left the job's cgroups.
        Set before, the limit would hold the monitor too while it forks the job, and the kernel's OOM
        killer, which takes the largest process of the group, would take the monitor (a root Python
        process) rather than a small job."""
        if mem is None:
            return ()
        if self.v2 is not None:
            where = v2_cgroup or f"{self.v2}/{run_id}"
            return ((f"{where}/memory.max", str(mem * MIB), "memory"), (f"{where}/memory.swap.max", "0", ""))
        if "memory" in self.v1:
            path = f"{self.v1['memory']}/{run_id}"
            return ((f"{path}/memory.limit_in_bytes", str(mem * MIB), "memory"),
                    (f"{path}/memory.memsw.limit_in_bytes", str(mem * MIB), ""))  # no swap beyond it
        return ()

    def reads(self, run_id: str, v2_cgroup: str | None) -> tuple[tuple, ...]:
        """The files its monitor reads what one run used from (``usage``), each (key, path, field,
        scale): only those of the groups it has (``groups``), so that the monitor, between the job's
        end and the driver hearing of it, opens no file that is not there. ``v2_cgroup``: its
        containment cgroup, whose cpu.stat every cgroup v2 has."""
        reads: list[tuple] = []
        made = dict(self._controllers(v2_cgroup, None))  # the groups read from are made whatever it asks
        if "memory" in made:
            group = f"{made['memory']}/{run_id}"
            reads += [("peak_mem", f"{group}/memory.max_usage_in_bytes", None, 1),
                      ("oom", f"{group}/memory.oom_control", "oom_kill", 1)]
        if "cpuacct" in made:
            reads.append(("cpu", f"{made['cpuacct']}/{run_id}/cpuacct.usage", None, 1e9))
        where = v2_cgroup or (f"{self.v2}/{run_id}" if self.v2 is not None else None)
        if where is not None:
            if self.v2 is not None and "memory" not in made:
                reads += [("peak_mem", f"{where}/memory.peak", None, 1),
                          ("oom", f"{where}/memory.events", "oom_kill", 1)]
            if "cpuacct" not in made:
                reads.append(("cpu", f"{where}/cpu.stat", "usage_usec", 1e6))
        return tuple(reads)

    def groups_of(self, groups: object) -> tuple[str, ...]:
        """The v1 groups a dead run's record names that are this driver's to touch: a run's own
        group right under one of its folders (a record is root's, but it is checked all the same)."""
        if not isinstance(groups, list):
            return ()
        bases = tuple(f"{base}/" for base in self.v1.values())
        return tuple(g for g in groups if isinstance(g, str) and g.startswith(bases) and "/" not in
                     g[len(next(b for b in bases if g.startswith(b))):] and ".." not in g)

    def remove_left(self, groups: object) -> None:
        """Remove the v1 groups a dead run's record names (``groups_of``), once its processes are
        gone; a group still in use stays."""
        remove(self.groups_of(groups))

    def remove_folders(self) -> None:
        """As the driver ends: remove its empty v1 folders of jobs' groups. Left behind, an empty
        folder keeps whatever made the driver's own group (a supervisor other than systemd, which
        removes a unit's groups whole) from removing it. One with a group in it (a job of another
        driver in the same group, a dead run's) stays; a driver that finds its folder gone makes
        it again (``apply``: a v1 folder needs nothing set in it)."""
        remove(tuple(dict.fromkeys(self.v1.values())))


def discover(v2_base: str | None, *, mountinfo: str = "/proc/self/mountinfo",
             own: str = "/proc/self/cgroup") -> Limiter:
    """The limits this driver can set: v2 where the jobs' cgroup folder ``v2_base`` (onite.exec.contain)
    has the memory and cpu controllers, else the v1 controllers, else none."""
    if os.geteuid() != 0:
        return Limiter(why="the driver is not root")
    if v2_base is not None:
        available = _words(f"{v2_base}/cgroup.controllers")
        if {"memory", "cpu"} <= available:
            enabled = _words(f"{v2_base}/cgroup.subtree_control")
            if {"memory", "cpu"} <= enabled or _write(f"{v2_base}/cgroup.subtree_control", "+memory +cpu"):
                return Limiter(v2=v2_base)
    mounts = _v1_mounts(mountinfo)
    paths = _v1_paths(own)
    v1 = {}
    for controller in V1_CONTROLLERS:
        if controller not in mounts or controller not in paths:
            continue
        base = os.path.normpath(f"{mounts[controller]}/{paths[controller].strip('/')}/{SUBTREE}")
        try:
            os.makedirs(base, 0o755, exist_ok=True)
        except OSError:
            continue
        v1[controller] = base
    if "memory" not in v1:
        return Limiter(why="no memory controller this driver may use")
    return Limiter(v1=v1)


def _v1_mounts(mountinfo: str) -> dict[str, str]:
    """Controller → where its v1 hierarchy is mounted (the first mount of each)."""
    found: dict[str, str] = {}
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                left, sep, right = line.partition(" - ")
                parts, fields = right.split(), left.split(" ")
                if not sep or len(parts) < 3 or parts[0] != "cgroup" or len(fields) < 5:
                    continue
                for option in parts[2].split(","):
                    if option in V1_CONTROLLERS:
                        found.setdefault(option, fields[4].replace("\\040", " "))
    except OSError:
        pass
    return found


def _v1_paths(own: str) -> dict[str, str]:
    """Controller → this process's v1 group (``N:memory:/path`` lines of /proc/self/cgroup)."""
    found: dict[str, str] = {}
    try:
        with open(own, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(","):
                    if controller in V1_CONTROLLERS:
                        found[controller] = path or "/"
    except (OSError, ValueError):
        pass
    return found


# ---- the monitor's side: making, measuring, removing ---------------------------------


def apply(steps: tuple[tuple, ...]) -> list[str]:
    """Take the steps ``Limiter.steps`` made (in a run's monitor, before its job runs); the limits
    left unset (``memory``, ``cpu``). A limit that cannot be set is no reason not to run the job:
    it then runs without it, and its start line says so."""
    missed: list[str] = []
    failed: list[str] = []  # folders not made: nothing is written in them
    for path, text, limit in steps:
        if any(path.startswith(f"{folder}/") for folder in failed):
            done = False
        elif text is None:
            done = make_cgroup(path)  # its folder too, if another driver of the same group removed it
            if not done:
                failed.append(path)
        else:
            done = _write(path, text)
        if not done and limit and limit not in missed:
            missed.append(limit)
    return missed


def apply_memory(steps: tuple[tuple, ...]) -> tuple[list[str], bool]:
    """Take the steps ``Limiter.memory_steps`` made (in a run's monitor, once the job's process
    exists and the monitor has left its cgroups); the limits left unset (``memory``), and whether
    the job is past its limit already.

    What the group holds by then is mostly the monitor's: the pages it touched while it forked the
    job in the group are charged there, and stay so when it leaves. The limit leaves room for them
    (at most MONITOR_SLACK): the job gets what it asked for. cgroup v1 refuses a limit below what
    the group holds and cannot reclaim (EBUSY): the job took more than that before the limit could
    be set, and its monitor kills it, as the kernel would have. (cgroup v2 takes such a limit and
    kills inside the group itself.)"""
    missed: list[str] = []
    room = 0
    for path, text, limit in steps:
        if limit == "memory":
            folder, _, name = path.rpartition("/")
            held = _number(f"{folder}/{'memory.current' if name == 'memory.max' else 'memory.usage_in_bytes'}")
            room = min(held or 0, MONITOR_SLACK)
        refused = _set(path, str(int(text) + room) if text.isdigit() and text != "0" else text)
        if refused == errno.EBUSY and limit == "memory":
            return [], True
        if refused and limit:
            missed.append(limit)
            break  # the swap limit may not be below an unset memory limit
    return missed, False


def usage(reads: tuple[tuple, ...]) -> dict:
    """What a job used, from the cgroup files ``Limiter.reads`` named: ``peak_mem`` (bytes), ``cpu``
    (seconds), ``oom`` (times the kernel killed one of its processes for memory); a key is left out
    where no file says."""
    found: dict = {}
    for key, path, field, scale in reads:
        if key in found:
            continue
        value = _number(path) if field is None else _keyed(path, field)
        if value is not None:
            found[key] = round(value / scale, 3) if scale != 1 else value
    return found


def rusage_usage(rusage) -> dict:
    """What the job's leader and the children it waited for used (``os.wait4``): where no cgroup says.
    ru_maxrss is the largest single process's peak, in KiB."""
    return {"peak_mem": int(rusage.ru_maxrss) * 1024, "cpu": round(rusage.ru_utime + rusage.ru_stime, 3)}


def remove(groups: tuple[str, ...]) -> None:
    """Remove the v1 groups of a run whose processes have all ended."""
    for path in groups:
        try:
            os.rmdir(path)
        except OSError:
            pass


def _number(path: str) -> int | None:
    try:
        return int(read_head(path, 64).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: str, key: str) -> int | None:
    """The number after ``key`` in a flat keyed file (memory.events, cpu.stat, memory.oom_control)."""
    try:
        for line in read_head(path, 8192).splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == key.encode():
                return int(words[1])
    except (OSError, ValueError):
        return None
    return None


def _words(path: str) -> set[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return set(handle.read(4096).split())
    except OSError:
        return set()


def _write(path: str, text: str) -> bool:
    return _set(path, text) == 0


def _set(path: str, text: str) -> int:
    """Write ``text`` to the cgroup file ``path``: 0, or the errno that refused it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)  # as open(path, "w")
    except OSError as err:
        return err.errno or errno.EIO
    try:
        return 0 if os.write(fd, text.encode("ascii")) == len(text) else errno.EIO  # a cgroup file takes its value in one write
    except OSError as err:
        return err.errno or errno.EIO
    finally:
        os.close(fd)


def machine() -> tuple[int | None, int | None]:
    """What this machine has: MiB of memory (MemTotal) and the CPUs this process may use."""
    mem = None
    try:
        with open("/proc/meminfo", "rb") as handle:
            for line in handle.read(4096).splitlines():
                if line.startswith(b"MemTotal:"):
                    mem = int(line.split()[1]) // 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        cpus = os.cpu_count()
    return mem, cpus
