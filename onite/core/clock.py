"""Time, passed in: the one reading of the system's clocks.

``SYSTEM`` is the only reading of the wall and monotonic clocks that decides anything, but for the kernel's
file timestamps and the lines a job's monitor stamps (a process of its own that imports nothing of
onite.core: docs/internals.md, "Time"); tests drive a clock of their own (tests/conftest.py).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

# how far another host's clock may be ahead of this one's (NTP keeps them much closer)
CLOCK_SLACK = timedelta(minutes=2)


class Clock:
    """The machine's wall time, monotonic time, and a way to let time pass."""

    def now(self) -> datetime:
        """The wall clock: an aware datetime in the machine's zone."""
        return datetime.now().astimezone()

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines)."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        time.sleep(max(seconds, 0.0))


SYSTEM = Clock()


def set_back_since(recorded: datetime, now: datetime) -> bool:
    """Was the clock set back since ``recorded`` was written? It is later than ``now``, beyond CLOCK_SLACK: what
    was done at that time (a fire spooled, a drain handled) must not hold back what comes before it again."""
    return recorded > now + CLOCK_SLACK
