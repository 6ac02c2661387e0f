"""May the driver trust this spool? A root driver runs what onite.toml and the queues say, so, like sshd's
StrictModes, onite refuses a spool someone other than its owner could have changed: the spool, its own
folders, onite.toml and onite.log must be its owner's, every folder above it its owner's or root's, and all
writable by nobody else, except sticky folders: those users add files to, and folders above such as ``/tmp``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from onite.core.errors import Refused, SpoolError
from onite.spool.paths import SpoolDir


def problems(root: Path, owner: int, *, modes: bool = True) -> list[str]:
    """What makes the spool at ``root`` untrustworthy for a driver running as ``owner``, in order; without
    ``modes``, only whose each part is and what it is (what ``onite init`` cannot repair)."""
    found: list[str] = []
    real = Path(os.path.realpath(root))
    spool = SpoolDir(real)
    for folder in reversed(real.parents):
        found.extend(_above(folder, owner, modes))
    found.extend(_own(real, owner, modes, folder=True, name=str(root)))
    for path in (spool.jobs_dir, spool.running_root, spool.done_dir, spool.stdout_dir, spool.refused_dir,
                 *_children(spool.running_root)):
        found.extend(_own(path, owner, modes, folder=True))
    for path in [*_children(spool.jobs_dir), spool.cancel_dir, spool.recur_dir, spool.hold_dir, spool.edit_dir]:
        found.extend(_own(path, owner, modes, folder=True, shared=True))
    for path in (spool.config_path, spool.log_path):
        found.extend(_own(path, owner, modes, folder=False))
    return found


def may_drive(spool: SpoolDir) -> bool:
    """May this process drive ``spool`` (drain, wake its daemon, recover): root, or a personal spool's owner, who
    may write its running/ (check_drainable says why one may not)."""
    return os.geteuid() == 0 or os.access(spool.running_root, os.W_OK)


def check_drainable(spool: SpoolDir, command: str) -> None:
    """May this process drain ``spool`` (``command``: what to run as root, for the hint)? Raises SpoolError: as
    SpoolDir.check(), or no running/; Refused: running/ is not this user's, or the spool is not trusted."""
    spool.check()
    if not spool.running_root.is_dir():
        raise SpoolError(f"no running/ folder in {spool.root}", "run onite init to repair the spool")
    if not os.access(spool.running_root, os.W_OK):  # root too, on a read-only file system
        try:
            read_only = bool(os.statvfs(spool.running_root).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        if read_only:  # no user could: not a matter of whose spool it is
            raise SpoolError(f"cannot write {spool.running_root}: the spool's file system is read-only",
                             "remount it read-write, then drain it")
        raise Refused(f"cannot write {spool.running_root}: this spool is drained by its owner",
                      f"run it as root (sudo {command}), or use your own spool")
    check(spool.root, os.geteuid(), command)


def resolve(root: Path, owner: int, command: str) -> Path:
    """The spool's real path, each component of ``root`` checked on the way: a symbolic link on it must be
    root's or ``owner``'s, in a folder no one else may change, or its owner could later point a root driver
    at a folder of theirs. The driver uses the real path from then on (``root`` again only to reload).
    Raises Refused: a link that is not to be trusted, naming it and its owner."""
    parts, current, hops = list(Path(os.path.abspath(root)).parts[1:]), Path("/"), 0
    while parts:
        candidate = current / parts.pop(0)
        st = _lstat(candidate)
        if st is None or not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        hops += 1
        problem = _above(current, owner) or ([] if st.st_uid in (0, owner) else
                                             [f"{candidate} is a symbolic link that belongs to uid {st.st_uid}"])
        if problem or hops > 40:
            why = problem[0] if problem else f"{candidate} leads through too many symbolic links"
            raise Refused(f"{command} will not trust {root}: {why}",
                          "give the spool's real path (or make the link root's, in a folder only root writes)")
        target = Path(os.readlink(candidate))
        parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
        if target.is_absolute():
            current = Path("/")
    return Path(os.path.normpath(current))


def recheck(spool: SpoolDir, owner: int, command: str) -> None:
    """At a reload: the path the spool was given by must still lead to the folder being drained (a changed
    link is refused, never followed), and that folder must still be trusted. Raises Refused."""
    given = spool.location.path if spool.location is not None else spool.root
    real = resolve(given, owner, command)
    if real != spool.root:
        raise Refused(f"the spool path {given} now leads to {real}, not {spool.root}",
                      f"restart {command} to drain another spool")
    check(spool.root, owner, command)


def _children(folder: Path) -> list[Path]:
    """The entries of one of the spool's own folders (checked as folders)."""
    try:
        with os.scandir(folder) as it:
            return [Path(entry.path) for entry in it if not entry.name.startswith(".")]
    except OSError:
        return []


def check(root: Path, owner: int, command: str) -> None:
    """Raises Refused: the spool could have been changed by someone else (the first problem, and the fix)."""
    found = problems(root, owner)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        who = "root" if owner == 0 else f"uid {owner}"
        raise Refused(f"{command} will not trust {root}: {found[0]}{more}",
                      f"make it {who}'s and writable by {who} only (onite init repairs modes), see docs/security.md")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _above(folder: Path, owner: int, modes: bool = True) -> list[str]:
    """A folder above the spool (``modes``: one that cannot be looked at, init makes it, is a problem too)."""
    st = _lstat(folder)
    if st is None:
        return [f"{folder} cannot be looked at"] if modes else []
    if st.st_uid not in (0, owner):
        return [f"{folder} belongs to uid {st.st_uid}"]
    if modes and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return [f"{folder} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"]
    return []


def _own(path: Path, owner: int, modes: bool, *, folder: bool, name: str | None = None, shared: bool = False) -> list[str]:
    """A folder or file only ``owner`` may change (``shared``: or anyone, if it is sticky); a missing one
    is no problem (init makes it)."""
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
    if modes and st.st_mode & 0o022 and not (shared and st.st_mode & stat.S_ISVTX):
        sticky = " without the sticky bit" if shared else ""
        return [f"{shown} is writable by others{sticky} (mode {stat.S_IMODE(st.st_mode):04o})"]
    return []
