"""``admit``: may a job's request start on a host? In strict order nothing passes the first job that waits for
room (the head); with backfill a later job may start where it cannot delay the head (Slurm's estimate).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum

from onite.core.record import Record
from onite.core.resources import Need, too_big


class Busy(Record):
    """A running job's request and when it ends at the latest (None: no time limit)."""

    need: Need
    ends: datetime | None


def free_room(capacity: Need, running: Iterable[Busy]) -> Need:
    return capacity - sum((busy.need for busy in running), Need(0, 0, 0))


class Reservation(Record):
    """When the head job can start at the latest (None: unknown) and what stays free beside it then."""

    at: datetime | None
    spare: Need


def reserve(capacity: Need, running: list[Busy], head: Need) -> Reservation:
    """The head job's reservation: running jobs end, by their latest end, until it fits. Where only a job with no
    time limit could make room, its start is unknown, and what is free now beyond its request may run beside it."""
    free = now = free_room(capacity, running)
    for busy in sorted((b for b in running if b.ends is not None), key=lambda b: b.ends):
        free = free + busy.need
        if head.fits(free):
            return Reservation(busy.ends, free - head)
    return Reservation(None, Need(*(max(amount, 0) for amount in now - head)))


def may_backfill(need: Need, ends: datetime | None, free: Need, head: Reservation) -> bool:
    """May a job start now past the head job: it fits now, and ends before the head's reservation or fits beside it?"""
    if not need.fits(free):
        return False
    if head.at is not None and ends is not None and ends <= head.at:
        return True
    return need.fits(head.spare)


def latest_end(start: datetime, timeout: timedelta | None, grace: timedelta) -> datetime | None:
    """When a job started at ``start`` has ended at the latest: its time limit and the kill grace (None: never)."""
    return None if timeout is None else start + timeout + grace


class Admit(StrEnum):
    """What ``admit`` decides for a job that may start as far as the queue goes."""

    START = "start"  #: it fits: start it
    BACKFILL = "backfill"  #: it fits past the waiting head job without delaying it
    WAIT = "wait"  #: it does not fit now, or could delay the head job (the reason says which)
    BEHIND = "behind"  #: strict order: a job before it waits for room, and nothing passes that
    NEVER = "never"  #: it asks for more than the host has at all


class Room(Record):
    """A host at one moment: its name and capacity, its running jobs, what they leave free."""

    host: str
    capacity: Need
    running: tuple[Busy, ...]
    free: Need

    def with_started(self, busy: Busy) -> Room:
        """This room once one more job runs (``free`` less its request: not summed again)."""
        return Room(self.host, self.capacity, (*self.running, busy), self.free - busy.need)


def room(host: str, capacity: Need, running: Iterable[Busy]) -> Room:
    running = tuple(running)
    return Room(host, capacity, running, free_room(capacity, running))


class Head(Record):
    """The first job of a pass over the queue that waits for room, and its reservation (None: strict order)."""

    name: str
    need: Need
    reservation: Reservation | None


def head_of(name: str, need: Need, where: Room, *, backfill: bool) -> Head:
    """``name`` as the head job in ``where``: with backfill, its reservation."""
    return Head(name, need, reserve(where.capacity, list(where.running), need) if backfill else None)


class Admission(Record):
    """The verdict, its reason as ``onite list`` and the log say it, and the head job for the rest of the pass."""

    verdict: Admit
    reason: str = ""
    head: Head | None = None


def admit(name: str, need: Need, ends: datetime | None, where: Room, head: Head | None, *,
          backfill: bool) -> Admission:
    """May the ready job ``name`` start now in ``where``, past ``head`` (None: none waits for room yet)? A pass
    looks at ready jobs in queue order; the first that does not fit becomes the head."""
    problem = too_big(need, where.capacity)
    if problem:
        return Admission(Admit.NEVER, f"{problem}: it can never run on host {where.host}", head)
    if head is None:
        if need.fits(where.free):
            return Admission(Admit.START)
        return Admission(Admit.WAIT, f"waits for {need.shortage(where.free)}",
                         head_of(name, need, where, backfill=backfill))
    if head.reservation is None:
        return Admission(Admit.BEHIND, f"waits behind {head.name}", head)
    if may_backfill(need, ends, where.free, head.reservation):
        return Admission(Admit.BACKFILL, "", head)
    if not need.fits(where.free):
        return Admission(Admit.WAIT, f"waits for {need.shortage(where.free)}", head)
    return Admission(Admit.WAIT, f"waits behind {head.name}: it could delay {head.name}'s start", head)
