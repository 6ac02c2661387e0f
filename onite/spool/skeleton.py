"""``onite init``: make (or complete) a spool from the skeleton in spool-skel/, with the modes of docs/security.md.

Idempotent: a folder that exists is given its mode again, and an onite.toml someone changed is never
overwritten. It never adopts what another user made: that user could then change what the driver runs.
"""

from __future__ import annotations

import os
import re
import shlex
from importlib import resources
from pathlib import Path

from onite.core.config import parse_config
from onite.core.errors import Refused, SpoolError, SpoolIOError
from onite.core.record import Record
from onite.spool import trust
from onite.spool.files import create_file, replace_file
from onite.spool.paths import STICKY_DIR, SpoolDir


def skeleton_config() -> str:
    """The commented default onite.toml shipped in spool-skel/."""
    return resources.files("onite").joinpath("skel", "onite.toml").read_text(encoding="utf-8")


PAM_DIR = "/etc/pam.d"  # where ``onite init`` installs the PAM service (ONITE_PAM_DIR: elsewhere)


def pam_dir() -> Path:
    """Where ``onite init`` installs the PAM service: ONITE_PAM_DIR (a package's staging root, a test's), else
    PAM_DIR."""
    return Path(os.environ.get("ONITE_PAM_DIR") or PAM_DIR)


def pam_install_command(service: str) -> str:
    """The command, for root, that installs the PAM service of jobs' sessions as ``onite init`` of the system
    spool does."""
    source = resources.files("onite").joinpath("skel", "pam.d-onite")
    return f"install -m 644 {shlex.quote(str(source))} {shlex.quote(str(pam_dir() / service))}"


def install_pam_service(pam_dir: Path, service: str) -> str:
    """Install the PAM service of jobs' sessions (spool-skel/pam.d-onite) as ``pam_dir/service``, unless an
    admin's file is there; what it did, in words. Raises SpoolIOError."""
    target = pam_dir / service
    if not pam_dir.is_dir():
        return f"PAM: {pam_dir} does not exist (no PAM here): jobs get no PAM session"
    text = resources.files("onite").joinpath("skel", "pam.d-onite").read_bytes()
    try:
        create_file(pam_dir, service, text, mode=0o644)
    except Refused:
        return f"PAM: kept {target} as it is"
    return f"PAM: installed {target}: each job opens a session of its owner's (docs/admin-guide.md)"


def with_priorities(text: str, priorities: int) -> str:
    """The skeleton text for ``priorities`` folders; the default priority is the middle one."""
    text = re.sub(r"(?m)^priorities = \d+$", f"priorities = {priorities}", text, count=1)
    return re.sub(r"(?m)^default_priority = \d+$", f"default_priority = {(priorities + 1) // 2}", text, count=1)


class InitReport(Record):
    root: Path
    created: tuple[str, ...]
    config_kept: bool  # an existing, changed onite.toml was left alone
    repaired: tuple[str, ...] = ()  # what was there with a wrong mode: ``running/ 0777 → 0755``


def init_spool(root: Path, priorities: int | None, *, system: bool) -> InitReport:
    """Create (or complete) a spool: ``system`` (root's shared spool) with the multi-user modes of
    docs/security.md, else private to the caller. Raises Refused: onite.toml was changed by hand and
    disagrees with ``priorities``, or another user made part of the spool; SpoolIOError."""
    created: list[str] = []
    repaired: list[str] = []
    skel = skeleton_config()
    if os.path.islink(root):  # /var/spool/onite -> /srv/onite: the folder it leads to, if a driver would follow it
        root = trust.resolve(root, os.geteuid(), "onite init")
    foreign = trust.problems(root, os.geteuid(), modes=False)
    if foreign:
        raise Refused(f"onite init will not adopt {root}: {foreign[0]}",
                      "move it away (or, if another user made it, chown it), then run onite init again")
    if not os.path.exists(root.parent):  # e.g. ~/.local/state on a fresh account (False too where it cannot be seen)
        mask = os.umask(0o022 if system else 0o077)  # not the caller's: umask 0777 left a d--------- ~/.local
        try:
            os.makedirs(root.parent, mode=0o755 if system else 0o700, exist_ok=True)
        except OSError as err:
            raise SpoolIOError(root.parent, "creating", err) from None
        finally:
            os.umask(mask)
    _make_dir(root, 0o755 if system else 0o700, created, repaired, root)
    spool = SpoolDir(root)
    config_path = spool.config_path
    config_kept = False
    if config_path.exists():
        try:
            current = config_path.read_text(encoding="utf-8")
        except OSError as err:
            raise SpoolIOError(config_path, "reading", err) from None
        existing = parse_config(current, str(config_path))
        pristine = current == with_priorities(skel, existing.priorities)
        if priorities is not None and existing.priorities != priorities:
            if not pristine:
                raise Refused(
                    f"{config_path} says priorities = {existing.priorities}, not {priorities}, and was changed by hand",
                    "edit its priorities line, then run onite init again",
                )
            replace_file(config_path, with_priorities(skel, priorities).encode(), mode=0o644, durable=True)
        else:
            config_kept = not pristine
            priorities = existing.priorities
            _chmod(config_path, 0o644, repaired, root)  # only its owner may change what the driver runs
    else:
        priorities = priorities or parse_config(skel).priorities
        replace_file(config_path, with_priorities(skel, priorities).encode(), mode=0o644, durable=True)
        created.append(config_path.name)
    queue_mode = STICKY_DIR if system else 0o755
    _make_dir(spool.jobs_dir, 0o755, created, repaired, root)
    for folder in [spool.urgent_dir] + [spool.queue_dir(p) for p in range(1, priorities + 1)]:
        _make_dir(folder, queue_mode, created, repaired, root)
    for folder in (spool.running_root, spool.done_dir, spool.stdout_dir):
        _make_dir(folder, 0o755, created, repaired, root)
    for folder in (spool.cancel_dir, spool.recur_dir, spool.hold_dir, spool.edit_dir):
        _make_dir(folder, queue_mode, created, repaired, root)
    for folder in (spool.refused_dir, spool.locks_dir):  # no other user may open (and so hold) a lock
        _make_dir(folder, 0o700, created, repaired, root)
    if not spool.log_path.exists():
        replace_file(spool.log_path, b"", mode=0o644, durable=True)
        created.append(spool.log_path.name)
    else:
        _chmod(spool.log_path, 0o644, repaired, root)
    return InitReport(root, tuple(created), config_kept, tuple(repaired))


def _make_dir(path: Path, mode: int, created: list[str], repaired: list[str], root: Path) -> None:
    try:
        os.mkdir(path, mode)
        created.append(str(path.relative_to(root)) + "/" if path != root else str(path) + "/")
        _chmod(path, mode)  # mkdir's mode is masked by the umask; the spool's modes are not negotiable
    except FileExistsError:
        if not path.is_dir() or path.is_symlink():
            raise SpoolError(f"{path} exists and is not a folder", "move it away and run onite init again") from None
        _chmod(path, mode, repaired, root)
    except OSError as err:
        raise SpoolIOError(path, "creating", err) from None


def _chmod(path: Path, mode: int, repaired: list[str] | None = None, root: Path | None = None) -> None:
    """Set ``path``'s mode; one it had that was not ``mode`` is said in ``repaired`` (named from ``root``)."""
    try:
        was = os.lstat(path).st_mode & 0o7777
        if was != mode:
            os.chmod(path, mode)
    except OSError as err:
        raise SpoolIOError(path, "setting the mode of", err) from None
    if was != mode and repaired is not None:
        name = str(path.relative_to(root)) + ("/" if path.is_dir() else "") if path != root else f"{path}/"
        repaired.append(f"{name} {was:04o} → {mode:04o}")
