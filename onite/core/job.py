"""The Job and Attempt models, valid by construction, and the limits of every field. A Job is the submitter's
word: never its owner (the file's uid), its place (folder and ctime) or a hold.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from onite.core import values as v
from onite.core.config import MAX_PRIORITIES, MAX_RETRIES, NOTIFY_HOW, NOTIFY_ON
from onite.core.names import is_valid_key, is_valid_name
from onite.core.record import Record
from onite.core.resources import MAX_CPUS, MAX_MEM
from onite.core.timeparse import MAX_DURATION, is_valid_time
from onite.core.values import is_whole

MAX_AFTER = 64  # a job waits for at most this many others: each is looked at whenever it might start
MAX_SHEBANG = 255  # bytes after "#!", as Linux reads them (BINPRM_BUF_SIZE, 256)
MAX_STATUS = 2**31 - 1  # an exit code, as waitpid or Slurm reports it, fits in 32 bits
MAX_SIGNAL = 255


class Attempt(Record):
    """One finished try of a job that is retried (kept in the job file between tries)."""

    attempt: int
    started: datetime
    finished: datetime
    host: str
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""

    def to_json(self) -> dict:
        return {**self._asdict(), "started": self.started.isoformat(), "finished": self.finished.isoformat()}

    @classmethod
    def from_json(cls, data: object) -> "Attempt":
        """The attempt ``to_json`` wrote. Raises ValueError: not an object, or a field wrong or out of range."""
        if not isinstance(data, dict):
            raise ValueError("an attempt is not a JSON object")
        return cls(
            attempt=v.integer(data, "attempt", 1, MAX_RETRIES + 1),
            started=v.time(data, "started"),
            finished=v.time(data, "finished"),
            host=v.text(data, "host", ""),
            exit_code=v.optional_integer(data, "exit_code", -MAX_STATUS, MAX_STATUS),
            signal=v.optional_integer(data, "signal", 0, MAX_SIGNAL),
            reason=v.text(data, "reason", ""),
        )


class Job(Record):
    """Everything a job file holds. Made or changed (``_replace``) only if every field is in its range
    (docs/spool-format.md); else ValueError, saying which."""

    name: str
    priority: int
    submitted: datetime
    host: str
    umask: int
    cwd: bytes
    env: dict[bytes, bytes]
    body: bytes
    timeout: timedelta | None = None
    retries: int = 0
    after: tuple[str, ...] = ()
    not_before: datetime | None = None
    urgent: bool = False
    pin: str | None = None
    attempt: int = 1
    tried: tuple[Attempt, ...] = ()
    recur: str | None = None
    stderr_separate: bool = False  # stderr to stdout/NAME@stderr instead of with stdout
    notify: str | None = None  # "mail", "command", "none"; None: the spool's notify when the job ends
    notify_on: str | None = None  # "failure", "always"; None: the spool's notify_on
    mem: int | None = None  # MiB of memory it asks for (--mem, else the spool's default_mem at submit); None: none
    cpus: int | None = None  # CPUs it asks for (--cpus, else default_cpus at submit); None: none
    extra: tuple[tuple[str, str], ...] = ()

    def __new__(cls, *args, **fields) -> Job:
        return _valid(super().__new__(cls, *args, **fields))

    def _replace(self, **changes) -> Job:
        return _valid(super()._replace(**changes))

    @property
    def stderr_mode(self) -> str:
        """"separate" (stdout/NAME@stderr) or "merged", as result records say it."""
        return "separate" if self.stderr_separate else "merged"


def _valid(job: Job) -> Job:
    problem = _job_problem(job)
    if problem:
        raise ValueError(problem)
    return job


LIMITS = ("timeout", "retries", "mem", "cpus", "not_before", "after")  # what an edit may change and keep its place


def with_limits(job: Job, source: Job) -> Job:
    """``job`` with the LIMITS of ``source`` (an edit of it)."""
    return job._replace(**{name: getattr(source, name) for name in LIMITS})


def _job_problem(job: Job) -> str:
    if not is_valid_key(job.name):
        return f"name {job.name[:40]!r} is not a job key (USER:NAME)"
    if not is_whole(job.priority, 1, MAX_PRIORITIES):
        return f"priority {job.priority!r} is not 1 to {MAX_PRIORITIES}"
    if not is_valid_time(job.submitted):
        return f"submitted: {job.submitted!r} is not a time with its UTC offset, in the years 1900 to 9998"
    if not is_whole(job.umask, 0, 0o777):
        return f"umask {job.umask!r} is not 0000 to 0777"
    if not isinstance(job.cwd, bytes) or not job.cwd.startswith(b"/") or b"\0" in job.cwd:
        return "cwd is not an absolute path without NUL bytes"
    if job.timeout is not None and not timedelta(0) < job.timeout <= MAX_DURATION:
        return f"timeout {job.timeout.total_seconds():g}s is not longer than 0 and at most {MAX_DURATION.days} days"
    if not is_whole(job.retries, 0, MAX_RETRIES):
        return f"retries {job.retries!r} is not 0 to {MAX_RETRIES}"
    if not is_whole(job.attempt, 1, job.retries + 1):
        return f"attempt {job.attempt!r} is not 1 to retries + 1 ({job.retries + 1})"
    if len(job.tried) >= job.attempt:  # one more is added at each retry, and a result holds them all
        return f"{len(job.tried)} attempts tried before attempt {job.attempt}"
    if len(job.after) > MAX_AFTER:
        return f"it waits for {len(job.after)} jobs (after:), more than {MAX_AFTER}"
    for dep in job.after:
        if not is_valid_key(dep):
            return f"after: {dep[:40]!r} is not a job key (USER:NAME)"
    if job.not_before is not None and not is_valid_time(job.not_before):
        return f"at: {job.not_before!r} is not a time with its UTC offset, in the years 1900 to 9998"
    if job.pin is not None and not is_valid_name(job.pin):
        return f"pin: {job.pin[:40]!r} is not a valid host name"
    if job.recur is not None and not is_valid_key(job.recur):
        return f"recur: {job.recur[:40]!r} is not a job key (USER:NAME)"
    if job.notify is not None and job.notify not in NOTIFY_HOW:
        return f"notify must be mail, command or none, not {job.notify!r}"
    if job.notify_on is not None and job.notify_on not in NOTIFY_ON:
        return f"notify-on must be failure or always, not {job.notify_on!r}"
    if job.mem is not None and not is_whole(job.mem, 1, MAX_MEM):
        return f"mem {job.mem!r} is not 1 to {MAX_MEM} MiB"
    if job.cpus is not None and not is_whole(job.cpus, 1, MAX_CPUS):
        return f"cpus {job.cpus!r} is not 1 to {MAX_CPUS}"
    for key, _ in job.extra:
        if "\n" in key or ": " in key or key in HEADER_KEYS:
            return f"extra header key {key[:40]!r} cannot be written back"
    return shebang_problem(job.body)


def shebang_problem(body: bytes) -> str:
    """Why the ``#!`` line that starts ``body`` can never be run ("" if it can, or there is none)."""
    if not body.startswith(b"#!"):
        return ""
    end = body.find(b"\n")
    line = body[2:] if end < 0 else body[2:end]
    if b"\0" in line:
        return "its #! line holds a NUL byte, which no interpreter path or argument can hold"
    if len(line) > MAX_SHEBANG:
        return f"its #! line is {len(line)} bytes long, more than the {MAX_SHEBANG} bytes an interpreter line may have"
    return ""


# the header keys of a job file (onite.core.jobfile; env, after and tried may repeat): no extra key is one
HEADER_KEYS = frozenset(
    ("onite-job", "name", "priority", "submitted", "host", "umask", "cwd", "urgent",
     "timeout", "retries", "at", "pin", "recur", "attempt",
     "stderr", "notify", "notify-on", "mem", "cpus", "env", "after", "tried")
)
