"""Where a dependency, a job key (``USER:NAME``), stands: one answer for the driver and ``onite status``."""

from __future__ import annotations

from onite.core.errors import DamagedRecord
from onite.core.queue import DepState
from onite.core.state import JobState
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result
from onite.spool.scan import Withdrawn, is_live, key_uid


def dependency_state(spool: SpoolDir, key: str, withdrawn: Withdrawn | None = None) -> DepState:
    """The state of job ``key`` (its user's, never a forgery) as a dependency: PENDING while queued or running,
    else its latest outcome, or MISSING. ``withdrawn``: cancel/ as the caller listed it. Raises SpoolIOError."""
    uid = key_uid(key)
    if uid is None:
        return DepState.MISSING
    if is_live(spool, key):
        return DepState.PENDING
    # withdrawn, not yet filed: the latest job of the name was cancelled, whatever an earlier one's result says
    if uid in (withdrawn if withdrawn is not None else Withdrawn(spool)).owners(key):
        return DepState.CANCELLED
    try:
        result = read_result(spool, key)
    except DamagedRecord:
        return DepState.DAMAGED
    if result is not None and result.uid == uid:
        return {JobState.DONE: DepState.OK, JobState.CANCELLED: DepState.CANCELLED}.get(result.state, DepState.FAILED)
    return DepState.MISSING
