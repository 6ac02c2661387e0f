"""Time, passed in: ``SYSTEM`` is the one reading of the system's clocks that decides anything
(docs/internals.md, "Time"); tests drive a clock of their own (tests/conftest.py).
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
        time.sleep(max(seconds, 0.0))


SYSTEM = Clock()


def set_back_since(recorded: datetime, now: datetime) -> bool:
    """Was the clock set back since ``recorded`` was written (it is past ``now`` beyond CLOCK_SLACK)? Then what
    was done at that time must not hold back what comes before it again."""
    return recorded > now + CLOCK_SLACK
