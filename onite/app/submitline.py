"""``onite submit`` as typed: the job text on stdin, one job a line (``--lines``), or a command after ``--``;
and the line saying what was spooled and when it is expected to run (``confirmation``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime

from onite.app.common import label, me, open_spool, read_job_text, read_stdin
from onite.app.submit import capture, spool_job, submit_many
from onite.core.errors import InvalidInput, SpoolIOError
from onite.core.job import Job
from onite.core.names import MAX_NAME, SUFFIX_LEN, check_name, job_key, split_key, unique_name
from onite.core.request import SubmitRequest, build_job
from onite.core.safetext import quoted
from onite.exec import identity
from onite.spool.paths import SpoolDir
from onite.spool.scan import name_taken
from onite.spool.settings import default_host


def command_text(argv: list[str], *, lines: bool = False) -> bytes:
    """The job text of ``onite submit NAME -- COMMAND ARGS…``: the argv quoted for /bin/sh, and a newline."""
    import shlex

    if lines:
        raise InvalidInput("--lines reads one job a line from stdin, and cannot take a command after --",
                           "drop --lines, or the command")
    if not argv:
        raise InvalidInput("no command after --", "write it there: onite submit NAME -- COMMAND ARGS…")
    return os.fsencode(shlex.join(argv)) + b"\n"


def missing_command(argv: list[str]) -> str | None:
    """The warning for a command after ``--`` that is found nowhere now (in PATH, or a file that may be run, from
    here): the job would fail at night unless it appears by then. None: it is there, or /bin/sh's own (asked of
    /bin/sh, which runs the job, only for a word found in no PATH)."""
    import shutil

    command = argv[0]
    if shutil.which(command) is not None:
        return None
    if "/" in command:
        return f"warning: {quoted(command, 200)} is not a file you may run now: the job fails at night unless it is by then"
    if _shell_has(command):
        return None
    return f"warning: no command {quoted(command, 200)} in PATH now: the job fails at night unless it is there by then"


def _shell_has(word: str) -> bool:
    """Does /bin/sh, which runs the job, know ``word`` as its own (``command -v``)? True if it cannot be asked."""
    import subprocess

    try:
        return subprocess.run(["/bin/sh", "-c", 'command -v -- "$1"', "sh", word], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return True


def submit_command(request: SubmitRequest, spool: str | None, *, lines: bool, now: datetime,
                   confirm: bool = True) -> tuple[str | None, str | None]:
    """``onite submit`` once parsed: spool stdin (or a command after ``--``) as one job, or with ``lines`` a job a
    line; the line for stdout, and the ``confirmation``."""
    target = open_spool(spool)
    request.limits(target.config, now, me())  # a bad option is told before stdin is read
    if lines:
        names = submit_lines(request, target, now)
        said = None
        if confirm:
            job = build_job(request._replace(name=names[0], body=b"-", unique=False), capture(now), target.config, me())
            said = confirmation(target, names, job, held=request.hold, now=now)
        return "\n".join(names), said  # a name a line, for scripts; what was spooled is said on stderr
    limit = target.config.max_job_size
    if not request.body:
        request = request._replace(body=read_job_text(limit))
    elif len(request.body) > limit:
        raise InvalidInput(f"the command is longer than max_job_size ({limit} bytes)",
                           "spool a short script that runs it instead")
    job = spool_job(target, request, capture(now), identity.current())
    said = confirmation(target, [label(job.name)], job, held=request.hold, now=now) if confirm else None
    return (label(job.name) if request.unique else None), said


def submit_lines(request: SubmitRequest, target: SpoolDir, now: datetime) -> list[str]:
    """``onite submit NAME --lines``: a job a line, NAME-00001, NAME-00002, …; their names."""
    lines = [line for line in read_stdin(target.config.max_job_size).split(b"\n") if line.strip()]
    if not lines:
        raise InvalidInput("no job on stdin: every line is empty", "one command a line: onite submit NAME --lines < jobs.txt")
    width = max(5, len(str(len(lines))))
    room = MAX_NAME - 1 - width
    base = request.name
    check_name(base[:room], what="name base")
    caller = identity.current()
    if request.unique:  # the base is cut, as for one --unique job, so that the whole suffix fits
        base = unique_name(base[:room - SUFFIX_LEN],
                           lambda n: name_taken(target, job_key(caller.name, f"{n}-{1:0{width}d}")))
    elif len(base) > room:
        raise InvalidInput(f"the name base {base[:20]!r}… is too long to be numbered",
                           f"use at most {room} characters before -{'0' * width}")
    requests = [request._replace(name=f"{base}-{i:0{width}d}", body=line + b"\n", unique=False)
                for i, line in enumerate(lines, 1)]
    return submit_many(target, requests, capture(now), caller)


def ended_badly(spool: SpoolDir, job: Job) -> str:
    """``, which failed: it will fail too, unless … (onite restart build)``: said now, not found in the morning."""
    from onite.core.queue import DepState
    from onite.spool.deps import dependency_state

    for dep in job.after:
        try:
            state = dependency_state(spool, dep)
        except SpoolIOError:
            continue  # cannot tell: the drain does
        if state in (DepState.FAILED, DepState.CANCELLED):
            name = label(dep)
            how = f" (onite restart {name})" if split_key(dep)[0] == split_key(job.name)[0] else ""  # theirs to restart
            return (f", which {'failed' if state is DepState.FAILED else 'was cancelled'}: it will fail too, "
                    f"unless {name} runs again first{how}")
    return ""


def confirmation(spool: SpoolDir, names: Sequence[str], job: Job, *, held: bool, now: datetime) -> str:
    """``spooled nightly (P3) in /var/spool/onite; next drain 20:00 by cron on host vm``: what was spooled
    where, and when it is expected to run (onite.drain.nextdrain, which promises no drain nothing starts)."""
    from onite.drain.heartbeat import BeatState
    from onite.drain.nextdrain import LABEL, no_drain_text, plan, starter_text, when_text

    what = names[0] if len(names) == 1 else f"{len(names)} jobs, {names[0]} to {names[-1]}"
    head = f"spooled {what} ({'urgent' if job.urgent else f'P{job.priority}'}) in {spool.root}"
    if held:
        it = names[0] if len(names) == 1 else f"{names[0]}…"
        return f"{head}; held: it will not run until onite release {it}"
    later = job.not_before is not None and job.not_before > now
    parts = []
    if job.after:
        parts.append(f"waits for {', '.join(map(label, job.after))}" + ended_badly(spool, job))
    if later:
        parts.append(f"not before {when_text(job.not_before.astimezone(), now)}")
    if job.pin:
        parts.append(f"only on host {job.pin}")
    drain = plan(spool, now)
    fits, draining = drain.for_job(spool, job, now)
    # a daemon's drain of timed jobs starts no untimed job: that one waits for the next drain
    draining = [d for d in draining if d.state != BeatState.TIMED or job.not_before is not None]
    daemons = [s for s in fits if s.by == "daemon"]
    if later and daemons:  # the daemon draining now is not what starts it: its wake at that time is
        parts.append(f"{LABEL['daemon']} on host {daemons[0].host} starts it then")
    elif draining:
        parts.append(f"a drain is running now on host {draining[0].host}"
                     + (" (it starts it then, if it is still draining)" if later else ""))
    elif job.not_before is not None and daemons and not job.after:  # due (--at now): the daemon's wake starts it at once
        parts.append(f"{LABEL['daemon']} on host {daemons[0].host} starts it now")
    elif fits:
        parts.append(starter_text(fits[0], now))
    elif job.pin and job.pin != default_host(spool.config):  # this machine's fix would schedule drains that skip it
        from onite.drain.heartbeat import spool_hosts

        hosts = spool_hosts(spool, now)
        odd = "" if job.pin in hosts else (f" (none of the spool's hosts {', '.join(hosts)} is {job.pin}: "
                                           "is it right?)")
        parts.append(f"no drain is scheduled on host {job.pin}{odd}, so nothing will run it — schedule drains there "
                     f"(onite cron --install on host {job.pin}), or spool it without --host")
    elif drain.starters and not job.pin:  # drains are scheduled, on hosts too small for it
        parts.append("no drain is scheduled on a host that can give it what it asks for, so nothing will run it — "
                     "schedule drains on one that can (onite cron --install there; onite status shows the hosts)")
    else:
        problems = f" ({'; '.join(drain.problems)})" if drain.problems else ""
        parts.append(no_drain_text(drain, for_job=True).replace(" — ", f"{problems} — ", 1))
    return "; ".join([head, *parts])
