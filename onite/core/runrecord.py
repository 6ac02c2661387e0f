"""The run record ``running/HOST/NAME@run``: what a run's driver and monitor say about it (the model: pure).

It is a file of JSON lines, appended to and never rewritten, in a folder
only root may write (world-readable, so ``onite list`` shows who runs what):

    {"record": 2, "run_id": …, "name": …, "rank": 3, "attempt": 1, "started": …, …}   the driver, before the start
    {"event": "monitor", "pid": 4711, "ticks": 123456}                             the monitor, first
    {"event": "job", "pid": 4712}                                                  the job is running
    {"event": "ended", "status": 0, "at": "…", "usage": {…}}                      how it ended (a wait status), what it used
    {"event": "failed", "reason": "cannot enter its directory …", "at": "…"}      it could not be started
    {"event": "stop", "why": "timeout", "by": null}                                it is being stopped, and why

The driver creates the file and writes the first line before it hands the
run to a monitor; the monitor appends the others, each with one write(2) on an
O_APPEND descriptor, so a reader sees whole lines plus at most one partial
last line, which it ignores. Because the monitor records how the job ended
before anyone acts on it, that outlives the driver (docs/job-control.md,
"Exactly once"); the order of the lines is what recovery decides from:

- no ``monitor`` line: the job was never started (the monitor writes it
  before it forks the job, while it still holds the driver lock that came
  with the run, so no other driver can recover the claim in between);
- ``ended`` or ``failed``: how it ended, whether or not a driver was alive;
  a ``stop`` line before the end says it was stopped (its time limit, by
  its monitor; a cancel or a hard stop, by a driver, which writes the line
  before it asks the monitor to stop the job), so whoever files the run
  files it as timed out, cancelled or interrupted, whatever status the
  job ended with;
- ``monitor`` and no end: it runs, or ran while its monitor was killed.

Reading, creating and extending the file is onite.spool.runrecords'; the
monitor (onite.exec.monitor), which imports only what it runs, writes its
event lines with ``json.dumps(event, separators=(",", ":"))``, the same
text as ``line`` (tests/test_pure.py checks that they agree).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from onite.core.resources import MAX_CPUS, MAX_MEM, Need
from onite.core.state import Outcome, Stop, memory_outcome, outcome_from_status, stopped_outcome

VERSION = 2
MAX_GRACE = 86_400.0  # seconds: a kill grace read back from a record is at most a day


class Event(StrEnum):
    """The kinds of line after the driver's first one."""

    MONITOR = "monitor"  #: the monitor is running (its pid and start time); before it forks the job
    JOB = "job"  #: the job's process is running (its pid)
    ENDED = "ended"  #: how the job ended (a wait status)
    FAILED = "failed"  #: it could not be started (the reason)
    SUBMITTED = "submitted"  #: Slurm has the job (its id: ``external_id``); the first line is written before sbatch runs
    STOP = "stop"  #: it is being stopped (``why``: a Stop; ``by``: who cancelled it), before it is signalled


@dataclass(frozen=True)
class RunRecord:
    """What a run record says (``parse``)."""

    version: int
    info: dict  # the driver's first line
    monitor_pid: int | None = None
    monitor_ticks: int | None = None
    job_pid: int | None = None
    status: int | None = None  # the job's wait status, once it ended
    failed: str | None = None  # why it could not be started
    ended_at: str | None = None  # ISO 8601, when the monitor saw it end
    usage: dict | None = None  # what the job used (peak_mem bytes, cpu seconds, oom), said with ``ended``
    stop: Stop | None = None  # why it was stopped, if a stop line came before its end
    stopped_by: str | None = None  # who cancelled it
    damaged: bool = False  # a whole line of it cannot be read: what it lost cannot be known
    events: tuple[dict, ...] = field(default=())

    @property
    def started_job(self) -> bool:
        """Was the job's process ever forked? (Not before the monitor line.)"""
        return self.monitor_pid is not None

    @property
    def ended(self) -> bool:
        return self.status is not None or self.failed is not None

    def get(self, key: str, default=None):
        return self.info.get(key, default)

    def outcome(self, need: Need | None) -> Outcome | None:
        """How the run ended, as recorded (None: no end is recorded); ``need``: what it asked for (a job
        the kernel killed for its memory is out of memory)."""
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
        """The request the run was admitted with (``admitted_need``)."""
        return admitted_need(self.info)

    def latest_end(self) -> datetime | None:
        """When the run has ended at the latest: its ``deadline`` and ``kill_grace`` (the local executor's;
        None: no time limit, or a record that does not say)."""
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
    """The request a run was admitted with, as the driver's first line of its record says (``mem`` MiB,
    ``cpus``; 0 for what it does not say): what it holds while it runs, whatever
    its job file, which its owner may rewrite, says since."""
    return Need(*(value if (value := _int(info.get(key))) is not None and 0 <= value <= high else 0
                  for key, high in (("mem", MAX_MEM), ("cpus", MAX_CPUS))))


def first_line(info: dict) -> bytes:
    """The driver's first line of a record holding ``info``."""
    return line({"record": VERSION, **info})


def line(data: dict) -> bytes:
    """One line of a run record: compact JSON and a newline."""
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()


def parse(data: bytes) -> RunRecord | None:
    """The record ``data`` holds; None if its first line is not the driver's (a JSON object with the
    ``record`` version). A partial last line (being written) and a damaged line are skipped: never an
    error for what the file holds."""
    if not data.endswith(b"\n") and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]  # a partial last line is being written: not yet there
    lines = data.split(b"\n")
    first = _object(lines[0])
    if first is None or _int(first.get("record")) is None:
        return None
    values: dict = {"monitor_pid": None, "monitor_ticks": None, "job_pid": None, "status": None,
                    "failed": None, "ended_at": None, "usage": None, "stop": None, "stopped_by": None}
    events, damaged = [], False
    for raw in lines[1:]:
        event = _object(raw)
        if event is None:
            damaged = damaged or bool(raw.strip())
            continue
        events.append(event)
        kind = event.get("event")
        if kind == Event.MONITOR:
            values["monitor_pid"], values["monitor_ticks"] = _int(event.get("pid")), _int(event.get("ticks"))
        elif kind == Event.JOB:
            values["job_pid"] = _int(event.get("pid"))
        elif kind == Event.ENDED and _int(event.get("status")) is not None:
            values["status"] = _int(event.get("status"))
            values["ended_at"] = event.get("at") if isinstance(event.get("at"), str) else None
            values["usage"] = event.get("usage") if isinstance(event.get("usage"), dict) else None
        elif kind == Event.STOP and values["stop"] is None and values["status"] is None and values["failed"] is None \
                and event.get("why") in set(Stop):
            values["stop"] = Stop(event["why"])
            values["stopped_by"] = event.get("by") if isinstance(event.get("by"), str) else None
        elif kind == Event.FAILED:
            values["failed"] = str(event.get("reason") or "it could not be started")
            values["ended_at"] = event.get("at") if isinstance(event.get("at"), str) else None
        elif kind == Event.SUBMITTED and isinstance(event.get("external_id"), str) and not first.get("external_id"):
            first = {**first, "external_id": event["external_id"]}
    return RunRecord(version=first["record"], info=first, events=tuple(events), damaged=damaged, **values)


def _object(raw: bytes) -> dict | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and -(1 << 62) < value < 1 << 62 else None
