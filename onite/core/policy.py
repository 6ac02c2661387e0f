"""Who may do what, and when: spooling closes at ``cutoff`` until ``until`` (else midnight); only root and the
``admins`` may have jobs run urgent; a job is its owner's and root's (``own_only = false``: anyone cancels).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta, tzinfo
from typing import TYPE_CHECKING

from onite.core.errors import Refused
from onite.core.record import Record
from onite.core.timeparse import local_time, next_clock

if TYPE_CHECKING:  # an annotation only: list, status, output and cancel need no Identity
    from onite.core.identity import Identity


def owner_or_root(caller_uid: int, owner_uid: int) -> bool:
    return caller_uid == 0 or caller_uid == owner_uid


class CutoffState(Record):
    """Whether spooling is closed now, and when it opens again."""

    closed: bool
    reopens: datetime | None = None


def cutoff_state(now: datetime, cutoff: time | None, until: time | None, zone: tzinfo | None = None) -> CutoffState:
    """Spooling at ``now``, read on the clock of ``zone`` (None: the machine's local time)."""
    if cutoff is None:
        return CutoffState(False)
    reopen = until or time(0, 0)
    clock = now.time().replace(tzinfo=None)
    if cutoff < reopen:  # e.g. cutoff 02:00, window until 07:00: closed within the same day
        closed = cutoff <= clock < reopen
    else:  # the usual evening cutoff: closed from the cutoff across midnight to the reopen time
        closed = clock >= cutoff or clock < reopen
    if not closed:
        return CutoffState(False)
    day = now.date() if clock < reopen else now.date() + timedelta(days=1)
    wall = datetime.combine(day, reopen)
    return CutoffState(True, local_time(wall, now) if zone is None else wall.replace(tzinfo=zone))


def may_be_urgent(identity: Identity, admins: tuple[str, ...]) -> bool:
    """Is ``identity`` root, named in ``admins``, or in a ``%group`` named there (only then looked up)?"""
    if identity.uid == 0 or identity.name in admins:
        return True
    groups = {admin[1:] for admin in admins if admin.startswith("%")}
    return bool(groups) and not groups.isdisjoint(identity.group_names())


def check_urgent(identity: Identity, admins: tuple[str, ...], what: str) -> None:
    """Raises Refused: ``identity`` may not have jobs run urgent."""
    if not may_be_urgent(identity, admins):
        raise Refused(f"only root and the admins named in onite.toml may {what}", "drop --urgent, or ask an admin")


def urgent_refusal(user: str) -> str:
    """The reason an urgent job of ``user``, who is no admin, is never run."""
    return f"urgent jobs need an admin; {user} is not one"


def may_touch(caller_uid: int, owner_uid: int, own_only: bool) -> bool:
    """May ``caller_uid`` cancel a job owned by ``owner_uid``?"""
    return owner_or_root(caller_uid, owner_uid) or not own_only


def window_end(start: datetime, until: time | None) -> datetime | None:
    """The first instant at or after ``start`` when the clock reads ``until`` (None: no end)."""
    return None if until is None else next_clock(until, start - timedelta(microseconds=1))
