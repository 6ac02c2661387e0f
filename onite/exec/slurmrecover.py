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
from onite.exec import pids, sbatch, squeue
from onite.exec.contain import is_zombie, process_start_ticks
from onite.exec.runner import Run, Unavailable


SBATCH_GONE_WAIT = 10.0  # seconds a killed sbatch is waited for
SUBMISSION_SETTLE = 1.0  # seconds the controller is given to take a submission its dying sbatch sent
CANCEL_WAIT = 60.0  # seconds a cancelled job is waited for at least: past Slurm's KillWait (default 30 s)


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

    def recover(self, info: dict, grace: float, *, owner: int | None = None) -> str:
        """A run that could not be re-attached: make sure no Slurm job of it is left (``owner``: the
        claim's uid, whose job it must be).

        Raises:
            Unavailable: Slurm cannot be asked, or the job is still in flight after its cancel.
        """
        job_id = info.get("external_id") or info.get("slurm_job_id")
        if not job_id:
            return "it had not reached Slurm"
        answer = self._query([job_id])
        if answer is None:
            raise Unavailable(f"Slurm could not be asked about job {job_id}")
        status = answer.get(job_id)
        if status is None or status.uid != self._job_uid(owner):
            return f"Slurm no longer knows job {job_id}"
        if status.is_final:
            return f"Slurm job {job_id} had ended ({status.state})"
        return self._cancel_and_wait(job_id, self._job_uid(owner), grace)

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, grace: float, *, owner: int | None = None) -> str:
        """A claim with no run record: the driver may have been killed while sbatch ran. A job it
        submitted is found among its owner's (``owner``: the claim's) by its name and its comment
        (sbatch.run_comment), and cancelled."""
        label, uid = job_label(name), self._job_uid(owner)
        done = self._run_tool(squeue.search_argv(self.squeue, label, uid))
        if done is None or done.returncode != 0:
            return "no run record, and Slurm could not be asked whether a job of it was submitted"
        found = [job_id for job_id, state, comment in squeue.parse_search(done.stdout.decode("utf-8", "replace"))
                 if state not in squeue.FINAL and (run_id := sbatch.run_of_comment(comment, spool)) and run_id_ok(run_id)]
        if not found:
            return "no run record, and none of its Slurm jobs in flight (sbatch never ran: its record comes first)"
        return "no run record; " + "; ".join(self._cancel_and_wait(job_id, uid, grace) for job_id in found)

    def _cancel_and_wait(self, job_id: str, uid: int, grace: float) -> str:
        """Cancel the job, and wait until Slurm says it is over: a job run again must not overlap with its
        predecessor. Slurm kills what its TERM left after KillWait, so the wait is at least that long.

        Raises:
            Unavailable: it is still in flight (or Slurm cannot say) at the end of the wait.
        """
        self._scancel(job_id, uid)
        deadline = time.monotonic() + max(grace, CANCEL_WAIT)
        while True:
            answer = self._query([job_id])
            status = answer.get(job_id) if answer else None
            if answer is not None and (status is None or status.is_final):
                ended = status.state if status is not None else "gone"
                return f"Slurm job {job_id} was cancelled" if ended in ("CANCELLED", "gone") else \
                    f"Slurm job {job_id} ended ({ended}) as it was cancelled"
            if time.monotonic() >= deadline:
                raise Unavailable(f"Slurm job {job_id} was sent a cancel and is still "
                                  f"{status.state if status else 'unknown'}")
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
        self._stop_left_sbatch(info["run_id"], spool, self._job_uid(owner))
        done = self._run_tool(squeue.search_argv(self.squeue, job_label(info["name"]), self._job_uid(owner),
                                                 every=True))
        if done is None or done.returncode != 0:
            raise Unavailable("Slurm could not be asked for the job of this run")
        found = [job_id for job_id, _, comment in squeue.parse_search(done.stdout.decode("utf-8", "replace"))
                 if sbatch.run_of_comment(comment, spool) == info["run_id"]]
        return found[0] if len(found) == 1 else None

    def _stop_left_sbatch(self, run_id: str, spool: str, uid: int) -> None:
        """An sbatch of the run that outlived its driver could still submit the job after the search
        found none, and the job would run twice: it is killed first (it runs as the job's owner, who may
        have stopped it). One that was killed may have handed the job to the controller as it died: the
        search waits a moment for the controller to have it.

        Raises:
            Unavailable: it is still there after SIGKILL (a process stuck in the kernel).
        """
        import signal

        argument = f"--comment={sbatch.run_comment(run_id, spool)}".encode()
        left = pids.with_argument(argument, uid)
        if not left:
            return
        for pid, ticks in left:
            pids.signal_exact(pid, ticks, signal.SIGKILL)
        deadline = time.monotonic() + SBATCH_GONE_WAIT
        while any(process_start_ticks(pid) == ticks and not is_zombie(pid) for pid, ticks in left):
            if time.monotonic() >= deadline:
                raise Unavailable(f"the sbatch its dead driver started (pid {left[0][0]}) does not exit")
            time.sleep(0.05)
        time.sleep(SUBMISSION_SETTLE)
