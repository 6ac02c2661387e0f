"""Night windows: when a scheduled drain may still run (pure: the clock is an argument).

A time of ``schedule`` opens a *night window*; it closes at the first ``until``
at or after that time (never, when ``until`` is unset). A drain that starts
inside a window is the night's drain; one that would start after the window
closed is a missed night, and it is skipped, never run in the morning:

- ``onite run --scheduled`` (the systemd timer, which Persistent=true may
  start late, e.g. at boot) drains only inside the window opened by the
  latest schedule time of the last 24 hours;
- ``onite daemon`` catches up a missed schedule time ONCE (the latest one
  missed, however many nights it was down) and only while its window is
  still open.

Invariant: nothing here reads the clock or touches a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta

LOOKBACK = timedelta(hours=24)  # --scheduled: how far back a schedule time may open tonight's window


@dataclass(frozen=True)
class Window:
    """The night window that the schedule time ``opened`` began; ``closes`` None: no end."""

    opened: datetime
    closes: datetime | None

    def is_open(self, now: datetime) -> bool:
        return self.opened <= now and (self.closes is None or now < self.closes)


def window_of(fire: datetime, until: time | None) -> Window:
    """The window a schedule time opens: it closes at the first ``until`` at or after it, a
    wall time in ``fire``'s zone, under schedule.py's DST policy (an ``until`` the clocks
    skip closes the window at the jump; one they repeat, at its first pass).
    """
    if until is None:
        return Window(fire, None)
    from onite.core.schedule import next_fire
    from onite.core.rules import CronRule

    return Window(fire, next_fire(CronRule(f"{until.minute} {until.hour} * * *"), fire - timedelta(microseconds=1)))


def scheduled_window(schedule: Sequence[str], until: time | None, now: datetime, *,
                     since: datetime | None = None) -> Window | None:
    """The window of the latest schedule time in (``since``, ``now``], or None if there is
    none (``since`` defaults to 24 hours before ``now``). It may already be closed.

    Raises:
        InvalidInput: a schedule expression is not valid.
    """
    from onite.core.schedule import last_fire

    if not schedule:
        return None
    fire = last_fire(schedule, now, since=now - LOOKBACK if since is None else since)
    return window_of(fire, until) if fire is not None else None


@dataclass(frozen=True)
class Plan:
    """What the daemon does about the schedule at ``now``.

    ``drain``: the schedule time whose night it should drain now (None: nothing due).
    ``skipped``: a due schedule time whose window already closed (log it, drain nothing).
    ``handled``: the new "last schedule time handled" to remember (None: unchanged).
    ``next``: the next schedule time after ``handled`` (or after the old one).
    """

    drain: datetime | None
    skipped: Window | None
    handled: datetime | None
    next: datetime | None


def plan(schedule: Sequence[str], until: time | None, last: datetime, now: datetime) -> Plan:
    """Is a scheduled drain due at ``now``, given that every schedule time up to ``last``
    was handled? Missed times are coalesced: only the latest counts, and only while its
    window is open.

    Raises:
        InvalidInput: a schedule expression is not valid.
    """
    from onite.core.schedule import next_drain

    if not schedule:
        return Plan(None, None, None, None)
    upcoming = next_drain(schedule, last)
    if upcoming is None or upcoming > now:
        return Plan(None, None, None, upcoming)
    window = scheduled_window(schedule, until, now, since=last)
    assert window is not None  # upcoming lies in (last, now]
    following = next_drain(schedule, window.opened)
    if window.is_open(now):
        return Plan(window.opened, None, window.opened, following)
    return Plan(None, window, window.opened, following)
