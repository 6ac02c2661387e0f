"""What the driver asks of an executor (a ``Runner``: LocalRunner, SlurmRunner), the attempt it hands one
(a ``Run``), and what both give a run: its environment and output files. A runner never files a job: it
reports how a run ended (onite.drain.finish)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from onite.core.errors import SpoolIOError
from onite.core.identity import Identity
from onite.core.job import Job
from onite.core.names import split_key
from onite.core.resources import Need
from onite.core.state import Outcome, Stop
from onite.spool import runrecords
from onite.spool.files import remove_file
from onite.spool.outputs import open_output

if TYPE_CHECKING:
    from onite.core.config import Config
    from onite.core.runrecord import RunRecord


class SpawnError(Exception):
    """The job could not be started; the message is the reason recorded for it."""


class Unavailable(SpawnError):
    """The executor takes no job now (the Slurm controller does not answer); nothing of it was started."""


class NoRecord(SpawnError):
    """Something of the run cannot be written (a full disk): nothing was started, nor is until it can be."""


@dataclass(eq=False)
class Run:
    """One attempt of one job, as the driver tracks it from its claim until it is recorded."""

    name: str
    job: Job
    owner: Identity
    rank: int
    run_id: str
    started: datetime
    started_mono: float  # on the driver's clock
    monitor: object = None  # local: the driver's end of its monitor (onite.exec.local.Monitor)
    pgid: int | None = None  # local: the job's process group (its leader's pid), once it runs
    record_path: str | None = None  # running/HOST/NAME@run
    external_id: str | None = None  # e.g. a Slurm job id
    timeout_at: float | None = None  # slurm: when to cancel it, on the driver's monotonic clock
    kill_at: float | None = None  # slurm: when to cancel it again if it is still there
    stopping: Stop | None = None  # why onite is stopping it
    cancelled_by: str | None = None
    queued_at: datetime | None = None  # when it entered its queue (the kernel's ctime)
    spool: str = ""  # the root of the spool it was claimed from (ONITE_JOB_SPOOL)
    announced: bool = False  # its start was reported to the driver
    need: Need | None = None  # what it was admitted with (onite.core.resources)
    unenforced: tuple[str, ...] = ()  # local: the limits it asked for that could not be set
    usage: dict | None = None  # what it used, once it ended: peak_mem (bytes), cpu (seconds), oom
    backfilled: bool = False  # started past a job that waits for room (onite.drain.pick)
    unrecorded: str | None = None  # local: why its monitor could not record itself (it started nothing)
    unavailable: str | None = None  # slurm: why the controller did not take it (nothing was submitted)
    nice: int | None = None  # slurm: the --nice it was submitted with (its place among the jobs waiting in Slurm)
    ended: datetime | None = None  # slurm: when it ended, for one that ended while no driver watched it
    pending: bool = False  # slurm: its job was last seen waiting in Slurm's queue, never started
    nodes: str | None = None  # slurm: the nodes Slurm gave its job, once it started (squeue's NodeList)

    @property
    def mem(self) -> int | None:
        """The MiB of memory it asked for (None: no limit); ``cpus`` likewise."""
        return self.need.mem or None if self.need else None

    @property
    def cpus(self) -> int | None:
        return self.need.cpus or None if self.need else None

    @property
    def attempt(self) -> int:
        return self.job.attempt


def record_stop(record_path: Path | None, why: Stop, by: str | None) -> None:
    """Write why onite stops a run into its record before the stop: whoever files the run (the next driver
    too) files it as stopped. One that cannot be written stops nothing."""
    if record_path:
        with suppress(runrecords.RecordError):  # the driver that stops it still knows
            runrecords.add_event(record_path, {"event": "stop", "why": str(why), "by": by})


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


@contextmanager
def run_outputs(run: Run, stdout_path: Path, stderr_path: Path, identity: Identity | None, *,
                append: bool) -> Iterator[tuple[int, int | None]]:
    """The run's output files (stdout, and ``stderr_path`` when kept apart), open while the block runs; a
    retry (``append``) adds to each after a marker line. An older ``stderr_path`` of a job that does not keep
    stderr apart is removed, so that another job's cannot pass for this run's. NoRecord: a file cannot be
    created or written (the driver stops starting jobs); SpawnError: the old stderr file cannot be removed."""
    if not run.job.stderr_separate:
        try:
            remove_file(stderr_path)
        except SpoolIOError as err:
            raise SpawnError(f"cannot remove the old stderr file {stderr_path}: {err.cause.strerror}") from None
    marker = f"\n[onite] attempt {run.attempt} of {split_key(run.name)[1]}, {run.started:%Y-%m-%d %H:%M:%S}\n"
    fds: list[int] = []
    try:
        for path in (stdout_path, stderr_path) if run.job.stderr_separate else (stdout_path,):
            try:
                fds.append(open_output(path, (identity.uid, identity.gid) if identity else None, append=append))
            except OSError as err:
                raise NoRecord(f"cannot create its output file {path}: {err.strerror}") from None
            try:
                if append:
                    os.write(fds[-1], marker.encode())
            except OSError as err:
                raise NoRecord(f"cannot write its output file {path}: {err.strerror}") from None
        yield fds[0], fds[1] if len(fds) > 1 else None
    finally:
        for fd in fds:
            os.close(fd)


class Runner(Protocol):
    """What the driver needs from an executor (defaults inherited); times are on the driver's monotonic clock."""

    executor: ClassVar[str]  # "local" or "slurm", recorded in results and run records
    runs: list[Run]  # the runs it is responsible for now

    def record_info(self, run: Run) -> dict:
        """What this executor adds to the first line of ``run``'s record."""
        return {}

    def start(self, run: Run, output_path: Path, *, append: bool, stderr_path: Path, record_fd: int) -> None:
        """Start ``run``; ``record_fd``: an O_APPEND descriptor of its record, which the caller closes.
        SpawnError (the reason is recorded), NoRecord or Unavailable: it did not start."""

    def stop(self, run: Run, why: Stop, *, by: str | None = None) -> None:
        """TERM now, KILL after the grace period; with Stop.SHUTDOWN (the driver's hard stop), as soon as it can."""

    def tick(self, now_mono: float) -> None: ...

    def reap(self) -> list[tuple[Run, Outcome]]:
        """The runs that ended since the last call, with how."""

    def next_deadline(self) -> float | None: ...

    def wait_fds(self) -> list[int]:
        """Descriptors that become readable when a run may have changed."""

    def recover(self, info: dict, *, owner: int | None = None) -> str:
        """Make sure a dead driver's run with no monitor of onite's (a Slurm job) is gone; what was done."""

    def recover_unrecorded(self, name: str, spool: str, run_id_ok, *, owner: int | None = None) -> str:
        """The same for a claim of ``spool`` with no run record, found by the job's environment."""

    def cancel_ahead(self, info: dict, record_path: Path, *, owner: int | None = None, unstarted: bool = False) -> bool:
        """Send a dead driver's run in flight (``unstarted``: only if it has not started) its cancel, not waited
        for (``recover`` waits); whether it was sent."""
        return False

    def job_of(self, info: dict, spool: str, owner: int | None) -> str | None:
        """The executor's id of the job of a run whose driver died as it handed the job over."""
        return None

    def unstarted(self) -> list[Run]:
        """Its runs not being stopped that still wait in the executor's queue, never started."""
        return []

    def busy(self) -> bool:
        """Work in flight: the driver waits for it before it exits."""
        return bool(self.runs)

    def adopt(self, run: Run, rec: RunRecord) -> bool:
        """Take over a run whose monitor outlived its driver; True if it did."""
        return False

    def reattach(self, run: Run) -> bool:
        """Take back a run that outlived its driver (a Slurm job); True if it did."""
        return False

    def unwatched_end(self, run: Run) -> Outcome | None:
        """How a run that outlived its driver ended while none watched it; None: not ended, or unknown."""
        return None

    def reload(self, config: Config) -> None: ...

    def close(self) -> None:
        """The drain is over: let go of what starting runs needs; runs go on."""
