"""Time, passed in: the one reading of the system's clocks, and a clock that tests drive.

``SYSTEM`` is the only reading of the wall and monotonic clocks that decides anything, but for the kernel's
file timestamps and the lines a job's monitor stamps (a process of its own that imports nothing of
onite.core: docs/internals.md, "Time"); ``ManualClock`` moves when told.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol

_UTC_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ctime_ns_upto(when: datetime) -> int:
    """The latest ctime in ns that ``when`` (a kernel ctime kept to the microsecond) can stand for."""
    return (when - _UTC_EPOCH) // timedelta(microseconds=1) * 1000 + 999


class Clock(Protocol):
    """Wall time, monotonic time, and a way to let time pass."""

    def now(self) -> datetime:
        """The wall clock: an aware datetime in the machine's zone."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines)."""

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass."""


class SystemClock:
    """The machine's clocks."""

    def now(self) -> datetime:
        return datetime.now().astimezone()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))


SYSTEM = SystemClock()


class ManualClock:
    """A clock that moves only when told (``advance``, ``set``, or ``sleep``, which advances it)."""

    def __init__(self, start: datetime, monotonic: float = 1000.0) -> None:
        """Raises ValueError: ``start`` is naive."""
        if start.tzinfo is None:
            raise ValueError("a ManualClock starts at an aware datetime")
        self._now = start
        self._mono = monotonic

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> None:
        """Move both clocks ``seconds`` on."""
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, when: datetime) -> None:
        """Move the wall clock to ``when`` (and the monotonic one as far, never back).
        Raises ValueError: ``when`` is before the clock's present reading."""
        step = (when - self._now).total_seconds()
        if step < 0:
            raise ValueError(f"a ManualClock does not go back ({when.isoformat()} is before {self._now.isoformat()})")
        self.advance(step)
