"""Handing a drain to an idle daemon: the request ``locks/wake.HOST``, and a USR2 to cut its sleep short.

``onite run`` finds this host's lock held by an idle daemon (its heartbeat
says so), and ``onite daemon --wake`` is asked to: either leaves the request
file, which only the spool's owner may write (locks/ is theirs alone), and
signals the daemon if it runs on this machine; the daemon takes the request
on its next look (it polls every few seconds anyway) and drains at once.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from onite.drain.heartbeat import Beat
from onite.exec.contain import process_start_ticks
from onite.spool.locks import ensure_dir, locks_dir
from onite.spool.paths import SpoolDir


def wake_path(spool: SpoolDir, host: str) -> Path:
    """``locks/wake.HOST``: the request that HOST's daemon drain now (only the spool's owner may write it)."""
    return locks_dir(spool.root) / f"wake.{host}"


def request_wake(spool: SpoolDir, host: str, beat: Beat) -> bool:
    """Tell HOST's daemon (its heartbeat ``beat``) to drain now: leave the request, then cut its sleep
    short with USR2 if it runs on this machine. False if the request cannot be left.

    Raises:
        Refused, SpoolError, SpoolIOError: the spool's locks/ folder is not this user's (onite.spool.locks).
    """
    ensure_dir(spool.root)
    try:
        fd = os.open(wake_path(spool, host), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)
    except OSError:
        return False
    same_process = beat.machine == os.uname().nodename and (
        beat.start_ticks is None or process_start_ticks(beat.pid) == beat.start_ticks)
    if same_process:
        try:
            os.kill(beat.pid, signal.SIGUSR2)
        except OSError:
            pass  # it polls for the request every few seconds anyway
    return True


def take_request(spool: SpoolDir, host: str) -> bool:
    """Was HOST's daemon told to drain now? Takes (removes) the request.

    Raises:
        OSError: the request cannot be removed (the caller logs it).
    """
    try:
        os.unlink(wake_path(spool, host))
        return True
    except FileNotFoundError:
        return False
