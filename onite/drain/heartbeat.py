"""SPOOL/driver.HOST.state: the heartbeat by which every user can tell whether HOST's driver is alive.

The lock holder writes it (world-readable; the lock is not) as it takes the lock, on every change and
every BEAT_EVERY seconds, and marks it ``exited`` as it lets go. It proves a live driver only with its
process: on its machine, pid, start time and boot id must match; from another, it must be fresh
(STALE_AFTER). Only the spool's owner writes there; every field is still checked.
"""

from __future__ import annotations

import json
import os
import signal
from contextlib import suppress
from datetime import datetime
from enum import StrEnum

from onite.core import values
from onite.core.clock import SYSTEM, Clock
from onite.core.errors import OniteError
from onite.core.record import Record
from onite.exec.contain import boot_id, is_zombie, process_start_ticks
from onite.spool.files import read_small, remove_file, replace_file
from onite.spool.locks import leave_wake
from onite.spool.paths import HEARTBEAT, SpoolDir

FORMAT = 1
BEAT_EVERY = 30.0  # seconds between rewrites while nothing changes
STALE_AFTER = 120.0  # a heartbeat from another machine not updated for this long is a dead driver
# a heartbeat not updated for this long is a host gone for good (spool_hosts): every drain rewrites it, so a host
# drained weekly keeps counting; one drained more rarely counts while onite.toml names it in [hosts.NAME]
RETIRED_AFTER = 8 * 86400.0


class Role(StrEnum):
    """What holds a host's driver lock."""

    RUN = "run"  #: onite run: one drain
    DAEMON = "daemon"  #: onite daemon, for its whole life


class BeatState(StrEnum):
    """What the lock holder is doing."""

    DRAINING = "draining"  #: a drain runs
    TIMED = "draining timed jobs"  #: a daemon's drain of only the jobs whose --at or recurring time came
    IDLE = "idle"  #: a daemon between drains
    EXITED = "exited"  #: it let the lock go


class Beat(Record):
    """One heartbeat: who holds HOST's driver lock, since when, started by what, doing what."""

    host: str
    pid: int
    start_ticks: int | None
    boot_id: str
    machine: str
    role: Role
    started_by: str  # "cron", "timer", "hand", "systemd", "program NAME"
    since: datetime
    state: BeatState
    updated: datetime
    next_drain: datetime | None = None  # when the next drain is due, as this driver knew it
    next_by: str | None = None  # what starts it: "daemon", "timer", "cron"
    ended: datetime | None = None

    def to_json(self) -> dict:
        return {"version": FORMAT, **{key: value.isoformat() if isinstance(value, datetime) else value
                                      for key, value in self._asdict().items()}}

    @classmethod
    def from_json(cls, data) -> "Beat | None":
        """The heartbeat ``data`` describes, or None if any field is missing or out of range."""
        if not isinstance(data, dict):
            return None
        with suppress(KeyError, TypeError, ValueError):
            texts = {key: values.text(data, key) for key in ("host", "boot_id", "machine", "started_by")}
            next_by = data.get("next_by")
            if values.integer(data, "version", FORMAT, FORMAT) and max(map(len, texts.values())) <= 200:
                return cls(**texts, pid=values.integer(data, "pid", 1, (1 << 31) - 1),
                           start_ticks=values.optional_integer(data, "start_ticks", 0, 1 << 62),
                           role=Role(data["role"]), state=BeatState(data["state"]), since=values.time(data, "since"),
                           updated=values.time(data, "updated"), next_drain=values.optional_time(data, "next_drain"),
                           next_by=next_by if isinstance(next_by, str) and len(next_by) <= 50 else None,
                           ended=values.optional_time(data, "ended"))
        return None

    @property
    def kind(self) -> str:
        """``daemon`` or ``driver`` (``onite run``), as status says it."""
        return "daemon" if self.role == Role.DAEMON else "driver"

    @property
    def holder(self) -> str:
        """``pid=4711 host=vm since=ISO role=driver started_by=cron``: who holds the lock, for messages."""
        return f"pid={self.pid} host={self.host} since={self.since.isoformat()} role={self.kind} started_by={self.started_by}"


def proc_shows_others() -> bool:
    """Can this process see other users' processes in /proc (no ``hidepid``)? pid 1 is root's."""
    return os.path.exists("/proc/1/stat")


def is_alive(beat: Beat, now: datetime, *, machine: str | None = None, boot: str | None = None) -> bool:
    """Is the driver of this heartbeat alive (as the module's docstring says)?"""
    if beat.state == BeatState.EXITED:
        return False
    machine = os.uname().nodename if machine is None else machine
    if beat.machine == machine:
        boot = boot_id() if boot is None else boot
        if beat.boot_id and boot and beat.boot_id != boot:
            return False  # written before the machine last started
        ticks = process_start_ticks(beat.pid)
        if ticks is not None:  # a zombie (killed, its parent has not reaped it yet) drains nothing
            return (beat.start_ticks is None or ticks == beat.start_ticks) and not is_zombie(beat.pid)
        if proc_shows_others() or beat.pid == os.getpid():
            return False
    return (now - beat.updated).total_seconds() <= STALE_AFTER


def read(spool: SpoolDir, host: str) -> Beat | None:
    """HOST's heartbeat as written (alive or not), or None if there is none (or it is damaged)."""
    try:
        return Beat.from_json(values.loads_object(spool.state_path(HEARTBEAT, host).read_bytes()))
    except (OSError, ValueError):
        return None


def beats(spool: SpoolDir) -> list[Beat]:
    """Every heartbeat in the spool (alive or not), by host."""
    return [beat for host, _ in spool.state_paths(HEARTBEAT)
            if (beat := read(spool, host)) is not None and beat.host == host]


def live_beats(spool: SpoolDir, now: datetime) -> list[Beat]:
    """The heartbeats of drivers alive at ``now``, by host: every driver of the spool that is alive."""
    machine, boot = os.uname().nodename, boot_id()
    return [b for b in beats(spool) if is_alive(b, now, machine=machine, boot=boot)]


def recovered(spool: SpoolDir, host: str, now: datetime) -> None:
    """``onite recover --host HOST`` recovered every claim HOST's dead driver left: its heartbeat says it exited
    (``updated`` kept: HOST stays a host of the spool as long as before), so status stops warning it died."""
    beat = read(spool, host)
    if beat is not None and beat.host == host and beat.state != BeatState.EXITED and not is_alive(beat, now):
        replace_file(spool.state_path(HEARTBEAT, host),
                     (json.dumps(beat._replace(state=BeatState.EXITED, ended=now).to_json(), indent=1) + "\n").encode(),
                     mode=0o644)


def driver_gone(spool: SpoolDir, host: str, now: datetime) -> str:
    """"" while ``host``'s driver is alive at ``now``; else what that means for a job claimed there, and what
    recovers it: the one wording of status, wait, report and cancel (each says its job's name before it)."""
    beat = read(spool, host)
    if beat is not None and beat.host == host and is_alive(beat, now):
        return ""
    return (f"its host {host} has no live driver: the next driver there, or onite recover --host {host} if {host} is "
            f"gone for good, recovers it")


def spool_hosts(spool: SpoolDir, now: datetime, *, but: str | None = None) -> dict[str, tuple[int | None, int | None]]:
    """Every host of the spool at ``now`` (``but`` that one) with its machine's memory and CPUs ((None, None):
    unknown here), for onite.core.resources.never_fits: this machine's host, each ``[hosts.NAME]``, and each
    whose driver has drained the spool within RETIRED_AFTER."""
    from onite.exec.limits import machine
    from onite.spool.settings import default_host

    here, named = os.uname().nodename, spool.config.hosts
    on = {default_host(spool.config): here} | {
        beat.host: beat.machine for beat in beats(spool)
        if beat.host in named or (now - beat.updated).total_seconds() <= RETIRED_AFTER}
    return {host: machine() if on.get(host) == here else (None, None)
            for host in dict.fromkeys([*on, *named]) if host != but}


def draining_hosts(spool: SpoolDir, now: datetime) -> list[str]:
    """Hosts where a driver is draining at ``now`` (a daemon between drains is not)."""
    return [beat.host for beat in live_beats(spool, now) if beat.state != BeatState.IDLE]


def request_wake(spool: SpoolDir, host: str, beat: Beat) -> bool:
    """Hand a drain to HOST's idle daemon (heartbeat ``beat``): leave ``locks/wake.HOST`` for its next look,
    and USR2 it if it runs on this machine. False if the request cannot be left (only the spool's owner may).
    Raises Refused, SpoolError, SpoolIOError: the spool's locks/ folder is not this user's."""
    if not leave_wake(spool, host):
        return False
    if beat.machine == os.uname().nodename and (
            beat.start_ticks is None or process_start_ticks(beat.pid) == beat.start_ticks):
        with suppress(OSError):  # it polls for the request every few seconds anyway
            os.kill(beat.pid, signal.SIGUSR2)
    return True


CRON_NAMES = ("cron", "crond", "cronie", "anacron")
# a parent that is a shell or a login's tool: a person typed the command (``sudo onite run > log 2>&1 &``)
HAND_NAMES = ("sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "tcsh", "csh", "sudo", "su", "doas", "tmux",
              "screen")


def started_by(role: Role) -> str:
    """What started this process: ``cron``, ``timer`` (onite-driver.timer), ``systemd`` (another unit),
    ``hand`` (a terminal, or a shell's command), or ``program NAME`` (the parent's name)."""
    if role == Role.DAEMON:
        return "systemd" if os.environ.get("INVOCATION_ID") else _typed_or_program(comm(os.getppid()))
    said = os.environ.get("ONITE_STARTED_BY", "")
    if said in ("cron", "timer", "hand", "systemd"):
        return said
    if os.environ.get("INVOCATION_ID"):
        return "timer" if "onite-driver.service" in small_text("/proc/self/cgroup", 4096) else "systemd"
    parent = comm(os.getppid())
    return "cron" if parent in CRON_NAMES else _typed_or_program(parent)


def _typed_or_program(parent: str) -> str:
    """``hand`` for a command a person typed (on a terminal, or a shell's child), else ``program NAME``."""
    typed = any(os.isatty(fd) for fd in (0, 1, 2)) or not parent or parent in HAND_NAMES
    return "hand" if typed else f"program {parent}"


def small_text(path: str, size: int) -> str:
    """spool.files.read_small of a file in /proc or a pid file, as text; "" if it cannot be read."""
    try:
        return read_small(path, size).decode("utf-8", "replace")
    except OSError:
        return ""


def comm(pid: int | str) -> str:
    """The name (comm) of process ``pid``, or "" if unknown."""
    return small_text(f"/proc/{pid}/comm", 64).strip()


class Heartbeat:
    """The heartbeat of the driver holding HOST's lock: ``beat`` on every change, ``tick`` every turn."""

    def __init__(self, spool: SpoolDir, host: str, role: Role, *, log, clock: Clock = SYSTEM) -> None:
        self.path = spool.state_path(HEARTBEAT, host)
        self.clock = clock
        self.log = log
        self._due = 0.0
        self._failed = False
        now, pid = clock.now(), os.getpid()
        self.beat_ = Beat(host=host, pid=pid, start_ticks=process_start_ticks(pid), boot_id=boot_id(),
                          machine=os.uname().nodename, role=role, started_by=started_by(role), since=now,
                          state=BeatState.IDLE if role == Role.DAEMON else BeatState.DRAINING, updated=now)

    def beat(self, **changes) -> None:
        """Write the heartbeat now, with ``changes`` (state, next_drain, next_by, ended)."""
        self.beat_ = self.beat_._replace(updated=self.clock.now(), **changes)
        self._due = self.clock.monotonic() + BEAT_EVERY
        try:
            replace_file(self.path, (json.dumps(self.beat_.to_json(), indent=1) + "\n").encode(), mode=0o644)
            self._failed = False
        except OniteError as err:
            if not self._failed:  # once, not every 30 seconds
                self.log.event("warning", error=str(err), note="the heartbeat was not written: status may say no driver runs")
            self._failed = True

    def tick(self) -> None:
        """Rewrite the heartbeat if BEAT_EVERY seconds passed since the last write (cheap otherwise)."""
        if self.clock.monotonic() >= self._due:
            self.beat()

    def close(self) -> None:
        """The lock is about to be let go: say so, or (a full disk) remove the heartbeat, which needs no room."""
        self.beat(state=BeatState.EXITED, ended=self.clock.now())
        if self._failed:
            remove_file(self.path)
