"""Driver locks: flock(2) on 0600 files in SPOOL/locks/, a folder only the spool's owner may enter (0700),
for a user who could open a lock file could hold it. The kernel drops a flock when its holder dies, and
every wait for one is bounded. Whether a driver is alive is its heartbeat's to say (onite.drain.heartbeat).
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from pathlib import Path

from onite.core.errors import Refused, SpoolError, SpoolIOError
from onite.spool.accounts import user_name
from onite.spool.paths import SpoolDir

_OWNERS_ONLY = "run the driver as the spool's owner (root: sudo onite run)"


def ensure_dir(path: Path) -> None:
    """SPOOL/locks/ at ``path``, made if missing: a folder of this user's, closed to others (a wider mode is
    narrowed). Raises Refused: the spool is root's; SpoolError: not a folder, or another user's; SpoolIOError."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except PermissionError:
        raise Refused(f"cannot make {path}: the locks of this spool are its owner's", _OWNERS_ONLY) from None
    except OSError as err:
        raise SpoolIOError(path, "creating", err) from None
    try:
        st = os.lstat(path)
    except OSError as err:
        raise SpoolIOError(path, "looking at", err) from None
    if not stat.S_ISDIR(st.st_mode):
        raise SpoolError(f"{path} is not a folder", "remove it and run onite init")
    euid = os.geteuid()
    if st.st_uid != euid:
        if euid != 0:
            raise Refused(f"{path} belongs to {user_name(st.st_uid)}: the locks of this spool are its owner's",
                          _OWNERS_ONLY)
        raise SpoolError(f"{path} belongs to {user_name(st.st_uid)}, not root", "remove it and run onite init")
    if stat.S_IMODE(st.st_mode) != 0o700:
        try:
            os.chmod(path, 0o700)
        except OSError as err:
            raise SpoolIOError(path, "closing", err) from None


class Lock:
    """A held flock; ``release`` (or the holder's death) lets it go."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = -1

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def take(path: Path, *, timeout: float, holder: str = "") -> Lock | None:
    """flock the lock file ``path`` (made if missing: a regular file of this user's, 0600) exclusively, trying
    for at most ``timeout`` seconds; None if another holds it. ``holder`` is written into it, for root's eyes.
    Raises Refused: the spool is root's; SpoolError: not a regular file of this user's; as ensure_dir."""
    ensure_dir(path.parent)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except PermissionError:
        raise Refused(f"cannot open {path}: the locks of this spool are its owner's",
                      "run it as the spool's owner (root: sudo onite …)") from None
    except OSError as err:
        raise SpoolIOError(path, "opening", err) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise SpoolError(f"{path} is not a lock file of {user_name(os.geteuid())}", "remove it and run onite init")
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    except OSError as err:
        os.close(fd)
        raise SpoolIOError(path, "checking", err) from None
    except SpoolError:
        os.close(fd)
        raise
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.1)
        except OSError as err:
            os.close(fd)
            raise SpoolIOError(path, "locking", err) from None
    if holder:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{holder}\n".encode(), 0)
        except OSError:
            pass  # a courtesy; the flock is what counts
    return Lock(fd)


def leave_wake(spool: SpoolDir, host: str) -> bool:
    """Leave ``locks/wake.HOST``, asking HOST's idle daemon to drain now; False if it cannot. Raises as ensure_dir."""
    ensure_dir(spool.locks_dir)
    try:
        os.close(os.open(spool.wake_path(host), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except OSError:
        return False
    return True


def take_wake(spool: SpoolDir, host: str) -> bool:
    """Take (remove) the request ``leave_wake`` left; False if there was none. Raises OSError."""
    try:
        os.unlink(spool.wake_path(host))
        return True
    except FileNotFoundError:
        return False
