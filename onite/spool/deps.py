"""Where a dependency stands, as the spool shows it: one answer for the driver and ``onite status``.

A job spooled ``--after NAME`` waits while NAME is queued or running, runs
once NAME's latest result says done, and fails when that result says failed
or cancelled, cannot be read (damaged), when NAME was withdrawn and not yet
filed, or when NAME left no trace at all (queue.evaluate turns these states
into a verdict). The
driver adds what only it knows (jobs it runs or has not filed yet) before
asking here; everyone else asks here directly.
"""

from __future__ import annotations

from onite.spool.paths import SpoolDir
from onite.spool.results import read_result
from onite.spool.scan import withdrawn_entries, is_live
from onite.core.errors import DamagedRecord
from onite.core.queue import DepState
from onite.core.state import JobState


def dependency_state(spool: SpoolDir, name: str) -> DepState:
    """The state of job ``name`` as a dependency: pending while queued or running, else its latest outcome.

    Raises:
        SpoolIOError: a folder or result record cannot be read.
    """
    if is_live(spool, name):
        return DepState.PENDING
    try:
        result = read_result(spool, name)
    except DamagedRecord:
        return DepState.DAMAGED
    if result is not None:
        return {JobState.DONE: DepState.OK, JobState.CANCELLED: DepState.CANCELLED}.get(result.state, DepState.FAILED)
    if any(e.name == name for e in withdrawn_entries(spool)):
        return DepState.CANCELLED
    return DepState.MISSING
