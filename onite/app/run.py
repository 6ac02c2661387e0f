"""``onite run``, ``onite daemon``, ``onite recover --host``: a driver's options checked, and a driver started
(in this process, in the background, or by this host's daemon). Nothing here prints."""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import datetime, time as dtime

from onite.app.common import open_spool
from onite.core.errors import NotFound, Refused, SpoolError
from onite.core.names import check_name
from onite.core.safetext import printable
from onite.core.timeparse import parse_clock
from onite.drain import heartbeat as hb
from onite.spool.paths import SpoolDir
from onite.spool.settings import default_host
from onite.spool import trust

# `run --detach` waits for its background driver's word at most this long (a machine stalled for minutes)
DETACH_WORD_BOUND = 300.0
DETACH_REPORT = "ONITE_DETACH_REPORT"  # the descriptor on which a background driver says it drains
DRAINING = b"draining\n"
# events that say why `onite run` did nothing (onite.drain.driver); the terminal and detach say their words
IDLE_EVENTS = ("driver-busy", "drain-handed", "nothing-due", "outside-window")


def driver_target(spool: str | None, until: str | None, host: str | None,
                  command: str = "onite run") -> tuple[SpoolDir, dtime | None]:
    """``onite run``'s and ``onite daemon``'s common options, checked: the spool (its real path, no link another
    user could change) and the --until time."""
    target = open_spool(spool)
    real = trust.resolve(target.root, os.geteuid(), command)  # from here on, the spool's real path
    if real != target.root:
        location, target = target.location, SpoolDir(real)
        target.location = location
    until_time = parse_clock(until, what="--until") if until is not None else None
    if host is not None:  # --host '' is no host: refused, as submit and recover refuse it
        check_name(host, what="host name")
    return target, until_time


def drive(target: SpoolDir, until: dtime | None, *, slots: int | None = None, host: str | None = None,
          scheduled: bool = False, echo=None, listener=None, tick=None) -> int:
    """``onite run`` in this process: drain now; the exit code. ``echo``, ``listener`` and ``tick`` show it."""
    from onite.drain.driver import Driver

    word = _detach_word()
    if word:
        listener = _saying_draining(word, listener)
    driver = Driver(target, host=host, slots=slots, until=until, echo=echo, listener=listener, tick=tick)
    try:
        return driver.run(scheduled=scheduled, leaving=True)
    finally:
        while word:
            os.close(word.pop())


def _detach_word() -> list[int]:
    """The descriptor (DETACH_REPORT) on which a driver ``detach_driver`` started says DRAINING at its
    ``driver-start`` ([] in any other ``onite run``), taken out of reach of what this process starts."""
    value = os.environ.pop(DETACH_REPORT, None)
    if value is None or not value.isascii() or not value.isdigit():
        return []
    try:
        os.set_inheritable(int(value), False)
    except (OSError, ValueError):  # not a descriptor of this process; more digits than int() takes
        return []
    return [int(value)]


def _saying_draining(word: list[int], then):
    """A log listener that says DRAINING on ``word``'s descriptor at ``driver-start``, and tells ``then`` all."""
    def tell(when, event, name, fields) -> None:
        if event == "driver-start" and word:
            fd = word.pop()
            with contextlib.suppress(OSError):  # the command that started it is gone: nobody waits for the word
                os.write(fd, DRAINING)
            os.close(fd)
        if then is not None:
            then(when, event, name, fields)

    return tell


def run_daemon(spool: str | None, *, drain_now: bool = False, slots: int | None = None, until: str | None = None,
               host: str | None = None, echo=None) -> int:
    """``onite daemon``: wake at the schedule's times and drain, until stopped; the exit code."""
    target, until_time = driver_target(spool, until, host, "onite daemon")
    from onite.app.daemon import Daemon

    return Daemon(target, host=host, slots=slots, until=until_time, drain_now=drain_now, echo=echo).run()


def wake_daemon(spool: str | None, host: str | None, now: datetime) -> str:
    """``onite daemon --wake``: tell this host's daemon to drain now; the line to print (NotFound: none alive)."""
    if host is not None:  # --host '' is no host: refused, as submit and recover refuse it
        check_name(host, what="host name")
    target = open_spool(spool)
    if not trust.may_drive(target):
        raise Refused("onite daemon --wake is for root: the locks of this spool are its owner's",
                      "ask root to run: sudo onite daemon --wake")
    # its heartbeat names the process to signal: a spool someone else could have changed names any process
    trust.check(target.root, os.geteuid(), "onite daemon --wake")
    host = host or default_host(target.config)
    beat = hb.read(target, host)
    if beat is None or beat.role != hb.Role.DAEMON or not hb.is_alive(beat, now):
        raise NotFound(f"no onite daemon runs for host {host}",
                       "start one (systemctl start onite, or onite daemon), or drain now: onite run")
    if beat.state == hb.BeatState.DRAINING:
        return f"the daemon of host {host} (pid {beat.pid}) is draining already"
    if not hb.request_wake(target, host, beat):
        raise SpoolError(f"cannot leave the request in {target.locks_dir}", "check the spool: onite init")
    return f"told the daemon of host {host} (pid {beat.pid}) to drain now; onite status and onite log follow it"


def host_claims(spool: str | None, host: str) -> tuple[SpoolDir, list[str]]:
    """``onite recover --host HOST``, before it asks: the spool and the names of the jobs HOST has claimed.
    Refused: the caller is neither root nor a personal spool's owner."""
    from onite.spool.scan import running_entries

    check_name(host, what="host name")
    target = open_spool(spool)
    if not trust.may_drive(target):
        raise Refused("onite recover is for root", "run it with sudo")
    return target, [entry.name for entry in running_entries(target, host)]


def detach_driver(target: SpoolDir, slots: int | None, until: str | None, host: str | None,
                  scheduled: bool = False) -> tuple[int, str]:
    """Start ``onite run`` in the background, immune to hang-up, and wait until it says it drains or ends
    without saying so; the exit code and a line saying which, in the log's words."""
    import signal
    import subprocess

    from onite.drain.driver import SignalCatcher

    argv = [sys.executable, "-m", "onite", "run", "--spool", str(target.root)]
    for option, value in (("--slots", slots and str(slots)), ("--until", until), ("--host", host)):
        argv += [option, value] if value else []
    # --quiet: it logs to onite.log; its stderr says only why it could not start
    argv += ["--scheduled"] * scheduled + ["--quiet"]
    env = dict(os.environ)
    by = hb.started_by(hb.Role.RUN)
    if by in ("cron", "timer", "hand", "systemd"):
        env["ONITE_STARTED_BY"] = by  # the background driver's parent is this process, soon gone
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    word_r, word_w = os.pipe2(os.O_CLOEXEC)
    env[DETACH_REPORT] = str(word_w)
    # its pid is printed at once: a USR1 or HUP before it has its handlers must wait, not kill it
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SignalCatcher.SIGNALS)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_w,
                                 start_new_session=True, close_fds=True, pass_fds=(word_w,), env=env)
    except OSError as err:
        os.close(err_r)
        os.close(word_r)
        raise SpoolError(f"cannot start the background driver ({sys.executable}): {err.strerror}",
                         "run onite run without --detach") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(err_w)
        os.close(word_w)
    try:
        word, said, code = _await_word(child, word_r, err_r)
    finally:
        os.close(word_r)
        os.close(err_r)
    pid = child.pid
    running = f"driver started in the background (pid {pid})"
    if word == DRAINING:
        return 0, f"{running}: draining; it logs to {target.log_path}"
    if code is None:  # no word within DETACH_WORD_BOUND: it is alive, and onite.log will say the rest
        return 0, f"{running}; it logs to {target.log_path}"
    if code != 0:
        error = said.decode("utf-8", "replace").strip().splitlines()
        reason = error[-1].removeprefix("onite: ") if error else f"exit {code}"
        return code, f"the background driver (pid {pid}) did not drain: {reason}"
    return 0, f"the background driver (pid {pid}) {_what_it_did(target, pid)}"


def _await_word(child, word_r: int, err_r: int) -> tuple[bytes, bytes, int | None]:
    """The background driver's word, its stderr so far, and its exit code once it ended unsaid (else None)."""
    import select
    import subprocess
    import time

    deadline = time.monotonic() + DETACH_WORD_BOUND
    word, said = b"", b""
    open_fds = [word_r, err_r]
    while word_r in open_fds and (left := deadline - time.monotonic()) > 0:
        for fd in select.select(open_fds, [], [], left)[0]:
            chunk = os.read(fd, 4096)
            if fd == word_r:
                word += chunk
            else:
                said += chunk
            if not chunk:
                open_fds.remove(fd)
        if word == DRAINING:
            return word, said, None
    if word_r in open_fds:
        return word, said, None
    try:  # it ended unsaid: its exit is its word, and what it wrote on stderr says why
        code = child.wait(max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        return word, said, None
    if err_r in open_fds:  # all it wrote is in the pipe now (a process it left may hold the pipe open)
        os.set_blocking(err_r, False)
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(err_r, 65536):
                said += chunk
    return word, said, code


def _what_it_did(target: SpoolDir, pid: int) -> str:
    """Why the driver ``pid``, which ended without draining, did nothing, as it logged it."""
    from onite.spool.log import parse_line, tail

    events = [e for e in map(parse_line, tail(target.log_path, 200)) if e is not None and e["pid"] == pid]
    for event in events:
        if event["event"] in IDLE_EVENTS:
            did = "handed the drain over" if event["event"] == "drain-handed" else "did nothing"
            return f"{did}: {printable(idle_reason(event['event'], event['fields']))}"
    return f"ended at once; see onite log ({target.log_path})"


def idle_reason(event: str, fields: dict) -> str:
    """Why a run did nothing, in the log's words: the event's note, with who holds the lock for ``driver-busy``."""
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
