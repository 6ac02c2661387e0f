"""Recurring jobs on disk: the templates in the sticky recur/ folder, written like jobs (the file's owner is
the template's), and recur.state, what was spooled: root's, changed by one host's driver at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from onite.core.errors import OniteError, SpoolError, SpoolIOError
from onite.core.names import is_valid_key, split_key
from onite.core.recurring import check_template_name, template_of
from onite.core.values import loads_object
from onite.spool import locks
from onite.spool.accounts import user_name
from onite.spool.filecheck import file_problem
from onite.spool.files import replace_file
from onite.spool.paths import SpoolDir
from onite.spool.scan import key_stats, key_uid, listing

STATE_FORMAT = 1
RECUR_LOCK_WAIT = 10.0  # seconds a driver waits for recur.lock (held by another host's driver for a moment)


def template_problem(name: str, st: os.stat_result, max_size: int, resolve_uid: Callable[[int], object], *,
                     may_settle: bool = False):
    """Why the driver and ``recur list`` refuse the template ``name`` as ``st`` finds it (its file, its name,
    whose it is), SETTLING (look again soon), or "". ``resolve_uid``: as filecheck.file_problem."""
    problem = file_problem(st, max_size=max_size, resolve_uid=resolve_uid, may_settle=may_settle)
    if not problem:
        try:  # recur add's limit: a longer name (put in recur/ by hand) leaves its runs no valid name
            check_template_name(split_key(name)[1])
        except OniteError as err:
            problem = str(err)
    if not problem and key_uid(name) != st.st_uid:
        problem = f"a forgery: named as {split_key(name)[0]}'s recurring job, but {user_name(st.st_uid)}'s file"
    return problem


def is_template(spool: SpoolDir, key: str) -> bool:
    """Is there a recurring job ``key`` (USER:NAME) of its user's own? A forgery in the sticky recur/ is not."""
    try:
        return os.lstat(spool.recur_dir / key).st_uid == key_uid(key)
    except (OSError, ValueError):
        return False


def template_files(spool: SpoolDir) -> Iterator[tuple[str, Path, os.stat_result]]:
    """The templates in recur/, by key, each with its lstat. Raises SpoolIOError."""
    for entry, st in sorted(key_stats(spool.recur_dir), key=lambda found: found[0].name):
        yield entry.name, Path(entry.path), st


def runs_in_flight(spool: SpoolDir, owners: dict[str, int]) -> dict[str, list[str]]:
    """By template of ``owners`` (its name: its owner's uid), the names of its runs queued or running: files
    named as its runs, its owner's and their key's user's (a forgery holds nothing back). A folder that cannot
    be listed is passed over."""
    runs: dict[str, list[str]] = {}
    if not owners:  # no listing for no template: a queue may hold 100,000 jobs
        return runs
    for folder in [folder for _, folder in spool.queue_folders()] + [spool.running_dir(h) for h in spool.hosts()]:
        try:
            for entry in listing(folder):
                of = template_of(entry.name)
                with suppress(FileNotFoundError):
                    if of in owners and entry.stat(follow_symlinks=False).st_uid == owners[of] == key_uid(entry.name):
                        runs.setdefault(of, []).append(entry.name)
        except (SpoolIOError, OSError):
            continue
    return runs


def used_templates(spool: SpoolDir) -> tuple[list[tuple[str, Path, os.stat_result]], dict[int, int]]:
    """The templates used: each file owner's first ``max_templates`` by name, root's all; and by uid, how many of
    each user's are set aside unread beyond them (one user's thousands must not slow anyone else's drain)."""
    cap = spool.config.max_templates
    used, counts = [], {}
    # files of one link first: anyone may link a file its owner left writable by all, and the link keeps
    # that owner (a template of several links is never used, so it sets none of the owner's aside)
    for found in sorted(template_files(spool), key=lambda found: found[2].st_nlink != 1):
        uid = found[2].st_uid
        counts[uid] = counts.get(uid, 0) + 1
        if not uid or counts[uid] <= cap:
            used.append(found)
    used.sort(key=lambda found: found[0])
    return used, {uid: count - cap for uid, count in counts.items() if uid and count > cap}


def set_aside_text(spool: SpoolDir, uid: int, count: int) -> str:
    """What the driver's log and ``recur list`` say of ``count`` templates of ``uid`` set aside."""
    cap = spool.config.max_templates
    return (f"{count} of {user_name(uid)}'s recurring jobs are not used: each user's first {cap} by name are "
            f"(max_templates = {cap}); remove some (onite recur remove NAME), or ask the admin to raise max_templates")


def load_state(spool: SpoolDir) -> dict[str, dict]:
    """KEY → {uid, template, last, rule, fields, priority, urgent}; empty if missing or damaged; never raises.
    An entry's values are checked where they are used (``parse_stamp``, ``from_state``, …)."""
    try:
        data = loads_object(spool.recur_state_path.read_bytes())
    except (OSError, ValueError):
        return {}
    if data.get("version") != STATE_FORMAT or not isinstance(data.get("templates"), dict):
        return {}
    return {k: v for k, v in data["templates"].items() if isinstance(v, dict) and is_valid_key(k)}


def save_state(spool: SpoolDir, state: dict[str, dict]) -> None:
    """Raises SpoolIOError."""
    data = {"version": STATE_FORMAT, "templates": dict(sorted(state.items()))}
    replace_file(spool.recur_state_path, (json.dumps(data, indent=1) + "\n").encode(), mode=0o644)


@contextmanager
def state_lock(spool: SpoolDir):
    """One read-modify-write of recur.state at a time among the drivers of several hosts.
    Raises SpoolError: another driver held it for RECUR_LOCK_WAIT seconds; as locks.take."""
    held = locks.take(spool.recur_lock_path, timeout=RECUR_LOCK_WAIT)
    if held is None:
        raise SpoolError(f"another driver held {spool.recur_lock_path} for {RECUR_LOCK_WAIT:.0f} s",
                         "recurring jobs are spooled at the next chance")
    with held:
        yield
