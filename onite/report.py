"""``onite report``: the morning report of what ran (pure, apart from reading results and the render target).

The report covers jobs that finished in a window, by default the last 24
hours (``--since`` takes a duration like ``12h`` or a time like ``19:00``):
for each job when it started, how long it took, how it ended, on one
timeline; failures are listed with their reasons.
"""

from __future__ import annotations

import html as _html
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from onite import spool as sp
from onite.errors import InvalidInput
from onite.listing import JobView, result_view


@dataclass
class ReportData:
    """The jobs of one morning report and the period it covers."""

    spool: str
    since: datetime
    now: datetime
    jobs: list[JobView]

    @property
    def counts(self) -> dict[str, int]:
        counts = {"done": 0, "failed": 0, "cancelled": 0}
        for job in self.jobs:
            counts[job.state] = counts.get(job.state, 0) + 1
        return counts

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
        starts = [j.started for j in self.jobs if j.started]
        ends = [j.finished for j in self.jobs if j.finished]
        return (min(starts) if starts else self.since, max(ends) if ends else self.now)


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


def build(spool: sp.Spool, now: datetime, since: str | None) -> ReportData:
    start = parse_since(since, now)
    jobs = [result_view(r) for r in sp.results(spool) if r.finished >= start]
    jobs.sort(key=lambda j: (j.started or j.finished, j.name))
    return ReportData(str(spool.root), start, now, jobs)


def to_json(data: ReportData) -> str:
    return json.dumps({"version": 1, "spool": data.spool, "since": data.since.isoformat(), "now": data.now.isoformat(),
                       "counts": data.counts, "hosts": data.hosts, "jobs": [j.to_json() for j in data.jobs]},
                      indent=1)


def render(console, data: ReportData) -> None:
    from onite.render import outcome_text, timeline

    counts = data.counts
    console.print(f"onite report for {data.spool}: jobs finished since {data.since:%Y-%m-%d %H:%M}")
    console.print(f"{len(data.jobs)} jobs: {counts['done']} done, {counts['failed']} failed, "
                  f"{counts['cancelled']} cancelled")
    if not data.jobs:
        return
    start, end = data.span
    console.print(timeline(data.jobs, start, end))
    hosts = data.hosts
    if len(hosts) > 1:
        from onite.render import human_duration

        console.print("\nby host")
        for host, row in hosts.items():
            console.print(f"  {host}: {row['jobs']} jobs ({row['share']:.0%}), {row['failed']} failed, "
                          f"busy {human_duration(row['busy_seconds'])}")
    failures = [j for j in data.jobs if j.state == "failed"]
    if failures:
        console.print("\n[bold red]failed[/]")
        for job in failures:
            console.print(f"  {job.name} ({job.user}): {outcome_text(job)} — onite output {job.name}")


def to_html(data: ReportData) -> str:
    """A self-contained page: summary, a timeline of bars, a table."""
    from onite.render import human_duration, outcome_text

    esc = _html.escape
    start, end = data.span
    span = max((end - start).total_seconds(), 1.0)
    colour = {"done": "#2e7d32", "failed": "#c62828", "cancelled": "#8e24aa"}
    rows = []
    for job in data.jobs:
        left = ((job.started or job.finished) - start).total_seconds() / span * 100
        width = max((job.duration or 0) / span * 100, 0.4)
        rows.append(
            "<tr>"
            f"<td>{esc(job.name)}</td><td>{esc(job.user)}</td><td>{esc(job.host or '')}</td>"
            f"<td>{esc(job.started.astimezone().strftime('%H:%M:%S') if job.started else '')}</td>"
            f"<td class=num>{esc(human_duration(job.duration))}</td>"
            f"<td class='state {esc(job.state)}'>{esc(outcome_text(job) or job.state)}</td>"
            f"<td class=bar><div style='margin-left:{left:.2f}%;width:{width:.2f}%;"
            f"background:{colour.get(job.state, '#555')}' title='{esc(job.name)}'></div></td>"
            "</tr>"
        )
    counts = data.counts
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>onite report {esc(data.now.strftime('%Y-%m-%d'))}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse;width:100%}}
td,th{{padding:.25em .5em;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}}
td.num{{text-align:right}} td.bar{{width:40%;min-width:20em}} td.bar div{{height:.9em;border-radius:2px}}
.failed{{color:#c62828;font-weight:bold}} .cancelled{{color:#8e24aa}} .done{{color:#2e7d32}}
</style></head><body>
<h1>onite report</h1>
<p>Spool <code>{esc(data.spool)}</code>: jobs finished from {esc(data.since.strftime('%Y-%m-%d %H:%M'))}
to {esc(data.now.strftime('%Y-%m-%d %H:%M'))}.</p>
<p><b>{len(data.jobs)}</b> jobs: <span class=done>{counts['done']} done</span>,
<span class=failed>{counts['failed']} failed</span>, <span class=cancelled>{counts['cancelled']} cancelled</span>.
Timeline from {esc(start.astimezone().strftime('%H:%M'))} to {esc(end.astimezone().strftime('%H:%M'))}.</p>
<table><tr><th>job</th><th>user</th><th>host</th><th>started</th><th>took</th><th>result</th><th>timeline</th></tr>
{''.join(rows)}
</table></body></html>
"""
