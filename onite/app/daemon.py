"""``onite daemon``: the driver for machines without cron, one long-running process per host.

It holds this host's driver lock and heartbeat for its whole life. At a time of ``schedule``, or told to, it
drains fully; when a not-before time comes or a recurring job fires, it drains only the jobs whose time has come,
widened if a schedule time comes meanwhile. daemon.HOST.state keeps the last schedule time handled: one missed
while it was down is caught up once, while its night window is open."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
from datetime import datetime, time as dtime

from onite.core import values
from onite.core.clock import SYSTEM, set_back_since
from onite.core.errors import InvalidInput, OniteError, Refused
from onite.core.schedule import last_fire, next_drain, plan, validate_schedule
from onite.drain import heartbeat as hb
from onite.drain.driver import Driver, SignalCatcher, check_capacity, take_host_lock
from onite.drain.heartbeat import BeatState, Heartbeat, Role
from onite.drain.instances import READ_BUDGET, RecurScheduler
from onite.spool import trust
from onite.spool.files import replace_file
from onite.spool.locks import take_wake
from onite.spool.log import ActivityLog
from onite.spool.paths import DAEMON_STATE, SpoolDir
from onite.spool.scan import listing
from onite.spool.settings import default_host
from onite.spool.index import TimedWatch

POLL = 2.0  # seconds between looks at the queue, recur/ and the clock while sleeping
LOCK_RETRY = 5.0  # seconds between tries while another driver holds this host's lock
STATE_FORMAT = 1
LATE = 60.0  # a scheduled drain starting this many seconds after its time is logged as a catch-up


class Daemon:
    """One host's long-running driver. ``run()`` returns the process exit code."""

    def __init__(self, spool: SpoolDir, *, host: str | None = None, slots: int | None = None,
                 until: dtime | None = None, drain_now: bool = False, echo=None) -> None:
        self.spool = spool
        self.clock = SYSTEM
        self.host = host or default_host(spool.config)
        self._host_named = host is not None  # else onite.toml's, which a reload may change
        self.slots = slots
        self._until_override = until
        self.drain_now = drain_now
        self.echo = echo
        self.log = ActivityLog(spool.log_path, self.host, echo=echo, clock=self.clock)
        self.signals: list[int] = []
        self.stopping = False
        self.recur = RecurScheduler(spool, self.log, clock=self.clock, read_budget=READ_BUDGET)
        self.watch = TimedWatch(spool, self.host)
        self.schedule: tuple[str, ...] = ()
        self._refused_schedule = None  # the last schedule in onite.toml found not valid (logged once)
        self.last: datetime | None = None  # the last schedule time handled
        self.next_scheduled: datetime | None = None
        self.timed_mark: datetime | None = None  # when the last drain started (onite.spool.index.TimedWatch)
        self._pending_fire: datetime | None = None  # a schedule time a widened timed drain is handling
        self._wakeup_fd = -1
        self._lock_fd: int | None = None
        self.started_at = self.clock.now()
        self.heartbeat: Heartbeat | None = None

    @property
    def until(self) -> dtime | None:
        return self._until_override or self.spool.config.until

    @property
    def state_path(self):
        return self.spool.state_path(DAEMON_STATE, self.host)

    def run(self) -> int:
        """Lock, catch up a missed night, then wake and drain until stopped. Refused: the spool is not this user's
        to drain, or another daemon runs for this host; ConfigError: the reserve leaves nothing for jobs."""
        trust.check_drainable(self.spool, "onite daemon")
        self.schedule = tuple(self.spool.config.schedule)  # checked as onite.toml was read
        check_capacity(self.spool.config, self.host, str(self.spool.config_path))
        with SignalCatcher(self.signals, leaving=True) as wakeup_fd:
            self._wakeup_fd = wakeup_fd
            lock = self._lock()
            if lock is None:
                self.log.close()
                return 0
            self._lock_fd = lock.fd
            try:
                self.heartbeat = Heartbeat(self.spool, self.host, Role.DAEMON, log=self.log, clock=self.clock)
                self._main()
            finally:
                try:
                    if self.heartbeat is not None:
                        self.heartbeat.close()
                finally:
                    lock.release()
                    self.log.event("daemon-exit", host=self.host)
                    self.log.close()
        return 0

    def _lock(self):
        """This host's driver lock, waited for while a plain driver holds it (None: stopped meanwhile). Refused:
        another daemon runs for this host."""
        announced = False
        while True:
            lock = take_host_lock(self.spool, self.host, self.started_at, role="daemon")
            if lock is not None:
                return lock
            beat = hb.read(self.spool, self.host)
            alive = beat is not None and hb.is_alive(beat, self.clock.now())
            if alive and beat.role == Role.DAEMON:
                raise Refused(f"an onite daemon already runs for host {self.host} (pid {beat.pid}, since "
                              f"{beat.since:%Y-%m-%d %H:%M})",
                              "stop it first (systemctl stop onite), or give this one another --host")
            if not announced:
                announced = True
                self.log.event("daemon-waiting", host=self.host, pid=beat.pid if alive else None,
                               started_by=beat.started_by if alive else None,
                               note="a driver is draining this spool on this host; starting when it is done")
            self._sleep(LOCK_RETRY)
            self._handle_signals()
            if self.stopping:
                return None

    def _main(self) -> None:
        now = self.clock.now()
        self.last = self._load_state()
        if self.last is None:  # first start: nothing was missed yet
            self.last = now
            self._save_state()
        self._plan_next()
        self.log.event("daemon-start", host=self.host, **self._plan_fields(), pid=os.getpid())
        drained = self._scheduled(now)
        if self.drain_now and not drained:
            self.log.event("drain-now", note="draining once at start, then following the schedule")
            self._drain(only_timed=False)
        elif not drained and self._left_running():
            # what a dead driver of this host left is recovered now, not shown as running until the next drain
            self.log.event("recovering", note="a driver of this host left jobs in running/; recovering them now")
            self._drain(only_timed=True)
        while not self.stopping:
            self._handle_signals()
            if self.stopping:
                break
            now = self.clock.now()
            if self._scheduled(now):
                continue
            if self._take_wake():
                self.log.event("drain-now", note="told to drain now (onite run, or onite daemon --wake)")
                self._drain(only_timed=False)
                continue
            self.heartbeat.tick()
            self.recur.try_spool_due(now)
            self.watch.refresh()
            due = self.watch.next_due(self.timed_mark)
            if due is not None and due <= now:
                self._drain(only_timed=True)
                continue
            wake = min((t for t in (self.next_scheduled, self.recur.next_fire(), due) if t is not None),
                       default=None)
            timeout = POLL if wake is None else min(POLL, max((wake - now).total_seconds(), 0.0))
            self._sleep(timeout)

    def _left_running(self) -> bool:
        """Is anything left in running/HOST/ (claims, run records) for recovery to decide?"""
        try:
            return any(True for _ in listing(self.spool.running_dir(self.host)))
        except OniteError:
            return True  # the drain's recovery says what is wrong

    def _plan_fields(self) -> dict:
        """The schedule, the --until time and the next scheduled drain, as the log says them."""
        return {"schedule": ",".join(self.schedule) or "-", "until": self.until.strftime("%H:%M") if self.until else None,
                "next": self.next_scheduled.isoformat(timespec="minutes") if self.next_scheduled else None}

    def _plan_next(self) -> None:
        # before the lock is taken (a reload while waiting for it) no schedule time is handled yet: nothing to plan
        self._set_next(next_drain(self.schedule, self.last) if self.schedule and self.last else None)

    def _set_next(self, when: datetime | None) -> None:
        """The next scheduled drain, as the heartbeat tells it to users."""
        self.next_scheduled = when
        if self.heartbeat is not None:
            self.heartbeat.beat(next_drain=when, next_by="daemon" if when else None)

    def _scheduled(self, now: datetime) -> bool:
        """Handle a schedule time that has come: drain (True), or log a missed night."""
        step = self._due(now)
        if step is None:
            return False
        late = (now - step.drain).total_seconds() > LATE
        self.log.event("catch-up" if late else "scheduled", fire=step.drain.isoformat(timespec="minutes"),
                       note="missed while the daemon was not running; draining once" if late else None)
        self._set_next(step.next)  # the heartbeat tells users the drain after this one, not this one's past time
        if self._drain(only_timed=False):
            self._handled(step.drain)
        return True

    def _due(self, now: datetime):
        """The plan of a schedule time that has come and whose window is open; None if none has come, or its
        window closed first (logged as a missed night)."""
        if set_back_since(self.last, now):  # drains handled while the clock was ahead: plan from now
            self.last = now
            self._save_state()
            self._plan_next()
        if self.next_scheduled is None or now < self.next_scheduled:
            return None
        step = plan(self.schedule, self.until, self.last, now)
        if step.skipped is not None:
            self.log.event("missed-night", fire=step.skipped.opened.isoformat(timespec="minutes"),
                           closed=step.skipped.closes.isoformat(timespec="minutes") if step.skipped.closes else None,
                           next=step.next.isoformat(timespec="minutes") if step.next else None,
                           note="its window closed before the daemon could drain; the queue waits for the next night")
            self._handled(step.handled)
            return None
        if step.drain is None:
            self._plan_next()
            return None
        return step

    def _handled(self, fire: datetime) -> None:
        """Every schedule time up to ``fire`` (and any that passed during a drain) is done."""
        latest = last_fire(self.schedule, self.clock.now(), since=fire)
        self.last = max(fire, latest) if latest else fire
        self._save_state()
        self._plan_next()

    def _drain(self, *, only_timed: bool) -> bool:
        """One Driver.drain(); False if it was stopped by a signal (then the daemon exits)."""
        self.timed_mark = self.clock.now()
        self._pending_fire = None
        driver = Driver(self.spool, host=self.host, slots=self.slots, until=self._until_override, echo=self.echo,
                        only_timed=only_timed, linger=False, tick=self._tick, signals=self.signals,
                        lock_fd=self._lock_fd, heartbeat=self.heartbeat, clock=self.clock)
        self.heartbeat.beat(state=BeatState.TIMED if only_timed else BeatState.DRAINING)
        try:
            self.recur.try_spool_due(self.timed_mark)
            driver.drain()
        finally:
            self.watch.relist()
            self.heartbeat.beat(state=BeatState.IDLE)
            driver.log.close()
            self.log.close()  # reopened at its next line: a HUP during the drain may mean logrotate
        self._after_reload()
        if driver.night.stopping:  # INT, TERM or QUIT (a hard stop stops too): the daemon exits too
            self.stopping = True
            return False
        if self._pending_fire is not None:
            self._handled(self._pending_fire)
        return True

    def _tick(self, driver: Driver, now: datetime) -> datetime | None:
        """Each turn of the driver: spool recurring jobs, widen a timed drain when a schedule time comes; when it
        next has something to do."""
        self.recur.try_spool_due(now)
        if driver.night.window_closed and not driver.night.only_timed and driver.night.running:
            driver.narrow_to_timed(now)  # a job running past until holds no --at or recurring job back
            self.heartbeat.beat(state=BeatState.TIMED)
        if driver.night.only_timed and not driver.night.window_closed:
            self._sync_schedule()  # a HUP's new schedule (the driver re-read onite.toml) is followed, as when idle
        if driver.night.only_timed and self._take_wake():
            self.log.event("drain-now", note="told to drain now, during a drain of timed jobs")
            driver.open_window(now, why="told to drain now")
            self.heartbeat.beat(state=BeatState.DRAINING)
        if driver.night.only_timed and self.next_scheduled is not None and now >= self.next_scheduled:
            self._sync_schedule()
            step = self._due(now)
            if step is not None:
                self.log.event("scheduled", fire=step.drain.isoformat(timespec="minutes"),
                               note="during a drain of timed jobs")
                driver.open_window(now)
                self.heartbeat.beat(state=BeatState.DRAINING)
                self._pending_fire = step.drain
                self._set_next(step.next)
        nxt = [t for t in (self.recur.next_fire(), self.next_scheduled if driver.night.only_timed else None) if t]
        return min(nxt, default=None)

    def _sleep(self, timeout: float) -> None:
        if select.select([self._wakeup_fd], [], [], timeout)[0]:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wakeup_fd, 512)

    def _handle_signals(self) -> None:
        while self.signals:
            sig = self.signals.pop(0)
            if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
                self.stopping = True
                self.log.event("signal", sig=signal.Signals(sig).name, action="exit (nothing is running)")
            elif sig == signal.SIGHUP:
                self._reload()
            elif sig == signal.SIGUSR1:
                self.log.event("status", host=self.host, role="daemon", next=self._plan_fields()["next"],
                               recurring=len(self.recur.templates), timed=self.watch.timed())

    def _reload(self) -> None:
        self.log.close()  # reopened by the next line: logrotate moved the old file away
        try:
            trust.recheck(self.spool, os.geteuid(), "onite daemon")
            self.spool.reload_config()
        except OniteError as err:
            self.log.event("reload-failed", error=str(err), note="keeping the previous settings")
            return
        self._after_reload()
        fields, host = self._plan_fields(), default_host(self.spool.config)
        if not self._host_named and host != self.host:  # its lock, heartbeat and claims are the host's it started as
            fields["note"] = f"host {host} takes effect when onite daemon restarts; it drains as {self.host} until then"
        self.log.event("reloaded", **fields)

    def _after_reload(self) -> None:
        """The driver may have re-read onite.toml on HUP: follow its schedule and folders."""
        self.watch.relist()
        self._sync_schedule()

    def _sync_schedule(self) -> None:
        wanted = self.spool.config.schedule
        if wanted == self.schedule or wanted == self._refused_schedule:
            return
        try:
            self.schedule = validate_schedule(tuple(wanted))
        except InvalidInput as err:
            self._refused_schedule = wanted  # logged once, not at every turn of a drain
            self.log.event("reload-failed", error=str(err), note="keeping the previous schedule")
            return
        self._refused_schedule = None
        self._plan_next()

    def _take_wake(self) -> bool:
        """Was this daemon told to drain now? Takes the request (onite.spool.locks.take_wake)."""
        try:
            return take_wake(self.spool, self.host)
        except OSError as err:
            self.log.event("warning", error=f"cannot take the wake request: {err.strerror}")
            return False

    def _load_state(self) -> datetime | None:
        """The last schedule time the state file records; None if there is none, or it is damaged (logged)."""
        try:
            data = values.loads_object(self.state_path.read_bytes())
            if data.get("version") != STATE_FORMAT:
                raise ValueError(f"format {str(data.get('version'))[:20]!r}")
            return values.time(data, "last").astimezone()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            self.log.event("warning", file=str(self.state_path), error=f"unreadable: {err}",
                           note="starting afresh: no missed night is caught up")
            return None

    def _save_state(self) -> None:
        data = {"version": STATE_FORMAT, "host": self.host, "last": self.last.isoformat(),
                "updated": self.clock.now().isoformat(), "pid": os.getpid()}
        try:
            replace_file(self.state_path, (json.dumps(data, indent=1) + "\n").encode(), mode=0o644)
        except OniteError as err:
            self.log.event("warning", error=str(err), note="the daemon state was not saved")
