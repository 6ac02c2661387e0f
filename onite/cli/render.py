"""What people read of list, recur list, report and status: rich on a terminal (imported only to draw there), else
plain lines that never wrap, cells two spaces apart (docs/cli.md, OUTPUT FOR SCRIPTS)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from onite.app.common import label as name_label
from onite.core.cells import human_duration, outcome_text, plain_table, priority_label, priority_text, short_time
from onite.core.jobview import JobView
from onite.core.record import Record
from onite.core.safetext import phrase, printable

STATE_STYLE = {"queued": "cyan", "held": "yellow", "running": "bold blue", "done": "green", "failed": "bold red",
               "cancelled": "magenta", "timeout": "bold red", "refused": "red"}
LARGE_TABLE = 2000  # rows past which a table is laid out as text: rich takes about a minute for 100,000
INDENT = "    "  # of a sentence's lines after its first, and of what follows a failure
GANTT_NAME = 24  # the name column of the timeline may be this wide, or a third of the line if more


class TableSpec(Record):
    """A table: only the free text (``cut``) may end in … at the terminal's edge, never a name, which users type;
    ``drops``: the columns to leave out, first to last (one with nothing in it first), where the terminal is too
    narrow for all."""

    columns: Sequence[tuple[str, bool]]  # (title, right-justified)
    rows: list[list[str]]
    cut: tuple[str, ...]
    styles: Callable[[int], dict[str, str]]  # row index -> {column title: style}
    drops: tuple[str, ...] = ()
    spare: tuple[str, ...] = ()  # the first of ``drops``, left out (in their order) rather than cut the free text
    widths: tuple[tuple[str, int], ...] = ()  # (title, width) of the free text that ``fit`` cut to the terminal


GAP = 2  # columns between two cells of a table
CUT_MIN = 10  # a column of free text narrower than this on the terminal is left out with the others


def fit(spec: TableSpec, width: int) -> TableSpec | None:
    """``spec`` with the columns that fit ``width``, one line a row: ``drops`` left out one at a time, then the
    free text, until they fit, and ``spare`` until the free text is whole too; None if even that does not fit."""
    from rich.cells import cell_len

    keep = list(range(len(spec.columns)))
    natural = {i: max([cell_len(spec.columns[i][0])] + [cell_len(row[i]) for row in spec.rows]) for i in keep}
    titles = [title for title, _ in spec.columns]
    drops = [titles.index(title) for title in (*spec.drops, *spec.cut) if title in titles]
    empty = {i for i in keep if all(row[i] in ("", "-") for row in spec.rows)}
    drops.sort(key=lambda i: i not in empty)  # a column with nothing in it goes before any other

    def need(cols: list[int]) -> int:  # the free text takes what is left, down to CUT_MIN (or its title)
        return sum(min(natural[i], max(CUT_MIN, len(titles[i]))) if titles[i] in spec.cut else natural[i]
                   for i in cols) + GAP * (len(cols) - 1)

    while need(keep) > width:
        if not drops:
            return None
        keep.remove(drops.pop(0))
    while drops and (titles[drops[0]] in spec.spare or drops[0] in empty) \
            and sum(natural[i] for i in keep) + GAP * (len(keep) - 1) > width:
        keep.remove(drops.pop(0))
    # the free text shares what the other columns leave, the shortest first, each up to its natural width: rich,
    # given a table too wide, would narrow every column alike, cutting names and users
    free = sorted((i for i in keep if titles[i] in spec.cut), key=natural.get)
    room = width - sum(natural[i] for i in keep if i not in free) - GAP * (len(keep) - 1)
    widths = []
    for n, i in enumerate(free):
        widths.append((titles[i], min(natural[i], room // (len(free) - n))))
        room -= widths[-1][1]
    return spec._replace(columns=[spec.columns[i] for i in keep], rows=[[row[i] for i in keep] for row in spec.rows],
                         widths=tuple(widths))


def write_lines(out, lines: Iterable[str]) -> None:
    """Lines straight to a text file, or to a Console's file: rich neither wraps nor styles them."""
    getattr(out, "file", out).write("".join(line + "\n" for line in lines))


def rich_table(spec: TableSpec):
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False)
    widths = dict(spec.widths)
    for title, right in spec.columns:
        table.add_column(title, justify="right" if right else "left", no_wrap=True, width=widths.get(title),
                         overflow="ellipsis" if title in spec.cut else "fold")
    for i, row in enumerate(spec.rows):  # Text, never markup: a cell may quote a path a user chose, [link=…] included
        styles = spec.styles(i)
        table.add_row(*(Text.assemble((cell, styles.get(title, ""))) for (title, _), cell in zip(spec.columns, row)))
    return table


def print_table(out, spec: TableSpec, *, plain: bool) -> None:
    """``spec`` on ``out``: plain lines, text laid out without rich (past LARGE_TABLE rows), or a rich table."""
    if not plain:
        fitted = fit(spec, out.width)
        plain, spec = fitted is None, fitted or spec
    if plain:
        write_lines(out, plain_table([(title, False) for title, _ in spec.columns],
                                     ([phrase(cell) or "-" for cell in row] for row in spec.rows)))
    elif len(spec.rows) > LARGE_TABLE:
        write_lines(out, plain_table(spec.columns, spec.rows))
    else:
        out.print(rich_table(spec))


# the columns ``onite list`` leaves out on a narrow terminal, first to last: where and how much before when and
# whose; the name, the state and why it waits or how it ended stay
LIST_DROPS = ("HOST", "CPU", "MEM", "STARTED", "AGE", "PRI", "#", "TOOK", "USER")
LIST_SPARE = LIST_DROPS[:6]  # those that go before why a job waits or how it ended is cut


def job_table(views: Sequence[JobView], now: datetime, *, detailed: bool, waiting: bool = False) -> TableSpec:
    """``onite list``: position, name, user, priority, age, state (``waiting``: why it waits; ``detailed``:
    where, when and how it ran)."""
    columns = [("#", True), ("NAME", False), ("USER", False), ("PRI", False), ("AGE", True), ("STATE", False)]
    columns += [("WAITING", False)] if waiting else []
    columns += [("HOST", False), ("STARTED", False), ("TOOK", True), ("MEM", True), ("CPU", True),
                ("RESULT", False)] if detailed else []
    rows = []
    for view in views:
        row = [str(view.position or ""), printable(name_label(view.name)), printable(view.user), priority_label(view),
               human_duration((now - view.submitted).total_seconds()), view.state]
        if waiting:
            row.append(printable(view.waiting or ""))
        if detailed:
            took = view.duration if view.finished else (now - view.started).total_seconds() if view.started else None
            row += [printable(view.host or ""), short_time(view.started, now), human_duration(took), view.used_mem(),
                    human_duration(view.cpu_time), printable(outcome_text(view))]
        rows.append(row)
    return TableSpec(columns, rows, ("WAITING", "RESULT"),
                     lambda i: {"STATE": STATE_STYLE.get(rows[i][5], ""), "WAITING": "yellow"}, LIST_DROPS, LIST_SPARE)


def print_job_list(views: Sequence[JobView], now: datetime, *, detailed: bool, by_host: bool, out,
                   plain: bool = False) -> None:
    """``onite list`` on ``out``: one table, or one per host with ``by_host`` (always detailed)."""
    for host in sorted({view.host or "" for view in views}) if by_host else [None]:
        some = views if host is None else [view for view in views if (view.host or "") == host]
        if host is not None:  # a title escaped as its column; a job cancelled while queued never had a host
            title = printable(host) or ("queued (no host yet)" if all(v.state in ("queued", "held") for v in some)
                                        else "no host: queued, or never ran")
            if plain:
                write_lines(out, [title])
            else:
                from rich.text import Text

                out.print(Text(title, style="bold"))
        spec = job_table(some, now, detailed=detailed or by_host, waiting=any(view.waiting for view in some))
        print_table(out, spec, plain=plain)


RECUR_COLUMNS = (("NAME", False), ("USER", False), ("RULE", False), ("NEXT", False), ("IN", True), ("PRI", False),
                 ("NOTE", False))


def print_recur_list(views: Sequence, now: datetime, *, out, plain: bool = False) -> None:
    """``onite recur list``; NOTE: what is wrong (in red), or what its next fire waits for."""
    rows = [[printable(name_label(view.name)), printable(view.user), printable(view.rule), short_time(view.next, now),
             human_duration((view.next - now).total_seconds()) if view.next else "",
             priority_text(view.urgent, view.priority, unknown="?"), printable(view.problem or _skipped(view.waits_for))]
            for view in views]
    styles = lambda i: {"NOTE": "bold red" if views[i].problem else ""}  # noqa: E731
    print_table(out, TableSpec(RECUR_COLUMNS, rows, ("NOTE",), styles, ("PRI", "IN", "USER", "RULE")), plain=plain)


def _skipped(run: str | None) -> str:
    """What holds a template's next fire back, in recur list and status: its run still queued or running."""
    return f"skipped while its run {run} is queued or running" if run else ""


def report_table(data, rows: list[list[str]]) -> TableSpec:
    """``onite report``'s table: each job's state and reason in its state's colour."""
    from onite.app.reporttext import COLUMNS, state_word

    return TableSpec(COLUMNS, rows, ("REASON",),
                     lambda i: dict.fromkeys(("STATE", "REASON"), STATE_STYLE.get(state_word(data.jobs[i]), "")),
                     ("HOST", "CPU", "MEM", "TRIES", "PRI", "STARTED", "EXIT", "TOOK", "USER"))


def print_report(out, data, *, plain: bool) -> None:
    """``onite report`` on ``out`` (a rich Console): the window, the headline, each failure with its last lines of
    output, what is not finished and why, the table, the timeline, the hosts; ``plain``: words, never wrapped."""
    from rich.text import Text

    from onite.app import report
    from onite.app import reporttext as rep

    words = plain or out.no_color

    def say(text: str, style: str = "", *, crop: bool = False, mark: str = "") -> None:
        if plain:
            write_lines(out, [text])
        elif crop:  # a line of a job's output: cut at the terminal's edge, never folded into the next
            out.print(Text(text, style=style, no_wrap=True, overflow="ellipsis"))
        else:  # folded between words, the lines after the first indented: no text of a job's starts a line
            if mark and not words:
                text, style = f"{rep.MARK.get(mark, '?')} {text}", STATE_STYLE.get(mark, "")
            for i, part in enumerate(Text(text, style=style).wrap(out, max(out.width - len(INDENT), 20))):
                out.print(Text(INDENT) + part if i else part, no_wrap=True, crop=True)

    say(f"onite report for {printable(data.spool)}: {rep.window_text(data)}")
    say(rep.headline(data), "bold")
    failures, others = rep.told_failures(data)
    if failures or others:
        say("")
        for job in failures[:report.SHOWN_FAILURES]:
            say(rep.failure_text(data, job), mark=rep.state_word(job))
            lines, note = rep.failure_notes(data, job)
            for line in lines:
                say("    │ " + line, "dim", crop=True)
            if note:
                say("    " + note, "cyan" if note.startswith("onite ") else "")
            step = rep.next_step(data, job)
            if step:
                say(f"    next: {step}", "cyan")
        if len(failures) > report.SHOWN_FAILURES:
            say(f"… and {len(failures) - report.SHOWN_FAILURES} more failed: see the table below")
        if others:
            say(rep.others_failures_text(others))
    if data.current and data.waiting:
        say("")
        say(rep.waiting_title(data), "bold")
        for row in data.waiting[:report.SHOWN_WAITING]:
            say(rep.waiting_text(row), mark=row["state"])
        more = sum(data.left.values()) - min(len(data.waiting), report.SHOWN_WAITING)
        if more > 0:
            say(f"… and {more} more: onite list")
        if data.left.get("queued") or data.left.get("since") or data.left.get("held"):
            say("why each waits, as it changes: onite status", "cyan")
    if not data.jobs:
        return
    say("")
    print_table(out, report_table(data, rep.rows(data, marks=not words)), plain=plain)
    lines, bars = gantt_lines(data, out.width)
    if plain or len(data.jobs) > LARGE_TABLE:
        write_lines(out, ["", *lines])
    else:  # the timeline in colour: each bar in its job's state's style, the axis dim
        timeline = Text(no_wrap=True, overflow="crop")
        timeline.append(lines[0] + "\n" + lines[1] + "\n", style="dim")
        for job, line, (a, b) in zip(data.jobs, lines[2:], bars):
            timeline.append(line[:a])
            timeline.append(line[a:b], style=STATE_STYLE.get(rep.state_word(job), ""))
            timeline.append("\n")
        timeline.rstrip()
        out.print()
        out.print(timeline)
    if len(data.hosts) > 1:
        say("")
        say("by host")
        for host, row in data.hosts.items():
            say(f"  {printable(host)}: {row['jobs']} jobs ({row['share']:.0%}), {row['failed']} failed, "
                f"busy {human_duration(row['busy_seconds'])}")


def gantt_lines(data, width: int) -> tuple[list[str], list[tuple[int, int]]]:
    """The report's timeline as lines ``width`` wide: a time axis (labels, a rule with ticks), then each job's
    name and bar (█; × where a job that never ran ended); and the columns [from, to) of each bar, to colour it."""
    from onite.app.reporttext import timeline

    name_width = max(4, min(max(GANTT_NAME, width // 3), max(len(name_label(job.name)) for job in data.jobs)))
    bar_width = max(width - name_width - 1, 16)
    _, _, marks, jobs = timeline(data, bar_width // 10)  # room for HH:MM:SS and a gap
    labels, rule, free = [" "] * bar_width, ["─"] * bar_width, 0
    for at, label in marks:
        col = min(int(at * bar_width), bar_width - 1)
        rule[col] = "┬"
        if col >= free and col + len(label) <= bar_width:
            labels[col:col + len(label)] = label
            free = col + len(label) + 1
    indent = " " * (name_width + 1)
    lines, bars = [(indent + "".join(labels)).rstrip(), indent + "".join(rule)], []
    for job, first, last, unrun in jobs:
        a = min(int((last if unrun else first) * bar_width), bar_width - 1)
        b = a + 1 if unrun else max(min(math.ceil(last * bar_width), bar_width), a + 1)  # however short, a job shows
        name = name_label(job.name)
        if len(name) > name_width:  # cut in the middle: names of a batch differ at their ends (sample-07)
            keep = name_width - 1
            name = name[:(keep + 1) // 2] + "…" + name[len(name) - keep // 2:]
        lines.append(name.ljust(name_width) + " " * (a + 1) + ("×" if unrun else "█") * (b - a))
        bars.append((name_width + 1 + a, name_width + 1 + b))
    return lines, bars


STATUS_LABEL = 10  # the width of status's labels ("next run  "), under which its folded lines go on


def print_status(console, info, *, plain: bool = False) -> None:
    """``onite status``: a line each, on ``console`` (a rich Console) folded between words under its label;
    ``plain`` (``console`` may then be a text file) never folded, as scripts grep it; the running jobs as a table."""
    from onite.app.report import PRIVATE

    esc = printable  # text from users and files: no control characters

    def say(*parts: str | tuple[str, str]) -> None:  # each part text, or (text, style)
        if plain:
            write_lines(console, ["".join(part if isinstance(part, str) else part[0] for part in parts)])
            return
        from rich.text import Text

        text, room = Text.assemble(*parts), console.width - STATUS_LABEL
        if room < 30 or text.cell_len <= console.width:  # too narrow to fold under a label: the terminal folds it
            console.print(text, soft_wrap=True)
            return
        for i, line in enumerate(text[STATUS_LABEL:].wrap(console, room)):
            console.print(Text.assemble(text[:STATUS_LABEL] if i == 0 else " " * STATUS_LABEL, line), soft_wrap=True)

    def until(when: datetime) -> str:
        return human_duration((when - info.now).total_seconds())

    say(f"spool     {esc(info.location or info.spool)}")
    for d in info.drivers:  # a live heartbeat's: its pid, start and state are always known
        what = f"daemon, {d['state']}" if d["role"] == "daemon" else "driver"
        ago = human_duration((info.now - d["since"]).total_seconds())
        detail = f"pid {d['pid']}, since {d['since']:%Y-%m-%d %H:%M} ({ago} ago)" + (
            f", started by {d['started_by']}" if d["started_by"] else "")
        say("driver    ", ("running", "green"), f" on {esc(d['host'])} ({what}, {esc(detail)})")
    last = info.last_driver
    if not info.drivers:
        ended = (f" (the last one ended {last['ended']:%Y-%m-%d %H:%M}, started by "
                 f"{esc(last['started_by'])})" if last and not last["died"] and last.get("ended") else "")
        say(f"driver    not running{ended}")
    from onite.drain.nextdrain import LABEL, no_drain_text

    nxt = info.drain.next
    if nxt is not None:
        say(f"next run  {nxt.when:%Y-%m-%d %H:%M} (in {until(nxt.when)}) by {LABEL.get(nxt.by, nxt.by)} on "
            f"{esc(nxt.host)}" + (f", until {info.until}" if info.until else ""))
    else:
        say("next run  ", (f"none: {esc(no_drain_text(info.drain))}", "yellow"))
    closed = info.spooling.closed
    if closed:
        say("spooling  ", (f"closed since {info.cutoff} (cutoff)", "yellow"),
            f"; opens again at {info.spooling.reopens:%H:%M}")
    elif info.cutoff:
        say(f"spooling  open until {info.cutoff} (cutoff)")
    if info.containment:
        kind, limits, capacity, pam = (info.containment.get(key) for key in ("kind", "limits", "capacity", "pam"))
        say("contain   ", (esc(kind), "green" if kind.startswith(("cgroup2", "subreaper")) else "yellow"),
            f" (as the last driver on {esc(info.containment['host'])} said)")
        if limits:  # the last driver's words: this command measures nothing of root's cgroups
            say("limits    last drain: ", (esc(limits), "yellow" if limits.startswith("not enforced") else "green"),
                f"; capacity {esc(capacity)}" if capacity else "")
            if kind.startswith("cgroup2") and limits.startswith("cgroup v1"):  # both true: say why they differ
                say(" " * STATUS_LABEL, "a hybrid host: jobs are contained in cgroup2, their limits set by its "
                    "cgroup v1 controllers")
        if pam:
            say("pam       last drain: ", (esc(pam), "yellow" if pam.startswith("no session") else "green"))
        if info.containment.get("pam_fix"):
            say(" " * STATUS_LABEL, (f"not installed here; as root: {esc(info.containment['pam_fix'])}", "cyan"))
    for warning in info.warnings:
        say(("warning", "red"), f"   {esc(warning)}")
    counts = ", ".join(f"{k} {v}" for k, v in info.queue.items() if v) or "empty"
    say(f"queued    {sum(info.queue.values())} ({counts})" + (f"; {info.held} held" if info.held else ""))
    label = "waiting  "
    for row in info.waiting:
        reason = row["reason"] + (f" ({PRIVATE})" if row["private"] else "")
        say(f"{label} {esc(row['name'])} ({esc(row['user'])}, {priority_text(row['urgent'], row['priority'])}): ",
            (esc(reason), "red" if row["kind"] in ("will_fail", "unreadable") else "yellow"))
        label = "         "
    if info.not_examined and info.waiting:
        say(f"{label} …and {info.not_examined} more not examined")
    elif info.not_examined:  # the first EXAMINE all wait for a drain, and no more
        examined = sum(info.queue.values()) - info.not_examined
        say(f"{label} none of the first {examined} waits for more than a drain (of the jobs you may read); "
            f"{info.not_examined} more not examined")
    day = info.last_night
    c, failed, more = day["counts"], day["failed"], day["failed_total"] - len(day["failed"])
    failed = " (" + ", ".join(map(esc, failed)) + (f", … {more} more" if more else "") + ")" if failed else ""
    command = "onite report" if day["window"] == "drain" else f"onite report --night {day['night']}"
    say("so far    " if day["draining"] else "last night ", (f"{c['done']} done", "green"), ", ",
        (f"{c['failed']} failed", "red"), f"{failed}, {c['cancelled']} cancelled ({command})")
    for i, step in enumerate(day["next"][:3]):
        when = f"from {info.spooling.reopens:%H:%M} (spooling is closed): " if closed and i == 0 else ""  # restart spools
        say("next      " if i == 0 else "          ", (when + esc(step), "cyan"))
    if len(day["next"]) > 3:
        say(f"          … and {len(day['next']) - 3} more: {command}")
    if info.running:
        say(f"running   {len(info.running)}")
        print_table(console, job_table(info.running, info.now, detailed=True), plain=plain)
    for view in info.recurring:
        say(f"recurring {esc(name_label(view.name))} ({esc(view.user)}, "
            f"{priority_text(view.urgent, view.priority, unknown='?')}, {esc(view.rule)}) "
            f"next {view.next:%Y-%m-%d %H:%M} (in {until(view.next)})"
            + (f"; {_skipped(esc(view.waits_for))}" if view.waits_for else ""))
