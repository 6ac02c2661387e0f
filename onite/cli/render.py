"""Rich renderables for people (tables, the report's timeline); pure apart from the Console passed in.

rich (~50 ms to import) is imported by the functions that draw with it:
plain output (a pipe, --plain) and ``--json`` never load it.

A table goes to a terminal as a rich table (long cells fold within their
column). Anywhere else -- a pipe, a file, cron's mail -- or with ``--plain``
it is written *plain* (``plain_rows``): one line per row, never wrapped,
columns two spaces apart, every cell free of runs of spaces and of control
characters, ``-`` for an empty cell, so that grep and awk see one row per line
(docs/cli.md, "Output for scripts").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from onite.core.cells import human_duration, outcome_text, plain_table, priority_label, priority_text, short_time
from onite.core.jobview import JobView
from onite.core.safetext import phrase, printable

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

STATE_STYLE = {
    "queued": "cyan",
    "held": "yellow",
    "running": "bold blue",
    "done": "green",
    "failed": "bold red",
    "cancelled": "magenta",
    "timeout": "bold red",
    "refused": "red",
}


# A table of more rows than this is written as plain text: rich takes about a minute for 100,000 rows.
LARGE_TABLE = 2000

def plain_cell(text: str) -> str:
    """A cell for a plain table: control characters spelt out, runs of spaces made one, ``-`` if empty."""
    return phrase(text) or "-"


def plain_rows(columns: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]]) -> Iterator[str]:
    """The lines of a plain table (docs/cli.md): every cell left-justified under its title."""
    left = [(title, False) for title, _ in columns]
    return plain_table(left, ([plain_cell(cell) for cell in row] for row in rows))


def write_lines(out, lines: Iterable[str]) -> None:
    """Lines straight to a text file, or to a Console's file: rich neither wraps nor styles them."""
    getattr(out, "file", out).write("".join(line + "\n" for line in lines))


# (title, right-justified) of ``onite list``'s columns; DETAIL_COLUMNS follow with --all
JOB_COLUMNS = (("#", True), ("NAME", False), ("USER", False), ("PRI", False), ("AGE", True), ("STATE", False))
WAITING_COLUMNS = (("WAITING", False),)  # why a queued job cannot start now: only when one cannot
DETAIL_COLUMNS = (("HOST", False), ("STARTED", False), ("TOOK", True), ("MEM", True), ("CPU", True), ("RESULT", False))
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
            row += [printable(view.host or ""), short_time(view.started, now), human_duration(took), view.used_mem(),
                    human_duration(view.cpu_time) if view.cpu_time is not None else "", printable(outcome_text(view))]
        yield row


def jobs_table(views: Sequence[JobView], now: datetime, *, detailed: bool, waiting: bool = False) -> Table:
    """``onite list`` for a terminal: the rows of ``job_rows``, states in colour."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False)
    for title, right in job_columns(detailed, waiting):
        table.add_column(title, justify="right" if right else "left", overflow="fold" if title in FOLDED else "ellipsis")
    for row in job_rows(views, now, detailed=detailed, waiting=waiting):
        # every cell Text, never markup: a reason or a result may quote a path a user chose, [link=…] included
        cells = [Text(cell) for cell in row]
        cells[5].stylize(STATE_STYLE.get(row[5], ""))
        if waiting:
            cells[6].stylize("yellow")
        table.add_row(*cells)
    return table


def print_job_list(views: Sequence[JobView], now: datetime, *, detailed: bool, by_host: bool, out,
                   plain: bool = False) -> None:
    """``onite list`` on ``out``: one table, or one per host with ``by_host`` (always detailed);
    ``plain`` (``out`` a text file or a Console), or more than LARGE_TABLE rows: the same columns as
    plain text."""
    groups = [(None, views)] if not by_host else \
        [(host, [v for v in views if (v.host or "") == host]) for host in sorted({v.host or "" for v in views})]
    detailed = detailed or by_host
    for host, some in groups:
        waiting = any_waiting(some)
        if host is not None:
            title = host or "queued (no host yet)"
            if plain:
                write_lines(out, [title])
            else:
                from rich.text import Text

                out.print(Text(title, style="bold"))
        if plain:
            write_lines(out, plain_rows(job_columns(detailed, waiting),
                                        job_rows(some, now, detailed=detailed, waiting=waiting)))
        elif len(views) > LARGE_TABLE:
            write_lines(out, plain_table(job_columns(detailed, waiting),
                                         job_rows(some, now, detailed=detailed, waiting=waiting)))
        else:
            out.print(jobs_table(some, now, detailed=detailed, waiting=waiting))


def report_table(data, rows: Sequence[Sequence[str]]) -> Table:
    """``onite report``'s table: the cells of ``report.rows``, each job's state and reason in its state's colour."""
    from rich.table import Table
    from rich.text import Text

    from onite.app.reporttext import COLUMNS, state_word

    table = Table(box=None, header_style="bold", pad_edge=False)
    for title, right in COLUMNS:
        table.add_column(title, justify="right" if right else "left",
                         overflow="fold" if title in ("NAME", "REASON") else "ellipsis")
    for view, row in zip(data.jobs, rows):  # Text, not markup: a reason may quote a path with [brackets]
        style = STATE_STYLE.get(state_word(view), "")
        table.add_row(Text(row[0], style=style), *map(Text, row[1:-1]), Text(row[-1], style=style))
    return table


INDENT = "    "  # of a sentence's lines after its first, and of what follows a failure


def print_report(out, data, *, plain: bool) -> None:
    """``onite report`` on ``out`` (a rich Console): the window, the headline, each failure with its last
    lines of output and the command to read them all, what is not finished and why, the table, the
    timeline, the hosts. ``plain``: states in words, every line written as it is (never wrapped)."""
    from rich.text import Text

    from onite.app import report
    from onite.app import reporttext as rep

    words = plain or out.no_color

    def say(text: str, style: str = "", *, crop: bool = False) -> None:
        if plain:
            write_lines(out, [text])
        elif crop:  # a line of a job's output: cut at the terminal's edge, never folded into the next
            out.print(Text(text, style=style, no_wrap=True, overflow="ellipsis"))
        else:
            folded(Text(text, style=style))

    def folded(line: Text) -> None:
        """A sentence folded at the terminal's edge between words, the lines after its first indented:
        no text of a job's (a reason quoting a path) can start a line of its own, as if it were
        another sentence."""
        for i, part in enumerate(line.wrap(out, max(out.width - len(INDENT), 20))):
            out.print(Text(INDENT) + part if i else part, no_wrap=True, crop=True)

    def marked(word: str, text: str) -> None:
        if words:
            say(text)
        else:
            line = Text(rep.MARK.get(word, "?") + " ", style=STATE_STYLE.get(word, ""))
            line.append(text)
            folded(line)

    say(f"onite report for {printable(data.spool)}: {rep.window_text(data)}")
    say(rep.headline(data), "bold")
    failures = data.failures
    if failures:
        say("")
        for job in failures[:report.SHOWN_FAILURES]:
            marked(rep.state_word(job), rep.failure_text(data, job))
            lines, note = rep.failure_notes(data, job)
            for line in lines:
                say("    │ " + line, "dim", crop=True)
            if note:
                say("    " + note, "cyan" if note.startswith("onite ") else "")
        if len(failures) > report.SHOWN_FAILURES:
            say(f"… and {len(failures) - report.SHOWN_FAILURES} more failed: see the table below")
    if data.current and data.waiting:
        say("")
        say(rep.waiting_title(data), "bold")
        for row in data.waiting[:report.SHOWN_WAITING]:
            marked(row["state"], rep.waiting_text(row))
        more = sum(data.left.values()) - min(len(data.waiting), report.SHOWN_WAITING)
        if more > 0:
            say(f"… and {more} more: onite list")
        if data.left.get("queued") or data.left.get("since") or data.left.get("held"):
            say("why each waits, as it changes: onite status", "cyan")
    if not data.jobs:
        return
    say("")
    cells = rep.rows(data, marks=not words)
    start, end = rep.timeline_span(data)
    never = {id(job) for job in data.jobs if data.never_ran(job)}
    lines, bars = gantt_lines(data.jobs, start, end, out.width, never=never)
    if plain:
        write_lines(out, [*plain_rows(rep.COLUMNS, cells), "", *lines])
    elif len(data.jobs) > LARGE_TABLE:  # rich would take minutes: the same layout as plain text
        write_lines(out, [*plain_table(rep.COLUMNS, cells), "", *lines])
    else:
        out.print(report_table(data, cells))
        out.print()
        out.print(gantt_text(data.jobs, lines, bars))
    hosts = data.hosts
    if len(hosts) > 1:
        say("")
        say("by host")
        for host, row in hosts.items():
            say(f"  {printable(host)}: {row['jobs']} jobs ({row['share']:.0%}), {row['failed']} failed, "
                f"busy {human_duration(row['busy_seconds'])}")


GANTT_NAME = 24  # the widest name column of the timeline; a longer name ends in …


def gantt_lines(views: Sequence[JobView], start: datetime, end: datetime, width: int,
                never: set[int] = frozenset()) -> tuple[list[str], list[tuple[int, int]]]:
    """The timeline as lines of text ``width`` wide: a time axis (labels, then a rule with a tick under
    each), then a line per job, its name and its bar (█; × where a job that never ran, one whose
    ``id`` is in ``never`` or one with no start, ended). Also the columns [from, to) of each job's bar, to colour it."""
    from onite.app.reporttext import extent, ticks

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
        unrun = view.started is None or id(view) in never
        first, last = extent(view, start, end)
        if unrun:
            first = last
        a = min(int(first * bar_width), bar_width - 1)
        b = a + 1 if unrun else max(min(math.ceil(last * bar_width), bar_width), a + 1)  # however short, a job shows
        name = view.name if len(view.name) <= name_width else view.name[:name_width - 1] + "…"
        lines.append(name.ljust(name_width) + " " * (a + 1) + ("×" if unrun else "█") * (b - a))
        bars.append((name_width + 1 + a, name_width + 1 + b))
    return lines, bars


def gantt_text(views: Sequence[JobView], lines: list[str], bars: list[tuple[int, int]]) -> Text:
    """``gantt_lines`` in colour: each bar in its job's state's style, the axis dim."""
    from rich.text import Text

    from onite.app.reporttext import state_word

    text = Text(no_wrap=True, overflow="crop")
    text.append(lines[0] + "\n" + lines[1] + "\n", style="dim")
    for view, line, (a, b) in zip(views, lines[2:], bars):
        text.append(line[:a])
        text.append(line[a:b], style=STATE_STYLE.get(state_word(view), ""))
        text.append("\n")
    text.rstrip()
    return text


RECUR_COLUMNS = (("NAME", False), ("USER", False), ("RULE", False), ("NEXT", False), ("IN", True), ("PRI", False),
                 ("NOTE", False))


def recur_rows(views: Sequence, now: datetime) -> Iterator[list[str]]:
    """``onite recur list``'s cells: name, owner, rule, next fire, how soon, priority, what is wrong."""
    for view in views:
        pri = priority_text(view.urgent, view.priority, unknown="?")
        wait = human_duration((view.next - now).total_seconds()) if view.next else ""
        yield [printable(view.name), printable(view.user), printable(view.rule), short_time(view.next, now), wait,
               pri, printable(view.problem or "")]


def recur_table(views: Sequence, now: datetime) -> Table:
    """``onite recur list`` for a terminal (what is wrong in red)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False)
    for title, right in RECUR_COLUMNS:
        table.add_column(title, justify="right" if right else "left",
                         overflow="fold" if title in ("NAME", "NOTE") else "ellipsis")
    for row in recur_rows(views, now):
        table.add_row(*map(Text, row[:-1]), Text(row[-1], style="bold red"))
    return table


def print_recur_list(views: Sequence, now: datetime, *, out, plain: bool = False) -> None:
    """``onite recur list`` on ``out``: a table, or with ``plain`` one line per recurring job."""
    if plain:
        write_lines(out, plain_rows(RECUR_COLUMNS, recur_rows(views, now)))
    else:
        out.print(recur_table(views, now))
