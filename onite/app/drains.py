"""Drains and the night's events, read back from onite.log, from its end, no further than the window needs.

A *drain* is one driver's run, from its ``driver-start`` line to its ``driver-exit`` line (same host and pid);
a line onite did not write is skipped."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from onite.core.record import Record
from onite.core.errors import SpoolIOError
from onite.spool.log import lines_back, parse_line

# the events a report reads; any other line is skipped before it is parsed
WANTED = frozenset({"driver-start", "driver-exit", "window-closed", "start", "done", "failed", "cancelled", "retry",
                    "refused", "pruned"})
FINAL = ("done", "failed", "cancelled")
JOB_LINES = frozenset(("start", *FINAL))
SKEW = timedelta(minutes=10)  # read this much further back: hosts' clocks differ, their lines interleave
LOOKBACK = timedelta(days=45)  # no drain that ran a job in this long: there is no last session


class Event:
    """One line of onite.log, its fields parsed when first asked for (most lines are only counted)."""

    __slots__ = ("when", "host", "pid", "event", "name", "_text", "_fields")

    def __init__(self, when: datetime, host: str, pid: int, event: str, name: str = "", text: str = "") -> None:
        self.when, self.host, self.pid, self.event, self.name = when, host, pid, event, name
        self._text, self._fields = text, None

    @property
    def fields(self) -> dict:
        """``key=value`` of the line, unquoted."""
        if self._fields is None:
            if '"' in self._text:
                parsed = parse_line(self._text)
                self._fields = parsed["fields"] if parsed else {}
            else:
                self._fields = dict([word.split("=", 1) for word in self._text.split() if "=" in word[1:]])
        return self._fields


class Drain:
    """One driver's run. ``ended`` None: still running; ``reason`` as driver-exit says, or ``died``;
    ``recovered``: for one that died, when the next driver of its host started; ``left``: the jobs its queue still
    held; ``until``: when its window closed, HH:MM[:SS]; ``ran``: the jobs it started or filed; ``beside``: other
    hosts' drains at the same time; ``at``: its start line's place among the events (finer than whole seconds)."""

    __slots__ = ("host", "pid", "started", "ended", "reason", "left", "until", "ran", "last_seen", "beside", "at",
                 "recovered")

    def __init__(self, host: str, pid: int, started: datetime, *, until: str | None, beside: list[Drain],
                 at: int) -> None:
        self.host, self.pid, self.started, self.until, self.beside, self.at = host, pid, started, until, beside, at
        self.ended: datetime | None = None
        self.recovered: datetime | None = None
        self.reason, self.left, self.ran, self.last_seen = "", None, 0, started

    def to_json(self) -> dict:
        return {"host": self.host, "pid": self.pid, "started": self.started.isoformat(),
                "ended": self.ended.isoformat() if self.ended else None, "reason": self.reason or None,
                "left": self.left, "until": self.until,
                "recovered": self.recovered.isoformat() if self.recovered else None}


class Session(Record):
    """The drains of one night: from the first one's start to the last one's end (None: one still runs)."""

    start: datetime
    end: datetime | None
    drains: tuple[Drain, ...]


def log_paths(log_path: Path) -> list[Path]:
    """onite.log, then logrotate's ``onite.log.1``: older lines last."""
    return [log_path, log_path.with_name(log_path.name + ".1")]


# a second holds many lines, and each parse makes a time zone
_when = functools.lru_cache(maxsize=1024)(datetime.fromisoformat)


def read_back(paths: Iterable[Path]) -> Iterator[Event]:
    """The wanted events of the log, newest first, across ``paths`` (newest file first)."""
    for path in paths:
        with contextlib.suppress(SpoolIOError):  # a log file that cannot be read has no lines
            for line in lines_back(path):
                head = line.split(" ", 3)
                if len(head) < 3 or head[2] not in WANTED:
                    continue
                host, _, pid = head[1].rpartition("[")
                if not host or not pid.endswith("]"):
                    continue
                try:
                    when, number = _when(head[0]), int(pid[:-1])
                except ValueError:
                    continue
                rest = head[3] if len(head) > 3 else ""
                first = rest.split(" ", 1)[0]
                name = first if first and "=" not in first else ""  # a job name has no "="
                yield Event(when, host, number, head[2], name, line if '"' in rest else rest)


def collect(events: Iterator[Event], start: datetime | None, boundary: Callable[[datetime], datetime],
            now: datetime) -> list[Event]:
    """The events (oldest first) from ``start``, else the morning before the last drain that ran a job, less SKEW."""
    stop = start - SKEW if start is not None else now - LOOKBACK
    found: list[Event] = []
    busy: set[tuple[str, int]] = set()  # drivers whose job lines were read (after their start line)
    for event in events:
        if event.when < stop:
            break
        found.append(event)
        key = (event.host, event.pid)
        if event.event in JOB_LINES:
            busy.add(key)
        elif event.event == "driver-start" and start is None and key in busy:
            start = boundary(event.when)
            stop = start - SKEW
        if event.event == "driver-start":
            busy.discard(key)  # the same pid's earlier drains (a daemon's) are told apart
    found.reverse()
    return found


def drains_of(events: Sequence[Event], running_hosts: Iterable[str]) -> list[Drain]:
    """The drains the events (oldest first) tell of, in the order they started. One with no exit line runs if it
    is the last of a host whose lock is held now, else it died at its last line."""
    open_: dict[tuple[str, int], Drain] = {}
    drains: list[Drain] = []
    for at, event in enumerate(events):
        key = (event.host, event.pid)
        if event.event == "driver-start":
            for other_key, other in list(open_.items()):
                if other_key[0] == event.host:  # one driver per host: the one before died, and this one recovers it
                    _died(other)
                    other.recovered = event.when
                    del open_[other_key]
            drain = Drain(event.host, event.pid, event.when, until=_clock(event.fields.get("until")),
                          beside=list(open_.values()), at=at)
            for other in open_.values():
                other.beside.append(drain)
            open_[key] = drain
            drains.append(drain)
            continue
        drain = open_.get(key)
        if drain is None:
            continue
        drain.last_seen = event.when
        if event.event == "driver-exit":
            drain.ended, drain.reason = event.when, event.fields.get("reason", "")
            drain.left = integer(event.fields.get("left"))
            del open_[key]
        elif event.event in JOB_LINES:
            drain.ran += 1
        elif event.event == "window-closed":
            drain.until = _clock(event.fields.get("until")) or drain.until
    alive = set(running_hosts)
    for (host, _), drain in open_.items():
        if host not in alive:
            _died(drain)
    return drains


def _died(drain: Drain) -> None:
    drain.ended, drain.reason = drain.last_seen, "died"


def _clock(text: str | None) -> str | None:
    """``07:00`` of the log's ``07:00:00``; ``07:00:30`` as it is."""
    if not text:
        return None
    return text[:5] if len(text) == 8 and text.endswith(":00") else text


def integer(text: str | None) -> int | None:
    """A log field as an int; None if it is missing or not one."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def pruned_keep(events: Iterable[Event]) -> int | None:
    """The ``keep`` of the first ``pruned`` line of ``events`` that records one; None: no such line."""
    return next((keep for e in events if e.event == "pruned" and (keep := integer(e.fields.get("keep"))) is not None),
                None)


def last_session(drains: Sequence[Drain], night_opened: Callable[[datetime], datetime | None]) -> Session | None:
    """Last night: the latest drain that ran a job (else the latest), with the drains of its night since the night
    opened (``night_opened``) and those beside it; None: no drain. A drain before the night opened is no part of
    it, unless it died and the night's next drain of its host recovered its jobs."""
    if not drains:
        return None
    latest = max((d for d in drains if d.ran), key=lambda d: (d.started, d.at), default=None) \
        or max(drains, key=lambda d: (d.started, d.at))
    opened = night_opened(latest.started)
    chosen = [d for d in drains if d is latest or d in latest.beside or (
        opened is not None and d.started >= opened and night_opened(d.started) == opened)]
    # a driver that died is part of the night of the next drain of its host, which recovered its jobs
    after: dict[str, Drain] = {}
    for drain in sorted(drains, key=lambda d: (d.started, d.at), reverse=True):
        later = after.get(drain.host)
        if drain.reason == "died" and drain not in chosen and later is not None and later in chosen:
            chosen.append(drain)
        after[drain.host] = drain
    chosen.sort(key=lambda d: (d.started, d.at))
    end = None if any(d.ended is None for d in chosen) else max(d.ended for d in chosen)
    return Session(min(d.started for d in chosen), end, tuple(chosen))


class JobEvents(Record):
    """What the log says of the jobs of a window, by (name, user): each job's last final line and its start
    line, how many attempts a retried job was allowed, the files refused."""

    finals: dict[tuple[str, str], Event]
    starts: dict[tuple[str, str], Event | None]  # of the run each final line ends
    # the earlier runs of a name in the window, each final line with its run's start line (None: never started)
    earlier: list[tuple[Event, Event | None]]
    tries: dict[str, int]
    refused: list[Event]


def job_events(events: Sequence[Event], start: datetime, end: datetime) -> JobEvents:
    """The job lines of the events (oldest first) from ``start`` to ``end``, both included (whole seconds)."""
    found = JobEvents({}, {}, [], {}, [])
    pending: dict[tuple[str, str], Event] = {}  # start lines of runs not yet ended
    for event in events:
        if not (start <= event.when <= end) or not event.name:
            continue
        if event.event == "start":
            pending[(event.name, event.fields.get("user", ""))] = event
        elif event.event in FINAL:
            key = (event.name, event.fields.get("user", ""))
            if key in found.finals:
                found.earlier.append((found.finals[key], found.starts.get(key)))
            found.finals[key] = event
            found.starts[key] = pending.pop(key, None)  # a start line belongs to the run the next final line ends
        elif event.event == "retry":
            tries = integer(event.fields.get("of"))
            if tries:
                found.tries[event.name] = tries
        elif event.event == "refused":
            found.refused.append(event)
    return found
