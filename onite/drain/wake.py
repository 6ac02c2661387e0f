"""Handing a drain to an idle daemon: the request ``locks/wake.HOST``, and a USR2 to cut its sleep short.

``onite run`` that finds this host's lock held by an idle daemon, and ``onite daemon --wake``, leave
the request (only the spool's owner may write locks/); the daemon takes it on its next look.
"""

from __future__ import annotations

import os
import signal

from onite.drain.heartbeat import Beat
from onite.exec.contain import process_start_ticks
from onite.spool.locks import leave_wake
from onite.spool.paths import SpoolDir


def request_wake(spool: SpoolDir, host: str, beat: Beat) -> bool:
    """Tell HOST's daemon (its heartbeat ``beat``) to drain now: leave the request, then USR2 it if it
    runs on this machine. False if the request cannot be left.
    Raises Refused, SpoolError, SpoolIOError: the spool's locks/ folder is not this user's."""
    if not leave_wake(spool, host):
        return False
    same_process = beat.machine == os.uname().nodename and (
        beat.start_ticks is None or process_start_ticks(beat.pid) == beat.start_ticks)
    if same_process:
        try:
            os.kill(beat.pid, signal.SIGUSR2)
        except OSError:
            pass  # it polls for the request every few seconds anyway
    return True


