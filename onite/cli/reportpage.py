"""``onite report --html FILE``: the morning report as one self-contained page (pure, but for ``write_html``).

The page answers first what the terminal report answers first: the headline,
then every failure (name, state, reason, attempts, the command that prints
its output), then what is not finished, then the timeline and the table of
all jobs. On a phone (40rem and less) nothing scrolls sideways: the table's
rows stack, one cell a line, and long words break.

Invariants: no script, nothing fetched (no font, image or style from
anywhere), so that it can be mailed or served as it is; every text from a
user (names, reasons, paths) is escaped, with control characters spelt out;
no job's output is on it -- a page is meant to be shared, and output is
private to its job's owner.
"""

from __future__ import annotations

import html as _html
import os
from pathlib import Path

from onite.core.cells import human_duration, priority_label
from onite.core.errors import InvalidInput
from onite.core.safetext import printable

# the page's colours of the states, on white (the tests look for them in a screenshot)
HTML_COLOUR = {"done": "#2e7d32", "failed": "#c62828", "timeout": "#c62828", "cancelled": "#8e24aa",
               "queued": "#1565c0", "running": "#1565c0", "held": "#b26a00", "refused": "#c62828"}

_CSS = """*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0 auto;padding:.6rem 1rem;color:#222;line-height:1.35;max-width:100rem}
h1{font-size:1.3rem;margin:.2rem 0} h2{font-size:1.05rem;margin:1rem 0 .3rem}
p{margin:.3rem 0} code{font-size:.95em;overflow-wrap:anywhere}
.headline{font-size:1.1rem;font-weight:600}
""" + "\n".join(f".{state}{{color:{colour}}}" for state, colour in HTML_COLOUR.items()) + """
ul.list{list-style:none;margin:0;padding:0}
ul.list li{padding:.3rem .5rem;margin:.2rem 0;border-left:4px solid #ccc;background:#fafafa;overflow-wrap:anywhere}
""" + "\n".join(f"ul.list li.{state}{{border-left-color:{colour}}}" for state, colour in HTML_COLOUR.items()) + """
li .name{font-weight:600} li .state{font-weight:600} li .note{display:block;color:#555;font-size:.9em}
svg.gantt{display:block;width:100%}
svg.gantt text{font-family:system-ui,sans-serif;fill:#222;font-size:12px} svg.gantt .axis text{fill:#666;font-size:11px}
svg.gantt line{stroke:#ddd;stroke-width:1}
svg.gantt .never{font-size:16px;font-weight:700}
""" + "\n".join(f"svg.gantt text.never.{state}{{fill:{colour}}}" for state, colour in HTML_COLOUR.items()) + """
svg.icon{vertical-align:-0.1em}
table.jobs{border-collapse:collapse;width:100%}
table.jobs td,table.jobs th{padding:.2em .5em;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
table.jobs th{background:#f5f5f5} table.jobs td.reason{white-space:normal}
@media (max-width:40rem){
 body{padding:.4rem .5rem}
 svg.gantt .axis .minor{display:none}
 table.jobs thead{display:none}
 table.jobs,table.jobs tbody,table.jobs tr,table.jobs td{display:block;width:auto}
 table.jobs tr{border-bottom:1px solid #ccc;padding:.3rem 0}
 table.jobs td{border:0;padding:0 .2rem;white-space:normal;overflow-wrap:anywhere}
 table.jobs td::before{content:attr(data-label) ": ";color:#777;font-size:.85em}
 table.jobs td.state::before,table.jobs td.name::before{content:none}
 table.jobs td.state,table.jobs td.name{display:inline;font-weight:600}
 table.jobs td:empty{display:none}
}"""

_TOP, _ROW = 22, 26  # the timeline's axis and row heights, in pixels; across, everything is a percentage
_LEFT, _RIGHT = 0.5, 99.5  # the bars' extent, in percent of the width


def _esc(text: str) -> str:
    return _html.escape(printable(text))


def _pct(value: float) -> str:
    return f"{value:.3f}%"


def gantt_svg(data) -> str:
    """The timeline as inline SVG as wide as the page: a time axis on top, then for each job its name
    over its bar (at least a few pixels wide, however short the job); × where a job that never ran ended."""
    from onite.app.reporttext import extent, state_word, ticks, timeline_span

    start, end = timeline_span(data)
    height = _TOP + _ROW * len(data.jobs) + 4
    span = _RIGHT - _LEFT
    parts = [f'<svg class=gantt width="100%" height="{height}" role=img '
             f'aria-label="timeline from {start.astimezone():%H:%M:%S} to {end.astimezone():%H:%M:%S}">',
             "<g class=axis>"]
    marks = ticks(start, end, 8)
    for i, (when, label) in enumerate(marks):
        x = _LEFT + span * (when - start).total_seconds() / max((end - start).total_seconds(), 1e-6)
        minor = " class=minor" if i % 2 else ""
        anchor = "end" if x > 88 else "start"
        parts.append(f'<line x1="{_pct(x)}" y1="15" x2="{_pct(x)}" y2="{height - 2}"/>'
                     f'<text{minor} x="{_pct(x)}" y="11" text-anchor="{anchor}">{_esc(label)}</text>')
    parts.append("</g>")
    for i, job in enumerate(data.jobs):
        top = _TOP + i * _ROW
        word = state_word(job)
        colour = HTML_COLOUR.get(word, "#555")
        took = "never ran" if data.never_ran(job) else human_duration(job.duration)
        tip = f"{job.name} ({job.user}): {word}, {took}" + (f", {job.reason}" if job.reason else "")
        parts.append(f'<g class=job><text x="4" y="{top + 10}">{_esc(job.name)}</text>')
        first, last = extent(job, start, end)
        if job.started is None or data.never_ran(job):
            x = _LEFT + span * last
            parts.append(f'<text class="never {word}" x="{_pct(x)}" y="{top + 24}" text-anchor="middle" '
                         f'fill="{colour}"><title>{_esc(tip)}</title>×</text></g>')
            continue
        x, w = _LEFT + span * first, max(span * (last - first), 0.05)
        # the stroke, of the bar's own colour, keeps a job of a few milliseconds a few pixels wide
        parts.append(f'<rect class="bar {word}" x="{_pct(x)}" y="{top + 14}" width="{_pct(w)}" height="8" '
                     f'fill="{colour}" stroke="{colour}" stroke-width="4" shape-rendering="crispEdges">'
                     f'<title>{_esc(tip)}</title></rect></g>')
    parts.append("</svg>")
    return "\n".join(parts)


# the stopwatch of a timeout, drawn: few fonts have U+23F1, and the page fetches none
_STOPWATCH = ('<svg class=icon viewBox="0 0 16 16" width="0.9em" height="0.9em" aria-label=timeout>'
              '<circle cx="8" cy="9.5" r="5.5" fill="none" stroke="currentColor" stroke-width="2"/>'
              '<path d="M8 9.5V6.5M6 1.5h4M8 1.5v2.5" stroke="currentColor" stroke-width="2" fill="none"/></svg>')


def _mark(word: str) -> str:
    from onite.app.reporttext import MARK

    return f'<span class="mark {word}">{_STOPWATCH if word == "timeout" else MARK.get(word, "")}</span>'


def _failure_item(data, job) -> str:
    from onite.app.reporttext import failure_notes, failure_what, state_word

    word = state_word(job)
    who = ", ".join(x for x in (printable(job.user), priority_label(job)) if x)
    _, note = failure_notes(data, job)
    if note.startswith("onite output "):
        note = f"<code>{_esc(note)}</code> (its owner or root)"
    elif note:
        note = _esc(note)
    return (f'<li class="failure {word}">{_mark(word)} <span class=name>{_esc(job.name)}</span> ({_esc(who)}) '
            f'<span class="state {word}">{_esc(failure_what(data, job))}</span>'
            + (f'<span class=note>{note}</span>' if note else "") + "</li>")


def _waiting_item(row: dict) -> str:
    from onite.core.cells import priority_text

    state = row["state"]
    who = ", ".join(x for x in (row["user"], priority_text(row["urgent"], row["priority"])) if x)
    command = f'<span class=note><code>{_esc(row["command"])}</code></span>' if row["command"] else ""
    return (f'<li class="waiting {state}">{_mark(state)} '
            f'<span class=name>{_esc(row["name"])}</span> ({_esc(who)}) <span class="state {state}">{state}</span>: '
            f'<span class=reason>{_esc(row["reason"])}</span>{command}</li>')


def to_html(data) -> str:
    """The page: the headline, the failures, what is not finished, the timeline, the table."""
    from onite.app.report import SHOWN_FAILURES, SHOWN_WAITING
    from onite.app.reporttext import COLUMNS, headline_parts, rows, state_word, waiting_title, window_text

    esc = _esc
    title = f"the night of {data.night.isoformat()}" if data.night else f"{data.now.astimezone():%Y-%m-%d %H:%M}"
    who = f"user <b>{esc(data.user)}</b>: " if data.user is not None else ""
    headline = ", ".join(f"<span class={key}>{esc(text)}</span>" for key, text in headline_parts(data))
    sections = []
    failures = data.failures
    if failures:
        items = [_failure_item(data, job) for job in failures[:SHOWN_FAILURES]]
        more = len(failures) - SHOWN_FAILURES
        sections.append(f"<section id=failures><h2>Failed ({len(failures)})</h2>\n<ul class=list>\n"
                        + "\n".join(items) + "\n</ul>"
                        + (f"<p>… and {more} more in the table below.</p>" if more > 0 else "") + "</section>")
    if data.current and data.waiting:
        items = [_waiting_item(row) for row in data.waiting[:SHOWN_WAITING]]
        more = sum(data.left.values()) - len(items)
        title_text = waiting_title(data)
        sections.append(f"<section id=waiting><h2>{esc(title_text[0].upper() + title_text[1:])}</h2>\n"
                        f"<ul class=list>\n" + "\n".join(items) + "\n</ul>"
                        + (f"<p>… and {more} more: <code>onite list</code></p>" if more > 0 else "")
                        + "<p>Why each waits, as it changes: <code>onite status</code></p></section>")
    if data.jobs:
        head = "".join(f"<th>{esc(name)}</th>" for name, _ in COLUMNS)
        body = []
        for job, cells in zip(data.jobs, rows(data)):
            word = state_word(job)
            tds = [f'<td class={name.lower()} data-label="{name}">{esc(cell)}</td>'
                   for (name, _), cell in zip(COLUMNS, cells)]
            tds[0] = f'<td class="state {word}" data-label="STATE">{esc(cells[0])}</td>'
            tds[-1] = f'<td class="reason {word}" data-label="REASON">{esc(cells[-1])}</td>'
            body.append(f"<tr class=job>{''.join(tds)}</tr>")
        sections.append(f"<section id=timeline><h2>Timeline</h2>\n{gantt_svg(data)}</section>")
        sections.append(f"<section id=jobs><h2>All jobs ({len(data.jobs)})</h2>\n<table class=jobs>\n"
                        f"<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(body) + "\n</tbody></table></section>")
    else:
        sections.append("<p>No jobs finished in this window.</p>")
    newline = "\n"
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width,initial-scale=1">
<title>onite report, {esc(title)}</title>
<style>
{_CSS}
</style></head><body>
<header>
<h1>onite report</h1>
<p class=window>Spool <code>{esc(data.spool)}</code>: {esc(window_text(data))}.</p>
<p class=headline>{who}{headline}</p>
</header>
{newline.join(sections)}
</body></html>
"""


def write_html(path: Path, data) -> None:
    """Write the page to ``path``: a file is replaced all or nothing (a temporary file beside it,
    renamed over it); a device, a pipe or a link to one (/dev/stdout) is written to, never replaced.

    Raises:
        InvalidInput: ``path`` cannot be written, or is a folder or a link to a file.
    """
    import stat

    text = to_html(data).encode("utf-8")
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise InvalidInput(f"cannot write {path}: {err.strerror or err}", "choose a writable path") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InvalidInput(f"cannot write {path}: it is a folder", "give the page a file name")
    if st is not None and stat.S_ISBLK(st.st_mode):
        raise InvalidInput(f"cannot write {path}: it is a disk", "give the page a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        if st.st_uid not in (0, os.geteuid()):  # planted where root writes its page (in /tmp): a link to a
            # disk, or a pipe no one reads (root's report would wait for ever)
            raise InvalidInput(f"cannot write {path}: it is another user's", "write the page somewhere else")
        _write_through(path, text)
    else:
        _replace(path, text)


def _write_through(path: Path, text: bytes) -> None:
    """Write to a character device, a pipe, or what a link names if it is one of those: never through a
    link to a file or a disk (a file is replaced, never written through)."""
    import stat

    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)  # no O_CREAT, no O_TRUNC: nothing changes yet
    except OSError as err:
        raise InvalidInput(f"cannot write {path}: {err.strerror or err}", "choose a writable path") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            raise InvalidInput(f"{path} is a symbolic link to a file", "give the file's own path")
        if stat.S_ISBLK(mode):
            raise InvalidInput(f"cannot write {path}: it is a disk", "give the page a file name")
        view = memoryview(text)
        while view:
            view = view[os.write(fd, view):]
    except OSError as err:
        raise InvalidInput(f"cannot write {path}: {err.strerror or err}", "choose a writable path") from None
    finally:
        os.close(fd)


def _replace(path: Path, text: bytes) -> None:
    import tempfile

    tmp = None
    try:  # the page is made beside its name: what fails first is its folder's, and the message says so
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise InvalidInput(f"cannot write {path}: no new file can be made in {path.parent} "
                           f"({err.strerror or err})", "choose a path in a folder you may write") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text)
            os.fchmod(out.fileno(), 0o644)  # a page to be served or shared, not a secret
        os.replace(tmp, path)
    except OSError as err:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise InvalidInput(f"cannot write {path}: {err.strerror or err}", "choose a writable path") from None
