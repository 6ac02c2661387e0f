"""The driver: drains one spool on one host, in queue order, up to ``slots`` jobs at once.

Its loop, once recovery has dealt with what a dead driver left:

    reap finished jobs → file them (or spool a retry) → honour cancel
    requests → start the first eligible jobs in order while a slot is free →
    sleep until a job ends, a signal arrives, a deadline passes or the queue
    may have changed.

The queue is looked at again after every job, so a job spooled at a higher
priority during the night runs next. No job starts at or after the window
end (``until``); the drain ends when nothing runs and nothing can start.

The Driver holds the state its rooms share and delegates: picking
(onite.drain.pick), claiming and starting (onite.drain.start), filing
(onite.drain.finish), cancel/ (onite.drain.cancels), recovery
(onite.drain.recovery, onite.drain.orphans), signals (onite.drain.signals);
``run()`` is the whole ``onite run`` around one drain (onite.drain.session).
``onite daemon`` calls ``drain()`` under its own lock with the hooks
``only_timed``, ``linger=False``, ``tick`` and ``open_window()``
(onite.drain.daemon, docs/scheduling.md). Time is the ``clock`` it is given
(onite.core.clock): tests drive a night with a ManualClock.
"""

from __future__ import annotations

import os
import select
from contextlib import contextmanager
from datetime import datetime, time as dtime, timedelta

from onite.core.clock import SYSTEM, Clock
from onite.core.config import Config
from onite.core.errors import ConfigError
from onite.core.policy import window_end
from onite.drain import session, signals
from onite.drain.cancels import CancelInbox
from onite.drain.finish import Finisher
from onite.drain.orphans import Orphans
from onite.drain.pack import Packer
from onite.drain.pick import Picker
from onite.drain.recovery import Recovery
from onite.drain.start import Starter
from onite.exec.notify import Notifier
from onite.exec.runner import Run, Runner
from onite.spool.index import QueueIndex
from onite.spool.log import ActivityLog
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
        """``only_timed``: start only jobs that carry a not-before time that has come (the
        daemon's wakes for ``--at`` times and recurring instances). ``linger=False``: when
        nothing runs and nothing can start, return instead of waiting for a not-before
        time (the daemon does its own waiting). ``tick(driver, now)``: called on every
        turn of the loop; returns when it wants to be called next (or None). ``signals``:
        the list caught signals go to (the daemon shares its own, so none is lost in between).
        ``listener``: told of every logged event as data (onite.spool.log.ActivityLog; the live progress).
        ``lock_fd``: the descriptor of this host's driver lock when the caller holds it (the daemon).
        ``heartbeat``: the lock holder's onite.drain.heartbeat.Heartbeat, kept fresh on every turn (the
        daemon passes its own; ``run()`` makes one). ``clock``: the time it drains by.
        """
        self.spool = spool
        self.config: Config = spool.config
        self.host = host or default_host(self.config)
        self.clock = clock
        self.running_dir = spool.running_dir(self.host)
        self.pid, self.machine, self.euid = os.getpid(), os.uname().nodename, os.geteuid()
        self._slots_override, self._until_override = slots, until
        self.log = ActivityLog(spool.log_path, self.host, echo=echo, listener=listener, clock=clock)
        self.lock_fd = lock_fd  # this host's driver lock, once held (each job's monitor inherits it)
        self._containment = None
        self._runner = runner
        self.notifier = Notifier(spool, self.log, clock=clock)
        self.index = QueueIndex(spool.queue_folders())  # paced by the real clock: it bounds cost, decides nothing
        self.running: dict[str, Run] = {}
        self.counts = {"done": 0, "failed": 0, "cancelled": 0, "retried": 0, "requeued": 0}
        self.signals: list[int] = [] if signals is None else signals
        self.wakeup_fd: int | None = None  # the signal catcher of run(), while it runs
        self.stopping = self.hard_stop = self.window_closed = False
        self.wake_at: datetime | None = None  # the earliest not-before time worth waiting for tonight
        self._told_waiting: datetime | None = None  # the wake time the log was last told of (_say_waiting)
        self._told_waiting_at: float | None = None  # when (monotonic)
        self.only_timed, self.linger, self.tick, self.heartbeat = only_timed, linger, tick, heartbeat
        self._tick_at: datetime | None = None
        self.started_at = clock.now()
        self.window_end = window_end(self.started_at, self.until)
        self.picker, self.starter, self.finisher = Picker(self), Starter(self), Finisher(self)
        self.cancels, self.recovery, self.orphans = CancelInbox(self), Recovery(self), Orphans(self)
        self.packer = Packer(self)
        self._limiter = None

    # ---- settings ------------------------------------------------------------------

    @property
    def slots(self) -> int:
        """Jobs at once: --slots, else [slurm] max_jobs for the slurm executor, else this host's slots.

        With Slurm the cluster, not this host, runs the jobs: ``slots`` describes
        this machine, ``max_jobs`` how many onite jobs may be in Slurm at once.
        """
        if self._slots_override:
            return self._slots_override
        if self.runner.executor == "slurm":
            return self.config.slurm.max_jobs
        return self.config.slots_for(self.host)

    @property
    def runner(self) -> Runner:
        """The executor: made when first needed (a local one needs the driver lock's descriptor)."""
        if self._runner is None:
            self._runner = self.make_runner()
        return self._runner

    @runner.setter
    def runner(self, value: Runner) -> None:
        self._runner = value

    @property
    def containment(self):
        """How jobs are contained here (onite.exec.contain), decided once."""
        if self._containment is None:
            from onite.exec.contain import discover

            self._containment = discover(self.config.contain)
        return self._containment

    @property
    def limiter(self):
        """How jobs are held to their requests here (onite.exec.limits), decided once."""
        if self._limiter is None:
            from onite.exec import contain, limits

            cont = self.containment
            self._limiter = limits.discover(cont.base if cont.kind == contain.CGROUP2 else None)
        return self._limiter

    @property
    def until(self) -> dtime | None:
        return self._until_override or self.config.until

    def make_runner(self, executor: str | None = None) -> Runner:
        """A new executor of kind ``executor`` (default: onite.toml's).

        Raises:
            ConfigError: the slurm executor, where Slurm's commands are not installed.
        """
        if (executor or self.config.executor) == "slurm":
            from onite.exec.slurm import SlurmRunner

            return SlurmRunner(self.spool, self.config, switch_user=self.euid == 0, log=self.log, clock=self.clock)
        from onite.exec.local import LocalRunner

        return LocalRunner(shell=self.config.shell, kill_grace=self.config.kill_grace.total_seconds(),
                           switch_user=self.euid == 0, containment=self.containment, lock_fd=self.lock_fd,
                           clock=self.clock, limiter=self.limiter)

    # ---- a whole run, and one drain ------------------------------------------------

    def run(self, *, scheduled: bool = False) -> int:
        """Lock, spool due recurring jobs, drain (onite.drain.session.run); the exit code."""
        return session.run(self, scheduled=scheduled)

    def recover_host(self) -> list[str]:
        """``onite recover --host``: recover this driver's host's claims (onite.drain.session.recover_host)."""
        return session.recover_host(self)

    def drain(self, *, explain: bool = False) -> None:
        """Recover, run jobs until nothing can start, prune. The caller holds this host's lock.
        ``explain``: if nothing happened, log why (``nothing-due``: what is queued and why it waits)."""
        try:
            os.makedirs(self.running_dir, mode=0o755, exist_ok=True)
        except OSError as err:  # a host's first drain on a full disk (or one out of inodes)
            self.finisher.note_cannot_record(f"cannot make {self.running_dir}: {err.strerror}")
            return
        try:
            self.packer.check()  # `onite run` checked it; a daemon's onite.toml may have been reloaded since
        except ConfigError as err:
            self.log.event("error", host=self.host, error=str(err), note="nothing is drained until it is fixed")
            return
        local = self.runner.executor == "local"
        self.log.event("driver-start", host=self.host, slots=self.slots,
                       until=self.until.strftime("%H:%M") if self.until else None, executor=self.runner.executor,
                       only="timed jobs" if self.only_timed else None,
                       contain=self.containment.describe() if local else None,
                       limits=self.limiter.describe() if local else None,
                       capacity=self._capacity_words() if local else None)
        with self._catching() as wakeup_fd:
            self.recovery.recover()
            try:
                self._loop(wakeup_fd)
            finally:
                self.runner.close()
                self._remove_cgroup_folders()
                self.notifier.finish(stop=self._must_stop_now)
            self.finisher.prune()
        cannot_record = self.finisher.cannot_record
        if explain and not any(self.counts.values()) and not (self.stopping or self.window_closed or cannot_record):
            session.explain_idle(self)
        self.log.event("driver-exit", done=self.counts["done"], failed=self.counts["failed"],
                       cancelled=self.counts["cancelled"], left=len(self.index),
                       reason="stopped" if self.stopping else "window closed" if self.window_closed
                       else "cannot record" if cannot_record else "drained")

    def _remove_cgroup_folders(self) -> None:
        """Remove the folders of this driver's job cgroups that nothing is left in (onite.exec.contain
        and limits say which may go)."""
        if self._limiter is not None:
            self._limiter.remove_folders()
        if self._containment is not None:
            from onite.exec.contain import remove_base

            remove_base(self._containment)

    def _capacity_words(self) -> str:
        """This host's capacity for the log: ``23G memory, 2 CPUs``."""
        from onite.core.resources import capacity_text

        return capacity_text(self.packer.capacity())

    @contextmanager
    def _catching(self):
        """The wakeup descriptor of the signal catcher ``run`` installed, or of one for this drain
        (the daemon drains under its own catcher, sharing its list of signals)."""
        if self.wakeup_fd is not None:
            yield self.wakeup_fd
            return
        with signals.SignalCatcher(self.signals) as wakeup_fd:
            yield wakeup_fd

    # ---- hooks for onite daemon ------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        """INT, TERM or QUIT arrived while draining: the caller should exit too."""
        return self.stopping or self.hard_stop

    def open_window(self, now: datetime) -> None:
        """A scheduled drain time came during a timed-only drain: from now on run every job."""
        self.only_timed = False
        self.window_closed = False
        self.window_end = window_end(now, self.until)
        self.log.event("window-opened", until=self.until.strftime("%H:%M") if self.until else None,
                       note="a scheduled drain time came; every queued job may run now")

    # ---- the loop ------------------------------------------------------------------------

    def _loop(self, wakeup_fd: int) -> None:
        poller = select.poll()
        poller.register(wakeup_fd, select.POLLIN)
        registered: set[int] = set()
        while True:
            signals.handle(self)
            if self.hard_stop:
                signals.kill_all(self)
            if self.heartbeat is not None:
                self.heartbeat.tick()
            if self.tick is not None and not self.stopping:
                self._tick_at = self.tick(self, self.clock.now())
            self.finisher.reap()
            self.runner.tick(self.clock.monotonic())
            if self.notifier.busy:
                self.notifier.reap()
            self.cancels.process()
            self._start_more()
            if not self.running and not self.runner.busy():
                if self.stopping or self.hard_stop or self.window_closed:
                    return
                if self.wake_at is None or not self._lingers():
                    # nothing runnable: one full listing to be sure before we leave
                    self.index.refresh(force=True)
                    self._start_more()  # not past a record that cannot be written: it would start again
                    if not self.running and (self.wake_at is None or not self._lingers()):
                        return
                else:
                    self._say_waiting()
            fds = set(self.runner.wait_fds())
            for fd in registered - fds:
                poller.unregister(fd)
            for fd in fds - registered:
                poller.register(fd, select.POLLIN)
            registered = fds
            for fd, _ in poller.poll(self._timeout() * 1000):
                if fd == wakeup_fd:
                    try:
                        os.read(wakeup_fd, 512)
                    except BlockingIOError:
                        pass

    def _say_waiting(self) -> None:
        """Nothing runs, and the driver stays for a job's not-before time: say so once per time (a
        hand-started ``onite run`` otherwise sits there for hours with nothing to say why)."""
        when, now = self.wake_at, self.clock.monotonic()
        if when is None or when == self._told_waiting or (when - self.clock.now()).total_seconds() < WAIT_WORTH_SAYING:
            return
        if self._told_waiting_at is not None and now - self._told_waiting_at < WAIT_WORTH_SAYING:
            return  # at most once a minute: a user toggling holds on timed jobs must not fill the log
        self._told_waiting, self._told_waiting_at = when, now
        # the time is not said: a job's --at is its owner's, and the log is everyone's
        self.log.event("waiting", note="nothing can start now: a queued job waits for a later --at time (onite "
                                       "status shows it to its owner and root); jobs spooled meanwhile start at "
                                       "once; INT or TERM stops this driver")

    def _timeout(self) -> float:
        """Seconds to sleep: until the next deadline, wake or tick, at most a poll interval."""
        now_mono, now = self.clock.monotonic(), self.clock.now()
        timeout = POLL if self.running else IDLE_POLL
        if self.runner.needs_polling():
            timeout = min(timeout, 0.05)
        for deadline in (self.runner.next_deadline(), self.notifier.next_deadline()):
            if deadline is not None:
                timeout = min(timeout, max(deadline - now_mono, 0.0))
        for when in (self.wake_at, self._tick_at):
            if when is not None:
                timeout = min(timeout, max((when - now).total_seconds(), 0.0))
        return max(timeout, 0.0)

    def _lingers(self) -> bool:
        """With nothing running, wait for the next not-before time? A driver that does not
        linger still waits a moment for a job that is settling (being spooled right now), and
        out a pause of an unavailable executor (the jobs it put back are tonight's work).
        """
        if self.linger or self.starter.paused:
            return True
        return self.wake_at is not None and self.wake_at - self.clock.now() <= SETTLE_WAIT

    def _must_stop_now(self) -> bool:
        """While waiting for the last notifiers: has a signal asked for an immediate exit?"""
        signals.handle(self)
        return self.hard_stop

    def _start_more(self) -> None:
        """Fill the free slots, unless the driver is stopping or cannot record what it starts."""
        if not self.stopping and not self.hard_stop and not self.finisher.cannot_record:
            self._start_jobs()

    def _start_jobs(self) -> None:
        """Start jobs in queue order while a slot is free, the window is open and the executor takes them."""
        self.wake_at = None
        while len(self.running) < self.slots:
            if self.finisher.cannot_record or self.stopping or self.hard_stop:
                return  # a start just failed to be recorded (a full disk): the next would too
            if self.window_end is not None and self.clock.now() >= self.window_end:
                if not self.window_closed:
                    self.window_closed = True
                    self.index.refresh(force=True)
                    self.log.event("window-closed", until=self.until.isoformat(timespec="auto"), left=len(self.index),
                                   note="jobs left stay queued for the next night")
                return
            if not self.starter.may_start():
                return
            picked = self.picker.pick()
            if picked is None:
                return
            cand = picked.cand
            with self.finisher.guard(cand.name, cand.path, self.running_dir / cand.name):
                self.starter.start(*picked)

    def note_wake(self, when: datetime) -> None:
        """Something may become startable at ``when`` (a not-before time, a settling file): wake then,
        if it is tonight."""
        if self.window_end is not None and when >= self.window_end:
            return  # not tonight
        if self.wake_at is None or when < self.wake_at:
            self.wake_at = when
