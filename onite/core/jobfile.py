"""The job file format (docs/spool-format.md). Users write job files and root reads them: for any bytes
``decode`` returns a valid Job or raises JobFormatError, and ``decode(encode(job)) == job``. Its environment is
bytes as one line of text each: ``unescape(escape(b)) == b``, and ``escape`` writes no control character.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from functools import lru_cache

from onite.core.errors import InvalidInput, JobFormatError
from onite.core.job import HEADER_KEYS, Attempt, Job
from onite.core.resources import format_mem, parse_cpus, parse_mem
from onite.core.timeparse import MAX_DURATION
from onite.core.values import loads_object, whole_text

FORMAT = 1
MAGIC = b"onite-job: "
WATCHED_HEAD = 64 << 10  # the daemon's watch (onite.spool.index) reads at: and pin: lines in this many bytes
_NAMED = {0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x1B: "\\e"}
_PLAIN = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")  # printable ASCII but the backslash
_UNESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_UNNAMED = {b"\\": b"\\", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"e": b"\x1b"}


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
    """The inverse of ``escape``. Raises JobFormatError: a backslash sequence ``escape`` never writes."""
    raw = text.encode("utf-8", "surrogateescape")  # a backslash is never part of a multi-byte character
    return _UNESCAPE.sub(_unescape_one, raw) if b"\\" in raw else raw


def _unescape_one(match: re.Match) -> bytes:
    code = match.group(1)
    if len(code) == 3 and code.startswith(b"x"):
        return bytes([int(code[1:], 16)])
    if code in _UNNAMED:
        return _UNNAMED[code]
    shown = match.string[match.start():match.start() + 5].decode("utf-8", "surrogateescape")[:2]  # "\\" and a character
    raise JobFormatError(f"bad escape '{shown}' in a job file header", "the job file is damaged; spool it again")


def env_problem(env: dict[bytes, bytes]) -> str:
    """Why ``env`` cannot be handed to execve ("" if it can)."""
    for name, value in env.items():
        if not name or b"=" in name or b"\0" in name:
            return f"environment variable name {escape(name)[:40]!r} is empty or holds '=' or a NUL byte"
        if b"\0" in value:
            return f"the value of environment variable {escape(name)[:40]!r} holds a NUL byte"
    return ""


@lru_cache(maxsize=1)
def _env_lines(env: tuple[tuple[bytes, bytes], ...]) -> str:
    """The ``env:`` lines of a job file: a batch's jobs share one environment, encoded once."""
    return "".join(f"env: {escape(name)}={escape(value)}\n" for name, value in env)


def encode(job: Job) -> bytes:
    lines = [
        f"onite-job: {FORMAT}",
        f"name: {job.name}",
        f"priority: {job.priority}",
        f"submitted: {job.submitted.isoformat()}",
        f"host: {escape(job.host.encode('utf-8', 'surrogateescape'))}",
        f"umask: {job.umask:04o}",
        f"cwd: {escape(job.cwd)}",
    ]
    for key, field, write, _ in _OPTIONAL:
        value = getattr(job, field)
        if key == "after":
            lines.extend(f"after: {dep}" for dep in value)
        elif value != Job._field_defaults[field]:
            lines.append(f"{key}: {write(value)}")
    if job.tried:
        import json  # only retried jobs carry attempts; keep json off the submit path

        lines.extend(f"tried: {json.dumps(t.to_json(), sort_keys=True)}" for t in job.tried)
    lines.extend(f"{key}: {escape(value.encode('utf-8', 'surrogateescape'))}" for key, value in job.extra)
    lines.append(_env_lines(tuple(job.env.items())))
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape") + job.body


def _seconds(delta: timedelta) -> str:
    """A duration in seconds, exactly (``7200``, ``0.25``), as ``float`` reads it back."""
    whole = delta.days * 86400 + delta.seconds
    return str(whole) if not delta.microseconds else f"{whole}.{delta.microseconds:06d}".rstrip("0")


_REQUIRED = ("name", "priority", "submitted", "host", "umask", "cwd")


def decode(data: bytes) -> Job:
    """Parse a job file. Raises JobFormatError: not one, a newer format, damaged, or a value out of its range."""
    if not data.startswith(MAGIC):
        raise JobFormatError("not an onite job file (no 'onite-job:' first line)", "spool it with onite submit")
    end = data.find(b"\n\n")
    if data.find(b"\0", 0, end if end >= 0 else len(data)) >= 0:  # none a submit writes; a sparse hole is NULs
        raise JobFormatError("damaged job file: a NUL byte in its header", "spool the job again")
    if end < 0:
        raise JobFormatError("damaged job file: the header has no end", "spool the job again")
    try:
        text = data[:end].decode("utf-8")
    except UnicodeDecodeError:
        raise JobFormatError("damaged job file: the header is not UTF-8", "spool the job again") from None
    _check_watched(data, end)
    try:
        return _decode_header(text, data[end + 2:])
    except (ValueError, TypeError, OverflowError, RecursionError, KeyError) as err:
        raise JobFormatError(f"damaged job file: {str(err)[:200]}", "spool the job again") from None


def waits_for_nothing(data: bytes) -> bool:
    """True only where ``decode(data)`` waits for no job (it has no ``after:`` line); False: decode it to know."""
    return b"\nafter: " not in data


def _check_watched(data: bytes, end: int) -> None:
    """Raises JobFormatError: the last ``at:`` or ``pin:`` line ends past WATCHED_HEAD, where the daemon's watch
    and the driver would disagree on when and where the job is due."""
    env = data.find(b"\nenv: ", 0, end)
    stop = end if env < 0 else env
    for key in (b"\nat: ", b"\npin: "):
        line = data.rfind(key, 0, stop)
        if line >= 0 and data.find(b"\n", line + 1) > WATCHED_HEAD:
            raise JobFormatError(f"damaged job file: its {key[1:-2].decode()}: line ends past the header's first "
                                 f"{WATCHED_HEAD >> 10} KiB", "spool the job again")


def _decode_header(text: str, body: bytes) -> Job:
    """Raises JobFormatError, or ValueError and the like for a value that does not parse or is out of range."""
    fields: dict[str, str] = {}
    after: list[str] = []
    tried: list[Attempt] = []
    extra: list[tuple[str, str]] = []
    head, sep, block = text.partition("\nenv: ")
    env = _env_block("env: " + block) if sep else {}
    for line in head.split("\n"):
        key, sep, value = line.partition(": ")
        if not sep:
            raise JobFormatError(f"damaged job file header line {line[:40]!r}", "spool the job again")
        if key == "after":
            after.append(value)
        elif key == "tried":
            tried.append(Attempt.from_json(loads_object(value)))
        elif key in HEADER_KEYS:
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
    return Job(
        name=fields["name"],
        priority=whole_text(fields["priority"], "priority"),
        submitted=datetime.fromisoformat(fields["submitted"]),
        host=unescape(fields["host"]).decode("utf-8", "replace"),
        umask=whole_text(fields["umask"], "umask", base=8),
        cwd=unescape(fields["cwd"]),
        env=dict(env),
        body=body,
        after=tuple(after),
        tried=tuple(tried),
        extra=tuple(extra),
        **{field: read(fields[key]) for key, field, _, read in _OPTIONAL if key in fields},
    )


_SECONDS = re.compile(r"[0-9]{1,30}(?:\.[0-9]{1,30})?")  # as _seconds writes them (float() takes 1e3, 1_0, any digit)


def _timeout(text: str) -> timedelta:
    seconds = float(text) if _SECONDS.fullmatch(text) else math.nan
    if not 0 < seconds <= MAX_DURATION.total_seconds():  # also inf, nan, 1e20
        raise ValueError(f"timeout {text[:40]!r} is not longer than 0 and at most {MAX_DURATION.days} days, "
                         "in seconds (7200, 0.25)")
    return timedelta(seconds=seconds)


def _stderr_separate(text: str) -> bool:
    if text not in ("separate", "merged"):
        raise ValueError(f"stderr: {text[:40]!r} (write separate or merged)")
    return text == "separate"


_REQUEST = {"mem": re.compile(r"[0-9]{1,16}[KMGT]?"), "cpus": re.compile(r"[0-9]{1,16}")}  # as encode writes them


def _request(parse, text: str, what: str) -> int:
    """The ``mem:`` or ``cpus:`` value as ``parse`` reads it, written as onite writes it (``parse`` also takes
    blanks and a lower-case unit, as typed on a command line); its InvalidInput a ValueError."""
    if _REQUEST[what].fullmatch(text) is None:
        raise ValueError(f"{what} {text[:40]!r} is not written as onite writes it (ASCII digits"
                         f"{', then K, M, G or T' if what == 'mem' else ''})")
    try:
        return parse(text, what=what)
    except InvalidInput as err:
        raise ValueError(err.what) from None


# Optional header lines in encode's order: key, Job field, writer, reader; written where not the default.
_OPTIONAL = (
    ("urgent", "urgent", lambda _: "yes", lambda text: text == "yes"),
    ("timeout", "timeout", _seconds, _timeout),
    ("retries", "retries", str, lambda text: whole_text(text, "retries")),
    ("after", "after", None, None),
    ("at", "not_before", datetime.isoformat, datetime.fromisoformat),
    ("pin", "pin", str, lambda text: text or None),
    ("recur", "recur", str, lambda text: text or None),
    ("stderr", "stderr_separate", lambda _: "separate", _stderr_separate),
    ("notify", "notify", str, lambda text: text or None),
    ("notify-on", "notify_on", str, lambda text: text or None),
    ("mem", "mem", format_mem, lambda text: _request(parse_mem, text, "mem")),
    ("cpus", "cpus", str, lambda text: _request(parse_cpus, text, "cpus")),
    ("attempt", "attempt", str, lambda text: whole_text(text, "attempt")),
)


@lru_cache(maxsize=1)
def _env_block(block: str) -> dict[bytes, bytes]:
    """The environment of ``block``, the header's last lines, each an ``env:`` line. A batch's jobs share one,
    decoded one after another: the last is kept (``decode`` copies it into each Job).
    Raises JobFormatError: a line that is no env line, a damaged one, or an environment execve cannot take."""
    env: dict[bytes, bytes] = {}
    for line in block.split("\n"):
        name, eq, val = line[5:].partition("=")
        if not line.startswith("env: ") or not eq:
            raise JobFormatError(f"damaged env line {line[:45]!r}: the env lines end the header", "spool the job again")
        env[unescape(name)] = unescape(val)
    problem = env_problem(env)
    if problem:
        raise JobFormatError(f"damaged job file: {problem}", "spool the job again")
    return env
