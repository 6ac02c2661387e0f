"""``onite report``: the morning report -- what failed and why, what still waits, what ran when.

The window (``build``):

- by default, the last drain session (onite.drains): every drain, on any host,
  since the morning before the latest drain that ran a job, to the end of the
  last one; with no drain in onite.log, the last 24 hours;
- ``--night DATE``: the night of DATE, from noon that day to noon the next,
  local time;
- ``--since WHEN`` and ``--until WHEN``: from a time (or a duration before the
  end) to another (default: now).

A job belongs to the window when it finished in it or started in it;
``--user`` keeps one user's jobs. The jobs are those the window's result
records or its log lines say finished: jobsdone/ keeps the last ``keep``
results but onite.log every event, so a job whose record was pruned is
rebuilt from its log lines (its output went with its record) and counted as
pruned. Failures come first.

What is not finished -- left queued, held, running, refused -- is shown when
no drain started after the window, so that the queue now is what the window
left. Why a queued job waits is onite.status.waiting_jobs's answer, the
driver's own rule (onite.queue.evaluate), read only where status may read it.

A failed job's last lines of output are read as the caller: for the caller's
own jobs (root: anyone's), from the file of that run only (owned by the job's
user, written during the run, never through a symlink). Anyone else is told
the output is private. The HTML page (onite.reportpage), meant to be shared,
never holds output.

Invariant: nothing here writes; rich is imported only by ``render``, so that
``--json`` never loads it.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone

from onite import spool as sp
from onite.cells import human_duration, priority_label
from onite.errors import InvalidInput
from onite.listing import JobView, outcome_counts, result_view
from onite.safetext import printable
from onite.state import signal_name

SHOWN_FAILURES = 20  # failures told in full (reason, output, command); the table has every one
SHOWN_WAITING = 10  # jobs not finished listed on a terminal; JSON has the first status.EXAMINE
TAIL_LINES = 5  # of a failed job's output, when few jobs failed (fewer lines when many did)
TAIL_BYTES = 8192
TAIL_WIDTH = 200  # a longer line of output is cut (a terminal crops at its width)
RECENT = timedelta(hours=24)  # the window when onite.log tells of no drain


@dataclass(frozen=True)
class Tail:
    """The end of a failed job's output, as its reader may see it: ``private`` when it is someone
    else's; ``stream`` "stderr" when the job kept stderr apart, else "output"."""

    lines: tuple[str, ...] = ()
    private: bool = False
    stream: str = "output"
    kept: bool = True  # false: no output of that run is kept (removed, or replaced by a later run's)


@dataclass
class ReportData:
    """The jobs of one morning report, the window they come from, and what the window left."""

    spool: str
    since: datetime  # the window's start
    until: datetime  # its end: now, unless --night or --until, or the last drain ended
    now: datetime
    jobs: list[JobView]  # failures first, then in the order they started
    night: date | None = None
    user: str | None = None
    kind: str = "since"  # "drain": the last drain session; "night": --night; "since": a time range
    drains: list = field(default_factory=list)  # onite.drains.Drain, of the window
    pruned: set[str] = field(default_factory=set)  # jobs rebuilt from the log: their records were pruned
    unrun: set[str] = field(default_factory=set)  # jobs that never started a process
    tries: dict[str, int] = field(default_factory=dict)  # attempts a retried job was allowed
    tails: dict[str, Tail] = field(default_factory=dict)  # of the failures told in full
    keep: int = 0
    current: bool = False  # no drain started after the window: the queue now is what it left
    waiting: list[dict] = field(default_factory=list)  # jobs not finished: running, queued, held, refused
    left: dict[str, int] = field(default_factory=dict)  # how many: queued, since, held, running, refused
    next_drain: datetime | None = None
    reader: int = 0  # the uid the report is read as

    @property
    def counts(self) -> dict[str, int]:
        return outcome_counts(self.jobs)

    @property
    def timed_out(self) -> int:
        return sum(1 for job in self.jobs if is_timeout(job))

    @property
    def draining(self) -> bool:
        """Is a drain of the window still running?"""
        return any(d.ended is None for d in self.drains)

    @property
    def failures(self) -> list[JobView]:
        return [job for job in self.jobs if job.state == "failed"]

    @property
    def hosts(self) -> dict[str, dict]:
        """Per host: how many jobs it ran, how they ended, its busy time and its share of the jobs."""
        table: dict[str, dict] = {}
        ran = [j for j in self.jobs if j.started is not None and j.name not in self.unrun]
        for job in ran:
            row = table.setdefault(job.host or "?", {"jobs": 0, "done": 0, "failed": 0, "cancelled": 0,
                                                      "busy_seconds": 0.0})
            row["jobs"] += 1
            row[job.state] = row.get(job.state, 0) + 1
            row["busy_seconds"] += job.duration or 0.0
        for row in table.values():
            row["share"] = row["jobs"] / len(ran)
        return dict(sorted(table.items()))

    @property
    def span(self) -> tuple[datetime, datetime]:
        """From the first start (or end, for a job that never ran) to the last end: the timeline's extent."""
        if not self.jobs:
            return self.since, self.until
        return min(j.started or j.finished for j in self.jobs), max(j.finished for j in self.jobs)


def is_timeout(job: JobView) -> bool:
    return job.state == "failed" and job.reason == "timeout"  # Outcome.describe's word for it


# ---- the window ------------------------------------------------------------------------

NIGHT_STARTS = time(12, 0)  # a night runs from noon to the next noon


def night_window(day: date, ref: datetime) -> tuple[datetime, datetime]:
    """The night of ``day``: [day 12:00, day+1 12:00) as aware datetimes, each noon with its own UTC offset
    (23 or 25 hours across a change of daylight saving time).

    ``ref`` gives the zone: a zone with rules (zoneinfo) is used as is; a fixed offset, as
    ``datetime.now().astimezone()`` carries, stands for the machine's zone (TZ).
    """
    from onite.timeparse import local_time

    noons = (datetime.combine(day, NIGHT_STARTS), datetime.combine(day + timedelta(days=1), NIGHT_STARTS))
    if ref.tzinfo is not None and not isinstance(ref.tzinfo, timezone):
        # each as a fixed offset: datetimes sharing a zoneinfo subtract and compare by their wall clocks
        fixed = [noon.replace(tzinfo=ref.tzinfo) for noon in noons]
        return tuple(noon.astimezone(timezone(noon.utcoffset())) for noon in fixed)
    return local_time(noons[0], ref), local_time(noons[1], ref)


def night_of(when: datetime) -> date:
    """The date of the night ``when`` belongs to (the night of D runs from D 12:00 to D+1 12:00)."""
    local = when.astimezone()
    return local.date() - timedelta(days=local.time() < NIGHT_STARTS)


def morning_before(when: datetime, ref: datetime) -> datetime:
    """The start of the night ``when`` belongs to: the noon at or before it, local time."""
    return night_window(night_of(when), ref)[0]


def parse_night(text: str, now: datetime) -> date:
    """``YYYY-MM-DD``, ``today`` or ``yesterday`` (``now``'s local date).

    Raises:
        InvalidInput: none of those.
    """
    raw = text.strip().lower()
    if raw in ("today", "yesterday"):
        return now.date() - timedelta(days=raw == "yesterday")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
        try:
            return date.fromisoformat(raw)
        except ValueError:
            pass
    raise InvalidInput(f"bad --night {text!r}", "write a date such as 2026-11-22, today or yesterday")


def parse_since(text: str | None, now: datetime, *, option: str = "--since") -> datetime:
    """A duration before ``now``, a time of day (``19:00``: the last 19:00 before ``now``) or a date-time
    (as it is); None: 24 hours before ``now``.

    Raises:
        InvalidInput: neither a duration nor a time.
    """
    if not text:
        return now - RECENT
    from onite.timeparse import parse_duration, parse_when

    try:
        return now - parse_duration(text, what=option)
    except InvalidInput:
        pass
    raw = text.strip().lower()
    if raw.startswith(("+", "tomorrow")):  # forms of a time to come: no report covers the future
        raise _bad_time(option, text)
    try:
        when = parse_when(text, now)
    except InvalidInput:
        raise _bad_time(option, text) from None
    if when > now and re.fullmatch(r"\d{1,2}:\d{2}", raw):  # "19:00" means the last 19:00, not the next one
        when -= timedelta(days=1)
    return when


def _bad_time(option: str, text: str) -> InvalidInput:
    return InvalidInput(f"bad {option} {text!r}",
                        "write a duration such as 12h, a time such as 19:00, or a date-time such as 2026-11-21T19:00")


def build(spool: sp.Spool, now: datetime, since: str | None = None, *, night: str | None = None,
          until: str | None = None, user: str | None = None, reader: int | None = None,
          host: str | None = None, details: bool = True) -> ReportData:
    """The report of a window (the last drain session, the ``night`` of a date, or ``since`` to
    ``until``), of one ``user``'s jobs or everyone's, read as uid ``reader`` (default: this process's)
    on ``host`` (default: this host). Without ``details``, only the jobs: no output, nothing unfinished.

    Raises:
        InvalidInput: a bad --since, --until or --night, --night with either; an empty --user;
            --since after --until.
    """
    from onite import drains as dr

    if user is not None and not user.strip():
        raise InvalidInput("--user is empty", "name a user, e.g. --user alice, or leave it out for everyone's jobs")
    if night is not None and (since is not None or until is not None):
        raise InvalidInput(f"--night and {'--since' if since is not None else '--until'} cannot be used together",
                           "use --night DATE for a night (noon to noon), or --since/--until for a time range")
    reader = os.geteuid() if reader is None else reader
    kind, day, start, end, drains, events, every_drain = _window(spool, now, since, night, until)
    # the log's times are whole seconds: a job filed in the drain's last second is inside it
    results_end = end + timedelta(seconds=1) if kind == "drain" else end
    told = dr.job_events(events, start, end)

    def inside(when: datetime | None) -> bool:
        return when is not None and start <= when < results_end

    def wanted(owner: str) -> bool:
        return user is None or owner == user

    results = [r for r in sp.results(spool) if inside(r.finished) or inside(r.started)]
    recorded = {r.name for r in results}
    views = [result_view(r) for r in results if wanted(r.user)]
    pruned = [log_view(final, told.starts.get(name)) for name, final in told.finals.items() if name not in recorded]
    pruned = [view for view in pruned if wanted(view.user)]
    jobs = views + pruned
    jobs.sort(key=lambda j: (j.state != "failed", j.started or j.finished, j.name))
    data = ReportData(str(spool.root), start, end, now, jobs, night=day, user=user, kind=kind, drains=drains,
                      pruned={v.name for v in pruned}, tries=told.tries, keep=spool.config.keep, reader=reader)
    data.unrun = {job.name for job in jobs if never_ran(job, told)}
    data.current = not any(d.started > end for d in every_drain)
    if not details:
        return data
    failures = data.failures
    lines = TAIL_LINES if len(failures) <= 3 else 2 if len(failures) <= 8 else 0
    for job in failures[:SHOWN_FAILURES]:
        if job.name not in data.pruned and job.name not in data.unrun:
            data.tails[job.name] = read_tail(spool, job, reader, lines)
    if data.current:
        refused = [e for e in told.refused if e.name not in recorded and wanted(e.fields.get("owner", ""))]
        unfinished(data, spool, refused, host)
    return data


def _window(spool: sp.Spool, now: datetime, since: str | None, night: str | None, until: str | None):
    """The window's kind, date (--night), start and end, its drains, the log's events from its start on,
    and every drain they tell of.

    Raises:
        InvalidInput: a bad --since, --until or --night; --since after --until.
    """
    from onite import drains as dr
    from onite.locks import active_hosts

    log = dr.read_back(dr.log_paths(spool.log_path))
    boundary = lambda when: morning_before(when, now)  # noqa: E731 - the morning before a drain
    day: date | None = None
    if night is not None:
        kind, day = "night", parse_night(night, now)
        start, end = night_window(day, now)
    elif since is not None or until is not None:
        kind = "since"
        end = parse_since(until, now, option="--until") if until is not None else now
        start = parse_since(since, end)
        if start >= end:
            raise InvalidInput(f"--since {since} is not before --until {until}", "give a --since before the --until")
    else:
        kind, start, end = "drain", None, None
    events = dr.collect(log, start, boundary, now)
    every_drain = dr.drains_of(events, active_hosts(spool.root))
    if kind != "drain":
        return kind, day, start, end, dr.in_window(every_drain, start, end), events, every_drain
    session = dr.last_session(every_drain, boundary)
    if session is None:  # no drain in the log: the last day
        return "since", None, now - RECENT, now, [], events, every_drain
    return kind, None, session.start, session.end or now, list(session.drains), events, every_drain


def log_view(final, start) -> JobView:
    """A finished job as its log lines tell it (its record was pruned): its last final line, and the
    start line of that run if there is one (none: it never started)."""
    fields = final.fields
    seconds = _number(fields.get("seconds"))
    started, finished = None, final.when
    if start is not None and start.fields.get("attempt") == fields.get("attempt") and start.when <= final.when:
        # the log's times are whole seconds; its ``seconds`` field is the run's length
        started = start.when
        if seconds is not None and start.when + timedelta(seconds=seconds) <= final.when + timedelta(seconds=1):
            finished = start.when + timedelta(seconds=seconds)
    priority = start.fields.get("priority") if start is not None else None
    user = fields.get("user") or (start.fields.get("user") if start is not None else "") or "?"
    reason = fields.get("reason", "")
    if final.event == "cancelled" and not reason:
        reason = f"cancelled by {fields.get('by', '?')}"
    exit_code = _number(fields.get("exit"))
    return JobView(name=final.name, uid=_uid(user), user=user, state=final.event,
                   priority=int(priority) if priority and priority.isdigit() else None, urgent=priority == "urgent",
                   submitted=started or final.when, host=final.host, started=started, finished=finished,
                   exit_code=int(exit_code) if exit_code is not None else None, reason=reason,
                   attempt=int(fields["attempt"]) if fields.get("attempt", "").isdigit() else None)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


@functools.lru_cache(maxsize=None)
def _uid(user: str) -> int:
    """The uid of a user named in the log (-1: no such account now); once per name, not once per job."""
    import pwd

    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return -1


def never_ran(job: JobView, told) -> bool:
    """Did the job end without a process of it ever starting? (A failed dependency, a directory that
    was gone, a cancel while queued, a refusal.) A record of a job onite could not start has a start
    time but no exit status; the log then has no start line for that attempt."""
    if job.started is None:
        return True
    if job.exit_code is not None or job.signal is not None:
        return False
    final, start = told.finals.get(job.name), told.starts.get(job.name)
    return final is not None and (start is None or start.fields.get("attempt") != final.fields.get("attempt"))


def read_tail(spool: sp.Spool, job: JobView, reader: int, lines: int) -> Tail:
    """The last ``lines`` lines of what ``job`` printed: its stderr when it kept that apart, else its
    output. Only for its owner and root; only from a file of its user's written during that run (else
    ``kept`` is false: none, or a later run's)."""
    import stat

    from onite.notify import output_tail

    stream = "stderr" if job.stderr == "separate" else "output"
    if reader not in (0, job.uid):
        return Tail(private=True, stream=stream)
    gone = Tail(stream=stream, kept=False)
    path = spool.stderr_path(job.name) if stream == "stderr" else spool.output_path(job.name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return gone
    try:
        st = os.fstat(fd)
        # another run's file (a later job of that name, or one before) is not this failure's
        if not stat.S_ISREG(st.st_mode) or st.st_uid != job.uid or job.started is None or \
                not job.started.timestamp() - 2 <= st.st_mtime <= job.finished.timestamp() + 2:
            return gone
        start = max(0, st.st_size - TAIL_BYTES)
        data = os.pread(fd, TAIL_BYTES, start) if lines else b""
    except OSError:
        return gone
    finally:
        os.close(fd)
    text = output_tail(data, cut=start > 0, lines=lines).decode("utf-8", "replace").splitlines() if lines else []
    # a retry's output follows the earlier attempts', after its marker line (onite.executor.attempt_marker)
    marker = f"[onite] attempt {job.attempt} of {job.name}, "
    text = text[max((i + 1 for i, line in enumerate(text) if line.startswith(marker)), default=0):]
    return Tail(lines=tuple(_cut(printable(line), TAIL_WIDTH) for line in text), stream=stream)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


# ---- what is not finished -------------------------------------------------------------------


def unfinished(data: ReportData, spool: sp.Spool, refused: list, host: str | None) -> None:
    """Fill in what the window left: jobs running now, queued (left before the window's end, or
    spooled since) with why each waits, held, and the files refused in the window."""
    from onite.config import default_host
    from onite.listing import running_views
    from onite.status import EXAMINE, waiting_jobs

    names: dict[int, str] = {}

    def owner(uid: int) -> str:
        return names.get(uid) or names.setdefault(uid, sp.user_name(uid))

    queue = [row for row in sp.queued_stats(spool) if data.user is None or owner(row[3]) == data.user]
    # the log's times are whole seconds: a job spooled in the drain's last second came before its end
    end = data.until + timedelta(seconds=1) if data.kind == "drain" else data.until
    end_ns = int(end.timestamp() * 1e9)
    held = sum(sp.is_held(row[4]) for row in queue)
    since = sum(not sp.is_held(row[4]) and row[1] > end_ns for row in queue)
    running = [v for v in running_views(spool) if data.user is None or v.user == data.user]
    data.left = {"queued": len(queue) - held - since, "since": since, "held": held, "running": len(running),
                 "refused": len(refused)}
    for view in running:
        data.waiting.append({"name": view.name, "user": view.user, "uid": view.uid, "priority": view.priority,
                             "urgent": view.urgent, "state": "running", "kind": "running",
                             "reason": f"running on {view.host}" + (
                                 f" since {view.started.astimezone():%H:%M}" if view.started else ""),
                             "command": None})
    head = queue[:EXAMINE]
    why = {row["name"]: row for row in waiting_jobs(spool, head, data.now, euid=data.reader,
                                                     host=host or default_host(spool.config))}
    last = max(data.drains, key=lambda d: d.ended or data.now, default=None)
    for rank, ctime_ns, name, uid, mode in head:
        mine = data.reader in (0, uid)
        row = why.get(name)
        if row is None:  # it could start now, or it is another user's and not held: its file is private
            kind, reason = "left", left_reason(last, ctime_ns > end_ns, ready=mine)
        else:
            kind, reason = row["kind"], row["reason"]
        if not mine:
            reason += " (another user's job: other details private)"
        state = "held" if sp.is_held(mode) else "queued"
        data.waiting.append({"name": name, "user": owner(uid), "uid": uid, "priority": rank or None,
                             "urgent": rank == 0, "state": state, "kind": kind, "reason": reason,
                             "command": f"onite release {name}" if state == "held" and mine else None})
    for event in refused:
        data.waiting.append({"name": event.name, "user": event.fields.get("owner", "?"), "uid": None,
                             "priority": None, "urgent": False, "state": "refused", "kind": "refused",
                             "reason": event.fields.get("reason", ""), "command": None})
    if spool.config.schedule:
        from onite.schedule import next_drain

        try:
            data.next_drain = next_drain(spool.config.schedule, data.now)
        except InvalidInput:
            data.next_drain = None


def left_reason(last, spooled_after: bool, *, ready: bool) -> str:
    """Why a job that could start (``ready``; else: whose reasons are private) is still queued."""
    if spooled_after:
        return "spooled after the drain"
    if last is not None and last.reason == "window closed":
        return f"{'ready; ' if ready else ''}left when the window closed" + (f" at {last.until}" if last.until else "")
    if last is not None and last.reason == "stopped":
        return f"{'ready; ' if ready else ''}left when the drain was stopped"
    if last is not None and last.ended is None:
        return "ready: waits for a free slot of the drain running now" if ready else "waits"
    return "ready: waits for the next drain" if ready else "waits"


# ---- words ---------------------------------------------------------------------------------


def window_text(data: ReportData) -> str:
    """What the report covers, in words."""
    if data.kind == "night" and data.night is not None:
        return (f"the night of {data.night.isoformat()} "
                f"({data.since.astimezone():%Y-%m-%d %H:%M} to {data.until.astimezone():%Y-%m-%d %H:%M})")
    if data.kind == "drain":
        hosts = ", ".join(dict.fromkeys(printable(d.host) for d in data.drains))
        start, end = data.since.astimezone(), data.until.astimezone()
        what = "the last drain" if len(data.drains) == 1 else f"the last {len(data.drains)} drains"
        if any(d.ended is None for d in data.drains):
            return f"{what}, running since {start:%Y-%m-%d %H:%M} on {hosts}"
        clock = "%H:%M" if end - start >= timedelta(hours=1) else "%H:%M:%S"  # a short drain: to the second
        to = f"{end:{clock}}" if end.date() == start.date() else f"{end:%Y-%m-%d {clock}}"
        return f"{what}, {start:%Y-%m-%d {clock}} to {to} on {hosts}"
    text = f"jobs finished since {data.since.astimezone():%Y-%m-%d %H:%M}"
    if data.until < data.now:
        text += f" until {data.until.astimezone():%Y-%m-%d %H:%M}"
    return text


def headline_parts(data: ReportData) -> list[tuple[str, str]]:
    """The headline's parts, each with what it counts: ``("failed", "2 failed (1 timed out)")``."""
    counts, left = data.counts, data.left
    failed = f"{counts['failed']} failed" + (f" ({data.timed_out} timed out)" if data.timed_out else "")
    parts = [("done", f"{counts['done']} done"), ("failed", failed)]
    if counts["cancelled"]:
        parts.append(("cancelled", f"{counts['cancelled']} cancelled"))
    for key, words in left_words(data):
        if left.get(key):
            parts.append((key, f"{left[key]} {words}"))
    if data.pruned:
        parts.append(("pruned", f"{len(data.pruned)} earlier results pruned (keep = {data.keep})"))
    return parts


LEFT_WORDS = (("running", "running"), ("queued", "left queued"), ("since", "spooled since"), ("held", "held"),
              ("refused", "refused"))


def left_words(data: ReportData) -> tuple[tuple[str, str], ...]:
    """LEFT_WORDS; while a drain of the window still runs, its queued jobs are not left: just queued."""
    if data.draining:
        return tuple((key, "queued" if key == "queued" else words) for key, words in LEFT_WORDS)
    return LEFT_WORDS


def headline(data: ReportData) -> str:
    """``31 done, 2 failed (1 timed out), 6 left queued, 1 held, 30 earlier results pruned (keep = 50)``."""
    who = f"user {printable(data.user)}: " if data.user is not None else ""
    return who + ", ".join(text for _, text in headline_parts(data))


MARK = {"done": "✓", "failed": "✗", "timeout": "⏱", "cancelled": "⊘", "queued": "◦", "held": "‖",
        "running": "▶", "refused": "!"}


def state_word(job: JobView) -> str:
    """``done``, ``failed``, ``timeout`` or ``cancelled``: the STATE column in words."""
    return "timeout" if is_timeout(job) else job.state


def attempts_text(data: ReportData, job: JobView) -> str:
    """``2/3`` for a job that was retried (``2`` if the log no longer says how many it was allowed)."""
    allowed = data.tries.get(job.name)
    if not job.attempt or (job.attempt <= 1 and not allowed):
        return ""
    return f"{job.attempt}/{allowed}" if allowed else str(job.attempt)


def failure_text(data: ReportData, job: JobView) -> str:
    """``bad (alice, P2) failed: exit 3 after 41s, attempt 2/3``: a failure in a sentence."""
    pri = priority_label(job)
    return f"{printable(job.name)} ({printable(job.user)}" + (f", {pri}" if pri else "") + f") {failure_what(data, job)}"


def failure_what(data: ReportData, job: JobView) -> str:
    """How a job failed: ``failed: exit 3 after 41s``, ``timed out after 2.0s (SIGKILL)``, ``never ran:
    dependency build failed``; with ``, attempt 2/3`` if it was retried."""
    took = human_duration(job.duration)
    if job.name in data.unrun:
        what = f"never ran: {printable(job.reason)}"
    elif is_timeout(job):
        what = "timed out" + (f" after {took}" if took else "") + (f" ({signal_name(job.signal)})" if job.signal else "")
    else:
        what = f"failed: {printable(job.reason) or 'failed'}" + (f" after {took}" if took else "")
    tries = attempts_text(data, job)
    return what + (f", attempt {tries}" if tries else "")


def failure_notes(data: ReportData, job: JobView) -> tuple[tuple[str, ...], str]:
    """What follows a failure's sentence: its last lines of output (as its reader may see them), and
    a note: the command that reads it all, or why there is none."""
    if job.name in data.pruned:
        return (), f"its record and output were pruned (keep = {data.keep}); the log told the rest"
    if job.name in data.unrun:
        return (), ""
    tail = data.tails.get(job.name)
    if tail is not None and tail.private:
        who = "root" if job.user == "root" else f"{printable(job.user)} and root"
        return (), f"output is private: only {who} may read it"
    if tail is not None and not tail.kept:
        return (), "no output of this run is kept (removed, or a later run of that name replaced it)"
    return (tail.lines if tail else ()), output_command(job)


def output_command(job: JobView) -> str:
    """The command that prints a job's output: its stderr, when it kept that apart."""
    return f"onite output {job.name}" + (" --stderr" if job.stderr == "separate" else "")


def waiting_text(row: dict) -> str:
    """``late (alice, P3) queued: ready; left when the window closed at 07:00``."""
    from onite.cells import priority_text

    pri = priority_text(row["urgent"], row["priority"])
    who = f"{printable(row['name'])} ({printable(row['user'])}" + (f", {pri}" if pri else "") + ")"
    return f"{who} {row['state']}: {printable(row['reason'])}" + (f" — {row['command']}" if row["command"] else "")


def waiting_title(data: ReportData) -> str:
    parts = [f"{data.left[key]} {words}" for key, words in left_words(data) if data.left.get(key)]
    text = "not finished: " + ", ".join(parts)
    if data.next_drain is not None:
        text += f" (next drain {data.next_drain.astimezone():%Y-%m-%d %H:%M})"
    return text


# ---- the table ---------------------------------------------------------------------------

# (title, right-justified): all left-justified, so that each column starts under its title
COLUMNS = (("STATE", False), ("NAME", False), ("USER", False), ("PRI", False), ("HOST", False),
           ("STARTED", False), ("TOOK", False), ("TRIES", False), ("EXIT", False), ("REASON", False))


def exit_text(view: JobView) -> str:
    """The exit code, the signal's name, or ``-`` for a job that never ran."""
    if view.exit_code is not None:
        return str(view.exit_code)
    if view.signal is not None:
        return signal_name(view.signal)
    return "-"


def rows(data: ReportData, *, marks: bool = False) -> list[list[str]]:
    """The cells of the report's table, one row per job, in the order of COLUMNS (the state as a
    word, or with ``marks`` as its symbol)."""
    # within a day's window the time of day is enough; a longer one needs the date
    day_long = data.until - data.since <= timedelta(hours=25)
    out = []
    for job in data.jobs:
        started = ""
        if job.started is not None and job.name not in data.unrun:
            local = job.started.astimezone()
            started = local.strftime("%H:%M:%S") if day_long else local.strftime("%Y-%m-%dT%H:%M")
        word = state_word(job)
        took = "" if job.name in data.unrun else human_duration(job.duration)
        out.append([MARK.get(word, word) if marks else word, job.name, printable(job.user), priority_label(job),
                    printable(job.host or ""), started, took, attempts_text(data, job), exit_text(job),
                    printable(job.reason)])
    return out


# ---- the timeline ---------------------------------------------------------------------------

_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def ticks(start: datetime, end: datetime, most: int) -> list[tuple[datetime, str]]:
    """Round local times to mark on a timeline from ``start`` to ``end``, at most ``most`` of them
    (the finest step that allows it: hours for a night), each with its label (HH:MM, or HH:MM:SS
    when the step is under a minute)."""
    seconds = max((end - start).total_seconds(), 1.0)
    most = max(most, 1)
    step = next((s for s in _STEPS if seconds / s <= most), 86400 * math.ceil(seconds / 86400 / most))
    label = "%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%m-%d"
    # round in local time, so that hour ticks fall on the hour in zones half an hour off UTC
    offset = start.astimezone().utcoffset().total_seconds()
    at = math.ceil((start.timestamp() + offset) / step) * step - offset
    marks = []
    while at <= end.timestamp():
        when = datetime.fromtimestamp(at).astimezone()
        marks.append((when, when.strftime(label)))
        at += step
    return marks


def timeline_span(data: ReportData) -> tuple[datetime, datetime]:
    """The timeline's extent: the jobs' span, widened to whole seconds (at least one), so that a
    night of short jobs still gets a time axis with ticks."""
    start, end = data.span
    first = datetime.fromtimestamp(math.floor(start.timestamp()), start.tzinfo)
    last = datetime.fromtimestamp(max(math.ceil(end.timestamp()), first.timestamp() + 1), end.tzinfo)
    return first, last


def extent(job: JobView, start: datetime, end: datetime) -> tuple[float, float]:
    """Where a job's bar lies on the timeline from ``start`` to ``end``, as fractions (0 to 1);
    a job that never ran is a point at its end."""
    seconds = max((end - start).total_seconds(), 1e-6)
    first = ((job.started or job.finished) - start).total_seconds() / seconds
    last = (job.finished - start).total_seconds() / seconds
    return min(max(first, 0.0), 1.0), min(max(last, 0.0), 1.0)


# ---- output --------------------------------------------------------------------------------


def to_json(data: ReportData) -> str:
    from onite.jsontext import dumps as _dumps  # json.dumps(indent=1)'s text, at C speed

    def job(view: JobView) -> dict:
        return {**view.to_json(), "ran": view.name not in data.unrun, "tries": data.tries.get(view.name),
                "pruned": view.name in data.pruned}

    failures = []
    for view in data.failures[:SHOWN_FAILURES]:
        tail = data.tails.get(view.name)
        lines, note = failure_notes(data, view)
        failures.append({"name": view.name, "user": view.user, "reason": view.reason, "text": failure_text(data, view),
                         "output": list(lines) if tail and tail.kept and not tail.private else None,
                         "private": bool(tail and tail.private),
                         "command": note if note.startswith("onite output ") else None})
    return _dumps({"version": 1, "spool": data.spool, "window": data.kind, "since": data.since.isoformat(),
                   "until": data.until.isoformat(), "now": data.now.isoformat(),
                   "night": data.night.isoformat() if data.night else None, "user": data.user,
                   "headline": headline(data), "counts": data.counts, "timed_out": data.timed_out,
                   "pruned": len(data.pruned), "keep": data.keep,
                   "drains": [d.to_json() for d in data.drains],
                   "left": data.left if data.current else None,
                   "next_drain": data.next_drain.isoformat() if data.next_drain else None,
                   "hosts": data.hosts, "failures": failures, "waiting": data.waiting,
                   "jobs": [job(j) for j in data.jobs]})


def render(console, data: ReportData, *, plain: bool = False) -> None:
    """The report on a rich Console: what it covers, the headline, the failures with their last lines
    of output, what is not finished, the table, the timeline, the hosts. ``plain`` (or a Console that
    is not a terminal): every row one line, never wrapped, states in words (docs/cli.md)."""
    from onite.render import print_report

    print_report(console, data, plain=plain or not console.is_terminal)


def write_html(path, data: ReportData) -> None:
    """Write the page to ``path``, all or nothing (onite.reportpage.write_html).

    Raises:
        InvalidInput: ``path`` cannot be written.
    """
    from onite.reportpage import write_html as write

    write(path, data)
