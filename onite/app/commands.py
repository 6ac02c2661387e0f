"""What ``onite submit``, ``find``, ``list --json``, ``run`` and ``wait`` do once their arguments are parsed.

Shared by the typer command line (onite.cli) and its fast path
(onite.cli.fastcli), so that both paths do exactly the same thing; also the
spool-side work of a few typer-only commands (uniqname, recover, cron, output --follow, restart) that
is more than one call into another module, so that onite.cli keeps to
parsing and printing. Nothing
here imports typer, rich or pydantic: a script that spools jobs in a loop
pays for the work, not for the command-line machinery (docs/performance.md).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime

from onite.core.errors import InvalidInput


def now() -> datetime:
    return datetime.now().astimezone()


def open_spool(spool: str | None):
    """The spool a command works on (``--spool``, else ONITE_SPOOL, else the default); a personal
    default spool is created on first use.

    Raises:
        SpoolError: there is no spool there (or it cannot be entered).
    """
    from onite.spool.locate import locate
    from onite.spool.paths import SpoolDir
    from onite.spool.skeleton import init_spool

    where = locate(spool, os.environ, os.geteuid())
    target = SpoolDir(where.path)
    target.location = where
    if where.personal_default and not target.exists():
        init_spool(where.path, None, system=False)
    target.check()
    return target


def read_stdin(limit: int) -> bytes:
    """The job text. A terminal on stdin is a mistake, not an invitation to type.

    Raises:
        InvalidInput: stdin is a terminal, closed, or larger than ``limit``.
    """
    try:
        fd = sys.stdin.fileno() if sys.stdin is not None else 0
        if os.isatty(fd):
            raise InvalidInput("the job text is read from stdin, which is a terminal",
                               "redirect a script: onite submit NAME < job.sh")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise InvalidInput(f"the job text is larger than max_job_size ({limit} bytes)",
                                   "spool a short script that runs the big one instead")
    except (OSError, ValueError) as err:
        raise InvalidInput(f"cannot read the job text from stdin: {getattr(err, 'strerror', None) or err}",
                           "redirect a script: onite submit NAME < job.sh") from None
    return b"".join(chunks)


def read_job_text(limit: int) -> bytes:
    """``read_stdin`` for one job's text, which may not be empty.

    Raises:
        InvalidInput: as read_stdin, or stdin held nothing.
    """
    body = read_stdin(limit)
    if not body:
        raise InvalidInput("the job text on stdin is empty", "pipe or redirect a script: onite submit NAME < job.sh")
    return body


def command_text(argv: list[str], *, lines: bool = False) -> bytes:
    """The job text of ``onite submit NAME -- COMMAND ARGS…``: the words quoted for /bin/sh, so
    that it runs exactly that argv (spaces, quotes, ``$``, newlines, backslashes, bytes that are not
    UTF-8), and a newline.

    Raises:
        InvalidInput: no word after ``--``, or ``lines`` (whose jobs come from stdin) asked for too.
    """
    import shlex

    if lines:
        raise InvalidInput("--lines reads one job a line from stdin, and cannot take a command after --",
                           "drop --lines, or the command")
    if not argv:
        raise InvalidInput("no command after --", "write it there: onite submit NAME -- COMMAND ARGS…")
    return os.fsencode(shlex.join(argv)) + b"\n"


def submit_stdin(request, spool: str | None):
    """``onite submit NAME``: spool the text on stdin as one job (or the request's own text, a
    command given after ``--``, with stdin left unread); return the spool and the Job as spooled.

    Raises:
        InvalidInput: as read_job_text; a command longer than max_job_size. And as submit().
    """
    from dataclasses import replace

    from onite.exec import identity
    from onite.app.submit import capture, spool_job

    target = open_spool(spool)
    limit = target.config.max_job_size
    if not request.body:
        request = replace(request, body=read_job_text(limit))
    elif len(request.body) > limit:
        raise InvalidInput(f"the command is longer than max_job_size ({limit} bytes)",
                           "spool a short script that runs it instead")
    captured = capture(now())
    return target, spool_job(target, request, captured, identity.current())


def submit_lines(request, spool: str | None):
    """``onite submit NAME --lines``: each non-empty line of stdin is a job, NAME-00001, NAME-00002, …;
    return the spool and the jobs' names.

    The numbers have five digits, more if there are more lines, so that the
    names sort in the order of the lines; a job's text is its line and a
    newline. With ``unique`` NAME first gets a unique suffix. The options of
    ``request`` apply to every job; the whole input is at most max_job_size.

    Raises:
        InvalidInput: no job lines, or NAME too long to be numbered; and whatever ``submit_many`` raises.
    """
    from dataclasses import replace

    from onite.exec import identity
    from onite.spool.scan import name_taken
    from onite.core.names import MAX_NAME, SUFFIX_LEN, check_name, unique_name
    from onite.app.submit import capture, submit_many

    target = open_spool(spool)
    lines = [line for line in read_stdin(target.config.max_job_size).split(b"\n") if line.strip()]
    if not lines:
        raise InvalidInput("no job on stdin: every line is empty", "one command a line: onite submit NAME --lines < jobs.txt")
    width = max(5, len(str(len(lines))))
    room = MAX_NAME - 1 - width
    base = request.name
    check_name(base[:room], what="name base")
    if request.unique:  # the base is cut, as for one --unique job, so that the whole suffix fits
        base = unique_name(base[:room - SUFFIX_LEN], lambda n: name_taken(target, f"{n}-{1:0{width}d}"))
    elif len(base) > room:
        raise InvalidInput(f"the name base {base[:20]!r}… is too long to be numbered",
                           f"use at most {room} characters before -{'0' * width}")
    requests = [replace(request, name=f"{base}-{i:0{width}d}", body=line + b"\n", unique=False)
                for i, line in enumerate(lines, 1)]
    return target, submit_many(target, requests, capture(now()), identity.current())


def submit_command(request, spool: str | None, *, lines: bool, quiet: bool = False) -> str | None:
    """``onite submit`` once parsed, by either path (onite.cli, onite.cli.fastcli): spool the job (or,
    with ``lines``, the jobs), say on stderr what was spooled and when it is expected to run (unless
    ``quiet``), and return the line to print on stdout, if any."""
    from onite.app.submit import confirmation

    when = now()
    if lines:
        target, names = submit_lines(request, spool)
        if not quiet:
            from dataclasses import replace

            from onite.app.submit import build_job, capture

            job = build_job(replace(request, name=names[0], body=b"-", unique=False), capture(when), target.config)
            _say(confirmation(target, names, job, held=request.hold, now=when))
        return f"spooled 1 job: {names[0]}" if len(names) == 1 else \
            f"spooled {len(names)} jobs: {names[0]} to {names[-1]}"
    target, job = submit_stdin(request, spool)
    if not quiet:
        _say(confirmation(target, [job.name], job, held=request.hold, now=when))
    return job.name if request.unique else None


def _say(line: str) -> None:
    """A line for the person at the keyboard, on stderr (stdout is for scripts)."""
    from onite.core.safetext import printable

    try:
        print(printable(line), file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass



def restart_job(spool: str | None, name: str, *, new_name: str | None = None, unique: bool = False,
                hold: bool = False) -> str:
    """``onite restart NAME``: spool the finished job again (onite.app.restart); its final name."""
    from onite.exec import identity
    from onite.app.restart import restart

    target = open_spool(spool)
    return restart(target, name, identity.current(), now(), new_name=new_name, unique=unique, hold=hold)


def find(name: str, spool: str | None) -> bool:
    """``onite find NAME``: is a job of that name queued or running?"""
    from onite.app.control import find as find_job

    target = open_spool(spool)
    return find_job(target, name)


def uniqname(base: str, spool: str | None) -> str:
    """``onite uniqname BASE``: a job name starting with BASE that no job uses (live or kept).

    Raises:
        SpoolError: no spool there. InvalidInput: a bad BASE, or no free name found.
    """
    from onite.spool.scan import name_taken
    from onite.core.names import unique_name

    target = open_spool(spool)
    return unique_name(base, lambda n: name_taken(target, n))


def list_json(spool: str | None, *, include_all: bool = False) -> str:
    """``onite list --json [--all]``: the document (docs/json.md)."""
    from onite.spool.results import damaged_note
    from onite.app.listing import list_json as document

    target = open_spool(spool)
    damaged: list[str] = []
    text = document(target, include_all=include_all, now=now(), damaged=damaged)
    if damaged:
        warn(damaged_note(damaged))
    return text


def warn(line: str) -> None:
    """One line on stderr, beside a command's output (which stays what it is, e.g. valid JSON)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def host_claims(spool: str | None, host: str):
    """``onite recover --host HOST``, before it asks: the spool and the names of the jobs HOST has claimed.

    Raises:
        InvalidInput: a bad host name (checked first). SpoolError: no spool there. Refused: the caller
            is neither root nor the owner of a personal spool (checked before anything in it is looked at).
    """
    from onite.spool.scan import running_entries
    from onite.core.errors import Refused
    from onite.core.names import check_name

    check_name(host, what="host name")
    target = open_spool(spool)
    if os.geteuid() != 0 and not os.access(target.running_root, os.W_OK):  # a personal spool's owner may
        raise Refused("onite recover is for root", "run it with sudo")
    return target, [entry.name for entry in running_entries(target, host)]


def recover_host(target, host: str) -> list[str]:
    """``onite recover --host HOST``, once confirmed: requeue (or fail) HOST's claimed jobs; their names.

    Raises:
        Refused: a driver of that host holds its lock (it is alive). SpoolError: a job cannot be moved.
    """
    from onite.drain.driver import Driver

    return Driver(target, host=host).recover_host()


def cron_lines(spool: str | None) -> str:
    """``onite cron``: root crontab lines that start this onite at the times of the spool's ``schedule``.

    Raises:
        SpoolError: no spool there. InvalidInput: an expression of ``schedule`` is not valid cron.
    """
    from onite.core.schedule import crontab_lines

    target = open_spool(spool)
    return crontab_lines(target.root, target.config.schedule, command_prefix())


def cron_command(spool: str | None, *, install: bool = False, uninstall: bool = False) -> str:
    """``onite cron [--install | --uninstall]``: the lines, or install or remove them (onite.app.crontab); the text to print.

    Raises:
        InvalidInput: both options, or a bad schedule. Refused: the spool is root's and this is not root.
        SpoolError: no spool there, or crontab failed.
    """
    if install and uninstall:
        raise InvalidInput("--install and --uninstall together", "give one of them")
    if not install and not uninstall:
        return cron_lines(spool)
    from onite.app import crontab
    from onite.spool.settings import default_host
    from onite.drain.nextdrain import cron_daemon_running, when_text

    target = open_spool(spool)
    host = default_host(target.config)
    if install:
        done = crontab.install(target, host, command_prefix(), now())
        lines = [f"{'replaced' if done.replaced else 'installed'} the cron entry of {target.root} in your crontab:",
                 *(f"  {entry}" for entry in done.entries)]
        if done.next_drain is not None:
            lines.append(f"next drain {when_text(done.next_drain, now())} by cron on host {host}; "
                         "onite status and onite submit tell every user so")
        if not cron_daemon_running():
            lines.append("warning: no cron daemon runs on this machine: nothing starts these entries until one does")
    else:
        done = crontab.uninstall(target, host)
        lines = [f"removed the cron entry of {target.root} from your crontab" if done.replaced
                 else f"your crontab had no cron entry of {target.root} (onite cron --install writes one)"]
    if done.strays:
        lines.append(f"note: {len(done.strays)} other line(s) of your crontab also start a driver of this spool "
                     "(remove them with crontab -e):")
        lines.extend(f"  {line}" for line in done.strays)
    return "\n".join(lines) + "\n"


def command_prefix() -> str:
    """How this onite was started, as a command a crontab can run (cron has a short PATH, hence
    absolute paths).

    Raises: nothing; an onite not found on PATH is named as it was started.
    """
    import shlex

    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "onite"
    if argv0.endswith("__main__.py") or argv0 == "-m" or argv0 == "-c":
        return f"{shlex.quote(sys.executable)} -m onite"
    import shutil

    found = shutil.which(argv0) if os.sep not in argv0 else os.path.abspath(argv0)
    return shlex.quote(found or argv0)


def driver_target(spool: str | None, until: str | None, host: str | None):
    """``onite run``'s and ``onite daemon``'s common options, checked: the spool and the --until time.

    Raises:
        SpoolError, InvalidInput: no spool there; a bad --until time or host name.
    """
    from onite.core.names import check_name
    from onite.core.timeparse import parse_clock

    target = open_spool(spool)
    until_time = parse_clock(until, what="--until time") if until else None
    if host:
        check_name(host, what="host name")
    return target, until_time


def run_daemon(spool: str | None, *, drain_now: bool = False, slots: int | None = None, until: str | None = None,
               host: str | None = None) -> int:
    """``onite daemon``: wake at the schedule's times and drain, until stopped; the exit code."""
    target, until_time = driver_target(spool, until, host)
    from onite.drain.daemon import Daemon

    return Daemon(target, host=host, slots=slots, until=until_time, drain_now=drain_now, echo=sys.stderr).run()


def wake_daemon(spool: str | None, host: str | None) -> str:
    """``onite daemon --wake``: tell this host's daemon to drain now; the line to print.

    Raises:
        NotFound: no daemon is alive for that host. Refused: this user may not (the spool is root's).
        InvalidInput: a bad host name. SpoolError: the request could not be left.
    """
    from onite.drain import heartbeat as hb
    from onite.spool.settings import default_host
    from onite.drain.wake import request_wake
    from onite.core.errors import NotFound, SpoolError
    from onite.core.names import check_name

    if host:
        check_name(host, what="host name")
    target = open_spool(spool)
    host = host or default_host(target.config)
    beat = hb.read(target.root, host)
    if beat is None or beat.role != "daemon" or not hb.is_alive(beat, now()):
        raise NotFound(f"no onite daemon runs for host {host}",
                       "start one (systemctl start onite, or onite daemon), or drain now: onite run")
    if beat.state == "draining":
        return f"the daemon of host {host} (pid {beat.pid}) is draining already"
    if not request_wake(target, host, beat):
        raise SpoolError(f"cannot leave the request in {target.root / 'locks'}", "check the spool: onite init")
    return f"told the daemon of host {host} (pid {beat.pid}) to drain now; onite status and onite log follow it"


def run_driver(spool: str | None, *, detach: bool = False, slots: int | None = None, until: str | None = None,
               host: str | None = None, verbose: bool = False, quiet: bool = False, scheduled: bool = False) -> int:
    """``onite run``: drain the queue now (or start a driver in the background); the exit code.

    On a terminal it shows a live view of the drain; elsewhere (cron, a pipe,
    systemd) the log lines on stderr; with ``quiet`` nothing (onite.cli.progress).
    """
    target, until_time = driver_target(spool, until, host)
    if detach:
        code, text = detach_driver(target, slots, until, host, scheduled)
        print(text)
        return code
    from onite.drain.driver import Driver
    from onite.cli.progress import LINES, LIVE, choose_mode

    mode = choose_mode(quiet=quiet, verbose=verbose, is_terminal=_is_terminal(sys.stderr),
                       dumb=os.environ.get("TERM", "") in ("dumb", "unknown"))
    if mode != LIVE:
        driver = Driver(target, host=host, slots=slots, until=until_time, echo=sys.stderr if mode == LINES else None)
        try:
            return driver.run(scheduled=scheduled)
        finally:
            _ignore_late_signals()
    from rich.console import Console

    from onite.cli.progress import DrainView

    view = DrainView(Console(stderr=True, highlight=False))
    driver = Driver(target, host=host, slots=slots, until=until_time, listener=view.listener, tick=view.tick)
    with view:
        try:
            return driver.run(scheduled=scheduled)
        finally:
            _ignore_late_signals()


def _ignore_late_signals() -> None:
    """The driver has let go of its lock: a status or reload request that comes now (its pid was
    read before) finds a process about to exit, which must not die of it."""
    import signal

    for sig in (signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)


def _is_terminal(stream) -> bool:
    try:
        return stream is not None and os.isatty(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False


DETACH_LOOK = 1.0  # seconds `run --detach` watches its background driver before it says what that did


def detach_driver(target, slots, until, host, scheduled: bool = False) -> tuple[int, str]:
    """Start ``onite run`` in the background, immune to hang-up, and watch it for DETACH_LOOK seconds:
    return the exit code and a line saying what it did (draining; busy or nothing to do, in the log's
    words; refused, with its error and exit code).
    """
    import select
    import subprocess
    import time

    from onite.drain import heartbeat as hb
    from onite.spool.settings import default_host

    argv = [sys.executable, "-m", "onite", "run", "--spool", str(target.root)]
    argv += ["--slots", str(slots)] if slots else []
    argv += ["--until", until] if until else []
    argv += ["--host", host] if host else []
    argv += ["--scheduled"] if scheduled else []
    argv += ["--quiet"]  # it logs to onite.log; its stderr says only why it could not start
    env = dict(os.environ)
    by = hb.started_by("run")
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
            if beat is not None and beat.pid == child.pid and beat.state == "draining":
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


def _what_it_did(target, pid: int) -> str:
    """What the driver ``pid`` that ended logged: why it did nothing, or how its drain went."""
    from onite.spool.log import parse_line, tail
    from onite.cli.progress import IDLE_EVENTS, idle_reason
    from onite.core.safetext import printable

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


def wait_command(names: list[str], timeout: str | None, spool: str | None, *, as_json: bool = False) -> int:
    """``onite wait`` once parsed, by either path (onite.cli, onite.cli.fastcli): block, print how the jobs
    (or, with no names, the drains running now) ended, and return the exit code (onite.app.wait)."""
    from onite.app import wait as waiting
    from onite.core.timeparse import parse_duration

    limit = parse_duration(timeout, what="--timeout").total_seconds() if timeout is not None else None
    target = open_spool(spool)

    def announce(text: str) -> None:  # on stderr, so that stdout holds only the outcome
        print(f"onite: {text}…", file=sys.stderr, flush=True)

    if names:
        waited = waiting.wait_jobs(target, names, timeout=limit, announce=announce)
    else:
        waited = waiting.wait_drains(target, timeout=limit, announce=announce)
    print(waiting.wait_json(target, waited) if as_json else "\n".join(waited.lines() if names else [waited.summary()]))
    return waited.exit_code


def follow_output(target, name: str, *, stderr: bool = False) -> int:
    """``onite output NAME --follow``: copy the job's output to stdout as it grows; once it has
    finished, say how on stderr; the exit code (``onite wait``'s: 0 done, 5 not).

    Raises:
        as onite.app.follow.follow.
    """
    from onite.app.follow import follow
    from onite.app.wait import exit_status, job_line

    def announce(text: str) -> None:  # on stderr: stdout is the job's output, byte for byte
        print(f"onite: {text}…", file=sys.stderr, flush=True)

    from onite.core.safetext import printable

    final = follow(target, name, os.geteuid(), sys.stdout.buffer, stderr=stderr, announce=announce)
    print(f"onite: {printable(job_line(final))}", file=sys.stderr, flush=True)  # a reason may quote a path
    return exit_status([final])
