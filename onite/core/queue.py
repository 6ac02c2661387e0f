"""Queue order: urgent, P1 … Pn, then the kernel's ctime, then the name (``order = "fair"``: users take turns
within a priority), nothing a user writes. Eligibility: whether a queued job may start, waits or fails.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from enum import Enum
from operator import itemgetter
from typing import TypeVar

from onite.core.names import KEY_SEP, is_valid_key, job_key, shown
from onite.core.record import Record
from onite.core.timeparse import clock_text

T = TypeVar("T")


class DepState(Enum):
    PENDING = "pending"  #: queued or running: wait for it
    OK = "ok"  #: its latest run finished with exit status 0
    FAILED = "failed"  #: its latest run failed
    CANCELLED = "cancelled"  #: it was cancelled
    MISSING = "missing"  #: neither queued, running nor finished (removed, or retention forgot it)
    DAMAGED = "damaged"  #: its result record cannot be read: whether it succeeded is unknown


class Meta(Record):
    """The part of a job file the scheduler needs (kept in memory for every queued job)."""

    after: tuple[str, ...] = ()
    not_before: datetime | None = None
    pin: str | None = None
    retrying: bool = False  # a failed attempt waiting for its back-off
    mem: int | None = None  # its request (onite.core.resources): MiB, CPUs, and its time limit, the estimate
    cpus: int | None = None
    timeout: timedelta | None = None

    @classmethod
    def of(cls, job) -> Meta:
        """What the scheduler needs of ``job`` (a core.job.Job)."""
        return cls(job.after, job.not_before, job.pin, job.attempt > 1, job.mem, job.cpus, job.timeout)


class Ready(Record):
    """The job may start now."""


class Wait(Record):
    """The job may not start yet: why, and (if known) until when."""

    reason: str
    until: datetime | None = None  # when it may become ready by itself (a not-before time)


class Fail(Record):
    """The job can never run (a dependency failed or was cancelled): the reason it fails with."""

    reason: str


Verdict = Ready | Wait | Fail
READY = Ready()


def sort_folder(rows: list, *, ctime: int, name: int) -> None:
    """Sort one queue folder's rows into queue order in place (``ctime``, ``name``: indexes in a row). Two stable
    sorts on one key each take a third of the time of one on the pair."""
    rows.sort(key=itemgetter(name))
    rows.sort(key=itemgetter(ctime))


_FAILS = {
    DepState.FAILED: "dependency {} failed",
    DepState.CANCELLED: "dependency {} was cancelled",
    DepState.MISSING: "dependency {} no longer exists (cancelled or removed)",
    DepState.DAMAGED: "the result record of dependency {} is damaged: whether it succeeded is unknown",
}


_CYCLE, _CYCLE_END, _ARROW = "dependency cycle: ", " (none of them could ever run)", " → "
_NAMED = re.compile(r"(the result record of )?dependency (\S+) ")


def cycle_reason(cycle: Iterable[str], owner: str) -> str:
    """Why each job of a dependency ``cycle`` (keys) fails, naming them as ``owner`` writes them."""
    return _CYCLE + _ARROW.join(shown(key, owner) for key in cycle) + _CYCLE_END


def reason_as_read(reason: str, owner: str, reader: str | None) -> str:
    """A reason written for ``owner``'s job, naming jobs as ``reader`` writes them (None: as written)."""
    if reader is None or reader == owner:
        return reason

    def as_read(name: str) -> str:
        key = name if KEY_SEP in name else job_key(owner, name)
        return shown(key, reader) if is_valid_key(key) else name

    if reason.startswith(_CYCLE) and reason.endswith(_CYCLE_END):
        names = reason[len(_CYCLE):-len(_CYCLE_END)].split(_ARROW)
        return _CYCLE + _ARROW.join(map(as_read, names)) + _CYCLE_END
    named = _NAMED.match(reason)
    if named is None:
        return reason
    return reason[:named.start(2)] + as_read(named[2]) + reason[named.end(2):]


def evaluate(meta: Meta, *, held: bool, now: datetime, host: str,
             dependency: Callable[[str], DepState], owner: str | None = None) -> Verdict:
    """May this queued job start now on ``host``? A reason names a dependency as the job's ``owner`` writes it."""
    if held:
        return Wait("held")
    if meta.pin and meta.pin != host:
        return Wait(f"pinned to host {meta.pin}")
    if meta.not_before is not None and meta.not_before > now:
        when = meta.not_before.astimezone()
        return Wait(f"not before {when:%Y-%m-%d} {clock_text(when)}", meta.not_before)
    for dep in meta.after:
        state = dependency(dep)
        if state is DepState.PENDING:
            return Wait(f"after {shown(dep, owner)}")
        if state in _FAILS:
            return Fail(_FAILS[state].format(shown(dep, owner)))
    return READY


def dependency_cycle(name: str, after: Iterable[str], after_of: Callable[[str], Iterable[str]]) -> list[str] | None:
    """A shortest ``[name, a, …, name]`` through which job ``name``, waiting for ``after``, waits for itself, or
    None. ``after_of(key)``: what queued job ``key`` waits for."""
    paths = {dep: [name, dep] for dep in after}
    todo = deque(paths)
    while todo:
        key = todo.popleft()
        if key == name:
            return paths[key]
        for dep in after_of(key):
            if dep not in paths:
                paths[dep] = paths[key] + [dep]
                todo.append(dep)
    return None


def cycles(after: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Each job of ``after`` (key → keys it waits for) on a dependency cycle, with a shortest such cycle. What can
    reach no cycle is peeled off first, so a long chain costs no more than its length."""
    deps = {key: {dep for dep in waits if dep in after} for key, waits in after.items()}
    waiters: dict[str, list[str]] = {}
    for key, waits in deps.items():
        for dep in waits:
            waiters.setdefault(dep, []).append(key)
    left, count = set(deps), {key: len(waits) for key, waits in deps.items()}
    free = [key for key, n in count.items() if n == 0]
    while free:
        key = free.pop()
        left.discard(key)
        for waiter in waiters.get(key, ()):
            count[waiter] -= 1
            if count[waiter] == 0:
                free.append(waiter)
    found = {}
    for key in sorted(left):  # on a cycle, or waiting for one
        cycle = dependency_cycle(key, sorted(deps[key] & left), lambda dep: sorted(deps[dep] & left))
        if cycle is not None:
            found[key] = cycle
    return found


def fair_order(items: Iterable[T], user_of: Callable[[T], str], used: Mapping[str, float]) -> list[T]:
    """``items`` of one priority, in queue order, as ``order = "fair"`` takes them: each time the oldest item of
    the user with the least running time ``used`` (ties: the older next item), each item taken counting one more
    second of its user's. The driver orders again after each start with the real times."""
    queues: dict[str, deque[tuple[int, T]]] = {}
    for position, item in enumerate(items):
        queues.setdefault(user_of(item), deque()).append((position, item))
    heap = [(used.get(user, 0.0), jobs[0][0], user) for user, jobs in queues.items()]
    heapq.heapify(heap)
    ordered = []
    while heap:
        seconds, _, user = heapq.heappop(heap)
        jobs = queues[user]
        ordered.append(jobs.popleft()[1])
        if jobs:
            heapq.heappush(heap, (seconds + 1.0, jobs[0][0], user))
    return ordered


def retry_delay(base_seconds: float, attempt: int) -> float:
    """Back-off before attempt ``attempt + 1``: base, 2×base, 4×base … capped at an hour."""
    return min(base_seconds * (2 ** max(attempt - 1, 0)), 3600.0)
