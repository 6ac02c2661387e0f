"""The run record ``running/HOST/NAME@run`` (docs/spool-format.md): JSON lines, each one O_APPEND write, the
driver's first; the monitor writes its lines as ``line`` does (tests/test_pure.py checks it).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from onite.core.record import Record
from onite.core.resources import MAX_CPUS, MAX_MEM, Need
from onite.core.state import Outcome, Stop, memory_outcome, outcome_from_status, stopped_outcome
from onite.core.values import is_whole, loads_object

VERSION = 2
MAX_GRACE = 86_400.0  # seconds: a kill grace read back from a record is at most a day


class RunRecord(Record):
    """What a run record says (``parse``)."""

    info: dict  # the driver's first line
    monitor_pid: int | None = None
    monitor_ticks: int | None = None
    cgroup: str | None = None  # the job's cgroup, as its monitor made it (its line says)
    groups: tuple[str, ...] = ()  # the job's cgroup v1 groups, likewise
    job_pid: int | None = None
    status: int | None = None  # the job's wait status, once it ended
    exited: int | None = None  # its leader's wait status, said (``exited``) before its monitor ends what it left
    exited_at: str | None = None  # ISO 8601, when the monitor saw its leader exit
    failed: str | None = None  # why it could not be started
    ended_at: str | None = None  # ISO 8601, when the monitor saw it end
    usage: dict | None = None  # what the job used (peak_mem bytes, cpu seconds, oom), said with ``ended``
    stop: Stop | None = None  # why it was stopped, if a stop line came before its end
    stopped_by: str | None = None  # who cancelled it
    damaged: bool = False  # a whole line of it cannot be read: what it lost cannot be known
    slurm_state: str | None = None  # slurm: its job's state as the driver last saw it (PENDING, RUNNING, ...)
    slurm_reason: str | None = None  # and squeue's reason then (Resources, Priority, JobHeldUser, ...)
    slurm_started: str | None = None  # ISO 8601: its start in Slurm, once it really started (null: it has not)
    slurm_nodes: str | None = None  # the nodes Slurm gave it (vm, n[01-04]), once it started

    @property
    def started_job(self) -> bool:
        """Was the job's process ever forked? (Not before the monitor line.)"""
        return self.monitor_pid is not None

    @property
    def ended(self) -> bool:
        return self.status is not None or self.failed is not None

    def kept(self) -> RunRecord:
        """A record whose monitor died between ``exited`` and ``ended``, as if it had ended with that status."""
        if self.ended or self.exited is None:
            return self
        return self._replace(status=self.exited, ended_at=self.exited_at, usage=None)

    def get(self, key: str, default=None):
        return self.info.get(key, default)

    def outcome(self, need: Need | None) -> Outcome | None:
        """How the run ended, as recorded (None: no end is); ``need``: what it asked for (see memory_outcome)."""
        if self.status is not None:
            ended = memory_outcome(outcome_from_status(self.status), self.usage, need)
        elif self.failed is not None:
            ended = Outcome(reason=self.failed, never_started=self.job_pid is None)
        else:
            return None
        if self.stop is None or (self.stop == Stop.SHUTDOWN and ended.exit_code is not None):
            return ended  # not stopped, or it ended on its own before the hard stop's KILL reached it
        return stopped_outcome(ended, self.stop, self.stopped_by)

    @property
    def need(self) -> Need:
        return admitted_need(self.info)

    def latest_end(self) -> datetime | None:
        """Its ``deadline`` plus ``kill_grace`` (None: no time limit, or a record that does not say)."""
        deadline, grace = self.info.get("deadline"), self.info.get("kill_grace")
        if not isinstance(deadline, str) or isinstance(grace, bool) or not isinstance(grace, (int, float)) \
                or not 0 <= grace <= MAX_GRACE:
            return None
        try:
            when = datetime.fromisoformat(deadline)
            return when + timedelta(seconds=grace) if when.tzinfo else None
        except (ValueError, OverflowError):
            return None


def admitted_need(info: dict) -> Need:
    """The request a run was admitted with, as the driver's first line says (0 for what it does not say): what it
    holds while it runs, whatever its job file, which its owner may rewrite, says."""
    return Need(*(value if (value := _int(info.get(key))) is not None and 0 <= value <= high else 0
                  for key, high in (("mem", MAX_MEM), ("cpus", MAX_CPUS))))


def first_line(info: dict) -> bytes:
    """The driver's first line of a record holding ``info``."""
    return line({"record": VERSION, **info})


def line(data: dict) -> bytes:
    """One line of a run record: compact JSON and a newline."""
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()


def parse(data: bytes) -> RunRecord | None:
    """The record ``data`` holds; None if its first line is not the driver's. A partial last line is skipped, a
    line cut short by a full disk yields to the one after it (each starts ``{"event":``, which no JSON string holds
    unescaped), and a damaged one marks the record ``damaged``."""
    if not data.endswith(b"\n") and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    lines = data.split(b"\n")
    first = _object(lines[0])
    if first is None or _int(first.get("record")) is None:
        return None
    said: dict = {}
    for raw in lines[1:]:
        event = _object(raw[max(raw.rfind(b'{"event":'), 0):])  # a line a full disk cut short: the next after it
        if event is None:
            said["damaged"] = said.get("damaged", False) or bool(raw.strip())
            continue
        kind, at = event.get("event"), event.get("at")
        at = at if isinstance(at, str) else None
        if kind == "monitor":
            groups = event.get("groups")
            said.update(monitor_pid=_int(event.get("pid")), monitor_ticks=_int(event.get("ticks")),
                        cgroup=event.get("cgroup") if isinstance(event.get("cgroup"), str) else None,
                        groups=tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else ())
        elif kind == "job":
            said["job_pid"] = _int(event.get("pid"))
        elif kind == "exited" and _int(event.get("status")) is not None:
            said.update(exited=_int(event.get("status")), exited_at=at)
        elif kind == "ended" and _int(event.get("status")) is not None:
            usage = event.get("usage")
            said.update(status=_int(event.get("status")), ended_at=at, usage=usage if isinstance(usage, dict) else None)
        elif kind == "stop" and not said.keys() & {"stop", "status", "failed"} and event.get("why") in tuple(Stop):
            by = event.get("by")
            said.update(stop=Stop(event["why"]), stopped_by=by if isinstance(by, str) else None)
        elif kind == "failed":
            said.update(failed=str(event.get("reason") or "it could not be started"), ended_at=at)
        elif kind == "slurm" and isinstance(event.get("state"), str):
            reason, began, nodes = event.get("reason"), event.get("started"), event.get("nodes")
            said.update(slurm_state=event["state"], slurm_reason=reason if isinstance(reason, str) else None,
                        slurm_started=began if isinstance(began, str) else None,
                        slurm_nodes=nodes if isinstance(nodes, str) else said.get("slurm_nodes"))
        elif kind == "submitted" and isinstance(event.get("external_id"), str) and not first.get("external_id"):
            first = {**first, "external_id": event["external_id"]}
    return RunRecord(info=first, **said)


def _object(raw: bytes) -> dict | None:
    try:
        return loads_object(raw)
    except ValueError:
        return None


def _int(value) -> int | None:
    return value if is_whole(value, -(1 << 62) + 1, (1 << 62) - 1) else None
