"""``JobView``: a job as list, status, wait and the report show it; ``to_json`` is docs/json.md's document."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from onite.core.queue import reason_as_read
from onite.core.record import Record
from onite.core.resources import format_mem, human_bytes
from onite.core.state import Result, json_fields


class JobView(Record):
    """One job as ``onite list`` and ``onite status`` show it."""

    name: str
    uid: int
    user: str
    state: str
    priority: int | None  # None: urgent (runs before every priority)
    urgent: bool
    submitted: datetime  # when it entered its queue (queued), or was spooled (finished)
    position: int | None = None
    host: str | None = None
    started: datetime | None = None
    finished: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    attempt: int | None = None
    external_id: str | None = None
    nodes: str | None = None  # the nodes Slurm runs or ran it on (vm, n[01-04]); None: not in Slurm, or not yet
    stderr: str | None = None  # finished jobs: "separate" or "merged" (from the result record)
    waiting: str | None = None  # queued jobs: why it cannot start now, "" if it may; None: not looked up
    # held, after, not_before, retry, pinned, resources, will_fail, unreadable; "" may start
    waiting_kind: str | None = None
    mem: int | None = None  # finished jobs: MiB it asked for (onite.core.resources)
    cpus: int | None = None  # CPUs it asked for
    peak_mem: int | None = None  # bytes: the most memory it used at once
    cpu_time: float | None = None  # seconds of CPU it used
    timeout: float | None = None  # queued jobs: seconds of the time limit it asks for (list, of those it read)

    def used_mem(self) -> str:
        """Memory used against memory asked, for a table: ``312.5M/4G``, ``312.5M``, or ""."""
        used = human_bytes(self.peak_mem) if self.peak_mem is not None else ""
        return f"{used or '?'}/{format_mem(self.mem)}" if self.mem else used

    @property
    def duration(self) -> float | None:
        return (self.finished - self.started).total_seconds() if self.started and self.finished else None

    def to_json(self) -> dict:
        return json_fields(self, _JSON_KEYS)


# docs/json.md's fields of a job, in order: their names are stable
_JSON_KEYS = ("name", "user", "uid", "state", "priority", "urgent", "position", "submitted", "host", "started",
              "finished", "duration", "exit_code", "signal", "reason", "attempt", "external_id", "nodes", "stderr",
              "waiting", "waiting_kind", "mem", "cpus", "peak_mem", "cpu_time", "timeout")


def result_view(result: Result, reader: str | None = None) -> JobView:
    """A finished job as ``reader`` (None: its owner) reads it."""
    return JobView(
        name=result.name, uid=result.uid, user=result.user, state=str(result.state),
        priority=result.priority or None, urgent=result.urgent, submitted=result.submitted,
        host=result.host or None, started=result.started, finished=result.finished,
        exit_code=result.exit_code, signal=result.signal, reason=reason_as_read(result.reason, result.user, reader),
        attempt=result.attempt, external_id=result.external_id, nodes=result.nodes, stderr=result.stderr,
        mem=result.mem, cpus=result.cpus, peak_mem=result.peak_mem, cpu_time=result.cpu_time,
    )


def outcome_counts(views) -> dict[str, int]:
    """How many of ``views`` ended done, failed and cancelled (always those three keys)."""
    return {"done": 0, "failed": 0, "cancelled": 0, **Counter(view.state for view in views)}
