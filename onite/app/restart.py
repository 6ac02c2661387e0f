"""``onite restart NAME``: spool a finished job again from its file jobsdone/KEY, its last run's state reset.

Only its owner or root may; the new file is the job's owner's whoever restarts it, and everything a submit
checks is checked again."""

from __future__ import annotations

import os
from datetime import datetime

from onite.app.common import key_for, label
from onite.app.submit import check_after, check_capacity, check_policy, refuse_taken, uniqname, write_job
from onite.exec import identity
from onite.spool.filecheck import BadFile, file_problem, read_job_file
from onite.spool.paths import SpoolDir
from onite.spool.accounts import user_name
from onite.spool.edits import edited, trusted
from onite.spool.scan import is_live, read_markers, withdrawn_entries
from onite.core.errors import InvalidInput, JobFormatError, NotFound, Refused, SpoolIOError
from onite.core.identity import Identity
from onite.core.job import Job
from onite.core.names import check_base, check_name, job_key, split_key
from onite.core.policy import owner_or_root
from onite.core.request import JobChanges, SubmitRequest


def restart(spool: SpoolDir, text: str, caller: Identity, now: datetime, *, new_name: str | None = None,
            unique: bool = False, hold: bool = False, changes: JobChanges = JobChanges()) -> Job:
    """Spool the finished job ``text`` again (as ``new_name``, or made unique) under its owner's name, with
    ``changes``; the job spooled."""
    name = key_for(text)
    user, plain = split_key(name)
    new = plain if new_name is None else new_name  # --name "" is a bad name, not no --name
    (check_base if unique else check_name)(new)
    job, st = read_finished(spool, name, caller.uid)
    job = changes.apply(job._replace(attempt=1, tried=()), spool.config, now, caller.name)  # a rerun starts at 1
    if changes.mem is not None or changes.cpus is not None:
        check_capacity(spool, job)
    check_policy(spool, SubmitRequest(name=new, body=job.body, urgent=job.urgent), now, caller)
    target = job_key(user, uniqname(spool, new, user) if unique else new)
    try:
        check_after(spool, [job._replace(name=target)], unique=unique)
    except InvalidInput as err:
        raise InvalidInput(f"restarting {text!r}: {err.what}",
                           "restart it with other dependencies (--after NAME), or spool it anew without them") from None
    if not unique:
        if is_live(spool, target):
            raise Refused(f"a job named {label(target)!r} is already queued or running",
                          f"restart it as another job: onite restart {text} --name NEW, or --unique")
        refuse_taken(spool, [target], st.st_uid)
    not_before = job.not_before if job.not_before is not None and job.not_before > now else None
    job = job._replace(name=target, submitted=now, host=os.uname().nodename, not_before=not_before)
    write_job(spool, job, caller, hold=hold, owner=None if st.st_uid == caller.uid else (st.st_uid, st.st_gid))
    return job


def read_finished(spool: SpoolDir, name: str, caller_uid: int):
    """The job of finished job ``name`` and its file's stat. Refused: someone else's, or a file onite may not
    trust."""
    path = _finished_path(spool, name, caller_uid)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotFound(f"no finished job {label(name)!r} is kept",
                       "it was filed or removed just now: try again") from None
    except OSError as err:
        raise SpoolIOError(path, "looking at", err) from None
    if not owner_or_root(caller_uid, st.st_uid):
        raise Refused(f"job {label(name)!r} belongs to {user_name(st.st_uid)}", "only its owner or root may restart it")
    try:
        job, opened = read_job_file(path, spool.config.max_job_size)
    except (BadFile, JobFormatError) as err:
        raise Refused(f"{path} cannot be restarted: {getattr(err, 'what', err)}",
                      "spool the job anew with onite submit") from None
    except FileNotFoundError:
        raise NotFound(f"no finished job {label(name)!r} is kept", "retention removed it just now") from None
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    # as the driver trusts a queued file: its owner's alone, one link, an account
    problem = "it changed as it was read" if opened.st_uid != st.st_uid else file_problem(
        opened, max_size=spool.config.max_job_size, resolve_uid=identity.resolve, may_settle=False)
    if problem:
        raise Refused(f"{path} cannot be restarted: {problem}", "spool the job anew with onite submit")
    # a job cancelled while queued was never claimed: its edits are still beside it, and it reruns as edited
    job = edited(job, trusted(read_markers(spool.edit_dir), name), spool.config.max_job_size)[0]
    return job, opened


def _finished_path(spool: SpoolDir, name: str, caller_uid: int):
    """jobsdone/NAME, else the caller's own latest withdrawn file of the name (anyone may write cancel/)."""
    path = spool.done_dir / name
    if os.path.lexists(path):
        return path
    withdrawn = [e for e in withdrawn_entries(spool) if e.name == name and e.uid == caller_uid]
    if withdrawn:
        return max(withdrawn, key=lambda e: e.ctime_ns).path
    raise NotFound(f"no finished job {label(name)!r} is kept",
                   "it is queued or running; restart it once it has finished" if is_live(spool, name)
                   else "see onite list --all; each user's last `keep` finished jobs are kept")

