"""Telling a job's owner how it ended: mail through the local sendmail, or the admin's hook command.

A notice starts once the job is filed and never delays the next job: the notifier runs in its own
session, never waited for. At most MAX_RUNNING run at once, the rest wait (one user's after
another's); those past notify_timeout are killed; every failure is one ``notify-failed`` line.
Notifiers run with the driver's credentials, as atd runs sendmail.
"""

from __future__ import annotations

import os
import pwd
import signal
from collections import deque
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from onite.core.clock import SYSTEM, Clock
from onite.core.names import is_valid_key, shown
from onite.core.safetext import phrase
from onite.core.state import JobState, Result
from onite.spool.outputs import run_tail
from onite.spool.results import result_record

if TYPE_CHECKING:
    import subprocess

SENDMAIL_PATHS = ("/usr/sbin/sendmail", "/usr/lib/sendmail")
NO_SENDMAIL = "no sendmail (install an MTA or set sendmail in onite.toml)"
TAIL_LINES = 100
TAIL_BYTES = 64 * 1024
STDERR_KEEP = 2048  # bytes of a notifier's stderr kept for the log line
MAX_RUNNING = 8  # notifiers at once: a burst of failures must not become a burst of processes
MAX_WAITING = 1000  # notices waiting for one of those; beyond that they are logged and dropped
MAX_WAITING_PER_USER = 100  # of them one user's
KILL_WAIT = 5.0  # seconds to wait for a killed notifier to be reaped before giving up on it


def find_sendmail(config) -> tuple[str | None, str]:
    """onite.toml's ``sendmail``, else the first of SENDMAIL_PATHS that exists; or None and why none."""
    if config.sendmail:
        if os.path.exists(config.sendmail):
            return config.sendmail, ""
        return None, f"no sendmail at {config.sendmail} (install an MTA or fix sendmail in onite.toml)"
    return next((p for p in SENDMAIL_PATHS if os.path.exists(p)), None), NO_SENDMAIL


def wants_notice(result: Result, job_notify: str | None, job_notify_on: str | None, config) -> str | None:
    """"mail", "command" or None: the notice a final ``result`` calls for (the job's choice, else the spool's)."""
    how = job_notify or config.notify
    when = job_notify_on or config.notify_on
    ended = result.state is JobState.FAILED or when == "always" and result.state in (JobState.DONE, JobState.CANCELLED)
    return how if how in ("mail", "command") and ended else None


def _one_line(text: str, limit: int = 120) -> str:
    """``text`` as a mail shows it: safetext.phrase (no line break, no invisible character), cut to ``limit``."""
    text = phrase(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def subject(result: Result) -> str:
    """``onite: job NAME failed (exit 3)``, ``… done``, ``… cancelled by alice``: NAME as its owner writes it."""
    if result.state is JobState.CANCELLED:
        what = _one_line(result.reason or "cancelled")
    elif result.reason:
        what = f"{result.state} ({_one_line(result.reason)})"
    else:
        what = str(result.state)
    return f"onite: job {shown(result.name, result.user)} {what}"


def mail_message(result: Result, output: bytes | None, spool_root: Path | str) -> bytes:
    """The mail for ``sendmail -oi -t`` telling ``result.user`` how their job ended (``output``: its tail)."""
    from email.message import EmailMessage
    from email.policy import default
    from email.utils import format_datetime

    msg = EmailMessage(policy=default)
    msg["To"] = result.user
    msg["Subject"] = subject(result)
    msg["Date"] = format_datetime(result.finished)
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Onite-Job"] = result.name
    duration = f"{result.duration:.1f} s" if result.duration is not None else None
    attempt = f"{result.attempt}" + (f" (of {len(result.attempts)} recorded)" if len(result.attempts) > 1 else "")
    label = shown(result.name, result.user)  # as its owner, who reads the mail, writes it
    rows = [("job", label), ("state", str(result.state)), ("reason", _one_line(result.reason, 500) or None),
            ("host", result.host or None), ("started", result.started.isoformat(timespec="seconds") if result.started
                                            else "never (the job did not start)"),
            ("finished", result.finished.isoformat(timespec="seconds")), ("duration", duration),
            ("attempt", attempt), ("spool", str(spool_root))]
    lines = [f"{key + ':':<10} {value}" for key, value in rows if value is not None]
    if output is None:
        lines += ["", "There is no output of this run."]
    else:
        count = output.count(b"\n")
        text = output.decode("utf-8", "replace")
        lines += ["", f"The last {count} lines of its output:" if count else "Its output is empty.", ""]
        lines += [text.rstrip("\n")] if text else []
    lines += ["", f"All of its output: onite output {label} --spool {spool_root}", ""]
    msg.set_content("\n".join(lines), charset="utf-8")
    return msg.as_bytes()


class _Pending:
    """A notifier started and not reaped yet."""

    def __init__(self, *, name: str, how: str, popen: subprocess.Popen, deadline: float,
                 stderr_fd: int | None) -> None:
        self.name, self.how, self.popen = name, how, popen
        self.deadline = deadline  # monotonic: killed if still running then; once killed, given up on if still there
        self.stderr_fd = stderr_fd
        self.stderr = bytearray()
        self.killed: str | None = None  # why it was killed ("timeout", "driver stopped")

    def read_stderr(self) -> None:
        """Keep the last STDERR_KEEP bytes it wrote to stderr."""
        while self.stderr_fd is not None:
            try:
                chunk = os.read(self.stderr_fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                os.close(self.stderr_fd)
                self.stderr_fd = None
                return
            self.stderr += chunk
            del self.stderr[:-STDERR_KEEP]

    def close(self) -> None:
        self.read_stderr()
        if self.stderr_fd is not None:  # a child of the notifier still holds the pipe: let it go
            os.close(self.stderr_fd)
            self.stderr_fd = None


class Notifier:
    """Starts the driver's notices and watches them; ``notify`` never raises and never blocks."""

    def __init__(self, spool, log, *, clock: Clock = SYSTEM) -> None:
        self.spool = spool
        self.log = log
        self.clock = clock  # the driver's: a notifier's time limit is read on it
        self.pending: list[_Pending] = []
        self.waiting: dict[int, deque[tuple[Result, str, object]]] = {}  # by owner, the longest waiting first
        self._told_no_sendmail = False

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.waiting)

    def notify(self, result: Result, job, config) -> None:
        """Start the notice ``result`` calls for (``job``: the job file, or None if it is unreadable)."""
        how = None
        try:
            how = wants_notice(result, getattr(job, "notify", None), getattr(job, "notify_on", None), config)
            if how is None:
                return
            if not is_valid_key(result.name):  # it reaches a hook's environment and a mail's headers
                self.log.event("notify-failed", result.name, how=how, reason="not a valid job name")
                return
            if len(self.pending) < MAX_RUNNING:
                self._send(result, how, config)
            elif (waiting := sum(map(len, self.waiting.values()))) < MAX_WAITING \
                    and len(self.waiting.get(result.uid, ())) < MAX_WAITING_PER_USER:
                self.waiting.setdefault(result.uid, deque()).append((result, how, config))
            else:
                self.log.event("notify-failed", result.name, how=how,
                               reason=f"too many notices at once ({MAX_RUNNING} running, {waiting} waiting, "
                                      f"at most {MAX_WAITING_PER_USER} of one user's)")
        except Exception as err:  # noqa: BLE001 - a broken notifier never breaks the night: log it, go on
            self.log.event("notify-failed", result.name, how=how, reason=f"{type(err).__name__}: {err}")

    def _send(self, result: Result, how: str, config) -> None:
        try:
            (self._mail if how == "mail" else self._command)(result, config)
        except Exception as err:  # noqa: BLE001 - see notify()
            self.log.event("notify-failed", result.name, how=how, reason=f"{type(err).__name__}: {err}")

    def _mail(self, result: Result, config) -> None:
        sendmail, missing = find_sendmail(config)
        if sendmail is None:
            if not self._told_no_sendmail:  # once a drain: every later mail would say the same
                self._told_no_sendmail = True
                self.log.event("notify-failed", result.name, how="mail", reason=missing,
                               note="said once a drain")
            return
        try:
            pwd.getpwnam(result.user)
        except KeyError:
            self.log.event("notify-failed", result.name, how="mail", reason=f"no account {result.user!r} to mail")
            return
        tail = run_tail(self.spool.output_path(result.name), result.uid, result.started, result.finished,
                        max_bytes=TAIL_BYTES, lines=TAIL_LINES)
        message = mail_message(result, tail, self.spool.root)
        self._start(result, "mail", [sendmail, "-oi", "-t"], message, dict(os.environ), config)

    def _command(self, result: Result, config) -> None:
        if not config.notify_command:
            self.log.event("notify-failed", result.name, how="command", reason="onite.toml has no notify_command")
            return
        env = dict(os.environ, ONITE_JOB=result.name, ONITE_USER=result.user, ONITE_STATE=str(result.state),
                   ONITE_SPOOL=str(self.spool.root), ONITE_EVENT="finished")
        self._start(result, "command", list(config.notify_command), result_record(result), env, config)

    def _start(self, result: Result, how: str, argv: list[str], stdin: bytes, env: dict, config) -> None:
        import subprocess  # these two only where a notice starts: cancel files its job with a Notifier too

        from onite.exec.plan import memory_file

        data_fd = memory_file("onite-notice", stdin)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            popen = subprocess.Popen(argv, stdin=data_fd, stdout=subprocess.DEVNULL, stderr=err_w, cwd="/", env=env,
                                     start_new_session=True, close_fds=True, restore_signals=True)
        except OSError as err:
            os.close(err_r)
            what = "no such file" if isinstance(err, FileNotFoundError) else \
                "permission denied" if isinstance(err, PermissionError) else (err.strerror or str(err))
            self.log.event("notify-failed", result.name, how=how, reason=f"cannot start {argv[0]}: {what}")
            return
        finally:
            os.close(data_fd)
            os.close(err_w)
        os.set_blocking(err_r, False)
        self.pending.append(_Pending(name=result.name, how=how, popen=popen, stderr_fd=err_r,
                                     deadline=self.clock.monotonic() + config.notify_timeout.total_seconds()))

    def reap(self, now_mono: float | None = None) -> None:
        """Log the notifiers that ended, kill those past their time, start those waiting."""
        now_mono = self.clock.monotonic() if now_mono is None else now_mono
        keep = []
        for pending in self.pending:
            try:
                if not self._check(pending, now_mono):
                    keep.append(pending)
            except Exception as err:  # noqa: BLE001 - see notify()
                pending.close()
                self.log.event("notify-failed", pending.name, how=pending.how, reason=f"{type(err).__name__}: {err}")
        self.pending = keep
        while self.waiting and len(self.pending) < MAX_RUNNING:
            self._send(*self._next_waiting())

    def _next_waiting(self) -> tuple[Result, str, object]:
        """The first notice of the owner who has waited longest, who then goes behind the others."""
        uid = next(iter(self.waiting))
        queue = self.waiting.pop(uid)
        notice = queue.popleft()
        if queue:
            self.waiting[uid] = queue
        return notice

    def _check(self, pending: _Pending, now_mono: float) -> bool:
        """True once ``pending`` is over (and logged)."""
        pending.read_stderr()
        code = pending.popen.poll()
        if code is None:
            if now_mono >= pending.deadline and pending.killed is None:
                self._kill(pending, "timeout", now_mono)
            elif now_mono >= pending.deadline:
                pending.close()  # killed, yet not gone (stuck in the kernel): stop watching it
                self.log.event("notify-failed", pending.name, how=pending.how,
                               reason=f"{pending.killed}; it did not exit when killed (pid {pending.popen.pid})")
                return True
            return False
        pending.close()
        if pending.killed:
            self.log.event("notify-failed", pending.name, how=pending.how, reason=pending.killed)
        elif code == 0:
            self.log.event("notified", pending.name, how=pending.how)
        else:
            said = pending.stderr.decode("utf-8", "replace").strip().splitlines()
            self.log.event("notify-failed", pending.name, how=pending.how,
                           exit=code if code > 0 else None, signal=-code if code < 0 else None,
                           stderr=_one_line(said[-1], 200) if said else None)
        return True

    def _kill(self, pending: _Pending, why: str, now_mono: float) -> None:
        pending.killed = why
        pending.deadline = now_mono + KILL_WAIT
        with suppress(ProcessLookupError):
            os.killpg(pending.popen.pid, signal.SIGKILL)

    def next_deadline(self) -> float | None:
        """When ``reap`` should run again (None: nothing pending)."""
        return min((p.deadline for p in self.pending), default=None)

    def finish(self, stop=lambda: False) -> None:
        """The driver is ending: start the notices waiting and wait for every notifier, each at most until its
        time is up; once ``stop()`` (a hard stop), those left are killed."""
        while self.busy:
            now_mono = self.clock.monotonic()
            if stop():
                while self.waiting:
                    result, how, _ = self._next_waiting()
                    self.log.event("notify-failed", result.name, how=how, reason="driver stopped")
                for pending in self.pending:
                    if pending.killed is None:
                        self._kill(pending, "driver stopped", now_mono)
            self.reap(now_mono)
            if self.busy:
                self.clock.sleep(0.02)
        self._told_no_sendmail = False

