"""Filing what never ran: a queued job that can never run, and a file that must not (set aside).

A mixin of onite.drain.finish.Finisher (its driver): a job whose dependency
failed is filed as failed without running; a file a user can write that
must never run is moved to refused/ with one log line and, where it is its
owner's own job, a failed result; and whatever a queued file makes go wrong
while it is looked at or started sets it aside (``guard``), so that the
night goes on.
"""

from __future__ import annotations

import os
import stat
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from onite.core.errors import JobFormatError, NotFound, OniteError
from onite.core.names import is_valid_name
from onite.core.state import JobState, Result, unrun_result
from onite.spool.filecheck import BadFile
from onite.spool.files import change_state, move_file
from onite.spool.index import Candidate
from onite.spool.results import may_replace_result, write_result
from onite.spool.scan import user_name

if TYPE_CHECKING:
    from onite.drain.driver import Driver


class Refusals:
    """The finisher's side for jobs that never ran."""

    d: Driver

    def fail_unstarted(self, cand: Candidate, st: os.stat_result, reason: str) -> None:
        """A queued job that can never run (its dependency failed): file it as failed."""
        d, picker = self.d, self.d.picker
        job = picker.parsed.get(cand.name, (None, None))[1]
        if job is None:  # only the few near the head of the queue are kept parsed
            try:
                job, _ = picker.read_job(cand.path)
            except (OSError, JobFormatError, BadFile):
                job = None
        result = unrun_result(name=cand.name, uid=st.st_uid, user=user_name(st.st_uid), state=JobState.FAILED,
                              reason=reason, host=d.host, now=d.clock.now(), job=job, priority=cand.rank,
                              urgent=cand.rank == 0)
        if self.file_unrun(result, JobState.QUEUED, cand.path, "failing", gone_ok=True):
            picker.forget(cand)
            d.log.event("failed", cand.name, user=result.user, reason=reason)
            d.notifier.notify(result, job, d.config)

    def file_unrun(self, result: Result, old: JobState, path: Path, why: str, *, gone_ok: bool = False) -> bool:
        """File a job that never ran (or whose run nobody saw end): write its result, move it from
        ``path`` into jobsdone/, count it. False if that failed (logged). ``gone_ok``: a file that
        is gone already (a cancel or another host took it) counts as filed.
        """
        d = self.d
        try:
            write_result(d.spool, result)
            change_state(result.name, old, result.state, path, d.spool.done_dir / result.name, why)
        except OniteError as err:
            if not (gone_ok and isinstance(err, NotFound)):
                d.log.event("error", result.name, error=str(err))
                return False
        d.counts[str(result.state)] += 1
        return True

    def move_aside(self, path: Path, name: str, st: os.stat_result | None, reason: str, *,
                   file_result: bool = True) -> None:
        """Never run it, never delete it: move it to refused/ and say why, in the log and (unless not
        ``file_result``) a result."""
        d = self.d
        target = d.spool.refused_path(name, d.clock.now())
        try:
            move_file(path, target, "moving aside")
        except NotFound:
            return
        except OniteError as err:
            d.log.event("error", name, error=str(err))
            return
        owner = user_name(st.st_uid) if st else "?"
        d.log.event("refused", name, owner=owner, reason=reason, moved_to=str(target.relative_to(d.spool.root)))
        # a second link says nothing of who put it here (anyone may link a file they can write): its
        # inode's owner gets no result, no notice, and no failure a job of theirs could wait on
        if file_result and st is not None and is_valid_name(name) and stat.S_ISREG(st.st_mode) \
                and st.st_nlink == 1 and may_replace_result(d.spool, name, st.st_uid):
            result = unrun_result(name=name, uid=st.st_uid, user=owner, state=JobState.FAILED,
                                  reason=f"refused: {reason}", host=d.host, now=d.clock.now())
            try:
                write_result(d.spool, result)
            except OniteError:
                return
            d.notifier.notify(result, None, d.config)

    @contextmanager
    def guard(self, name: str, *paths: Path):
        """Whatever a queued file makes go wrong while it is looked at or started, the night goes
        on: the file is set aside (moved to refused/ from the first of ``paths`` where it is now)
        with one log line, and the driver moves on to the next job. A file a user can write must
        never stop the driver, and never make it retry the same failure forever."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - see the docstring; the traceback goes to stderr
            import traceback

            reason = f"onite could not handle it ({type(err).__name__}: {err})"
            self.d.log.event("error", name, error=reason, note="set aside in refused/; please report this")
            traceback.print_exc(file=sys.stderr)
            for path in paths:
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                self.move_aside(path, name, st, reason)
                break

