"""Where a dependency stands, as the spool shows it: one answer for the driver and ``onite status``.

A job waits only for its own user's job of a name, as Slurm's ``singleton`` counts only the user's
own jobs: anyone may spool a free name, and another user's job under it must neither hold this one
back nor let it run (nor, by failing, fail it). ``USER:NAME`` names another user's job.
"""

from __future__ import annotations

from onite.core.errors import DamagedRecord
from onite.core.names import split_dependency
from onite.core.queue import DepState
from onite.core.state import JobState
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result
from onite.spool.scan import Withdrawn, live_owners, user_name

_OUTCOMES: dict[str, object] = {}  # spool root → its log's Outcomes


def dependency_of(dep: str, uid: int) -> tuple[str, int | None]:
    """The job name and owner a dependency ``dep`` of ``uid``'s job names (uid None: no such user)."""
    user, name = split_dependency(dep)
    if user is None:
        return name, uid
    import pwd

    try:
        return name, pwd.getpwnam(user).pw_uid
    except KeyError:
        return name, None


def dependency_state(spool: SpoolDir, name: str, uid: int | None, withdrawn: Withdrawn | None = None) -> DepState:
    """The state of ``uid``'s job ``name`` as a dependency: PENDING while queued or running, else its
    latest outcome; FOREIGN if only another user's job has the name; MISSING if there is no such
    user or no trace. ``withdrawn``: cancel/ as the caller listed it, else it is listed here.
    Raises SpoolIOError: a folder or result record cannot be read."""
    if uid is None:
        return DepState.MISSING
    owners = live_owners(spool, name)
    if uid in owners:
        return DepState.PENDING
    try:
        result = read_result(spool, name)
    except DamagedRecord:
        return DepState.DAMAGED
    if result is not None and result.uid == uid:
        return {JobState.DONE: DepState.OK, JobState.CANCELLED: DepState.CANCELLED}.get(result.state, DepState.FAILED)
    withdrawers = (withdrawn if withdrawn is not None else Withdrawn(spool)).owners(name)
    if uid in withdrawers:
        return DepState.CANCELLED
    if result is not None:  # another user's run of the name since: the log may tell how the owner's ended
        from onite.spool.log import Outcomes

        # the log is read once per process, then only what is appended to it
        event = _OUTCOMES.setdefault(str(spool.root), Outcomes(spool.log_path)).last(name, user_name(uid))
        told = {"done": DepState.OK, "failed": DepState.FAILED, "cancelled": DepState.CANCELLED}.get(event)
        if told is not None:
            return told
    if owners or withdrawers or result is not None:
        return DepState.FOREIGN
    return DepState.MISSING


def name_owner(spool: SpoolDir, name: str) -> int | None:
    """The uid of a user whose job (queued, running, withdrawn or kept) is called ``name``, if one can be told.
    Raises SpoolIOError: a folder cannot be looked into."""
    owners = live_owners(spool, name) | Withdrawn(spool).owners(name)
    if owners:
        return min(owners)
    try:
        result = read_result(spool, name)
    except DamagedRecord:
        return None
    return result.uid if result is not None else None
