"""Packing: whether a job that may start (onite.drain.pick) fits in what the host has free now.

A job's request (``--mem``, ``--cpus``, the spool's defaults applied when it
was spooled) must fit in the host's capacity less what its running jobs
were admitted with, by the one rule onite.core.admission.admit, which
``onite list`` and ``onite status`` also go by (onite.drain.verdicts): in
strict order (the default) the first job that does not fit waits and
nothing behind it starts; with ``backfill = true`` a later job may start
past it only where that cannot delay it, by the time limits of the jobs
(Slurm's rule). A job that asks for more than the host has at all is failed
at once, with the reason. Only the local executor packs: Slurm packs its
own cluster.

Invariant: the capacity is decided once per driver (``capacity``), and a
host whose capacity is empty is refused before the driver starts (``check``);
a pick is one pass (``begin``, then ``admit`` per ready job in queue order),
and the first job that waits is the head for the rest of the pass. A job
admitted holds the request it was admitted with until it is filed (the
pick hands it to the start; recovery takes it from the run record).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from onite.core.admission import Admit, Busy, Head, Room, admit, latest_end, room
from onite.core.resources import Need, host_capacity, request_of

from onite.drain.night import Night

def check_capacity(config, host: str) -> None:
    """Refuse to drain ``host`` (this machine's) where its capacity is empty, before anything is claimed or
    failed: every job with a request would otherwise be failed as too big. Only the local executor packs.

    Raises:
        ConfigError: the reserve leaves nothing of this machine for jobs (onite.core.resources.host_capacity).
    """
    if config.executor == "local":
        from onite.exec.limits import machine

        host_capacity(config, host, machine())


class Packer:
    """The driver's packing room: its host's capacity, and the head job of the current pick."""

    def __init__(self, night: Night) -> None:
        self.night = night
        self._capacity: Need | None = None
        self.reason = ""  # the last admission's reason (why a job can never run, for its failure)
        # what one pick knows (begin): the room the running jobs leave, and the head job that waits for
        # room; a pick starts at most one job, so neither changes during it
        self._room: Room | None = None
        self._head: Head | None = None

    @property
    def enabled(self) -> bool:
        return self.night.runner.executor == "local"

    def capacity(self) -> Need:
        """This host's capacity: ``[hosts.NAME] mem, cpus``, else the machine's minus the reserve; slots.

        Raises:
            ConfigError: the reserve leaves nothing of this machine for jobs (onite.core.resources).
        """
        if self._capacity is None:
            from onite.exec.limits import machine

            self._capacity = host_capacity(self.night.config, self.night.host, machine(), slots=self.night.slots)
        return Need(self._capacity.mem, self._capacity.cpus, self.night.slots)  # slots may change on a reload

    def check(self) -> None:
        """``check_capacity`` of this driver's host.

        Raises:
            ConfigError: as ``capacity``.
        """
        check_capacity(self.night.config, self.night.host)

    @staticmethod
    def need_of(mem: int | None, cpus: int | None) -> Need:
        """What a job asks for, as its file says (the spool's defaults were applied at submit)."""
        return request_of(mem, cpus)

    def busy(self) -> list[Busy]:
        """The running jobs' requests and latest ends."""
        grace = self.night.config.kill_grace
        return [Busy(run.need, latest_end(run.started, run.job.timeout, grace)) for run in self.night.running.values()
                if run.need is not None]

    def begin(self) -> None:
        """A new pick: the room is measured when the first job asks, and there is no head job yet."""
        self._head = None
        self._room = None

    def admit(self, name: str, need: Need, timeout: timedelta | None, now: datetime) -> Admit:
        """May the ready job ``name`` (asking ``need``, with time limit ``timeout``) start now, as far as
        resources go? (onite.core.admission.admit; ``reason`` says why not.)"""
        if not self.enabled:
            return Admit.START
        if self._room is None:
            self._room = room(self.night.host, self.capacity(), self.busy())
        said = admit(name, need, latest_end(now, timeout, self.night.config.kill_grace), self._room, self._head,
                     backfill=self.night.config.backfill)
        self._head, self.reason = said.head, said.reason
        return said.verdict
