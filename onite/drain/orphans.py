"""Before a dead driver's run is run again: make sure nothing of it still runs.

A run whose monitor died without recording an end may have left processes
behind; recovery (onite.drain.recovery) stops them before the job is
requeued, so that a job never runs twice at once. What belongs to the run is
decided without trusting anything a user controls: its cgroup (named by the
run record, in the driver's own subtree), else its process group, but only
where a process of it carries the run's ONITE_RUN_ID (onite.exec.processes).
A run that another machine ran cannot be checked from here (the admin
vouched it is down); a Slurm job is cancelled through Slurm, whichever
executor is configured now; for a claim with no record at all, what carries
a run id of this host and this spool's path is stopped.
"""

from __future__ import annotations

import os
import signal

from onite.core.errors import OniteError
from onite.core.names import is_run_id, run_id_host
from onite.core.runrecord import RunRecord
from onite.exec import contain
from onite.exec.processes import find_run_processes, kill_groups
from onite.exec.limits import Limiter
from onite.exec.runner import Runner

from onite.drain.night import Night


class Orphans:
    """Finds and stops what a dead driver's runs left running on this machine."""

    def __init__(self, night: Night, containment: contain.Containment, limiter: Limiter, make_runner) -> None:
        """``make_runner(executor)``: a runner of that kind (onite.drain.driver.Driver.make_runner)."""
        self.night = night
        self.containment = containment
        self.limiter = limiter
        self.make_runner = make_runner

    def sweep_cgroups(self) -> None:
        """Remove the empty job cgroups that drivers killed before they wrote a run record left
        (those of this machine's runs, ten minutes old or more); one log line if there were any."""
        night = self.night
        folders = [self.containment.base] if self.containment.base else []
        folders += list(self.limiter.v1.values())
        removed = contain.sweep_stale(folders, is_run_id)
        if removed:
            night.log.event("pruned", cgroups=removed, note="empty job cgroups that killed drivers left")

    def monitor_alive(self, rec: RunRecord) -> bool:
        """Is the monitor a run record names still that process, and alive?"""
        pid = rec.monitor_pid
        if not pid or pid <= 1:
            return False
        return contain.process_start_ticks(pid) == rec.monitor_ticks and not contain.is_zombie(pid)

    def stop_orphans(self, rec: RunRecord) -> str:
        """Stop what is left of a run whose monitor is gone (its cgroup, else its process group), and
        remove its cgroup: the monitor would have. Returns what was done, for the log."""
        done = self._stop(rec)
        self.limiter.remove_left(rec.get("groups"))  # its cgroup v1 groups: the monitor would have removed them
        return done

    def _stop(self, rec: RunRecord) -> str:
        base = self.containment.base
        cgroup = rec.get("cgroup") if isinstance(rec.get("cgroup"), str) else None
        if cgroup and base and cgroup.startswith(f"{base}/") and "/" not in cgroup[len(base) + 1:]:
            populated = contain.is_populated(cgroup)
            if populated:
                contain.kill_cgroup(cgroup)
            contain.remove_cgroup(cgroup)
            if populated:
                return "its processes were killed"
        # where no cgroup v2 contains jobs, its v1 limit groups still hold every process it started,
        # those that left its process group too (setsid): none of them may run beside its rerun
        killed = kill_groups(self.limiter.groups_of(rec.get("groups")))
        pgid = rec.job_pid
        if pgid and pgid > 1 and contain.group_alive(pgid) and self._is_ours(pgid, rec):
            os.killpg(pgid, signal.SIGKILL)
            return "its processes were killed"
        return "its processes were killed" if killed else "none of its processes was running"

    def _is_ours(self, pid: int, rec: RunRecord) -> bool:
        """Is ``pid`` a process of that run (by ONITE_RUN_ID in its environment)?"""
        run_id = str(rec.get("run_id") or "")
        return bool(run_id) and pid in find_run_processes(str(self.night.spool.root), str(rec.get("name") or ""),
                                                           lambda found: found == run_id)

    def stop_unmonitored(self, info: dict, *, owner: int | None = None) -> str:
        """Make sure a dead driver's Slurm job is not still running before it is requeued (``owner``:
        the claim's uid).

        Raises:
            Unavailable: a Slurm job that may still run (Slurm cannot be asked, or it outlived its cancel).
        """
        night = self.night
        return self.runner_of(info).recover(info, night.config.kill_grace.total_seconds(), owner=owner)

    def stop_unrecorded(self, name: str) -> str:
        """A claim with no run record: the dead driver died before it wrote one, or the record was lost.
        What the run started carries a run id of this host (we hold its lock, so no live driver has
        one) and this spool's path; the executor looks for that."""
        night = self.night
        ours = lambda run_id: run_id_host(run_id) == night.host  # noqa: E731
        try:
            owner = os.lstat(night.running_dir / name).st_uid  # the claim's: only root renames into running/
        except OSError:
            owner = None
        return night.runner.recover_unrecorded(name, str(night.spool.root), ours,
                                               night.config.kill_grace.total_seconds(), owner=owner)

    def runner_of(self, info: dict) -> Runner:
        """The executor that started the run: after a change of ``executor`` a Slurm job must still be cancelled."""
        night = self.night
        executor = info.get("executor") or night.runner.executor
        if executor == night.runner.executor:
            return night.runner
        try:
            return self.make_runner(executor)
        except OniteError:
            return night.runner
