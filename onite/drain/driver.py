"""The driver (``onite run``): lock, recover, then drain the queue in order, up to ``slots`` at once.

One driver per host holds ``locks/driver.HOST.lock`` (flock; a folder only
root may enter, so no user can hold it: onite.spool.locks) for its whole life and
says so in its world-readable heartbeat ``driver.HOST.state`` (onite.drain.heartbeat:
pid, who started it, when the next drain is due); a second one logs that and
exits 0, or hands the drain to the host's daemon if it is idle. At start it
recovers what a dead driver of the same host left in running/HOST/. Then it loops:

    reap finished jobs → record them (or requeue a retry) → honour cancel
    requests → start the first eligible jobs in order while a slot is free →
    sleep until a job ends, a signal arrives, a deadline passes or the queue
    may have changed.

The queue is re-read after every job, so a job spooled at a higher priority
during the night runs next. The driver starts no job at or after the window
end (``until``) and stops when nothing can run any more; ``onite run`` that
started nothing logs why (``nothing-due``), in the words of ``onite status``.

Signals: INT or TERM → start nothing new, let running jobs finish, exit 0; a
second INT/TERM, or QUIT → kill the running jobs' process groups, put the
jobs back in their queues, exit 0; USR1 → a status line in the log; HUP →
re-read onite.toml.

``run()`` also spools the recurring jobs that are due (onite.drain.instances) once it
holds the lock, and with ``scheduled=True`` drains only inside a night
window (onite.core.window). ``onite daemon`` calls ``drain()`` under its own lock,
with the hooks ``only_timed`` (start only jobs whose not-before time has
come), ``linger=False`` (return instead of waiting for a not-before time),
``tick`` (called every turn) and ``open_window()`` (docs/scheduling.md).
"""

from __future__ import annotations

import os
import select
import signal
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, time as dtime, timedelta
from pathlib import Path

from onite.spool.files import change_state, create_file, move_file, remove_file
from onite.spool.holds import is_held
from onite.spool.paths import RUN_RECORD, SpoolDir
from onite.spool.queued import find_queued
from onite.spool.results import may_replace_result, read_result, write_result
from onite.spool.scan import Entry, cancel_inbox, find_running, user_name
from onite.core.config import Config
from onite.spool.settings import default_host
from onite.spool.deps import dependency_state
from onite.core.errors import EXIT_FAILURE, DamagedRecord, JobFormatError, NotFound, OniteError, Refused, SpoolIOError
from onite.exec.executor import LocalRunner, NoRecord, Run, SpawnError, Unavailable, boot_id
from onite.spool.filecheck import SETTLING, BadFile, Settling, file_problem, read_job_file
from onite.exec.identity import Identity, resolve
from onite.spool.index import Candidate, QueueIndex
from onite.core.jobfile import Attempt, Job, encode
from onite.spool.log import ActivityLog
from onite.core.names import SIDE, is_valid_name, make_run_id, run_id_host
from onite.exec.notify import Notifier
from onite.core.policy import may_be_urgent, may_touch, urgent_refusal, window_end
from onite.core.queue import READY, DepState, Fail, Meta, Wait, evaluate, retry_delay
from onite.core.state import JobState, Outcome, Result, unrun_result

POLL = 0.5  # seconds between looks at the queue and cancel/ while jobs run
IDLE_POLL = 1.0  # while waiting for a not-before time with nothing running
IDENTITY_TTL = 1.0  # seconds an owner's account, as read from the system, is trusted
SETTLE_WAIT = timedelta(seconds=2)
SETTLE_LIMIT = 2.0  # seconds a file with a second link may be a submit in progress (from first sight)  # a driver that does not linger still waits this long for a settling job
PAUSE_FIRST, PAUSE_MAX = 15.0, 300.0  # seconds to start nothing after the executor could not take a job


@dataclass
class _Inspected:
    """What a look at a queued file found, and what the driver needs to act on it."""

    kind: str  # "ok", "bad", "gone", "moved", "settling", "foreign"
    st: os.stat_result | None = None
    meta: Meta | None = None
    reason: str = ""


class Driver:
    """Drains one spool on one host. ``run()`` returns the process exit code."""

    def __init__(self, spool: SpoolDir, *, host: str | None = None, slots: int | None = None,
                 until: dtime | None = None, echo=None, runner=None, only_timed: bool = False,
                 linger: bool = True, tick=None, signals: list[int] | None = None, listener=None,
                 lock_fd: int | None = None, heartbeat=None) -> None:
        """``only_timed``: start only jobs that carry a not-before time that has come (the
        daemon's wakes for ``--at`` times and recurring instances). ``linger=False``: when
        nothing runs and nothing can start, return instead of waiting for a not-before
        time (the daemon does its own waiting). ``tick(driver, now)``: called on every
        turn of the loop; returns when it wants to be called next (or None). ``signals``:
        the list caught signals go to (the daemon shares its own, so none is lost in between).
        ``listener``: told of every logged event as data (onite.spool.log.ActivityLog; the live progress).
        ``lock_fd``: the descriptor of this host's driver lock when the caller holds it (the daemon).
        ``heartbeat``: the lock holder's onite.drain.heartbeat.Heartbeat, kept fresh on every turn (the
        daemon passes its own; ``run()`` makes one).
        """
        self.spool = spool
        self.config: Config = spool.config
        self.host = host or default_host(self.config)
        self._running_dir = spool.running_dir(self.host)
        self._pid, self._machine = os.getpid(), os.uname().nodename
        self._slots_override = slots
        self._until_override = until
        self.euid = os.geteuid()
        self.log = ActivityLog(spool.log_path, self.host, echo=echo, listener=listener)
        self.lock_fd = lock_fd  # this host's driver lock, once held (each job's monitor inherits it)
        self._containment = None
        self._runner = runner
        self.notifier = Notifier(spool, self.log)
        self.index = QueueIndex(spool.queue_folders())
        self.running: dict[str, Run] = {}
        self._meta: dict[str, tuple[tuple[int, int, int], Meta]] = {}
        self._parsed: dict[str, tuple[tuple[int, int, int], Job]] = {}
        self._signals: list[int] = [] if signals is None else signals
        self._stopping = False
        self._hard_stop = False
        self._window_closed = False
        self._reported_foreign: set[str] = set()
        self._identities: dict[int, tuple[float, Identity | Refused]] = {}
        self._may_reattach = True  # recovery may take back runs that outlived their driver (Slurm)
        self._paused_until: float | None = None  # monotonic: the executor was unavailable; start nothing before
        self._pause = 0.0
        self._cancel_mtime = -1
        self._cannot_record: str | None = None  # why nothing more may start: its records cannot be written
        self._settling: dict[tuple[int, int], float] = {}
        self._wakeup_fd: int | None = None  # the signal catcher of run(), while it runs
        self._unlogged: list[Run] = []  # runs started here, in claim order, whose start is not logged yet  # (dev, ino) of a file with two links → first seen
        self._seq = 0
        self._since_prune = 0
        self.counts = {"done": 0, "failed": 0, "cancelled": 0, "retried": 0, "requeued": 0}
        self._wake_at: datetime | None = None
        self.only_timed = only_timed
        self.linger = linger
        self.tick = tick
        self.heartbeat = heartbeat
        self._tick_at: datetime | None = None
        self.started_at = self.now()
        self.window_end = window_end(self.started_at, self.until)

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
    def runner(self):
        """The executor: made when first needed (a local one needs the driver lock's descriptor)."""
        if self._runner is None:
            self._runner = self._make_runner()
        return self._runner

    @runner.setter
    def runner(self, value) -> None:
        self._runner = value

    @property
    def containment(self):
        """How jobs are contained here (onite.exec.contain), decided once."""
        if self._containment is None:
            from onite.exec.contain import discover

            self._containment = discover(self.config.contain)
        return self._containment

    @property
    def until(self) -> dtime | None:
        return self._until_override or self.config.until

    def _make_runner(self, executor: str | None = None):
        if (executor or self.config.executor) == "slurm":
            from onite.exec.slurm import SlurmRunner

            return SlurmRunner(self.spool, self.config, switch_user=self.euid == 0, log=self.log)
        return LocalRunner(shell=self.config.shell, kill_grace=self.config.kill_grace.total_seconds(),
                           switch_user=self.euid == 0, containment=self.containment, lock_fd=self.lock_fd)

    @staticmethod
    def now() -> datetime:
        return datetime.now().astimezone()

    # ---- the whole run -----------------------------------------------------------

    def run(self, *, scheduled: bool = False) -> int:
        """Take this host's lock, spool due recurring jobs, and drain; exit code 0 also when
        another driver holds the lock. ``scheduled``: drain only inside a night window that
        a time of ``schedule`` opened (onite.core.window), else log that and return.
        """
        self.spool.check_drainable("onite run")
        # Signals are caught before this driver's pid is anywhere to be read (its lock, its
        # heartbeat) and until it has let go of the lock: a USR1 or HUP never kills it.
        with SignalCatcher(self._signals) as wakeup_fd:
            self._wakeup_fd = wakeup_fd
            lock = self._take_lock(hand_over=not scheduled)
            if lock is None:
                return 0
            self.lock_fd = lock_descriptor(lock)
            try:
                self._start_heartbeat()
                self.spool_recurring()
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
        return EXIT_FAILURE if self._cannot_record else 0

    def _start_heartbeat(self) -> None:
        """Tell everyone this driver is alive, who started it and when the next drain is due (onite.drain.heartbeat)."""
        from onite.drain.heartbeat import Heartbeat

        self.heartbeat = Heartbeat(self.spool.root, self.host, "run", log=self.log)
        upcoming = None
        try:
            from onite.drain.nextdrain import plan

            upcoming = plan(self.spool, self.now(), host=self.host, exclude_pid=os.getpid()).next
        except (OniteError, OSError, ValueError):
            pass
        self.heartbeat.beat(next_drain=upcoming.when if upcoming else None, next_by=upcoming.by if upcoming else None)
        if self.heartbeat.started_by == "cron" and upcoming is not None and upcoming.by == "cron":
            from onite.app.crontab import refresh_record

            refresh_record(self.spool.root, self.host, upcoming.when)

    def spool_recurring(self) -> list[str]:
        """Spool the instances of recurring jobs that are due (at most one per template)."""
        if not self.spool.recur_dir.is_dir():
            return []
        from onite.drain.instances import RecurScheduler

        try:
            return RecurScheduler(self.spool, self.log).spool_due(self.now())
        except OniteError as err:
            self.log.event("recur-error", error=str(err), note="recurring jobs were not spooled")
            return []

    def _inside_scheduled_window(self) -> bool:
        from onite.core.window import scheduled_window

        now = self.now()
        window = scheduled_window(self.config.schedule, self.until, now)
        if window is None or not window.is_open(now):
            self.log.event("outside-window", host=self.host,
                           last=window.opened.isoformat(timespec="minutes") if window else None,
                           closed=window.closes.isoformat(timespec="minutes") if window and window.closes else None,
                           note="outside the night window; nothing drained (onite run without --scheduled drains now)")
            return False
        return True

    def drain(self, *, explain: bool = False) -> None:
        """Recover, run jobs until nothing can start, prune. The caller holds this host's lock.
        ``explain``: if nothing happened, log why (``nothing-due``: what is queued and why it waits)."""
        os.makedirs(self._running_dir, mode=0o755, exist_ok=True)
        self.log.event("driver-start", host=self.host, slots=self.slots,
                       until=self.until.strftime("%H:%M") if self.until else None, executor=self.runner.executor,
                       only="timed jobs" if self.only_timed else None,
                       contain=self.containment.describe() if self.runner.executor == "local" else None)
        with self._catching() as wakeup_fd:
            self.recover()
            try:
                self._loop(wakeup_fd)
            finally:
                self.notifier.finish(stop=self._must_stop_now)
            self._prune()
        if explain and not any(self.counts.values()) and not self._stopping and not self._window_closed \
                and not self._cannot_record:
            self._explain_idle()
        self.log.event("driver-exit", done=self.counts["done"], failed=self.counts["failed"],
                       cancelled=self.counts["cancelled"], left=len(self.index),
                       reason="stopped" if self._stopping else "window closed" if self._window_closed
                       else "cannot record" if self._cannot_record else "drained")

    @contextmanager
    def _catching(self):
        """The wakeup descriptor of the signal catcher ``run`` installed, or of one for this drain
        (the daemon drains under its own catcher, sharing its list of signals)."""
        if self._wakeup_fd is not None:
            yield self._wakeup_fd
            return
        with SignalCatcher(self._signals) as wakeup_fd:
            yield wakeup_fd

    def _take_lock(self, *, hand_over: bool = False):
        """This host's driver lock, or None: another driver holds it (logged, with who it is), or, with
        ``hand_over``, an idle daemon holds it and was told to drain now (logged as ``drain-handed``).

        Raises:
            Refused, SpoolError, SpoolIOError: the lock cannot be opened (onite.spool.locks).
        """
        lock = take_host_lock(self.spool, self.host, f"pid={os.getpid()} host={self.host} since={self.started_at.isoformat()}")
        if lock is None:
            self._busy(hand_over)
        return lock

    def _busy(self, hand_over: bool) -> None:
        """Another process holds this host's lock: say which (its heartbeat), or hand the drain to an idle daemon."""
        from onite.drain import heartbeat as hb

        beat = hb.read(self.spool.root, self.host)
        if beat is None or not hb.is_alive(beat, self.now()):
            self.log.event("driver-busy", host=self.host, holder="unknown (no heartbeat)",
                           note="another driver is draining this spool on this host; exiting")
            return
        role = "daemon" if beat.role == "daemon" else "driver"
        if hand_over and beat.role == "daemon" and beat.state == "idle":
            from onite.drain.daemon import request_wake

            if request_wake(self.spool, self.host, beat):
                self.log.event("drain-handed", host=self.host, daemon=beat.pid,
                               note="the daemon of this host was idle: it drains now")
                return
        self.log.event("driver-busy", host=self.host, pid=beat.pid, role=role,
                       since=beat.since.isoformat(timespec="seconds"), started_by=beat.started_by,
                       state=beat.state if role == "daemon" else None,
                       note="another driver is draining this spool on this host; exiting")

    def _explain_idle(self) -> None:
        """Nothing started and nothing was filed: log why, in status's words (onite.app.status.idle_summary)."""
        from onite.app.status import idle_summary

        try:
            queued, note = idle_summary(self.spool, self.now(), euid=self.euid, host=self.host)
        except OniteError as err:
            queued, note = None, f"nothing was started (the queue could not be read: {err})"
        self.log.event("nothing-due", queued=queued, note=note)

    # ---- hooks for onite daemon ------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        """INT, TERM or QUIT arrived while draining: the caller should exit too."""
        return self._stopping or self._hard_stop

    def open_window(self, now: datetime) -> None:
        """A scheduled drain time came during a timed-only drain: from now on run every job."""
        self.only_timed = False
        self._window_closed = False
        self.window_end = window_end(now, self.until)
        self.log.event("window-opened", until=self.until.strftime("%H:%M") if self.until else None,
                       note="a scheduled drain time came; every queued job may run now")

    def _loop(self, wakeup_fd: int) -> None:
        poller = select.poll()
        poller.register(wakeup_fd, select.POLLIN)
        registered: set[int] = set()
        while True:
            self._handle_signals()
            if self._hard_stop:
                self._kill_all()
            if self.heartbeat is not None:
                self.heartbeat.tick()
            if self.tick is not None and not self._stopping:
                self._tick_at = self.tick(self, self.now())
            self._reap()
            self.runner.tick(time.monotonic())
            if self.notifier.busy:
                self.notifier.reap()
            self._process_cancels()
            if not self._stopping and not self._hard_stop and not self._cannot_record:
                self._start_jobs()
            if self.running and len(self.running) >= self.slots:
                self._read_ahead()
            if not self.running and not self.runner.busy():
                if self._stopping or self._hard_stop or self._window_closed:
                    return
                if self._wake_at is None or not self._lingers():
                    # nothing runnable: one full listing to be sure before we leave
                    self.index.refresh(force=True)
                    self._start_jobs()
                    if not self.running and (self._wake_at is None or not self._lingers()):
                        return
            timeout = self._timeout()
            fds = set(self.runner.wait_fds())
            for fd in registered - fds:
                poller.unregister(fd)
            for fd in fds - registered:
                poller.register(fd, select.POLLIN)
            registered = fds
            for fd, _ in poller.poll(timeout * 1000):
                if fd == wakeup_fd:
                    try:
                        os.read(wakeup_fd, 512)
                    except BlockingIOError:
                        pass

    def _timeout(self) -> float:
        now_mono = time.monotonic()
        timeout = POLL if self.running else IDLE_POLL
        if self.runner.needs_polling():
            timeout = min(timeout, 0.05)
        for deadline in (self.runner.next_deadline(), self.notifier.next_deadline()):
            if deadline is not None:
                timeout = min(timeout, max(deadline - now_mono, 0.0))
        if self._wake_at is not None:
            timeout = min(timeout, max((self._wake_at - self.now()).total_seconds(), 0.0))
        if self._tick_at is not None:
            timeout = min(timeout, max((self._tick_at - self.now()).total_seconds(), 0.0))
        return max(timeout, 0.0)

    def _lingers(self) -> bool:
        """With nothing running, wait for the next not-before time? A driver that does not
        linger still waits a moment for a job that is settling (being spooled right now), and
        out a pause of an unavailable executor (the jobs it put back are tonight's work).
        """
        if self.linger or self._paused_until is not None:
            return True
        return self._wake_at is not None and self._wake_at - self.now() <= SETTLE_WAIT

    # ---- signals -----------------------------------------------------------------

    def _handle_signals(self) -> None:
        while self._signals:
            sig = self._signals.pop(0)
            if sig in (signal.SIGINT, signal.SIGTERM):
                if self._stopping:
                    self._hard_stop = True
                    self.log.event("signal", sig=signal.Signals(sig).name, action="kill running jobs and requeue them")
                else:
                    self._stopping = True
                    self.log.event("signal", sig=signal.Signals(sig).name,
                                   action="finish running jobs, start none", running=len(self.running))
            elif sig == signal.SIGQUIT:
                self._hard_stop = self._stopping = True
                self.log.event("signal", sig="SIGQUIT", action="kill running jobs and requeue them")
            elif sig == signal.SIGUSR1:
                self._status_line()
            elif sig == signal.SIGHUP:
                self._reload()

    def _status_line(self) -> None:
        queued = self.index.counts()
        self.log.event("status", running=",".join(sorted(self.running)) or "-", slots=self.slots,
                       queued=sum(queued.values()), done=self.counts["done"], failed=self.counts["failed"],
                       cancelled=self.counts["cancelled"], stopping="yes" if self._stopping else None)

    def _reload(self) -> None:
        try:
            config = self.spool.reload_config()
        except OniteError as err:
            self.log.event("reload-failed", error=str(err), note="keeping the previous settings")
            return
        self.config = config
        self.index.set_folders(self.spool.queue_folders())
        self.runner.reload(config)
        self.window_end = window_end(self.started_at, self.until)
        self.log.event("reloaded", slots=self.slots, priorities=config.priorities)

    def _must_stop_now(self) -> bool:
        """While waiting for the last notifiers: has a signal asked for an immediate exit?"""
        self._handle_signals()
        return self._hard_stop

    def _kill_all(self) -> None:
        for run in list(self.running.values()):
            if run.stopping != "shutdown":
                self.runner.kill(run, "shutdown")

    # ---- picking and starting ------------------------------------------------------

    def _start_jobs(self) -> None:
        self._wake_at = None
        while len(self.running) < self.slots:
            if self.window_end is not None and self.now() >= self.window_end:
                if not self._window_closed:
                    self._window_closed = True
                    self.index.refresh(force=True)
                    self.log.event("window-closed", until=self.until.isoformat(timespec="auto"), left=len(self.index),
                                   note="jobs left stay queued for the next night")
                return
            if self._paused_until is not None:
                left = self._paused_until - time.monotonic()
                if left > 0:
                    self._note_wake(self.now() + timedelta(seconds=left))
                    return
                self._paused_until = None
            picked = self._pick()
            if picked is None:
                return
            with self._guard(picked[0].name, picked[0].path, self._running_dir / picked[0].name):
                self._start(*picked)

    def _pick(self) -> tuple[Candidate, os.stat_result] | None:
        now = self.now()
        self.index.refresh()
        for stray in self.index.strays():  # a queued file whose name is no job's: never run, never listed
            try:
                st = os.lstat(stray.path)
            except OSError:
                continue
            label = os.fsdecode(os.fsencode(stray.name)[:200])  # refused/LABEL@TIME must fit in a file name
            self._move_aside(stray.path, label, st, "its name is not a job name")
        for _ in range(3):  # a file that moved in the order makes us look again, from the top
            moved = False
            for cand in self.index.candidates():
                if cand.name in self.running:
                    continue  # a job of that name runs here; a second one waits its turn
                with self._guard(cand.name, cand.path):
                    seen = None
                    seen = self._inspect(cand)
                if seen is None:  # _guard set it aside
                    self._forget(cand)
                    continue
                if seen.kind == "ok":
                    if self.only_timed and seen.meta.not_before is None:
                        continue  # untimed jobs wait for the scheduled drain
                    held = is_held(seen.st.st_mode) or self.index.holds.held(cand.name, seen.st.st_uid)
                    verdict = evaluate(seen.meta, held=held, now=now, host=self.host, dependency=self._dep_state)
                    if verdict is READY:
                        return cand, seen.st
                    if held or (seen.meta.pin and seen.meta.pin != self.host):
                        self.index.park(cand)  # until its file changes: 20,000 held jobs cost nothing per pick
                    if isinstance(verdict, Fail):
                        self._fail_unstarted(cand, seen.st, verdict.reason)
                    elif isinstance(verdict, Wait) and verdict.until is not None:
                        # a retry's back-off is part of tonight's work; any other not-before time
                        # is waited for only inside the night's window (`until`)
                        if seen.meta.retrying or self.window_end is not None:
                            self._note_wake(verdict.until)
                elif seen.kind == "foreign":  # another user's, and this driver is not root
                    self.index.park(cand)
                elif seen.kind == "bad":
                    self._refuse(cand, seen.st, seen.reason)
                elif seen.kind == "gone":
                    self._forget(cand)
                elif seen.kind == "moved":
                    moved = True
                elif seen.kind == "settling":
                    # a submit between its link and its unlink (where there is no renameat2): look
                    # again in a moment. Jobs behind it are not held up: a user's pairs of links would
                    # otherwise delay everyone's night by SETTLE_LIMIT each
                    self._note_wake(now + timedelta(seconds=0.02))
            if not moved:
                return None
        return None

    @contextmanager
    def _guard(self, name: str, *paths: Path):
        """Whatever a queued file makes go wrong while it is looked at or started, the night goes
        on: the file is set aside (moved to refused/ from wherever it is now) with one log line,
        and the driver moves on to the next job. A file a user can write must never stop the
        driver, and never make it retry the same failure forever."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - see the docstring; the traceback goes to stderr
            import sys
            import traceback

            reason = f"onite could not handle it ({type(err).__name__}: {err})"
            self.log.event("error", name, error=reason, note="set aside in refused/; please report this")
            traceback.print_exc(file=sys.stderr)
            for path in paths:
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                self._move_aside(path, name, st, reason)
                break

    def _forget(self, cand: Candidate) -> None:
        """The job left its queue folder (claimed, failed, refused, gone): drop all that is kept of it."""
        self.index.forget(cand)
        self._meta.pop(cand.name, None)
        self._parsed.pop(cand.name, None)

    def _read_ahead(self) -> None:
        """While every slot is busy, read the job file that will most likely be picked next.

        Its parse is kept as _inspect keeps every parse (by inode, ctime and
        size), so the pick that follows the next job's end does not wait for
        the read; the pick still checks everything as usual.
        """
        for cand in self.index.candidates():
            if cand.name not in self.running:
                if cand.name not in self._parsed:
                    self._meta.pop(cand.name, None)  # a verdict kept without its job: read the job again
                    self._inspect(cand)
                return

    def _note_wake(self, when: datetime) -> None:
        if self.window_end is not None and when >= self.window_end:
            return  # not tonight
        if self._wake_at is None or when < self._wake_at:
            self._wake_at = when

    def _inspect(self, cand: Candidate) -> _Inspected:
        try:
            st = os.lstat(cand.path)
        except FileNotFoundError:
            return _Inspected("gone")
        if st.st_ctime_ns != cand.ctime_ns:
            self.index.reorder(cand, st.st_ctime_ns)
            return _Inspected("moved")
        problem = self._file_problem(st)
        if problem is SETTLING:
            problem = self._settling_problem(cand, st)
            if problem is SETTLING:
                return _Inspected("settling", st)
            if problem == "moved":
                return _Inspected("moved")
        if problem:
            return _Inspected("bad", st, reason=problem)
        if self.euid != 0 and st.st_uid != self.euid:
            if cand.name not in self._reported_foreign:
                self._reported_foreign.add(cand.name)
                self.log.event("skip", cand.name, owner=user_name(st.st_uid),
                               reason=f"this driver runs as {user_name(self.euid)} and runs only its own jobs")
            return _Inspected("foreign", st)
        if cand.rank == 0 and not self._may_be_urgent(st.st_uid):
            return _Inspected("bad", st, reason=urgent_refusal(user_name(st.st_uid)))
        key = (st.st_ino, st.st_ctime_ns, st.st_size)
        cached = self._meta.get(cand.name)
        if cached and cached[0] == key:
            return _Inspected("ok", st, cached[1])
        try:
            job, st2 = self._read_job(cand.path)
        except FileNotFoundError:
            return _Inspected("gone")
        except (JobFormatError, BadFile) as err:
            return _Inspected("bad", st, reason=str(err))
        if (st2.st_ino, st2.st_ctime_ns, st2.st_size) != key:
            return _Inspected("moved")
        meta = Meta(after=job.after, not_before=job.not_before, pin=job.pin, retrying=job.attempt > 1)
        self._meta[cand.name] = (key, meta)
        self._parsed[cand.name] = (key, job)
        if len(self._parsed) > 64:  # keep full jobs only for the few near the head of the queue
            self._parsed.pop(next(iter(self._parsed)))
        return _Inspected("ok", st, meta)

    def _settling_problem(self, cand: Candidate, st: os.stat_result) -> str | Settling:
        """A queued file with a second link: a submit between its link and its unlink (where the
        file system has no renameat2), for a moment only. Counted from when this driver first saw
        it, not from the file's ctime, which its owner can keep fresh with chmod: after
        SETTLE_LIMIT the submit has died (or it is no submit at all). Its own dot-name beside it,
        same file, is then removed (the job was complete when it was linked); any other second
        link is refused."""
        key = (st.st_dev, st.st_ino)
        first = self._settling.setdefault(key, time.monotonic())
        if len(self._settling) > 1000:
            self._settling = {key: first}
        if time.monotonic() - first < SETTLE_LIMIT:
            return SETTLING
        self._settling.pop(key, None)
        prefix = f".{cand.name}."
        try:
            with os.scandir(cand.path.parent) as it:
                for entry in it:
                    if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                        other = entry.stat(follow_symlinks=False)
                        if (other.st_dev, other.st_ino) == key and other.st_uid == st.st_uid:
                            os.unlink(entry.path)
                            self.log.event("recovered", cand.name, action="removed the second link a dead submit left",
                                           link=entry.name)
                            return "moved"
        except OSError:
            pass
        return f"has {st.st_nlink} hard links"

    def _file_problem(self, st: os.stat_result, *, may_settle: bool = True) -> str | Settling:
        """Why a queued file must never run, SETTLING, or "" if it may (docs/security.md)."""
        return file_problem(st, max_size=self.config.max_job_size, now_ns=time.time_ns(), resolve_uid=self._resolve,
                            may_settle=may_settle)

    def _resolve(self, uid: int) -> Identity:
        """``resolve(uid)``, remembered for IDENTITY_TTL seconds.

        Each job needs its owner's account three times (checking the queued
        file, the claimed file, starting it); reading the account database
        once per job instead keeps its cost out of the drain.

        Raises:
            Refused: no such account.
        """
        now = time.monotonic()
        known = self._identities.get(uid)
        if known is None or now - known[0] > IDENTITY_TTL:
            try:
                known = (now, resolve(uid))
            except Refused as err:
                known = (now, err)
            self._identities[uid] = known
        if isinstance(known[1], Refused):
            raise known[1]
        return known[1]

    def _may_be_urgent(self, uid: int) -> bool:
        try:
            ident = self._resolve(uid)
        except Refused:
            return False
        return may_be_urgent(ident, self.config.admins)

    def _read_job(self, path: Path) -> tuple[Job, os.stat_result]:
        return read_job_file(path, self.config.max_job_size)

    def _dep_state(self, name: str) -> DepState:
        if name in self.running or self.index.contains(name):
            return DepState.PENDING
        return dependency_state(self.spool, name)

    def _start(self, cand: Candidate, st_seen: os.stat_result) -> None:
        target = self._running_dir / cand.name
        try:
            change_state(cand.name, JobState.QUEUED, JobState.RUNNING, cand.path, target, "claiming")
        except NotFound:
            self._forget(cand)  # another host, or a cancel, got there first: not an error
            return
        self.index.forget(cand)
        self._meta.pop(cand.name, None)  # its parse, if kept, is taken by _claimed_job
        now = self.now()
        try:
            job, st = self._claimed_job(cand.name, target, st_seen)
        except (JobFormatError, BadFile, OSError) as err:
            self._refuse_claimed(cand.name, target, st_seen, str(err))
            return
        problem = self._file_problem(st, may_settle=False)  # claimed: no submit links it any more
        if problem:
            self._refuse_claimed(cand.name, target, st, problem)
            return
        owner = self._resolve(st.st_uid)
        self._seq += 1
        run = Run(name=cand.name, job=job, owner=owner, rank=cand.rank,
                  run_id=make_run_id(now, self.host, self._pid, self._seq),
                  started=now, started_mono=time.monotonic(), spool=str(self.spool.root))
        run.queued_at = datetime.fromtimestamp(cand.ctime_ns / 1e9).astimezone()
        record = self._record_info(run)
        try:
            if self.runner.writes_record:
                self.runner.start(run, self.spool.output_path(cand.name), append=job.attempt > 1,
                                  stderr_path=self.spool.stderr_path(cand.name), record=record)
            else:
                self.runner.start(run, self.spool.output_path(cand.name), append=job.attempt > 1,
                                  stderr_path=self.spool.stderr_path(cand.name))
        except NoRecord as err:
            self._stop_claiming(run, target, str(err))
            return
        except Unavailable as err:
            self._pause_starts(run, target, err)
            return
        except SpawnError as err:
            self.log.event("start-failed", cand.name, user=owner.name, reason=str(err))
            self._record(run, Outcome(reason=str(err)), self.now())
            return
        self._pause = 0.0
        self.running[cand.name] = run
        if not self.runner.writes_record:  # its record holds the executor's id of the job (Slurm's)
            self._write_record(run, {**record[1], "external_id": run.external_id, **self.runner.runinfo(run)})
            self._log_start(run)
        else:
            self._unlogged.append(run)  # its start is logged when its monitor says it started

    def _record_info(self, run: Run) -> tuple[str, dict]:
        """The run record's path and first line (onite.core.runrecord)."""
        info = {"run_id": run.run_id, "name": run.name, "rank": run.rank, "attempt": run.attempt,
                "started": run.started.isoformat(), "queued": run.queued_at.isoformat() if run.queued_at else None,
                "executor": self.runner.executor, "driver_pid": self._pid, "machine": self._machine}
        return f"{self._running_dir}/{run.name}{RUN_RECORD}", info

    def _log_starts(self, *, until: Run | None) -> None:
        """Log the starts of the runs whose monitors said so, in the order the runs were claimed: two
        slots filled at once start in that order in the log, whichever monitor spoke first. ``until``:
        a run that has ended: its start is logged now (if it started), with those of the runs claimed
        before it that have started; the others wait for their monitors."""
        if until is None:
            while self._unlogged and self._unlogged[0].announced:
                self._log_start(self._unlogged.pop(0))
            return
        if until not in self._unlogged:
            return
        index = self._unlogged.index(until)
        for run in [r for r in self._unlogged[: index + 1] if r.announced]:
            self._log_start(run)
        self._unlogged = [r for r in self._unlogged[:index] if not r.announced] + self._unlogged[index + 1:]

    def _log_start(self, run: Run) -> None:
        self.log.event("start", run.name, user=run.owner.name, priority="urgent" if run.rank == 0 else run.rank,
                       attempt=run.attempt, pid=run.pgid, slurm=run.external_id)

    def _note_cannot_record(self, why: str, name: str = "") -> None:
        """A record could not be written: start nothing more (logged once; on stderr too, since the
        log may be what cannot be written)."""
        if self._cannot_record is None:
            self._cannot_record = why
            self.log.event("cannot-record", name, error=why,
                           note="no job starts until runs can be recorded; running jobs go on")
            if self.log.echo is None:
                import sys

                try:
                    print(f"onite: cannot record a run ({why}) — no job starts until it can; free space and "
                          f"run onite run again", file=sys.stderr)
                except (OSError, ValueError):
                    pass

    def _stop_claiming(self, run: Run, claimed: Path, why: str) -> None:
        """Nothing that starts can be recorded (a full disk): put the job back, start nothing more.
        Running jobs go on; the driver exits non-zero once they are done (docs/job-control.md)."""
        try:
            self._requeue_file(claimed, run.name, run.rank)
        except OniteError as err:
            why = f"{why}; and putting {run.name} back failed: {err} (recovery will)"
        self._note_cannot_record(why, run.name)

    def _pause_starts(self, run: Run, claimed: Path, err: Unavailable) -> None:
        """The executor cannot take jobs now: put this one back in its queue (it keeps its attempt
        count, but goes behind the jobs of its priority) and start nothing for a while, longer
        each time in a row (PAUSE_FIRST doubling up to PAUSE_MAX). A job never fails for this."""
        self._pause = min(max(self._pause * 2, PAUSE_FIRST), PAUSE_MAX)
        self._paused_until = time.monotonic() + self._pause
        try:
            self._requeue_file(claimed, run.name, run.rank)
        except OniteError as move_err:
            self.log.event("start-failed", run.name, user=run.owner.name, reason=str(err))
            self._record(run, Outcome(reason=f"{err}; and requeueing it failed: {move_err}"), self.now())
            return
        self.counts["requeued"] += 1
        self.log.event("executor-unavailable", run.name, reason=str(err), retry_in=f"{self._pause:g}s",
                       note="the job is back in its queue; no job starts before then")

    def _claimed_job(self, name: str, path: Path, st_seen: os.stat_result) -> tuple[Job, os.stat_result]:
        cached = self._parsed.pop(name, None)
        job = None
        st = os.lstat(path)  # a symlink or anything but a regular file is refused by _file_problem
        if cached and cached[0][0] == st.st_ino and cached[0][2] == st.st_size and st.st_ino == st_seen.st_ino \
                and st.st_mtime_ns == st_seen.st_mtime_ns:
            job = cached[1]
        else:
            job, st = self._read_job(path)
        return job, st

    def _write_record(self, run: Run, info: dict) -> None:
        """The run record of a run whose executor does not write it (Slurm): after its start."""
        from onite.core import runrecord

        path = f"{self._running_dir}/{run.name}{RUN_RECORD}"
        try:
            os.close(runrecord.create(path, info))
        except runrecord.RecordError as err:
            self.log.event("warning", run.name, error=str(err))

    # ---- finishing -----------------------------------------------------------------

    def _reap(self) -> None:
        """Log the starts the runner saw, and file each job that ended as soon as it is seen."""
        finished = self.runner.reap()
        self.runner.started()  # each run it names is marked announced
        self._log_starts(until=None)
        for run, outcome in finished:
            self._log_starts(until=run)
            self.running.pop(run.name, None)
            if not run.announced and outcome.reason and run.stopping is None:
                self.log.event("start-failed", run.name, user=run.owner.name, reason=outcome.reason)
            if run.stopping == "shutdown" and outcome.cancelled_by is None:
                self._requeue_interrupted(run)
            else:
                self._record(run, outcome, self.now())

    @staticmethod
    def _retryable(run: Run, outcome: Outcome) -> bool:
        return (outcome.state is JobState.FAILED and (not outcome.reason or outcome.retryable)
                and run.job.attempt <= run.job.retries)

    def _record(self, run: Run, outcome: Outcome, now: datetime) -> None:
        job = run.job
        attempt = Attempt(attempt=job.attempt, started=run.started, finished=now, host=self.host,
                          exit_code=outcome.exit_code, signal=outcome.signal, reason=outcome.describe())
        if self._retryable(run, outcome) and self._requeue_retry(run, attempt, now):
            return
        result = Result(
            name=run.name, uid=run.owner.uid, user=run.owner.name, priority=job.priority, urgent=run.rank == 0,
            state=outcome.state, reason=outcome.describe(), exit_code=outcome.exit_code, signal=outcome.signal,
            host=self.host, submitted=job.submitted, queued=getattr(run, "queued_at", None), started=run.started,
            finished=now, attempt=job.attempt, attempts=job.tried + (attempt,), run_id=run.run_id,
            executor=self.runner.executor, external_id=run.external_id, recur=job.recur,
            stderr=job.stderr_mode,
        )
        running_dir = self._running_dir
        try:
            write_result(self.spool, result)
            change_state(run.name, JobState.RUNNING, result.state, running_dir / run.name,
                            self.spool.done_dir / run.name, "filing the finished job")
        except OniteError as err:
            self.log.event("error", run.name, error=str(err), note="the job stays in running/ until recovery")
            self._note_cannot_record(str(err))
            return
        remove_file(running_dir / f"{run.name}{RUN_RECORD}")
        self.counts[str(result.state)] += 1
        self.log.event(str(result.state), run.name, user=run.owner.name, reason=result.reason or None,
                       exit=outcome.exit_code, seconds=f"{result.duration:.3f}" if result.duration is not None else None,
                       attempt=job.attempt)
        self.notifier.notify(result, job, self.config)
        self._since_prune += 1
        if self._since_prune >= max(50, self.config.keep // 10):
            self._prune(strays=False)

    def _requeue_retry(self, run: Run, attempt: Attempt, now: datetime) -> bool:
        delay = retry_delay(self.config.retry_delay.total_seconds(), run.job.attempt)
        job = replace(run.job, attempt=run.job.attempt + 1, not_before=now + timedelta(seconds=delay),
                      tried=run.job.tried + (attempt,))
        folder = self.spool.folder_for(job.priority, run.rank == 0)
        try:
            self.spool.ensure_queue_folder(folder)  # removed by someone: the retry must not be lost
            create_file(folder, run.name, encode(job), owner=(run.owner.uid, run.owner.gid), durable=False)
        except Refused:
            self.log.event("retry-skipped", run.name, note="a new job of that name is queued")
            return False
        except OniteError as err:
            self.log.event("retry-failed", run.name, error=str(err))
            return False
        running_dir = self._running_dir
        remove_file(running_dir / run.name)
        remove_file(running_dir / f"{run.name}{RUN_RECORD}")
        self.counts["retried"] += 1
        self.log.event("retry", run.name, user=run.owner.name, attempt=job.attempt, of=run.job.retries + 1,
                       after=f"{delay:g}s", reason=attempt.reason)
        return True

    def _requeue_interrupted(self, run: Run) -> None:
        running_dir = self._running_dir
        try:
            self._requeue_file(running_dir / run.name, run.name, run.rank)
        except OniteError as err:
            self.log.event("error", run.name, error=str(err))
            return
        remove_file(running_dir / f"{run.name}{RUN_RECORD}")
        self.counts["requeued"] += 1
        self.log.event("requeued", run.name, user=run.owner.name, reason="the driver was stopped")

    def _requeue_file(self, path: Path, name: str, rank: int) -> None:
        folder = self.spool.folder_for(rank, rank == 0)
        self.spool.ensure_queue_folder(folder)
        target = folder / name
        if os.path.lexists(target):
            raise Refused(f"a new job {name!r} is already queued", f"the interrupted one stays in {path.parent}")
        change_state(name, JobState.RUNNING, JobState.QUEUED, path, target, "requeueing")

    def _fail_unstarted(self, cand: Candidate, st: os.stat_result, reason: str) -> None:
        """A queued job that can never run (its dependency failed): file it as failed."""
        now = self.now()
        job = self._parsed.get(cand.name, (None, None))[1]
        if job is None:  # only the few near the head of the queue are kept parsed
            try:
                job, _ = self._read_job(cand.path)
            except (OSError, JobFormatError, BadFile):
                job = None
        result = unrun_result(name=cand.name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.FAILED,
                              reason=reason, host=self.host, now=now, job=job, priority=cand.rank,
                              urgent=cand.rank == 0)
        if self._file_unrun(result, JobState.QUEUED, cand.path, "failing", gone_ok=True):
            self._forget(cand)
            self.log.event("failed", cand.name, user=result.user, reason=reason)
            self.notifier.notify(result, job, self.config)

    def _file_unrun(self, result: Result, old: JobState, path: Path, why: str, *, gone_ok: bool = False) -> bool:
        """File a job that never ran (or whose run nobody saw end): write its result, move it from
        ``path`` into jobsdone/, count it. False if that failed (logged). ``gone_ok``: a file that
        is gone already (a cancel or another host took it) counts as filed.
        """
        try:
            write_result(self.spool, result)
            change_state(result.name, old, result.state, path, self.spool.done_dir / result.name, why)
        except OniteError as err:
            if not (gone_ok and isinstance(err, NotFound)):
                self.log.event("error", result.name, error=str(err))
                return False
        self.counts[str(result.state)] += 1
        return True

    def _refuse(self, cand: Candidate, st: os.stat_result | None, reason: str) -> None:
        self._forget(cand)
        self._move_aside(cand.path, cand.name, st, reason)

    def _refuse_claimed(self, name: str, path: Path, st: os.stat_result | None, reason: str) -> None:
        self._move_aside(path, name, st, reason)

    def _move_aside(self, path: Path, name: str, st: os.stat_result | None, reason: str) -> None:
        """Never run it, never delete it: move it to refused/ and say why, in the log and a result."""
        target = self.spool.refused_dir / f"{name}{SIDE}{self.now():%Y%m%dT%H%M%S}.{os.urandom(2).hex()}"
        try:
            move_file(path, target, "moving aside")
        except NotFound:
            return
        except OniteError as err:
            self.log.event("error", name, error=str(err))
            return
        owner = user_name(st.st_uid) if st else "?"
        self.log.event("refused", name, owner=owner, reason=reason, moved_to=str(target.relative_to(self.spool.root)))
        if st is not None and is_valid_name(name) and stat.S_ISREG(st.st_mode) \
                and may_replace_result(self.spool, name, st.st_uid):
            now = self.now()
            result = unrun_result(name=name, uid=st.st_uid, user=owner, state=JobState.FAILED,
                                  reason=f"refused: {reason}", host=self.host, now=now)
            try:
                write_result(self.spool, result)
            except OniteError:
                return
            self.notifier.notify(result, None, self.config)

    # ---- cancel requests -------------------------------------------------------------

    def _process_cancels(self) -> None:
        try:
            mtime = os.stat(self.spool.cancel_dir).st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._cancel_mtime and time.time_ns() - mtime > 50_000_000:
            return
        self._cancel_mtime = mtime
        from onite.app.control import file_cancelled, withdraw

        try:
            entries = cancel_inbox(self.spool)
        except OniteError:
            return
        for entry in entries:
            with self._guard(entry.name):  # a user's entry never stops the night
                self._process_cancel(entry, file_cancelled, withdraw)

    def _process_cancel(self, entry: Entry, file_cancelled, withdraw) -> None:
        from onite.app.control import NotAJob

        requester = user_name(entry.uid)
        if entry.size or not stat.S_ISREG(entry.mode):  # a job its owner withdrew (or something else): file it
            try:
                filed = file_cancelled(self.spool, entry.path, by=requester, now=self.now())
            except NotAJob as err:
                self.log.event("refused", entry.name, owner=requester, reason=str(err))
                return
            except OniteError as err:
                self.log.event("error", entry.name, error=str(err))
                return
            if filed is not None:
                self._filed_cancel(entry.name, requester, filed)
            return
        self._honour_request(entry, requester, withdraw, file_cancelled)

    def _filed_cancel(self, name: str, requester: str, filed) -> None:
        """A queued job filed as cancelled (``filed``: file_cancelled's answer): count, log, notify."""
        self.counts["cancelled"] += 1
        self.log.event("cancelled", name, by=requester, was="queued", note=filed.note or None)
        if filed.result is not None:
            self.notifier.notify(filed.result, filed.job, self.config)

    def _honour_request(self, request: Entry, requester: str, withdraw, file_cancelled) -> None:
        """An empty cancel/NAME@TOKEN: cancel NAME if its owner may (docs/security.md)."""
        name, own_only = request.name, self.config.own_only
        run = self.running.get(name)
        if run is not None:
            if may_touch(request.uid, run.owner.uid, own_only):
                self.runner.stop(run, "cancel", by=requester)
                self.log.event("cancel", name, by=requester, was="running")
            else:
                self.log.event("cancel-refused", name, by=requester, owner=run.owner.name)
            remove_file(request.path)
            return
        for entry in find_queued(self.spool, name):
            if not may_touch(request.uid, entry.uid, own_only):
                self.log.event("cancel-refused", name, by=requester, owner=user_name(entry.uid))
                continue
            try:
                pending = withdraw(self.spool, entry)
                filed = file_cancelled(self.spool, pending, by=requester, now=self.now())
            except OniteError:
                continue
            if filed is not None:
                self._filed_cancel(name, requester, filed)
        if find_running(self.spool, name) and time.time_ns() - request.ctime_ns < 86400 * 10**9:
            return  # running on another host: its driver will honour the request
        remove_file(request.path)

    # ---- recovery --------------------------------------------------------------------

    def recover(self) -> None:
        """Deal with what a dead driver of this host left in running/HOST/ (docs/job-control.md,
        "Exactly once"): adopt what still runs, file what ended from its run record, put back
        what never started, and run again only what nothing can say the end of."""
        running_dir = self._running_dir
        try:
            names = os.listdir(running_dir)
        except FileNotFoundError:
            return
        except OSError as err:
            self.log.event("error", error=str(SpoolIOError(running_dir, "listing", err)), note="recovery skipped")
            return
        jobs = [n for n in names if is_valid_name(n)]
        for name in jobs:
            try:
                self._recover_claim(name)
            except Exception as err:  # noqa: BLE001 - one damaged claim must not stop the night
                self.log.event("error", name, error=f"recovering it: {type(err).__name__}: {err}",
                               note="left in running/ for the next driver")
        for name in names:
            if name.endswith(RUN_RECORD) and name[: -len(RUN_RECORD)] not in jobs:
                remove_file(running_dir / name)  # a run record whose job is gone
            elif name.startswith(".") and name.endswith(".tmp"):
                remove_file(running_dir / name)  # a run record a dead driver was writing (we hold the lock)

    def _recover_claim(self, name: str) -> None:
        from onite.core import runrecord

        path = self._running_dir / name
        rec = runrecord.read(f"{path}{RUN_RECORD}")
        info = rec.info if rec is not None else {}
        if rec is not None and rec.version < runrecord.VERSION or info.get("executor") == "slurm":
            self._recover_unmonitored(name, path, info)  # an older onite's run, or a Slurm job
            return
        if self._already_filed(name, path, info):
            return
        if rec is None or not rec.started_job:
            # The monitor records itself before it forks the job, and holds the driver lock until
            # then: a claim whose record has no monitor line was never started.
            if rec is None:  # an older onite wrote the record after the start: look for its processes
                what = self._stop_unrecorded(name)
                rerun = not what.startswith("no run record, and none")
            else:
                what, rerun = "it had not started", False
            self._requeue_recovered(name, path, info, what, rerun=rerun)
            return
        if rec.ended:
            if not self._monitor_alive(rec):  # died after recording the end: its clean-up is ours
                self._stop_orphans(rec)
            self._file_recovered(name, path, rec)
            return
        machine = info.get("machine")
        if machine and machine != self._machine:
            self._requeue_recovered(name, path, info, f"it ran on {machine}, which cannot be checked from here; "
                                    "how it ended is unknown", rerun=True)
            return
        if info.get("boot") and info.get("boot") != boot_id():
            self._requeue_recovered(name, path, info, "the machine restarted while it ran; how it ended is unknown",
                                    rerun=True)
            return
        if self._adopt(name, path, rec):
            return
        # its monitor is gone and recorded no end: it was killed (kill -9, the OOM killer)
        rec = runrecord.read(f"{path}{RUN_RECORD}") or rec  # it may have ended just now
        if rec.ended:
            self._stop_orphans(rec)
            self._file_recovered(name, path, rec)
            return
        what = self._stop_orphans(rec)
        self._requeue_recovered(name, path, info, f"its monitor was killed and recorded no end ({what})", rerun=True)

    def _already_filed(self, name: str, path: Path, info: dict) -> bool:
        """The dead driver wrote the result but died before moving the job into jobsdone/: finish that."""
        try:
            previous = read_result(self.spool, name)
        except DamagedRecord:
            previous = None  # torn as its driver died: recovered as if it had not been written
        if previous is None or not info.get("run_id") or previous.run_id != info.get("run_id"):
            return False
        try:
            change_state(name, JobState.RUNNING, previous.state, path, self.spool.done_dir / name,
                            "completing a finished job")
        except OniteError as err:
            self.log.event("error", name, error=str(err))
            return True
        remove_file(f"{path}{RUN_RECORD}")
        self.log.event("recovered", name, action="its result was recorded; filed it")
        return True

    def _claimed_run(self, name: str, path: Path, info: dict) -> Run:
        """The Run of a claim, rebuilt from its job file and its run record.

        Raises:
            OSError, JobFormatError, BadFile, Refused: the job file cannot be read, or its owner has no account.
        """
        job, st = self._read_job(path)
        owner = self._resolve(st.st_uid)
        rank = info.get("rank") if isinstance(info.get("rank"), int) else job.priority

        def when(key: str) -> datetime | None:
            try:
                value = datetime.fromisoformat(info[key])
                return value if value.tzinfo else None
            except (KeyError, TypeError, ValueError):
                return None

        run = Run(name=name, job=job, owner=owner, rank=rank, run_id=str(info.get("run_id") or ""),
                  started=when("started") or self.now(), started_mono=time.monotonic(), spool=str(self.spool.root),
                  record_path=f"{path}{RUN_RECORD}")
        run.queued_at = when("queued")
        return run

    def _adopt(self, name: str, path: Path, rec) -> bool:
        """Take over a run whose monitor is alive: it is watched, limited and cancellable as if started here."""
        adopt = getattr(self.runner, "adopt", None)
        if adopt is None:
            return False
        try:
            run = self._claimed_run(name, path, rec.info)
        except (OSError, OniteError, BadFile):
            return False
        if not adopt(run, rec):
            return False
        self.running[name] = run
        self.log.event("recovered", name, action="adopted (still running)", monitor=rec.monitor_pid, pid=rec.job_pid)
        return True

    def _file_recovered(self, name: str, path: Path, rec) -> None:
        """File a run that ended while no driver watched it, from what its monitor recorded."""
        from onite.core.state import outcome_from_status

        try:
            run = self._claimed_run(name, path, rec.info)
        except (OSError, OniteError, BadFile) as err:
            self._requeue_recovered(name, path, rec.info, f"it ended, but its job file cannot be read ({err})",
                                    rerun=False)
            return
        if self._retry_exists(run):
            remove_file(path)
            remove_file(f"{path}{RUN_RECORD}")
            self.log.event("recovered", name, action="dropped: its retry was already spooled", attempt=run.attempt)
            return
        outcome = outcome_from_status(rec.status) if rec.status is not None else Outcome(reason=rec.failed or "")
        ended = None
        if rec.ended_at:
            try:
                ended = datetime.fromisoformat(rec.ended_at)
            except ValueError:
                ended = None
        self.log.event("recovered", name, action="filed how it ended while no driver was running",
                       outcome=outcome.describe() or "exit 0")
        self._record(run, outcome, ended if ended and ended.tzinfo else self.now())

    def _retry_exists(self, run: Run) -> bool:
        """Is a later attempt of this job already spooled (queued, running anywhere, or finished)?
        A driver killed between writing a retry and removing the claim leaves both."""
        def later(job: Job | None) -> bool:
            return job is not None and job.submitted == run.job.submitted and job.attempt > run.attempt

        for entry in find_queued(self.spool, run.name) + [e for e in find_running(self.spool, run.name)
                                                              if e.host != self.host]:
            try:
                job, _ = self._read_job(entry.path)
            except (OSError, JobFormatError, BadFile):
                continue
            if later(job):
                return True
        try:
            previous = read_result(self.spool, run.name)
        except (DamagedRecord, SpoolIOError):
            return False
        return previous is not None and previous.submitted == run.job.submitted and previous.attempt > run.attempt

    def _requeue_recovered(self, name: str, path: Path, info: dict, what: str, *, rerun: bool) -> None:
        """Put a claim back in its queue (or fail it, with on_interrupt = fail, when it may have run)."""
        try:
            claimed = self._claimed_run(name, path, info)
        except (OSError, OniteError, BadFile):
            claimed = None
        if claimed is not None and self._retry_exists(claimed):
            # a later attempt is already spooled: this claim is stale, and must neither run nor be filed
            remove_file(path)
            remove_file(f"{path}{RUN_RECORD}")
            self.log.event("recovered", name, action="dropped: its retry was already spooled", attempt=claimed.attempt)
            return
        if rerun and self.config.on_interrupt == "fail":
            self._fail_recovered(name, path, info, what)
            remove_file(f"{path}{RUN_RECORD}")
            return
        rank = info.get("rank")
        if not isinstance(rank, int):
            try:
                job, _ = self._read_job(path)
                rank = 0 if job.urgent else job.priority
            except (OSError, JobFormatError, BadFile):
                rank = self.config.default_priority
        if find_queued(self.spool, name):
            remove_file(path)  # a retry was already queued before the crash
            action = "dropped (its retry is already queued)"
        else:
            try:
                self._requeue_file(path, name, int(rank))
            except OniteError as err:
                self.log.event("error", name, error=str(err))
                return
            action = "rerun: requeued" if rerun else "requeued"
        remove_file(f"{path}{RUN_RECORD}")
        self.counts["requeued"] += 1
        self.log.event("recovered", name, action=action, why=what, driver=info.get("driver_pid"))

    def _recover_unmonitored(self, name: str, path: Path, info: dict) -> None:
        """A claim of a run with no monitor: an older onite's (its processes are killed, then it is
        requeued, as that onite did) or a Slurm job (re-attached if Slurm still has it)."""
        if self._reattach(name, path, info):
            return
        if self._already_filed(name, path, info):
            return
        what = self._stop_leftovers(name, info)
        self._requeue_recovered(name, path, info, what, rerun=True)

    def _monitor_alive(self, rec) -> bool:
        """Is the monitor a run record names still that process, and alive?"""
        from onite.exec.monitor import process_start_ticks

        pid = rec.monitor_pid
        if not pid or pid <= 1:
            return False
        return process_start_ticks(pid) == rec.monitor_ticks and _not_a_zombie(pid)

    def _stop_orphans(self, rec) -> str:
        """Stop what is left of a run whose monitor is gone (its cgroup, else its process group), and
        remove its cgroup: the monitor would have."""
        from onite.exec import contain

        cgroup = rec.get("cgroup") if isinstance(rec.get("cgroup"), str) else None
        if cgroup and self.containment.base and cgroup.startswith(f"{self.containment.base}/") \
                and "/" not in cgroup[len(self.containment.base) + 1:]:
            populated = contain.is_populated(cgroup)
            if populated:
                contain.kill_cgroup(cgroup)
            contain.remove_cgroup(cgroup)
            if populated:
                return "its processes were killed"
        pgid = rec.job_pid
        if pgid and pgid > 1 and contain.group_alive(pgid) and self._is_ours(pgid, rec):
            os.killpg(pgid, signal.SIGKILL)
            return "its processes were killed"
        return "none of its processes was running"

    def _is_ours(self, pid: int, rec) -> bool:
        """Is ``pid`` a process of that run (by ONITE_RUN_ID in its environment)?"""
        from onite.exec.executor import find_run_processes

        run_id = str(rec.get("run_id") or "")
        return bool(run_id) and pid in find_run_processes(str(self.spool.root), str(rec.get("name") or ""),
                                                           lambda found: found == run_id)

    def _stop_leftovers(self, name: str, info: dict) -> str:
        """Make sure a dead driver's job is not still running before it is requeued."""
        if not info:
            return self._stop_unrecorded(name)
        runner = self._recovering_runner(info)
        machine = info.get("machine")
        if runner.executor == "local" and machine and machine != os.uname().nodename:
            # process ids mean nothing on another machine: the admin vouched that it is down
            # (a Slurm job, by contrast, can be checked and cancelled from any submit host)
            return f"it ran on {machine}, which cannot be checked from here"
        return runner.recover(info, self.config.kill_grace.total_seconds())

    def _stop_unrecorded(self, name: str) -> str:
        """A claim with no run record: the dead driver never started it, or was killed between
        starting it and writing the record. What it started carries a run id of this host (we hold
        its lock, so no live driver has one) and this spool's path; the executor looks for that."""
        ours = lambda run_id: run_id_host(run_id) == self.host  # noqa: E731
        return self.runner.recover_unrecorded(name, str(self.spool.root), ours, self.config.kill_grace.total_seconds())

    def _recovering_runner(self, info: dict):
        """The executor that started the run: after a change of ``executor`` a Slurm job must still be cancelled."""
        executor = info.get("executor") or self.runner.executor
        if executor == self.runner.executor:
            return self.runner
        try:
            return self._make_runner(executor)
        except OniteError:
            return self.runner

    def recover_host(self) -> list[str]:
        """``onite recover --host NAME``: take NAME's lock, requeue (or fail) its claims, let go.

        Raises:
            Refused: a driver of that host holds its lock (it is alive).
        """
        lock = take_host_lock(self.spool, self.host,
                              f"pid={os.getpid()} host={self.host} since={self.started_at.isoformat()} role=recover")
        if lock is None:
            raise Refused(f"a driver for host {self.host} is running (it holds {self.spool.lock_path(self.host).name})",
                          "stop it there, or let it recover its own jobs")
        try:
            before = set(os.listdir(self._running_dir)) if self._running_dir.is_dir() else set()
            self.log.event("recover-host", host=self.host, by=f"uid {os.geteuid()}", claims=len([n for n in before if is_valid_name(n)]))
            # nothing here would watch a re-attached Slurm job: its claim is requeued (and the job cancelled)
            self._may_reattach = False
            self.recover()
            return sorted(n for n in before if is_valid_name(n))
        finally:
            self.notifier.finish()  # on_interrupt = fail notifies the owners of what it failed
            lock.release()
            self.log.close()

    def _reattach(self, name: str, path: Path, info: dict) -> bool:
        """Executors whose jobs outlive the driver (Slurm) take their runs back."""
        if not self._may_reattach or not info.get("external_id"):
            return False
        try:
            job, st = self._read_job(path)
            owner = resolve(st.st_uid)
        except (OSError, OniteError, BadFile):
            return False
        run = Run(name=name, job=job, owner=owner, rank=int(info.get("rank", job.priority)),
                  run_id=info.get("run_id", ""), started=datetime.fromisoformat(info["started"]),
                  started_mono=time.monotonic(), external_id=info["external_id"], spool=str(self.spool.root))
        run.queued_at = datetime.fromisoformat(info["queued"]) if info.get("queued") else None
        if not self.runner.reattach(run):
            return False
        self.running[name] = run
        self.log.event("recovered", name, action="re-attached", slurm=run.external_id)
        return True

    def _fail_recovered(self, name: str, path: Path, info: dict, what: str) -> None:
        now = self.now()
        try:
            job, st = self._read_job(path)
        except (OSError, JobFormatError, BadFile):
            job, st = None, os.lstat(path)
        started = datetime.fromisoformat(info["started"]) if info.get("started") else None
        result = unrun_result(name=name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.FAILED,
                              reason=f"interrupted: {what}", host=self.host, now=now, job=job,
                              urgent=bool(job and job.urgent), started=started, run_id=info.get("run_id", ""))
        if self._file_unrun(result, JobState.RUNNING, path, "failing an interrupted job"):
            self.log.event("recovered", name, action="failed (on_interrupt = fail)", processes=what)
            self.notifier.notify(result, job, self.config)

    # ---- retention -------------------------------------------------------------------

    def _prune(self, *, strays: bool = True) -> None:
        from onite.spool.retention import prune

        self._since_prune = 0
        try:
            removed = prune(self.spool, self.config.keep, protect=set(self.running), strays=strays)
        except OniteError as err:
            self.log.event("error", error=str(err), note="retention")
            return
        if removed:
            self.log.event("pruned", removed=removed, keep=self.config.keep)
        if strays:
            from onite.spool.retention import remove_temp_files

            try:
                leftovers = remove_temp_files(self.spool, time.time())
            except OniteError as err:
                self.log.event("error", error=str(err), note="retention of temporary files")
                return
            if leftovers:
                self.log.event("pruned", temporary=leftovers, note="files of writes that died (a crash or a kill)")



def lock_descriptor(lock) -> int | None:
    """The descriptor on which ``take_host_lock``'s lock is held (each job's monitor keeps it open
    until it has recorded itself, so no other driver recovers its claim in between)."""
    fd = getattr(lock, "fd", None)
    return fd if isinstance(fd, int) and fd >= 0 else None


def _not_a_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        return data[data.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")
    except (OSError, ValueError, IndexError):
        return False


def take_host_lock(spool: SpoolDir, host: str, holder: str, timeout: float = 0.5):
    """flock ``host``'s driver lock (in the spool's root-only locks/ folder, onite.spool.locks) and write
    ``holder`` into it; None if another process holds it after ``timeout`` seconds. The lock's
    descriptor (``lock.fd``) survives fork() into each job's monitor (onite.exec.monitor), which keeps it
    until it has recorded itself.

    Raises:
        Refused, SpoolError, SpoolIOError: the lock cannot be opened (onite.spool.locks).
    """
    from onite.spool import locks

    locks.ensure_dir(spool.root)
    return locks.take(spool.lock_path(host), timeout=timeout, holder=holder)


class SignalCatcher:
    """Route INT, TERM, QUIT, HUP and USR1 into a list, and wake the driver's poll()."""

    # USR2 only wakes the poll: it is how `onite run` and `onite daemon --wake` hand a drain to an idle daemon
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

    def __init__(self, sink: list[int]) -> None:
        self.sink = sink
        self.saved: dict[int, object] = {}

    def __enter__(self) -> int:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for sig in self.SIGNALS:
            self.saved[sig] = signal.signal(sig, self._handle)
        # `onite run --detach` starts the driver with these blocked (its pid is printed before it
        # gets here): what arrived meanwhile is delivered now, to the handler
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)
        return self.read_fd

    def _handle(self, signum, frame) -> None:
        self.sink.append(signum)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.read_fd)
        os.close(self.write_fd)
