"""``onite run``, ``onite daemon``, ``onite recover --host``: a driver's options checked, and a driver started.

The drain itself is onite.drain's; what is here is the command around it: the
options ``onite run`` and ``onite daemon`` share (``driver_target``), a driver
in the background (``detach_driver``, which watches it for DETACH_LOOK seconds
and says what it did, in the log's words), handing a drain to this host's
daemon (``wake_daemon``), and a dead host's claims (``host_claims``,
``recover_host``). Nothing here prints: the command line says what it returns.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, time as dtime

from onite.app.common import open_spool
from onite.core.clock import SYSTEM, Clock
from onite.core.errors import NotFound, Refused, SpoolError
from onite.core.names import check_name
from onite.core.safetext import printable
from onite.drain import heartbeat as hb
from onite.spool.paths import SpoolDir
from onite.spool.settings import default_host

DETACH_LOOK = 1.0  # seconds `run --detach` watches its background driver before it says what that did
# events that say why `onite run` did nothing (onite.drain.driver); the terminal and detach say their words
IDLE_EVENTS = ("driver-busy", "drain-handed", "nothing-due", "outside-window")


def driver_target(spool: str | None, until: str | None, host: str | None) -> tuple[SpoolDir, dtime | None]:
    """``onite run``'s and ``onite daemon``'s common options, checked: the spool and the --until time.

    Raises:
        SpoolError, InvalidInput: no spool there; a bad --until time or host name.
    """
    from onite.core.timeparse import parse_clock

    target = open_spool(spool)
    until_time = parse_clock(until, what="--until time") if until else None
    if host:
        check_name(host, what="host name")
    return target, until_time


def drive(target: SpoolDir, until: dtime | None, *, slots: int | None = None, host: str | None = None,
          scheduled: bool = False, echo=None, listener=None, tick=None, clock: Clock = SYSTEM) -> int:
    """``onite run`` in this process, on ``driver_target``'s spool and --until: drain now; the exit code
    (onite.drain.driver.Driver.run). ``echo``, ``listener`` and ``tick`` are how the command line shows the
    drain (onite.cli.progress).

    Raises:
        SpoolError, Refused: the spool may not be drained by this user.
    """
    from onite.drain.driver import Driver

    driver = Driver(target, host=host, slots=slots, until=until, echo=echo, listener=listener, tick=tick,
                    clock=clock)
    return driver.run(scheduled=scheduled, leaving=True)


def run_daemon(spool: str | None, *, drain_now: bool = False, slots: int | None = None, until: str | None = None,
               host: str | None = None, echo=None, clock: Clock = SYSTEM) -> int:
    """``onite daemon``: wake at the schedule's times and drain, until stopped; the exit code. ``echo``:
    where its log lines go too (stderr, for journald)."""
    target, until_time = driver_target(spool, until, host)
    from onite.drain.daemon import Daemon

    return Daemon(target, host=host, slots=slots, until=until_time, drain_now=drain_now, echo=echo,
                  clock=clock).run(leaving=True)


def wake_daemon(spool: str | None, host: str | None, now: datetime) -> str:
    """``onite daemon --wake``: tell this host's daemon to drain now; the line to print.

    Raises:
        NotFound: no daemon is alive for that host. Refused: this user may not (the spool is root's).
        InvalidInput: a bad host name. SpoolError: the request could not be left.
    """
    from onite.drain.wake import request_wake

    if host:
        check_name(host, what="host name")
    target = open_spool(spool)
    host = host or default_host(target.config)
    beat = hb.read(target.root, host)
    if beat is None or beat.role != hb.Role.DAEMON or not hb.is_alive(beat, now):
        raise NotFound(f"no onite daemon runs for host {host}",
                       "start one (systemctl start onite, or onite daemon), or drain now: onite run")
    if beat.state == hb.BeatState.DRAINING:
        return f"the daemon of host {host} (pid {beat.pid}) is draining already"
    if not request_wake(target, host, beat):
        raise SpoolError(f"cannot leave the request in {target.locks_dir}", "check the spool: onite init")
    return f"told the daemon of host {host} (pid {beat.pid}) to drain now; onite status and onite log follow it"


def host_claims(spool: str | None, host: str) -> tuple[SpoolDir, list[str]]:
    """``onite recover --host HOST``, before it asks: the spool and the names of the jobs HOST has claimed.

    Raises:
        InvalidInput: a bad host name (checked first). SpoolError: no spool there. Refused: the caller
            is neither root nor the owner of a personal spool (checked before anything in it is looked at).
    """
    from onite.spool.scan import running_entries

    check_name(host, what="host name")
    target = open_spool(spool)
    if os.geteuid() != 0 and not os.access(target.running_root, os.W_OK):  # a personal spool's owner may
        raise Refused("onite recover is for root", "run it with sudo")
    return target, [entry.name for entry in running_entries(target, host)]


def recover_host(target: SpoolDir, host: str) -> list[str]:
    """``onite recover --host HOST``, once confirmed: requeue (or fail) HOST's claimed jobs; their names.

    Raises:
        Refused: a driver of that host holds its lock (it is alive). SpoolError: a job cannot be moved.
    """
    from onite.drain.driver import Driver

    return Driver(target, host=host).recover_host()


def detach_driver(target: SpoolDir, slots: int | None, until: str | None, host: str | None,
                  scheduled: bool = False) -> tuple[int, str]:
    """Start ``onite run`` in the background, immune to hang-up, and watch it for DETACH_LOOK seconds:
    return the exit code and a line saying what it did (draining; busy or nothing to do, in the log's
    words; refused, with its error and exit code).
    """
    import select
    import subprocess
    import time

    argv = [sys.executable, "-m", "onite", "run", "--spool", str(target.root)]
    argv += ["--slots", str(slots)] if slots else []
    argv += ["--until", until] if until else []
    argv += ["--host", host] if host else []
    argv += ["--scheduled"] if scheduled else []
    argv += ["--quiet"]  # it logs to onite.log; its stderr says only why it could not start
    env = dict(os.environ)
    by = hb.started_by(hb.Role.RUN)
    if by in ("cron", "timer", "hand", "systemd"):
        env["ONITE_STARTED_BY"] = by  # the background driver's parent is this process, soon gone
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    import signal

    from onite.drain.signals import SignalCatcher

    # Its pid is printed at once: it starts with the driver's signals blocked, so that a USR1 or a
    # HUP sent before it has installed its handlers waits for them instead of killing it.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SignalCatcher.SIGNALS)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=write_fd,
                                 start_new_session=True, close_fds=True, env=env)
    except OSError as err:
        os.close(read_fd)
        from onite.core.errors import SpoolError

        raise SpoolError(f"cannot start the background driver ({sys.executable}): {err.strerror}",
                         "run onite run without --detach") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(write_fd)
    host_name = host or default_host(target.config)
    said, started, code = b"", False, None
    deadline = time.monotonic() + DETACH_LOOK
    try:
        while (left := deadline - time.monotonic()) > 0:
            code = child.poll()
            if code is not None:
                break
            beat = hb.read(target.root, host_name)
            if beat is not None and beat.pid == child.pid and beat.state == hb.BeatState.DRAINING:
                started = True
                break
            if select.select([read_fd], [], [], min(left, 0.05))[0]:
                chunk = os.read(read_fd, 4096)
                said += chunk
                if not chunk:  # it closed stderr: it is exiting
                    code = child.wait(max(deadline - time.monotonic(), 0.01))
                    break
    except subprocess.TimeoutExpired:
        code = None
    finally:
        os.close(read_fd)
    pid = child.pid
    running = f"driver started in the background (pid {pid})"
    if started:
        return 0, f"{running}: draining; it logs to {target.log_path}"
    if code is None:
        return 0, f"{running}; it logs to {target.log_path}"
    if code != 0:
        error = said.decode("utf-8", "replace").strip().splitlines()
        reason = error[-1].removeprefix("onite: ") if error else f"exit {code}"
        return code, f"the background driver (pid {pid}) did not drain: {reason}"
    return 0, f"the background driver (pid {pid}) {_what_it_did(target, pid)}"


def _what_it_did(target: SpoolDir, pid: int) -> str:
    """What the driver ``pid`` that ended logged: why it did nothing, or how its drain went."""
    from onite.spool.log import parse_line, tail

    events = [e for e in map(parse_line, tail(target.log_path, 200)) if e is not None and e["pid"] == pid]
    for event in events:  # why it did nothing comes before its driver-exit line
        fields = event["fields"]
        if event["event"] == "drain-handed":
            return f"handed the drain over: {printable(idle_reason('drain-handed', fields))}"
        if event["event"] in IDLE_EVENTS:
            return f"did nothing: {printable(idle_reason(event['event'], fields))}"
    for event in events:
        fields = event["fields"]
        if event["event"] == "driver-exit":
            return (f"drained: {fields.get('done', '0')} done, {fields.get('failed', '0')} failed, "
                    f"{fields.get('cancelled', '0')} cancelled, {fields.get('left', '0')} left queued")
    return f"ended at once; see onite log ({target.log_path})"


def idle_reason(event: str, fields: dict) -> str:
    """Why a run did nothing, in the log's words: the event's note, with who holds the lock for ``driver-busy``
    (``fields`` as logged, or as read back from the log)."""
    note = str(fields.get("note") or event)
    if event == "driver-busy":
        who = ", ".join(x for x in (
            f"{fields.get('role') or 'driver'} pid {fields['pid']}" if fields.get("pid") else str(fields.get("holder") or ""),
            f"started by {fields['started_by']}" if fields.get("started_by") else "",
            f"since {fields['since']}" if fields.get("since") else "") if x)
        return f"{note} ({who})" if who else note
    if event == "drain-handed" and fields.get("daemon"):
        return f"{note} (daemon pid {fields['daemon']})"
    return note
