"""Packing: whether a job that may start (onite.drain.pick) fits in what the host has free now.

A job's request (``--mem``, ``--cpus``, else the spool's ``default_mem`` and
``default_cpus``) must fit in the host's capacity less what its running
jobs asked for (onite.core.resources). In strict order (the default) the
first job that does not fit waits and nothing behind it starts; with
``backfill = true`` a later job may start past it only where that cannot
delay it, by the time limits of the jobs (Slurm's rule). A job that asks
for more than the host has at all is failed at once, with the reason.
Only the local executor packs: Slurm packs its own cluster.

Invariant: the capacity is decided once per driver (``capacity``); a pick
is one pass (``begin``, then ``admit`` per ready job in queue order), and
the first job that waits is the head for the rest of the pass.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from onite.core.queue import Meta
from onite.core.resources import (Busy, Need, Reservation, free_room, host_capacity, latest_end, may_backfill,
                                  request_of, reserve, too_big)

if TYPE_CHECKING:
    from onite.drain.driver import Driver


class Admit(StrEnum):
    START = "start"  #: it fits: start it
    BACKFILL = "backfill"  #: it fits past the waiting head job without delaying it
    WAIT = "wait"  #: it does not fit now (``reason``)
    NEVER = "never"  #: it can never fit on this host (``reason``)


class Packer:
    """The driver's packing room: its host's capacity, and the head job of the current pick."""

    def __init__(self, driver: Driver) -> None:
        self.d = driver
        self._capacity: Need | None = None
        self.reason = ""  # why the last job admitted can never run
        # what one pick knows (begin): the running jobs and the room they leave, and the head job that
        # waits for room with its reservation; a pick starts at most one job, so none of it changes
        self._running: list[Busy] = []
        self._free: Need | None = None
        self._head: tuple[str, Reservation | None] | None = None

    @property
    def enabled(self) -> bool:
        return self.d.runner.executor == "local"

    def capacity(self) -> Need:
        """This host's capacity: ``[hosts.NAME] mem, cpus``, else the machine's minus the reserve; slots."""
        if self._capacity is None:
            from onite.exec.limits import machine

            self._capacity = host_capacity(self.d.config, self.d.host, machine(), slots=self.d.slots)
        return Need(self._capacity.mem, self._capacity.cpus, self.d.slots)  # slots may change on a reload

    def need_of(self, mem: int | None, cpus: int | None) -> Need:
        """What a job asks for, with the spool's defaults."""
        return request_of(mem, cpus, self.d.config.default_mem, self.d.config.default_cpus)

    def busy(self) -> list[Busy]:
        """The running jobs' requests and latest ends."""
        grace = self.d.config.kill_grace
        return [Busy(run.need, latest_end(run.started, run.job.timeout, grace)) for run in self.d.running.values()
                if run.need is not None]

    def begin(self) -> None:
        """A new pick: the room the running jobs leave, and no head job yet."""
        self._head = None
        self._free = None  # measured when the first job asks (a pick may start nothing that asks)

    def admit(self, name: str, meta: Meta, now: datetime) -> Admit:
        """May the ready job ``name`` (``meta``) start now, as far as resources go?"""
        if not self.enabled:
            return Admit.START
        need, capacity = self.need_of(meta.mem, meta.cpus), self.capacity()
        problem = too_big(need, capacity)
        if problem:
            self.reason = f"{problem}: it can never run on host {self.d.host}"
            return Admit.NEVER
        if self._free is None:
            self._running = self.busy()
            self._free = free_room(capacity, self._running)
        if self._head is None:
            if need.fits(self._free):
                return Admit.START
            self._head = (name, reserve(capacity, self._running, need) if self.d.config.backfill else None)
            return Admit.WAIT
        reservation = self._head[1]
        ends = latest_end(now, meta.timeout, self.d.config.kill_grace)
        if reservation is not None and may_backfill(need, ends, self._free, reservation):
            return Admit.BACKFILL
        return Admit.WAIT
