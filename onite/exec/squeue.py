"""What Slurm says about onite's jobs, and how each ending becomes an Outcome (pure).

One ``squeue -h -t all -j ID1,ID2,... -O ...`` call answers for every job in
flight: ``-t all`` keeps finished jobs in the answer for MinJobAge, and the
``exit_code`` field is the raw wait status (768 is exit 3, 9 is SIGKILL). The
JobState, not the exit code, says how a job ended: a job cancelled while
pending has exit code 0, a job that trapped SIGTERM may exit 143.

No accounting database is needed (sacct is not used): a job that ended more
than MinJobAge ago is simply gone, which onite records as lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from onite.core.state import Outcome, stopped_outcome

FIELDS = ("JobID", "State", "exit_code", "Reason", "StartTime", "Name")
FORMAT = ",".join(f"{field}:|" for field in FIELDS)  # ":|" = natural width, then a "|" separator

#: States in which a job will run no more. Everything else (PENDING, RUNNING,
#: COMPLETING, CONFIGURING, SUSPENDED, REQUEUED, ...) is still in flight:
#: COMPLETING in particular may still have processes to kill.
FINAL = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
})
#: States whose StartTime is a real start, not the scheduler's estimate.
STARTED = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}) | FINAL

#: Endings caused by the cluster, not the job: a job spooled with --retries is tried again.
RETRYABLE = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})

# Signals above this are real-time signals; Slurm reports a launch failure
# (e.g. the output file cannot be opened on the node) as FAILED "0:53".
_LAST_ORDINARY_SIGNAL = 31


@dataclass(frozen=True, kw_only=True)
class JobStatus:
    """One line of squeue's answer."""

    job_id: str
    state: str
    status: int | None  # raw wait status
    reason: str
    name: str
    start: datetime | None  # only once the job has really started

    @property
    def is_final(self) -> bool:
        return self.state in FINAL


def query_argv(squeue: str, job_ids: list[str]) -> list[str]:
    """The one squeue call that reports on ``job_ids``."""
    return [squeue, "-h", "-t", "all", "-j", ",".join(job_ids), "-O", FORMAT]


def search_argv(squeue: str, name: str) -> list[str]:
    """The squeue call that lists the jobs still in flight named ``name``, with their comments."""
    return [squeue, "-h", "-n", name, "-O", "JobID:|,State:|,Comment:|"]


def parse_search(text: str) -> list[tuple[str, str, str]]:
    """search_argv's lines → [(job id, state, comment)]; lines that do not parse are skipped."""
    found = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.rstrip().removesuffix("|").split("|", 2)]
        if len(parts) == 3 and parts[0]:
            found.append((parts[0], parts[1].split()[0] if parts[1] else "", parts[2]))
    return found


def parse(text: str) -> dict[str, JobStatus]:
    """squeue's lines → {job id: JobStatus}; lines that do not parse are skipped."""
    found = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.rstrip().removesuffix("|").split("|", len(FIELDS) - 1)
        if len(parts) != len(FIELDS):
            continue
        job_id, state, status, reason, start, name = (p.strip() for p in parts)
        if not job_id:
            continue
        state = state.split()[0] if state else ""  # "CANCELLED by 0" in some versions
        found[job_id] = JobStatus(
            job_id=job_id, state=state, status=int(status) if status.isdigit() else None,
            reason=reason, name=name, start=_when(start) if state in STARTED else None,
        )
    return found


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text).astimezone()  # squeue prints local time without a zone
    except ValueError:
        return None  # "N/A", "Unknown", ""


def is_unknown_ids(returncode: int, stderr: str) -> bool:
    """squeue failed only because none of the ids exists any more (not a controller problem)."""
    return returncode != 0 and "Invalid job id" in stderr


def decode_status(status: int | None) -> tuple[int | None, int | None]:
    """A raw wait status → (exit code, signal); exactly one is set."""
    if status is None:
        return None, None
    signal = status & 0x7F
    if signal:
        return None, signal
    return (status >> 8) & 0xFF, None


def outcome(job: JobStatus, *, stopping: str | None, cancelled_by: str | None) -> Outcome:
    """How a finished Slurm job ended, as onite records it.

    ``stopping`` is why onite itself cancelled it, if it did ("cancel",
    "timeout", "shutdown"). A state other than CANCELLED means the job ended
    on its own before the cancel took effect, and that is what is recorded.
    """
    exit_code, signal = decode_status(job.status)
    state = job.state
    if state == "COMPLETED":
        return Outcome(exit_code=exit_code if exit_code is not None else 0, signal=signal)
    if state == "FAILED":
        if job.reason == "JobLaunchFailure" and (signal is None or signal > _LAST_ORDINARY_SIGNAL):
            return Outcome(reason="Slurm could not launch it (JobLaunchFailure: can the node reach "
                                  "the spool's stdout/ folder and the job's directory?)")
        if exit_code == 0 and signal is None:
            return Outcome(reason=f"failed in Slurm ({job.reason or 'no reason given'})")
        return Outcome(exit_code=exit_code, signal=signal)
    if state == "TIMEOUT":
        return Outcome(exit_code=exit_code, signal=signal, timed_out=True)
    if state == "CANCELLED":
        return (stopped_outcome(Outcome(exit_code=exit_code, signal=signal), stopping, cancelled_by)
                or Outcome(exit_code=exit_code, signal=signal, cancelled_by="scancel, outside onite"))
    detail = f" ({job.reason})" if job.reason and job.reason != "None" else ""
    return Outcome(exit_code=exit_code, signal=signal, reason=f"ended by Slurm: {state}{detail}",
                   retryable=state in RETRYABLE)


def lost(job_id: str) -> Outcome:
    """A job the controller no longer knows (it ended more than MinJobAge ago, or its state was lost)."""
    return Outcome(reason=f"lost: Slurm forgot job {job_id}")
