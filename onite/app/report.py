"""``onite report``: the morning report -- what failed and why, what still waits, what ran when.

A job whose record was pruned is rebuilt from its log lines. A failed job's last lines are read only for its
owner and root, from a regular file of its user written during that run. Why a job waits is onite.drain.verdicts'
answer, from the caller's own files among the first EXAMINE queued; for a job that could start, the drain's end."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timedelta, timezone
from types import MappingProxyType

from onite.app import drains as dr
from onite.app.common import label, me
from onite.app.listing import running_views, waits_in_slurm
from onite.core.record import Record
from onite.drain.heartbeat import draining_hosts, driver_gone
from onite.drain.nextdrain import plan
from onite.drain.verdicts import EXAMINE, waiting_jobs
from onite.spool.log import CANNOT_RECORD
from onite.spool.outputs import run_tail
from onite.spool.paths import SpoolDir
from onite.spool.results import read_result, read_results
from onite.spool.accounts import user_name
from onite.spool.scan import is_live, key_uid, queued_stats, uid_of
from onite.core.config import MAX_PRIORITIES, MAX_RETRIES
from onite.core.resources import MAX_MEM
from onite.core.errors import InvalidInput, NotFound, OniteError, Refused, bad_value
from onite.core.names import is_valid_key, shown
from onite.core.cells import nodes_text, outcome_text
from onite.core.jobview import JobView, outcome_counts, result_view
from onite.core.policy import owner_or_root
from onite.core.queue import reason_as_read
from onite.core.safetext import printable
from onite.core.schedule import next_drain
from onite.core.timeparse import EARLIEST, LATEST, local_time, parse_duration, parse_when

SHOWN_FAILURES = 20  # failures told in full (reason, output, command); the table has every one
SHOWN_OTHERS = 10  # other users' failures named in the report's one line of them; the table has every one
SHOWN_WAITING = 10  # jobs not finished listed on a terminal; JSON has the first verdicts.EXAMINE
TAIL_LINES = 5  # of a failed job's output, when few jobs failed (fewer lines when many did)
RECENT = timedelta(hours=24)  # the window when onite.log tells of no drain
NIGHT_STARTS = time(12, 0)  # a night runs from noon to the next noon
EMPTY: Mapping = MappingProxyType({})  # a default no report may change
TAIL_BYTES = 8192  # read from the end of a failed job's output: enough for the few lines shown
TAIL_WIDTH = 200  # a longer line of output is cut (a terminal crops at its width)
PRIVATE = "another user's job: other details private"


class ReportData(Record):
    """The jobs of one morning report, the window they come from, and what the window left (defaults read-only)."""

    spool: str
    since: datetime  # the window's start
    until: datetime  # its end: now, unless --night or --until, or the last drain ended
    now: datetime
    jobs: list[JobView]  # the reader's own first (unless root); within each, failures first, then in the order they started
    night: date | None = None
    user: str | None = None
    damaged: Sequence[str] = ()  # names of result records that could not be read
    kind: str = "since"  # "drain": the last drain session; "night": --night; "since": a time range
    drains: Sequence = ()  # onite.app.drains.Drain, of the window
    # runs (``run_key``: a name may have run more than once in a window) rebuilt from the log ...
    pruned: set[tuple] = frozenset()  # ... for their records were pruned
    earlier: set[tuple] = frozenset()  # ... for a later run of the name replaced their record
    unrun: set[tuple] = frozenset()  # runs that never started a process: every job with no start is one
    reruns: Mapping = EMPTY  # (name, user) -> the runs of the window before the one shown
    # run_key -> the attempts that ran of a job whose latest attempt never started (a retry cancelled as it waited)
    tried: Mapping = EMPTY
    tries: Mapping[str, int] = EMPTY  # attempts a retried job was allowed
    tails: Mapping = EMPTY  # Tail of the failures told in full, by run_key
    again: frozenset = frozenset()  # names of the failures told in full that are queued or running again now
    keep: int = 0  # what pruned: the log's last `pruned` line from the window's start says, else onite.toml's
    current: bool = False  # no drain started after the window: the queue now is what it left
    waiting: Sequence[dict] = ()  # jobs not finished: running, queued, held, refused
    left: Mapping[str, int] = EMPTY  # how many: queued, since, held, running, refused
    next_drain: datetime | None = None
    reader: int = 0  # the uid the report is read as

    def may_read(self, uid: int) -> bool:
        """May the reader read what ``uid`` owns (a job's output, its queued file)? Their own; root, everyone's."""
        return owner_or_root(self.reader, uid)

    def never_ran(self, job: JobView) -> bool:
        return run_key(job) in self.unrun

    def was_pruned(self, job: JobView) -> bool:
        return run_key(job) in self.pruned

    def was_replaced(self, job: JobView) -> bool:
        return run_key(job) in self.earlier

    def is_damaged(self, job: JobView) -> bool:
        return job.name in self.damaged and not self.was_replaced(job)

    def from_log(self, job: JobView) -> bool:
        """Is this run told by the log alone, or did it never run? Then no output is read, and no restart offered."""
        return self.was_pruned(job) or self.never_ran(job) or self.was_replaced(job) or self.is_damaged(job)

    @property
    def counts(self) -> dict[str, int]:
        return outcome_counts(self.jobs)

    @property
    def timed_out(self) -> int:
        return sum(1 for job in self.jobs if is_timeout(job))

    @property
    def draining(self) -> bool:
        return any(d.ended is None for d in self.drains)

    @property
    def failures(self) -> list[JobView]:
        return [job for job in self.jobs if job.state == "failed"]

    @property
    def hosts(self) -> dict[str, dict]:
        """Per host: how many jobs it ran, how they ended, its busy time and its share of the jobs."""
        table: dict[str, dict] = {}
        ran = [j for j in self.jobs if not self.never_ran(j)]
        for job in ran:
            row = table.setdefault(job.host or "?", {"jobs": 0, "done": 0, "failed": 0, "cancelled": 0,
                                                      "busy_seconds": 0.0})
            row["jobs"] += 1
            row[job.state] = row.get(job.state, 0) + 1
            row["busy_seconds"] += job.duration or 0.0
        for row in table.values():
            row["share"] = row["jobs"] / len(ran)
        return dict(sorted(table.items()))


def run_key(job: JobView) -> tuple:
    """One run of a job in a report: its name, owner and end."""
    return job.name, job.user, job.finished


def is_timeout(job: JobView) -> bool:
    return job.state == "failed" and job.reason == "timeout"  # Outcome.describe's word for it


def night_window(day: date, ref: datetime) -> tuple[datetime, datetime]:
    """The night of ``day``: [day 12:00, day+1 12:00), each noon with its own UTC offset, in ``ref``'s zone (a
    fixed offset stands for the machine's zone)."""
    noons = (datetime.combine(day, NIGHT_STARTS), datetime.combine(day + timedelta(days=1), NIGHT_STARTS))
    if ref.tzinfo is not None and not isinstance(ref.tzinfo, timezone):
        # each as a fixed offset: datetimes sharing a zoneinfo subtract and compare by their wall clocks
        fixed = [noon.replace(tzinfo=ref.tzinfo) for noon in noons]
        return tuple(noon.astimezone(timezone(noon.utcoffset())) for noon in fixed)
    return local_time(noons[0], ref), local_time(noons[1], ref)


def night_of(when: datetime) -> date:
    local = when.astimezone()
    return local.date() - timedelta(days=local.time() < NIGHT_STARTS)


def morning_before(when: datetime, ref: datetime) -> datetime:
    """The start of the night ``when`` belongs to: the noon at or before it, local time."""
    return night_window(night_of(when), ref)[0]


def parse_night(text: str, now: datetime) -> date:
    """``YYYY-MM-DD``, ``today`` or ``yesterday`` (``now``'s local date); else InvalidInput."""
    raw = text.strip().lower()
    if raw in ("today", "yesterday"):
        return now.date() - timedelta(days=raw == "yesterday")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            pass
        else:
            if EARLIEST.year <= day.year < LATEST.year - 1:  # its night must end before the last time onite takes
                return day
            raise bad_value("--night", text, f"a date between the years {EARLIEST.year} and {LATEST.year - 2}")
    raise bad_value("--night", text, "a date such as 2026-11-22, today or yesterday")


def parse_since(text: str | None, now: datetime, *, option: str = "--since") -> datetime:
    """A duration before ``now``, the last time of day before it, or a date-time; None: 24 hours before."""
    if not text:
        return now - RECENT
    with contextlib.suppress(InvalidInput):
        return now - parse_duration(text, what=option)
    bad = bad_value(option, text, "a duration such as 12h, a time such as 19:00, or a date-time such as 2026-11-21T19:00")
    raw = text.strip().lower()
    if raw.startswith(("+", "tomorrow")):  # no report covers the future
        raise bad
    try:
        when = parse_when(text, now)
    except InvalidInput:
        raise bad from None
    if when > now and re.fullmatch(r"\d{1,2}:\d{2}", raw):  # "19:00" means the last 19:00, not the next one
        when -= timedelta(days=1)
    return when


def build(spool: SpoolDir, now: datetime, since: str | None = None, *, night: str | None = None,
          until: str | None = None, user: str | None = None, records: bool = True) -> ReportData:
    """The report of a window (the last drain session, the ``night`` of a date, or ``since`` to ``until``), of
    one ``user``'s jobs or everyone's. Without ``records``: every job as onite.log tells it (far cheaper): no result
    record read but those of refused files, no output, nothing unfinished."""
    if user is not None and not user.strip():
        raise InvalidInput("--user is empty", "name a user, e.g. --user alice, or leave it out for everyone's jobs")
    if night is not None and (since is not None or until is not None):
        raise InvalidInput(f"--night and {'--since' if since is not None else '--until'} cannot be used together",
                           "use --night DATE for a night (noon to noon), or --since/--until for a time range")
    reader = os.geteuid()
    kind, day, start, end, drains, events, every_drain = _window(spool, now, since, night, until)
    # the log's times are whole seconds: a job filed in the drain's last second is inside it
    results_end = end + timedelta(seconds=1) if kind == "drain" else end
    told = dr.job_events(events, start, end)

    # a drain that started in the second an earlier one filed a job: that job is in the window only
    # if the window's own lines tell of its run (a job that never ran, e.g. a cancel the driver files as it
    # starts or a file it refuses, has no run id: by its name and owner)
    told_runs = {e.fields.get("run") or (e.name, e.fields.get("user", e.fields.get("owner", ""))) for e in events
                 if (e.event in dr.JOB_LINES or e.event == "refused") and e.when == start} if kind == "drain" else set()

    def in_window(record) -> bool:
        if kind == "drain" and record.finished < start + timedelta(seconds=1):
            return (record.run_id or (record.name, record.user)) in told_runs
        return any(when is not None and start <= when < results_end for when in (record.finished, record.started))

    def wanted(owner: str) -> bool:
        return user is None or owner == user

    damaged: list[str] = []
    results = [r for r in (read_results(spool, damaged) if records else refused_results(spool, told.refused))
               if in_window(r)]
    recorded_runs = {(r.name, r.user) for r in results}
    views = [result_view(r, me()) for r in results if wanted(r.user)]
    # a job the log tells of and no record does: by name and owner
    pruned = [log_view(final, told.starts.get(key)) for key, final in told.finals.items() if key not in recorded_runs]
    pruned = [view for view in pruned if wanted(view.user)]
    # a job run again in the window (restarted, spooled anew) is shown once, as its latest run; the runs
    # before it are noted on it (``reruns``), never counted
    latest = {(v.name, v.user) for v in views + pruned}
    earlier = [view for view in (log_view(final, start) for final, start in told.earlier) if wanted(view.user)]
    reruns: dict[tuple[str, str], list[JobView]] = {}
    for view in earlier:
        if (view.name, view.user) in latest:
            reruns.setdefault((view.name, view.user), []).append(view)
    earlier = [view for view in earlier if (view.name, view.user) not in latest]
    # in one second of the log (whole seconds), a job that ran comes before one that never did: a dependant
    # failed for it is filed after it, as the records' finer times say
    jobs = sorted(views + pruned + earlier,
                  key=lambda j: (j.state != "failed", j.started or j.finished, j.started is None, j.name))
    if user is not None and not jobs and uid_of(user) is None:  # a typo, not a quiet night
        raise InvalidInput(f"--user {user!r}: no such user here, and no job of that name's in the window",
                           "check the name: onite list --all shows whose jobs there are")
    if user is None and reader != 0:  # a user's morning starts with what is theirs to act on
        jobs.sort(key=lambda job: job.uid != reader)
    unrun = {run_key(job) for job in views + pruned if never_ran(job, told)}
    unrun |= {run_key(job) for job in earlier if job.started is None}  # its own start line, if any
    # (a record of a start that failed holds that attempt itself: only those before the latest are earlier)
    tried = {key: earlier_tries for r in results if (key := (r.name, r.user, r.finished)) in unrun
             and (earlier_tries := tuple(a for a in r.attempts if a.attempt < r.attempt))}
    # a damaged record's job is rebuilt from the log too, but was not pruned: its output may well be kept
    data = ReportData(str(spool.root), start, end, now, jobs, night=day, user=user, kind=kind, drains=drains,
                      pruned={run_key(v) for v in pruned if v.name not in damaged}, tries=told.tries,
                      keep=dr.pruned_keep(e for e in reversed(events) if e.when >= start) or spool.config.keep,
                      reader=reader, damaged=damaged, earlier={run_key(v) for v in earlier},
                      reruns=reruns, unrun=unrun, tried=tried, current=not any(d.started > end for d in every_drain))
    # a failure restarted (or spooled anew) since is queued or running again: no restart is its next step
    data = data._replace(again=frozenset(job.name for job in data.failures[:SHOWN_FAILURES] if queued_again(spool, job)))
    if not records:
        return data
    failures = data.failures
    # the lines are shared among the failures told in full: others' are only named, and take none
    readable = sum(data.may_read(job.uid) for job in failures)
    lines = TAIL_LINES if readable <= 3 else 2 if readable <= 8 else 0
    data = data._replace(tails={run_key(job): read_tail(spool, data, job, lines) for job in failures[:SHOWN_FAILURES]
                                if not data.from_log(job)})
    if data.current:
        recorded = {r.name for r in results}
        refused = [e for e in told.refused if e.name not in recorded and wanted(e.fields.get("owner", ""))]
        data = unfinished(data, spool, refused)
    return data


def queued_again(spool: SpoolDir, job: JobView) -> bool:
    """Is a job of ``job``'s name queued or running now (restarted, or spooled anew, since it ended)?"""
    try:
        return is_valid_key(job.name) and is_live(spool, job.name)
    except OniteError:  # a folder that cannot be read: the restart is offered
        return False


def refused_results(spool: SpoolDir, refused: Sequence) -> list:
    """The result records of the files the log says were refused, where the driver filed one: a report from the
    log alone reads these few, to count such a failure as the full report does."""
    found = []
    for event in refused:
        if not is_valid_key(event.name):
            continue
        with contextlib.suppress(OniteError):
            record = read_result(spool, event.name)
            if record is not None and record.reason.startswith("refused: "):
                found.append(record)
    return found


def _window(spool: SpoolDir, now: datetime, since: str | None, night: str | None, until: str | None):
    """The window's kind, date, start and end, its drains, the log's events from its start, every drain."""
    day: date | None = None
    if night is not None:
        kind, day = "night", parse_night(night, now)
        start, end = night_window(day, now)
    elif since is not None or until is not None:
        kind = "since"
        end = parse_since(until, now, option="--until") if until is not None else now
        start = parse_since(since, end)
        if start >= end:
            raise (InvalidInput(f"--since {since} is not before --until {until}", "give a --since before the --until")
                   if until is not None else InvalidInput(f"--since {since} is in the future", "give a time before now"))
    else:
        kind, start, end = "drain", None, None
    events = dr.collect(dr.read_back(dr.log_paths(spool.log_path)), start, lambda when: morning_before(when, now), now)
    every_drain = dr.drains_of(events, draining_hosts(spool, now))
    if kind != "drain":
        within = [d for d in every_drain if d.started < end and (d.ended is None or d.ended >= start)]
        return kind, day, start, end, within, events, every_drain
    session = dr.last_session(every_drain, _night_opened(spool, now))
    if session is None:  # no drain in the log: the last day
        return "since", None, now - RECENT, now, [], events, every_drain
    events = events[min(d.at for d in session.drains):]  # not a line of the second before it that an earlier drain wrote
    return kind, None, session.start, session.end or now, list(session.drains), events, every_drain


def _night_opened(spool: SpoolDir, now: datetime):
    """When the night a time belongs to opened: the first time of ``schedule`` since the noon before it; None
    before that, or with no schedule."""

    def opened(when: datetime) -> datetime | None:
        try:
            first = next_drain(spool.config.schedule, morning_before(when, now) - timedelta(microseconds=1))
        except InvalidInput:  # a bad schedule is said by the driver and status; the report goes by the drains
            return None
        return first if first is not None and first <= when else None

    return opened


def log_view(final, start) -> JobView:
    """A finished job as its final log line tells it, with its run's start line if any (none: never started)."""
    fields = final.fields
    seconds = _number(fields.get("seconds"))
    started, finished = None, final.when
    if start is not None and start.fields.get("attempt") == fields.get("attempt") and start.when <= final.when:
        # the log's times are whole seconds; its ``seconds`` field is the run's length
        started = start.when
        if seconds is not None and 0 <= seconds <= (final.when - start.when).total_seconds() + 1:  # false for nan, inf
            finished = start.when + timedelta(seconds=seconds)
    priority = start.fields.get("priority") if start is not None else None
    user = fields.get("user") or (start.fields.get("user") if start is not None else "") or "?"
    reason = reason_as_read(fields.get("reason", ""), user, me())
    if final.event == "cancelled" and not reason:
        reason = f"cancelled by {fields.get('by', '?')}"
    uid = key_uid(user)  # -1: no such account now
    return JobView(name=final.name, uid=-1 if uid is None else uid, user=user, state=final.event,
                   priority=_whole(priority, MAX_PRIORITIES), urgent=priority == "urgent",
                   submitted=started or final.when, host=final.host, started=started, finished=finished,
                   exit_code=dr.integer(fields.get("exit")), reason=reason,
                   attempt=_whole(fields.get("attempt"), MAX_RETRIES + 1), mem=_whole(fields.get("mem"), MAX_MEM))


def pruned_run(spool: SpoolDir, key: str) -> tuple[JobView, int | None] | None:
    """Job ``key``'s last run as the log's final line tells it, with the ``keep`` of the log's last prune (None:
    no line says); None: the log tells no end of it. Read from the log's end, only this far."""
    prunes = []
    for event in dr.read_back(dr.log_paths(spool.log_path)):
        if event.event == "pruned":
            prunes.append(event)
        elif event.name == key and event.event in dr.FINAL:
            return log_view(event, None), dr.pruned_keep(prunes)
    return None


def pruned_reason(view: JobView, keep: int | None) -> str:
    """``exit 3 at 2026-12-01 04:46:50; its record and output were pruned (keep = 50)``."""
    why = outcome_text(view) if view.state != "done" else ""
    pruned = "its record and output were pruned" + (f" (keep = {keep})" if keep else "")
    return f"{why + ' ' if why else ''}at {view.finished.astimezone():%Y-%m-%d %H:%M:%S}; {pruned}"


def pruned_output(spool: SpoolDir, key: str, reader: int) -> OniteError | None:
    """Why ``onite output`` has nothing of job ``key``, neither queued, running nor kept: how it ended, as the
    log tells it (another user's: Refused); None: the log tells no end of it."""
    told = pruned_run(spool, key)
    if told is None:
        return None
    said = shown(key, user_name(reader))
    if not owner_or_root(reader, told[0].uid):
        return Refused(f"the output of {said!r} belongs to {told[0].user}", "only its owner and root may read it")
    return NotFound(f"no output of job {said!r} is kept: {told[0].state} ({pruned_reason(*told)})",
                    "jobsdone/ keeps each user's last keep finished jobs (onite.toml); onite log tells the rest")


def _whole(text: str | None, most: int) -> int | None:
    """A log field that holds a number from 1 to ``most``, as an int; None for anything else."""
    value = dr.integer(text) if text and text.isascii() and text.isdigit() else None
    return value if value is not None and 1 <= value <= most else None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def never_ran(job: JobView, told) -> bool:
    """Did the job end without a process of it ever starting? A record of a job onite could not start has a
    start time but no exit status, and the log no start line for that attempt."""
    if job.started is None:
        return True
    if job.exit_code is not None or job.signal is not None:
        return False
    final = told.finals.get((job.name, job.user))
    start = told.starts.get((job.name, job.user))
    return final is not None and (start is None or start.fields.get("attempt") != final.fields.get("attempt"))


class Tail(Record):
    """The end of a failed job's output, as its reader may see it."""

    lines: tuple[str, ...] = ()
    private: bool = False  # someone else's
    kept: bool = True  # false: no output of that run is kept (removed, or replaced by a later run's)


def read_tail(spool: SpoolDir, data: ReportData, job: JobView, lines: int) -> Tail:
    """The last ``lines`` lines of what ``job`` printed: its stderr when it kept that apart, else its output."""
    if not data.may_read(job.uid):
        return Tail(private=True)
    path = spool.stderr_path(job.name) if job.stderr == "separate" else spool.output_path(job.name)
    raw = run_tail(path, job.uid, job.started, job.finished, max_bytes=TAIL_BYTES, lines=lines)
    if raw is None:
        return Tail(kept=False)  # removed, or another run's file (a later job of that name, or one before)
    text = raw.decode("utf-8", "replace").splitlines()
    # a retry's output follows the earlier attempts', after its marker line (onite.exec.runner.run_outputs)
    marker = f"[onite] attempt {job.attempt} of {job.name.partition(':')[2]}, "
    text = text[max((i + 1 for i, line in enumerate(text) if line.startswith(marker)), default=0):]
    return Tail(lines=tuple(line if len(line) <= TAIL_WIDTH else line[:TAIL_WIDTH - 1] + "…"
                            for line in map(printable, text)))


def unfinished(data: ReportData, spool: SpoolDir, refused: list) -> ReportData:
    """``data`` with what its window left: running, queued (with why each waits), held, ``refused`` (log lines)."""
    owner = functools.cache(user_name)
    queue = [row for row in queued_stats(spool) if data.user is None or owner(row[3]) == data.user]
    # the log's times are whole seconds: a job spooled in the drain's last second came before its end
    end = data.until + timedelta(seconds=1) if data.kind == "drain" else data.until
    end_ns = int(end.timestamp() * 1e9)
    held = sum(row[4] for row in queue)
    since = sum(not row[4] and row[1] > end_ns for row in queue)
    running = [v for v in running_views(spool) if data.user is None or v.user == data.user]
    left = {"queued": len(queue) - held - since, "since": since, "held": held, "running": len(running),
            "refused": len(refused)}

    def waiting_row(name, user, uid, priority, urgent, state, reason, kind=None, command=None) -> dict:
        return {"name": label(name), "user": user, "uid": uid, "priority": priority, "urgent": urgent,
                "state": state, "kind": state if kind is None else kind, "reason": reason, "command": command}

    gone = functools.cache(lambda host: driver_gone(spool, host, data.now))
    waiting = [waiting_row(v.name, v.user, v.uid, v.priority, v.urgent, "running",
                           running_reason(v, gone(v.host), data.drains)) for v in running]
    head = queue[:EXAMINE]
    why = {verdict["name"]: verdict for verdict in waiting_jobs(spool, head, data.now, euid=data.reader)}
    last = max(data.drains, key=lambda d: d.ended or data.now, default=None)
    for rank, ctime_ns, name, uid, held in head:
        mine = data.may_read(uid)
        verdict = why.get(name)
        if verdict is None:  # it could start now, or it is another user's and not held: its file is private
            kind, reason = "left", left_reason(last, ctime_ns > end_ns, ready=mine)
        else:
            kind, reason = verdict["kind"], verdict["reason"]
        state = "held" if held else "queued"
        if not mine:  # "held: held (another user's …)" said nothing twice
            reason = PRIVATE if reason == state else f"{reason} ({PRIVATE})"
        waiting.append(waiting_row(name, owner(uid), uid, rank or None, rank == 0, state, reason, kind,
                                   f"onite release {label(name)}" if state == "held" and mine else None))
    waiting += [waiting_row(e.name, e.fields.get("owner", "?"), None, None, False, "refused",
                            e.fields.get("reason", "")) for e in refused]
    # only a drain something will start (a daemon, the timer, an installed cron entry), as status says
    starter = plan(spool, data.now).next
    return data._replace(left=left, waiting=waiting, next_drain=starter.when if starter else None)


def running_reason(view, gone: str, drains) -> str:
    """``running on vm since 20:14``, ``running in Slurm on node n1 since 20:14, handed over by vm``; for a claim
    no live driver watches, what its run record says of it, and ``gone``."""
    if not gone:
        since = f" since {view.started.astimezone():%H:%M}" if view.started else ""
        if waits_in_slurm(view):
            return f"{view.reason}, handed over by {view.host}"
        if view.nodes:
            return f"running in Slurm on {nodes_text(view.nodes)}{since}, handed over by {view.host}"
        return f"running on {view.host}{since}"
    if view.finished:
        what = f"ended at {view.finished.astimezone():%H:%M}"
    elif waits_in_slurm(view):
        what = f"handed to Slurm by {view.host}, {view.reason} when it last looked"
    else:
        what = f"started on {view.host}" + (f" at {view.started.astimezone():%H:%M}" if view.started else "")
    last = max((d for d in drains if d.host == view.host), key=lambda d: d.started, default=None)
    why = " (the drain stopped, as it could not record a run)" if last is not None and last.reason == CANNOT_RECORD else ""
    return f"{what}, not filed{why}; {gone}"


def left_reason(last, spooled_after: bool, *, ready: bool) -> str:
    """Why a job that could start (``ready``; else: private) is still queued after the window's ``last`` drain."""
    if spooled_after:
        return "spooled after the drain"
    ends = {"window closed": "left when the window closed" + (f" at {last.until}" if last and last.until else ""),
            "stopped": "left when the drain was stopped",
            CANNOT_RECORD: "left when the drain stopped, as it could not record a run (a full disk?)"}
    left = ends.get(last.reason) if last is not None else None
    if left:
        return f"{'ready; ' if ready else ''}{left}"
    if not ready:
        return "waits"
    running = last is not None and last.ended is None
    return f"ready: waits for {'a free slot of the drain running now' if running else 'the next drain'}"
