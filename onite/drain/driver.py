"""The driver: drains one spool on one host, in queue order, up to ``slots`` jobs at once.

``run()`` is a whole ``onite run``: this host's lock (a second driver exits 0, or hands the drain to
an idle daemon), the heartbeat, due recurring jobs, then ``drain()``: recovery, then the loop, whose
steps share the Night: act on the signals caught, file what ended, honour cancels, start jobs while a
slot is free, sleep until something happens. No job starts at or after the window's end (``until``).
Signals: INT or TERM: start nothing, let running jobs finish; a second one, or QUIT: kill and requeue
them; USR1: a status line; HUP: re-read onite.toml; USR2: only wake the loop.
"""

from __future__ import annotations

import os
import select
import signal
from contextlib import nullcontext, suppress
from datetime import datetime, time as dtime, timedelta

from onite.core.clock import SYSTEM, Clock
from onite.core.config import Config
from onite.core.errors import EXIT_FAILURE, ConfigError, OniteError, Refused, SpoolIOError
from onite.core.names import is_valid_key
from onite.core.policy import window_end
from onite.core.resources import capacity_text, host_capacity
from onite.core.state import Stop
from onite.drain import heartbeat as hb
from onite.drain.cancels import CancelInbox
from onite.drain.finish import Finisher
from onite.drain.night import Night
from onite.drain.pick import Picker
from onite.drain.recovery import Recovery
from onite.drain.start import Starter
from onite.exec import contain, limits
from onite.exec.limits import machine
from onite.exec.notify import Notifier
from onite.exec.runner import Runner
from onite.spool import locks, trust
from onite.spool.log import CANNOT_RECORD, ActivityLog
from onite.spool.paths import SpoolDir
from onite.spool.settings import default_host

POLL = 0.5  # seconds between looks at the queue and cancel/ while jobs run
IDLE_POLL = 1.0  # while waiting for a not-before time with nothing running
SETTLE_WAIT = timedelta(seconds=2)  # a driver that does not linger still waits this long for a settling job
WAIT_WORTH_SAYING = 60  # s: a wait for a not-before time at least this long is logged ("waiting")


class Driver:
    """Drains one spool on one host. ``run()`` returns the process exit code."""

    def __init__(self, spool: SpoolDir, *, host: str | None = None, slots: int | None = None,
                 until: dtime | None = None, echo=None, runner: Runner | None = None, only_timed: bool = False,
                 linger: bool = True, tick=None, signals: list[int] | None = None, listener=None,
                 lock_fd: int | None = None, heartbeat=None, clock: Clock = SYSTEM) -> None:
        """``only_timed``: start only jobs whose not-before time has come. ``linger=False``: return
        rather than wait for a not-before time. ``tick(driver, now)``: called every turn, returns when
        to call it next. ``lock_fd`` and ``heartbeat``: the daemon's, when it holds the lock."""
        self.spool = spool
        config = spool.config  # the night's from now on
        self.host = host or default_host(config)
        self.clock = clock
        self._slots_override, self._until_override = slots, until
        self.log = ActivityLog(spool.log_path, self.host, echo=echo, listener=listener, clock=clock)
        self.lock_fd = lock_fd  # this host's driver lock, once held: each job's monitor holds it until recorded
        self._containment = contain.discover(config.contain)
        self._limiter = limits.discover(self._containment.base if self._containment.kind == contain.CGROUP2 else None,
                                        config.max_pids)
        self._pam = None  # onite.exec.pam.Pam, found as its local runner is made
        self._runner = runner
        self.signals: list[int] = [] if signals is None else signals
        self.wakeup_fd: int | None = None  # the signal catcher of run(), while it runs
        self.linger, self.tick, self.heartbeat = linger, tick, heartbeat
        self._tick_at: datetime | None = None
        self._told_waiting: datetime | None = None  # the wake time the log was last told of (_say_waiting)
        self._told_waiting_at: float | None = None  # when (monotonic)
        self.started_at = clock.now()
        self.night = Night(spool=spool, config=config, host=self.host, clock=clock, log=self.log,
                           notifier=Notifier(spool, self.log, clock=clock), runner=runner)
        self._set_window(self.started_at, only_timed)
        self.finisher = Finisher(self.night)
        self.picker = Picker(self.night, self.finisher)
        self.starter = Starter(self.night, self.finisher)
        self.cancels = CancelInbox(self.night, self.finisher)
        self.recovery = Recovery(self.night, self.finisher, self._containment, self._limiter, self.make_runner)
        self.log.on_failure = self.finisher.note_cannot_record  # a night that cannot be logged stops

    @property
    def config(self) -> Config:
        """onite.toml's settings, as last (re)loaded."""
        return self.night.config

    @property
    def slots(self) -> int:
        """Jobs at once: --slots, else [slurm] max_jobs for the slurm executor, else this host's slots."""
        if self._slots_override:
            return self._slots_override
        if self.runner.executor == "slurm":
            return self.config.slurm.max_jobs
        return self.config.slots_for(self.host)

    @property
    def runner(self) -> Runner:
        """The executor, made when first needed (a local one needs the driver lock's descriptor)."""
        if self._runner is None:
            self._runner = self.make_runner()
        return self._runner

    @property
    def until(self) -> dtime | None:
        return self._until_override or self.config.until

    def make_runner(self, executor: str | None = None) -> Runner:
        """A new executor of kind ``executor`` (default: onite.toml's).
        Raises ConfigError: the slurm executor, where Slurm's commands are not installed."""
        if (executor or self.config.executor) == "slurm":
            from onite.exec.slurm import SlurmRunner

            return SlurmRunner(self.config, switch_user=os.geteuid() == 0, log=self.log, clock=self.clock)
        from onite.exec.local import LocalRunner
        from onite.exec.pam import discover

        if self._pam is None:
            self._pam = discover(self.config.pam, self.config.pam_service, os.geteuid() == 0)
        return LocalRunner(shell=self.config.shell, kill_grace=self.config.kill_grace.total_seconds(),
                           switch_user=os.geteuid() == 0, containment=self._containment, lock_fd=self.lock_fd,
                           limiter=self._limiter, pam=self._pam, max_output=self.config.max_output)

    def reload(self) -> None:
        """SIGHUP: read onite.toml again; a bad one keeps the settings before."""
        night = self.night
        try:
            trust.recheck(self.spool, os.geteuid(), "onite run")
            config = self.spool.reload_config()
        except OniteError as err:
            night.log.event("reload-failed", error=str(err), note="keeping the previous settings")
            return
        night.config = config
        night.index.set_folders()
        night.runner.reload(config)
        night.slots = self.slots
        night.window_end = window_end(self.window_from, self.until)
        night.log.event("reloaded", slots=night.slots, priorities=config.priorities)

    def run(self, *, scheduled: bool = False, leaving: bool = False) -> int:
        """Take this host's lock, spool due recurring jobs, and drain; the exit code (0 also when another
        driver holds the lock; 4 when runs could not be recorded). ``scheduled``: drain only inside a
        night window of ``schedule``. ``leaving``: the process ends with this run.
        Raises SpoolError, Refused: this user may not drain the spool; ConfigError: as check_capacity."""
        trust.check_drainable(self.spool, "onite run")
        check_capacity(self.config, self.host, str(self.spool.config_path))
        with SignalCatcher(self.signals, leaving=leaving) as wakeup_fd:
            self.wakeup_fd = wakeup_fd
            lock = take_host_lock(self.spool, self.host, self.started_at)
            if lock is None:
                self._busy(hand_over=not scheduled)
                return 0
            self.lock_fd = lock.fd
            try:
                self._start_heartbeat()
                if self.spool.recur_dir.is_dir():
                    from onite.drain.instances import RecurScheduler

                    RecurScheduler(self.spool, self.log, clock=self.clock).try_spool_due(self.clock.now())
                if scheduled and not self._inside_scheduled_window():
                    return 0
                self.drain(explain=True)
            finally:
                try:
                    if self.heartbeat is not None:
                        self.heartbeat.close()
                finally:
                    lock.release()
                    self.log.close()
        return EXIT_FAILURE if self.night.cannot_record else 0

    def recover_host(self) -> tuple[list[str], list[str], list[str]]:
        """``onite recover --host NAME``: take NAME's lock, requeue (or fail) its claims, let go; the names of
        those recovered, of those left to their live monitors on this machine, and of those kept claimed for
        the next driver (a Slurm job that cannot be stopped or asked about now, a claim that could not be read).
        Raises Refused: a driver of that host holds its lock (it is alive)."""
        night = self.night
        lock = take_host_lock(self.spool, self.host, self.started_at, role="recover")
        if lock is None:
            raise Refused(f"a driver for host {self.host} is running (it holds {self.spool.lock_path(self.host).name})",
                          "stop it there, or let it recover its own jobs")
        try:
            night.runner = self.runner
            night.slots = self.slots
            running_dir = night.running_dir
            claims = sorted(n for n in (os.listdir(running_dir) if running_dir.is_dir() else ()) if is_valid_key(n))
            self.log.event("recover-host", host=self.host, by=f"uid {night.euid}", claims=len(claims))
            # nothing here would watch a run: a Slurm job's claim is requeued (and the job cancelled); a run
            # whose monitor lives is left for its host's next driver to adopt
            self.recovery.watches = False
            self.recovery.recover()
            # what is still claimed, we holding the lock, is not recovered: only with none is the driver over
            remaining = {name for name in claims if os.path.lexists(running_dir / name)}
            if not remaining:
                hb.recovered(self.spool, self.host, self.clock.now())
            left = self.recovery.left
            return ([c for c in claims if c not in remaining], left,
                    [c for c in claims if c in remaining and c not in left])
        finally:
            night.notifier.finish()  # on_interrupt = fail notifies the owners of what it failed
            night.metrics.flush()
            lock.release()
            self.log.close()

    def _busy(self, hand_over: bool) -> None:
        """Another process holds this host's lock: say which, or (``hand_over``) hand the drain to its
        daemon if that is idle."""
        beat = hb.read(self.spool, self.host)
        if beat is None or not hb.is_alive(beat, self.clock.now()):
            holder = {"holder": "unknown (no heartbeat)"}
        elif (hand_over and beat.role == hb.Role.DAEMON and beat.state == hb.BeatState.IDLE
              and hb.request_wake(self.spool, self.host, beat)):
            self.log.event("drain-handed", host=self.host, daemon=beat.pid,
                           note="the daemon of this host was idle: it drains now")
            return
        else:
            holder = {"pid": beat.pid, "role": beat.kind, "since": beat.since.isoformat(timespec="seconds"),
                      "started_by": beat.started_by, "state": beat.state if beat.role == hb.Role.DAEMON else None}
        self.log.event("driver-busy", host=self.host, **holder,
                       note="another driver is draining this spool on this host; exiting")

    def _start_heartbeat(self) -> None:
        """Say this driver is alive, who started it and when the next drain is due."""
        self.heartbeat = hb.Heartbeat(self.spool, self.host, hb.Role.RUN, log=self.log, clock=self.clock)
        upcoming = None
        with suppress(OniteError, OSError, ValueError):
            from onite.drain.nextdrain import plan

            upcoming = plan(self.spool, self.clock.now(), host=self.host).next  # a driver of onite run starts none
        self.heartbeat.beat(next_drain=upcoming.when if upcoming else None, next_by=upcoming.by if upcoming else None)
        if self.heartbeat.beat_.started_by == "cron" and upcoming is not None and upcoming.by == "cron":
            from onite.spool.cronrecords import refresh_record

            refresh_record(self.spool, self.host, upcoming.when)

    def _inside_scheduled_window(self) -> bool:
        from onite.core.schedule import scheduled_window

        now = self.clock.now()
        window = scheduled_window(self.config.schedule, self.until, now)
        if window is None or not window.is_open(now):
            self.log.event("outside-window", host=self.host,
                           last=window.opened.isoformat(timespec="minutes") if window else None,
                           closed=window.closes.isoformat(timespec="minutes") if window and window.closes else None,
                           note="outside the night window; nothing drained (onite run without --scheduled drains now)")
            return False
        return True

    def drain(self, *, explain: bool = False) -> None:
        """Recover, run jobs until nothing can start, prune; the caller holds this host's lock.
        ``explain``: if nothing happened, log why (``nothing-due``)."""
        night = self.night
        night.runner = self.runner
        night.slots = self.slots
        try:
            self.spool.ensure_running_folder(self.host)
        except SpoolIOError as err:  # a host's first drain on a full disk
            self.finisher.note_cannot_record(str(err))
            return
        local = night.runner.executor == "local"
        pam = self._pam if local else None
        try:  # a daemon's onite.toml may have been reloaded since
            check_capacity(self.config, self.host, str(self.spool.config_path))
            if pam is not None and pam.required and pam.service is None:
                raise ConfigError(f'pam = "required" in onite.toml, but {pam.why}')
        except ConfigError as err:
            self.log.event("error", host=self.host, error=str(err), note="nothing is drained until it is fixed")
            return
        self.log.event("driver-start", host=self.host, slots=night.slots,
                       until=self.until.strftime("%H:%M") if self.until else None, executor=night.runner.executor,
                       only="timed jobs" if night.only_timed else None,
                       contain=self._containment.describe() if local else None,
                       limits=self._limiter.describe() if local else None,
                       pam=pam.describe() if pam is not None else None,
                       capacity=capacity_text(self.picker.capacity()) if local else None)
        night.metrics.drain_started(self.clock.now())
        # the signal catcher ``run`` installed, or one for this drain (the daemon's signals list)
        catcher = nullcontext(self.wakeup_fd) if self.wakeup_fd is not None else SignalCatcher(self.signals)
        with catcher as wakeup_fd:
            self.recovery.recover()
            try:
                self._loop(wakeup_fd)
            finally:
                night.runner.close()
                self._limiter.remove_folders()  # those nothing is left in
                contain.remove_base(self._containment)
                night.notifier.finish(stop=self._must_stop_now)
            self.finisher.prune()
        counts = night.counts
        if explain and not any(counts.values()) and not (night.stopping or night.window_closed or night.cannot_record):
            # nothing started and nothing was filed: why, in status's words
            from onite.drain.verdicts import idle_summary

            try:
                queued, note = idle_summary(self.spool, self.clock.now(), euid=night.euid, host=self.host)
            except OniteError as err:
                queued, note = None, f"nothing was started (the queue could not be read: {err})"
            self.log.event("nothing-due", queued=queued, note=note)
        reason = ("stopped" if night.stopping else "window closed" if night.window_closed
                  else CANNOT_RECORD if night.cannot_record else "drained")
        with suppress(OniteError):  # what a stop put back is queued again, under names the index forgot at the claim
            night.index.refresh(force=True)
        self.log.event("driver-exit", done=counts["done"], failed=counts["failed"], cancelled=counts["cancelled"],
                       left=len(night.index), reason=reason)
        # a daemon stays up after its drain; onite run exits
        night.metrics.drain_ended(self.clock.now(), exit_status=EXIT_FAILURE if night.cannot_record else 0,
                                  completed=reason in ("drained", "window closed"),
                                  leaving=self.heartbeat is None or self.heartbeat.beat_.role != hb.Role.DAEMON)

    def _loop(self, wakeup_fd: int) -> None:
        night = self.night
        while True:
            self._handle_signals()
            if night.hard_stop:  # kill what runs: each goes back to its queue when it has ended
                for run in list(night.running.values()):
                    if run.stopping != Stop.SHUTDOWN:
                        night.runner.stop(run, Stop.SHUTDOWN)
            elif night.stopping:  # start nothing: a job still waiting in Slurm, never started, goes back to its queue
                for run in night.runner.unstarted():
                    night.runner.stop(run, Stop.SHUTDOWN)
            if self.heartbeat is not None:
                self.heartbeat.tick()
            night.metrics.tick()  # what the last turn filed; the last turn's is written by drain_ended
            if self.tick is not None and not night.stopping:
                self._tick_at = self.tick(self, self.clock.now())
            ended = self.finisher.reap()
            night.runner.tick(self.clock.monotonic())
            if night.notifier.busy:
                night.notifier.reap()
            self.cancels.process()
            self._start_jobs()  # the next jobs first: filing those that ended is then off their way
            if ended:
                self.finisher.file(ended)
                self.cancels.process()  # a request kept for one of them: its retry is cancelled before it starts
                self._start_jobs()  # what their results let start (a retry, a dependant)
            if not night.running and not night.runner.busy():
                if night.stopping or night.hard_stop or night.window_closed:
                    return
                if night.wake_at is None or not self._lingers():
                    # nothing runnable: one full listing to be sure before we leave
                    night.index.refresh(force=True)
                    self._start_jobs()  # not past a record that cannot be written: it would start again
                    if not night.running and (night.wake_at is None or not self._lingers()):
                        if self.picker.fail_cycles():
                            continue  # what waited for those fails at the next pick
                        return
                else:
                    self._say_waiting()
            poller = select.poll()  # the signals' pipe and what the runner waits on now
            for fd in (wakeup_fd, *night.runner.wait_fds()):
                poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll(self._timeout() * 1000):
                if fd == wakeup_fd:
                    with suppress(BlockingIOError):
                        os.read(wakeup_fd, 512)

    def _start_jobs(self) -> None:
        """Start jobs in queue order while a slot is free, the window is open, the executor takes them,
        and nothing (a stop, a record that cannot be written) forbids it."""
        night = self.night
        night.wake_at = None
        while len(night.running) < night.slots and not (night.stopping or night.hard_stop or night.cannot_record):
            if night.window_end is not None and self.clock.now() >= night.window_end:
                if not night.window_closed:
                    night.window_closed = True
                    night.index.refresh(force=True)
                    self.log.event("window-closed", until=self.until.isoformat(timespec="auto"),
                                   left=len(night.index), note="jobs left stay queued for the next night")
                return
            if night.paused_until is not None:  # the executor took no job: start none until its pause ends
                left = night.paused_until - self.clock.monotonic()
                if left > 0:
                    night.note_wake(self.clock.now() + timedelta(seconds=left))
                    return
                night.paused_until = None
            picked = self.picker.pick()
            if picked is None:
                return
            cand = picked.cand
            with self.finisher.guard(cand.name, cand.path, night.running_dir / cand.name):
                self.starter.start(picked)

    def _say_waiting(self) -> None:
        """Nothing runs, and the driver stays for a not-before time: say so, once per time and at most
        once a minute."""
        when, now = self.night.wake_at, self.clock.monotonic()
        if when is None or when == self._told_waiting or (when - self.clock.now()).total_seconds() < WAIT_WORTH_SAYING:
            return
        if self._told_waiting_at is not None and now - self._told_waiting_at < WAIT_WORTH_SAYING:
            return
        self._told_waiting, self._told_waiting_at = when, now
        # the time is not said: a job's --at is its owner's, and the log is everyone's
        self.log.event("waiting", note="nothing can start now: a queued job waits for a later --at time (onite "
                                       "status shows it to its owner and root); jobs spooled meanwhile start at "
                                       "once; INT or TERM stops this driver")

    def _timeout(self) -> float:
        """Seconds to sleep: until the next deadline, wake or tick, at most a poll interval."""
        night = self.night
        now_mono, now = self.clock.monotonic(), self.clock.now()
        deadlines = (night.runner.next_deadline(), night.notifier.next_deadline())
        waits = [at - now_mono for at in deadlines if at is not None]
        waits += [(when - now).total_seconds() for when in (night.wake_at, self._tick_at) if when is not None]
        return max(0.0, min([POLL if night.running else IDLE_POLL, *waits]))

    def _lingers(self) -> bool:
        """With nothing running, wait for the next not-before time? One that does not linger still waits
        a moment for a job being spooled now, and out an executor's pause."""
        night = self.night
        return (self.linger or night.paused_until is not None
                or night.wake_at is not None and night.wake_at - self.clock.now() <= SETTLE_WAIT)

    def _handle_signals(self) -> None:
        night = self.night
        while self.signals:
            sig = self.signals.pop(0)
            if sig in (signal.SIGINT, signal.SIGTERM) and not night.stopping:
                night.stopping = True
                night.log.event("signal", sig=signal.Signals(sig).name,
                                action="finish running jobs, start none", running=len(night.running))
            elif sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):  # a second INT or TERM, or QUIT
                night.hard_stop = night.stopping = True
                night.log.event("signal", sig=signal.Signals(sig).name, action="kill running jobs and requeue them")
            elif sig == signal.SIGUSR1:
                queued = night.index.counts()
                night.log.event("status", running=",".join(sorted(night.running)) or "-", slots=night.slots,
                                queued=sum(queued.values()), done=night.counts["done"], failed=night.counts["failed"],
                                cancelled=night.counts["cancelled"], stopping="yes" if night.stopping else None)
            elif sig == signal.SIGHUP:
                self.reload()

    def _must_stop_now(self) -> bool:
        """While waiting for the last notifiers: has a signal asked for an immediate exit?"""
        self._handle_signals()
        return self.night.hard_stop

    def _set_window(self, now: datetime, only_timed: bool) -> None:
        """This drain's window opens at ``now`` (until ``until``); ``only_timed``: for timed jobs only."""
        self.window_from = now
        self.night.window_end = window_end(now, self.until)
        self.night.only_timed = only_timed

    def narrow_to_timed(self, now: datetime) -> None:
        """The window closed during a daemon's full drain that still waits for running jobs: from now on start
        the timed jobs that come due (--at, recurring runs, retries), as a drain of timed jobs would."""
        self._set_window(now, True)
        self.log.event("timed-only", note="the window closed while jobs still run; until they end, only jobs "
                       "whose --at or recurring time comes are started")

    def open_window(self, now: datetime, *, why: str = "a scheduled drain time came") -> None:
        """A scheduled drain time came (or a wake, ``why``) during a timed-only drain: from now on run every job."""
        self._set_window(now, False)
        self.night.window_closed = False
        self.log.event("window-opened", until=self.until.strftime("%H:%M") if self.until else None,
                       note=f"{why}; every queued job may run now")


class SignalCatcher:
    """Route INT, TERM, QUIT, HUP, USR1 and USR2 into a list, and wake the driver's poll()."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

    def __init__(self, sink: list[int], *, leaving: bool = False) -> None:
        """``leaving``: the process ends after this catcher: its signals are then ignored, not given back
        to their default, so that one that comes after the driver logged its exit cannot kill it."""
        self.sink = sink
        self.leaving = leaving

    def __enter__(self) -> int:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        self.saved = {sig: signal.signal(sig, lambda signum, _: self.sink.append(signum)) for sig in self.SIGNALS}
        # `onite run --detach` starts the driver with these blocked: what came meanwhile is handled now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)
        return self.read_fd

    def __exit__(self, *exc) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, signal.SIG_IGN if self.leaving else handler)
        signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.read_fd)
        os.close(self.write_fd)


def check_capacity(config, host: str, source: str) -> None:
    """Refuse to drain ``host`` (this machine's) where its capacity is empty, before anything is claimed:
    every job with a request would be failed as too big.
    Raises ConfigError: the reserve leaves nothing of this machine for jobs."""
    if config.executor == "local":
        host_capacity(config, host, machine(), source=source)


def take_host_lock(spool: SpoolDir, host: str, since: datetime, *, role: str = "") -> locks.Lock | None:
    """flock ``host``'s driver lock, with who holds it (this process, since when, as what) written into it; None
    if another process holds it after half a second. Raises Refused, SpoolError, SpoolIOError: the lock cannot
    be opened."""
    holder = f"pid={os.getpid()} host={host} since={since.isoformat()}" + (f" role={role}" if role else "")
    return locks.take(spool.lock_path(host), timeout=0.5, holder=holder)
