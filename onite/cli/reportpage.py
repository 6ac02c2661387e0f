"""``onite report --html FILE``: the morning report as one self-contained page (pure, but for ``write_html``): no
script, nothing fetched, so it can be mailed or served; nothing scrolls sideways on a phone; every user's text
escaped; no job's output (private to its owner) on a page meant to be shared."""

from __future__ import annotations

import contextlib
import errno
import html as _html
import os
import stat
from pathlib import Path

from onite.app.common import label as name_label
from onite.app.report import SHOWN_FAILURES, SHOWN_WAITING
from onite.app.reporttext import (COLUMNS, MARK, failure_notes, failure_what, headline_parts, next_step,
                                  others_failures_text, rows, state_word, timeline, told_failures, waiting_title,
                                  window_text)
from onite.core.cells import human_duration, priority_label, priority_text
from onite.core.errors import InvalidInput, OniteError
from onite.core.safetext import printable

# the page's colours of the states, on white (the tests look for them in a screenshot)
HTML_COLOUR = {"done": "#2e7d32", "failed": "#c62828", "timeout": "#c62828", "cancelled": "#8e24aa",
               "queued": "#1565c0", "running": "#1565c0", "held": "#b26a00", "refused": "#c62828"}

_TOP, _ROW = 18, 22  # the timeline's axis and (least) row heights, in pixels; across, everything is a percentage
_LEFT, _RIGHT = 0.5, 99.5  # the bars' extent, in percent of the chart's width

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
.gantt{display:grid;grid-template-columns:fit-content(40%) 1fr;column-gap:.5rem;align-items:stretch;width:100%}
.gantt .label{font-size:12px;align-self:center;overflow-wrap:anywhere;line-height:1.2}
.gantt svg{display:block;width:100%;height:100%;min-height:""" + str(_ROW) + """px;overflow:visible}
.gantt svg.axis{min-height:""" + str(_TOP) + """px;overflow:hidden}
.gantt text{font-family:system-ui,sans-serif;fill:#222;font-size:12px} .gantt .axis text{fill:#666;font-size:11px}
.gantt line{stroke:#ddd;stroke-width:1}
.gantt .never{font-size:16px;font-weight:700}
""" + "\n".join(f".gantt text.never.{state}{{fill:{colour}}}" for state, colour in HTML_COLOUR.items()) + """
svg.icon{vertical-align:-0.1em}
table.jobs{border-collapse:collapse;width:100%}
table.jobs td,table.jobs th{padding:.2em .5em;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
table.jobs th{background:#f5f5f5} table.jobs td.reason{white-space:normal}
@media (max-width:40rem){
 body{padding:.4rem .5rem}
 .gantt .axis .minor{display:none}
 table.jobs thead{display:none}
 table.jobs,table.jobs tbody,table.jobs tr,table.jobs td{display:block;width:auto}
 table.jobs tr{border-bottom:1px solid #ccc;padding:.3rem 0}
 table.jobs td{border:0;padding:0 .2rem;white-space:normal;overflow-wrap:anywhere}
 table.jobs td::before{content:attr(data-label) ": ";color:#777;font-size:.85em}
 table.jobs td.state::before,table.jobs td.name::before{content:none}
 table.jobs td.state,table.jobs td.name{display:inline;font-weight:600}
 table.jobs td:empty{display:none}
}"""



def _esc(text: str) -> str:
    return _html.escape(printable(text))


def _pct(value: float) -> str:
    return f"{value:.3f}%"


def gantt_svg(data) -> str:
    """The timeline as wide as the page: each job's name (whole, wrapped if it must) beside its row, a bar (a few
    pixels at least) or a × on the name's line; a time axis on top, each label within the chart; the ticks' lines
    down every row."""
    start, end, ticks, bars = timeline(data, 6)
    span = _RIGHT - _LEFT
    marks = [(_LEFT + span * at, label) for at, label in ticks]
    lines = "".join(f'<line x1="{_pct(x)}" y1="0" x2="{_pct(x)}" y2="100%"/>' for x, _ in marks)
    axis = []
    for i, (x, label) in enumerate(marks):
        minor = " class=minor" if i % 2 else ""
        anchor = "start" if x < 25 else "end" if x > 75 else "middle"
        axis.append(f'<text{minor} x="{_pct(x)}" y="12" text-anchor="{anchor}">{_esc(label)}</text>')
    parts = [f'<div class=gantt role=img aria-label="timeline from {start.astimezone():%H:%M:%S} to '
             f'{end.astimezone():%H:%M:%S}"><span></span>',
             f'<svg class="axis" width="100%" height="{_TOP}">{lines}{"".join(axis)}</svg>']
    for job, first, last, unrun in bars:
        word = state_word(job)
        colour = HTML_COLOUR.get(word, "#555")
        took = "never ran" if unrun else human_duration(job.duration)
        tip = f"{name_label(job.name)} ({job.user}): {word}, {took}" + (f", {job.reason}" if job.reason else "")
        if unrun:
            mark = (f'<text class="never {word}" x="{_pct(_LEFT + span * last)}" y="50%" dy="0.35em" '
                    f'text-anchor="middle" fill="{colour}"><title>{_esc(tip)}</title>×</text>')
        else:
            x, w = _LEFT + span * first, max(span * (last - first), 0.05)
            # the stroke, of the bar's own colour, keeps a job of a few milliseconds a few pixels wide
            mark = (f'<rect class="bar {word}" x="{_pct(x)}" y="50%" transform="translate(0,-4)" width="{_pct(w)}" '
                    f'height="8" fill="{colour}" stroke="{colour}" stroke-width="4" shape-rendering="crispEdges">'
                    f'<title>{_esc(tip)}</title></rect>')
        parts.append(f'<span class=label>{_esc(name_label(job.name))}</span><svg class=row width="100%" height="{_ROW}">'
                     f'{lines}{mark}</svg>')
    parts.append("</div>")
    return "\n".join(parts)


# the stopwatch of a timeout, drawn: few fonts have U+23F1, and the page fetches none
_STOPWATCH = ('<svg class=icon viewBox="0 0 16 16" width="0.9em" height="0.9em" aria-label=timeout>'
              '<circle cx="8" cy="9.5" r="5.5" fill="none" stroke="currentColor" stroke-width="2"/>'
              '<path d="M8 9.5V6.5M6 1.5h4M8 1.5v2.5" stroke="currentColor" stroke-width="2" fill="none"/></svg>')


def _item(kind: str, word: str, name: str, who: str, what: str, rest: str) -> str:
    mark = _STOPWATCH if word == "timeout" else MARK.get(word, "")
    return (f'<li class="{kind} {word}"><span class="mark {word}">{mark}</span> <span class=name>{_esc(name)}</span> '
            f'({_esc(who)}) <span class="state {word}">{_esc(what)}</span>{rest}</li>')


def _failure_item(data, job) -> str:
    _, note = failure_notes(data, job)
    note = f"<code>{_esc(note)}</code> (its owner or root)" if note.startswith("onite output ") else _esc(note)
    step = next_step(data, job)
    who = ", ".join(x for x in (printable(job.user), priority_label(job)) if x)
    return _item("failure", state_word(job), name_label(job.name), who, failure_what(data, job),
                 (f"<span class=note>{note}</span>" if note else "")
                 + (f"<span class=note>next: <code>{_esc(step)}</code></span>" if step else ""))


def _waiting_item(row: dict) -> str:
    command = f'<span class=note><code>{_esc(row["command"])}</code></span>' if row["command"] else ""
    who = ", ".join(x for x in (row["user"], priority_text(row["urgent"], row["priority"])) if x)
    return _item("waiting", row["state"], row["name"], who, row["state"],
                 f': <span class=reason>{_esc(row["reason"])}</span>{command}')


def _section(key: str, title: str, items: list[str], after: str) -> str:
    return (f"<section id={key}><h2>{_esc(title)}</h2>\n<ul class=list>\n" + "\n".join(items) + "\n</ul>"
            + after + "</section>")


def to_html(data) -> str:
    """The page: the headline, the failures, what is not finished, the timeline, the table."""
    title = f"the night of {data.night.isoformat()}" if data.night else f"{data.now.astimezone():%Y-%m-%d %H:%M}"
    who = f"user <b>{_esc(data.user)}</b>: " if data.user is not None else ""
    headline = ", ".join(f"<span class={key}>{_esc(text)}</span>" for key, text in headline_parts(data))
    sections = []
    failures, others = told_failures(data)
    if failures or others:
        more = len(failures) - SHOWN_FAILURES
        sections.append(_section("failures", f"Failed ({len(data.failures)})",
                                 [_failure_item(data, job) for job in failures[:SHOWN_FAILURES]],
                                 (f"<p>… and {more} more in the table below.</p>" if more > 0 else "")
                                 + (f"<p>{_esc(others_failures_text(others))}</p>" if others else "")))
    if data.current and data.waiting:
        items = [_waiting_item(row) for row in data.waiting[:SHOWN_WAITING]]
        more = sum(data.left.values()) - len(items)
        heading = waiting_title(data)
        sections.append(_section("waiting", heading[0].upper() + heading[1:], items,
                                 (f"<p>… and {more} more: <code>onite list</code></p>" if more > 0 else "")
                                 + "<p>Why each waits, as it changes: <code>onite status</code></p>"))
    if data.jobs:
        head = "".join(f"<th>{_esc(name)}</th>" for name, _ in COLUMNS)
        body = []
        for job, cells in zip(data.jobs, rows(data)):
            word = state_word(job)
            tds = [f'<td class={name.lower()} data-label="{name}">{_esc(cell)}</td>'
                   for (name, _), cell in zip(COLUMNS, cells)]
            tds[0] = f'<td class="state {word}" data-label="STATE">{_esc(cells[0])}</td>'
            tds[-1] = f'<td class="reason {word}" data-label="REASON">{_esc(cells[-1])}</td>'
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
<title>onite report, {_esc(title)}</title>
<style>
{_CSS}
</style></head><body>
<header>
<h1>onite report</h1>
<p class=window>Spool <code>{_esc(data.spool)}</code>: {_esc(window_text(data))}.</p>
<p class=headline>{who}{headline}</p>
</header>
{newline.join(sections)}
</body></html>
"""


def write_html(path: Path, data) -> None:
    """Write the page to ``path``: a file is replaced all or nothing (a temporary file beside it, renamed over
    it); a device, a pipe or a link to one (/dev/stdout) is written to, never replaced. InvalidInput: a folder,
    a disk, a link to a file, another user's link or pipe (planted where root writes its page)."""
    text = to_html(data).encode("utf-8")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return _replace(path, text)
    except OSError as err:
        raise _cannot(path, err) from None
    _check_kind(path, st.st_mode)
    if stat.S_ISREG(st.st_mode):  # its mode kept only where it is ours alone: a file planted in a shared folder,
        # or a link to another's, must not make the page theirs
        return _replace(path, text, st if st.st_uid == os.geteuid() and st.st_nlink == 1 else None)
    if st.st_uid not in (0, os.geteuid()):
        raise InvalidInput(f"cannot write {path}: it is another user's", "write the page somewhere else")
    try:  # no O_CREAT, no O_TRUNC: nothing changes before what it names is known
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC), "wb") as out:
            _check_kind(path, os.fstat(out.fileno()).st_mode, linked=True)
            out.write(text)
    except OSError as err:
        raise _cannot(path, err) from None


def _cannot(path: Path, err: OSError) -> OniteError:
    """A failing disk (full, a quota, a file-size limit, an I/O error) is a failure of the write (exit 4); any
    other reason is the path's."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return OniteError(f"cannot write {path}: {err.strerror or err}", "make room on its disk, or write it elsewhere")
    return InvalidInput(f"cannot write {path}: {err.strerror or err}", "choose a writable path")


def _check_kind(path: Path, mode: int, *, linked: bool = False) -> None:
    """Refuse a folder, a disk, and (``linked``: what a link names) a file, which is replaced, never written through."""
    kind = "a folder" if stat.S_ISDIR(mode) else "a disk" if stat.S_ISBLK(mode) else None
    if kind is not None:
        raise InvalidInput(f"cannot write {path}: it is {kind}", "give the page a file name")
    if linked and stat.S_ISREG(mode):
        raise InvalidInput(f"{path} is a symbolic link to a file", "give the file's own path")


def _replace(path: Path, text: bytes, old: os.stat_result | None = None) -> None:
    """``path`` replaced by a new file holding ``text``: with the ``old`` file's mode and group, else 0644."""
    import tempfile

    try:  # the page is made beside its name: what fails first is its folder's, and the message says so
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise InvalidInput(f"cannot write {path}: no new file can be made in {path.parent} "
                           f"({err.strerror or err})", "choose a path in a folder you may write") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text)
            if old is None:
                os.fchmod(out.fileno(), 0o644)  # a page to be served or shared, not a secret
            else:  # our own page, as we left it (a group we are no longer in is not kept)
                with contextlib.suppress(PermissionError):
                    os.fchown(out.fileno(), -1, old.st_gid)
                os.fchmod(out.fileno(), stat.S_IMODE(old.st_mode) & 0o777)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _cannot(path, err) from None
