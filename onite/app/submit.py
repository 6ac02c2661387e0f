"""Spooling jobs: capture the caller's world, apply the spool's policy, write the files; ``onite submit`` as typed
(stdin, ``--lines``, ``--``) and its confirmation line.

Nothing is written unless every check passes; each job file is written whole or not at all."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from onite.spool.files import create_batch, create_file, remove_file
from onite.spool.holds import add_hold, remove_holds
from onite.spool.paths import SpoolDir
from onite.spool.accounts import user_name
from onite.spool.scan import find_queued, key_uid, listing, name_taken, namesake_error, read_markers, stat_entry
from onite.spool.settings import default_host, spooling
from onite.core.config import Config
from onite.core.errors import InvalidInput, OniteError, Refused, SpoolIOError
from onite.core.identity import Identity
from onite.core.job import Job
from onite.core.jobfile import encode
from onite.core.request import Captured, SubmitRequest, build_job, check_text
from onite.core.resources import never_fits, request_of
from onite.core.safetext import quoted
from onite.app.common import label, me, open_spool, read_job_text, read_stdin
from onite.core.names import MAX_NAME, SUFFIX_LEN, check_base, check_name, job_key, split_key, unique_name
from onite.core.policy import check_urgent
from onite.exec import identity


CYCLE_LOOKS = 200  # queued jobs read, at most, to find whether a job would wait for itself
COERCED = (b"C.UTF-8", b"C.utf8", b"UTF-8")  # what Python's start-up sets LC_CTYPE to in a C locale (PEP 538)


def capture(now: datetime, *, env: dict[bytes, bytes] | None = None, cwd: bytes | None = None) -> Captured:
    """The calling process's environment (bytes), cwd, umask and host; ``env`` and ``cwd``, where given, instead
    of its own. InvalidInput: its cwd is gone."""
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
    """This process's environment as its user set it: the LC_CTYPE it started with, not the UTF-8 one Python's
    start-up sets in a C or POSIX locale (PEP 538), which their job would not have."""
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
    job = checked_jobs(spool, request, [(request.name, request.body)], captured, caller)[0]
    write_job(spool, job, caller, hold=request.hold)
    return job


def checked_jobs(spool: SpoolDir, request: SubmitRequest, texts: Sequence[tuple[str, bytes]], captured: Captured,
                 caller: Identity) -> list[Job]:
    """A job of ``request``'s options for each ``(name, text)``, all checked against the spool and its policy;
    with ``unique``, the one job's name made unique. Raises InvalidInput, Refused."""
    names: set[str] = set()
    jobs: list[Job] = []
    job = None
    for name, body in texts:
        (check_base if request.unique else check_name)(name)
        if name in names:
            raise InvalidInput(f"job name {name!r} appears twice in the batch", "give each job its own name")
        names.add(name)
        job = job or build_job(request._replace(name=name, body=body), captured, spool.config, caller.name)
        check_text(name, body)  # the jobs share the first one's parsed options, not its text
        jobs.append(job._replace(name=job_key(caller.name, name), body=body))
    check_capacity(spool, job)
    check_mail(request.notify, spool.config)
    spool.check()
    check_policy(spool, request.urgent, captured.now, caller)
    if request.unique:
        jobs = [job._replace(name=job_key(caller.name, uniqname(spool, request.name, caller.name)))]
    check_after(spool, jobs)
    if not request.unique:
        refuse_taken(spool, [job.name for job in jobs], caller.uid)
    return jobs


NAMESAKE_TRIES = 5  # submits of one key into different folders that keep meeting: then the caller tries again


def write_job(spool: SpoolDir, job: Job, caller: Identity, *, hold: bool,
              owner: tuple[int, int] | None = None) -> None:
    """Write the job's file (``owner``'s, when root spools for someone else), held if asked; nothing if it fails.

    A no-replace rename guards one folder only: a submit of the same key into another priority at the same
    moment passes it too. So each looks again once its file is in place, and one that finds the key elsewhere
    takes its own back: the first stays, and two that meet both step back and try again, apart."""
    markers = prepare_holds(spool, [job.name], caller, hold=hold, owner=owner)
    folder = spool.folder_for(job.priority, job.urgent)
    try:
        for _ in range(NAMESAKE_TRIES):
            made = create_file(folder, job.name, encode(job), owner=owner)
            if not _namesakes_met(spool, {job.name: (folder, made)}):  # alone, or the one claimed is ours: it runs
                return
            refuse_taken(spool, [job.name], caller.uid if owner is None else owner[0])  # the other stays
            import random
            import time

            time.sleep(random.uniform(0.005, 0.05))
        raise Refused(f"other submits of {label(job.name)!r} kept meeting this one", "submit it again")
    except OniteError as err:  # nothing was spooled (on an interrupt it may have been: a marker too many is safe)
        undo_holds(markers)
        if isinstance(err, Refused):  # taken since the check (a concurrent submit): said as a taken name
            refuse_taken(spool, [job.name], caller.uid if owner is None else owner[0])
        raise


def check_after(spool: SpoolDir, jobs: list[Job]) -> None:
    """InvalidInput unless each of ``jobs`` waits only for an earlier one or a spooled job, and not for itself
    through queued jobs."""
    if not any(job.after for job in jobs):
        return
    from onite.core.queue import DepState  # not at import, nor for jobs without --after: a submit loads no queue order
    from onite.spool.deps import dependency_state

    position = {job.name: i for i, job in enumerate(jobs)}
    known: set[str] = set()
    after_of = None
    for i, job in enumerate(jobs):
        for dep in job.after:
            if dep == job.name:
                raise InvalidInput(f"job {label(dep)!r} cannot wait for itself", "drop that --after")
            if dep in position:
                if position[dep] > i:
                    raise InvalidInput(f"job {label(job.name)!r} waits for {label(dep)!r}, which comes "
                                       "later in the batch", "put the jobs in the order they depend on each other")
            elif dep not in known:
                user, name = split_key(dep)
                if dependency_state(spool, dep) is DepState.MISSING:
                    of = "" if user == split_key(job.name)[0] else f" of {user}'s"
                    if not of and (error := namesake_error(spool, name, key_uid(job.name), others=True,
                                                           kind=InvalidInput)):
                        raise error
                    raise InvalidInput(f"no job {name!r}{of} is queued, running or finished",
                                       "check the name with onite list --all")
                known.add(dep)
        # a name made unique is new, as is one that left no trace: no job waits for it (an --after needs one)
        if job.after and dependency_state(spool, job.name) is not DepState.MISSING:
            from onite.core.queue import dependency_cycle

            after_of = after_of or _waits_for(spool)
            cycle = dependency_cycle(job.name, job.after, after_of)  # A after B, B after A: neither would ever run
            if cycle is not None:
                raise InvalidInput(f"job {label(job.name)!r} would wait for itself: "
                                   f"{' → '.join(map(label, cycle))}, and none of them would ever run",
                                   "drop that --after, or first change what the others wait for "
                                   "(onite edit NAME --after …)")


def _waits_for(spool: SpoolDir):
    """``key → what queued job key waits for``, as edited, as far as the caller can read it; CYCLE_LOOKS reads at
    most."""
    import functools

    from onite.spool.edits import read_edited

    limit, edits, looks = spool.config.max_job_size, None, 0

    @functools.cache
    def after_of(key: str) -> tuple[str, ...]:
        nonlocal edits, looks
        looks += 1
        if looks > CYCLE_LOOKS:  # a chain another user made as long as they like costs a submit no more
            return ()
        for entry in find_queued(spool, key, holds={}):  # a hold changes nothing of what it waits for
            if edits is None:  # edit/ is anyone's to fill: listed only once a waited-for job is queued
                edits = read_markers(spool.edit_dir)
            # another user's is private: not followed; one without an edit or an after: line is not decoded
            job = read_edited(entry.path, key, entry.uid, edits, limit, waiting=True)
            if job is not None:
                return job.after
        return ()

    return after_of


def _take_back(path, made: os.stat_result) -> bool:
    """Remove ``made``, the job file just made at ``path``; False if a driver has claimed it already (it runs:
    the submit stands), as when another file, or none, is at its name now."""
    try:
        if os.path.samestat(os.lstat(path), made):
            return remove_file(path)
    except (FileNotFoundError, PermissionError):  # claimed; what someone put at the freed name is not ours
        pass
    return False


def refuse_taken(spool: SpoolDir, keys: Sequence[str], uid: int) -> None:
    """Refused: a key that is queued or running, or a file at it that is not ``uid``'s (a forgery); a big batch's
    keys are looked for in one listing a folder."""
    wanted, found = set(keys), []
    folders = [(folder, {"rank": rank}) for rank, folder in spool.queue_folders()] + \
        [(spool.running_dir(host), {"host": host}) for host in spool.hosts()]
    for folder, where in folders:
        names = wanted if len(wanted) < 64 else [entry.name for entry in listing(folder) if entry.name in wanted]
        found += [e for name in names if (e := stat_entry(folder, name, **where))]
    for entry in sorted(found, key=lambda e: e.name):
        name = split_key(entry.name)[1]
        if entry.uid != uid:
            raise Refused(f"a file at job {name!r}'s place is {user_name(entry.uid)}'s, not yours: a forgery, "
                          "which the next driver sets aside", "pick another name, or ask the admin to remove it")
        where = f"running now (on {entry.host}, {user_name(entry.uid)})" if entry.host else \
            f"already queued ({'urgent' if entry.rank == 0 else f'P{entry.rank}'}, {user_name(entry.uid)})"
        raise Refused(f"a job named {name!r} is {where}", "pick another name, or use --unique")


def prepare_holds(spool: SpoolDir, names: list[str], caller: Identity, *, hold: bool,
                  owner: tuple[int, int] | None = None) -> list:
    """Before jobs ``names`` are spooled: remove their names' stale hold markers and, to spool them held, add one
    for each, in order, first, so that no driver sees it unheld."""
    holds = read_markers(spool.hold_dir)
    stale = [n for n in names if n in holds]
    if stale:
        remove_holds(spool, stale, None if caller.uid == 0 else {caller.uid})
    markers = []
    try:
        for name in names if hold else ():
            markers.append(add_hold(spool, name, owner))
    except OniteError:
        undo_holds(markers)
        raise
    return markers


def undo_holds(markers: list) -> None:
    """Remove markers made for jobs that were not spooled after all."""
    for marker in markers:
        remove_file(marker)


def submit_many(spool: SpoolDir, request: SubmitRequest, texts: Sequence[tuple[str, bytes]], captured: Captured,
                caller: Identity) -> list[Job]:
    """Spool a job of ``request``'s options for each ``(name, text)``, in order, all checked before any is written;
    the jobs spooled. A name taken while writing leaves the jobs before it spooled: the error says how many."""
    if not texts:
        return []
    if request.unique:
        raise InvalidInput("a batch of jobs cannot use --unique", "name the jobs")
    jobs = checked_jobs(spool, request, texts, captured, caller)
    keys = [job.name for job in jobs]
    markers = prepare_holds(spool, keys, caller, hold=request.hold)
    folders = [spool.folder_for(job.priority, job.urgent) for job in jobs]
    try:
        made = create_batch((folder, job.name, encode(job)) for folder, job in zip(folders, jobs))
    except OniteError as err:
        created = getattr(err, "created", 0)
        undo_holds(markers[created:])  # held: one a job, in order
        if isinstance(err, Refused):  # taken since the check (a concurrent submit): said as a taken name
            try:
                refuse_taken(spool, keys[created:created + 1], caller.uid)
            except Refused as taken:
                err = taken
        if created:
            err.what += (f" (the first {created} of the {len(jobs)} jobs were spooled: {texts[0][0]} to "
                         f"{texts[created - 1][0]})")
        else:
            err.what += f" (none of the {len(jobs)} jobs was spooled)"
        raise err from None
    taken = _namesakes_met(spool, {job.name: (folder, st) for job, folder, st in zip(jobs, folders, made)})
    if taken:  # as write_job: another submit put these keys in another folder at the same moment; theirs stay
        undo_holds([m for m, key in zip(markers, keys) if key in taken] if request.hold else [])
        first = next(key for key in keys if key in taken)
        raise Refused(f"{len(taken)} of the {len(jobs)} jobs ({label(first)} first) met another submit of their "
                      f"names into another priority at the same moment and were taken back; the other "
                      f"{len(jobs) - len(taken)} were spooled", "see onite list, and spool again what is missing")
    return jobs


def _namesakes_met(spool: SpoolDir, made: dict[str, tuple[Path, os.stat_result]]) -> set[str]:
    """The keys of the files just ``made`` (key → its folder, the file as made) found in another queue or running
    folder too, whose own files were taken back (ours, claimed meanwhile, is no other: it runs); a big batch's keys
    are looked for in one listing a folder, as refuse_taken does."""
    met = set()
    folders = [f for _, f in spool.queue_folders()] + [spool.running_dir(h) for h in spool.hosts()]
    for other in folders:
        names = made if len(made) < 64 else [entry.name for entry in listing(other) if entry.name in made]
        for name in names:
            folder, ours = made[name]
            if folder == other or name in met:
                continue
            try:
                theirs = os.lstat(other / name)
            except OSError:  # none there
                continue
            if not os.path.samestat(ours, theirs) and _take_back(folder / name, ours):
                met.add(name)
    return met


def check_policy(spool: SpoolDir, urgent: bool, now: datetime, caller: Identity) -> None:
    """Refused: ``urgent`` without the right, after the cutoff, or while a driver runs under check_lock."""
    config = spool.config
    if urgent:
        check_urgent(caller, config.admins, "spool urgent jobs")
    state = spooling(config, now)
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
    """Refused: a job no local host it may run on could ever run (Slurm says its own)."""
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
    """``--notify mail`` where mail cannot go out is an InvalidInput now, not a log line the next morning."""
    if notify != "mail":
        return
    from onite.exec.notify import find_sendmail

    sendmail, missing = find_sendmail(config)
    if sendmail is None:
        raise InvalidInput(f"--notify mail: {missing}", "ask the admin for a mail transport, or use --notify none")


def uniqname(spool: SpoolDir, base: str, user: str) -> str:
    """``onite uniqname BASE``: a job name starting with BASE that no job of ``user``'s uses (live or kept)."""
    return unique_name(base, lambda n: name_taken(spool, job_key(user, n)))


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
    """The warning for a command after ``--`` that is found nowhere now (PATH, a file, /bin/sh's own): the job
    would fail at night unless it appears by then."""
    import shutil

    command = argv[0]
    if shutil.which(command) is not None:
        return None
    if "/" in command:
        return (f"onite: warning: {quoted(command, 200)} is not a file you may run now: the job fails at night unless it "
                "is by then")
    if _shell_has(command):
        return None
    return f"onite: warning: no command {quoted(command, 200)} in PATH now: the job fails at night unless it is there by then"


def _shell_has(word: str) -> bool:
    """Does /bin/sh, which runs the job, know ``word`` as its own (``command -v``)? True if it cannot be asked."""
    import subprocess

    try:
        return subprocess.run(["/bin/sh", "-c", 'command -v -- "$1"', "sh", word], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return True


def submit_command(request: SubmitRequest, spool: str | None, *, lines: bool, now: datetime,
                   confirm: bool = True) -> tuple[str | None, str | None, list[str]]:
    """``onite submit``: stdin (or a command after ``--``) as one job, or a job a line; the stdout line, the
    ``confirmation``, and the warnings: text /bin/sh will not run as meant (``odd_text``), more jobs than results
    kept."""
    target = open_spool(spool)
    request.limits(target.config, now, me())  # a bad option is told before stdin is read
    if lines:
        jobs = submit_lines(request, target, now)
        names = [label(job.name) for job in jobs]
        said = confirmation(target, names, jobs[0], held=request.hold, now=now) if confirm else None
        warnings = [w for w in [odd_text(b"".join(job.body for job in jobs))] if w]
        keep = target.config.keep
        if 0 < keep < len(jobs):
            warnings.append(f"onite: warning: {len(jobs)} jobs, but the spool keeps your last {keep} results (keep in "
                            f"onite.toml): the output of all but the last {keep} is removed as they finish; onite "
                            "report still tells how each ended")
        return "\n".join(names), said, warnings  # a name a line, for scripts; what was spooled is said on stderr
    limit = target.config.max_job_size
    if not request.body:  # what the spool says of the options and the name is told before a long pipe is read
        checked_jobs(target, request._replace(body=b":\n"), [(request.name, b":\n")], capture(now), identity.current())
        request = request._replace(body=read_job_text(limit))
    elif len(request.body) > limit:
        raise InvalidInput(f"the command is longer than max_job_size ({limit} bytes)",
                           "spool a short script that runs it instead")
    job = spool_job(target, request, capture(now), identity.current())
    said = confirmation(target, [label(job.name)], job, held=request.hold, now=now) if confirm else None
    return (label(job.name) if request.unique else None), said, [w for w in [odd_text(job.body)] if w]


def odd_text(body: bytes) -> str | None:
    """The warning for job text that /bin/sh will not run as its writer meant: NUL bytes (not a script), or a
    file from Windows, whose carriage returns sh takes as part of each command."""
    if b"\0" in body:
        return "onite: warning: the job text holds NUL bytes: it is no script, and /bin/sh will fail on it"
    if b"\r\n" in body:
        return ("onite: warning: the job text has CRLF line ends: /bin/sh takes each \\r as part of a command "
                "(true\\r: not found) — convert it: dos2unix, or tr -d '\\r'")
    return None


def submit_lines(request: SubmitRequest, target: SpoolDir, now: datetime) -> list[Job]:
    """``onite submit NAME --lines``: a job a line, NAME-00001, NAME-00002, …; the jobs spooled."""
    text = read_stdin(target.config.max_job_size, "onite submit NAME --lines < jobs.txt",
                      too_big="split the list, and spool each part under its own NAME")
    lines = [line for line in text.split(b"\n") if line.strip()]
    if not lines:
        raise InvalidInput("no job on stdin: every line is empty",
                           "one command a line: onite submit NAME --lines < jobs.txt")
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
    texts = [(f"{base}-{i:0{width}d}", line + b"\n") for i, line in enumerate(lines, 1)]
    return submit_many(target, request._replace(unique=False), texts, capture(now), caller)


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
    where, and when it is expected to run."""
    from onite.drain.heartbeat import BeatState
    from onite.drain.nextdrain import LABEL, no_drain_text, plan, starter_text, when_text

    what = names[0] if len(names) == 1 else f"{len(names)} jobs, {names[0]} to {names[-1]}"
    head = f"spooled {what} ({'urgent' if job.urgent else f'P{job.priority}'}) in {spool.root}"
    it, they, asks = ("it", "it", "asks") if len(names) == 1 else ("them", "they", "ask")  # a batch said as one
    if held:
        first = names[0] if len(names) == 1 else f"{names[0]}…"
        return f"{head}; held: {they} will not run until onite release {first}"
    later = job.not_before is not None and job.not_before > now
    parts = []
    if job.after:
        parts.append(f"waits for {', '.join(map(label, job.after))}" + ended_badly(spool, job))
    if later:
        parts.append(f"not before {when_text(job.not_before.astimezone(), now)}")
    if job.pin:
        parts.append(f"only on host {job.pin}")
    drain = plan(spool, now)
    fits, draining, daemons = drain.for_job(spool, job, now)
    # a daemon's drain of timed jobs starts no untimed job: that one waits for the next drain
    draining = [d for d in draining if d.state != BeatState.TIMED or job.not_before is not None]
    if job.not_before is None:  # a daemon's wake starts timed jobs only
        daemons = []
    if later and daemons:  # the daemon draining now is not what starts it: its wake at that time is
        parts.append(f"{LABEL['daemon']} on host {daemons[0]} starts {it} then")
    elif draining:
        parts.append(f"a drain is running now on host {draining[0].host}"
                     + (f" (it starts {it} then, if it is still draining)" if later else ""))
    elif daemons and not job.after:  # due (--at now): the daemon's wake starts it
        parts.append(f"{LABEL['daemon']} on host {daemons[0]} starts {it} now")
    elif fits:
        parts.append(starter_text(fits[0], now))
    elif job.pin and job.pin != default_host(spool.config):  # this machine's fix would schedule drains that skip it
        from onite.drain.heartbeat import spool_hosts

        hosts = spool_hosts(spool, now)
        odd = "" if job.pin in hosts else (f" (none of the spool's hosts {', '.join(hosts)} is {job.pin}: "
                                           "is it right?)")
        parts.append(f"no drain is scheduled on host {job.pin}{odd}, so nothing will run {it} — schedule drains "
                     f"there (onite cron --install on host {job.pin}), or spool {it} without --host")
    elif drain.starters and not job.pin:  # drains are scheduled, on hosts too small for it
        parts.append(f"no drain is scheduled on a host that can give {it} what {they} {asks} for, so nothing will "
                     f"run {it} — "
                     "schedule drains on one that can (onite cron --install there; onite status shows the hosts)")
    else:
        problems = f" ({'; '.join(drain.problems)})" if drain.problems else ""
        parts.append(no_drain_text(drain, for_job=it).replace(" — ", f"{problems} — ", 1))
    return "; ".join([head, *parts])
