"""Recurring jobs on disk: the templates in SPOOL/recur/, and SPOOL/recur.state (what was spooled).

Templates live in the sticky, world-writable folder recur/, each created
mode 0600 by its owner with the all-or-nothing, never-replace write of a job
(onite.spool.files); the file's owner uid is the template's owner. What was
last spooled of each is kept in recur.state, written by the driver (root on
a system spool, in a folder only root may write), so users cannot forge it;
drivers of several hosts change it one at a time (``state_lock``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from onite.core.errors import SpoolError, SpoolIOError
from onite.core.names import SIDE, is_valid_name
from onite.spool import locks
from onite.spool.files import replace_file
from onite.spool.paths import SpoolDir

STATE_FORMAT = 1
RECUR_LOCK_WAIT = 10.0  # seconds a driver waits for recur.lock (held by another host's driver for a moment)


def template_files(spool: SpoolDir) -> Iterator[tuple[str, Path, os.stat_result]]:
    """The templates in recur/, by name, each with its lstat (dot-names and side files left out).

    Raises:
        SpoolIOError: recur/ cannot be listed.
    """
    try:
        it = os.scandir(spool.recur_dir)
    except FileNotFoundError:
        return
    except OSError as err:
        raise SpoolIOError(spool.recur_dir, "listing", err) from None
    with it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.name[0] == "." or SIDE in entry.name or not is_valid_name(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        yield entry.name, Path(entry.path), st


def load_state(spool: SpoolDir) -> dict[str, dict]:
    """NAME → {uid, template, last, rule, fields, priority, urgent}; empty if missing or damaged, and
    an entry that is not an object, or not a template's name, left out. The values of an entry are
    checked where they are used (``parse_time``, ``rule_from_state``, ``known_priority``).

    Raises: nothing.
    """
    from onite.core.values import loads_object

    try:
        data = loads_object(spool.recur_state_path().read_bytes())
    except (OSError, ValueError):
        return {}
    if data.get("version") != STATE_FORMAT or not isinstance(data.get("templates"), dict):
        return {}
    return {k: v for k, v in data["templates"].items() if isinstance(v, dict) and is_valid_name(k)}


def save_state(spool: SpoolDir, state: dict[str, dict]) -> None:
    """Raises:
        SpoolIOError: it cannot be written.
    """
    data = {"version": STATE_FORMAT, "templates": dict(sorted(state.items()))}
    replace_file(spool.recur_state_path(), (json.dumps(data, indent=1) + "\n").encode(), mode=0o644)


@contextmanager
def state_lock(spool: SpoolDir):
    """Drivers of several hosts may share a spool: one read-modify-write of recur.state at a time.

    The lock is ``locks/recur.lock``, which only the spool's owner may open (onite.spool.locks), and the
    wait for it is bounded.

    Raises:
        SpoolError: another driver held it for RECUR_LOCK_WAIT seconds. Refused, SpoolIOError: as onite.spool.locks.take.
    """
    locks.ensure_dir(spool.root)
    held = locks.take(spool.recur_lock_path(), timeout=RECUR_LOCK_WAIT)
    if held is None:
        raise SpoolError(f"another driver held {spool.recur_lock_path()} for {RECUR_LOCK_WAIT:.0f} s",
                         "recurring jobs are spooled at the next chance")
    with held:
        yield


def parse_time(text: object) -> datetime | None:
    """A time recur.state holds (timeparse.parse_stamp: aware and in bounds), else None.

    Raises: nothing.
    """
    from onite.core.timeparse import parse_stamp

    return parse_stamp(text)


def run_name_owner(spool: SpoolDir, name: str) -> tuple[str, int, int] | None:
    """If ``name`` is that of a run of a recurring job (``TEMPLATE-YYYYMMDDTHHMM``) whose template is
    in recur/ and usable (a regular file with one link that holds a rule), and its time one the rule
    fires at: the template's name, its owner and its ctime; else None. Such names are known in
    advance, and are the template owner's."""
    import stat

    from onite.core.errors import OniteError
    from onite.core.recurring import MAX_TEMPLATE_NAME, is_run_of, rule_of, template_of
    from onite.spool.filecheck import BadFile, read_job_file

    template = template_of(name)
    if template is None or not is_valid_name(template) or len(template) > MAX_TEMPLATE_NAME:
        return None  # a name recur add refuses is no template (the driver refuses such a file)
    path = spool.recur_dir / template
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return None
        job, fst = read_job_file(path, spool.config.max_job_size, one_link=True)
        rule = rule_of(job)
        if (fst.st_ino, fst.st_uid) != (st.st_ino, st.st_uid) or rule is None or not is_run_of(rule, template, name):
            return None  # not a usable template, or not a time it fires: a name of that shape is anyone's
    except (OSError, BadFile, OniteError, ValueError):
        return None
    return template, st.st_uid, st.st_ctime_ns
