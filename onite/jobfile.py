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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from onite.config import NOTIFY_HOW, NOTIFY_ON
from onite.errors import JobFormatError

FORMAT = 1
MAGIC = b"onite-job: "


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
    def from_json(cls, data: dict) -> "Attempt":
        return cls(
            attempt=int(data["attempt"]),
            started=datetime.fromisoformat(data["started"]),
            finished=datetime.fromisoformat(data["finished"]),
            host=str(data.get("host", "")),
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            reason=str(data.get("reason", "")),
        )


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
        if self.priority < 1:
            raise ValueError(f"priority must be >= 1, not {self.priority}")
        if not 0 <= self.umask <= 0o777:
            raise ValueError(f"bad umask {self.umask:o}")
        if self.retries < 0 or self.attempt < 1:
            raise ValueError("retries must be >= 0 and attempt >= 1")
        if self.notify is not None and self.notify not in NOTIFY_HOW:
            raise ValueError(f"notify must be mail, command or none, not {self.notify!r}")
        if self.notify_on is not None and self.notify_on not in NOTIFY_ON:
            raise ValueError(f"notify-on must be failure or always, not {self.notify_on!r}")


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
        f"host: {escape(job.host.encode())}",
        f"umask: {job.umask:04o}",
        f"cwd: {escape(job.cwd)}",
    ]
    if job.urgent:
        lines.append("urgent: yes")
    if job.timeout is not None:
        lines.append(f"timeout: {job.timeout.total_seconds():g}")
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
    lines.extend(f"{key}: {escape(value.encode())}" for key, value in job.extra)
    lines.append(env_text(job.env) if env_lines is None else env_lines)
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape") + job.body


# ---- decode -----------------------------------------------------------------

_REQUIRED = ("name", "priority", "submitted", "host", "umask", "cwd")


def decode(data: bytes) -> Job:
    """Parse a job file.

    Raises:
        JobFormatError: not a job file, a newer format, or a damaged header.
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
    for line in text.split("\n"):
        key, sep, value = line.partition(": ")
        if not sep:
            raise JobFormatError(f"damaged job file header line {line[:40]!r}", "spool the job again")
        if key == "env":
            name, eq, val = value.partition("=")
            if not eq:
                raise JobFormatError(f"damaged env line {value[:40]!r}", "spool the job again")
            env[unescape(name)] = unescape(val)
        elif key == "after":
            after.append(value)
        elif key == "tried":
            import json

            tried.append(Attempt.from_json(json.loads(value)))
        elif key in _KNOWN:
            fields[key] = value
        else:
            extra.append((key, unescape(value).decode("utf-8", "replace")))
    version = fields.get("onite-job", "")
    if version != str(FORMAT):
        raise JobFormatError(
            f"job file format {version!r} is not one this onite reads ({FORMAT})",
            "upgrade onite, or spool the job again with this version",
        )
    missing = [k for k in _REQUIRED if k not in fields]
    if missing:
        raise JobFormatError(f"damaged job file: no {', '.join(missing)}", "spool the job again")
    try:
        return Job(
            name=fields["name"],
            priority=int(fields["priority"]),
            submitted=datetime.fromisoformat(fields["submitted"]),
            host=unescape(fields["host"]).decode("utf-8", "replace"),
            umask=int(fields["umask"], 8),
            cwd=unescape(fields["cwd"]),
            env=env,
            body=body,
            timeout=timedelta(seconds=float(fields["timeout"])) if "timeout" in fields else None,
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
    except (ValueError, KeyError, TypeError) as err:
        raise JobFormatError(f"damaged job file: {err}", "spool the job again") from None


def _stderr_separate(value: str) -> bool:
    """The ``stderr:`` header value: "separate" or "merged" (the default when the key is absent)."""
    if value not in ("separate", "merged"):
        raise ValueError(f"stderr: {value!r} (write separate or merged)")
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
    _ENV_BLOCK[:] = [block, env]
    return dict(env)


_KNOWN = frozenset(
    ("onite-job", "name", "priority", "submitted", "host", "umask", "cwd", "urgent",
     "timeout", "retries", "at", "pin", "recur", "attempt",
     "stderr", "notify", "notify-on")
)
