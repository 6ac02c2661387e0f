"""Rich renderables for people (tables, a timeline); pure apart from the Console passed in.

Only commands that print for people import this module (rich costs ~60 ms
to import); ``--json`` output never does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from rich.table import Table
from rich.text import Text

from onite.cells import human_duration, outcome_text, plain_table, priority_label, short_time
from onite.listing import JobView

STATE_STYLE = {
    "queued": "cyan",
    "held": "yellow",
    "running": "bold blue",
    "done": "green",
    "failed": "bold red",
    "cancelled": "magenta",
}


# A table of more rows than this is written as plain text: rich takes about a minute for 100,000 rows.
LARGE_TABLE = 2000

# (title, right-justified) of ``onite list``'s columns; DETAIL_COLUMNS follow with --all
JOB_COLUMNS = (("#", True), ("NAME", False), ("USER", False), ("PRI", False), ("AGE", True), ("STATE", False))
DETAIL_COLUMNS = (("HOST", False), ("STARTED", False), ("TOOK", True), ("RESULT", False))
FOLDED = {"NAME", "RESULT"}  # long names and reasons wrap within their column on a narrow terminal


def job_columns(detailed: bool) -> tuple[tuple[str, bool], ...]:
    return JOB_COLUMNS + DETAIL_COLUMNS if detailed else JOB_COLUMNS


def job_rows(views: Sequence[JobView], now: datetime, *, detailed: bool) -> Iterator[list[str]]:
    """``onite list``'s cells, as text: position, name, user, priority, age, state (and, detailed,
    where, when and how it ran)."""
    for view in views:
        row = [str(view.position or ""), view.name, view.user, priority_label(view),
               human_duration((now - view.submitted).total_seconds()), view.state]
        if detailed:
            took = view.duration if view.finished else (now - view.started).total_seconds() if view.started else None
            row += [view.host or "", short_time(view.started, now), human_duration(took), outcome_text(view)]
        yield row


def jobs_table(views: Sequence[JobView], now: datetime, *, detailed: bool) -> Table:
    """``onite list`` for a terminal: the rows of ``job_rows``, states in colour."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for title, right in job_columns(detailed):
        table.add_column(title, justify="right" if right else "left", overflow="fold" if title in FOLDED else "ellipsis")
    for row in job_rows(views, now, detailed=detailed):
        row[5] = Text(row[5], style=STATE_STYLE.get(row[5], ""))
        table.add_row(*row)
    return table


def print_job_list(views: Sequence[JobView], now: datetime, *, detailed: bool, by_host: bool, out) -> None:
    """``onite list`` on ``out`` (a rich Console): one table, or one per host with ``by_host``
    (always detailed). More than LARGE_TABLE rows are written as plain text, laid out the same."""
    groups = [(None, views)] if not by_host else \
        [(host, [v for v in views if (v.host or "") == host]) for host in sorted({v.host or "" for v in views})]
    detailed = detailed or by_host
    plain = len(views) > LARGE_TABLE
    for host, some in groups:
        if host is not None:
            out.print(f"[bold]{host or 'queued (no host yet)'}[/]")
        if plain:
            lines = plain_table(job_columns(detailed), job_rows(some, now, detailed=detailed))
            out.file.write("".join(line + "\n" for line in lines))
        else:
            out.print(jobs_table(some, now, detailed=detailed))


def timeline(views: Sequence[JobView], start: datetime, end: datetime, width: int = 48) -> Table:
    """One bar per job over the night: where in [start, end] it ran."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("NAME", overflow="fold")
    table.add_column("USER")
    table.add_column("HOST")
    table.add_column(f"{start.astimezone():%H:%M} … {end.astimezone():%H:%M}", no_wrap=True)
    table.add_column("TOOK", justify="right")
    table.add_column("RESULT", overflow="fold")
    span = max((end - start).total_seconds(), 1.0)
    for view in views:
        if view.started is None or view.finished is None:
            bar = Text(" " * width)
        else:
            a = int((view.started - start).total_seconds() / span * width)
            b = max(int((view.finished - start).total_seconds() / span * width), a + 1)
            a, b = max(0, min(a, width - 1)), max(1, min(b, width))
            bar = Text(" " * a + "█" * (b - a) + " " * (width - b), style=STATE_STYLE.get(view.state, ""))
        table.add_row(view.name, view.user, view.host or "", bar, human_duration(view.duration),
                      Text(outcome_text(view) or view.state, style=STATE_STYLE.get(view.state, "")))
    return table


def recur_table(views: Sequence, now: datetime) -> Table:
    """``onite recur list``: name, owner, rule, next fire, priority (and what is wrong, if anything)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("NAME", overflow="fold")
    table.add_column("USER")
    table.add_column("RULE")
    table.add_column("NEXT")
    table.add_column("IN", justify="right")
    table.add_column("PRI")
    table.add_column("NOTE", overflow="fold")
    for view in views:
        pri = "urgent" if view.urgent else f"P{view.priority}" if view.priority else "?"
        wait = human_duration((view.next - now).total_seconds()) if view.next else ""
        note = Text(view.problem, style="bold red") if view.problem else ""
        table.add_row(view.name, view.user, view.rule, short_time(view.next, now), wait, pri, note)
    return table
