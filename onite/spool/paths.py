"""The spool on disk: paths, init, atomic writes and moves, listing, retention.

This is the only module that changes files in a spool. Its guarantees:

- A job's state is the folder its file is in, and every change of state is
  one rename(2) within the spool's file system, so a crash at any instant
  leaves each job in exactly one state.
- A new file is written under a dot-name in its target folder, fsync'ed,
  then given its real name with link(2), which never replaces an existing
  file, then the dot-name is removed: nobody ever sees half a job, and two
  jobs of one name can never overwrite each other. Listings skip dot-names.
- Order within a folder comes from the kernel: the inode change time
  (ctime) that the final rename or link stamped. A user owns (and may edit)
  their own job file, so nothing written inside it decides order, owner or
  rights; editing a job can only move it to the back of its queue.
- A hold never touches the job file (which would stamp a new ctime, and so
  a new place): it is an empty marker hold/NAME@TOKEN, honoured only when
  its owner is the job's owner or root (anyone may add a file to the sticky
  hold/ folder). A queued file whose owner-write bit is clear (mode 0400,
  how older onites held a job) is held too. Listings report a job held by
  a marker with that bit cleared in its mode, so ``is_held(mode)`` answers
  for both kinds.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from operator import itemgetter
from pathlib import Path

from onite.core.config import Config, load_config
from onite.core.errors import DamagedRecord, NotFound, OniteError, Refused, SpoolError, SpoolIOError
from onite.core.names import SIDE, is_valid_name

SYSTEM_SPOOL = Path("/var/spool/onite")
URGENT = "urgent"
RESULT = f"{SIDE}result"  # jobsdone/NAME@result
RUNINFO = f"{SIDE}run"  # running/HOST/NAME@run
STDERR = f"{SIDE}stderr"  # stdout/NAME@stderr: a job's stderr, when kept apart from its stdout
STICKY_DIR = 0o1777  # anyone may add; only a file's owner (or root) may rename or remove it
HOLD = "hold"  # SPOOL/hold/NAME@TOKEN: a job held without touching its file (see the module's docstring)
# A queued job whose owner cannot write it is held (older spools, and spools without hold/).
QUEUED_MODE, HELD_MODE = 0o600, 0o400


def is_held(mode: int) -> bool:
    """Is a queued job held, by the mode a listing reports (a marker's hold clears its owner-write bit)?"""
    return not mode & stat.S_IWUSR


def job_mode(held: bool) -> int:
    return HELD_MODE if held else QUEUED_MODE


# ---- locating the spool -----------------------------------------------------


SYSTEM_CONFIG = "/etc/onite.toml"  # the admin's one place for every user's default; ONITE_SYSTEM_CONFIG overrides
SYSTEM_KEYS = ("spool",)


@dataclass(frozen=True)
class Location:
    """Which spool a command uses and why (so errors, status and --help can say where it came from)."""

    path: Path
    source: str  # "--spool", "ONITE_SPOOL", "system", "personal"
    reason: str = ""  # why this one: "default: it exists", "given with --spool", …

    @property
    def personal_default(self) -> bool:
        return self.source == "personal"

    def describe(self) -> str:
        """``system spool /var/spool/onite (default: it exists)``."""
        kind = {"system": "system spool ", "personal": "personal spool "}.get(self.source, "")
        return f"{kind}{self.path} ({self.reason or self.source})"


def system_config_path(environ) -> Path:
    return Path(environ.get("ONITE_SYSTEM_CONFIG") or SYSTEM_CONFIG)


def system_spool(environ) -> tuple[Path, str]:
    """The system spool's path, and where that came from: ``spool`` in /etc/onite.toml (or the
    file ONITE_SYSTEM_CONFIG names), else /var/spool/onite.

    The file must be root's (or the caller's own) and writable by nobody else: it decides which
    spool root's own commands (and drivers) use.

    Raises:
        ConfigError: the file cannot be read, is not root's or is writable by others, is not
            TOML, has an unknown key, or its spool is not an absolute path.
    """
    from onite.core.errors import ConfigError

    path = system_config_path(environ)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return SYSTEM_SPOOL, "default"
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read: {err.strerror}", "make it readable by everyone (chmod 644)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path} is not a regular file", "make it one, or remove it")
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            raise ConfigError(f"{path} must be root's and writable by root only (it chooses every user's spool)",
                              f"chown root {path} && chmod 644 {path}")
        data = os.read(fd, 65536)
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read: {err.strerror}", "make it readable by everyone (chmod 644)") from None
    finally:
        os.close(fd)
    import tomllib

    try:
        settings = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: not valid TOML ({err})", "fix the file (docs/admin-guide.md)") from None
    unknown = sorted(set(settings) - set(SYSTEM_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}", f"the keys are: {', '.join(SYSTEM_KEYS)}")
    spool = settings.get("spool")
    if spool is None:
        return SYSTEM_SPOOL, "default"
    if not isinstance(spool, str) or not spool.startswith("/") or "\0" in spool:
        raise ConfigError(f"{path}: spool must be an absolute path, not {spool!r}", 'e.g. spool = "/srv/onite"')
    return Path(os.path.normpath(spool)), f"set in {path}"


def is_initialised_system_spool(path: Path) -> bool:
    """Has root initialised a spool at ``path`` (its jobs/ folder exists, and the spool is root's)?"""
    try:
        return os.stat(path).st_uid == 0 and stat.S_ISDIR(os.stat(path / "jobs").st_mode)
    except OSError:
        return False


def locate(explicit: str | None, environ: "os._Environ[str] | dict[str, str]", euid: int) -> Location:
    """--spool, then ONITE_SPOOL, then the system spool for root and, once root has initialised it,
    for everyone; a user gets a personal spool ($XDG_STATE_HOME/onite) only where there is none.

    Raises:
        ConfigError: /etc/onite.toml is bad (system_spool).
    """
    if explicit:
        return Location(Path(explicit).absolute(), "--spool", "given with --spool")
    if environ.get("ONITE_SPOOL"):
        return Location(Path(environ["ONITE_SPOOL"]).absolute(), "ONITE_SPOOL", "from $ONITE_SPOOL")
    system, origin = system_spool(environ)
    where = "" if origin == "default" else f"; {origin}"
    if euid == 0:
        return Location(system, "system", f"root's default{where}")
    if is_initialised_system_spool(system):
        return Location(system, "system", f"default: it exists{where}")
    state_home = environ.get("XDG_STATE_HOME") or ""
    if not state_home.startswith("/"):  # the XDG spec says relative values are ignored
        state_home = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Location(Path(state_home) / "onite", "personal", f"default: there is no system spool at {system}")


def check_may_init(where: Location, euid: int) -> None:
    """``onite init`` by a user must not touch the system spool: that is root's.

    Raises:
        Refused: a user asked to initialise the system spool.
    """
    if euid == 0:
        return
    try:
        system, _ = system_spool(os.environ)
    except OniteError:
        system = SYSTEM_SPOOL
    if where.source == "system" or where.path == system:
        if is_initialised_system_spool(where.path):
            raise Refused(f"the system spool {where.path} is root's: root set it up, and only root runs onite init on it",
                          "it is ready: onite submit NAME < job.sh (for a spool of your own: onite init --spool DIR)")
        raise Refused(f"the system spool {where.path} is root's to create", "ask root to run: sudo onite init")


# ---- the spool object ------------------------------------------------------


class Spool:
    """Paths of one spool and the file operations on it."""

    def __init__(self, root: Path, config: Config | None = None) -> None:
        # The paths are made once: a driver asks for them several times per job,
        # and building a Path costs more than the system call it is used for.
        self.root = root = Path(root)
        self._config = config
        self.config_path = root / "onite.toml"
        self.log_path = root / "onite.log"
        self.jobs_dir = root / "jobs"
        self.running_root = root / "running"
        self.done_dir = root / "jobsdone"
        self.stdout_dir = root / "stdout"
        self.cancel_dir = root / "cancel"
        self.refused_dir = root / "refused"
        self.recur_dir = root / "recur"
        self.hold_dir = root / HOLD
        self.urgent_dir = self.jobs_dir / URGENT
        self._queue_dirs: dict[int, Path] = {}
        self._running_dirs: dict[str, Path] = {}
        self._folders: tuple[int, list[tuple[int, Path]]] | None = None
        self.location: Location | None = None  # how a command found it (commands.open_spool), if it did

    # paths -------------------------------------------------------------
    def queue_dir(self, priority: int) -> Path:
        path = self._queue_dirs.get(priority)
        if path is None:
            path = self._queue_dirs[priority] = self.jobs_dir / f"P{priority}"
        return path

    def running_dir(self, host: str) -> Path:
        path = self._running_dirs.get(host)
        if path is None:
            path = self._running_dirs[host] = self.running_root / host
        return path

    def lock_path(self, host: str) -> Path:
        """``locks/driver.HOST.lock``: in a folder only the spool's owner may enter (onite.spool.locks)."""
        return self.root / "locks" / f"driver.{host}.lock"

    def output_path(self, name: str) -> Path:
        return self.stdout_dir / name

    def stderr_path(self, name: str) -> Path:
        return self.stdout_dir / f"{name}{STDERR}"

    def result_path(self, name: str) -> Path:
        return self.done_dir / f"{name}{RESULT}"

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    def reload_config(self) -> Config:
        self._config = load_config(self.config_path)
        return self._config

    def queue_folders(self) -> list[tuple[int, Path]]:
        """(rank, folder) in run order: urgent first (rank 0), then P1 … Pn."""
        priorities = self.config.priorities
        if self._folders is None or self._folders[0] != priorities:
            self._folders = (priorities, [(0, self.urgent_dir)] + [(p, self.queue_dir(p)) for p in range(1, priorities + 1)])
        return list(self._folders[1])

    def folder_for(self, priority: int, urgent: bool) -> Path:
        """The queue folder of a job; a priority beyond ``priorities`` (lowered since) is the last."""
        return self.urgent_dir if urgent else self.queue_dir(min(priority, self.config.priorities))

    def ensure_queue_folder(self, folder: Path) -> None:
        """Make a queue folder that someone removed (the driver puts a job back, or spools its
        retry, into it), with the mode ``onite init`` gives it.

        Raises:
            SpoolIOError: it cannot be made.
        """
        if folder.is_dir():
            return
        mode = STICKY_DIR if os.lstat(self.root).st_uid == 0 else 0o755
        try:
            os.makedirs(folder, mode=mode, exist_ok=True)
            os.chmod(folder, mode)
        except OSError as err:
            raise SpoolIOError(folder, "making the queue folder", err) from None

    def hosts(self) -> list[str]:
        """Hosts that have a running/ folder (that have ever claimed a job); a folder whose name is
        no host name (nothing onite made) is left out."""
        try:
            with os.scandir(self.running_root) as it:
                return sorted(e.name for e in it if is_valid_name(e.name) and e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []
        except OSError as err:
            raise SpoolIOError(self.running_root, "listing", err) from None

    def exists(self) -> bool:
        return self.jobs_dir.is_dir()

    def check_drainable(self, command: str) -> None:
        """May this process drain the spool (``command``: what to run as root, for the hint)?

        Raises:
            SpoolError: as check(), or its running/ folder is missing.
            Refused: running/ belongs to someone else (the spool's owner drains it), or someone other
                than this process's user could have changed the spool (onite.spool.trust).
        """
        self.check()
        if not self.running_root.is_dir():
            raise SpoolError(f"no running/ folder in {self.root}", "run onite init to repair the spool")
        if not os.access(self.running_root, os.W_OK):
            raise Refused(f"cannot write {self.running_root}: this spool is drained by its owner",
                          f"run it as root (sudo {command}), or use your own spool")
        from onite.spool import trust

        trust.check(self.root, os.geteuid(), command)

    def check(self) -> None:
        """Raises:
            SpoolError: the spool is missing or not an onite spool.
        """
        if not self.root.exists():
            raise SpoolError(f"no spool at {self.root}", "create it with: onite init")
        if not os.access(self.root, os.X_OK):
            raise SpoolError(f"cannot enter the spool {self.root}: permission denied", "ask its administrator, or use --spool")
        if not self.jobs_dir.is_dir():
            raise SpoolError(f"{self.root} is not an onite spool (no jobs/ folder)", "create it with: onite init")


# ---- init -------------------------------------------------------------------


def skeleton_config() -> str:
    """The commented default onite.toml shipped in spool-skel/."""
    from importlib import resources

    return resources.files("onite").joinpath("skel", "onite.toml").read_text(encoding="utf-8")


def with_priorities(text: str, priorities: int) -> str:
    """The skeleton text for ``priorities`` folders; the default priority is the middle one."""
    import re

    text = re.sub(r"(?m)^priorities = \d+$", f"priorities = {priorities}", text, count=1)
    return re.sub(r"(?m)^default_priority = \d+$", f"default_priority = {(priorities + 1) // 2}", text, count=1)


@dataclass(frozen=True)
class InitReport:
    """What ``init_spool`` did."""

    root: Path
    created: tuple[str, ...]
    config_written: bool
    config_kept: bool  # an existing, changed onite.toml was left alone


def init_spool(root: Path, priorities: int | None, *, system: bool) -> InitReport:
    """Create (or complete) a spool. Idempotent; never overwrites a changed onite.toml.

    ``system`` (root installing a shared spool) sets the multi-user modes of
    docs/security.md; otherwise the spool is private to the caller (0700).

    Raises:
        Refused: onite.toml exists, was changed, and disagrees with ``priorities``.
        SpoolIOError: a folder or file cannot be created.
    """
    from onite.core.config import parse_config

    created: list[str] = []
    skel = skeleton_config()
    _refuse_foreign(root, os.geteuid())
    if not root.parent.exists():  # e.g. ~/.local/state on a fresh account
        try:
            os.makedirs(root.parent, mode=0o755 if system else 0o700, exist_ok=True)
        except OSError as err:
            raise SpoolIOError(root.parent, "creating", err) from None
    _make_dir(root, 0o755 if system else 0o700, created, root)
    config_path = root / "onite.toml"
    config_written = config_kept = False
    if config_path.exists():
        current = _read_text(config_path)
        existing = parse_config(current, str(config_path))
        pristine = current == with_priorities(skel, existing.priorities)
        if priorities is not None and existing.priorities != priorities:
            if not pristine:
                raise Refused(
                    f"{config_path} says priorities = {existing.priorities}, not {priorities}, and was changed by hand",
                    "edit its priorities line, then run onite init again",
                )
            replace_file(config_path, with_priorities(skel, priorities).encode(), mode=0o644, durable=True)
            config_written = True
        else:
            config_kept = not pristine
            priorities = existing.priorities
            try:
                os.chmod(config_path, 0o644)  # only its owner may change what the driver runs
            except OSError as err:
                raise SpoolIOError(config_path, "setting the mode of", err) from None
    else:
        priorities = priorities or parse_config(skel).priorities
        replace_file(config_path, with_priorities(skel, priorities).encode(), mode=0o644, durable=True)
        config_written = True
        created.append("onite.toml")
    queue_mode = STICKY_DIR if system else 0o755
    _make_dir(root / "jobs", 0o755, created, root)
    for folder in [URGENT] + [f"P{p}" for p in range(1, priorities + 1)]:
        _make_dir(root / "jobs" / folder, queue_mode, created, root)
    for folder in ("running", "jobsdone", "stdout"):
        _make_dir(root / folder, 0o755, created, root)
    _make_dir(root / "cancel", queue_mode, created, root)
    _make_dir(root / "recur", queue_mode, created, root)
    _make_dir(root / HOLD, queue_mode, created, root)
    _make_dir(root / "refused", 0o700, created, root)
    _make_dir(root / "locks", 0o700, created, root)  # no other user may open (and so hold) a lock
    from onite.spool.locks import remove_legacy

    remove_legacy(root)
    log = root / "onite.log"
    if not log.exists():
        replace_file(log, b"", mode=0o644, durable=True)
        created.append("onite.log")
    else:
        try:
            os.chmod(log, 0o644)
        except OSError as err:
            raise SpoolIOError(log, "setting the mode of", err) from None
    return InitReport(root, tuple(created), config_written, config_kept)


def _refuse_foreign(root: Path, owner: int) -> None:
    """``init`` never adopts what someone else made: a folder or file of the spool (or a folder
    above it) that another user owns, or a link, would let that user change what the driver runs.

    Raises:
        Refused: with the first such path, and what to do.
    """
    from onite.spool import trust

    found = [problem for problem in trust.problems(root, owner)
             if "belongs to" in problem or "symbolic link" in problem or "not a " in problem
             or "hard links" in problem]
    for folder in reversed(Path(os.path.realpath(root)).parents):
        st = os.lstat(folder) if os.path.lexists(folder) else None
        if st is not None and st.st_uid not in (0, owner):
            found.insert(0, f"{folder} belongs to uid {st.st_uid}")
    if found:
        raise Refused(f"onite init will not adopt {root}: {found[0]}",
                      "someone else made it: move it away (or chown it), then run onite init again")


def _make_dir(path: Path, mode: int, created: list[str], root: Path) -> None:
    try:
        os.mkdir(path, mode)
        created.append(str(path.relative_to(root)) + "/" if path != root else str(path) + "/")
    except FileExistsError:
        if not path.is_dir() or path.is_symlink():
            raise SpoolError(f"{path} exists and is not a folder", "move it away and run onite init again") from None
    except OSError as err:
        raise SpoolIOError(path, "creating", err) from None
    try:
        os.chmod(path, mode)  # mkdir's mode is masked by the umask; the spool's modes are not negotiable
    except OSError as err:
        raise SpoolIOError(path, "setting the mode of", err) from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None


def _unlink_quietly(path: Path | str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# ---- writing jobs ------------------------------------------------------------


def create_file(folder: Path, name: str, data: bytes, *, mode: int = 0o600,
                owner: tuple[int, int] | None = None, durable: bool = True) -> Path:
    """Create ``folder/name`` holding ``data``, all or nothing, never replacing a file.

    The file is written under a dot-name (``.name.PID.RANDOM.tmp``), flushed, then linked to its
    name and the dot-name removed. On any failure nothing is left behind.

    Raises:
        Refused: ``folder/name`` already exists.
        SpoolIOError: the write failed (full disk, file-size limit, permissions, …).
    """
    tmp = _write_unnamed(folder, name, data, mode, owner, durable=durable)
    _link_name(tmp, folder, name)
    if durable:
        fsync_dir(folder)
    return folder / name


BATCH_CHUNK = 512  # files made durable together by one syncfs(2) before they are given their names


def create_batch(files: Iterable[tuple[Path, str, bytes, int]], *, owner: tuple[int, int] | None = None) -> int:
    """Create each ``(folder, name, data, mode)`` in order, as ``create_file`` does one; return how many.

    Each file is all or nothing and never replaces another, as with
    ``create_file``; the files get their names in the order given, so their
    ctimes never decrease along the batch. What differs is durability: one
    fsync per file costs more than everything else a submit does, so a
    chunk of files is written under dot-names, made durable together
    (syncfs(2) where it exists, else an fsync each), and only then linked to
    their names, one by one; each folder is fsync'ed once at the end. On any
    error or interruption the dot-names of files not yet named are removed:
    the files before the failure stay created, the others were never seen.
    A file that cannot be written (a full disk) is such a failure: the files
    of its chunk written before it are still made durable and named.

    Raises:
        Refused: a name already exists (``created`` on the error: how many were made before it).
        SpoolError, SpoolIOError: a write failed (``created`` likewise).
    """
    created = 0
    folders: dict[Path, None] = {}
    pending: list[tuple[str, Path, str]] = []  # (tmp path, folder, name) written, not yet named
    chunk = iter(files)
    try:
        while True:
            failed = None
            for folder, name, data, mode in chunk:
                folders.setdefault(folder)
                try:
                    pending.append((_write_unnamed(folder, name, data, mode, owner), folder, name))
                except SpoolIOError as err:
                    failed = err  # a full disk: the files written before it still get their names
                    break
                if len(pending) >= BATCH_CHUNK:
                    break
            if pending:
                _make_durable([tmp for tmp, _, _ in pending])
                for tmp, folder, name in pending:
                    _link_name(tmp, folder, name)
                    created += 1
                pending.clear()
            elif failed is None:
                break
            if failed is not None:
                raise failed
    except OniteError as err:
        err.created = created
        raise
    finally:
        for tmp, _, _ in pending:
            _unlink_quietly(tmp)
        for folder in folders:
            fsync_dir(folder)
    return created


def _write_unnamed(folder: Path, name: str, data: bytes, mode: int, owner: tuple[int, int] | None, *,
                   durable: bool = False) -> str:
    """Write ``data`` under a dot-name in ``folder`` (flushed to disk if ``durable``); return that path.
    On any failure, an interrupt included, the dot-name is removed."""
    tmp = f"{folder}/.{name}.{os.getpid()}.{os.urandom(3).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise SpoolError(f"no folder {folder}", "run onite init to create the spool's folders") from None
    except OSError as err:
        raise SpoolIOError(folder, "creating a job in", err) from None
    written = False
    try:
        _fill(fd, data, mode, owner, durable)
        written = True
    except OSError as err:
        raise SpoolIOError(folder / name, "writing", err) from None
    finally:
        os.close(fd)
        if not written:
            _unlink_quietly(tmp)
    return tmp


def _fill(fd: int, data: bytes, mode: int, owner: tuple[int, int] | None, durable: bool) -> None:
    """Give a fresh file its owner, all of ``data`` and its mode (last: a held job is 0400),
    and flush it if ``durable``. Raises OSError."""
    if owner is not None:
        os.fchown(fd, *owner)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fchmod(fd, mode)
    if durable:
        os.fsync(fd)


def _make_durable(paths: list[str]) -> None:
    """Flush the data of freshly written files to disk: one syncfs(2) for all, else an fsync each."""
    syncfs = _syncfs()
    if syncfs is not None:
        fd = os.open(paths[0], os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        except OSError as err:
            raise SpoolIOError(path, "flushing", err) from None
        finally:
            os.close(fd)


_SYNCFS: list = []


def _syncfs():
    """libc's syncfs(fd), or None where there is none (it is not in the os module)."""
    if not _SYNCFS:
        try:
            import ctypes

            _SYNCFS.append(ctypes.CDLL(None, use_errno=True).syncfs)
        except (ImportError, OSError, AttributeError):
            _SYNCFS.append(None)
    return _SYNCFS[0]


def _link_name(tmp: str, folder: Path, name: str) -> None:
    """Give the written dot-name its real name, never replacing a file: renameat2(RENAME_NOREPLACE)
    where the file system has it (one step: the job never has two links), else link then unlink
    (a driver that sees the second link waits a moment for the unlink: filecheck.SETTLING).

    Raises:
        Refused: the name exists. SpoolIOError: any other failure.
    """
    final = folder / name
    try:
        if _rename_noreplace(tmp, str(final)):
            return
        os.link(tmp, final)
    except FileExistsError:
        _unlink_quietly(tmp)
        raise Refused(f"{final} already exists", "pick another name (or use --unique)") from None
    except OSError as err:
        _unlink_quietly(tmp)
        raise SpoolIOError(final, "writing", err) from None
    _unlink_quietly(tmp)


_RENAMEAT2: list = []
RENAME_NOREPLACE = 1
AT_FDCWD = -100


def _rename_noreplace(src: str, dst: str) -> bool:
    """rename(2) that fails with FileExistsError instead of replacing ``dst``; False where the
    file system or the C library cannot (then the caller links and unlinks).

    Raises:
        FileExistsError: ``dst`` exists. OSError: any other failure of the rename itself.
    """
    if not _RENAMEAT2:
        try:
            import ctypes

            _RENAMEAT2.append(ctypes.CDLL(None, use_errno=True).renameat2)
        except (ImportError, OSError, AttributeError):
            _RENAMEAT2.append(None)
    call = _RENAMEAT2[0]
    if call is None:
        return False
    import ctypes

    if call(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # NFS and friends: link and unlink instead
        return False
    raise OSError(code, os.strerror(code), dst)


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, *, mode: int = 0o644, owner: tuple[int, int] | None = None,
                 durable: bool = False) -> None:
    """Write ``path`` atomically (dot-name, then rename), replacing it if it exists: records the
    driver owns, and with ``durable`` (flushed before the rename) the spool's own files.

    Raises:
        SpoolIOError: the write failed.
    """
    folder, _, name = str(path).rpartition("/")
    tmp = f"{folder}/.{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _fill(fd, data, mode, owner, durable)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError as err:
        _unlink_quietly(tmp)
        raise SpoolIOError(path, "writing", err) from None


# ---- finding jobs ------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A job file as the file system shows it, without reading it."""

    name: str
    path: Path
    uid: int
    mode: int
    ctime_ns: int
    rank: int | None = None  # queued: 0 urgent, k for Pk
    host: str | None = None  # running: the claiming host
    size: int = 0


def _job_stats(folder: Path) -> Iterator[tuple[os.DirEntry, os.stat_result]]:
    """The job files of ``folder`` with their lstat; nothing if it is gone. Entries whose names are
    not job names (dot-names of writes in progress, side files, and whatever a user planted: a
    newline, an escape sequence, bytes that are not UTF-8) are not jobs and are left out; the driver
    finds those in its queue index (index.QueueIndex.strays) and moves them aside.

    Raises:
        SpoolIOError: the folder cannot be listed.
    """
    try:
        it = os.scandir(folder)
    except FileNotFoundError:
        return
    except OSError as err:
        raise SpoolIOError(folder, "listing", err) from None
    with it:
        for entry in it:
            if not is_valid_name(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # claimed or cancelled while we looked
            yield entry, st


def _entries(folder: Path, **extra) -> Iterator[Entry]:
    for entry, st in _job_stats(folder):
        yield Entry(entry.name, Path(entry.path), st.st_uid, st.st_mode, st.st_ctime_ns, **extra)


def queued_stats(spool: Spool) -> list[tuple[int, int, str, int, int]]:
    """Every queued job as ``(rank, ctime_ns, name, uid, mode)``, in run order: ``queued`` without its
    objects, for listings of 100,000 jobs (one lstat a job, and little else)."""
    return [(rank, *row) for rank, rows in queued_folder_stats(spool) for row in rows]


def queued_folder_stats(spool: Spool) -> Iterator[tuple[int, list[tuple[int, str, int, int]]]]:
    """``queued_stats`` a folder at a time: its rank, and its jobs as ``(ctime_ns, name, uid, mode)``
    (the mode of a job a marker holds without its owner-write bit, so that ``is_held`` says held)."""
    holds = read_holds(spool.hold_dir)
    for rank, folder in spool.queue_folders():
        rows = [(st.st_ctime_ns, entry.name, st.st_uid, st.st_mode) for entry, st in _job_stats(folder)]
        # by (ctime, name), unique within a folder: two sorts on one key each take a third of the time
        # of one on the pair, as many jobs share a kernel tick and pairs of str compare slowly
        rows.sort(key=itemgetter(1))
        rows.sort(key=itemgetter(0))
        if holds:
            rows = [(c, n, u, m & ~stat.S_IWUSR if held_by(holds, n, u) else m) for c, n, u, m in rows]
        yield rank, rows


def running(spool: Spool, host: str | None = None) -> list[Entry]:
    """Jobs claimed by a driver: on ``host``, or on every host."""
    hosts = [host] if host else spool.hosts()
    result: list[Entry] = []
    for h in hosts:
        result.extend(sorted(_entries(spool.running_dir(h), host=h), key=lambda e: (e.ctime_ns, e.name)))
    return result


def cancel_inbox(spool: Spool) -> list[Entry]:
    """Everything in cancel/: withdrawn jobs (non-empty files) and cancel requests (empty ones).

    Raises:
        SpoolIOError: cancel/ cannot be listed.
    """
    return [Entry(name, Path(entry.path), st.st_uid, st.st_mode, st.st_ctime_ns, size=st.st_size)
            for name, entry, st in token_entries(spool.cancel_dir)]


def token_entries(folder: Path) -> Iterator[tuple[str, os.DirEntry, os.stat_result]]:
    """The ``NAME@TOKEN`` entries of a folder users write (cancel/, hold/) whose NAME is a job name,
    each with its lstat: anything else there is nothing onite acts on. No folder: nothing.

    Raises:
        SpoolIOError: the folder cannot be listed.
    """
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as err:
        raise SpoolIOError(folder, "listing", err) from None
    with it:
        for entry in it:
            name, sep, _ = entry.name.partition(SIDE)
            if not sep or not is_valid_name(name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield name, entry, st


def cancelled_pending(spool: Spool) -> list[Entry]:
    """Queued jobs that users cancelled and no driver has filed yet (cancel/NAME@…)."""
    return [e for e in cancel_inbox(spool) if e.size and stat.S_ISREG(e.mode)]


def find_queued(spool: Spool, name: str) -> list[Entry]:
    """Queued jobs called ``name`` (normally one; two only after a race); a job a marker holds has its
    mode's owner-write bit cleared, as in ``queued_folder_stats``."""
    found = []
    for rank, folder in spool.queue_folders():
        entry = _stat_entry(folder, name, rank=rank)
        if entry:
            found.append(entry)
    if found:
        holds = read_holds(spool.hold_dir)
        if holds:
            found = [replace(e, mode=e.mode & ~stat.S_IWUSR) if held_by(holds, e.name, e.uid) else e for e in found]
    return found


# ---- holds ------------------------------------------------------------------------


def read_holds(folder: Path) -> dict[str, frozenset[int]]:
    """The hold markers in ``folder`` (SPOOL/hold): job name → the uids that own a marker of it. Only
    regular files named NAME@TOKEN count (a symlink or a folder there is nobody's hold); no hold/
    folder (a spool made by an older onite) holds nothing.

    Raises:
        SpoolIOError: the folder cannot be listed.
    """
    owners: dict[str, set[int]] = {}
    for name, _, st in token_entries(folder):
        if stat.S_ISREG(st.st_mode):
            owners.setdefault(name, set()).add(st.st_uid)
    return {name: frozenset(uids) for name, uids in owners.items()}


def held_by(holds: dict[str, frozenset[int]], name: str, uid: int) -> bool:
    """Does a marker hold the queued job ``name`` of ``uid``: one owned by ``uid`` or by root?
    (Anyone may drop a file into hold/; another user's marker holds nothing of yours.)"""
    owners = holds.get(name)
    return owners is not None and (uid in owners or 0 in owners)


def add_hold(spool: Spool, name: str, owner: tuple[int, int] | None = None) -> Path:
    """Hold ``name`` with a new marker hold/NAME@TOKEN, owned by ``owner`` (uid, gid; root holding
    another user's job gives the marker to that user, who may then release it).

    Raises:
        SpoolError: no hold/ folder (the caller falls back to the mode). SpoolIOError: it cannot be made.
    """
    path = spool.hold_dir / f"{name}{SIDE}{os.getpid()}.{os.urandom(4).hex()}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        raise SpoolError(f"no {HOLD}/ folder in {spool.root}", "run onite init to add it") from None
    except OSError as err:
        raise SpoolIOError(path, "holding a job with", err) from None
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, 0o644)
    except OSError as err:
        _unlink_quietly(path)
        raise SpoolIOError(path, "holding a job with", err) from None
    finally:
        os.close(fd)
    return path


def remove_holds(spool: Spool, name: str | Iterable[str], uids: Iterable[int] | None = None) -> int:
    """Remove the hold markers of ``name`` (or of any of several names) owned by one of ``uids``
    (None: all, which only root may); how many went. Markers this process may not remove (another
    user's) are left.

    Raises:
        SpoolIOError: hold/ cannot be listed.
    """
    names = {name} if isinstance(name, str) else set(name)
    wanted = None if uids is None else set(uids)
    removed = 0
    try:
        it = os.scandir(spool.hold_dir)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    except OSError as err:
        raise SpoolIOError(spool.hold_dir, "listing", err) from None
    with it:
        for entry in it:
            if entry.name.partition(SIDE)[0] not in names or SIDE not in entry.name:
                continue
            try:
                if wanted is not None and entry.stat(follow_symlinks=False).st_uid not in wanted:
                    continue
                os.unlink(entry.path)
                removed += 1
            except (FileNotFoundError, PermissionError):
                continue
            except OSError as err:
                raise SpoolIOError(Path(entry.path), "releasing a job: removing", err) from None
    return removed


def find_running(spool: Spool, name: str) -> list[Entry]:
    found = []
    for host in spool.hosts():
        entry = _stat_entry(spool.running_dir(host), name, host=host)
        if entry:
            found.append(entry)
    return found


def _stat_entry(folder: Path, name: str, **extra) -> Entry | None:
    try:
        st = os.lstat(f"{folder}/{name}")  # a Path is made only for what is found
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise SpoolIOError(folder / name, "looking at", err) from None
    return Entry(name, folder / name, st.st_uid, st.st_mode, st.st_ctime_ns, **extra)


def is_live(spool: Spool, name: str, hosts: list[str] | None = None) -> bool:
    """Is a job of this name queued or running (on any host; ``hosts``: spool.hosts(), if the caller has it)?

    Raises:
        SpoolIOError: a folder of the spool cannot be looked into.
    """
    # find_queued and find_running, without their Entry objects: retention asks this of every job it removes
    hosts = spool.hosts() if hosts is None else hosts
    folders = [folder for _, folder in spool.queue_folders()] + [spool.running_dir(host) for host in hosts]
    for folder in folders:
        try:
            os.lstat(f"{folder}/{name}")
            return True
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as err:
            raise SpoolIOError(folder / name, "looking at", err) from None
    return False


def name_taken(spool: Spool, name: str) -> bool:
    """Used by a live job, a filed cancellation or a kept result (so --unique never reuses output)."""
    return is_live(spool, name) or spool.result_path(name).exists() or spool.output_path(name).exists()


# ---- results -------------------------------------------------------------------


def read_result(spool: Spool, name: str):
    """The result record of the latest finished run of ``name``, or None if there is none.

    Raises:
        DamagedRecord: there is one, but it cannot be read back (torn by a power cut, damaged,
            or the record of another name).
        SpoolIOError: it cannot be read.
    """
    from onite.core.state import Result
    from onite.core.values import loads_object

    path = spool.result_path(name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    try:
        fields = loads_object(data)
    except ValueError as err:  # also bytes that are not UTF-8
        raise DamagedRecord(f"damaged result record {path}: {str(err)[:200]}",
                            "remove it, or restore it from a backup") from None
    try:
        result = Result.from_json(fields)
    except DamagedRecord as err:
        err.what = err.what.replace("damaged result record", f"damaged result record {path}", 1)
        raise
    if result.name != name:
        raise DamagedRecord(f"damaged result record {path}: it is the record of {result.name!r}",
                            "remove it, or restore it from a backup")
    return result


def result_names(spool: Spool) -> list[str]:
    """The names of the jobs whose result record is kept (jobsdone/NAME@result), unread; a file whose
    name is not a job's plus ``@result`` is no job's record and is left out."""
    try:
        with os.scandir(spool.done_dir) as it:
            return [name for name in (entry.name[: -len(RESULT)] for entry in it if entry.name.endswith(RESULT))
                    if is_valid_name(name)]
    except FileNotFoundError:
        return []


def results(spool: Spool, damaged: list[str] | None = None) -> list:
    """Every kept result record that can be read, oldest finish first. The names of those that
    cannot (DamagedRecord) are added to ``damaged``, if given, for the caller to report.

    Raises:
        SpoolIOError: a record cannot be read.
    """
    records = []
    for name in result_names(spool):
        try:
            record = read_result(spool, name)
        except DamagedRecord:
            if damaged is not None:
                damaged.append(name)
            continue
        if record is not None:
            records.append(record)
    records.sort(key=lambda r: (r.finished, r.name))
    return records


def damaged_note(damaged: list[str]) -> str:
    """The warning a command prints (on stderr) when it left out the damaged result records ``damaged``."""
    names = ", ".join(f"jobsdone/{name}{RESULT}" for name in sorted(damaged)[:5])
    more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
    return (f"onite: warning: {len(damaged)} damaged result record(s) left out: {names}{more} — "
            "the spool's administrator can look at them and remove them")


def result_record(result) -> bytes:
    """The bytes of ``jobsdone/NAME@result`` for ``result`` (also what a notify hook reads on stdin)."""
    from onite.core.jsontext import dumps

    return (dumps(result.to_json()) + "\n").encode()


def may_replace_result(spool: Spool, name: str, uid: int) -> bool:
    """May a record about a job of ``uid`` that never ran (refused, withdrawn) replace the kept
    result of ``name``? Not another user's: a file anyone can drop in the spool must not turn
    someone else's finished job into a failed or cancelled one (and fail what waits for it)."""
    try:
        previous = read_result(spool, name)
    except DamagedRecord:
        return True  # it says nothing anyone can rely on
    except SpoolIOError:
        return False
    return previous is None or previous.uid == uid


def write_result(spool: Spool, result) -> None:
    replace_file(spool.result_path(result.name), result_record(result), mode=0o644)


# ---- moves ---------------------------------------------------------------------


def move(src: Path, dst: Path, action: str) -> None:
    """One atomic rename within the spool.

    Raises:
        NotFound: ``src`` is gone (another driver or a cancel got there first).
        SpoolIOError: any other failure.
    """
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        if not src.parent.exists() or not dst.parent.exists():
            raise SpoolError(f"{action}: a folder of the spool is missing ({src.parent} or {dst.parent})",
                             "run onite init to repair the spool") from None
        raise NotFound(f"{src.name} is no longer in {src.parent}", "another driver or a cancel moved it") from None
    except OSError as err:
        raise SpoolIOError(src, action, err) from None


def change_state(name: str, old, new, src: Path, dst: Path, action: str) -> None:
    """The one rename that moves job ``name`` from state ``old`` to ``new``, along an edge of the
    state machine (onite.core.state): every change of a job's state goes through here.

    Raises:
        InvalidTransition: ``old → new`` is no edge (a bug in the caller; nothing was moved).
        NotFound, SpoolError, SpoolIOError: as move().
    """
    from onite.core.state import check_transition

    check_transition(name, old, new)
    move(src, dst, action)


def user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def remove(path: Path) -> bool:
    """Unlink ``path``; False if it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno == errno.EISDIR:
            return False
        raise SpoolIOError(path, "removing", err) from None
