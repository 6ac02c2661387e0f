"""SPOOL/cron.HOST.state: the world-readable record of the cron entry that drains the spool on HOST (only
root may read root's crontab), and of the next drain, which a driver that cron started keeps current.
Only the spool's owner writes it; every field is still checked on reading.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from onite.core import values
from onite.core.errors import OniteError
from onite.core.record import Record
from onite.spool.files import read_small, replace_file
from onite.spool.paths import CRON_RECORD, SpoolDir

FORMAT = 1


def record_path(spool: SpoolDir, host: str) -> Path:
    return spool.state_path(CRON_RECORD, host)


class CronRecord(Record):
    """What ``onite cron --install`` put in a crontab on ``host``."""

    host: str
    machine: str
    schedule: tuple[str, ...]
    command: str
    installed: datetime
    user: str
    next_drain: datetime | None

    def to_json(self) -> dict:
        return {"version": FORMAT, "host": self.host, "machine": self.machine, "schedule": list(self.schedule),
                "command": self.command, "installed": self.installed.isoformat(), "user": self.user,
                "next_drain": self.next_drain.isoformat() if self.next_drain else None}

    @classmethod
    def from_json(cls, data: dict) -> "CronRecord | None":
        """The record ``data`` describes, or None if a field is missing or out of range."""
        try:
            schedule = data.get("schedule")
            if data.get("version") != FORMAT or not isinstance(schedule, list) \
                    or not all(isinstance(e, str) for e in schedule):
                return None
            host, machine, command, user = (values.text(data, key) for key in ("host", "machine", "command", "user"))
            return cls(host, machine, tuple(schedule), command, values.time(data, "installed"), user,
                       values.optional_time(data, "next_drain"))
        except ValueError:
            return None


def read_records(spool: SpoolDir) -> list[CronRecord]:
    """Every cron record of the spool, by host (damaged ones are skipped)."""
    found = []
    for host, path in spool.state_paths(CRON_RECORD):
        try:
            record = CronRecord.from_json(values.loads_object(read_small(path, 65536)))
        except (OSError, ValueError):
            continue
        if record is not None and record.host == host:
            found.append(record)
    return found


def write_record(spool: SpoolDir, record: CronRecord) -> None:
    """Raises SpoolIOError."""
    import json

    replace_file(record_path(spool, record.host), (json.dumps(record.to_json(), indent=1) + "\n").encode(),
                 mode=0o644, durable=True)


def refresh_record(spool: SpoolDir, host: str, next_drain: datetime | None) -> None:
    """A driver that cron started records when cron starts the next (readers then need no croniter)."""
    for record in read_records(spool):
        if record.host == host and record.next_drain != next_drain:
            try:
                write_record(spool, record._replace(next_drain=next_drain))
            except OniteError:
                pass
            return

