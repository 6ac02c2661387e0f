"""The job state machine (a job's state is its file's folder; each change one rename, checked against
``_ALLOWED``), how a run ended (``Outcome``, ``Stop``) and the result record.
"""

from __future__ import annotations

import os
import signal as _signal
from datetime import datetime
from enum import StrEnum

from onite.core import values as v
from onite.core.config import MAX_PRIORITIES
from onite.core.errors import DamagedRecord
from onite.core.job import MAX_RETRIES, MAX_SIGNAL, MAX_STATUS, Attempt, Job
from onite.core.names import is_valid_key
from onite.core.record import Record
from onite.core.resources import MAX_CPUS, MAX_MEM, Need, format_mem, human_bytes

MAX_ID = 2**32 - 1  # a uid


class JobState(StrEnum):
    QUEUED = "queued"  #: waiting in its priority folder
    HELD = "held"  #: queued but skipped until released
    RUNNING = "running"  #: claimed by a driver, its process (or Slurm job) alive
    DONE = "done"  #: finished with exit status 0
    FAILED = "failed"  #: finished otherwise: exit status, signal, timeout, not started, dependency failed, interrupted
    CANCELLED = "cancelled"  #: removed by a user or an admin before it finished


_ALLOWED = {
    JobState.QUEUED: {JobState.HELD, JobState.RUNNING, JobState.CANCELLED, JobState.FAILED},  # failed: a dependency did
    JobState.HELD: {JobState.QUEUED, JobState.CANCELLED},
    JobState.RUNNING: {JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.QUEUED},  # queued: retry, recovery
}


class InvalidTransition(Exception):
    """A bug: code tried to move a job along an edge the state machine does not have."""


def check_transition(name: str, old: JobState, new: JobState) -> None:
    """Raises InvalidTransition: ``old → new`` is not an edge of the state machine."""
    if new not in _ALLOWED.get(old, ()):
        raise InvalidTransition(f"job {name!r} cannot go from {old} to {new}")


class Outcome(Record):
    """How one attempt ended. Exactly one cause: exit_code, signal, or a reason."""

    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    cancelled_by: str | None = None
    reason: str = ""  # set when the job never ran or was stopped by onite
    retryable: bool = False  # with a reason: the machinery failed, not the job (e.g. a Slurm node died)
    never_started: bool = False  # with a reason: the job's process never ran (its result has no start)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.cancelled_by is None and not self.reason

    @property
    def state(self) -> JobState:
        if self.cancelled_by is not None:
            return JobState.CANCELLED
        return JobState.DONE if self.ok else JobState.FAILED

    def retried(self, attempt: int, retries: int) -> bool:
        """Is a run that ended so spooled again rather than filed? A failure of the job's own, or of the machinery
        that may pass, while retries are left."""
        return self.state is JobState.FAILED and (not self.reason or self.retryable) and attempt <= retries

    def describe(self) -> str:
        """``exit 3``, ``timeout``, ``signal 9 (SIGKILL)``: the reason lists and reports show."""
        if self.cancelled_by is not None:
            return f"cancelled by {self.cancelled_by}"
        if self.timed_out:
            return "timeout"
        if self.reason:
            return self.reason
        if self.signal is not None:
            return f"signal {self.signal} ({signal_name(self.signal)})"
        return "" if self.exit_code == 0 else f"exit {self.exit_code}"


def signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def outcome_from_status(status: int) -> Outcome:
    if os.WIFSIGNALED(status):
        return Outcome(signal=os.WTERMSIG(status))
    return Outcome(exit_code=os.waitstatus_to_exitcode(status))


class Stop(StrEnum):
    """Why onite stops a running job."""

    TIMEOUT = "timeout"  #: its time limit passed
    CANCEL = "cancel"  #: someone cancelled it
    SHUTDOWN = "shutdown"  #: the driver was stopped hard; the job goes back to its queue
    OUTPUT = "output"  #: it wrote more output than max_output
    NEVER = "never"  #: Slurm can never start it (the stop's ``by`` says why); it fails


OUTPUT_STOPPED = "stopped: it wrote more output than max_output"  # the reason of a run stopped for it
HARD_STOPPED = "interrupted: the driver was stopped"  # the reason of a run a hard stop ended: it goes back to its queue
OUT_OF_MEMORY = "out of memory"  # how the reason of a run the kernel killed for its --mem begins


def stopped_outcome(ended: Outcome, stopping: Stop | None, cancelled_by: str | None) -> Outcome | None:
    """How an attempt onite stopped (``stopping``: why) is recorded, its exit code or signal kept; None: not stopped."""
    why = {Stop.TIMEOUT: {"timed_out": True}, Stop.CANCEL: {"cancelled_by": cancelled_by or "?"},
           Stop.SHUTDOWN: {"reason": HARD_STOPPED},
           Stop.OUTPUT: {"reason": OUTPUT_STOPPED},
           Stop.NEVER: {"reason": cancelled_by or "Slurm can never start it"}}.get(stopping)
    return None if why is None else Outcome(exit_code=ended.exit_code, signal=ended.signal, **why)


class Result(Record):
    """The result record of a finished job: ``jobsdone/NAME@result`` (JSON, world-readable)."""

    name: str
    uid: int
    user: str
    priority: int
    urgent: bool
    state: JobState
    reason: str
    exit_code: int | None
    signal: int | None
    host: str
    submitted: datetime
    queued: datetime | None
    started: datetime | None
    finished: datetime
    attempt: int
    attempts: tuple[Attempt, ...] = ()
    run_id: str = ""
    executor: str = "local"
    external_id: str | None = None  # e.g. the Slurm job id
    nodes: str | None = None  # the nodes Slurm ran it on, as Slurm writes them (vm, n[01-04]); no field if none
    recur: str | None = None
    stderr: str = "merged"  # "separate": its stderr is in stdout/NAME@stderr; "merged": with its stdout
    mem: int | None = None  # MiB it asked for (onite.core.resources), the spool's default applied
    cpus: int | None = None  # CPUs it asked for, likewise
    peak_mem: int | None = None  # bytes: the most memory it used at once (its cgroup, else its rusage)
    cpu_time: float | None = None  # seconds of CPU it used

    @property
    def duration(self) -> float | None:
        return (self.finished - self.started).total_seconds() if self.started else None

    def to_json(self) -> dict:
        return {"format": 1, **json_fields(self, _RESULT_KEYS), "state": str(self.state),
                "attempts": [a.to_json() for a in self.attempts]}

    @classmethod
    def from_json(cls, data: object) -> "Result":
        """The record ``to_json`` wrote. Raises DamagedRecord: not an object, or a field missing or out of range."""
        try:
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            name = v.text(data, "name")
            if not is_valid_key(name):
                raise ValueError(f"name {name[:40]!r} is not a job key (USER:NAME)")
            finished = v.time(data, "finished")
            attempts = data.get("attempts", ())
            if not isinstance(attempts, (list, tuple)) or len(attempts) > MAX_RETRIES + 1:
                raise ValueError(f"attempts: not a list of at most {MAX_RETRIES + 1} attempts")
            recur = v.optional_text(data, "recur")
            if recur is not None and not is_valid_key(recur):
                raise ValueError(f"recur: {recur[:40]!r} is not a job key (USER:NAME)")
            stderr = v.text(data, "stderr")
            if stderr not in ("merged", "separate"):
                raise ValueError(f"stderr: {stderr[:40]!r} is not merged or separate")
            cpu_time = data.get("cpu_time")  # null where unknown
            if cpu_time is not None and (isinstance(cpu_time, bool) or not isinstance(cpu_time, (int, float))
                                         or not 0 <= cpu_time < 1e12):
                raise ValueError(f"cpu_time: {str(cpu_time)[:40]!r} is not a number of seconds")
            return cls(
                name=name,
                uid=v.integer(data, "uid", 0, MAX_ID),
                user=v.text(data, "user", ""),
                priority=v.integer(data, "priority", 0, MAX_PRIORITIES, 0),
                urgent=v.boolean(data, "urgent", False),
                state=JobState(v.text(data, "state")),
                reason=v.text(data, "reason", ""),
                exit_code=v.optional_integer(data, "exit_code", -MAX_STATUS, MAX_STATUS),
                signal=v.optional_integer(data, "signal", 0, MAX_SIGNAL),
                host=v.text(data, "host", ""),
                submitted=v.optional_time(data, "submitted") or finished,
                queued=v.optional_time(data, "queued"),
                started=v.optional_time(data, "started"),
                finished=finished,
                attempt=v.integer(data, "attempt", 1, MAX_RETRIES + 1, 1),
                attempts=tuple(Attempt.from_json(a) for a in attempts),
                run_id=v.text(data, "run_id", ""),
                executor=v.text(data, "executor", "local"),
                external_id=v.optional_text(data, "external_id"),
                nodes=v.optional_text(data, "nodes"),
                recur=recur,
                stderr=stderr,
                mem=v.optional_integer(data, "mem", 0, MAX_MEM),
                cpus=v.optional_integer(data, "cpus", 0, MAX_CPUS),
                peak_mem=v.optional_integer(data, "peak_mem", 0, 1 << 62),
                cpu_time=None if cpu_time is None else float(cpu_time),
            )
        except ValueError as err:  # JobState("x") and Attempt.from_json say ValueError too
            raise DamagedRecord(f"damaged result record: {str(err)[:200]}",
                                "remove it, or restore it from a backup") from None


# a result record's fields (docs/spool-format.md), in order, after "format"
_RESULT_KEYS = ("name", "uid", "user", "priority", "urgent", "state", "reason", "exit_code", "signal", "host",
                "submitted", "queued", "started", "finished", "duration", "attempt", "attempts", "run_id", "executor",
                "external_id", "nodes", "recur", "stderr", "mem", "cpus", "peak_mem", "cpu_time")


def json_fields(record: object, keys: tuple[str, ...]) -> dict:
    """The attributes of ``record`` named ``keys``, times in ISO 8601."""
    data = {key: getattr(record, key) for key in keys}
    return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in data.items()}


def unrun_result(*, name: str, uid: int, user: str, state: JobState, reason: str, host: str, now: datetime,
                 job: Job | None = None, priority: int = 0, urgent: bool = False, submitted: datetime | None = None,
                 started: datetime | None = None, run_id: str = "") -> Result:
    """The result of a job no run of which was seen to end, finished ``now``. ``job``, its file if it could be
    read, gives priority, submit time, earlier attempts (the first one's start is the job's), template and stderr."""
    if job is not None:
        priority, submitted = job.priority, job.submitted
        if started is None and job.tried:
            started = job.tried[0].started
    return Result(name=name, uid=uid, user=user, priority=priority, urgent=urgent, state=state, reason=reason,
                  exit_code=None, signal=None, host=host, submitted=submitted or now, queued=None, started=started,
                  finished=now, attempt=job.attempt if job else 1, attempts=job.tried if job else (), run_id=run_id,
                  recur=job.recur if job else None, stderr=job.stderr_mode if job else "merged")


def memory_outcome(ended: Outcome, usage: dict | None, need: Need | None) -> Outcome:
    """``ended``, or out of memory if the kernel killed a process of the job for its limit: failed even if its
    leader exited 0 (its killed children did not do their work), as Slurm's OUT_OF_MEMORY is."""
    used = usage or {}
    oom = used.get("oom")
    if not isinstance(oom, int) or oom < 1 or need is None or not need.mem:
        return ended
    peak = used.get("peak_mem")
    peaked = f", peaked {human_bytes(peak)}" if isinstance(peak, int) else ""
    return Outcome(exit_code=ended.exit_code, signal=ended.signal,
                   reason=f"{OUT_OF_MEMORY} (asked {format_mem(need.mem)}{peaked})")
