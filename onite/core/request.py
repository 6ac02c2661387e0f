"""What a submit asks for, and the Job it makes: ``SubmitRequest``, ``Captured``, ``build_job``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from onite.core.config import NOTIFY_HOW, NOTIFY_ON, Config
from onite.core.errors import InvalidInput, bad_value
from onite.core.job import MAX_AFTER, MAX_RETRIES, Job, shebang_problem
from onite.core.jobfile import env_problem
from onite.core.names import check_name, job_key, resolve, shown
from onite.core.record import Record
from onite.core.resources import parse_cpus, parse_mem
from onite.core.timeparse import parse_duration, parse_when


PATH_MAX = 4096  # Linux: a path given to chdir and exec, its NUL included


class SubmitRequest(Record):
    """What the user asked for, as typed (times and durations not yet parsed)."""

    name: str
    body: bytes
    priority: int | None = None
    urgent: bool = False
    after: tuple[str, ...] = ()
    at: str | None = None
    timeout: str | None = None
    retries: int = 0
    host: str | None = None
    hold: bool = False
    unique: bool = False
    stderr_separate: bool | None = None  # None: the spool's stderr_separate
    notify: str | None = None  # "mail", "command", "none"; None: the spool's notify
    notify_on: str | None = None  # "failure", "always"; None: the spool's notify_on
    mem: str | None = None  # memory in Slurm's words ("4G"); None: the spool's default_mem
    cpus: int | str | None = None  # CPUs; None: the spool's default_cpus

    @classmethod
    def of(cls, name: str, body: bytes, options: Mapping[str, object]) -> "SubmitRequest":
        """The request ``onite submit NAME`` makes with ``options`` (its fields; None: not given), for the command
        line, its fast path and onite.api. ``after``: one name or several.
        Raises TypeError: an option that submit does not have."""
        unknown = set(options) - OPTIONS
        if unknown:
            raise TypeError(f"unknown option {sorted(unknown)[0]!r}; the options are {', '.join(sorted(OPTIONS))}")
        given = {key: value for key, value in options.items() if value is not None}
        after = given.pop("after", None) or ()
        for flag in ("urgent", "hold", "unique"):
            given[flag] = bool(given.get(flag))
        if "mem" in given:
            given["mem"] = str(given["mem"])
        return cls(name=name, body=body, after=(after,) if isinstance(after, str) else tuple(after), **given)

    def limits(self, config: Config, now: datetime, user: str) -> dict:
        """The Job fields its options set, checked before the text is read. Raises InvalidInput as build_job."""
        limits = JobChanges(priority=config.default_priority if self.priority is None else self.priority,
                            retries=self.retries, after=self.after, mem=self.mem, cpus=self.cpus,
                            timeout=self.timeout, at=self.at).parsed(config, now, user)
        if self.host is not None:
            check_name(self.host, what="host name")
        if self.notify is not None and self.notify not in NOTIFY_HOW:
            raise bad_value("--notify", self.notify, "mail, command or none")
        if self.notify_on is not None and self.notify_on not in NOTIFY_ON:
            raise bad_value("--notify-on", self.notify_on, "failure or always")
        if self.notify == "command" and not config.notify_command:  # the admin's hook, only where there is one
            raise InvalidInput("--notify command: this spool has no notify_command in onite.toml",
                               "ask the admin to set notify_command (--notify mail works where this machine can send mail)")
        return limits


OPTIONS = frozenset(SubmitRequest._fields) - {"name", "body"}  # submit's options


class Captured(Record):
    """The submitter's world, captured at submit time."""

    env: dict[bytes, bytes]
    cwd: bytes
    umask: int
    host: str
    now: datetime


def build_job(request: SubmitRequest, captured: Captured, config: Config, user: str) -> Job:
    """The Job a request of ``user``'s describes. The spool's defaults (stderr, timeout, mem, cpus) are written
    into it, so a later change of onite.toml does not change jobs already spooled.
    Raises InvalidInput: a bad option, a ``#!`` line that can never run, an environment execve cannot pass."""
    limits = request.limits(config, captured.now, user)
    check_text(request.name, request.body)
    if len(captured.cwd) >= PATH_MAX:  # chdir refuses it (ENAMETOOLONG): the job would fail at night, never run
        raise InvalidInput(f"your current directory's path is {len(captured.cwd)} bytes long, and no job can start in "
                           f"a directory whose path is longer than {PATH_MAX - 1}",
                           "cd to a folder with a shorter path and submit again")
    problem = env_problem(captured.env)
    if problem:
        raise InvalidInput(f"your environment cannot be passed to a job: {problem}",
                           "unset that variable (env -u NAME onite submit …)")
    defaults = {"timeout": config.timeout, "mem": config.default_mem, "cpus": config.default_cpus}
    try:
        return Job(
            name=job_key(user, request.name),
            submitted=captured.now,
            host=captured.host,
            umask=captured.umask,
            cwd=captured.cwd,
            env=captured.env,
            body=request.body,
            urgent=request.urgent,
            pin=request.host,
            stderr_separate=config.stderr_separate if request.stderr_separate is None else request.stderr_separate,
            notify=request.notify,
            notify_on=request.notify_on,
            **{**defaults, **limits},
        )
    except ValueError as err:  # what no check above catches (e.g. a clock outside the years 1900 to 9998)
        raise InvalidInput(f"cannot spool job {request.name!r}: {err}", "check its options") from None


def check_text(name: str, body: bytes) -> None:
    """InvalidInput: job ``name``'s text is empty, or starts with a ``#!`` line that can never run."""
    if not body:
        raise InvalidInput(f"the text of job {name!r} is empty", "give the job a command")
    problem = shebang_problem(body)
    if problem:
        raise InvalidInput(f"the text of job {name!r} can never run: {problem}",
                           "fix its first line: #!/path/to/interpreter [one argument]")


class JobChanges(Record):
    """Submit's options that set a job's priority and limits, as typed (None: not given): what ``restart`` and
    ``edit`` may change. ``after`` replaces the dependencies; ``("",)`` (``--after ''``) clears them."""

    priority: int | None = None
    retries: int | None = None
    after: tuple[str, ...] | None = None
    mem: str | None = None
    cpus: int | str | None = None
    timeout: str | None = None
    at: str | None = None

    def __bool__(self) -> bool:
        return any(value is not None for value in self)

    def parsed(self, config: Config, now: datetime, user: str) -> dict:
        """The Job fields the options given set, each checked. Raises InvalidInput: a bad value."""
        changed: dict = {}
        if self.priority is not None:
            if not 1 <= self.priority <= config.priorities:
                raise bad_value("-p", self.priority, f"a priority from 1 (first) to {config.priorities} (last)")
            changed["priority"] = self.priority
        if self.retries is not None:
            if not 0 <= self.retries <= MAX_RETRIES:
                raise bad_value("--retries", self.retries, f"a count from 0 to {MAX_RETRIES}")
            changed["retries"] = self.retries
        if self.after == ("",):  # --after '' alone: no dependencies (a name is never empty)
            changed["after"] = ()
        elif self.after is not None:
            if len(set(self.after)) > MAX_AFTER:
                raise InvalidInput(f"the job waits for {len(set(self.after))} jobs (--after)",
                                   f"give at most {MAX_AFTER}; for more, have one job wait for them and this one for it")
            changed["after"] = tuple(dict.fromkeys(resolve(dep, user, what="dependency name") for dep in self.after))
        if self.mem is not None:
            changed["mem"] = parse_mem(self.mem)
        if self.cpus is not None:
            changed["cpus"] = parse_cpus(self.cpus)
        if self.timeout is not None:
            changed["timeout"] = parse_duration(self.timeout, what="--timeout")
        if self.at is not None:
            changed["not_before"] = parse_when(self.at, now)
        return changed

    def apply(self, job: Job, config: Config, now: datetime, user: str) -> Job:
        """``job`` with these changes. Raises InvalidInput: as ``parsed``, fewer retries than a queued retry
        has had, or a value out of a job's range."""
        changed = self.parsed(config, now, user)
        if changed.get("retries", job.attempt - 1) < job.attempt - 1:
            raise InvalidInput(f"job {shown(job.name, user)!r} is queued for its attempt {job.attempt}, a retry: "
                               f"--retries {changed['retries']} would leave it none",
                               f"give --retries {job.attempt - 1} or more (then it stops after this attempt), "
                               "or cancel it")
        try:
            return job._replace(**changed)
        except ValueError as err:
            raise InvalidInput(f"cannot change job {shown(job.name, user)!r}: {err}", "check its options") from None
