"""Spooling jobs: capture the caller's world, apply the spool's policy, write the files.

Invariant: nothing is written unless every check passes (options, capacity, cutoff, check_lock, urgent
rights, names, dependencies); each job file is written whole or not at all (onite.spool.files).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime

from onite.spool.files import create_batch, create_file, remove_file
from onite.spool.holds import add_hold, remove_holds
from onite.spool.paths import SpoolDir
from onite.spool.accounts import user_name
from onite.spool.scan import find_queued, listing, name_taken, read_markers, stat_entry
from onite.core.config import Config
from onite.core.errors import InvalidInput, OniteError, Refused
from onite.core.identity import Identity
from onite.core.job import Job, shebang_problem
from onite.core.jobfile import encode, env_text
from onite.core.request import Captured, SubmitRequest, build_job
from onite.app.common import label
from onite.core.names import check_base, check_name, job_key, split_key, unique_name
from onite.core.policy import check_urgent, cutoff_state


CYCLE_LOOKS = 200  # queued jobs read, at most, to find whether a job would wait for itself
COERCED = (b"C.UTF-8", b"C.utf8", b"UTF-8")  # what Python's start-up sets LC_CTYPE to in a C locale (PEP 538)


def capture(now: datetime, *, env: dict[bytes, bytes] | None = None, cwd: bytes | None = None) -> Captured:
    """The calling process's environment (bytes, exact), cwd, umask and host; ``env`` and ``cwd``, where given,
    instead of its own. Raises InvalidInput: its cwd is gone, and no ``cwd`` is given."""
    mask = os.umask(0o077)
    os.umask(mask)
    if cwd is None:
        try:
            cwd = os.getcwdb()
        except FileNotFoundError:
            raise InvalidInput("your current directory no longer exists",
                               "cd to an existing directory and submit again") from None
    return Captured(env=own_environment() if env is None else env, cwd=cwd, umask=mask, host=os.uname().nodename,
                    now=now)


def own_environment() -> dict[bytes, bytes]:
    """This process's environment as its user set it: where their locale is C or POSIX, Python's start-up
    sets LC_CTYPE to a UTF-8 one (PEP 538), which their shell and so their job would not have; the LC_CTYPE
    the process started with (/proc/self/environ), or none, is kept instead."""
    env = dict(os.environb)
    if env.get(b"LC_CTYPE") not in COERCED:
        return env
    try:
        with open("/proc/self/environ", "rb") as file:
            start = dict(item.partition(b"=")[::2] for item in file.read().split(b"\0") if item)
    except OSError:
        return env
    if start.get(b"LC_ALL") or start.get(b"LC_CTYPE") == env[b"LC_CTYPE"]:  # Python left it as it was
        return env
    if b"LC_CTYPE" in start:
        env[b"LC_CTYPE"] = start[b"LC_CTYPE"]
    else:
        del env[b"LC_CTYPE"]
    return env


def spool_job(spool: SpoolDir, request: SubmitRequest, captured: Captured, caller: Identity) -> Job:
    """Check the spool's policy and spool the job; return it as spooled (its final name, priority, times).
    Raises InvalidInput (name, option, dependency), Refused (policy, name taken), SpoolError, SpoolIOError."""
    config = spool.config
    (check_base if request.unique else check_name)(request.name)
    job = build_job(request, captured, config, caller.name)
    check_capacity(spool, job)
    check_mail(request.notify, config)
    spool.check()
    check_policy(spool, request, captured.now, caller)
    check_after(spool, [job], unique=request.unique)
    if request.unique:
        job = job._replace(name=job_key(caller.name, uniqname(spool, request.name, caller.name)))
    else:
        refuse_taken(spool, [job.name], caller.uid)
    write_job(spool, job, caller, hold=request.hold)
    return job


def write_job(spool: SpoolDir, job: Job, caller: Identity, *, hold: bool,
              owner: tuple[int, int] | None = None) -> None:
    """Write the job's file (``owner``'s, when root spools for someone else), held if asked; nothing if it fails."""
    markers = prepare_holds(spool, [job.name], caller, [job.name] if hold else [], owner=owner)
    try:
        create_file(spool.folder_for(job.priority, job.urgent), job.name, encode(job), owner=owner)
    except OniteError as err:  # nothing was spooled (on an interrupt it may have been: a marker too many is safe)
        undo_holds(markers)
        if isinstance(err, Refused):  # taken since the check (a concurrent submit): said as a taken name
            refuse_taken(spool, [job.name], caller.uid if owner is None else owner[0])
        raise


def check_after(spool: SpoolDir, jobs: list[Job], *, unique: bool = False) -> None:
    """Each of ``jobs`` (in order, keyed) waits only for an earlier one or a spooled job, not itself, even through
    queued jobs (else InvalidInput). ``unique``: each name is a base, to be made unique."""
    if not any(job.after for job in jobs):
        return
    from onite.core.queue import DepState  # not at import, nor for jobs without --after: a submit loads no queue order
    from onite.spool.deps import dependency_state

    position = {} if unique else {job.name: i for i, job in enumerate(jobs)}
    known: set[str] = set()
    after_of = None
    for i, job in enumerate(jobs):
        for dep in job.after:
            if dep == job.name and not unique:
                raise InvalidInput(f"job {label(dep)!r} cannot wait for itself", "drop that --after")
            if dep in position:
                if position[dep] > i:
                    raise InvalidInput(f"job {label(job.name)!r} waits for {label(dep)!r}, which comes "
                                       "later in the batch", "put the jobs in the order they depend on each other")
            elif dep not in known:
                user, name = split_key(dep)
                if dependency_state(spool, dep) is DepState.MISSING:
                    of = "" if user == split_key(job.name)[0] else f" of {user}'s"
                    raise InvalidInput(f"no job {name!r}{of} is queued, running or finished",
                                       "check the name with onite list --all")
                known.add(dep)
        # a name made unique is new, as is one that left no trace: no job waits for it (an --after needs one)
        if job.after and not unique and dependency_state(spool, job.name) is not DepState.MISSING:
            from onite.core.queue import dependency_cycle

            after_of = after_of or _waits_for(spool)
            cycle = dependency_cycle(job.name, job.after, after_of)  # A after B, B after A: neither would ever run
            if cycle is not None:
                raise InvalidInput(f"job {label(job.name)!r} would wait for itself: "
                                   f"{' → '.join(map(label, cycle))}, and none of them would ever run",
                                   "drop that --after, or first change what the others wait for "
                                   "(onite edit NAME --after …)")


def _waits_for(spool: SpoolDir):
    """``key → what queued job key waits for``, as far as the caller can read it (their own; root: all), as edited
    (onite.spool.edits); each read once, CYCLE_LOOKS at most, for the whole batch."""
    import functools

    from onite.spool.edits import read_edited

    limit, edits, looks = spool.config.max_job_size, None, 0

    @functools.cache
    def after_of(key: str) -> tuple[str, ...]:
        nonlocal edits, looks
        looks += 1
        if looks > CYCLE_LOOKS:  # a chain another user made as long as they like costs a submit no more
            return ()
        for entry in find_queued(spool, key):
            if edits is None:
                edits = read_markers(spool.edit_dir)
            job = read_edited(entry.path, key, entry.uid, edits, limit)  # another user's is private: not followed
            if job is not None:
                return job.after
        return ()

    return after_of


def refuse_taken(spool: SpoolDir, keys: Sequence[str], uid: int) -> None:
    """Refuse (Refused) a key that is queued or running, or a file at it that is not ``uid``'s (a forgery: the
    driver sets it aside; until then the key cannot be used)."""
    found = _entries_at(spool, set(keys))
    for entry in sorted(found, key=lambda e: e.name):
        name = split_key(entry.name)[1]
        if entry.uid != uid:
            raise Refused(f"a file at job {name!r}'s place is {user_name(entry.uid)}'s, not yours: a forgery, "
                          "which the next driver sets aside", "pick another name, or ask the admin to remove it")
        where = f"running now (on {entry.host}, {user_name(entry.uid)})" if entry.host else \
            f"already queued ({'urgent' if entry.rank == 0 else f'P{entry.rank}'}, {user_name(entry.uid)})"
        raise Refused(f"a job named {name!r} is {where}", "pick another name, or use --unique")


def _entries_at(spool: SpoolDir, keys: set[str]) -> list:
    """What lies at ``keys`` in the queue folders and running/, forgeries too: a few keys are looked up one by one,
    a big batch's in one listing of each folder."""
    folders = [(folder, {"rank": rank}) for rank, folder in spool.queue_folders()] + \
        [(spool.running_dir(host), {"host": host}) for host in spool.hosts()]
    found = []
    for folder, where in folders:
        names = keys if len(keys) < 64 else [entry.name for entry in listing(folder) if entry.name in keys]
        found += [e for name in names if (e := stat_entry(folder, name, **where))]
    return found


def prepare_holds(spool: SpoolDir, names: list[str], caller: Identity, held: list[str], *,
                  owner: tuple[int, int] | None = None) -> list:
    """Before jobs ``names`` are spooled: remove their names' stale hold markers (none is queued: one would
    hold the new job), and add one for each of ``held`` (``owner``'s), first, so that no driver sees it unheld."""
    holds = read_markers(spool.hold_dir)
    stale = [n for n in names if n in holds]
    if stale:
        remove_holds(spool, stale, None if caller.uid == 0 else {caller.uid})
    markers = []
    try:
        for name in held:
            markers.append(add_hold(spool, name, owner))
    except OniteError:
        undo_holds(markers)
        raise
    return markers


def undo_holds(markers: list) -> None:
    """Remove markers made for jobs that were not spooled after all."""
    for marker in markers:
        remove_file(marker)


def submit_many(spool: SpoolDir, requests: Sequence[SubmitRequest], captured: Captured, caller: Identity) -> list[str]:
    """Spool several jobs, all checked before any is written, in order (their order within a priority).
    A name taken while writing leaves the jobs before it spooled: the error says how many."""
    if not requests:
        return []
    config = spool.config
    names: dict[str, None] = {}
    jobs: list[Job] = []
    templates: dict[SubmitRequest, Job] = {}  # jobs that differ only in name and text share their parsed options
    for request in requests:
        if request.unique:
            raise InvalidInput("a batch of jobs cannot use --unique", "name the jobs")
        check_name(request.name)
        if request.name in names:
            raise InvalidInput(f"job name {request.name!r} appears twice in the batch", "give each job its own name")
        names[request.name] = None
        key = request._replace(name="", body=b"")
        if not request.body:
            raise InvalidInput(f"the text of job {request.name!r} is empty", "give every job a command")
        if key not in templates:
            templates[key] = build_job(request, captured, config, caller.name)
        problem = shebang_problem(request.body)
        if problem:
            raise InvalidInput(f"the text of job {request.name!r} can never run: {problem}",
                               "fix its first line: #!/path/to/interpreter [one argument]")
        jobs.append(templates[key]._replace(name=job_key(caller.name, request.name), body=request.body))
    for job in templates.values():
        check_capacity(spool, job)
    check_mail(requests[0].notify, config)  # --notify is the same for every job of a batch
    spool.check()
    for request in {r.urgent: r for r in requests}.values():
        check_policy(spool, request, captured.now, caller)
    check_after(spool, jobs)
    names = [job.name for job in jobs]
    refuse_taken(spool, names, caller.uid)
    env_lines = env_text(captured.env)
    markers = prepare_holds(spool, names, caller, [job.name for job, r in zip(jobs, requests) if r.hold])
    files = ((spool.folder_for(job.priority, job.urgent), job.name, encode(job, env_lines=env_lines)) for job in jobs)
    try:
        create_batch(files)
    except OniteError as err:
        created = getattr(err, "created", 0)
        unspooled = set(names[created:])
        undo_holds([m for m in markers if m.name.partition("@")[0] in unspooled])
        if isinstance(err, Refused):  # taken since the check (a concurrent submit): said as a taken name
            try:
                refuse_taken(spool, names[created:created + 1], caller.uid)
            except Refused as taken:
                err = taken
        if created:
            err.what += (f" (the first {created} of the {len(jobs)} jobs were spooled: {requests[0].name} to "
                         f"{requests[created - 1].name})")
        else:
            err.what += f" (none of the {len(jobs)} jobs was spooled)"
        raise err from None
    return [r.name for r in requests]


def check_policy(spool: SpoolDir, request: SubmitRequest, now: datetime, caller: Identity) -> None:
    """Refuse (Refused) urgent without the right, a submit after the cutoff, or one while a driver runs
    under check_lock."""
    config = spool.config
    if request.urgent:
        check_urgent(caller, config.admins, "spool urgent jobs")
    state = cutoff_state(now, config.cutoff, config.until)
    if state.closed:
        reopens = state.reopens.strftime("%H:%M on %Y-%m-%d") if state.reopens else "later"
        raise Refused(f"spooling closed at the cutoff ({config.cutoff:%H:%M})",
                      f"submissions open again at {reopens}")
    if config.check_lock:
        from onite.drain.heartbeat import draining_hosts

        hosts = draining_hosts(spool, now)
        if hosts:
            raise Refused(f"a driver is draining the spool (on {', '.join(hosts)}) and check_lock is on",
                          "submit again when it has finished (see onite status)")


def check_capacity(spool: SpoolDir, job: Job) -> None:
    """Refuse (Refused) now a job that no local host it may run on could ever run (its pin, else any host of
    the spool: onite.core.resources.never_fits); Slurm says its own."""
    from onite.core.resources import never_fits, request_of

    need = request_of(job.mem, job.cpus)  # the spool's defaults are in the job already (onite.core.request)
    if spool.config.executor != "local" or not (need.mem or need.cpus):
        return
    from onite.core.clock import SYSTEM
    from onite.drain.heartbeat import spool_hosts

    hosts = spool_hosts(spool, SYSTEM.now())
    problem = never_fits(spool.config, need, {job.pin: hosts.get(job.pin, (None, None))} if job.pin else hosts,
                         source=str(spool.config_path))
    if problem:
        raise Refused(f"job {label(job.name)!r} can never run: {problem}",
                      "ask for less (--mem, --cpus), or ask the admin about the host's capacity")


def check_mail(notify: str | None, config: Config) -> None:
    """``--notify mail`` where mail cannot go out (no sendmail) is an InvalidInput now, not a log line the
    next morning."""
    if notify != "mail":
        return
    from onite.exec.notify import find_sendmail

    sendmail, missing = find_sendmail(config)
    if sendmail is None:
        raise InvalidInput(f"--notify mail: {missing}", "ask the admin for a mail transport, or use --notify none")


def uniqname(spool: SpoolDir, base: str, user: str) -> str:
    """``onite uniqname BASE``: a job name starting with BASE that no job of ``user``'s uses (live or kept)."""
    return unique_name(base, lambda n: name_taken(spool, job_key(user, n)))
