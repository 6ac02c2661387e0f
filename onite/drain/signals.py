"""Signals to a driver, caught into a list and acted on between turns of its loop.

INT or TERM: start nothing, let running jobs finish; a second one, or QUIT: kill and requeue them;
USR1: a status line; HUP: re-read onite.toml; USR2: only wake the loop.
"""

from __future__ import annotations

import os
import signal

from onite.drain.night import Night


class SignalCatcher:
    """Route INT, TERM, QUIT, HUP, USR1 and USR2 into a list, and wake the driver's poll()."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

    def __init__(self, sink: list[int], *, leaving: bool = False) -> None:
        """``leaving``: the process ends after this catcher: its signals are then ignored, not given back
        to their default, so that one that comes after the driver logged its exit cannot kill it."""
        self.sink = sink
        self.leaving = leaving
        self.saved: dict[int, object] = {}

    def __enter__(self) -> int:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for sig in self.SIGNALS:
            self.saved[sig] = signal.signal(sig, self._handle)
        # `onite run --detach` starts the driver with these blocked: what came meanwhile is handled now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)
        return self.read_fd

    def _handle(self, signum, frame) -> None:
        self.sink.append(signum)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, signal.SIG_IGN if self.leaving else handler)
        signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.read_fd)
        os.close(self.write_fd)


def handle(night: Night, signals: list[int], reload) -> None:
    """Act on the ``signals`` caught since the last turn, in the order they came."""
    while signals:
        sig = signals.pop(0)
        if sig in (signal.SIGINT, signal.SIGTERM) and not night.stopping:
            night.stopping = True
            night.log.event("signal", sig=signal.Signals(sig).name,
                            action="finish running jobs, start none", running=len(night.running))
        elif sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):  # a second INT or TERM, or QUIT
            night.hard_stop = night.stopping = True
            night.log.event("signal", sig=signal.Signals(sig).name, action="kill running jobs and requeue them")
        elif sig == signal.SIGUSR1:
            queued = night.index.counts()
            night.log.event("status", running=",".join(sorted(night.running)) or "-", slots=night.slots,
                            queued=sum(queued.values()), done=night.counts["done"], failed=night.counts["failed"],
                            cancelled=night.counts["cancelled"], stopping="yes" if night.stopping else None)
        elif sig == signal.SIGHUP:
            reload()

