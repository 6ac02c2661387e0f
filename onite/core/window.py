"""Night windows: a schedule time opens one, closing at the first ``until`` after it; a drain that would
start after its window closed is a missed night, skipped (docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, time, timedelta

from onite.core.policy import window_end
from onite.core.record import Record
from onite.core.schedule import last_fire, next_drain

LOOKBACK = timedelta(hours=24)  # --scheduled: how far back a schedule time may open tonight's window


class Window(Record):
    """The night window that the schedule time ``opened`` began; ``closes`` None: no end."""

    opened: datetime
    closes: datetime | None

    def is_open(self, now: datetime) -> bool:
        return self.opened <= now and (self.closes is None or now < self.closes)


def window_of(fire: datetime, until: time | None) -> Window:
    """The window the schedule time ``fire`` opens."""
    return Window(fire, window_end(fire, until))


def scheduled_window(schedule: Sequence[str], until: time | None, now: datetime, *,
                     since: datetime | None = None) -> Window | None:
    """The window, perhaps closed, of the latest schedule time in (``since``, ``now``], or None.
    Raises InvalidInput: a schedule expression is not valid."""
    fire = last_fire(schedule, now, since=now - LOOKBACK if since is None else since)
    return window_of(fire, until) if fire is not None else None


class Plan(Record):
    """What the daemon does about the schedule at ``now``."""

    drain: datetime | None  # the schedule time whose night to drain now (None: nothing due)
    skipped: Window | None  # a due schedule time whose window already closed: log it, drain nothing
    handled: datetime | None  # the new "last schedule time handled" to remember (None: unchanged)
    next: datetime | None  # the next schedule time after ``handled`` (or after the old one)


def plan(schedule: Sequence[str], until: time | None, last: datetime, now: datetime) -> Plan:
    """Is a scheduled drain due at ``now``, every time up to ``last`` handled? Of missed times only the latest
    counts, while its window is open. Raises InvalidInput: a schedule expression is not valid."""
    upcoming = next_drain(schedule, last)
    if upcoming is None or upcoming > now:
        return Plan(None, None, None, upcoming)
    window = scheduled_window(schedule, until, now, since=last)
    assert window is not None  # upcoming lies in (last, now]
    following = next_drain(schedule, window.opened)
    if window.is_open(now):
        return Plan(window.opened, None, window.opened, following)
    return Plan(None, window, window.opened, following)
