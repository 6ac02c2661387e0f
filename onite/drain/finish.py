"""Filing what ends: a run's result, a retry, a requeue, a job that can never run, a file set aside.

A run is filed: result written, claim renamed into jobsdone/, end logged, record removed, in that
order, so recovery finishes what a crash cut. A file that can never run is never deleted: it goes to
refused/ with one log line. Where a record cannot be written, nothing more starts.
"""

from __future__ import annotations

import os
import stat
import sys
import time
import traceback
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from pathlib import Path

from onite.core.errors import NotFound, OniteError, Refused, SpoolIOError
from onite.core.job import Attempt
from onite.core.jobfile import encode
from onite.core.names import is_valid_key, split_key
from onite.core.queue import retry_delay
from onite.core.state import JobState, Outcome, Result, Stop, unrun_result
from onite.core.values import is_whole
from onite.drain.night import Night
from onite.exec.runner import Run
from onite.spool.cancels import finish_filings
from onite.spool.edits import waits_for
from onite.spool.filecheck import read_job_file
from onite.spool.files import change_state, create_displacing, move_file, remove_file
from onite.spool.index import Candidate
from onite.spool.results import write_result
from onite.spool.retention import prune, remove_temp_files
from onite.spool.accounts import user_name
from onite.spool.scan import key_uid, read_markers

PAUSE_FIRST, PAUSE_MAX = 15.0, 300.0  # seconds to start nothing after the executor could not take a job


def _use(run: Run) -> dict:
    """A run's request and what it used, as its result records them (none of it where unknown)."""
    used = run.usage or {}
    peak, cpu = used.get("peak_mem"), used.get("cpu")
    return {"mem": run.need.mem or None if run.need else None, "cpus": run.need.cpus or None if run.need else None,
            "peak_mem": peak if is_whole(peak, 0, (1 << 62) - 1) else None,
            "cpu_time": float(cpu) if isinstance(cpu, (int, float)) and not isinstance(cpu, bool)
            and 0 <= cpu < 1e12 else None}


class Finisher:
    """Files the runs and jobs of one drain; says when nothing more may start."""

    def __init__(self, night: Night) -> None:
        self.night = night
        self._since_prune = 0
        self._waits: dict[tuple, tuple[str, ...]] = {}  # (name, ctime, its edits) → the keys it waits for

    def reap(self) -> list[tuple[Run, Outcome]]:
        """Take the runs that ended out of those running. One with a result is returned, to be filed once
        its slot is given to the next job (its record already holds its end); any other is filed now, for
        it decides what may start (a pause, a requeue)."""
        night = self.night
        finished = night.runner.reap()
        night.starts.flush()
        now, ended = night.clock.now(), []
        for run, outcome in finished:
            night.running.pop(run.name, None)
            # order = "fair" counts its time from now: the next pick comes before it is filed
            used = max(0.0, (now - run.started).total_seconds())
            night.used[run.owner.name] = night.used.get(run.owner.name, 0.0) + used
            if self._goes_back(run, outcome):
                self.file([(run, outcome)])
            else:
                ended.append((run, outcome))
                night.ended[run.name] = outcome
        return ended

    def file(self, ended: list[tuple[Run, Outcome]]) -> None:
        for run, outcome in ended:
            try:
                self._file(run, outcome)
            except SpoolIOError as err:  # its claim and record stay, for the next driver to file
                self.note_cannot_record(str(err), run.name)
            finally:
                self.night.ended.pop(run.name, None)

    @staticmethod
    def _goes_back(run: Run, outcome: Outcome) -> bool:
        """Its job goes back to its queue with no result: its monitor started nothing, the executor took
        nothing, or this driver's hard stop ended it (a run adopted after one is filed by its record)."""
        return (run.stopping is None and (run.unrecorded is not None or run.unavailable is not None)
                or run.stopping == Stop.SHUTDOWN and outcome.cancelled_by is None)

    def _file(self, run: Run, outcome: Outcome) -> None:
        night = self.night
        night.starts.flush(until=run)
        if not self._goes_back(run, outcome):
            if not run.announced and outcome.reason and run.stopping is None:
                night.log.event("start-failed", run.name, user=run.owner.name, reason=outcome.reason)
            self.record(run, outcome, night.clock.now())
        elif run.stopping is None and run.unrecorded is not None:  # its monitor started nothing
            self.put_back_unstarted(run, run.unrecorded)
        elif run.stopping is None:  # the executor took nothing: back to its queue
            self.pause_starts(run, run.unavailable)
        else:  # a hard stop
            try:
                self._requeue_run(run)
            except OniteError as err:
                night.log.event("error", run.name, error=str(err))
                return
            night.counts["requeued"] += 1
            night.log.event("requeued", run.name, user=run.owner.name, reason="the driver was stopped")

    def record(self, run: Run, outcome: Outcome, now: datetime) -> None:
        """File how ``run`` ended at ``now`` (or spool its retry), log it, tell its owner."""
        night, job = self.night, run.job
        attempt = Attempt(attempt=job.attempt, started=run.started, finished=now, host=night.host,
                          exit_code=outcome.exit_code, signal=outcome.signal, reason=outcome.describe())
        if outcome.retried(job.attempt, job.retries) and self._requeue_retry(run, attempt, now):
            return
        result = Result(
            name=run.name, uid=run.owner.uid, user=run.owner.name, priority=run.rank or job.priority,
            urgent=run.rank == 0, state=outcome.state, reason=outcome.describe(), exit_code=outcome.exit_code,
            signal=outcome.signal, host=night.host, submitted=job.submitted, queued=run.queued_at,
            started=None if outcome.never_started else run.started, finished=now, attempt=job.attempt,
            attempts=job.tried + (attempt,), run_id=run.run_id, executor=night.runner.executor,
            external_id=run.external_id, nodes=run.nodes, recur=job.recur, stderr=job.stderr_mode, **_use(run),
        )
        try:
            write_result(night.spool, result)
            change_state(run.name, JobState.RUNNING, result.state, night.running_dir / run.name,
                         night.spool.done_dir / run.name, "filing the finished job")
        except OniteError as err:
            night.log.event("error", run.name, error=str(err), note="the job stays in running/ until recovery")
            self.note_cannot_record(str(err))
            return
        night.count(result)
        # logged before the record goes: recovery logs it for a record left only if the log lacks its run id
        night.log.event(str(result.state), run.name, user=run.owner.name, reason=result.reason or None,
                    exit=outcome.exit_code, seconds=f"{result.duration:.3f}" if result.duration is not None else None,
                    attempt=job.attempt, run=run.run_id, mem=result.mem)
        remove_file(night.spool.run_record_path(night.host, run.name))
        night.notifier.notify(result, job, night.config)
        self._since_prune += 1
        # as often as what a prune reads allows: jobsdone/ (keep) and every queued job's name (_waited_for)
        if self._since_prune >= max(50, night.config.keep // 10, len(night.index) // 100):
            self.prune(strays=False)

    def _waited_for(self) -> set[str]:
        """The keys queued jobs wait for (``--after``) among their owner's own jobs (another user's job cannot
        keep one's results past ``keep``): retention keeps those results, for a done dependency counts only
        while its result is kept. Each version of a file and its edits is read once."""
        night = self.night
        edits, known, waits = read_markers(night.spool.edit_dir), self._waits, {}
        for folder, name, ctime_ns in night.index.every():
            key = (name, ctime_ns, tuple(edits.get(name, ())))
            after = known.get(key)
            if after is None:
                owner = split_key(name)[0]
                after = tuple(dep for dep in waits_for(f"{folder}/{name}", name, key_uid(name), edits,
                                                       night.jobs.max_size) if split_key(dep)[0] == owner)
            waits[key] = after
        self._waits = waits
        return {dep for after in waits.values() for dep in after}

    def _requeue_retry(self, run: Run, attempt: Attempt, now: datetime) -> bool:
        night = self.night
        delay = retry_delay(night.config.retry_delay.total_seconds(), run.job.attempt)
        job = run.job._replace(attempt=run.job.attempt + 1, not_before=now + timedelta(seconds=delay),
                              tried=run.job.tried + (attempt,), priority=run.rank or run.job.priority)
        folder = night.spool.folder_for(run.rank, run.rank == 0)  # where it was claimed from, whatever its file says
        try:
            night.spool.ensure_queue_folder(folder)  # removed by someone: the retry must not be lost
            # a forgery at the job's key is swapped out in the same step: moved aside first, it
            # could be put back at once and keep the key from the retry
            displaced = create_displacing(folder, run.name, encode(job), run.owner.uid,
                                          owner=(run.owner.uid, run.owner.gid), durable=False)
        except Refused:
            night.log.event("retry-skipped", run.name, note="a new job of that name is queued")
            return False
        except OniteError as err:  # the claim and its record stay: the next driver spools the retry
            self.note_cannot_record(f"spooling the retry: {err}", run.name)
            return True
        if displaced:  # the forgery it swapped out
            self.move_aside(Path(displaced), run.name, None, "a file at this key that is not its owner's",
                            file_result=False)
        remove_file(night.running_dir / run.name)
        remove_file(night.spool.run_record_path(night.host, run.name))
        night.counts["retried"] += 1
        night.log.event("retry", run.name, user=run.owner.name, attempt=job.attempt, of=run.job.retries + 1,
                    after=f"{delay:g}s", reason=attempt.reason)
        return True

    def _requeue_run(self, run: Run) -> None:
        """Put ``run``'s claim back in its queue, then remove its record (which tells recovery where the
        claim stands until then). Raises as ``requeue_file``."""
        self.requeue_file(self.night.running_dir / run.name, run.name, run.rank)
        remove_file(run.record_path)

    def requeue_file(self, path: Path, name: str, rank: int) -> None:
        """Put a claim at ``path`` back in the queue folder of ``rank``; a forgery at its key there is replaced.
        Raises Refused: the owner queued a new job of that name meanwhile (the claim stays); NotFound,
        SpoolError, SpoolIOError: as the rename."""
        night = self.night
        folder = night.spool.folder_for(rank, rank == 0)
        night.spool.ensure_queue_folder(folder)
        target = folder / name
        with suppress(FileNotFoundError):
            if os.lstat(target).st_uid == key_uid(name):
                raise Refused(f"a new job {name!r} is already queued", f"the interrupted one stays in {path.parent}")
        change_state(name, JobState.RUNNING, JobState.QUEUED, path, target, "requeueing")

    def fail_unstarted(self, cand: Candidate, st: os.stat_result, reason: str) -> None:
        """File a queued job that can never run (its dependency failed) as failed."""
        night = self.night
        try:
            job, _ = read_job_file(cand.path, night.jobs.max_size)
        except Exception:  # noqa: BLE001 - what cannot be read is said by the reason
            job = None
        result = unrun_result(name=cand.name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.FAILED,
                              reason=reason, host=night.host, now=night.clock.now(), job=job, priority=cand.rank,
                              urgent=cand.rank == 0)
        if self.file_unrun(result, JobState.QUEUED, cand.path, "failing", gone_ok=True):
            night.forget(cand)
            night.log.event("failed", cand.name, user=result.user, reason=reason)
            night.notifier.notify(result, job, night.config)

    def file_unrun(self, result: Result, old: JobState, path: Path | None, why: str, *, gone_ok: bool = False) -> bool:
        """File a job that never ran (or whose end nobody saw): its result, its file moved from ``path``
        (None: gone) into jobsdone/, counted; False if that failed (logged). ``gone_ok``: a file gone
        already (a cancel or another host took it) counts as filed."""
        night = self.night
        try:
            write_result(night.spool, result)
            if path is not None:
                change_state(result.name, old, result.state, path, night.spool.done_dir / result.name, why)
        except OniteError as err:
            if not (gone_ok and isinstance(err, NotFound)):
                night.log.event("error", result.name, error=str(err))
                return False
        night.count(result)
        return True

    def move_aside(self, path: Path, name: str, st: os.stat_result | None, reason: str, *,
                   file_result: bool = True) -> Path | None:
        """Never run it, never delete it: move it to refused/ and say why in the log and (``file_result``)
        a result. ``st``: the file as judged (None: look now). Where it was moved, or None."""
        night = self.night
        if st is None:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return None
            except OSError as err:
                night.log.event("error", name, error=f"cannot look at {path}: {err.strerror}")
                return None
        target = night.spool.refused_path(name, night.clock.now())
        try:
            move_file(path, target, "moving aside")
        except NotFound:
            return None
        except OniteError as err:
            night.log.event("error", name, error=str(err))
            return None
        owner = user_name(st.st_uid)
        night.log.event("refused", name, owner=owner, reason=reason, moved_to=str(target.relative_to(night.spool.root)))
        night.metrics.one_more("refused")
        # a second link says nothing of who put it here (anyone may link a file they can write): its
        # inode's owner gets no result, no notice, and no failure a job of theirs could wait on
        if file_result and is_valid_key(name) and stat.S_ISREG(st.st_mode) \
                and st.st_nlink == 1 and key_uid(name) == st.st_uid:
            result = unrun_result(name=name, uid=st.st_uid, user=owner, state=JobState.FAILED,
                                  reason=f"refused: {reason}", host=night.host, now=night.clock.now())
            try:
                write_result(night.spool, result)
            except OniteError:
                return target
            night.notifier.notify(result, None, night.config)
        return target

    @contextmanager
    def guard(self, name: str, *paths: Path):
        """Whatever a user's file makes go wrong while it is looked at or started, the night goes on: the
        file is moved to refused/ (from the first of ``paths`` where it is), never retried forever."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - see the docstring; the traceback goes to stderr
            reason = f"onite could not handle it ({type(err).__name__}: {err})"
            self.night.log.event("error", name, error=reason, note="set aside in refused/; please report this")
            traceback.print_exc(file=sys.stderr)
            for path in paths:
                if os.path.lexists(path):
                    self.move_aside(path, name, None, reason)
                    break

    def put_back_unstarted(self, run: Run, why: str) -> None:
        """Nothing of ``run`` started, for nothing could be recorded: put it back, start nothing more."""
        try:
            self._requeue_run(run)
        except OniteError as err:
            why = f"{why}; and putting {run.name} back failed: {err} (recovery will)"
        self.note_cannot_record(why, run.name)

    def pause_starts(self, run: Run, err: str) -> None:
        """The executor cannot take jobs now: put this one back in its queue and start nothing for a
        while, PAUSE_FIRST doubling up to PAUSE_MAX. A job never fails for this."""
        night = self.night
        night.pause = min(max(night.pause * 2, PAUSE_FIRST), PAUSE_MAX)
        night.paused_until = night.clock.monotonic() + night.pause
        try:
            self._requeue_run(run)  # nothing was submitted
        except OniteError as move_err:
            night.log.event("start-failed", run.name, user=run.owner.name, reason=err)
            self.record(run, Outcome(reason=f"{err}; and requeueing it failed: {move_err}", never_started=True),
                        night.clock.now())
            return
        night.counts["requeued"] += 1
        night.log.event("executor-unavailable", run.name, reason=err, retry_in=f"{night.pause:g}s",
                        note="the job is back in its queue; no job starts before then")

    def note_cannot_record(self, why: str, name: str = "") -> None:
        """A record could not be written: start nothing more (said once, on stderr too: the log may be
        what cannot be written)."""
        if self.night.cannot_record is None:
            self.night.cannot_record = why
            self.night.metrics.one_more("cannot_record")
            self.night.log.event("cannot-record", name, error=why,
                             note="no job starts until runs can be recorded; running jobs go on")
            if self.night.log.echo is None:
                with suppress(OSError, ValueError):
                    print(f"onite: cannot record a run ({why}) — no job starts until it can; free space (or "
                          f"lift the quota or file-size limit, or mend the disk) and run onite run again",
                          file=sys.stderr)

    def prune(self, *, strays: bool = True) -> None:
        """Retention: keep the last ``keep`` finished jobs; ``strays``: remove what crashed writes left."""
        night = self.night
        self._since_prune = 0
        try:
            removed = prune(night.spool, night.config.keep, protect=set(night.running) | self._waited_for(),
                            strays=strays)
        except OniteError as err:
            night.log.event("error", error=str(err), note="retention")
            return
        if removed:
            night.log.event("pruned", removed=removed, keep=night.config.keep)
        if strays:
            try:
                # a dot-name's age is read from times the kernel stamps: compared with its clock
                placed = finish_filings(night.spool, time.time())
                leftovers = remove_temp_files(night.spool, time.time())
            except OniteError as err:
                night.log.event("error", error=str(err), note="retention of temporary files")
                return
            if placed:
                night.log.event("recovered", filed=placed, note="cancelled jobs a killed filer left between two moves")
            if leftovers:
                night.log.event("pruned", temporary=leftovers, note="files of writes that died (a crash or a kill)")
