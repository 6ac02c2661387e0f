"""How one job is started (pure but for the output files): its command line, environment, credentials.

- the job text is handed over in an anonymous memory file (memfd) that the
  interpreter reads as /dev/fd/N: nothing is written to disk, bytes are
  exact, and the job's stdin stays /dev/null;
- text that starts with ``#!`` runs under that interpreter (Linux rules:
  the path, then at most one argument); anything else under ``shell``;
- the environment is the one captured at submit, with the owner's login
  variables when the driver is root, and onite's own three (ONITE_JOB,
  ONITE_RUN_ID, ONITE_JOB_SPOOL), by which recovery also finds the processes
  of a run whose record a killed driver never wrote (onite.exec.processes);
- stdout and stderr go to stdout/NAME, created by the driver, owned by the
  job's user, mode 0600 (onite.spool.outputs); a job spooled with
  --stderr-separate has its stderr in stdout/NAME@stderr instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from onite.core.identity import Identity
from onite.exec.runner import NoRecord, Run, SpawnError
from onite.core.errors import SpoolIOError
from onite.spool.files import remove_file
from onite.spool.outputs import open_output


@dataclass(frozen=True)
class Launch:
    """How to start one job: its command line, environment, directory, umask and identity."""

    argv: tuple[bytes, ...]  # the last element is replaced by the script's /dev/fd path
    env: dict[bytes, bytes]
    cwd: bytes
    umask: int
    identity: Identity | None  # None: run with the driver's own credentials


SCRIPT = b"\0script\0"  # placeholder in argv for /dev/fd/N


def interpreter(body: bytes, shell: str) -> tuple[bytes, ...]:
    """The command that runs ``body``, with SCRIPT where its path goes."""
    if body.startswith(b"#!"):
        line = body[2:].split(b"\n", 1)[0].strip(b" \t\r")
        if line:
            parts = line.replace(b"\t", b" ").split(b" ", 1)
            arg = parts[1].strip(b" ") if len(parts) > 1 else b""
            return (parts[0],) + ((arg,) if arg else ()) + (SCRIPT,)
    return (os.fsencode(shell), SCRIPT)


def job_environment(run: Run, *, switch_user: bool) -> dict[bytes, bytes]:
    """The environment ``run`` starts with (pure): the one captured at submit; the owner's login
    variables when the driver is root, whatever the job file says; then onite's own three, by which
    recovery also finds the processes of a run whose record a killed driver never wrote
    (onite.exec.processes.find_run_processes).
    """
    env = dict(run.job.env)
    if switch_user:
        env.update(run.owner.login_env())
    env[b"ONITE_JOB"] = run.name.encode()
    env[b"ONITE_RUN_ID"] = run.run_id.encode()
    env[b"ONITE_JOB_SPOOL"] = os.fsencode(run.spool)
    return env


def plan(run: Run, *, shell: str, switch_user: bool) -> Launch:
    """What to execute for ``run`` (pure). ``switch_user``: the driver is root."""
    return Launch(
        argv=interpreter(run.job.body, shell),
        env=job_environment(run, switch_user=switch_user),
        cwd=run.job.cwd,
        umask=run.job.umask,
        identity=run.owner if switch_user else None,
    )


def own_credentials() -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]:
    """This process's real, effective and saved uids and gids, and the groups it has the rights of.

    The kernel grants a group's rights for the effective gid as for a
    supplementary group, so the set counts both (root often has no
    supplementary groups, where its account's group list is just its gid).
    """
    resgid = os.getresgid()
    return os.getresuid(), resgid, frozenset(os.getgroups()) | {resgid[1]}


def credentials_of(identity: Identity) -> tuple[tuple[int, ...], tuple[int, ...], frozenset[int]]:
    """What ``own_credentials`` reads in a process that runs as ``identity``."""
    return (identity.uid,) * 3, (identity.gid,) * 3, frozenset(identity.groups) | {identity.gid}


def attempt_marker(run: Run) -> str:
    """The line a retry's output starts with, in each output file of the job."""
    return f"\n[onite] attempt {run.attempt} of {run.name}, {run.started:%Y-%m-%d %H:%M:%S}\n"


@contextmanager
def run_outputs(run: Run, stdout_path: Path, stderr_path: Path | None, identity: Identity | None, *,
                append: bool) -> Iterator[tuple[int, int | None]]:
    """The run's output files (``open_outputs``), open while the block runs: its stdout file and,
    when the job keeps stderr apart, its stderr file ``stderr_path``; a retry (``append``) adds to
    them after its attempt marker. A job that does not keep stderr apart has an older
    ``stderr_path`` removed, so that another job's stderr cannot pass for this run's.

    Raises:
        SpawnError: a file cannot be created, written or removed (nothing is left open).
    """
    if not run.job.stderr_separate and stderr_path is not None:
        try:
            remove_file(stderr_path)
        except SpoolIOError as err:
            raise SpawnError(f"cannot remove the old stderr file {stderr_path}: {err.cause.strerror}") from None
        stderr_path = None
    out, err = open_outputs(stdout_path, stderr_path, identity, append=append,
                            marker=attempt_marker(run) if append else None)
    try:
        yield out, err
    finally:
        os.close(out)
        if err is not None:
            os.close(err)


def open_outputs(stdout_path: Path, stderr_path: Path | None, identity: Identity | None, *, append: bool,
                 marker: str | None = None) -> tuple[int, int | None]:
    """``open_output`` for the job's stdout file and, when kept apart, its stderr file.

    A retry (``append``) adds to both, each after ``marker`` (a line saying
    which attempt follows), so either file read alone shows where each attempt starts.

    Raises:
        SpawnError: a file cannot be created or written (nothing is left open).
    """
    fds: list[int] = []
    try:
        for path in (stdout_path, stderr_path):
            if path is None:
                continue
            try:
                fds.append(open_output(path, (identity.uid, identity.gid) if identity else None, append=append))
            except OSError as err:
                raise _output_error(f"cannot create its output file {path}: {err.strerror}", err) from None
            if marker is not None:
                try:
                    os.write(fds[-1], marker.encode())
                except OSError as err:
                    raise _output_error(f"cannot write its output file {path}: {err.strerror}", err) from None
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds[0], fds[1] if len(fds) > 1 else None


def _output_error(message: str, err: OSError) -> SpawnError:
    """An output file onite cannot write (a full disk, a quota, a file-size limit, a failing or
    read-only disk) is no fault of the job's: the driver stops starting jobs (NoRecord) instead of
    failing one after another."""
    return NoRecord(message)


def occupy_standard_descriptors() -> None:
    """Open /dev/null on whichever of descriptors 0, 1 and 2 is closed (a driver started with its
    stdin closed): otherwise a job's script or output file could get one of those numbers, and the
    job's own stdin, stdout and stderr would take its place."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one (those below are open)
