"""Signals to a driver, caught into a list and acted on between turns of its loop.

INT or TERM → start nothing new, let running jobs finish, exit 0; a second
INT/TERM, or QUIT → kill the running jobs' process groups, put the jobs back
in their queues, exit 0; USR1 → a status line in the log; HUP → re-read
onite.toml; USR2 only wakes the loop (how ``onite run`` and ``onite daemon
--wake`` hand a drain to an idle daemon). A handler only appends the signal
to a list and the wakeup descriptor makes the loop's poll return: nothing is
done inside a handler.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from onite.core.errors import OniteError
from onite.core.policy import window_end
from onite.core.state import Stop

if TYPE_CHECKING:
    from onite.drain.driver import Driver


class SignalCatcher:
    """Route INT, TERM, QUIT, HUP, USR1 and USR2 into a list, and wake the driver's poll()."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

    def __init__(self, sink: list[int]) -> None:
        self.sink = sink
        self.saved: dict[int, object] = {}

    def __enter__(self) -> int:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for sig in self.SIGNALS:
            self.saved[sig] = signal.signal(sig, self._handle)
        # `onite run --detach` starts the driver with these blocked (its pid is printed before it
        # gets here): what arrived meanwhile is delivered now, to the handler
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)
        return self.read_fd

    def _handle(self, signum, frame) -> None:
        self.sink.append(signum)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.read_fd)
        os.close(self.write_fd)


def handle(d: Driver) -> None:
    """Act on the signals caught since the last turn, in the order they came."""
    while d.signals:
        sig = d.signals.pop(0)
        if sig in (signal.SIGINT, signal.SIGTERM):
            if d.stopping:
                d.hard_stop = True
                d.log.event("signal", sig=signal.Signals(sig).name, action="kill running jobs and requeue them")
            else:
                d.stopping = True
                d.log.event("signal", sig=signal.Signals(sig).name,
                            action="finish running jobs, start none", running=len(d.running))
        elif sig == signal.SIGQUIT:
            d.hard_stop = d.stopping = True
            d.log.event("signal", sig="SIGQUIT", action="kill running jobs and requeue them")
        elif sig == signal.SIGUSR1:
            _status_line(d)
        elif sig == signal.SIGHUP:
            _reload(d)


def kill_all(d: Driver) -> None:
    """The hard stop: kill every running job (each goes back to its queue when it has ended)."""
    for run in list(d.running.values()):
        if run.stopping != Stop.SHUTDOWN:
            d.runner.kill(run, Stop.SHUTDOWN)


def _status_line(d: Driver) -> None:
    queued = d.index.counts()
    d.log.event("status", running=",".join(sorted(d.running)) or "-", slots=d.slots,
                queued=sum(queued.values()), done=d.counts["done"], failed=d.counts["failed"],
                cancelled=d.counts["cancelled"], stopping="yes" if d.stopping else None)


def _reload(d: Driver) -> None:
    try:
        config = d.spool.reload_config()
    except OniteError as err:
        d.log.event("reload-failed", error=str(err), note="keeping the previous settings")
        return
    d.config = config
    d.index.set_folders(d.spool.queue_folders())
    d.runner.reload(config)
    d.window_end = window_end(d.started_at, d.until)
    d.log.event("reloaded", slots=d.slots, priorities=config.priorities)
