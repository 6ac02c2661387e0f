"""``onite report``: the morning report of what ran (pure, apart from reading results and writing the page).

A report covers a window of time: by default the last 24 hours; ``--since``
a duration or a time, up to now; ``--night DATE`` the night of DATE, from
noon that day to noon the next, local time, so that a drain started at 20:00
whose jobs run until 07:00 is one night. A job belongs to the window when it
finished in it or started in it; ``--user`` keeps one user's jobs.

The report is built here as text (table rows, time ticks, the HTML page);
rich is imported only by ``render``, so ``--json`` and ``--html`` never load it.
"""

from __future__ import annotations

import html as _html
import math
import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

from onite import spool as sp
from onite.cells import human_duration, priority_label
from onite.errors import InvalidInput
from onite.listing import JobView, outcome_counts, result_view
from onite.safetext import printable
from onite.state import signal_name


@dataclass
class ReportData:
    """The jobs of one morning report, the window they come from and the filter applied."""

    spool: str
    since: datetime  # the window's start
    until: datetime  # its end: ``now`` without --night
    now: datetime
    jobs: list[JobView]
    night: date | None = None
    user: str | None = None
    damaged: list[str] = field(default_factory=list)  # names of result records that could not be read

    @property
    def counts(self) -> dict[str, int]:
        return outcome_counts(self.jobs)

    @property
    def timed_out(self) -> int:
        return sum(1 for job in self.jobs if job.reason == "timeout")  # Outcome.describe's word for it

    @property
    def hosts(self) -> dict[str, dict]:
        """Per host: how many jobs it ran, how they ended, its busy time and its share of the jobs."""
        table: dict[str, dict] = {}
        ran = [j for j in self.jobs if j.started is not None]
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


def parse_night(text: str, now: datetime) -> date:
    """``YYYY-MM-DD``, ``today`` or ``yesterday`` (``now``'s local date).

    Raises:
        InvalidInput: none of those.
    """
    raw = text.strip().lower()
    if raw in ("today", "yesterday"):
        return now.date() - timedelta(days=raw == "yesterday")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
        from onite.timeparse import EARLIEST, LATEST

        try:
            day = date.fromisoformat(raw)
        except ValueError:
            pass
        else:
            if EARLIEST.year <= day.year < LATEST.year - 1:  # its night must end before the last time onite takes
                return day
            raise InvalidInput(f"bad --night {text!r}: not between the years {EARLIEST.year} and {LATEST.year - 2}",
                               "write a date such as 2026-11-22, today or yesterday")
    raise InvalidInput(f"bad --night {text!r}", "write a date such as 2026-11-22, today or yesterday")


def parse_since(text: str | None, now: datetime) -> datetime:
    """Raises:
        InvalidInput: neither a duration nor a time.
    """
    if not text:
        return now - timedelta(hours=24)
    from onite.timeparse import parse_duration, parse_when

    try:
        return now - parse_duration(text, what="--since")
    except InvalidInput:
        pass
    raw = text.strip().lower()
    if raw.startswith(("+", "tomorrow")):  # forms of a time to come: no report covers the future
        raise _bad_since(text)
    try:
        when = parse_when(text, now)
    except InvalidInput:
        raise _bad_since(text) from None
    if when > now:  # "19:00" means the last 19:00, not the next one
        when -= timedelta(days=1)
    return when


def _bad_since(text: str) -> InvalidInput:
    return InvalidInput(f"bad --since {text!r}",
                        "write a duration such as 12h, a time such as 19:00, or a date-time such as 2026-11-21T19:00")


def build(spool: sp.Spool, now: datetime, since: str | None = None, *, night: str | None = None,
          user: str | None = None) -> ReportData:
    """The report of the jobs that finished or started in a window (``since`` up to now, or the
    ``night`` of a date), of one ``user`` or everyone's, in the order they started.

    Raises:
        InvalidInput: a bad --since or --night, or both given; an empty --user.
    """
    if user is not None and not user.strip():
        raise InvalidInput("--user is empty", "name a user, e.g. --user alice, or leave it out for everyone's jobs")
    if night is not None and since is not None:
        raise InvalidInput("--night and --since cannot be used together",
                           "use --night DATE for a night (noon to noon), or --since for a time up to now")
    if night is not None:
        day: date | None = parse_night(night, now)
        start, end = night_window(day, now)
    else:
        day, start, end = None, parse_since(since, now), None  # up to now, and past it: another host's clock

    def inside(when: datetime | None) -> bool:
        return when is not None and start <= when and (end is None or when < end)

    damaged: list[str] = []
    jobs = [result_view(r) for r in sp.results(spool, damaged)
            if (inside(r.finished) or inside(r.started)) and (user is None or r.user == user)]
    jobs.sort(key=lambda j: (j.started or j.finished, j.name))
    return ReportData(str(spool.root), start, end or now, now, jobs, night=day, user=user, damaged=damaged)


def window_text(data: ReportData) -> str:
    """What the report covers, in words."""
    if data.night is not None:
        return (f"the night of {data.night.isoformat()} "
                f"({data.since.astimezone():%Y-%m-%d %H:%M} to {data.until.astimezone():%Y-%m-%d %H:%M})")
    return f"jobs finished since {data.since.astimezone():%Y-%m-%d %H:%M}"


def summary_text(data: ReportData) -> str:
    counts = data.counts
    who = f" for user {data.user}" if data.user is not None else ""
    return (f"{len(data.jobs)} jobs{who}: {counts['done']} done, {counts['failed']} failed, "
            f"{counts['cancelled']} cancelled; {data.timed_out} timed out")


# ---- the table ---------------------------------------------------------------------------

# (title, right-justified): all left-justified, so that each column starts under its title
COLUMNS = (("NAME", False), ("USER", False), ("PRI", False), ("HOST", False), ("STARTED", False),
           ("TOOK", False), ("EXIT", False), ("REASON", False))


def exit_text(view: JobView) -> str:
    """The exit code, the signal's name, or ``-`` for a job that never ran."""
    if view.exit_code is not None:
        return str(view.exit_code)
    if view.signal is not None:
        return signal_name(view.signal)
    return "-"


def rows(data: ReportData) -> list[list[str]]:
    """The cells of the report's table, one row per job, in the order of COLUMNS."""
    # within a day's window the time of day is enough; a longer one needs the date
    day_long = data.until - data.since <= timedelta(hours=25)
    out = []
    for job in data.jobs:
        if job.started is None:
            started = ""
        else:
            local = job.started.astimezone()
            started = local.strftime("%H:%M:%S") if day_long else local.strftime("%Y-%m-%d %H:%M")
        out.append([printable(job.name), printable(job.user), priority_label(job), printable(job.host or ""),
                    started, human_duration(job.duration), exit_text(job), printable(job.reason)])
    return out


# ---- the timeline ---------------------------------------------------------------------------

_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def ticks(start: datetime, end: datetime, most: int) -> list[tuple[datetime, str]]:
    """Round local times to mark on a timeline from ``start`` to ``end``, at most ``most`` of them
    (the finest step that allows it: hours for a night), each with its label (HH:MM)."""
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

    return _dumps({"version": 1, "spool": data.spool, "since": data.since.isoformat(),
                   "until": data.until.isoformat(), "now": data.now.isoformat(),
                   "night": data.night.isoformat() if data.night else None, "user": data.user,
                   "counts": data.counts, "timed_out": data.timed_out, "hosts": data.hosts,
                   "jobs": [j.to_json() for j in data.jobs]})


def render(console, data: ReportData) -> None:
    """The report on a rich Console: what it covers, the counts, the table, the timeline, the hosts."""
    from onite.render import LARGE_TABLE, gantt_lines, gantt_text, report_table
    from onite.cells import plain_table

    # text, not markup: spool paths, user and host names may hold [brackets]
    # soft_wrap: a line longer than the terminal is left for it to wrap, not broken mid-phrase
    console.print(f"onite report for {data.spool}: {window_text(data)}", markup=False, soft_wrap=True)
    console.print(summary_text(data), markup=False, soft_wrap=True)
    if not data.jobs:
        return
    console.print()
    start, end = data.span
    if len(data.jobs) > LARGE_TABLE:  # rich would take minutes: the same layout as plain text
        lines = [*plain_table(COLUMNS, rows(data)), "", *gantt_lines(data.jobs, start, end, console.width)[0]]
        console.file.write("".join(line + "\n" for line in lines))
    else:
        console.print(report_table(data.jobs, rows(data)))
        console.print()
        console.print(gantt_text(data.jobs, start, end, console.width))
    hosts = data.hosts
    if len(hosts) > 1:
        console.print("\nby host")
        for host, row in hosts.items():
            console.print(f"  {host}: {row['jobs']} jobs ({row['share']:.0%}), {row['failed']} failed, "
                          f"busy {human_duration(row['busy_seconds'])}", markup=False, soft_wrap=True)
    if data.counts["failed"]:
        console.print("\na job's own output: onite output NAME")


# the HTML page's colours of the states, on white (the tests look for them in a screenshot)
HTML_COLOUR = {"done": "#2e7d32", "failed": "#c62828", "cancelled": "#8e24aa"}

_CSS = """body{font-family:system-ui,sans-serif;margin:1rem;color:#222;line-height:1.4}
h1{font-size:1.4rem;margin:.2rem 0} h2{font-size:1.1rem;margin:1.2rem 0 .4rem}
""" + " ".join(f".{state}{{color:{colour}}}" for state, colour in HTML_COLOUR.items()) + """
svg.gantt{display:block;width:100%;max-width:48rem;height:auto}
svg.gantt text{font-family:system-ui,sans-serif;fill:#222} svg.gantt .axis text{fill:#666}
svg.gantt line{stroke:#ddd;stroke-width:1}
@media (max-width:40rem){svg.gantt .job text{font-size:15px} svg.gantt .axis text{font-size:13px}}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse} td,th{padding:.25em .6em;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
th{background:#f5f5f5}"""

_W, _PAD, _TOP, _ROW = 480.0, 6.0, 24.0, 26.0  # the SVG's units: width, side margin, axis height, row height


def gantt_svg(data: ReportData) -> str:
    """The timeline as inline SVG: hour ticks on top, then for each job its name over its bar."""
    esc = _html.escape
    start, end = data.span
    height = _TOP + _ROW * len(data.jobs) + 4
    width = _W - 2 * _PAD
    parts = [f'<svg class=gantt viewBox="0 0 {_W:g} {height:g}" role=img '
             f'aria-label="timeline from {start.astimezone():%H:%M} to {end.astimezone():%H:%M}">', "<g class=axis>"]
    right = -1.0
    for when, label in ticks(start, end, 6):
        x = _PAD + width * (when - start).total_seconds() / max((end - start).total_seconds(), 1e-6)
        parts.append(f'<line x1="{x:.1f}" y1="16" x2="{x:.1f}" y2="{height - 2:g}"/>')
        # a label that fits, clear of the one before (room for the larger type of a phone)
        if x > right and x + 8 * len(label) <= _W:
            parts.append(f'<text x="{x:.1f}" y="12" font-size="10">{esc(label)}</text>')
            right = x + 8 * len(label) + 4
    parts.append("</g>")
    for i, job in enumerate(data.jobs):
        top = _TOP + i * _ROW
        first, last = extent(job, start, end)
        x = _PAD + width * first
        w = max(width * (last - first), 5.0)  # a short job, or one that never ran, still shows
        x = min(x, _PAD + width - w)
        took = human_duration(job.duration) or "did not run"
        tip = f"{job.name} ({job.user}): {job.state}, {took}" + (f", {job.reason}" if job.reason else "")
        parts.append(
            f'<g class=job><text x="{_PAD:g}" y="{top + 10:g}" font-size="11">{esc(job.name)}</text>'
            f'<rect class="bar {esc(job.state)}" x="{x:.1f}" y="{top + 13:g}" width="{w:.1f}" height="10" rx="2" '
            f'fill="{HTML_COLOUR.get(job.state, "#555")}"><title>{esc(tip)}</title></rect></g>')
    parts.append("</svg>")
    return "\n".join(parts)


def to_html(data: ReportData) -> str:
    """A self-contained page (no script, nothing fetched): summary, the timeline as SVG, the table."""
    esc = _html.escape
    counts = data.counts
    title = f"the night of {data.night.isoformat()}" if data.night else f"{data.now.astimezone():%Y-%m-%d %H:%M}"
    head = "".join(f"<th>{esc(name)}</th>" for name, _ in COLUMNS)
    body = []
    for job, cells in zip(data.jobs, rows(data)):
        tds = [f"<td>{esc(cell)}</td>" for cell in cells]
        tds[-1] = f"<td class={esc(job.state)}>{esc(cells[-1])}</td>"
        body.append(f"<tr class=job>{''.join(tds)}</tr>")
    timeline = gantt_svg(data) if data.jobs else "<p>No jobs.</p>"
    who = f" for user <b>{esc(data.user)}</b>" if data.user is not None else ""
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width,initial-scale=1">
<title>onite report, {esc(title)}</title>
<style>
{_CSS}
</style></head><body>
<h1>onite report</h1>
<p>Spool <code>{esc(data.spool)}</code>: {esc(window_text(data))}.</p>
<p class=summary><b>{len(data.jobs)}</b> jobs{who}: <span class=done>{counts['done']} done</span>,
<span class=failed>{counts['failed']} failed</span>, <span class=cancelled>{counts['cancelled']} cancelled</span>;
{data.timed_out} timed out.</p>
<h2>Timeline</h2>
{timeline}
<h2>Jobs</h2>
<div class=scroll><table>
<thead><tr>{head}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table></div>
</body></html>
"""


def write_html(path: Path, data: ReportData) -> None:
    """Write the page to ``path`` all or nothing: a temporary file beside it, renamed over it.

    Raises:
        InvalidInput: ``path`` cannot be written.
    """
    import tempfile

    text = to_html(data).encode("utf-8")
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
