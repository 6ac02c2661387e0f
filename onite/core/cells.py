"""The words of what onite shows (durations, times, priorities, outcomes, plain tables), without rich."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

from onite.core.jobview import JobView


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.1f}s"
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def short_time(when: datetime | None, now: datetime) -> str:
    if when is None:
        return ""
    local = when.astimezone()
    return local.strftime("%H:%M:%S") if local.date() == now.date() else local.strftime("%Y-%m-%d %H:%M")


def priority_text(urgent: bool, priority: int | None, unknown: str = "") -> str:
    """``urgent``, ``P3``, or ``unknown`` when neither is known (a job file onite could not read)."""
    return "urgent" if urgent else f"P{priority}" if priority else unknown


def priority_label(view: JobView) -> str:
    return priority_text(view.urgent, view.priority)


def outcome_text(view: JobView) -> str:
    """Why it ended (or waits), else its exit status; running in Slurm, its nodes (as squeue's NODELIST(REASON))."""
    if not view.reason and view.state == "running" and view.nodes:
        return f"running in Slurm on {nodes_text(view.nodes)}"
    return view.reason or (f"exit {view.exit_code}" if view.exit_code is not None else "")


def nodes_text(nodes: str) -> str:
    """``node n1``, ``nodes n[01-04]``: the nodes Slurm gave a job, as Slurm writes them."""
    return f"node{'s' * any(c in nodes for c in ',[')} {nodes}"


def plain_table(columns: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]]) -> Iterator[str]:
    """The lines of a table, columns two spaces apart."""
    rows = list(rows)
    widths = [max([len(title)] + [len(row[i]) for row in rows]) for i, (title, _) in enumerate(columns)]
    for row in [[title for title, _ in columns], *rows]:
        cells = [cell.rjust(width) if right else cell.ljust(width)
                 for cell, width, (_, right) in zip(row, widths, columns)]
        yield "  ".join(cells).rstrip()
