"""One spool on disk (docs/spool-format.md): where each of its folders and files is, and its settings.

Every path of a spool comes from ``SpoolDir`` (tests/test_contracts.py). Nothing here writes but the
``ensure_*`` methods, which make a folder someone removed or a host's first drain needs.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from onite.core.config import MAX_PRIORITIES, Config
from onite.core.errors import SpoolError, SpoolIOError
from onite.core.names import SIDE, is_valid_name
from onite.spool.settings import load_config


RESULT = f"{SIDE}result"
RUN_RECORD = f"{SIDE}run"
TAKEN_EDIT = f"{SIDE}edit"
STDERR = f"{SIDE}stderr"
STICKY_DIR = 0o1777  # anyone may add; only a file's owner (or root) may rename or remove it
HEARTBEAT, CRON_RECORD, DAEMON_STATE, METRICS = "driver", "cron", "daemon", "metrics"  # the KINDs of SPOOL/KIND.HOST.state
_STATE = ".state"


class SpoolDir:
    def __init__(self, root: Path) -> None:
        self.root = root = Path(root)
        self._config: Config | None = None
        self.config_path = root / "onite.toml"
        self.log_path = root / "onite.log"
        self.jobs_dir = root / "jobs"
        self.running_root = root / "running"
        self.done_dir = root / "jobsdone"
        self.stdout_dir = root / "stdout"
        self.cancel_dir = root / "cancel"
        self.refused_dir = root / "refused"
        self.recur_dir = root / "recur"
        self.hold_dir = root / "hold"
        self.edit_dir = root / "edit"
        self.locks_dir = root / "locks"
        self.urgent_dir = self.jobs_dir / "urgent"
        self.recur_state_path = root / "recur.state"
        self.recur_lock_path = self.locks_dir / "recur.lock"
        self.location = None  # the onite.spool.locate.Location a command found it by, if it did
        # a list: onite.toml's faults go there and their defaults are used (a command that only reads); None: refused
        self.config_faults: list | None = None

    def queue_dir(self, priority: int) -> Path:
        return self.jobs_dir / f"P{priority}"

    def running_dir(self, host: str) -> Path:
        return self.running_root / host

    def lock_path(self, host: str) -> Path:
        return self.locks_dir / f"driver.{host}.lock"

    def metrics_lock_path(self, host: str) -> Path:
        return self.locks_dir / f"metrics.{host}.lock"

    def wake_path(self, host: str) -> Path:
        return self.locks_dir / f"wake.{host}"

    def state_path(self, kind: str, host: str) -> Path:
        """``KIND.HOST.state`` (``kind``: HEARTBEAT, CRON_RECORD, DAEMON_STATE or METRICS)."""
        return self.root / f"{kind}.{host}{_STATE}"

    def state_paths(self, kind: str) -> list[tuple[str, Path]]:
        """Every ``KIND.HOST.state`` as (HOST, path), by host; one whose HOST is no host name is left out."""
        prefix = f"{kind}."
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            return []
        return [(host, self.root / name) for name in names if name.startswith(prefix) and name.endswith(_STATE)
                and is_valid_name(host := name[len(prefix):-len(_STATE)])]

    def finished_files(self, name: str) -> tuple[str, str, str, str]:
        """A finished job's result, job file, output and stderr, as strings: retention removes thousands."""
        done, out = str(self.done_dir), str(self.stdout_dir)
        return f"{done}/{name}{RESULT}", f"{done}/{name}", f"{out}/{name}", f"{out}/{name}{STDERR}"

    def output_path(self, name: str) -> Path:
        return self.stdout_dir / name

    def stderr_path(self, name: str) -> Path:
        return self.stdout_dir / f"{name}{STDERR}"

    def result_path(self, name: str) -> Path:
        return self.done_dir / f"{name}{RESULT}"

    def run_record_path(self, host: str, name: str) -> str:
        """A string: the driver opens it once per job."""
        return f"{self.running_dir(host)}/{name}{RUN_RECORD}"

    def taken_edit_path(self, host: str, name: str) -> Path:
        """``running/HOST/NAME@edit``: the edit HOST's driver took as it claimed NAME (onite.spool.edits.take)."""
        return self.running_dir(host) / f"{name}{TAKEN_EDIT}"

    @staticmethod
    def record_label(name: str) -> str:
        """``NAME@run``: the name a run record set aside in refused/ goes by (``refused_path``)."""
        return f"{name}{RUN_RECORD}"

    @property
    def config(self) -> Config:
        return self.reload_config() if self._config is None else self._config

    def reload_config(self) -> Config:
        self._config = load_config(self.config_path, self.config_faults)
        return self._config

    def queue_folders(self) -> list[tuple[int, Path]]:
        """(rank, folder) in run order: urgent (rank 0), P1 … Pn, then folders beyond Pn left from before
        ``priorities`` was lowered (their jobs run last; a requeue puts them in Pn)."""
        last = self.config.priorities
        folders = [(0, self.urgent_dir)] + [(p, self.queue_dir(p)) for p in range(1, last + 1)]
        while last < MAX_PRIORITIES and os.path.isdir(self.queue_dir(last + 1)):  # one stat where none is left
            last += 1
            folders.append((last, self.queue_dir(last)))
        return folders

    def folder_for(self, priority: int, urgent: bool) -> Path:
        """The queue folder of a job; a priority beyond ``priorities`` (lowered since) is the last."""
        return self.urgent_dir if urgent else self.queue_dir(min(priority, self.config.priorities))

    def ensure_queue_folder(self, folder: Path) -> None:
        """Make a queue folder someone removed as ``onite init`` does. Raises SpoolIOError."""
        if folder.is_dir():
            return
        mode = STICKY_DIR if os.lstat(self.root).st_uid == 0 else 0o755
        try:
            os.makedirs(folder, mode=mode, exist_ok=True)
            os.chmod(folder, mode)
        except OSError as err:
            raise SpoolIOError(folder, "making the queue folder", err) from None

    def ensure_running_folder(self, host: str) -> Path:
        """``running/HOST/``, made (0755) if missing. Raises SpoolIOError."""
        path = self.running_dir(host)
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
        except OSError as err:
            raise SpoolIOError(path, "making", err) from None
        return path

    def refused_path(self, name: str, now) -> Path:
        """Where a file set aside as ``name`` at ``now`` goes: ``refused/NAME@TIME.RANDOM``."""
        return self.refused_dir / f"{name}{SIDE}{now:%Y%m%dT%H%M%S}.{os.urandom(4).hex()}"

    def hosts(self) -> list[str]:
        """Hosts that have a running/ folder; a folder whose name is no host name is left out."""
        try:
            with os.scandir(self.running_root) as it:
                return sorted(e.name for e in it if is_valid_name(e.name) and e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []
        except OSError as err:
            raise SpoolIOError(self.running_root, "listing", err) from None

    def exists(self) -> bool:
        """Is there a spool here? Raises SpoolError, SpoolIOError: its path cannot be looked at (as ``check``)."""
        return _is_dir(self.jobs_dir, self.root)

    def check(self) -> None:
        """Raises SpoolError: the spool is missing, out of reach or not an onite spool; SpoolIOError."""
        folder = _is_dir(self.root, self.root, missing=None)
        if folder is None:
            raise SpoolError(f"no spool at {self.root}", "create it with: onite init")
        if not folder:
            raise SpoolError(f"{self.root} is not a folder, so not a spool", "give --spool the spool's folder")
        if not os.access(self.root, os.X_OK):
            raise SpoolError(f"cannot enter the spool {self.root}: permission denied", "ask its administrator, or use --spool")
        if not _is_dir(self.jobs_dir, self.root):
            raise SpoolError(f"{self.root} is not an onite spool (no jobs/ folder)", "create it with: onite init")


def _is_dir(path: Path, root: Path, *, missing: bool | None = False) -> bool | None:
    """Is ``path`` a folder (``missing``: nothing there)? pathlib's is_dir raises a bare error past a closed folder.
    Raises SpoolError: a folder on the way to ``root`` is closed to the caller; SpoolIOError."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return missing if path == root else False
    except OSError as err:
        if err.errno == errno.EACCES:
            raise SpoolError(f"cannot reach the spool {root}: a folder on its path is closed to you (permission "
                             "denied)", "ask its administrator, or use --spool") from None
        raise SpoolIOError(path, "looking at", err) from None
