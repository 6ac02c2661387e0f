"""Limits held by the kernel: a job's memory, CPU and pids limits in its cgroups, and what it used.

On cgroup v2 the job's containment cgroup holds them; on v1 a group per job and controller under the
driver's own; elsewhere nothing enforces them, and the job is measured by its rusage. The CPU limit is
set before the job's fork, the memory limit once its monitor has left its groups; the pids limit is
one above ``max_pids`` while the monitor is in the group. Runs in the monitor.
"""

from __future__ import annotations

import errno
import os

from onite.exec.contain import SUBTREE, cgroup_mounts, make_cgroup, own_cgroups, read_file, write_file

MIB = 1 << 20
MONITOR_SLACK = 4 * MIB  # at most this much of a job's memory group may be its monitor's (apply_memory)
PERIOD = 100_000  # µs: the CPU quota's period (cpu.max, cpu.cfs_period_us)


class Limiter:
    """How this driver holds jobs to their requests: on ``v2`` (the jobs' cgroup folder), ``v1`` (controller →
    the folder of the jobs' groups) or neither; ``max_pids`` (0: none) on ``pids_v2`` or v1. A step is (path,
    text, limit): a folder to make (text None) or a file to write, and the limit a failure leaves unset."""

    def __init__(self, *, v2: str | None = None, v1: dict[str, str] | None = None, why: str = "",
                 max_pids: int = 0, pids_v2: str | None = None) -> None:
        self.v2 = v2
        self.v1 = v1 or {}
        self.why = why
        self.max_pids = max_pids
        self.pids_v2 = pids_v2

    def describe(self) -> str:
        """``cgroup v1 (cpu, memory); at most 4096 processes a job``, or why limits are not enforced."""
        if self.v2 is not None:
            text = "cgroup v2 (memory, cpu)"
        elif "memory" in self.v1:
            text = f"cgroup v1 ({', '.join(sorted(set(self.v1) - {'pids'}))})"
        else:
            text = f"not enforced ({self.why})" if self.why else "not enforced"
        if not self.max_pids:
            return f"{text}; no pids limit (max_pids = 0)"
        if self.pids_v2 is None and "pids" not in self.v1:
            return f"{text}; no pids limit (no pids controller this driver may use)"
        return f"{text}; at most {self.max_pids} processes a job (cgroup {'v2' if self.pids_v2 else 'v1'} pids)"

    def _controllers(self, v2_cgroup: str | None, cpus: int | None) -> list[tuple[str, str]]:
        """The v1 controllers (name, folder) one run gets a group in: memory and pids, cpu for a CPU limit,
        cpuacct where no cgroup v2 counts the job's CPU."""
        return [(controller, base) for controller, base in sorted(self.v1.items())
                if controller in ("memory", "pids") or (controller == "cpu" and cpus is not None)
                or (controller == "cpuacct" and v2_cgroup is None and self.v2 is None)]

    def groups(self, run_id: str, v2_cgroup: str | None = None, cpus: int | None = None) -> tuple[str, ...]:
        """The v1 groups one run joins."""
        return tuple(f"{base}/{run_id}" for _, base in self._controllers(v2_cgroup, cpus))

    def _v2_group(self, run_id: str, v2_cgroup: str | None, base: str | None) -> str | None:
        """Where ``base`` (a v2 folder holding a controller, or None) limits one run."""
        return None if base is None else v2_cgroup or f"{base}/{run_id}"

    def steps(self, run_id: str, v2_cgroup: str | None, cpus: int | None) -> tuple[tuple, ...]:
        """Before the job's process exists (``apply``): make its v1 groups and set its CPU limit."""
        steps: list[tuple] = []
        if cpus is not None and (v2 := self._v2_group(run_id, v2_cgroup, self.v2)) is not None:
            steps.append((f"{v2}/cpu.max", f"{cpus * PERIOD} {PERIOD}", "cpu"))
        for controller, base in self._controllers(v2_cgroup, cpus):
            path = f"{base}/{run_id}"
            steps.append((path, None, "cpu" if controller == "cpu" else ""))
            if controller == "cpu":
                steps += [(f"{path}/cpu.cfs_period_us", str(PERIOD), ""),
                          (f"{path}/cpu.cfs_quota_us", str(cpus * PERIOD), "cpu")]
        return tuple(steps)

    def pids_steps(self, run_id: str, v2_cgroup: str | None, room: int) -> tuple[tuple, ...]:
        """The write of one run's pids limit, ``room`` above ``max_pids`` (for its monitor)."""
        where = self._v2_group(run_id, v2_cgroup, self.pids_v2) or \
            (f"{self.v1['pids']}/{run_id}" if "pids" in self.v1 else None)
        if not self.max_pids or where is None:
            return ()
        return ((f"{where}/pids.max", str(self.max_pids + room), "pids"),)

    def memory_steps(self, run_id: str, v2_cgroup: str | None, mem: int | None) -> tuple[tuple, ...]:
        """The writes of one run's memory limit, taken once the monitor has left the job's cgroups: set
        before, the OOM killer could take the monitor rather than a small job."""
        if mem is None:
            return ()
        if (v2 := self._v2_group(run_id, v2_cgroup, self.v2)) is not None:
            return ((f"{v2}/memory.max", str(mem * MIB), "memory"), (f"{v2}/memory.swap.max", "0", ""))
        if "memory" in self.v1:
            path = f"{self.v1['memory']}/{run_id}"
            return ((f"{path}/memory.limit_in_bytes", str(mem * MIB), "memory"),
                    (f"{path}/memory.memsw.limit_in_bytes", str(mem * MIB), ""))  # no swap beyond it
        return ()

    def reads(self, run_id: str, v2_cgroup: str | None) -> tuple[tuple, ...]:
        """What ``usage`` reads of one run, each (key, path, field, scale): memory where its limit is held,
        CPU from its cgroup v2 (cpu.stat needs no controller), else from v1 cpuacct."""
        reads: list[tuple] = []
        v2 = self._v2_group(run_id, v2_cgroup, self.v2)
        if "memory" in self.v1:
            group = f"{self.v1['memory']}/{run_id}"
            reads += [("peak_mem", f"{group}/memory.max_usage_in_bytes", None, 1),
                      ("oom", f"{group}/memory.oom_control", "oom_kill", 1)]
        elif v2 is not None:
            reads += [("peak_mem", f"{v2}/memory.peak", None, 1), ("oom", f"{v2}/memory.events", "oom_kill", 1)]
        if v2_cgroup or v2:
            reads.append(("cpu", f"{v2_cgroup or v2}/cpu.stat", "usage_usec", 1e6))
        elif "cpuacct" in self.v1:
            reads.append(("cpu", f"{self.v1['cpuacct']}/{run_id}/cpuacct.usage", None, 1e9))
        return tuple(reads)

    def groups_of(self, groups: tuple[str, ...]) -> tuple[str, ...]:
        """The v1 groups a dead run's record names that are this driver's to touch: right under its folders."""
        return tuple(g for g in groups if g.rpartition("/")[0] in self.v1.values() and ".." not in g)

    def remove_folders(self) -> None:
        """As the driver ends: remove its empty v1 folders."""
        remove(tuple(dict.fromkeys(self.v1.values())))


def discover(v2_base: str | None, max_pids: int = 0, *, mountinfo: str = "/proc/self/mountinfo",
             own: str = "/proc/self/cgroup") -> Limiter:
    """The limits this driver can set: memory and CPU on v2 where ``v2_base`` has those controllers, else on
    v1, else none; the pids limit (``max_pids``; 0: none) likewise."""
    if os.geteuid() != 0:
        return Limiter(why="the driver is not root", max_pids=max_pids)
    v2 = v2_base if v2_base is not None and _enable(v2_base, ("memory", "cpu")) else None
    pids_v2 = v2_base if v2_base is not None and max_pids and _enable(v2_base, ("pids",)) else None
    wanted = (() if v2 else ("memory", "cpu", "cpuacct")) + (("pids",) if max_pids and not pids_v2 else ())
    mounts = cgroup_mounts(mountinfo)
    paths = own_cgroups(own)
    v1 = {}
    for controller in wanted:
        if controller not in mounts or controller not in paths:
            continue
        base = os.path.normpath(f"{mounts[controller]}/{paths[controller].strip('/')}/{SUBTREE}")
        try:
            os.makedirs(base, 0o755, exist_ok=True)
        except OSError:
            continue
        v1[controller] = base
    why = ""
    if v2 is None and "memory" not in v1:  # CPU limits and usage go with the memory group, or not at all
        v1, why = {key: base for key, base in v1.items() if key == "pids"}, "no memory controller this driver may use"
    return Limiter(v2=v2, v1=v1, why=why, max_pids=max_pids, pids_v2=pids_v2)


def _enable(v2_base: str, controllers: tuple[str, ...]) -> bool:
    """Are ``controllers`` available to the cgroups in ``v2_base`` (enabled now if need be)?"""
    if not set(controllers) <= _words(f"{v2_base}/cgroup.controllers"):
        return False
    return set(controllers) <= _words(f"{v2_base}/cgroup.subtree_control") \
        or write_file(f"{v2_base}/cgroup.subtree_control", " ".join(f"+{name}" for name in controllers)) == 0


def apply(steps: tuple[tuple, ...]) -> list[str]:
    """Take ``Limiter.steps``; the limits left unset (the job runs without them)."""
    missed: list[str] = []
    failed: list[str] = []  # folders not made: nothing is written in them
    for path, text, limit in steps:
        if any(path.startswith(f"{folder}/") for folder in failed):
            done = False
        elif text is None:
            done = make_cgroup(path)
            if not done:
                failed.append(path)
        else:
            done = write_file(path, text) == 0
        if not done and limit and limit not in missed:
            missed.append(limit)
    return missed


def apply_memory(steps: tuple[tuple, ...]) -> tuple[list[str], bool]:
    """Take ``Limiter.memory_steps``; the limits left unset, and whether the job is past its limit already (v1
    refuses it, EBUSY). The limit leaves room (at most MONITOR_SLACK) for the pages the monitor touched."""
    missed: list[str] = []
    room = 0
    for path, text, limit in steps:
        if limit == "memory":
            folder, _, name = path.rpartition("/")
            held = _number(f"{folder}/{'memory.current' if name == 'memory.max' else 'memory.usage_in_bytes'}")
            room = min(held or 0, MONITOR_SLACK)
        refused = write_file(path, str(int(text) + room) if text.isdigit() and text != "0" else text)
        if refused == errno.EBUSY and limit == "memory":
            return [], True
        if refused and limit:
            missed.append(limit)
            break  # the swap limit may not be below an unset memory limit
    return missed, False


def usage(reads: tuple[tuple, ...]) -> dict:
    """What a job used: ``peak_mem`` (bytes), ``cpu`` (seconds), ``oom`` (kills); a key no file gives is left out."""
    found: dict = {}
    for key, path, field, scale in reads:
        value = _number(path) if field is None else _keyed(path, field)
        if value is not None:
            found[key] = round(value / scale, 3) if scale != 1 else value
    return found


def remove(groups: tuple[str, ...]) -> None:
    """Remove the v1 groups or folders that are empty."""
    for path in groups:
        try:
            os.rmdir(path)
        except OSError:
            pass


def _number(path: str) -> int | None:
    try:
        return int(read_file(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: str, key: str) -> int | None:
    """The number after ``key`` in a flat keyed file (memory.events, cpu.stat, memory.oom_control, meminfo)."""
    try:
        for line in read_file(path).splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == key.encode():
                return int(words[1])
    except (OSError, ValueError):
        pass
    return None


def _words(path: str) -> set[str]:
    try:
        return set(read_file(path).decode("ascii", "replace").split())
    except OSError:
        return set()


def machine() -> tuple[int | None, int | None]:
    """MiB of memory (MemTotal) and the CPUs this process may use."""
    mem = _keyed("/proc/meminfo", "MemTotal:")
    return (None if mem is None else mem // 1024), len(os.sched_getaffinity(0))
