"""Rich renderables for people (tables, the report's timeline); pure apart from the Console passed in.

Only commands that print for people import this module (rich costs ~60 ms
to import); ``--json`` output never does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import datetime

from rich.table import Table
from rich.text import Text

from onite.cells import human_duration, outcome_text, plain_table, priority_label, priority_text, short_time
from onite.listing import JobView
from onite.safetext import printable

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
WAITING_COLUMNS = (("WAITING", False),)  # why a queued job cannot start now: only when one cannot
DETAIL_COLUMNS = (("HOST", False), ("STARTED", False), ("TOOK", True), ("RESULT", False))
FOLDED = {"NAME", "RESULT", "WAITING"}  # long names and reasons wrap within their column on a narrow terminal


def job_columns(detailed: bool, waiting: bool = False) -> tuple[tuple[str, bool], ...]:
    return JOB_COLUMNS + (WAITING_COLUMNS if waiting else ()) + (DETAIL_COLUMNS if detailed else ())


def any_waiting(views: Sequence[JobView]) -> bool:
    """Does a job of ``views`` wait for something (so that the WAITING column is shown)?"""
    return any(view.waiting for view in views)


def job_rows(views: Sequence[JobView], now: datetime, *, detailed: bool, waiting: bool = False) -> Iterator[list[str]]:
    """``onite list``'s cells, as text: position, name, user, priority, age, state (with ``waiting``:
    why it waits; detailed: where, when and how it ran). Text from users (a reason may quote a path)
    is ``printable``."""
    for view in views:
        row = [str(view.position or ""), printable(view.name), printable(view.user), priority_label(view),
               human_duration((now - view.submitted).total_seconds()), view.state]
        if waiting:
            row.append(printable(view.waiting or ""))  # a reason may quote a job file's host or name
        if detailed:
            took = view.duration if view.finished else (now - view.started).total_seconds() if view.started else None
            row += [printable(view.host or ""), short_time(view.started, now), human_duration(took),
                    printable(outcome_text(view))]
        yield row


def jobs_table(views: Sequence[JobView], now: datetime, *, detailed: bool, waiting: bool = False) -> Table:
    """``onite list`` for a terminal: the rows of ``job_rows``, states in colour."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for title, right in job_columns(detailed, waiting):
        table.add_column(title, justify="right" if right else "left", overflow="fold" if title in FOLDED else "ellipsis")
    for row in job_rows(views, now, detailed=detailed, waiting=waiting):
        row[5] = Text(row[5], style=STATE_STYLE.get(row[5], ""))
        if waiting:  # Text, not markup: a reason may hold [brackets]
            row[6] = Text(row[6], style="yellow")
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
        waiting = any_waiting(some)
        if host is not None:
            out.print(f"[bold]{host or 'queued (no host yet)'}[/]")
        if plain:
            lines = plain_table(job_columns(detailed, waiting), job_rows(some, now, detailed=detailed, waiting=waiting))
            out.file.write("".join(line + "\n" for line in lines))
        else:
            out.print(jobs_table(some, now, detailed=detailed, waiting=waiting))


def report_table(views: Sequence[JobView], rows: Sequence[Sequence[str]]) -> Table:
    """``onite report``'s table: the cells of ``report.rows``, each job's reason in its state's colour."""
    from onite.report import COLUMNS

    table = Table(box=None, header_style="bold", pad_edge=False)
    for title, right in COLUMNS:
        table.add_column(title, justify="right" if right else "left",
                         overflow="fold" if title in ("NAME", "REASON") else "ellipsis")
    for view, row in zip(views, rows):  # Text, not markup: a reason may quote a path with [brackets]
        table.add_row(*map(Text, row[:-1]), Text(row[-1], style=STATE_STYLE.get(view.state, "")))
    return table


GANTT_NAME = 24  # the widest name column of the timeline; a longer name ends in …


def gantt_lines(views: Sequence[JobView], start: datetime, end: datetime,
                width: int) -> tuple[list[str], list[tuple[int, int]]]:
    """The timeline as lines of text ``width`` wide: a time axis (labels, then a rule with a tick under
    each), then a line per job, its name and its bar (█; × where a job that never ran ended).
    Also the columns [from, to) of each job's bar, to colour it."""
    from onite.report import extent, ticks

    name_width = max(4, min(GANTT_NAME, max(len(v.name) for v in views)))
    bar_width = max(width - name_width - 1, 16)
    seconds = max((end - start).total_seconds(), 1e-6)
    labels, rule, free = [" "] * bar_width, ["─"] * bar_width, 0
    for when, label in ticks(start, end, bar_width // 10):  # room for HH:MM:SS and a gap
        col = min(int((when - start).total_seconds() / seconds * bar_width), bar_width - 1)
        rule[col] = "┬"
        if col >= free and col + len(label) <= bar_width:
            labels[col:col + len(label)] = label
            free = col + len(label) + 1
    indent = " " * (name_width + 1)
    lines = [(indent + "".join(labels)).rstrip(), indent + "".join(rule)]
    bars = []
    for view in views:
        first, last = extent(view, start, end)
        a = min(int(first * bar_width), bar_width - 1)
        b = max(min(math.ceil(last * bar_width), bar_width), a + 1)  # however short, a job shows
        if view.started is None:
            b = a + 1
        name = view.name if len(view.name) <= name_width else view.name[:name_width - 1] + "…"
        lines.append(name.ljust(name_width) + " " * (a + 1) + ("█" if view.started else "×") * (b - a))
        bars.append((name_width + 1 + a, name_width + 1 + b))
    return lines, bars


def gantt_text(views: Sequence[JobView], start: datetime, end: datetime, width: int) -> Text:
    """``gantt_lines`` in colour: each bar in its job's state's style, the axis dim."""
    lines, bars = gantt_lines(views, start, end, width)
    text = Text(no_wrap=True, overflow="crop")
    text.append(lines[0] + "\n" + lines[1] + "\n", style="dim")
    for view, line, (a, b) in zip(views, lines[2:], bars):
        text.append(line[:a])
        text.append(line[a:b], style=STATE_STYLE.get(view.state, ""))
        text.append("\n")
    text.rstrip()
    return text


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
        pri = priority_text(view.urgent, view.priority, unknown="?")
        wait = human_duration((view.next - now).total_seconds()) if view.next else ""
        note = Text(printable(view.problem), style="bold red") if view.problem else ""
        table.add_row(*map(Text, (printable(view.name), printable(view.user), printable(view.rule),
                                  short_time(view.next, now), wait, pri)), note)
    return table
