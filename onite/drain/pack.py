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
from onite.core.resources import (Busy, Need, Reservation, capacity_of, free_room, latest_end, may_backfill,
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
        self._head: Reservation | None = None
        self.reason = ""  # why the last job admitted waits (or can never run)
        self.waiting: tuple[str, str] | None = None  # the head job of the last pick and why it waits

    @property
    def enabled(self) -> bool:
        return self.d.runner.executor == "local"

    def capacity(self) -> Need:
        """This host's capacity: ``[hosts.NAME] mem, cpus``, else the machine's minus the reserve; slots."""
        if self._capacity is None:
            from onite.exec.limits import machine

            config, host = self.d.config, self.d.config.hosts.get(self.d.host)
            mem, cpus = machine()
            self._capacity = capacity_of(mem, cpus, mem=host.mem if host else None, cpus=host.cpus if host else None,
                                         reserve_mem=config.reserve_mem, reserve_cpus=config.reserve_cpus,
                                         slots=self.d.slots)
        return Need(self._capacity.mem, self._capacity.cpus, self.d.slots)

    def need_of(self, mem: int | None, cpus: int | None) -> Need:
        """What a job asks for, with the spool's defaults."""
        return request_of(mem, cpus, self.d.config.default_mem, self.d.config.default_cpus)

    def busy(self) -> list[Busy]:
        """The running jobs' requests and latest ends."""
        grace = self.d.config.kill_grace
        return [Busy(run.need, latest_end(run.started, run.job.timeout, grace)) for run in self.d.running.values()
                if run.need is not None]

    def begin(self) -> None:
        """A new pick: no head job yet."""
        self._head = None
        self.waiting = None

    def admit(self, name: str, meta: Meta, now: datetime) -> Admit:
        """May the ready job ``name`` (``meta``) start now, as far as resources go?"""
        if not self.enabled:
            return Admit.START
        need, capacity = self.need_of(meta.mem, meta.cpus), self.capacity()
        problem = too_big(need, capacity)
        if problem:
            self.reason = f"{problem}: it can never run on host {self.d.host}"
            return Admit.NEVER
        running = self.busy()
        free = free_room(capacity, running)
        if self._head is None:
            if need.fits(free):
                return Admit.START
            self.reason = f"waits for {need.shortage(free)}"
            self.waiting = (name, self.reason)
            if self.d.config.backfill:
                self._head = reserve(capacity, running, need)
            return Admit.WAIT
        ends = latest_end(now, meta.timeout, self.d.config.kill_grace)
        if may_backfill(need, ends, free, self._head):
            return Admit.BACKFILL
        self.reason = f"waits behind {self.waiting[0]}" if need.fits(free) else f"waits for {need.shortage(free)}"
        return Admit.WAIT
