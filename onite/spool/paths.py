"""One spool on disk: where each of its folders and files is, and its settings.

A spool is the folder tree of docs/spool-format.md; ``SpoolDir`` names its
paths once (a driver asks for them several times per job, and building a
Path costs more than the system call it is used for) and reads onite.toml
when first asked (onite.spool.settings). Every path of a spool comes from
here: no other module joins the spool's folder or file names into a path
(tests/test_contracts.py checks it). Which spool a command uses is
onite.spool.locate's to say. Nothing here writes but ``ensure_queue_folder``
and ``ensure_running_folder``, which put back a folder someone removed (or
that a host's first drain needs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from onite.core.config import Config
from onite.core.errors import Refused, SpoolError, SpoolIOError
from onite.core.names import SIDE, is_valid_name
from onite.spool.settings import load_config

if TYPE_CHECKING:
    from onite.spool.locate import Location

URGENT = "urgent"  # jobs/urgent/: the folder of urgent jobs, before every priority
HOLD = "hold"  # SPOOL/hold/NAME@TOKEN: a job held without touching its file (onite.spool.holds)
RESULT = f"{SIDE}result"  # jobsdone/NAME@result
RUN_RECORD = f"{SIDE}run"  # running/HOST/NAME@run
STDERR = f"{SIDE}stderr"  # stdout/NAME@stderr: a job's stderr, when kept apart from its stdout
STICKY_DIR = 0o1777  # anyone may add; only a file's owner (or root) may rename or remove it
# the KINDs of SPOOL/KIND.HOST.state, a host's world-readable records: its driver's heartbeat
# (onite.drain.heartbeat), its cron entry (onite.spool.cronrecords), its daemon's schedule (onite.drain.daemon)
HEARTBEAT, CRON_RECORD, DAEMON_STATE = "driver", "cron", "daemon"
_STATE = ".state"


class SpoolDir:
    """One spool on disk: the paths of its folders and files, and its settings (onite.toml)."""

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
        self.locks_dir = root / "locks"
        self.urgent_dir = self.jobs_dir / URGENT
        self._queue_dirs: dict[int, Path] = {}
        self._running_dirs: dict[str, Path] = {}
        self._folders: tuple[int, list[tuple[int, Path]]] | None = None
        self.location: Location | None = None  # how a command found it (onite.spool.locate), if it did

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
        return self.locks_dir / f"driver.{host}.lock"

    def recur_lock_path(self) -> Path:
        """``locks/recur.lock``: one read-modify-write of ``recur.state`` at a time."""
        return self.locks_dir / "recur.lock"

    def wake_path(self, host: str) -> Path:
        """``locks/wake.HOST``: the request that HOST's idle daemon drain now (onite.drain.wake)."""
        return self.locks_dir / f"wake.{host}"

    def recur_state_path(self) -> Path:
        """``recur.state``: when each recurring job last fired (onite.spool.recurstate)."""
        return self.root / "recur.state"

    def state_path(self, kind: str, host: str) -> Path:
        """``KIND.HOST.state`` (``kind``: HEARTBEAT, CRON_RECORD or DAEMON_STATE)."""
        return self.root / f"{kind}.{host}{_STATE}"

    def state_paths(self, kind: str) -> list[tuple[str, Path]]:
        """Every ``KIND.HOST.state`` of the spool as (HOST, path), by host; a HOST that is no host name
        (nothing onite wrote) is left out."""
        prefix = f"{kind}."
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            return []
        return [(host, self.root / name) for name in names if name.startswith(prefix) and name.endswith(_STATE)
                and is_valid_name(host := name[len(prefix):-len(_STATE)])]

    def finished_files(self, name: str) -> tuple[str, str, str, str]:
        """A finished job's files, as strings (retention removes thousands, and a Path costs more than
        an unlink): ``jobsdone/NAME@result``, ``jobsdone/NAME``, ``stdout/NAME``, ``stdout/NAME@stderr``."""
        done, out = str(self.done_dir), str(self.stdout_dir)  # a Path keeps its string
        return f"{done}/{name}{RESULT}", f"{done}/{name}", f"{out}/{name}", f"{out}/{name}{STDERR}"

    def output_path(self, name: str) -> Path:
        return self.stdout_dir / name

    def stderr_path(self, name: str) -> Path:
        return self.stdout_dir / f"{name}{STDERR}"

    def result_path(self, name: str) -> Path:
        """``jobsdone/NAME@result``: the result record of NAME's latest finished run (onite.spool.results)."""
        return self.done_dir / f"{name}{RESULT}"

    def run_record_path(self, host: str, name: str) -> str:
        """``running/HOST/NAME@run``: the run record of NAME's claim by HOST (onite.spool.runrecords); a
        string, as the driver opens it once per job."""
        return f"{self.running_dir(host)}/{name}{RUN_RECORD}"

    @staticmethod
    def record_label(name: str) -> str:
        """``NAME@run``: how a run record set aside in refused/ is named (``refused_path``)."""
        return f"{name}{RUN_RECORD}"

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

    def ensure_running_folder(self, host: str) -> Path:
        """``running/HOST/``, made (0755) if missing: where HOST's driver claims jobs.

        Raises:
            SpoolIOError: it cannot be made (a full disk, one out of inodes).
        """
        path = self.running_dir(host)
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
        except OSError as err:
            raise SpoolIOError(path, "making", err) from None
        return path

    def refused_path(self, name: str, now) -> Path:
        """Where a file set aside as ``name`` at ``now`` goes: ``refused/NAME@TIME.RANDOM``."""
        return self.refused_dir / f"{name}{SIDE}{now:%Y%m%dT%H%M%S}.{os.urandom(2).hex()}"

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
        if not self.root.is_dir():
            raise SpoolError(f"{self.root} is not a folder, so not a spool", "give --spool the spool's folder")
        if not os.access(self.root, os.X_OK):
            raise SpoolError(f"cannot enter the spool {self.root}: permission denied", "ask its administrator, or use --spool")
        if not self.jobs_dir.is_dir():
            raise SpoolError(f"{self.root} is not an onite spool (no jobs/ folder)", "create it with: onite init")
