"""What will start the next drain of a spool, so that no command promises a run that will not happen.

A live daemon, the enabled systemd timer where systemd runs, or a cron entry ``onite cron --install``
wrote where a cron daemon runs; found from files only, for every user. What looks as if it would start
a drain but will not is a *problem*, said in words.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from onite.core.errors import ConfigError, OniteError
from onite.core.record import Record
from onite.core.resources import never_fits, request_of
from onite.core.timeparse import clock_text
from onite.drain import heartbeat as hb
from onite.drain.heartbeat import CRON_NAMES, proc_shows_others, comm, small_text
from onite.spool.cronrecords import read_records
from onite.spool.settings import default_host

SYSTEMD_UNITS = Path("/etc/systemd/system")  # where `systemctl enable` makes its links
SYSTEMD_RUNNING = Path("/run/systemd/system")  # exists while systemd is the init system (sd_booted(3))
TIMER = "onite-driver.timer"
CRON_PIDFILES = ("/run/crond.pid", "/var/run/crond.pid", "/run/cron.pid")
LABEL = {"daemon": "the daemon", "timer": "the systemd timer", "cron": "cron"}


class Starter(Record):
    """Something that will start a drain: ``by`` (daemon, timer, cron) on ``host``, next at ``when``."""

    by: str
    host: str
    when: datetime
    detail: str = ""  # "pid 4711", "root's crontab", "onite-driver.timer"

    def to_json(self) -> dict:
        return {"by": self.by, "host": self.host, "when": self.when.isoformat(), "detail": self.detail}


class DrainPlan(Record):
    """What will drain the spool: the starters by time, the drivers draining now, the problems, and
    the one command that schedules drains if nothing does."""

    starters: tuple[Starter, ...]
    draining: tuple = ()  # the heartbeats (onite.drain.heartbeat.Beat) of the drivers draining now
    problems: tuple[str, ...] = ()
    fix: str = ""
    by_hand: bool = False  # a personal spool: its owner drains it (onite run), nothing needs to be scheduled
    timed: tuple[str, ...] = ()  # the hosts of the live daemons, each of which starts a timed job when it is due

    @property
    def next(self) -> Starter | None:
        return self.starters[0] if self.starters else None

    def starters_for(self, pin: str | None) -> list[Starter]:
        """The starters whose drains may run a job pinned to host ``pin`` (any, unpinned)."""
        return [s for s in self.starters if not pin or s.host == pin]

    def for_job(self, spool, job, now: datetime) -> tuple[list[Starter], list, list[str]]:
        """The starters, the drivers draining now, and the hosts of the live daemons (which start a timed job when it
        is due: --at, a recurring run; with a schedule or without) that may run ``job``: on the host it is pinned to,
        if any, and one that can give what it asks for (can_run)."""
        runs_on = can_run(spool, job, now)
        return ([s for s in self.starters if runs_on(s.host)], [d for d in self.draining if runs_on(d.host)],
                list(filter(runs_on, self.timed)))


def when_text(when: datetime, now: datetime) -> str:
    """``20:00`` today, ``tomorrow 20:00``, ``Mon 20:00`` within a week, else ``2026-12-01 20:00`` (with
    seconds for a time within a minute: clock_text)."""
    days = (when.date() - now.date()).days
    if days == 0:
        return clock_text(when)
    if days == 1:
        return f"tomorrow {clock_text(when)}"
    if 1 < days < 7:
        return f"{when:%a} {clock_text(when)}"
    return f"{when:%Y-%m-%d} {clock_text(when)}"


def starter_text(starter: Starter, now: datetime) -> str:
    """``next drain 20:00 by cron on host vm``."""
    return f"next drain {when_text(starter.when, now)} by {LABEL.get(starter.by, starter.by)} on host {starter.host}"


def cron_daemon_running() -> bool:
    """Does a cron daemon run on this machine? (True where /proc hides other users' processes: unknown.)"""
    for pidfile in CRON_PIDFILES:
        pid = small_text(pidfile, 32).strip()
        if pid.isdigit() and comm(pid) in CRON_NAMES:
            return True
    if not proc_shows_others():
        return True
    return any(entry.isdigit() and comm(entry) in CRON_NAMES for entry in os.listdir("/proc"))


def plan(spool, now: datetime, *, host: str | None = None) -> DrainPlan:
    """What will drain ``spool`` after ``now`` (``host``: this machine's driver name, default from onite.toml)."""
    config = spool.config
    this_host = host or default_host(config)
    machine, boot = os.uname().nodename, hb.boot_id()
    beats = hb.beats(spool)
    live = [b for b in beats if hb.is_alive(b, now, machine=machine, boot=boot)]
    starters: list[Starter] = []
    problems: list[str] = []

    def schedule_next(expressions, by: str, on: str, since: datetime | None = None) -> datetime | None:
        # a driver's heartbeat says when (readers need no croniter), if it started since ``since``
        cached = [b.next_drain for b in beats if b.host == on and b.next_by == by and b.next_drain and b.next_drain > now
                  and (since is None or b.since >= since)]
        if cached:
            return min(cached)
        from onite.core.schedule import next_drain

        try:
            return next_drain(tuple(expressions), now)
        except (OniteError, ValueError) as err:
            problems.append(f"the {LABEL[by]} on host {on} uses a schedule that is not valid ({err})")
            return None

    for beat in live:
        if beat.role != hb.Role.DAEMON:
            continue
        if beat.next_drain is not None:  # a time past is due now: the daemon has not yet written the one after it
            starters.append(Starter("daemon", beat.host, max(beat.next_drain, now), f"pid {beat.pid}"))
        else:
            problems.append(f"the daemon on host {beat.host} has no schedule: it runs only --at and recurring jobs")
    timer_enabled = (SYSTEMD_UNITS / "timers.target.wants" / TIMER).exists()
    if timer_enabled and not SYSTEMD_RUNNING.is_dir():
        problems.append(f"{TIMER} is enabled, but systemd is not running on this machine: it starts nothing")
    elif timer_enabled and not config.schedule:
        problems.append(f"{TIMER} is enabled, but schedule in onite.toml is empty: its drains never open a window")
    elif timer_enabled:
        when = schedule_next(config.schedule, "timer", this_host)
        if when is not None:
            starters.append(Starter("timer", this_host, when, TIMER))
    cron_here: bool | None = None
    cron_dead = False  # an entry is installed here, but no cron daemon runs: starting one is the fix
    for record in read_records(spool):
        if record.machine == machine:
            if cron_here is None:
                cron_here = cron_daemon_running()
            if not cron_here:
                problems.append(f"a cron entry is installed on host {record.host}, but no cron daemon runs there: "
                                "it starts nothing")
                cron_dead = True
                continue
        when = record.next_drain if record.next_drain and record.next_drain > now else None
        when = when or schedule_next(record.schedule, "cron", record.host, record.installed)
        if when is not None:
            starters.append(Starter("cron", record.host, when, f"{record.user}'s crontab"))
    starters.sort(key=lambda s: s.when)
    draining = tuple(b for b in live if b.state in (hb.BeatState.DRAINING, hb.BeatState.TIMED))
    try:  # a personal spool: its (non-root) owner drains it by hand, as nothing is set up to
        owner = os.stat(spool.root).st_uid
    except OSError:
        owner = 0
    # a daemon that died (kill -9, a crash) rather than exited: starting it again is the fix, not cron
    daemon_dead = next((b.host for b in beats if b.role == hb.Role.DAEMON and b.state != hb.BeatState.EXITED
                        and b not in live), None)
    return DrainPlan(tuple(starters), draining, tuple(problems),
                     fix_command(spool, config, cron_dead=cron_dead, daemon_dead=daemon_dead),
                     by_hand=owner != 0 and owner == os.geteuid(),
                     timed=tuple(dict.fromkeys(b.host for b in live if b.role == hb.Role.DAEMON)))


def fix_command(spool, config, *, cron_dead: bool = False, daemon_dead: str | None = None) -> str:
    """The one command that schedules drains of ``spool``, for whoever asks (``cron_dead``: no cron daemon
    runs to read its entry here; ``daemon_dead``: the host whose daemon died without exiting)."""
    own = os.access(spool.root, os.W_OK)
    if daemon_dead is not None:
        where = "" if daemon_dead == default_host(config) else f" on host {daemon_dead}"
        return (f"the daemon{where} died: start it again (systemctl start onite, or onite daemon)" if own
                else f"the daemon{where} died: ask root to start it again (systemctl start onite)")
    if cron_dead:
        return ("start the cron daemon (e.g. service cron start), or run: onite daemon" if own
                else "ask root to start the cron daemon (or to run: onite daemon)")
    if spool.config_faults:  # cron --install refuses the file until it is fixed
        first = "fix onite.toml (see the warning)"
    elif not config.schedule:
        first = "set schedule in onite.toml"
    else:
        return "onite cron --install" if own else "ask root to run: onite cron --install"
    return f"{first}, then run: onite cron --install" if own else f"ask root to {first} and run onite cron --install"


def can_run(spool, job, now: datetime):
    """Whether a host of the spool may run ``job``: the host it is pinned to, if any, and one that could ever give
    what it asks for (never_fits, the rule of submit, the driver and list), as a function of the host's name."""
    need = request_of(job.mem, job.cpus)
    if spool.config.executor != "local" or not (need.mem or need.cpus):
        return lambda host: not job.pin or host == job.pin
    sizes = hb.spool_hosts(spool, now)

    def runs_on(host: str) -> bool:
        if job.pin and host != job.pin:
            return False
        try:
            return not never_fits(spool.config, need, {host: sizes.get(host, (None, None))},
                                  source=str(spool.config_path))
        except ConfigError:  # its driver refuses to start there
            return False
    return runs_on


def no_drain_text(drain: DrainPlan, *, for_job: str = "") -> str:
    """Why nothing will drain the spool, and what fixes it (``for_job``: said of a job just spooled, "it", or of a
    batch, "them")."""
    if drain.by_hand:
        return f"nothing drains this spool on its own — run onite run to drain it now, or schedule drains: {drain.fix}"
    what = f"nothing will run {for_job}" if for_job else "nothing will start one"
    return f"no drain is scheduled, so {what} — {drain.fix}"
