"""The words of the morning report, shared by the terminal, the HTML page and ``--json`` (pure). Text from users
is shown through onite.core.safetext.printable."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

from onite.app.common import label
from onite.core.cells import human_duration, priority_label, priority_text
from onite.core.names import split_key
from onite.core.jobview import JobView
from onite.app.report import SHOWN_FAILURES, SHOWN_OTHERS, ReportData, is_timeout, run_key
from onite.core.safetext import phrase, printable
from onite.core.resources import format_mem
from onite.core.state import OUT_OF_MEMORY, OUTPUT_STOPPED, signal_name
from onite.core.timeparse import format_duration, longer_limit
from onite.spool.log import CANNOT_RECORD


def window_text(data: ReportData) -> str:
    if data.kind == "night":
        return (f"the night of {data.night.isoformat()} "
                f"({data.since.astimezone():%Y-%m-%d %H:%M} to {data.until.astimezone():%Y-%m-%d %H:%M})")
    if data.kind == "drain":
        hosts = ", ".join(dict.fromkeys(printable(d.host) for d in data.drains))
        start, end = data.since.astimezone(), data.until.astimezone()
        what = "the last drain" if len(data.drains) == 1 else f"the last {len(data.drains)} drains"
        if data.draining:
            return f"{what}, running since {start:%Y-%m-%d %H:%M} on {hosts}" + died_text(data)
        clock = "%H:%M" if end - start >= timedelta(hours=1) else "%H:%M:%S"  # a short drain: to the second
        to = f"{end:{clock}}" if end.date() == start.date() else f"{end:%Y-%m-%d {clock}}"
        stopped = [printable(d.host) for d in data.drains if d.reason == CANNOT_RECORD]
        return f"{what}, {start:%Y-%m-%d {clock}} to {to} on {hosts}" + (
            f"; stopped: it could not record a run on {', '.join(dict.fromkeys(stopped))} (a full disk?): "
            f"onite.log says what" if stopped else "") + died_text(data)
    text = f"jobs finished since {data.since.astimezone():%Y-%m-%d %H:%M}"
    if data.until < data.now:
        text += f" until {data.until.astimezone():%Y-%m-%d %H:%M}"
    return text


def died_text(data: ReportData) -> str:
    """``; a driver died without finishing (vm, pid 812): …``: the drains of the window that never said they
    ended, whose jobs the next driver of their host recovers (said with when, once it came)."""
    died = [d for d in data.drains if d.reason == "died"]
    said = []
    for waits in (True, False):
        these = [d for d in died if (d.recovered is None) == waits]
        if not these:
            continue
        who, whose = ("a driver", "its") if len(these) == 1 else (f"{len(these)} drivers", "their")
        named = "; ".join(f"{printable(d.host)}, pid {d.pid}" for d in these)
        when = ", ".join(dict.fromkeys(f"{d.recovered.astimezone():%H:%M}" for d in these if d.recovered))
        said.append(f"; {who} died without finishing ({named}): {whose} jobs "
                    + ("are recovered by the next driver" if waits else "were recovered by the next driver")
                    + f" of {whose} host" + ("" if waits else f" at {when}") + " (onite log says how)")
    return "".join(said)


def headline_parts(data: ReportData) -> list[tuple[str, str]]:
    """The headline's parts, each with what it counts: ``("failed", "2 failed (1 timed out)")``."""
    counts = data.counts
    failed = f"{counts['failed']} failed" + (f" ({data.timed_out} timed out)" if data.timed_out else "")
    parts = [("done", f"{counts['done']} done"), ("failed", failed)]
    if counts["cancelled"]:
        parts.append(("cancelled", f"{counts['cancelled']} cancelled"))
    parts += left_parts(data)
    for state, what in (("failed", "a failure"), ("cancelled", "a cancel")):
        rerun = sum(any(view.state == state for view in before) for before in data.reruns.values())
        if rerun:
            parts.append((state, f"{rerun} run again after {what}"))
    if data.pruned:
        parts.append(("pruned", f"{len(data.pruned)} earlier results pruned (keep = {data.keep})"))
    return parts


def left_parts(data: ReportData) -> list[tuple[str, str]]:
    """Each count of ``data.left`` that is not 0, in words: ``("queued", "6 left queued")`` (while a drain of the
    window still runs, just queued)."""
    words = (("running", "running"), ("queued", "queued" if data.draining else "left queued"),
             ("since", "spooled since"), ("held", "held"), ("refused", "refused"))
    return [(key, f"{data.left[key]} {said}") for key, said in words if data.left.get(key)]


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
    return f"{printable(label(job.name))} ({printable(job.user)}" + (f", {pri}" if pri else "") + f") {failure_what(data, job)}"


def failure_what(data: ReportData, job: JobView) -> str:
    """``failed: exit 3 after 41s``, ``timed out after 2.0s (SIGKILL)``, ``never ran: …``; ``, attempt 2/3``."""
    took = human_duration(job.duration)
    if data.never_ran(job):
        what = f"never ran: {phrase(job.reason)}"
    elif is_timeout(job):
        what = "timed out" + (f" after {took}" if took else "") + (f" ({signal_name(job.signal)})" if job.signal else "")
    else:
        what = f"failed: {phrase(job.reason) or 'failed'}" + (f" after {took}" if took else "")
    tries = attempts_text(data, job)
    rerun = earlier_note(data, job)
    return what + (f", attempt {tries}" if tries else "") + (f" ({rerun})" if rerun else "")


def earlier_note(data: ReportData, job: JobView) -> str:
    """What ran of a job before the run shown: ``after attempt 1: exit 5``, the attempts that ran of a job whose
    latest attempt never started; ``after an earlier run: timeout``, the runs of the window before a restart."""
    notes = []
    tried = data.tried.get(run_key(job)) if data.never_ran(job) else None
    if tried:
        which = ", ".join(str(a.attempt) for a in tried)
        notes.append(f"after attempt{'s' if len(tried) > 1 else ''} {which}: "
                     + ", ".join(phrase(a.reason) or "failed" for a in tried))
    before = data.reruns.get((job.name, job.user))
    if before:
        words = ", ".join(phrase(view.reason) or view.state for view in before)
        notes.append(f"after {'an earlier run' if len(before) == 1 else f'{len(before)} earlier runs'}: {words}")
    return "; ".join(notes)


def told_failures(data: ReportData) -> tuple[list[JobView], dict[str, list[str]]]:
    """The failures told in full (those the reader may read), and the names of the others' by user."""
    told, others = [], {}
    for job in data.failures:
        if data.may_read(job.uid):
            told.append(job)
        else:
            others.setdefault(job.user, []).append(split_key(job.name)[1])
    return told, others


def others_failures_text(others: dict[str, list[str]]) -> str:
    """``other users' failures (theirs to read): bob: etl, slow; carol: x … and 3 more``: the first SHOWN_OTHERS
    names, and how many more there are."""
    named = [(user, name) for user, names in others.items() for name in names]
    shown: dict[str, list[str]] = {}
    for user, name in named[:SHOWN_OTHERS]:
        shown.setdefault(user, []).append(name)
    said = "; ".join(f"{printable(user)}: {', '.join(map(printable, names))}" for user, names in shown.items())
    more = len(named) - SHOWN_OTHERS
    return f"other users' failures (theirs to read): {said}" + (f" … and {more} more" if more > 0 else "")


def failure_notes(data: ReportData, job: JobView) -> tuple[tuple[str, ...], str]:
    """A failure's last lines of output (as its reader may see them), and the command that reads it all."""
    if data.was_pruned(job):
        return (), f"its record and output were pruned (keep = {data.keep}); the log told the rest"
    if data.was_replaced(job):
        return (), f"a later run of {label(job.name)} replaced its record and output; the log told the rest"
    if data.is_damaged(job):
        return (), f"its result record jobsdone/{job.name}@result is damaged; the log told the rest ({output_command(job)})"
    if data.never_ran(job):
        return (), ""
    tail = data.tails.get(run_key(job))
    if tail is not None and tail.private:
        who = "root" if job.user == "root" else f"{printable(job.user)} and root"
        return (), f"output is private: only {who} may read it"
    if tail is not None and not tail.kept:
        return (), "no output of this run is kept (removed, or a later run of that name replaced it)"
    return (tail.lines if tail else ()), output_command(job)


def next_step(data: ReportData, job: JobView) -> str:
    """What to do about a failed job: ``onite restart slow --timeout 2h`` (twice the time it ran), ``onite restart
    big --mem 8G`` (twice what it asked), ``onite restart etl``; "" where it is queued or running again, where a
    restart would not rerun that run, or cannot help (stopped at max_output)."""
    if data.from_log(job) or job.reason == OUTPUT_STOPPED or job.name in data.again:
        return ""
    if is_timeout(job):
        return f"onite restart {label(job.name)} --timeout {format_duration(longer_limit(job.duration or 0))}"
    # killed for its memory, it is killed at the same size again; ``mem`` (MiB): its record's, or the log's
    if job.reason.startswith(OUT_OF_MEMORY) and job.mem:
        return f"onite restart {label(job.name)} --mem {format_mem(job.mem * 2)}"
    return f"onite restart {label(job.name)}"


def output_command(job: JobView) -> str:
    """The command that prints a job's output: its stderr, when it kept that apart."""
    return f"onite output {label(job.name)}" + (" --stderr" if job.stderr == "separate" else "")


def waiting_text(row: dict) -> str:
    """``late (alice, P3) queued: ready; left when the window closed at 07:00``."""
    pri = priority_text(row["urgent"], row["priority"])
    who = f"{printable(row['name'])} ({printable(row['user'])}" + (f", {pri}" if pri else "") + ")"
    said = "" if row["reason"] == row["state"] else f": {phrase(row['reason'])}"  # not "held: held"
    return f"{who} {row['state']}{said}" + (f" — {row['command']}" if row["command"] else "")


def waiting_title(data: ReportData) -> str:
    text = "not finished: " + ", ".join(said for _, said in left_parts(data))
    if data.next_drain is not None:
        text += f" (next drain {data.next_drain.astimezone():%Y-%m-%d %H:%M})"
    return text

# (title, right-justified): all left-justified. MEM: the most a job used of what it asked for (312.5M/4G)
COLUMNS = tuple((title, False) for title in ("STATE", "NAME", "USER", "PRI", "HOST", "STARTED", "TOOK", "MEM", "CPU",
                                             "TRIES", "EXIT", "REASON"))


def rows(data: ReportData, *, marks: bool = False) -> list[list[str]]:
    """The cells of the report's table, in the order of COLUMNS (the state as a word, or with ``marks`` a symbol)."""
    day_long = data.until - data.since <= timedelta(hours=25)
    out = []
    for job in data.jobs:
        never = data.never_ran(job)
        started = "" if never else job.started.astimezone().strftime("%H:%M:%S" if day_long else "%Y-%m-%dT%H:%M")
        word, rerun = state_word(job), earlier_note(data, job)
        code = str(job.exit_code) if job.exit_code is not None else \
            signal_name(job.signal) if job.signal is not None else "-"
        out.append([MARK.get(word, word) if marks else word, label(job.name), printable(job.user), priority_label(job),
                    printable(job.host or ""), started, "" if never else human_duration(job.duration),
                    job.used_mem(), human_duration(job.cpu_time), attempts_text(data, job), code,
                    " ".join(x for x in (printable(job.reason), rerun and f"({rerun})") if x)])
    return out


_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def ticks(start: datetime, end: datetime, most: int) -> list[tuple[datetime, str]]:
    """At most ``most`` round local times (and labels) to mark on a timeline from ``start`` to ``end``."""
    seconds = (end - start).total_seconds()
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


def timeline(data: ReportData, most: int) -> tuple[datetime, datetime, list[tuple[float, str]], list[tuple]]:
    """The jobs' timeline, widened to whole seconds (at least one): its ends, at most ``most`` ticks (where,
    label), and each job's bar (job, from, to, never ran); every place a fraction of the width, 0 to 1."""
    start, end = min(job.started or job.finished for job in data.jobs), max(job.finished for job in data.jobs)
    start = datetime.fromtimestamp(math.floor(start.timestamp()), start.tzinfo)
    end = datetime.fromtimestamp(max(math.ceil(end.timestamp()), start.timestamp() + 1), end.tzinfo)
    seconds = (end - start).total_seconds()

    def at(when: datetime) -> float:
        return min(max((when - start).total_seconds() / seconds, 0.0), 1.0)

    bars = [(job, at(job.started or job.finished), at(job.finished), data.never_ran(job)) for job in data.jobs]
    return start, end, [(at(when), text) for when, text in ticks(start, end, most)], bars


def to_json(data: ReportData) -> str:
    def job(view: JobView) -> dict:
        return {**view.to_json(), "name": label(view.name), "ran": not data.never_ran(view), "tries": data.tries.get(view.name),
                "pruned": data.was_pruned(view), "damaged": data.is_damaged(view), "replaced": data.was_replaced(view)}

    failures = []
    for view in data.failures[:SHOWN_FAILURES]:
        tail = data.tails.get(run_key(view))
        lines, note = failure_notes(data, view)
        failures.append({"name": label(view.name), "user": view.user, "reason": view.reason, "text": failure_text(data, view),
                         "output": list(lines) if tail and tail.kept and not tail.private else None,
                         "private": bool(tail and tail.private),
                         "command": note if note.startswith("onite output ") else None,
                         # another user's restart would be refused: theirs to act on, as the terminal tells it
                         "next": (next_step(data, view) or None) if data.may_read(view.uid) else None})
    return json.dumps({"version": 1, "spool": data.spool, "window": data.kind, "since": data.since.isoformat(),
                   "until": data.until.isoformat(), "now": data.now.isoformat(),
                   "night": data.night.isoformat() if data.night else None, "user": data.user,
                   "headline": headline(data), "counts": data.counts, "timed_out": data.timed_out,
                   "pruned": len(data.pruned), "keep": data.keep,
                   "drains": [d.to_json() for d in data.drains],
                   "left": dict(data.left) if data.current else None,
                   "next_drain": data.next_drain.isoformat() if data.next_drain else None,
                   "hosts": data.hosts, "failures": failures, "waiting": data.waiting,
                   "jobs": [job(j) for j in data.jobs]}, indent=1)
