"""SPOOL/metrics.HOST.state: what HOST's drivers have counted, kept apart from the results retention
removes, so that Prometheus' counters only ever grow. Whoever files a result on HOST adds to it under
locks/metrics.HOST.lock; everyone may read it. A damaged file reads as empty (a counter reset, which
Prometheus' rate() allows for), and the driver says ``metrics-reset`` and writes it afresh.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

from onite.core import values
from onite.core.config import MAX_PRIORITIES
from onite.core.errors import DamagedRecord, SpoolIOError
from onite.core.state import JobState, Result
from onite.spool import locks
from onite.spool.files import replace_file
from onite.spool.paths import METRICS, SpoolDir

FORMAT = 1
OUTCOMES = ("done", "failed", "timeout", "cancelled", "lost")
# seconds: the upper bounds of the run-time histogram's buckets, from a quick job to a whole night
BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0)
BIG = 1 << 62  # no count gets here; a bigger one is damage
MAX_ROWS = 100_000  # (outcome, priority, user) rows: far more than a machine's users times 100 priorities


def outcome_of(result: Result) -> str:
    """How a finished job counts: done, failed, timeout, cancelled, or lost (its claimed file deleted)."""
    if result.state is not JobState.FAILED:
        return str(result.state)
    return "timeout" if result.reason == "timeout" else "lost" if result.reason.startswith("lost:") else "failed"


def _priority(text: object) -> str:
    if text == "urgent" or (isinstance(text, str) and text.isdigit() and str(int(text)) == text
                            and 1 <= int(text) <= MAX_PRIORITIES):
        return text
    raise ValueError(f"finished: {str(text)[:40]!r} is no priority")


class Counters:
    """One host's counts since its file was made. Not a dataclass: cancel files through it, and dataclasses
    imports inspect (most of that command's imports)."""

    def __init__(self, *, host: str, finished: dict[tuple[str, str, str], int] | None = None, attempts: int = 0,
                 retries: int = 0, run_buckets: list[int] | None = None, run_sum: float = 0.0, refused: int = 0,
                 cannot_record: int = 0, drain_started: datetime | None = None, drain_ended: datetime | None = None,
                 drain_exit: int | None = None, completed: datetime | None = None) -> None:
        self.host = host
        self.finished = {} if finished is None else finished  # (outcome, priority, user) → jobs
        self.attempts = attempts  # runs of the finished jobs, retries included
        self.retries = retries
        self.run_buckets = [0] * (len(BUCKETS) + 1) if run_buckets is None else run_buckets  # last: beyond BUCKETS
        self.run_sum = run_sum  # seconds
        self.refused = refused  # files set aside in refused/
        self.cannot_record = cannot_record  # drains that stopped starting jobs for a record they could not write
        self.drain_started, self.drain_ended = drain_started, drain_ended  # the last drain's
        self.drain_exit = drain_exit  # its exit status: 0, or 4 (cannot record)
        self.completed = completed  # the end of the last drain that ran to its end (drained, or its window closed)

    def file(self, result: Result) -> None:
        key = (outcome_of(result), "urgent" if result.urgent else str(result.priority), result.user)
        self.finished[key] = self.finished.get(key, 0) + 1
        self.attempts += len(result.attempts)  # none for a job that never ran
        self.retries += max(len(result.attempts) - 1, 0)
        if result.duration is not None:
            seconds = max(result.duration, 0.0)
            self.run_buckets[next((i for i, bound in enumerate(BUCKETS) if seconds <= bound), len(BUCKETS))] += 1
            self.run_sum += seconds

    def to_json(self) -> dict:
        def stamp(when: datetime | None) -> str | None:
            return when.isoformat() if when else None

        return {"version": FORMAT, "host": self.host,
                "finished": [[*key, count] for key, count in sorted(self.finished.items())],
                "attempts": self.attempts, "retries": self.retries,
                "run_seconds": {"buckets": self.run_buckets, "sum": self.run_sum},
                "refused": self.refused, "cannot_record": self.cannot_record,
                "drain": {"started": stamp(self.drain_started), "ended": stamp(self.drain_ended),
                          "exit": self.drain_exit, "completed": stamp(self.completed)}}


def parse_counters(raw: bytes, host: str) -> Counters:
    """The counters ``raw`` holds, every field checked. Raises DamagedRecord: not the record of ``host``'s."""
    try:
        data = values.loads_object(raw)
        if values.integer(data, "version", 0, BIG) != FORMAT:
            raise ValueError(f"version {data['version']} is not {FORMAT}")
        if values.text(data, "host") != host:
            raise ValueError(f"it is the file of host {str(data['host'])[:40]!r}")
        rows = data.get("finished")
        if not isinstance(rows, list) or len(rows) > MAX_ROWS:
            raise ValueError(f"finished: not a list of at most {MAX_ROWS} rows")
        finished = {}
        for row in rows:
            if not (isinstance(row, list) and len(row) == 4 and row[0] in OUTCOMES and isinstance(row[2], str)
                    and 0 < len(row[2]) <= 256 and values.is_whole(row[3], 0, BIG)):
                raise ValueError(f"finished: {str(row)[:40]} is not [outcome, priority, user, count]")
            finished[(row[0], _priority(row[1]), row[2])] = row[3]
        run = data.get("run_seconds")
        buckets = run.get("buckets") if isinstance(run, dict) else None
        total = run.get("sum") if isinstance(run, dict) else None
        if not (isinstance(buckets, list) and len(buckets) == len(BUCKETS) + 1
                and all(values.is_whole(n, 0, BIG) for n in buckets)):
            raise ValueError(f"run_seconds: not {len(BUCKETS) + 1} bucket counts")
        if not (isinstance(total, (int, float)) and not isinstance(total, bool) and math.isfinite(total)
                and 0 <= total < 1e18):
            raise ValueError("run_seconds: no sum of seconds")
        drain = data.get("drain")
        if not isinstance(drain, dict):
            raise ValueError("drain: not an object")
        return Counters(host=host, finished=finished, attempts=values.integer(data, "attempts", 0, BIG),
                        retries=values.integer(data, "retries", 0, BIG), run_buckets=buckets, run_sum=float(total),
                        refused=values.integer(data, "refused", 0, BIG),
                        cannot_record=values.integer(data, "cannot_record", 0, BIG),
                        drain_started=values.optional_time(drain, "started"),
                        drain_ended=values.optional_time(drain, "ended"),
                        drain_exit=values.optional_integer(drain, "exit", 0, 255),
                        completed=values.optional_time(drain, "completed"))
    except ValueError as err:  # also bytes that are not UTF-8
        raise DamagedRecord(f"damaged counters {METRICS}.{host}.state: {str(err)[:200]}",
                            "the next drain of that host starts its counts again from 0") from None


def read_counters(spool: SpoolDir, host: str) -> Counters:
    """``host``'s counters (all zero if it has no file yet). Raises DamagedRecord, SpoolIOError."""
    path = spool.state_path(METRICS, host)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Counters(host=host)
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    return parse_counters(raw, host)


def every_host(spool: SpoolDir) -> dict[str, Counters]:
    """Every host's counters that can be read, by host; a damaged file counts as none."""
    found = {}
    for host, _ in spool.state_paths(METRICS):
        try:
            found[host] = read_counters(spool, host)
        except (DamagedRecord, SpoolIOError):
            continue
    return found


def update_counters(spool: SpoolDir, host: str, change) -> tuple[Counters, str | None]:
    """Apply ``change(counters)`` to ``host``'s counters and save them, under their lock; return them, and why
    the file was started afresh (it was damaged) or None. Raises SpoolIOError, SpoolError."""
    lock = locks.take(spool.metrics_lock_path(host), timeout=10.0)
    if lock is None:
        raise SpoolIOError(spool.metrics_lock_path(host), "locking", TimeoutError("held for 10 s"))
    with lock:
        reset = None
        try:
            counters = read_counters(spool, host)
        except DamagedRecord as err:
            counters, reset = Counters(host=host), str(err)
        change(counters)
        replace_file(spool.state_path(METRICS, host), (json.dumps(counters.to_json()) + "\n").encode())
    return counters, reset
