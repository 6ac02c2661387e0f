"""Recovery of runs that outlive their driver with no monitor of onite's: Slurm jobs (and an older
onite's runs, which are stopped and run again).

A Slurm job keeps running in the cluster when its driver dies, so the next
driver of the host decides from what Slurm says of it, and never runs again
a job that reached Slurm:

- in flight: taken back (re-attached) and watched; where nothing would watch
  it (``onite recover --host``, an executor changed to local) it is cancelled,
  and run again only once Slurm says the cancel took it (one that ended by
  itself meanwhile is filed as it ended);
- ended while no driver watched it: filed as Slurm says it ended;
- forgotten by Slurm (it ended more than MinJobAge ago): filed as lost, since
  sbatch took it and it may have run;
- Slurm cannot be asked, or a job does not leave after its cancel: the claim is
  left for the next driver.

A mixin of onite.drain.recovery.Recovery (its driver, ``_run_of``, ``requeue``,
``_retry_of``, ``_drop``, ``_already_filed``).
"""

from __future__ import annotations

import os
from pathlib import Path

from onite.core.errors import OniteError
from onite.exec.runner import Unavailable
from onite.spool.filecheck import BadFile


class OutlivingRuns:
    """Recovery's side for runs with no monitor."""

    def _unmonitored(self, name: str, path: Path, info: dict) -> None:
        """A claim of a run with no monitor: an older onite's (killed, then requeued, as that onite did)
        or a Slurm job (``_take_back``). One its dead driver filed, or spooled the retry of, is not again."""
        if self._already_filed(name, path, info):
            return
        owner = _owner(path)
        try:
            if info.get("executor") == "slurm" and not (info.get("external_id") or info.get("slurm_job_id")):
                info = self._submitted_as(info, owner)
            if self._take_back(name, path, info):
                return
            what = self.d.orphans.stop_unmonitored(name, info, owner=owner)
        except Unavailable as err:  # keep the claim rather than run the job twice
            self.d.log.event("recovered", name, action="left claimed for the next driver", why=str(err))
            return
        self.requeue(name, path, info, what, rerun=True)

    def _submitted_as(self, info: dict, owner: int | None) -> dict:
        """A Slurm run whose driver died as sbatch ran (its record has no job id): its job, if Slurm has
        one for exactly this run (by the run's id), so that it is taken back, not run a second time.

        Raises:
            Unavailable: Slurm cannot be asked, or that sbatch is still there and cannot be stopped.
        """
        d = self.d
        if owner is None:
            return info
        job_id = d.orphans.runner_of(info).job_of(info, str(d.spool.root), owner)
        return {**info, "external_id": job_id, "slurm_job_id": job_id} if job_id else info

    def _take_back(self, name: str, path: Path, info: dict) -> bool:
        """A Slurm run (see the module's docstring); False if it never reached Slurm.

        Raises:
            Unavailable: it may still run, and cannot be stopped or asked about now.
        """
        d = self.d
        if not info.get("external_id"):
            return False
        try:
            run = self._run_of(name, path, info)
        except (OSError, OniteError, BadFile):
            return False
        run.external_id = str(info["external_id"])
        retry = self._retry_of(run)
        if retry:
            self._drop(name, path, run, queued=retry == "queued")
            return True
        runner = d.orphans.runner_of(info)
        try:
            ended = runner.unwatched_end(run)
        except Unavailable:
            if not self.may_reattach:
                raise
            ended = None  # a driver that watches keeps it, and asks again
        if ended is None and self.may_reattach and d.runner.reattach(run):
            d.running[name] = run
            d.log.event("recovered", name, action="re-attached", slurm=run.external_id)
            return True
        if ended is None:  # nothing here will watch it: stop it, then see how it ended
            what = d.orphans.stop_unmonitored(name, info, owner=run.owner.uid)
            ended = runner.unwatched_end(run)
            if ended is None or ended.cancelled_by is not None:
                self.requeue(name, path, info, what, rerun=True)
                return True
        d.log.event("recovered", name, action="filed: it ended while no driver watched it", slurm=run.external_id)
        d.finisher.record(run, ended, d.clock.now())
        return True


def _owner(path: Path) -> int | None:
    """The uid of a claim: only root renames into running/, so the file is still its owner's."""
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None
