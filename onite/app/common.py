"""What every command does first: open the spool it works on; read the job text on stdin. What init and status
offer where the PAM service is missing."""

from __future__ import annotations

import functools
import os
import sys

from onite.core.errors import DamagedRecord, InvalidInput, Refused, SpoolError, SpoolIOError
from onite.core.names import resolve, shown
from onite.spool.accounts import user_name
from onite.spool.paths import SpoolDir


def open_spool(spool: str | None, *, reading: bool = False) -> SpoolDir:
    """The spool a command works on (``--spool``, ONITE_SPOOL, the default; a personal one is made).
    ``reading``: a command that only reads goes on past a bad onite.toml, with the defaults of what is wrong."""
    from onite.spool.locate import Source, locate

    where = locate(spool, os.environ, os.geteuid())
    target = SpoolDir(where.path)
    target.location = where
    if reading:
        target.config_faults = []
    if where.source == Source.PERSONAL and not target.exists():
        from onite.spool.skeleton import init_spool  # once per user: not on every submit's path

        try:
            init_spool(where.path, None, system=False)
        except SpoolIOError as err:  # a home it cannot write (nobody's /nonexistent): no administrator to ask
            raise SpoolError(f"{where.reason.removeprefix('default: ')}, and your personal spool {where.path} "
                             f"cannot be made ({err.what})", "give --spool DIR (or set ONITE_SPOOL), or ask root "
                             "to set up the system spool: sudo onite init") from None
    target.check()
    return target


def pam_fix(spool: SpoolDir) -> str | None:
    """The command that installs the PAM service ``spool``'s jobs would open, where it is missing on this machine
    (None: none is, PAM is off, the spool is a user's, or this machine has no PAM)."""
    from onite.exec.pam import SERVICE_DIRS, missing_service
    from onite.spool.skeleton import pam_dir, pam_install_command

    config, folder = spool.config, pam_dir()
    try:
        roots = os.stat(spool.root).st_uid == 0  # only root's driver opens sessions: a user's spool needs none
    except OSError:
        return None
    # where init installs it counts too (a test's ONITE_PAM_DIR); no folder there: no PAM on this machine
    if not roots or config.pam == "off" or not folder.is_dir() \
            or not missing_service(config.pam_service, (*SERVICE_DIRS, str(folder))):
        return None
    return pam_install_command(config.pam_service)


def refuse_finished(spool: SpoolDir, name: str, text: str, done: str, caller_uid: int) -> None:
    """Refused if job ``name`` (``text`` as typed) has finished or was withdrawn: what hold, release, edit and
    cancel (``done``: "held" …) say alike, with what its owner may do about it."""
    from onite.core.policy import owner_or_root
    from onite.core.state import JobState
    from onite.spool.results import read_result
    from onite.spool.scan import key_uid, withdrawn_entries

    ended = None
    try:  # withdrawn and not yet filed: newer than any result
        if any(entry.name == name for entry in withdrawn_entries(spool)):
            ended = "was cancelled"
    except SpoolIOError:
        pass
    if ended is None:
        try:
            result = read_result(spool, name)
        except DamagedRecord:  # it finished all the same
            ended = "has finished"
        else:
            if result is not None:
                ended = "was cancelled" if result.state is JobState.CANCELLED else "has finished"
    if ended:
        owner = key_uid(name)
        again = done == "cancelled" and ended == "was cancelled"
        raise Refused(f"job {text!r} was cancelled already" if again else f"job {text!r} {ended}: it cannot be {done}",
                      f"spool it again: onite restart {text}" if owner is not None and owner_or_root(caller_uid, owner)
                      else "only its owner or root may spool it again")


def read_stdin(limit: int, usage: str = "onite submit NAME < job.sh", *,
               too_big: str = "spool a short script that runs the big one instead") -> bytes:
    """The job text, at most ``limit`` bytes (else InvalidInput, with the hint ``too_big``). A terminal on stdin is a
    mistake (InvalidInput), told with ``usage``."""
    try:
        fd = sys.stdin.fileno() if sys.stdin is not None else 0
        if os.isatty(fd):
            raise InvalidInput("the job text is read from stdin, which is a terminal",
                               f"redirect a script: {usage}")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                from onite.core.resources import human_bytes

                raise InvalidInput(f"stdin is larger than max_job_size ({human_bytes(limit)})", too_big)
    except (OSError, ValueError) as err:
        raise InvalidInput(f"cannot read the job text from stdin: {getattr(err, 'strerror', None) or err}",
                           f"redirect a script: {usage}") from None
    return b"".join(chunks)


def read_job_text(limit: int, usage: str = "onite submit NAME < job.sh") -> bytes:
    body = read_stdin(limit, usage)
    if not body.strip():
        raise InvalidInput(f"the job text on stdin is {'only white space' if body else 'empty'}",
                           f"pipe or redirect a script: {usage}")
    return body


def key_for(text: str, *, what: str = "job name") -> str:
    """A command's job argument as a key: ``NAME`` is the caller's job, ``USER:NAME`` USER's."""
    return resolve(text, me(), what=what)


def me() -> str:
    """The caller's user name (how their own jobs' keys begin), looked up once per uid (``list`` labels every job
    with it; a process that forks and changes its uid, as the tests' run_cli does, gets its new name)."""
    return _account(os.geteuid())


_account = functools.lru_cache(maxsize=8)(user_name)


def label(key: str) -> str:
    """How job ``key`` is shown to the caller: NAME for their own, USER:NAME for another user's."""
    return shown(key, me())
