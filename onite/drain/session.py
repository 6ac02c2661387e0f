"""A whole ``onite run`` around one drain: this host's lock, the heartbeat, recurring jobs, the night window.

One driver per host holds ``locks/driver.HOST.lock`` (flock, in a folder only
root may enter, so no user can hold it: onite.spool.locks) for its whole life
and says so in its world-readable heartbeat ``driver.HOST.state``
(onite.drain.heartbeat: pid, who started it, when the next drain is due). A
second one logs who holds the lock and exits 0, or hands the drain to the
host's daemon if it is idle (onite.drain.wake). With the lock held it spools
the recurring jobs that are due (onite.drain.instances), and with
``scheduled`` drains only inside a night window a time of ``schedule``
opened (onite.core.window); a run that did nothing logs why (``nothing-due``,
in the words of ``onite status``: onite.drain.verdicts).

Signals are caught before this driver's pid is anywhere to be read (its
lock, its heartbeat) and until it has let go of the lock: a USR1 or HUP
never kills it. ``onite recover --host`` takes another host's lock the same
way, to recover what that host left.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from onite.core.errors import EXIT_FAILURE, OniteError, Refused
from onite.core.names import is_valid_name
from onite.drain import heartbeat as hb
from onite.drain.signals import SignalCatcher
from onite.spool import locks
from onite.spool.paths import SpoolDir

if TYPE_CHECKING:
    from onite.drain.driver import Driver


def run(d: Driver, *, scheduled: bool = False) -> int:
    """Take this host's lock, spool due recurring jobs, and drain; the exit code (0 also when another
    driver holds the lock; 4 when runs could not be recorded). ``scheduled``: drain only inside a
    night window that a time of ``schedule`` opened, else log that and return.

    Raises:
        SpoolError, Refused: the spool may not be drained by this user (SpoolDir.check_drainable).
        ConfigError: the reserve leaves nothing of this machine for jobs (onite.drain.pack).
    """
    d.spool.check_drainable("onite run")
    d.packer.check()  # one line on stderr, as any bad setting: nothing is claimed, failed or logged
    with SignalCatcher(d.signals) as wakeup_fd:
        d.wakeup_fd = wakeup_fd
        lock = _take_lock(d, hand_over=not scheduled)
        if lock is None:
            return 0
        d.lock_fd = lock_descriptor(lock)
        try:
            _start_heartbeat(d)
            spool_recurring(d)
            if scheduled and not _inside_scheduled_window(d):
                return 0
            d.drain(explain=True)
        finally:
            try:
                if d.heartbeat is not None:
                    d.heartbeat.close()
            finally:
                lock.release()
                d.log.close()
    return EXIT_FAILURE if d.finisher.cannot_record else 0


def take_host_lock(spool: SpoolDir, host: str, holder: str, timeout: float = 0.5) -> locks.Lock | None:
    """flock ``host``'s driver lock (in the spool's root-only locks/ folder, onite.spool.locks) and write
    ``holder`` into it; None if another process holds it after ``timeout`` seconds. The lock's
    descriptor (``lock.fd``) survives fork() into each job's monitor (onite.exec.monitor), which keeps it
    until it has recorded itself.

    Raises:
        Refused, SpoolError, SpoolIOError: the lock cannot be opened (onite.spool.locks).
    """
    locks.ensure_dir(spool.root)
    return locks.take(spool.lock_path(host), timeout=timeout, holder=holder)


def lock_descriptor(lock: locks.Lock) -> int | None:
    """The descriptor on which ``take_host_lock``'s lock is held (each job's monitor keeps it open
    until it has recorded itself, so no other driver recovers its claim in between)."""
    fd = getattr(lock, "fd", None)
    return fd if isinstance(fd, int) and fd >= 0 else None


def _take_lock(d: Driver, *, hand_over: bool) -> locks.Lock | None:
    """This host's driver lock, or None: another driver holds it (logged, with who it is), or, with
    ``hand_over``, an idle daemon holds it and was told to drain now (logged as ``drain-handed``).

    Raises:
        Refused, SpoolError, SpoolIOError: the lock cannot be opened (onite.spool.locks).
    """
    lock = take_host_lock(d.spool, d.host, f"pid={d.pid} host={d.host} since={d.started_at.isoformat()}")
    if lock is None:
        _busy(d, hand_over)
    return lock


def _busy(d: Driver, hand_over: bool) -> None:
    """Another process holds this host's lock: say which (its heartbeat), or hand the drain to an idle daemon."""
    beat = hb.read(d.spool.root, d.host)
    if beat is None or not hb.is_alive(beat, d.clock.now()):
        d.log.event("driver-busy", host=d.host, holder="unknown (no heartbeat)",
                    note="another driver is draining this spool on this host; exiting")
        return
    role = "daemon" if beat.role == hb.Role.DAEMON else "driver"
    if hand_over and beat.role == hb.Role.DAEMON and beat.state == hb.BeatState.IDLE:
        from onite.drain.wake import request_wake

        if request_wake(d.spool, d.host, beat):
            d.log.event("drain-handed", host=d.host, daemon=beat.pid,
                        note="the daemon of this host was idle: it drains now")
            return
    d.log.event("driver-busy", host=d.host, pid=beat.pid, role=role,
                since=beat.since.isoformat(timespec="seconds"), started_by=beat.started_by,
                state=beat.state if role == "daemon" else None,
                note="another driver is draining this spool on this host; exiting")


def _start_heartbeat(d: Driver) -> None:
    """Tell everyone this driver is alive, who started it and when the next drain is due (onite.drain.heartbeat)."""
    d.heartbeat = hb.Heartbeat(d.spool.root, d.host, hb.Role.RUN, log=d.log, clock=d.clock)
    upcoming = None
    try:
        from onite.drain.nextdrain import plan

        upcoming = plan(d.spool, d.clock.now(), host=d.host, exclude_pid=d.pid).next
    except (OniteError, OSError, ValueError):
        pass
    d.heartbeat.beat(next_drain=upcoming.when if upcoming else None, next_by=upcoming.by if upcoming else None)
    if d.heartbeat.started_by == "cron" and upcoming is not None and upcoming.by == "cron":
        from onite.spool.cronrecords import refresh_record

        refresh_record(d.spool.root, d.host, upcoming.when)


def spool_recurring(d: Driver) -> list[str]:
    """Spool the instances of recurring jobs that are due (at most one per template); their names."""
    if not d.spool.recur_dir.is_dir():
        return []
    from onite.drain.instances import RecurScheduler

    try:
        return RecurScheduler(d.spool, d.log, clock=d.clock).spool_due(d.clock.now())
    except OniteError as err:
        d.log.event("recur-error", error=str(err), note="recurring jobs were not spooled")
        return []
    except Exception as err:  # noqa: BLE001 - what users put in recur/ must never stop the night's drain
        import sys
        import traceback

        traceback.print_exc(file=sys.stderr)
        d.log.event("recur-error", error=f"{type(err).__name__}: {err}",
                    note="recurring jobs were not spooled; please report this")
        return []


def _inside_scheduled_window(d: Driver) -> bool:
    from onite.core.window import scheduled_window

    now = d.clock.now()
    window = scheduled_window(d.config.schedule, d.until, now)
    if window is None or not window.is_open(now):
        d.log.event("outside-window", host=d.host,
                    last=window.opened.isoformat(timespec="minutes") if window else None,
                    closed=window.closes.isoformat(timespec="minutes") if window and window.closes else None,
                    note="outside the night window; nothing drained (onite run without --scheduled drains now)")
        return False
    return True


def explain_idle(d: Driver) -> None:
    """Nothing started and nothing was filed: log why, in status's words (onite.drain.verdicts)."""
    from onite.drain.verdicts import idle_summary

    try:
        queued, note = idle_summary(d.spool, d.clock.now(), euid=d.euid, host=d.host)
    except OniteError as err:
        queued, note = None, f"nothing was started (the queue could not be read: {err})"
    d.log.event("nothing-due", queued=queued, note=note)


def recover_host(d: Driver) -> list[str]:
    """``onite recover --host NAME``: take NAME's lock, requeue (or fail) its claims, let go; their names.

    Raises:
        Refused: a driver of that host holds its lock (it is alive).
    """
    lock = take_host_lock(d.spool, d.host, f"pid={d.pid} host={d.host} since={d.started_at.isoformat()} role=recover")
    if lock is None:
        raise Refused(f"a driver for host {d.host} is running (it holds {d.spool.lock_path(d.host).name})",
                      "stop it there, or let it recover its own jobs")
    try:
        before = set(os.listdir(d.running_dir)) if d.running_dir.is_dir() else set()
        d.log.event("recover-host", host=d.host, by=f"uid {d.euid}", claims=len([n for n in before if is_valid_name(n)]))
        # nothing here would watch a re-attached Slurm job: its claim is requeued (and the job cancelled)
        d.recovery.may_reattach = False
        d.recovery.recover()
        return sorted(n for n in before if is_valid_name(n))
    finally:
        d.notifier.finish()  # on_interrupt = fail notifies the owners of what it failed
        lock.release()
        d.log.close()
