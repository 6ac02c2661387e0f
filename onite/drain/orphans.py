"""Before a dead driver's run is run again: make sure nothing of it still runs.

What belongs to the run is told without trusting anything a user controls: its cgroup and v1 groups
as the run record names them, its process group where a process carries its ONITE_RUN_ID. A Slurm
job is cancelled through Slurm, whichever executor is configured now.
"""

from __future__ import annotations

import os
import signal

from onite.core.errors import OniteError
from onite.core.names import run_id_host
from onite.core.runrecord import RunRecord
from onite.drain.night import Night
from onite.exec import contain, limits
from onite.exec.processes import find_run_processes, kill_groups
from onite.exec.runner import Runner


class Orphans:
    """Finds and stops what a dead driver's runs left running on this machine."""

    def __init__(self, night: Night, containment: contain.Containment, limiter: limits.Limiter, make_runner) -> None:
        self.night = night
        self.containment = containment
        self.limiter = limiter
        self.make_runner = make_runner

    def sweep_cgroups(self) -> None:
        """Remove the empty job cgroups that drivers killed before they wrote a run record left."""
        night = self.night
        folders = [self.containment.base] if self.containment.base else []
        folders += list(self.limiter.v1.values())
        removed = contain.sweep_stale(folders)
        if removed:
            night.log.event("pruned", cgroups=removed, note="empty job cgroups that killed drivers left")

    def monitor_alive(self, rec: RunRecord) -> bool:
        """Is the monitor a run record names still that process, and alive?"""
        pid = rec.monitor_pid
        if not pid or pid <= 1:
            return False
        return contain.process_start_ticks(pid) == rec.monitor_ticks and not contain.is_zombie(pid)

    def stop_orphans(self, rec: RunRecord) -> str:
        """Stop what is left of a run whose monitor is gone and remove its cgroups, as the monitor
        would have; what was done, for the log."""
        base = self.containment.base
        cgroup = rec.cgroup
        killed = False
        if cgroup and base and cgroup.startswith(f"{base}/") and "/" not in cgroup[len(base) + 1:]:
            killed = contain.is_populated(cgroup)
            if killed:
                contain.kill_cgroup(cgroup)
            contain.remove_cgroup(cgroup)
        groups = self.limiter.groups_of(list(rec.groups))
        if not killed:
            # its v1 limit groups hold every process it started, those that left its group (setsid) too
            killed = kill_groups(groups)
            pgid, run_id = rec.job_pid, str(rec.get("run_id") or "")
            if pgid and pgid > 1 and run_id and contain.signal_group(pgid, 0) and pgid in find_run_processes(
                    str(self.night.spool.root), str(rec.get("name") or ""), lambda found: found == run_id):
                os.killpg(pgid, signal.SIGKILL)  # a process of that run leads it (ONITE_RUN_ID)
                killed = True
        limits.remove(groups)
        return "its processes were killed" if killed else "none of its processes was running"

    def stop_unrecorded(self, name: str) -> str:
        """A claim with no run record: what the run started carries a run id of this host (whose lock
        we hold: no live driver has one) and this spool's path; the executor looks for that."""
        night = self.night
        ours = lambda run_id: run_id_host(run_id) == night.host  # noqa: E731
        try:
            owner = os.lstat(night.running_dir / name).st_uid  # the claim's: only root renames into running/
        except OSError:
            owner = None
        return night.runner.recover_unrecorded(name, str(night.spool.root), ours,
                                               night.config.kill_grace.total_seconds(), owner=owner)

    def runner_of(self, info: dict) -> Runner:
        """The executor that started the run (after a change of ``executor`` a Slurm job must still be cancelled)."""
        night = self.night
        executor = info.get("executor") or night.runner.executor
        if executor == night.runner.executor:
            return night.runner
        try:
            return self.make_runner(executor)
        except OniteError:
            return night.runner
