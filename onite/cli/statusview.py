"""``onite status`` as text for people: one line each, never wrapped; the running jobs as a table.

On a terminal the lines are rich Text (colours, never markup: a name or a
reason may hold brackets); anywhere else they are plain lines on stdout, and
rich is not imported.
"""

from __future__ import annotations

import sys
from datetime import datetime

from onite.app.status import StatusInfo


def render_status(console, info: StatusInfo, *, plain: bool = False) -> None:
    """The status as lines for people on ``console`` (a rich Console), or on stdout if it is None;
    ``plain``: the running jobs' table one line per job (docs/cli.md)."""
    from onite.core.safetext import printable as escape  # text from users and files: no control characters

    from onite.core.cells import priority_text
    from onite.cli.render import human_duration, job_columns, job_rows, jobs_table, plain_rows, write_lines
    from onite.core.timeparse import parse_stamp

    def say(*parts: str | tuple[str, str]) -> None:  # each part text, or (text, style)
        # one line each, never wrapped: scripts grep it, terminals fold it
        if console is None:
            sys.stdout.write("".join(part if isinstance(part, str) else part[0] for part in parts) + "\n")
            return
        from rich.text import Text

        line = Text()
        for part in parts:
            line.append(*((part,) if isinstance(part, str) else part))
        console.print(line, soft_wrap=True)

    say(f"spool     {escape(info.location or info.spool)}")
    if info.drivers:
        for d in info.drivers:
            since = parse_stamp(d.get("since"))
            what = "daemon" if d.get("role") == "daemon" else "driver"
            if what == "daemon" and d.get("state"):
                what += f", {d['state']}"
            detail = ", ".join(x for x in (f"pid {d['pid']}" if d.get("pid") else "",
                                           f"since {since:%Y-%m-%d %H:%M} ({human_duration((info.now - since).total_seconds())} ago)"
                                           if since else "",
                                           f"started by {d['started_by']}" if d.get("started_by") else "") if x) \
                or d["holder"] or "pid unknown"
            say("driver    ", ("running", "green"), f" on {escape(d['host'])} ({what}, {escape(detail)})")
    else:
        last = info.last_driver
        ended = ""
        if last and not last["died"] and last.get("ended"):
            ended = (f" (the last one ended {parse_stamp(last['ended']):%Y-%m-%d %H:%M}, "
                     f"started by {escape(last['started_by'])})")
        say(f"driver    not running{ended}")
    drain = info.drain
    if info.next_drain and drain is not None and drain.next is not None:
        from onite.drain.nextdrain import LABEL

        wait = human_duration((info.next_drain - info.now).total_seconds())
        say(f"next run  {info.next_drain:%Y-%m-%d %H:%M} (in {wait}) by {LABEL.get(drain.next.by, drain.next.by)} "
            f"on {escape(drain.next.host)}" + (f", until {info.until}" if info.until else ""))
    elif drain is not None:
        from onite.drain.nextdrain import no_drain_text

        say("next run  ", (f"none: {escape(no_drain_text(drain))}", "yellow"))
    if info.containment:
        kind = info.containment["kind"]
        colour = "green" if kind.startswith(("cgroup2", "subreaper")) else "yellow"
        say("contain   ", (escape(kind), colour), f" (as the last driver on {escape(info.containment['host'])} said)")
        limits = info.containment.get("limits")
        if limits:  # requests pack either way; held by the kernel only where it has the controllers
            colour = "yellow" if limits.startswith("not enforced") else "green"
            capacity = info.containment.get("capacity")
            # the last driver's words, as the contain line's: this command measures nothing of root's cgroups
            say("limits    last drain: ", (escape(limits), colour), f"; capacity {escape(capacity)}" if capacity else "")
    for warning in info.warnings:
        say(("warning", "red"), f"   {escape(warning)}")
    counts = ", ".join(f"{k} {v}" for k, v in info.queue.items() if v) or "empty"
    say(f"queued    {sum(info.queue.values())} ({counts})" + (f"; {info.held} held" if info.held else ""))
    label = "waiting  "
    for row in info.waiting:
        pri = priority_text(row["urgent"], row["priority"])
        reason = row["reason"] + (" (another user's job: other details private)" if row["private"] else "")
        colour = "red" if row["kind"] in ("will_fail", "unreadable") else "yellow"
        say(f"{label} {escape(row['name'])} ({escape(row['user'])}, {pri}): ", (escape(reason), colour))
        label = "         "
    if info.not_examined:
        say(f"{label} …and {info.not_examined} more not examined")
    day = info.last_night
    if day:
        c = day["counts"]
        failed = ""
        if day["failed"]:
            more = day["failed_total"] - len(day["failed"])
            failed = " (" + ", ".join(escape(n) for n in day["failed"]) + (f", … {more} more" if more else "") + ")"
        command = "onite report" if day.get("window") == "drain" else f"onite report --night {day['night']}"
        say("last night ", (f"{c['done']} done", "green"), ", ", (f"{c['failed']} failed", "red"),
            f"{failed}, {c['cancelled']} cancelled ({command})")
    if info.running:
        say(f"running   {len(info.running)}")
        if plain:
            rows = job_rows(info.running, info.now, detailed=True)
            write_lines(console or sys.stdout, plain_rows(job_columns(True), rows))
        else:
            console.print(jobs_table(info.running, info.now, detailed=True))
    for rec in info.recurring:
        when = datetime.fromisoformat(rec["next"])
        wait = human_duration((when - info.now).total_seconds())
        pri = priority_text(rec.get("urgent"), rec.get("priority"), unknown="?")
        say(f"recurring {escape(rec['name'])} ({escape(rec['user'])}, {pri}, {escape(rec['rule'])}) "
            f"next {when:%Y-%m-%d %H:%M} (in {wait})")
