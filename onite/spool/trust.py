"""May the driver trust this spool? Owners and modes, checked before anything in it is acted on.

A root driver runs what onite.toml says (``shell``, ``notify_command``), the
jobs in the queue folders and the recurring templates, and it writes results
where the spool's folders say. So, as sshd's StrictModes and at(1)'s spool
checks do, onite refuses a spool that someone other than its owner could
have changed: the spool folder and every folder above it (up to /), each of
its own folders, onite.toml and onite.log must be owned by the spool's owner
(root for a system spool, the user for a personal one; root may own folders
above a personal spool) and writable by nobody else. The only exceptions are
the folders users are meant to add files to (``jobs/*``, ``cancel/``,
``recur/``): world-writable, but with the sticky bit, so that only a file's
owner may rename or remove it; and folders above the spool that are
world-writable with the sticky bit (``/tmp``), where only the owner of a
folder may rename it.

``problems`` is pure apart from lstat(2); ``check`` raises the first problem
as one line that says what to fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from onite.core.errors import Refused
from onite.spool.paths import SpoolDir


def problems(root: Path, owner: int) -> list[str]:
    """What makes the spool at ``root`` untrustworthy for a driver running as ``owner``, first first."""
    found: list[str] = []
    real = Path(os.path.realpath(root))
    spool = SpoolDir(real)
    for folder in reversed(real.parents):
        found.extend(_above(folder, owner))
    found.extend(_own(real, owner, folder=True, name=str(root)))
    for path in (spool.jobs_dir, spool.running_root, spool.done_dir, spool.stdout_dir, spool.refused_dir,
                 *_children(spool.running_root)):
        found.extend(_own(path, owner, folder=True))
    # world-writable on a system spool, and sticky
    for path in [*_children(spool.jobs_dir), spool.cancel_dir, spool.recur_dir, spool.hold_dir]:
        found.extend(_shared(path, owner))
    for path in (spool.config_path, spool.log_path):
        found.extend(_own(path, owner, folder=False))
    return found


def _children(folder: Path) -> list[Path]:
    """The entries of one of the spool's own folders (checked as folders: a file there is a problem)."""
    try:
        with os.scandir(folder) as it:
            return [Path(entry.path) for entry in it if not entry.name.startswith(".")]
    except OSError:
        return []


def check(root: Path, owner: int, command: str) -> None:
    """Raises:
        Refused: the spool could have been changed by someone else (the first problem, and the fix).
    """
    found = problems(root, owner)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        who = "root" if owner == 0 else f"uid {owner}"
        raise Refused(f"{command} will not trust {root}: {found[0]}{more}",
                      f"make it {who}'s and writable by {who} only (onite init repairs modes), see docs/security.md")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return None


def _above(folder: Path, owner: int) -> list[str]:
    st = _lstat(folder)
    if st is None:
        return [f"{folder} cannot be looked at"]
    if st.st_uid not in (0, owner):
        return [f"{folder} belongs to uid {st.st_uid}"]
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return [f"{folder} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"]
    return []


def _own(path: Path, owner: int, *, folder: bool, name: str | None = None) -> list[str]:
    """A folder or file only ``owner`` may change (missing files are not a problem: init makes them)."""
    st = _lstat(path)
    if st is None:
        return []
    shown = name or str(path)
    if stat.S_ISLNK(st.st_mode):
        return [f"{shown} is a symbolic link"]
    if folder and not stat.S_ISDIR(st.st_mode):
        return [f"{shown} is not a folder"]
    if not folder and not stat.S_ISREG(st.st_mode):
        return [f"{shown} is not a regular file"]
    if not folder and st.st_nlink != 1:
        return [f"{shown} has {st.st_nlink} hard links"]
    if st.st_uid != owner:
        return [f"{shown} belongs to uid {st.st_uid}"]
    if st.st_mode & 0o022:
        return [f"{shown} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"]
    return []


def _shared(path: Path, owner: int) -> list[str]:
    """A folder users add files to: the owner's; if others may write it, it must be sticky."""
    st = _lstat(path)
    if st is None:
        return []
    if stat.S_ISLNK(st.st_mode):
        return [f"{path} is a symbolic link"]
    if not stat.S_ISDIR(st.st_mode):
        return [f"{path} is not a folder"]
    if st.st_uid != owner:
        return [f"{path} belongs to uid {st.st_uid}"]
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return [f"{path} is writable by others without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o})"]
    return []
