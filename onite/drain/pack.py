"""Packing: whether a job that may start fits in what this host has free now (local executor only).

By onite.core.admission.admit, the rule ``onite list`` and ``onite status`` go by too: in strict
order the first job that does not fit waits and nothing behind it starts; with ``backfill`` a later
job may pass it where that cannot delay it. A pick is one pass: ``begin``, then ``admit`` in order.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from onite.core.admission import Admit, Busy, Head, Room, admit, latest_end, room
from onite.core.resources import Need, host_capacity
from onite.drain.night import Night
from onite.exec.limits import machine


def check_capacity(config, host: str) -> None:
    """Refuse to drain ``host`` (this machine's) where its capacity is empty, before anything is
    claimed: every job with a request would otherwise be failed as too big.
    Raises ConfigError: the reserve leaves nothing of this machine for jobs."""
    if config.executor == "local":
        host_capacity(config, host, machine())


class Packer:
    """The driver's packing room: its host's capacity, and the head job of the current pick."""

    def __init__(self, night: Night) -> None:
        self.night = night
        self._capacity: Need | None = None
        self.reason = ""  # the last admission's reason (why a job can never run, for its failure)
        self._room: Room | None = None  # what the running jobs leave, measured once per pick
        self._head: Head | None = None  # the first job of this pick that waits for room

    def capacity(self) -> Need:
        """This host's capacity: ``[hosts.NAME] mem, cpus``, else the machine's minus the reserve; slots.
        Raises ConfigError: the reserve leaves nothing of this machine for jobs."""
        if self._capacity is None:
            self._capacity = host_capacity(self.night.config, self.night.host, machine(), slots=self.night.slots)
        return Need(self._capacity.mem, self._capacity.cpus, self.night.slots)  # slots may change on a reload

    def begin(self) -> None:
        """A new pick: the room is measured when the first job asks, and there is no head job yet."""
        self._head = None
        self._room = None

    def admit(self, name: str, need: Need, timeout: timedelta | None, now: datetime) -> Admit:
        """May the ready job ``name`` start now, as far as resources go? (``reason`` says why not.)"""
        night = self.night
        if night.runner.executor != "local":
            return Admit.START
        if self._room is None:
            grace = night.config.kill_grace
            busy = [Busy(run.need, latest_end(run.started, run.job.timeout, grace)) for run in night.running.values()
                    if run.need is not None]
            self._room = room(night.host, self.capacity(), busy)
        said = admit(name, need, latest_end(now, timeout, night.config.kill_grace), self._room, self._head,
                     backfill=night.config.backfill)
        self._head, self.reason = said.head, said.reason
        return said.verdict
