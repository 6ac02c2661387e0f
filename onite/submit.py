"""Spooling a job: capture the caller's world, apply the spool's policy, write the file.

``build_job`` is pure: it turns a request and the captured environment, cwd,
umask and clock into a Job. ``submit`` checks the policy (cutoff, a running
driver with check_lock, urgent rights, name, dependencies) and writes the job
file atomically. Nothing is written unless every check passes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime

from onite import spool as sp
from onite.errors import InvalidInput, Refused
from onite.identity import Identity
from onite.jobfile import Job, encode
from onite.names import check_base, check_name, unique_name
from onite.policy import cutoff_state, is_admin


@dataclass(frozen=True, kw_only=True)
class SubmitRequest:
    """What the user asked for, as typed (times and durations not yet parsed)."""

    name: str
    body: bytes
    priority: int | None = None
    urgent: bool = False
    after: tuple[str, ...] = ()
    at: str | None = None
    timeout: str | None = None
    retries: int = 0
    host: str | None = None
    hold: bool = False
    unique: bool = False


@dataclass(frozen=True, kw_only=True)
class Captured:
    """The submitter's world, captured at submit time."""

    env: dict[bytes, bytes]
    cwd: bytes
    umask: int
    host: str
    now: datetime
    extra: tuple[tuple[str, str], ...] = field(default=())


def capture(now: datetime) -> Captured:
    """The calling process's environment (bytes, exact), cwd, umask and host."""
    mask = os.umask(0o077)
    os.umask(mask)
    try:
        cwd = os.getcwdb()
    except FileNotFoundError:
        raise InvalidInput("your current directory no longer exists", "cd to an existing directory and submit again") from None
    return Captured(env=dict(os.environb), cwd=cwd, umask=mask, host=os.uname().nodename, now=now)


def build_job(request: SubmitRequest, captured: Captured, *, default_priority: int, priorities: int,
              default_timeout=None, name: str | None = None) -> Job:
    """The Job a request describes (pure).

    Raises:
        InvalidInput: a bad priority, time, duration, retry count, host or dependency name.
    """
    from onite.timeparse import parse_duration, parse_when

    priority = default_priority if request.priority is None else request.priority
    if not 1 <= priority <= priorities:
        raise InvalidInput(f"invalid priority {priority}", f"use 1 (first) to {priorities} (last)")
    if request.retries < 0 or request.retries > 100:
        raise InvalidInput(f"invalid retry count {request.retries}", "use 0 to 100")
    for dep in request.after:
        check_name(dep, what="dependency name")
    if request.host is not None:
        check_name(request.host, what="host name")
    if not request.body:
        raise InvalidInput("the job text on stdin is empty", "pipe or redirect a script: onite submit NAME < job.sh")
    return Job(
        name=name or request.name,
        priority=priority,
        submitted=captured.now,
        host=captured.host,
        umask=captured.umask,
        cwd=captured.cwd,
        env=captured.env,
        body=request.body,
        timeout=parse_duration(request.timeout, what="timeout") if request.timeout else default_timeout,
        retries=request.retries,
        after=tuple(dict.fromkeys(request.after)),
        not_before=parse_when(request.at, captured.now) if request.at else None,
        urgent=request.urgent,
        pin=request.host,
        extra=captured.extra,
    )


def submit(spool: sp.Spool, request: SubmitRequest, captured: Captured, caller: Identity) -> str:
    """Check the spool's policy and spool the job; return its final name.

    Raises:
        InvalidInput: bad name, priority, option, or an unknown dependency (exit 2).
        Refused: cutoff passed, a driver runs with check_lock, urgent without
            the right, or the name is already queued or running (exit 3).
        SpoolError, SpoolIOError: the spool is missing, or the write failed (exit 4).
    """
    config = spool.config
    (check_base if request.unique else check_name)(request.name)
    job = build_job(request, captured, default_priority=config.default_priority,
                    priorities=config.priorities, default_timeout=config.timeout)
    spool.check()
    check_policy(spool, request, captured.now, caller)
    for dep in job.after:
        if dep == request.name and not request.unique:
            raise InvalidInput(f"job {dep!r} cannot wait for itself", "drop that --after")
        if not dependency_known(spool, dep):
            raise InvalidInput(f"no job {dep!r} is queued, running or finished", "check the name with onite list --all")
    if request.unique:
        name = unique_name(request.name, lambda n: sp.name_taken(spool, n))
    else:
        name = request.name
        refuse_duplicate(spool, name)
    if name != job.name:
        from dataclasses import replace

        job = replace(job, name=name)
    folder = spool.folder_for(job.priority, job.urgent)
    sp.create_file(folder, name, encode(job), mode=0o400 if request.hold else 0o600)
    return name


def check_policy(spool: sp.Spool, request: SubmitRequest, now: datetime, caller: Identity) -> None:
    """The spool's rules for who may spool what, when.

    Raises:
        Refused: urgent without the right, cutoff passed, or a driver runs under check_lock.
    """
    config = spool.config
    if request.urgent and not is_admin(caller.uid, caller.name, caller.group_names(), config.admins):
        raise Refused("only root and the admins named in onite.toml may spool urgent jobs",
                      "drop --urgent, or ask an admin")
    state = cutoff_state(now, config.cutoff, config.until)
    if state.closed:
        reopens = state.reopens.strftime("%H:%M on %Y-%m-%d") if state.reopens else "later"
        raise Refused(f"spooling closed at the cutoff ({config.cutoff:%H:%M})",
                      f"submissions open again at {reopens}")
    if config.check_lock:
        from onite.locks import active_hosts

        hosts = active_hosts(spool.root)
        if hosts:
            raise Refused(f"a driver is draining the spool (on {', '.join(hosts)}) and check_lock is on",
                          "submit again when it has finished (see onite status)")


def refuse_duplicate(spool: sp.Spool, name: str) -> None:
    """Raises:
        Refused: a job of this name is queued or running.
    """
    for entry in sp.find_queued(spool, name):
        where = "urgent" if entry.rank == 0 else f"P{entry.rank}"
        raise Refused(f"a job named {name!r} is already queued ({where}, {sp.user_name(entry.uid)})",
                      "pick another name, or use --unique")
    for entry in sp.find_running(spool, name):
        raise Refused(f"a job named {name!r} is running now (on {entry.host}, {sp.user_name(entry.uid)})",
                      "pick another name, or use --unique")


def dependency_known(spool: sp.Spool, name: str) -> bool:
    """Is ``name`` queued, running, cancelled-but-not-filed, or finished (a kept result)?"""
    if sp.is_live(spool, name) or spool.result_path(name).exists():
        return True
    return any(e.name == name for e in sp.cancelled_pending(spool))
