"""A local driver's runs whose monitor is gone, or whose driver died: how they ended, what is left.

A mixin of onite.exec.local.LocalRunner (its clock and runs): a monitor done with a run
without a word is answered by the run's record; a run whose monitor outlived its driver is
adopted (watched by its pidfd); a dead driver's claim with no record, or a record of an
older onite, has its processes found and stopped.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime

from onite.core.runrecord import RunRecord
from onite.core.state import Outcome, memory_outcome, outcome_from_status
from onite.exec import contain
from onite.exec.monitorlink import MonitorLink
from onite.exec.processes import find_run_processes, kill_leftovers, stop_processes
from onite.exec.runner import Run
from onite.spool import runrecords


class LocalRecovery:
    """Recovery's side of LocalRunner."""

    def outcome_from_record(self, run: Run) -> Outcome:
        """How a run whose monitor is done with it without a word ended, as its run record says."""
        rec = runrecords.read(run.record_path) if run.record_path else None
        if rec is not None and rec.job_pid is not None:
            self._note_start(run, rec.job_pid)
        if rec is not None and rec.status is not None:
            run.usage = rec.usage
            return memory_outcome(outcome_from_status(rec.status), run.usage, run.need)
        if rec is not None and rec.failed is not None:
            return Outcome(reason=rec.failed, never_started=rec.job_pid is None)
        # onite's machinery failed, not the job: a retry it has left is spooled (retryable), as for a
        # Slurm node that died; a dead driver's recovery reruns such a claim (onite.drain.recovery)
        if rec is not None and not rec.started_job:
            return Outcome(reason="its monitor was killed before it started the job: the job did not run",
                           retryable=True, never_started=True)
        self._kill_unwatched(run)  # nobody watches what may still run of it, and a retry may follow at once
        return Outcome(reason="onite's monitor of this job was killed: how the job ended is unknown", retryable=True)

    def _kill_unwatched(self, run: Run) -> None:
        """Kill whatever of ``run`` may still run once its monitor is dead, and remove its groups (its
        monitor would have): the job may have started though the monitor died before saying so."""
        self._signal(run, signal.SIGKILL)
        kill_leftovers(run.cgroup, run.groups, run.spool, run.name, run.run_id, known_pid=run.pgid is not None)

    def adopt(self, run: Run, rec: RunRecord) -> bool:
        """Take over a run whose monitor outlived its driver: watch the monitor, enforce the time
        limit, honour cancels. False if the monitor is not that process any more."""
        pid, ticks = rec.monitor_pid, rec.monitor_ticks
        if pid is None:
            return False
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
        import select

        if ticks is not None and contain.process_start_ticks(pid) != ticks or select.select([pidfd], [], [], 0)[0]:
            os.close(pidfd)
            return False  # the pid belongs to another process now, or it has exited (a zombie of init's)
        run.monitor = MonitorLink(pid=pid, pidfd=pidfd, pipe=None, child=False)
        run.pgid = rec.job_pid
        run.cgroup = rec.get("cgroup") if isinstance(rec.get("cgroup"), str) else None
        run.adopted = run.announced = True
        deadline = rec.get("deadline")
        if isinstance(deadline, str):
            try:
                left = (datetime.fromisoformat(deadline) - self.clock.now()).total_seconds()
                run.timeout_at = self.clock.monotonic() + left
            except (ValueError, TypeError):
                pass
        self.runs.append(run)
        return True

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, grace: float, *, owner: int | None = None) -> str:
        """A claim with no run record: its processes, if any, are found by their environment."""
        killed = stop_processes(lambda: find_run_processes(spool, name, run_id_ok), grace)
        if killed:
            return f"no run record; {killed} of its processes, found by ONITE_RUN_ID, were stopped"
        return "no run record, and none of its processes was running"

    def recover(self, info: dict, grace: float, *, owner: int | None = None) -> str:
        """A run of an older onite (a version-1 record: no monitor) left by a dead driver: make
        sure its processes are gone. Returns what was done."""
        pgid = info.get("pgid")
        if not isinstance(pgid, int) or pgid <= 1:
            return "no process"
        pid, ticks = info.get("pid"), info.get("start_ticks")
        now_ticks = contain.process_start_ticks(pid) if isinstance(pid, int) and pid > 1 else None
        if now_ticks is not None and ticks is not None and now_ticks != ticks:
            return "its processes were gone (the pid is someone else's now)"
        if now_ticks is None and not contain.group_alive(pgid):
            return "its processes were gone"
        contain.signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace  # a wait for processes to end: the real clock
        while time.monotonic() < deadline and contain.group_alive(pgid):
            time.sleep(0.05)
        contain.signal_group(pgid, signal.SIGKILL)
        return "its processes were killed"
