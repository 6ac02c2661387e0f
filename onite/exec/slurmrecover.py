"""What a Slurm driver does after another one died: take its runs back, or make sure none is left.

A mixin of onite.exec.slurm.SlurmRunner (its squeue, scancel, clock and runs): the
jobs a dead driver left in Slurm are found by their ids in its run records, or,
where it died while sbatch ran, by the run's id in their comments (sbatch.run_comment),
among the jobs of the run's owner only (a comment is its owner's to write).
"""

from __future__ import annotations

import time

from onite.core.names import job_label
from onite.core.state import Outcome
from onite.exec import sbatch, squeue
from onite.exec.runner import Run, Unavailable


class SlurmRecovery:
    """Recovery's side of SlurmRunner."""

    def runinfo(self, run: Run) -> dict:
        """What recovery needs: the Slurm job id (the driver also stores it as external_id)."""
        return {"slurm_job_id": run.external_id, "slurm_name": job_label(run.name)}

    def reattach(self, run: Run) -> bool:
        """Take back a run a dead driver left in Slurm; False if Slurm no longer knows it."""
        answer = self._query([run.external_id])
        if answer is None:
            # The controller cannot say: keep the run rather than submit the job a second time.
            known = True
        else:
            status = answer.get(run.external_id)
            known = status is not None and status.uid == self._job_uid(run.owner.uid)
        if not known:
            return False
        self.runs.append(run)
        self._next_poll = self.clock.monotonic()  # look at once: it may have finished meanwhile
        return True

    def unwatched_end(self, run: Run) -> Outcome | None:
        """How a run a dead driver left in Slurm ended while no driver watched it: as Slurm says, or
        lost if Slurm no longer knows its job (it ended more than MinJobAge ago, or the controller
        lost it): sbatch took it, so it may have run, and it is not run again. None: still in flight.

        Raises:
            Unavailable: the controller cannot be asked.
        """
        answer = self._query([run.external_id])
        if answer is None:
            raise Unavailable("Slurm could not be asked how the job ended")
        status = answer.get(run.external_id)
        if status is None or status.uid != self._job_uid(run.owner.uid):
            return squeue.lost(run.external_id, unwatched=True)
        if not status.is_final:
            return None
        if status.start is not None:
            run.started = status.start
        return squeue.outcome(status, stopping=None, cancelled_by=None)

    def recover(self, info: dict, grace: float) -> str:
        """A run that could not be re-attached: make sure no Slurm job of it is left."""
        job_id = info.get("external_id") or info.get("slurm_job_id")
        name = info.get("slurm_name") or (job_label(info["name"]) if info.get("name") else None)
        if not job_id:
            return "it had not reached Slurm"
        answer = self._query([job_id])
        if answer is None:
            self._scancel(job_id, name)
            return f"Slurm could not be asked about job {job_id}; a cancel was sent"
        status = answer.get(job_id)
        if status is None:
            return f"Slurm no longer knows job {job_id}"
        if status.is_final:
            return f"Slurm job {job_id} had ended ({status.state})"
        return self._cancel_and_wait(job_id, name, grace)

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, grace: float, *, owner: int | None = None) -> str:
        """A claim with no run record: the driver may have been killed while sbatch ran. A job it
        submitted is found among its owner's (``owner``: the claim's) by its name and its comment
        (sbatch.run_comment), and cancelled."""
        label = job_label(name)
        done = self._run_tool(squeue.search_argv(self.squeue, label, self._job_uid(owner)))
        if done is None or done.returncode != 0:
            return "no run record, and Slurm could not be asked whether a job of it was submitted"
        found = [job_id for job_id, state, comment in squeue.parse_search(done.stdout.decode("utf-8", "replace"))
                 if state not in squeue.FINAL and (run_id := sbatch.run_of_comment(comment, spool)) and run_id_ok(run_id)]
        if not found:
            return "no run record, and none of its Slurm jobs in flight (sbatch never ran: its record comes first)"
        return "no run record; " + "; ".join(self._cancel_and_wait(job_id, label, grace) for job_id in found)

    def _cancel_and_wait(self, job_id: str, name: str | None, grace: float) -> str:
        self._scancel(job_id, name)
        # as the local runner does for process groups: wait (up to the grace period) until it is
        # really gone, so the requeued job cannot overlap with its dying predecessor
        deadline = time.monotonic() + grace
        while True:
            answer = self._query([job_id])
            status = answer.get(job_id) if answer else None
            if answer is not None and (status is None or status.is_final):
                return f"Slurm job {job_id} was cancelled"
            if time.monotonic() >= deadline:
                return f"Slurm job {job_id} was sent a cancel (still {status.state if status else 'unknown'})"
            time.sleep(0.2)

    def job_of(self, info: dict, spool: str, owner: int | None) -> str | None:
        """The Slurm job of a run whose driver died as sbatch ran (its record has no job id): the one
        job of ``owner`` named for the run whose comment names exactly its run id, in flight or ended
        within MinJobAge; None if there is none (or not one).

        Raises:
            Unavailable: Slurm cannot be asked (then nothing may be decided: the job may be running).
        """
        if not info.get("run_id") or not info.get("name"):
            return None
        done = self._run_tool(squeue.search_argv(self.squeue, job_label(info["name"]), self._job_uid(owner),
                                                 every=True))
        if done is None or done.returncode != 0:
            raise Unavailable("Slurm could not be asked for the job of this run")
        found = [job_id for job_id, _, comment in squeue.parse_search(done.stdout.decode("utf-8", "replace"))
                 if sbatch.run_of_comment(comment, spool) == info["run_id"]]
        return found[0] if len(found) == 1 else None
