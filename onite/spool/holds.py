"""Holds: a queued job skipped until released, keeping its place (its file's ctime): an empty marker
hold/NAME@TOKEN in the sticky hold/, honoured only when it is the job's owner's or root's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from onite.core.errors import SpoolIOError
from onite.spool.files import create_marker
from onite.spool.paths import SpoolDir
from onite.spool.scan import token_names


def add_hold(spool: SpoolDir, name: str, owner: tuple[int, int] | None = None) -> Path:
    """Hold ``name`` with a new marker owned by ``owner`` (root gives it to the job's user, who may then release
    it). Raises SpoolError: no hold/ folder; SpoolIOError."""
    return create_marker(spool.hold_dir, name, "holding a job with", owner)


def remove_holds(spool: SpoolDir, name: str | Iterable[str], uids: Iterable[int] | None = None) -> int:
    """Remove the markers of ``name`` (or several names) owned by one of ``uids`` (None: all, for root); return
    how many went. Those this process may not remove are left. Raises SpoolIOError."""
    names = {name} if isinstance(name, str) else set(name)
    wanted = None if uids is None else set(uids)
    removed = 0
    for key, entry in token_names(spool.hold_dir):
        if key not in names:
            continue
        try:
            if wanted is not None and entry.stat(follow_symlinks=False).st_uid not in wanted:
                continue
            os.unlink(entry.path)
            removed += 1
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            continue  # a folder there is nobody's marker: it holds nothing, and stays
        except OSError as err:
            raise SpoolIOError(Path(entry.path), "releasing a job: removing", err) from None
    return removed
