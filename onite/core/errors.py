"""Errors onite reports to users: a one-line message and an exit code (docs/cli.md, EXIT STATUS)."""

from __future__ import annotations

import errno

from onite.core.safetext import quoted

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_FAILURE = 4


class OniteError(Exception):
    """Base class: ``what`` is wrong, ``hint`` says what to do about it."""

    exit_code = EXIT_FAILURE

    def __init__(self, what: str, hint: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.what} — {self.hint}" if self.hint else self.what


class NotFound(OniteError):
    """The named thing (a job, a spool, a template) does not exist."""

    exit_code = EXIT_NOT_FOUND


class NoTrace(NotFound):
    """No job of the name is queued, running or kept finished (retention may have pruned its result)."""


class InvalidInput(OniteError):
    """The user gave a bad name, priority, time, duration, option or file."""

    exit_code = EXIT_USAGE


def bad_value(option: str, value: object, expected: str) -> InvalidInput:
    """The one wording of a bad option value: ``--timeout '5x': expected a duration such as 90s``."""
    return InvalidInput(f"{option} {quoted(str(value))}: expected {expected}")


def not_yours(name: str, hint: str, kind: type[OniteError] = NotFound) -> OniteError:
    """The one wording of a bare name that is no job of the caller's but other users': ``no job 'x' of yours``,
    ``hint`` saying whose it is (spool.scan.namesake_hints)."""
    return kind(f"no job {name!r} of yours", hint)


class Refused(OniteError):
    """Policy says no: cutoff passed, a driver is running, duplicate name, not your job."""

    exit_code = EXIT_REFUSED


class SpoolError(OniteError):
    """The spool is missing, unreadable, or not laid out as onite expects."""


class ConfigError(OniteError):
    """onite.toml cannot be read or holds a bad value; ``key``: the top-level key at fault, if one is."""

    exit_code = EXIT_USAGE

    def __init__(self, what: str, hint: str = "", key: str | None = None) -> None:
        super().__init__(what, hint)
        self.key = key


class JobFormatError(OniteError):
    """A job file cannot be decoded (corrupt, or written by a newer onite)."""


class DamagedRecord(OniteError):
    """A record onite wrote (a result, a run record) cannot be read back: torn by a crash, or damaged."""


class SpoolIOError(OniteError):
    """An operating-system error while acting on a path in the spool."""

    def __init__(self, path: object, action: str, cause: OSError) -> None:
        reason = cause.strerror or str(cause)
        super().__init__(
            f"{action} {path}: {reason}",
            _IO_HINTS.get(cause.errno or 0, "check the spool's permissions and free space"),
        )
        self.cause = cause


_IO_HINTS = {
    errno.EPERM: "you lack the permission; ask the spool's administrator",
    errno.EACCES: "you lack the permission; ask the spool's administrator",
    errno.EFBIG: "the job is larger than your file-size limit (ulimit -f)",
    errno.ENOSPC: "the spool's file system is full; free some space and try again",
    errno.EROFS: "the spool's file system is read-only",
    errno.EDQUOT: "your disk quota is exceeded; free some space and try again",
}
