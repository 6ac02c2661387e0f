"""How one job is started: its command line, environment, credentials and output files.

Text that starts with ``#!`` runs under that interpreter (the path, then at most one argument),
anything else under ``shell``, reading the text as /dev/fd/N; stdin is /dev/null.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from onite.core.errors import SpoolIOError
from onite.core.identity import Identity
from onite.core.names import split_key
from onite.exec.plan import SCRIPT
from onite.exec.runner import NoRecord, Run, SpawnError
from onite.spool.files import remove_file
from onite.spool.outputs import open_output


def interpreter(body: bytes, shell: str) -> tuple[bytes, ...]:
    """The command that runs ``body``, with SCRIPT where its path goes."""
    if body.startswith(b"#!"):
        line = body[2:].split(b"\n", 1)[0].strip(b" \t\r")
        if line:
            program, _, arg = line.replace(b"\t", b" ").partition(b" ")
            arg = arg.strip(b" ")
            return (program, *((arg,) if arg else ()), SCRIPT)
    return (os.fsencode(shell), SCRIPT)


def job_environment(run: Run, *, switch_user: bool) -> dict[bytes, bytes]:
    """The environment captured at submit; the owner's login variables when the driver is root; then
    ONITE_JOB, ONITE_RUN_ID and ONITE_JOB_SPOOL, by which recovery finds a run's processes (processes.py)."""
    env = dict(run.job.env)
    if switch_user:
        env.update(run.owner.login_env())
    env[b"ONITE_JOB"] = run.name.encode()
    env[b"ONITE_RUN_ID"] = run.run_id.encode()
    env[b"ONITE_JOB_SPOOL"] = os.fsencode(run.spool)
    return env


def credentials(identity: Identity | None = None) -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]:
    """The real, effective and saved uids and gids, and the groups with their rights, of this process, or
    of a process that runs as ``identity``: where the two are equal, switching to ``identity`` changes nothing."""
    if identity is not None:
        return (identity.uid,) * 3, (identity.gid,) * 3, frozenset(identity.groups) | {identity.gid}
    resgid = os.getresgid()
    return os.getresuid(), resgid, frozenset(os.getgroups()) | {resgid[1]}


def attempt_marker(run: Run) -> str:
    """The line a retry's output starts with, in each output file of the job."""
    return f"\n[onite] attempt {run.attempt} of {split_key(run.name)[1]}, {run.started:%Y-%m-%d %H:%M:%S}\n"


@contextmanager
def run_outputs(run: Run, stdout_path: Path, stderr_path: Path, identity: Identity | None, *,
                append: bool) -> Iterator[tuple[int, int | None]]:
    """The run's output files (stdout, and ``stderr_path`` when kept apart), open while the block runs; a
    retry (``append``) adds to each after its attempt marker. An older ``stderr_path`` of a job that does
    not keep stderr apart is removed, so that another job's cannot pass for this run's.
    NoRecord: a file cannot be created or written (no fault of the job's: the driver stops starting
    jobs); SpawnError: the old stderr file cannot be removed."""
    if not run.job.stderr_separate:
        try:
            remove_file(stderr_path)
        except SpoolIOError as err:
            raise SpawnError(f"cannot remove the old stderr file {stderr_path}: {err.cause.strerror}") from None
    fds: list[int] = []
    try:
        for path in (stdout_path, stderr_path) if run.job.stderr_separate else (stdout_path,):
            try:
                fds.append(open_output(path, (identity.uid, identity.gid) if identity else None, append=append))
            except OSError as err:
                raise NoRecord(f"cannot create its output file {path}: {err.strerror}") from None
            try:
                if append:
                    os.write(fds[-1], attempt_marker(run).encode())
            except OSError as err:
                raise NoRecord(f"cannot write its output file {path}: {err.strerror}") from None
        yield fds[0], fds[1] if len(fds) > 1 else None
    finally:
        for fd in fds:
            os.close(fd)


def occupy_standard_descriptors() -> None:
    """Open /dev/null on any of descriptors 0-2 that is closed, so no job file takes its number."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
