"""What Slurm says about onite's jobs, and how each ending becomes an Outcome (pure).

One ``squeue -t all -j IDS`` answers for every job in flight (a job ended more than MinJobAge ago
is gone: lost). A job's owner may set its name or comment to anything, so no field the owner can
write is asked for, a line that does not look as Slurm writes it is skipped, and nothing raises.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from datetime import datetime

from onite.core.state import Outcome, stopped_outcome

# none its owner can write, but Nice, which they may lower (Slurm lets them) and is read to see if they did;
# NodeList is empty for a job that ended without ever being given a node (cancelled while pending), whose
# StartTime Slurm sets to its end; RestartCnt counts the times it was put back in the queue (requeued)
FIELDS = ("JobID", "State", "exit_code", "Reason", "StartTime", "UserId", "Nice", "NodeList", "EndTime", "RestartCnt")
FORMAT = ",".join(f"{field}:|" for field in FIELDS)  # ":|" = natural width, then a "|" separator

#: States in which a job will run no more; all others (COMPLETING too: it may still have processes) are in flight.
FINAL = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
})
#: States whose StartTime is a real start, not the scheduler's estimate.
STARTED = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}) | FINAL

#: Endings caused by the cluster, not the job: a job spooled with --retries is tried again.
RETRYABLE = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})

#: Reasons of a pending job that Slurm can never start as its cluster is configured (it would hold its slot all
#: night), in Slurm's words; waits that end as things change (Resources, ReqNodeNotAvail, PartitionDown…) are not.
NEVER = {
    "BadConstraints": "its requirements cannot be satisfied",
    "PartitionConfig": "it violates a limit of its partition",
    "PartitionNodeLimit": "the nodes it asks for are outside its partition's limits",
    "PartitionTimeLimit": "its time limit exceeds its partition's",
    "DependencyNeverSatisfied": "it depends on a job that will never be satisfied",
}
#: What a job asks for, read once for the reason of one Slurm can never start (numbers only).
ASK_FIELDS = "NumCPUs:|,NumNodes:|"

# Slurm reports a launch failure (an output file the node cannot open) as FAILED with a real-time signal ("0:53").
_LAST_ORDINARY_SIGNAL = 31


@dataclass(frozen=True, kw_only=True)
class JobStatus:
    """One line of squeue's answer."""

    job_id: str
    state: str
    status: int | None  # raw wait status
    reason: str
    uid: int | None  # its owner's (squeue prints the number, or NAME(NUMBER))
    start: datetime | None  # only once the job has really started
    nice: int | None = None
    allocated: bool = True  # False: it ended without ever being given a node (it never ran)
    end: datetime | None = None  # once it is over
    restarts: int = 0  # times Slurm put it back in its queue, after it started or while it ran
    nodes: str | None = None  # the nodes Slurm gave it once it started, as Slurm writes them (vm, n[01-04])

    @property
    def is_final(self) -> bool:
        return self.state in FINAL


def query_argv(squeue: str, job_ids: list[str]) -> list[str]:
    return [squeue, "-h", "-t", "all", "-j", ",".join(job_ids), "-O", FORMAT]


def ask_argv(squeue: str, job_id: str) -> list[str]:
    return [squeue, "-h", "-j", job_id, "-O", ASK_FIELDS]


def never_starts(job: JobStatus) -> bool:
    """Slurm can never start ``job``, as its cluster is configured: it is pending for a reason in NEVER."""
    return job.state == "PENDING" and job.reason in NEVER


def never_reason(job: JobStatus, ask: str) -> str:
    """Why Slurm can never start ``job``, in one line; ``ask``: ask_argv's answer, told if it reads as Slurm's."""
    cpus, nodes = ([*ask.strip().removesuffix("|").split("|"), "", ""])[:2]
    asks = (f"it asks for {cpus} CPU{'s' * (cpus != '1')} on {nodes} node{'s' * (nodes != '1')}; "
            if _DIGITS.fullmatch(cpus) and _DIGITS.fullmatch(nodes) else "")
    return f"Slurm can never start it: {job.reason} ({asks}{NEVER[job.reason]})"


def search_argv(squeue: str, name: str, uid: int) -> list[str]:
    """User ``uid``'s jobs named ``name``, in flight or ended within MinJobAge, with comments."""
    return [squeue, "-h", "-t", "all", "-u", str(uid), "-n", name, "-O", "JobID:|,State:|,Comment:|"]


def parse_search(text: str) -> list[tuple[str, str, str]]:
    """search_argv's lines → [(job id, state, comment)]. A comment may hold a newline and so forge a line:
    the caller acts only on the jobs of the owner it searched."""
    return [(job_id, state, comment) for job_id, state, comment in _rows(text, 3)]


_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?", re.ASCII)  # an array task is ID_TASK
_STATE = re.compile(r"[A-Z_]+", re.ASCII)
_DIGITS = re.compile(r"[0-9]{1,12}", re.ASCII)  # str.isdigit would take "²", which int() refuses
_UID = re.compile(r"(?:[^()|]*\()?([0-9]{1,10})\)?", re.ASCII)
_NICE = re.compile(r"-?[0-9]{1,10}", re.ASCII)
# a node list as Slurm writes one (vm, n[01-04,07], a.b-c_1): shown in list and report, so nothing else is taken
_NODES = re.compile(r"[A-Za-z0-9._\-\[\],]{1,200}", re.ASCII)


def _rows(text: str, count: int):
    """squeue's lines as ``count`` fields cut at "|" (the last takes the rest), whose first two are a job id
    and a state (its first word: "CANCELLED by 0" in some versions) as Slurm writes them."""
    for line in text.splitlines():
        fields = [part.strip() for part in line.rstrip().removesuffix("|").split("|", count - 1)]
        if len(fields) == count:
            fields[1] = (fields[1].split() or [""])[0]
            if _JOB_ID.fullmatch(fields[0]) and _STATE.fullmatch(fields[1]):
                yield fields


def parse(text: str) -> dict[str, JobStatus]:
    """squeue's lines → {job id: JobStatus}; an id seen twice (no answer of Slurm's has that) is left out."""
    found: dict[str, JobStatus] = {}
    twice: set[str] = set()
    for job_id, state, status, reason, start, user, nice, nodes, end, restarts in _rows(text, len(FIELDS)):
        owner = _UID.fullmatch(user)
        if owner is None or not (status == "" or _DIGITS.fullmatch(status)):
            continue
        if job_id in found:
            twice.add(job_id)
        allocated = state not in FINAL or nodes not in ("", "(null)")
        began = state in STARTED and allocated
        found[job_id] = JobStatus(
            job_id=job_id, state=state, status=int(status) if status else None, reason=reason,
            uid=int(owner.group(1)), start=_when(start) if began else None,
            nice=int(nice) if _NICE.fullmatch(nice) else None, allocated=allocated,
            end=_when(end) if state in FINAL else None, restarts=int(restarts) if _DIGITS.fullmatch(restarts) else 0,
            nodes=nodes if began and _NODES.fullmatch(nodes) else None,
        )
    for job_id in twice:
        del found[job_id]
    return found


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text).astimezone()  # squeue prints local time without a zone
    except ValueError:
        return None  # "N/A", "Unknown", ""


def is_unknown_ids(returncode: int, stderr: str) -> bool:
    """squeue failed only because an id does not exist."""
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
    """How a finished Slurm job ended; ``stopping``: why onite cancelled it (in a state other than CANCELLED
    it ended on its own first). One that ended before Slurm gave it a node never ran, unless it had run before
    Slurm requeued it."""
    ended = _outcome(job, stopping=stopping, cancelled_by=cancelled_by)
    return ended if job.allocated or job.restarts else ended._replace(never_started=True)


def _outcome(job: JobStatus, *, stopping: str | None, cancelled_by: str | None) -> Outcome:
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


def lost(job_id: str, *, unwatched: bool = False) -> Outcome:
    """A job the controller no longer knows; ``unwatched``: while no driver watched it."""
    unwatched_text = " while no driver watched it; how it ended is unknown, and it was not run again"
    return Outcome(reason=f"lost: Slurm forgot job {job_id}{unwatched_text if unwatched else ''}")
