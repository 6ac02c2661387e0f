"""The driver's side of cancelling: file the jobs users withdrew, honour the requests they left.

In cancel/, a non-empty file is a withdrawn job, filed as cancelled. An empty NAME@TOKEN is a request,
honoured if its owner may cancel NAME: a running job is stopped, a queued one withdrawn; one for a job
on another host is left for that host's driver, for a day at most.
"""

from __future__ import annotations

import os
import stat
import time

from onite.core.errors import OniteError, SpoolIOError
from onite.core.policy import may_touch
from onite.core.state import Stop
from onite.spool.cancels import NotAJob, file_withdrawn, tell_filed, withdraw
from onite.spool.files import remove_file
from onite.spool.accounts import user_name
from onite.spool.scan import Entry, cancel_inbox, find_queued, find_running

from onite.drain.finish import Finisher
from onite.drain.night import Night

FRESH_NS = 50_000_000  # an mtime this recent is looked at again: an entry made in the same tick may not show
REQUEST_KEPT_NS = 86400 * 10**9  # a request for a job another host runs waits this long for that host's driver


class CancelInbox:
    """Files withdrawn jobs and honours cancel requests, each time cancel/ changed."""

    def __init__(self, night: Night, finisher: Finisher) -> None:
        self.night = night
        self.finisher = finisher
        self._mtime = -1

    def process(self) -> None:
        """Look at cancel/ if it changed, and act on every entry in it."""
        night = self.night
        try:
            mtime = os.stat(night.spool.cancel_dir).st_mtime_ns
        except FileNotFoundError:
            return
        # the folder's mtime is the kernel's: compared with the kernel's clock
        if mtime == self._mtime and time.time_ns() - mtime > FRESH_NS:
            return
        self._mtime = mtime
        try:
            entries = cancel_inbox(night.spool)
        except OniteError:
            return
        if entries:
            # a job that ended on its own before its cancel was seen is filed as it ended
            self.finisher.file(self.finisher.reap())
        for entry in entries:
            with self.finisher.guard(entry.name):  # a user's entry never stops the night
                requester = user_name(entry.uid)
                if entry.size or not stat.S_ISREG(entry.mode):  # a job its owner withdrew (or something else)
                    self._file(entry.path, entry.name, requester)
                else:
                    self._honour(entry, requester)

    def _file(self, pending, name: str, requester: str) -> None:
        """File the withdrawn job at ``pending`` (cancel/NAME@TOKEN) as cancelled by ``requester``."""
        night = self.night
        try:
            filed = file_withdrawn(night.spool, pending, by=requester, now=night.clock.now())
        except NotAJob as err:
            night.log.event("refused", name, owner=requester, reason=str(err))
        except SpoolIOError as err:  # a full disk: it stays in cancel/ for a later look
            self.finisher.note_cannot_record(str(err), name)
        except OniteError as err:
            night.log.event("error", name, error=str(err))
        else:
            if filed is not None:
                tell_filed(filed, name, requester, night.log, night.count, night.notifier, night.config)

    def _honour(self, request: Entry, requester: str) -> None:
        """An empty cancel/NAME@TOKEN: cancel NAME if the requester may (docs/security.md)."""
        night = self.night
        name, own_only = request.name, night.config.own_only
        run = night.running.get(name)
        if run is None and name in night.ended:
            # it ended, not filed yet: kept (and looked at again) until it is, for a retry it is filed with
            self._mtime = -1
            return
        if run is not None:
            if may_touch(request.uid, run.owner.uid, own_only):
                night.runner.stop(run, Stop.CANCEL, by=requester)
                night.log.event("cancel", name, by=requester, was="running")
            else:
                night.log.event("cancel-refused", name, by=requester, owner=run.owner.name)
            remove_file(request.path)
            return
        for entry in find_queued(night.spool, name):
            if not may_touch(request.uid, entry.uid, own_only):
                night.log.event("cancel-refused", name, by=requester, owner=user_name(entry.uid))
                continue
            try:
                pending = withdraw(night.spool, entry)
            except OniteError:
                continue
            self._file(pending, name, requester)
        # a claim here that no run holds has ended, unfiled yet: the request came too late and goes with it
        if any(entry.host != night.host for entry in find_running(night.spool, name)) \
                and time.time_ns() - request.ctime_ns < REQUEST_KEPT_NS:
            return  # running on another host: its driver will honour the request
        remove_file(request.path)

