"""Driver locks: mutual exclusion among drivers that no other user can take part in.

Invariant: every lock file lives in SPOOL/locks/, a folder that only the
spool's owner (root on a system spool) may enter (0700), and is itself
0600: no other user can open a lock file, so none can hold one (flock(2)
needs only a descriptor, and any descriptor would do). Every wait for a
lock is bounded: ``take`` gives up after ``timeout`` and says so.

- ``locks/driver.HOST.lock``: held by HOST's driver (``onite run``, or
  ``onite daemon`` for its whole life). The kernel drops a flock when its
  holder dies, so a crashed driver never leaves a stale lock behind.
- ``locks/recur.lock``: one read-modify-write of recur.state at a time.
- ``locks/wake.HOST``: not a lock but a request, left where only the spool's
  owner may write, that HOST's idle daemon drain now (onite.drain.wake).

Since users cannot probe the lock, whether a driver is alive is read from
its world-readable heartbeat (onite.drain.heartbeat): everything that asks
"is a driver running?" goes through that.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from pathlib import Path

from onite.core.errors import Refused, SpoolError, SpoolIOError
from onite.spool.paths import SpoolDir


def ensure_dir(root: Path) -> Path:
    """SPOOL/locks/, made if missing; it must be a folder of this user that nobody else may enter.

    A folder with group or other bits set is closed (0700): only its owner could have opened it.

    Raises:
        Refused: this user may not make it (the spool is someone else's: root's).
        SpoolError: it is not a folder, or belongs to someone else.
        SpoolIOError: it cannot be made or looked at.
    """
    path = SpoolDir(root).locks_dir
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except PermissionError:
        raise Refused(f"cannot make {path}: the locks of this spool are its owner's",
                      "run the driver as the spool's owner (root: sudo onite run)") from None
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
            raise Refused(f"{path} belongs to {_user(st.st_uid)}: the locks of this spool are its owner's",
                          "run the driver as the spool's owner (root: sudo onite run)")
        raise SpoolError(f"{path} belongs to {_user(st.st_uid)}, not root", "remove it and run onite init")
    if stat.S_IMODE(st.st_mode) != 0o700:
        try:
            os.chmod(path, 0o700)
        except OSError as err:
            raise SpoolIOError(path, "closing", err) from None
    return path


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class Lock:
    """A held flock on a lock file; ``release`` (or the holder's death) lets it go."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = -1

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def open_lock_file(path: Path) -> int:
    """A descriptor of the lock file ``path`` (made 0600 if missing), checked: a regular file of this user
    that nobody else may open (a wider mode is narrowed to 0600).

    Raises:
        Refused: this user may not open it (the spool is root's).
        SpoolError: it is not a regular file of this user.
        SpoolIOError: any other failure.
    """
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
            raise SpoolError(f"{path} is not a lock file of {_user(os.geteuid())}", "remove it and run onite init")
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    except OSError as err:
        os.close(fd)
        raise SpoolIOError(path, "checking", err) from None
    except SpoolError:
        os.close(fd)
        raise
    return fd


def take(path: Path, *, timeout: float, holder: str = "") -> Lock | None:
    """flock ``path`` exclusively, trying for at most ``timeout`` seconds; None if another holds it.

    ``holder`` is written into the file (for root's eyes: nobody else can read it).

    Raises:
        Refused, SpoolError, SpoolIOError: as open_lock_file.
    """
    fd = open_lock_file(path)
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
            pass  # the holder line is a courtesy; the flock is what counts
    return Lock(fd, path)


def is_locked(path: Path) -> bool:
    """Does a live process hold the lock at ``path``? Only the spool's owner can tell (nobody else
    may open the file): for anyone else this is False, and the heartbeat is what to ask.

    Probes with a shared, non-blocking flock that it drops at once. A driver
    starting in that instant retries its own lock for a moment, so a probe
    never makes a driver give up.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops our shared lock, if we got it
    return False


def leave_wake(spool: SpoolDir, host: str) -> bool:
    """Leave the request ``locks/wake.HOST``; False if it cannot be left.

    Raises:
        Refused, SpoolError, SpoolIOError: the spool's locks/ folder is not this user's (``ensure_dir``).
    """
    ensure_dir(spool.root)
    try:
        os.close(os.open(spool.wake_path(host), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except OSError:
        return False
    return True


def take_wake(spool: SpoolDir, host: str) -> bool:
    """Was HOST's daemon asked to drain now (``leave_wake``)? Takes (removes) the request.

    Raises:
        OSError: the request cannot be removed (the caller logs it).
    """
    try:
        os.unlink(spool.wake_path(host))
        return True
    except FileNotFoundError:
        return False
