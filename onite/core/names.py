"""Job and host names, keys and run ids. A job's key ``USER:NAME`` is its file name in every spool folder (side
files are ``KEY@KIND``); a command's ``NAME`` means the caller's job, ``USER:NAME`` any user's (``resolve``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from onite.core.errors import InvalidInput
from onite.core.safetext import printable, quoted

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_NAME = 100
SIDE = "@"  # separates a job name from the kind of a spool side file
KEY_SEP = ":"  # separates a key's user from its name
# a user name as useradd and POSIX allow it: portable characters, not led by "-" or "." (a digit may lead)
USER_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")
KEY_PATTERN = re.compile(rf"(?:{USER_PATTERN.pattern}){KEY_SEP}(?:{NAME_PATTERN.pattern})")
SUFFIX_LEN = 7  # "-" and six characters


def job_key(user: str, name: str) -> str:
    return f"{user}{KEY_SEP}{name}"


def split_key(key: str) -> tuple[str, str]:
    """A key as (user, name); ("", key) for a string with no user."""
    user, _, name = key.rpartition(KEY_SEP)
    return user, name


def is_valid_key(key: str) -> bool:
    return KEY_PATTERN.fullmatch(key) is not None


def shown(key: str, reader: str | None) -> str:
    """How ``key`` is shown to user ``reader``: NAME for their own job, USER:NAME for another's."""
    user, name = split_key(key)
    return name if user == reader else key


def resolve(text: str, caller: str, *, what: str = "job name") -> str:
    """A command's job argument as a key. Raises InvalidInput: not a name or ``USER:NAME``."""
    user, sep, name = text.rpartition(KEY_SEP)
    check_name(name, what=what)
    if not sep:
        return job_key(caller, name)
    if USER_PATTERN.fullmatch(user) is None:
        raise InvalidInput(f"invalid user name '{printable(user[:40])}' in '{printable(text[:80])}'",
                           "write NAME for a job of yours, USER:NAME for another user's")
    return text


def job_label(name: str) -> str:
    """``onite:NAME``: its Slurm job name and its script's memfd name."""
    return f"onite:{name}"


def make_run_id(started, host: str, driver_pid: int, seq: int) -> str:
    """A run's id, unique across hosts and drivers: ``TIMESTAMP-HOST-DRIVERPID-SEQ``."""
    return f"{started:%Y%m%dT%H%M%S}-{host}-{driver_pid}-{seq}"


def run_id_host(run_id: str) -> str | None:
    """The host in a ``make_run_id`` id (a host name may hold "-"), or None if it is not one."""
    parts = run_id.split("-")
    return "-".join(parts[1:-2]) if len(parts) >= 4 else None


def is_valid_name(name: str) -> bool:
    return NAME_PATTERN.fullmatch(name) is not None


def check_name(name: str, *, what: str = "job name") -> str:
    """``name``, if it is a valid job (or host) name. Raises InvalidInput: why it is not."""
    if is_valid_name(name):
        return name
    if not name:
        why = "it is empty"
    elif len(name) > MAX_NAME:
        why = f"it is {len(name)} characters long (at most {MAX_NAME})"
    elif not name[0].isascii() or not name[0].isalnum():
        why = "it must start with an ASCII letter or a digit"
    else:
        why = "it may hold only ASCII letters, digits, '.', '_' and '-'"
    example = "node1 or build-02" if what == "host name" else "nightly-report or backup.2026-11-22"
    raise InvalidInput(f"invalid {what} {quoted(name)}: {why}", f"use e.g. {example}")


def check_base(base: str) -> str:
    """A prefix for unique names, cut to leave room for the suffix. Raises InvalidInput: not a valid name."""
    return check_name(base[: MAX_NAME - SUFFIX_LEN], what="name base")


def unique_name(base: str, taken: Callable[[str], bool]) -> str:
    """``base`` plus a random suffix (``base-k3x9qa``) not ``taken``. Raises InvalidInput: a bad base, or none free."""
    stem = check_base(base)
    alphabet = "abcdefghijkmnpqrstuvwxyz23456789"  # 32 letters, no look-alikes (l/1, o/0)
    for _ in range(100):
        candidate = f"{stem}-" + "".join(alphabet[byte % 32] for byte in os.urandom(6))
        if not taken(candidate):
            return candidate
    raise InvalidInput(f"no unused name found for {base!r}", "pick another base name")
