"""Before a dead driver's run is run again: make sure nothing of it still runs.

A run whose monitor died without recording an end may have left processes
behind; recovery (onite.drain.recovery) stops them before the job is
requeued, so that a job never runs twice at once. What belongs to the run is
decided without trusting anything a user controls: its cgroup (named by the
run record, in the driver's own subtree), else its process group, but only
where a process of it carries the run's ONITE_RUN_ID (onite.exec.processes);
for a claim with no record at all, the processes carrying a run id of this
host and this spool's path. A run that another machine ran cannot be checked
from here (the admin vouched it is down); a Slurm job is cancelled through
Slurm, whichever executor is configured now.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from onite.core.errors import OniteError
from onite.core.names import is_run_id, run_id_host
from onite.core.runrecord import RunRecord
from onite.exec import contain
from onite.exec.processes import find_run_processes, kill_groups
from onite.exec.runner import Runner

if TYPE_CHECKING:
    from onite.drain.driver import Driver


class Orphans:
    """Finds and stops what a dead driver's runs left running on this machine."""

    def __init__(self, driver: Driver) -> None:
        self.d = driver

    def sweep_cgroups(self) -> None:
        """Remove the empty job cgroups that drivers killed before they wrote a run record left
        (those of this machine's runs, ten minutes old or more); one log line if there were any."""
        d = self.d
        folders = [d.containment.base] if d.containment.base else []
        folders += list(d.limiter.v1.values())
        removed = contain.sweep_stale(folders, is_run_id)
        if removed:
            d.log.event("pruned", cgroups=removed, note="empty job cgroups that killed drivers left")

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
        self.d.limiter.remove_left(rec.get("groups"))  # its cgroup v1 groups: the monitor would have removed them
        return done

    def _stop(self, rec: RunRecord) -> str:
        base = self.d.containment.base
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
        killed = kill_groups(self.d.limiter.groups_of(rec.get("groups")))
        pgid = rec.job_pid
        if pgid and pgid > 1 and contain.group_alive(pgid) and self._is_ours(pgid, rec):
            os.killpg(pgid, signal.SIGKILL)
            return "its processes were killed"
        return "its processes were killed" if killed else "none of its processes was running"

    def _is_ours(self, pid: int, rec: RunRecord) -> bool:
        """Is ``pid`` a process of that run (by ONITE_RUN_ID in its environment)?"""
        run_id = str(rec.get("run_id") or "")
        return bool(run_id) and pid in find_run_processes(str(self.d.spool.root), str(rec.get("name") or ""),
                                                           lambda found: found == run_id)

    def stop_unmonitored(self, name: str, info: dict, *, owner: int | None = None) -> str:
        """Make sure a dead driver's job that had no monitor (an older onite's, a Slurm job) is not
        still running before it is requeued (``owner``: the claim's uid).

        Raises:
            Unavailable: a Slurm job that may still run (Slurm cannot be asked, or it outlived its cancel).
        """
        d = self.d
        if not info:
            return self.stop_unrecorded(name)
        runner = self.runner_of(info)
        machine = info.get("machine")
        if runner.executor == "local" and machine and machine != d.machine:
            # process ids mean nothing on another machine: the admin vouched that it is down
            # (a Slurm job, by contrast, can be checked and cancelled from any submit host)
            return f"it ran on {machine}, which cannot be checked from here"
        return runner.recover(info, d.config.kill_grace.total_seconds(), owner=owner)

    def stop_unrecorded(self, name: str) -> str:
        """A claim with no run record: the dead driver never started it, or was killed between
        starting it and writing the record. What it started carries a run id of this host (we hold
        its lock, so no live driver has one) and this spool's path; the executor looks for that."""
        d = self.d
        ours = lambda run_id: run_id_host(run_id) == d.host  # noqa: E731
        try:
            owner = os.lstat(d.running_dir / name).st_uid  # the claim's: only root renames into running/
        except OSError:
            owner = None
        return d.runner.recover_unrecorded(name, str(d.spool.root), ours, d.config.kill_grace.total_seconds(),
                                           owner=owner)

    def runner_of(self, info: dict) -> Runner:
        """The executor that started the run: after a change of ``executor`` a Slurm job must still be cancelled."""
        d = self.d
        executor = info.get("executor") or d.runner.executor
        if executor == d.runner.executor:
            return d.runner
        try:
            return d.make_runner(executor)
        except OniteError:
            return d.runner
