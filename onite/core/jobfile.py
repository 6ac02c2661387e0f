"""The job file format, version 1: encode and decode, pure (docs/spool-format.md).

A job file is readable with ``cat``: a header of ``key: value`` lines, a blank
line, then the job text, byte for byte::

    onite-job: 1
    name: nightly-report
    priority: 3
    submitted: 2026-11-22T14:03:11.512345+01:00
    host: vm
    umask: 0022
    cwd: /home/alice/reports
    timeout: 7200
    after: backup
    stderr: separate
    env: HOME=/home/alice
    env: PS1=\\e[1m\\u \\$ \\n> 

    #!/bin/sh
    ...

Header values are UTF-8 text in which a backslash escapes ``\\\\``, ``\\n``,
``\\r``, ``\\t``, ``\\e`` and ``\\xHH`` (any other control byte, and every byte
that is not valid UTF-8), so any environment -- multi-line values, quotes,
``$``, non-UTF-8 bytes, names such as ``BASH_FUNC_f%%`` -- round-trips exactly
and needs no shell quoting: the driver hands it to execve() as it is.

What the file says is the submitter's word: it never decides who owns the job
(the file's owner uid does), where it stands in the queue (its folder and the
kernel's ctime do), or whether it is held (its mode does).

A user can write anything into their own job file, and root reads it: for
any bytes, ``decode`` returns a Job or raises JobFormatError, nothing else.
A Job is valid by construction (``Job.__post_init__`` checks every range:
docs/spool-format.md lists them), the environment is checked wherever one
enters a Job (``env_problem``: decode, and submit's build_job), and ``encode``
writes every valid Job so that ``decode`` gives it back unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from onite.core.config import MAX_PRIORITIES, NOTIFY_HOW, NOTIFY_ON
from onite.core.errors import JobFormatError
from onite.core.names import is_valid_name
from onite.core.timeparse import MAX_DURATION, is_valid_time

FORMAT = 1
MAGIC = b"onite-job: "
MAX_RETRIES = 100  # a job is tried at most MAX_RETRIES + 1 times
# Linux reads a script's "#!" line into a buffer of 256 bytes (BINPRM_BUF_SIZE): onite, which
# starts the interpreter itself, holds a "#!" line to the same limit, as bytes after the "#!"
MAX_SHEBANG = 255


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One finished try of a job that is retried (kept in the job file between tries)."""

    attempt: int
    started: datetime
    finished: datetime
    host: str
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""

    def to_json(self) -> dict:
        return {
            "attempt": self.attempt,
            "started": self.started.isoformat(),
            "finished": self.finished.isoformat(),
            "host": self.host,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: object) -> "Attempt":
        """The attempt ``to_json`` wrote, every field checked (onite.core.values).

        Raises:
            ValueError: not an object, or a field of the wrong type or out of range.
        """
        from onite.core import values as v

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


MAX_STATUS = 2**31 - 1  # an exit code, as waitpid or Slurm reports it, fits in 32 bits
MAX_SIGNAL = 255


@dataclass(frozen=True, kw_only=True)
class Job:
    """Everything a job file holds. ``env`` maps bytes to bytes, in the submitter's order."""

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
    extra: tuple[tuple[str, str], ...] = field(default=())

    @property
    def stderr_mode(self) -> str:
        """Where its stderr goes, as result records say it: "separate" (stdout/NAME@stderr) or "merged"."""
        return "separate" if self.stderr_separate else "merged"

    def __post_init__(self) -> None:
        """Raises:
            ValueError: a field out of its range (docs/spool-format.md), saying which.
        """
        problem = _job_problem(self)
        if problem:
            raise ValueError(problem)


def _job_problem(job: Job) -> str:
    """What is wrong with the fields of ``job`` ("" if nothing): every range of docs/spool-format.md
    but the environment's (``env_problem``, checked where an environment enters a Job)."""
    if not is_valid_name(job.name):
        return f"name {job.name[:40]!r} is not a valid job name"
    if not _whole(job.priority, 1, MAX_PRIORITIES):
        return f"priority {job.priority!r} is not 1 to {MAX_PRIORITIES}"
    if not is_valid_time(job.submitted):
        return f"submitted: {job.submitted!r} is not a time with its UTC offset, in the years 1900 to 9998"
    if not _whole(job.umask, 0, 0o777):
        return f"umask {job.umask!r} is not 0000 to 0777"
    if not isinstance(job.cwd, bytes) or not job.cwd.startswith(b"/") or b"\0" in job.cwd:
        return "cwd is not an absolute path without NUL bytes"
    if job.timeout is not None and not timedelta(0) < job.timeout <= MAX_DURATION:
        return f"timeout {job.timeout.total_seconds():g}s is not longer than 0 and at most {MAX_DURATION.days} days"
    if not _whole(job.retries, 0, MAX_RETRIES):
        return f"retries {job.retries!r} is not 0 to {MAX_RETRIES}"
    if not _whole(job.attempt, 1, job.retries + 1):
        return f"attempt {job.attempt!r} is not 1 to retries + 1 ({job.retries + 1})"
    if len(job.tried) > MAX_RETRIES + 1:
        return f"more than {MAX_RETRIES + 1} attempts tried"
    for dep in job.after:
        if not is_valid_name(dep):
            return f"after: {dep[:40]!r} is not a valid job name"
    if job.not_before is not None and not is_valid_time(job.not_before):
        return f"at: {job.not_before!r} is not a time with its UTC offset, in the years 1900 to 9998"
    if job.pin is not None and not is_valid_name(job.pin):
        return f"pin: {job.pin[:40]!r} is not a valid host name"
    if job.recur is not None and not is_valid_name(job.recur):
        return f"recur: {job.recur[:40]!r} is not a valid job name"
    if job.notify is not None and job.notify not in NOTIFY_HOW:
        return f"notify must be mail, command or none, not {job.notify!r}"
    if job.notify_on is not None and job.notify_on not in NOTIFY_ON:
        return f"notify-on must be failure or always, not {job.notify_on!r}"
    for key, _ in job.extra:
        if "\n" in key or ": " in key or key in _KNOWN or key in _REPEATED:
            return f"extra header key {key[:40]!r} cannot be written back"
    return shebang_problem(job.body)


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def shebang_problem(body: bytes) -> str:
    """Why the ``#!`` line that starts ``body`` can never be run ("" if it can, or there is none):
    it holds a NUL byte (no path or argument can), or is longer than MAX_SHEBANG bytes.
    The one check that submit and decode both make."""
    if not body.startswith(b"#!"):
        return ""
    end = body.find(b"\n")
    line = body[2:] if end < 0 else body[2:end]
    if b"\0" in line:
        return "its #! line holds a NUL byte, which no interpreter path or argument can hold"
    if len(line) > MAX_SHEBANG:
        return f"its #! line is {len(line)} bytes long, more than the {MAX_SHEBANG} bytes an interpreter line may have"
    return ""


def env_problem(env: dict[bytes, bytes]) -> str:
    """Why ``env`` cannot be handed to execve ("" if it can): a name that is empty or holds ``=``
    or a NUL byte, or a value that holds a NUL byte."""
    for name, value in env.items():
        if not name or b"=" in name or b"\0" in name:
            return f"environment variable name {escape(name)[:40]!r} is empty or holds '=' or a NUL byte"
        if b"\0" in value:
            return f"the value of environment variable {escape(name)[:40]!r} holds a NUL byte"
    return ""


# ---- escaping ---------------------------------------------------------------

_NAMED = {0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x1B: "\\e"}
_PLAIN = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")  # printable ASCII but the backslash
_UNESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_UNNAMED = {"\\": 0x5C, "n": 0x0A, "r": 0x0D, "t": 0x09, "e": 0x1B}


def escape(raw: bytes) -> str:
    """Bytes → one line of UTF-8 text that ``unescape`` turns back into the same bytes."""
    if _PLAIN.fullmatch(raw):
        return raw.decode("ascii")
    return "".join(map(_escape_char, raw.decode("utf-8", "surrogateescape")))


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code in _NAMED:
        return _NAMED[code]
    if code < 0x20 or code == 0x7F:
        return "\\x%02x" % code
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, smuggled by surrogateescape
        return "\\x%02x" % (code - 0xDC00)
    if 0x80 <= code < 0xA0:  # C1 controls: a terminal would act on them, so spell their bytes
        return "".join("\\x%02x" % b for b in ch.encode())
    return ch


def unescape(text: str) -> bytes:
    """The inverse of ``escape``.

    Raises:
        JobFormatError: a backslash sequence that ``escape`` never writes.
    """
    if "\\" not in text:
        return text.encode("utf-8", "surrogateescape")
    parts: list[bytes] = []
    pos = 0
    for match in _UNESCAPE.finditer(text):
        parts.append(text[pos:match.start()].encode("utf-8", "surrogateescape"))
        code = match.group(1)
        if code[0] == "x" and len(code) == 3:
            parts.append(bytes([int(code[1:], 16)]))
        elif code in _UNNAMED:
            parts.append(bytes([_UNNAMED[code]]))
        else:
            raise JobFormatError(f"bad escape '\\{code}' in a job file header", "the job file is damaged; spool it again")
        pos = match.end()
    parts.append(text[pos:].encode("utf-8", "surrogateescape"))
    return b"".join(parts)


# ---- encode -----------------------------------------------------------------


def env_text(env: dict[bytes, bytes]) -> str:
    """The ``env:`` lines of a job file (a batch of jobs with one environment encodes it once)."""
    return "".join(f"env: {escape(name)}={escape(value)}\n" for name, value in env.items())


def encode(job: Job, *, env_lines: str | None = None) -> bytes:
    """The job file's bytes. ``env_lines``: ``env_text(job.env)``, if the caller has it already."""
    lines = [
        f"onite-job: {FORMAT}",
        f"name: {job.name}",
        f"priority: {job.priority}",
        f"submitted: {job.submitted.isoformat()}",
        f"host: {escape(job.host.encode('utf-8', 'surrogateescape'))}",
        f"umask: {job.umask:04o}",
        f"cwd: {escape(job.cwd)}",
    ]
    if job.urgent:
        lines.append("urgent: yes")
    if job.timeout is not None:
        lines.append(f"timeout: {_seconds(job.timeout)}")
    if job.retries:
        lines.append(f"retries: {job.retries}")
    lines.extend(f"after: {dep}" for dep in job.after)
    if job.not_before is not None:
        lines.append(f"at: {job.not_before.isoformat()}")
    if job.pin:
        lines.append(f"pin: {job.pin}")
    if job.recur:
        lines.append(f"recur: {job.recur}")
    if job.stderr_separate:
        lines.append("stderr: separate")
    if job.notify:
        lines.append(f"notify: {job.notify}")
    if job.notify_on:
        lines.append(f"notify-on: {job.notify_on}")
    if job.attempt != 1:
        lines.append(f"attempt: {job.attempt}")
    if job.tried:
        import json  # only retried jobs carry attempts; keep json off the submit path

        lines.extend(f"tried: {json.dumps(t.to_json(), sort_keys=True)}" for t in job.tried)
    lines.extend(f"{key}: {escape(value.encode('utf-8', 'surrogateescape'))}" for key, value in job.extra)
    lines.append(env_text(job.env) if env_lines is None else env_lines)
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape") + job.body


def _seconds(delta: timedelta) -> str:
    """A duration in seconds, exactly (``7200``, ``0.25``): what ``float`` reads back to the same microsecond."""
    whole = delta.days * 86400 + delta.seconds
    return str(whole) if not delta.microseconds else f"{whole}.{delta.microseconds:06d}".rstrip("0")


# ---- decode -----------------------------------------------------------------

_REQUIRED = ("name", "priority", "submitted", "host", "umask", "cwd")


def decode(data: bytes) -> Job:
    """Parse a job file. Total: whatever ``data`` holds, a Job or JobFormatError.

    Raises:
        JobFormatError: not a job file, a newer format, a damaged header, a value out of its
            range (docs/spool-format.md), or a ``#!`` line that can never run.
    """
    if not data.startswith(MAGIC):
        raise JobFormatError("not an onite job file (no 'onite-job:' first line)", "spool it with onite submit")
    end = data.find(b"\n\n")
    if end < 0:
        raise JobFormatError("damaged job file: the header has no end", "spool the job again")
    header, body = data[:end], data[end + 2:]
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError:
        raise JobFormatError("damaged job file: the header is not UTF-8", "spool the job again") from None
    try:
        return _decode_header(text, body)
    except (ValueError, TypeError, OverflowError, RecursionError, KeyError) as err:
        # the one error of a damaged file, whatever the damage: the driver refuses it and goes on
        raise JobFormatError(f"damaged job file: {str(err)[:200]}", "spool the job again") from None


def _decode_header(text: str, body: bytes) -> Job:
    """The Job of a header (``text``, UTF-8 decoded) and its ``body``.

    Raises:
        JobFormatError: as decode. ValueError (and the like, which decode turns into JobFormatError):
            a value that does not parse, or a Job field out of range.
    """
    fields: dict[str, str] = {}
    env: dict[bytes, bytes] = {}
    after: list[str] = []
    tried: list[Attempt] = []
    extra: list[tuple[str, str]] = []
    start = text.find("\nenv: ")
    if start >= 0:  # the env lines close the header (encode writes them last): parse them once per batch
        block = _env_block(text[start + 1:])
        if block is not None:
            env, text = block, text[:start]
    loose_env = False  # env lines among the others: checked below (a block is checked when first read)
    for line in text.split("\n"):
        key, sep, value = line.partition(": ")
        if not sep:
            raise JobFormatError(f"damaged job file header line {line[:40]!r}", "spool the job again")
        if key == "env":
            name, eq, val = value.partition("=")
            if not eq:
                raise JobFormatError(f"damaged env line {value[:40]!r}", "spool the job again")
            env[unescape(name)] = unescape(val)
            loose_env = True
        elif key == "after":
            after.append(value)
        elif key == "tried":
            from onite.core.values import loads_object

            tried.append(Attempt.from_json(loads_object(value)))
        elif key in _KNOWN:
            fields[key] = value
        else:
            extra.append((key, unescape(value).decode("utf-8", "replace")))
    version = fields.get("onite-job", "")
    if version != str(FORMAT):
        raise JobFormatError(
            f"job file format {version[:20]!r} is not one this onite reads ({FORMAT})",
            "upgrade onite, or spool the job again with this version",
        )
    missing = [k for k in _REQUIRED if k not in fields]
    if missing:
        raise JobFormatError(f"damaged job file: no {', '.join(missing)}", "spool the job again")
    if loose_env:
        _check_env(env)
    return Job(
        name=fields["name"],
        priority=int(fields["priority"]),
        submitted=datetime.fromisoformat(fields["submitted"]),
        host=unescape(fields["host"]).decode("utf-8", "replace"),
        umask=int(fields["umask"], 8),
        cwd=unescape(fields["cwd"]),
        env=env,
        body=body,
        timeout=_timeout(fields["timeout"]) if "timeout" in fields else None,
        retries=int(fields.get("retries", "0")),
        after=tuple(after),
        not_before=datetime.fromisoformat(fields["at"]) if "at" in fields else None,
        urgent=fields.get("urgent") == "yes",
        pin=fields.get("pin") or None,
        attempt=int(fields.get("attempt", "1")),
        tried=tuple(tried),
        recur=fields.get("recur") or None,
        stderr_separate=_stderr_separate(fields.get("stderr", "merged")),
        notify=fields.get("notify") or None,
        notify_on=fields.get("notify-on") or None,
        extra=tuple(extra),
    )


def _timeout(text: str) -> timedelta:
    """The ``timeout:`` header value, in seconds: longer than 0 and at most MAX_DURATION.

    Raises:
        ValueError: not a number, or out of that range (``inf``, ``nan``, ``1e20`` included).
    """
    seconds = float(text)
    if not 0 < seconds <= MAX_DURATION.total_seconds():
        raise ValueError(f"timeout {text[:40]!r} is not longer than 0 and at most {MAX_DURATION.days} days")
    return timedelta(seconds=seconds)


def _check_env(env: dict[bytes, bytes]) -> None:
    """Raises:
        JobFormatError: an environment execve cannot take (``env_problem``).
    """
    problem = env_problem(env)
    if problem:
        raise JobFormatError(f"damaged job file: {problem}", "spool the job again")


def _stderr_separate(value: str) -> bool:
    """The ``stderr:`` header value: "separate" or "merged" (the default when the key is absent).

    Raises:
        ValueError: any other value.
    """
    if value not in ("separate", "merged"):
        raise ValueError(f"stderr: {value[:40]!r} (write separate or merged)")
    return value == "separate"


_ENV_BLOCK: list = [None, None]  # the last env block decoded, and its environment


def _env_block(block: str) -> dict[bytes, bytes] | None:
    """The environment the ``env:`` lines ``block`` hold (a copy), or None if other lines are among them.

    The jobs of a batch share their environment, and a driver decodes them
    one after another: the last block's environment is kept.
    """
    if block == _ENV_BLOCK[0]:
        return dict(_ENV_BLOCK[1])
    env: dict[bytes, bytes] = {}
    for line in block.split("\n"):
        if not line.startswith("env: "):
            return None
        name, eq, val = line[5:].partition("=")
        if not eq:
            raise JobFormatError(f"damaged env line {line[5:45]!r}", "spool the job again")
        env[unescape(name)] = unescape(val)
    _check_env(env)
    _ENV_BLOCK[:] = [block, env]
    return dict(env)


_KNOWN = frozenset(
    ("onite-job", "name", "priority", "submitted", "host", "umask", "cwd", "urgent",
     "timeout", "retries", "at", "pin", "recur", "attempt",
     "stderr", "notify", "notify-on")
)
_REPEATED = frozenset(("env", "after", "tried"))  # keys that may occur more than once
