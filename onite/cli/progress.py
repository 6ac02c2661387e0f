"""What ``onite run`` shows while it drains: a live view on a terminal, the log lines elsewhere, nothing with -q.
The driver's thread feeds the view (``listener``, ``tick``) and rich's redraws it, so its state is under a lock."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from onite.app.common import label
from onite.app.run import IDLE_EVENTS, idle_reason
from onite.cli.render import STATE_STYLE
from onite.core.cells import human_duration, priority_text
from onite.core.safetext import printable

LIVE, LINES, QUIET = "live", "lines", "quiet"
FINAL = {"done", "failed", "cancelled"}


def choose_mode(*, quiet: bool, verbose: bool, is_terminal: bool, dumb: bool) -> str:
    """Nothing with ``quiet``; the log lines with ``verbose`` or where the live view cannot be drawn; else live."""
    return QUIET if quiet else LINES if verbose or not is_terminal or dumb else LIVE


@dataclass
class Running:
    """A job the view shows as running."""

    name: str
    user: str
    priority: str
    since: datetime
    attempt: int = 1


@dataclass
class DrainState:
    """The counts and running jobs of one drain, as the log's events tell them (pure)."""

    host: str = ""
    slots: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"done": 0, "failed": 0, "cancelled": 0})
    running: dict[str, Running] = field(default_factory=dict)
    last: dict[tuple[str, str], str] = field(default_factory=dict)  # each job's latest final event
    queued: int = 0
    note: str = ""
    idle: bool = False  # the run did nothing, for the reason in ``note``

    def apply(self, when: datetime, event: str, name: str, fields: dict) -> str | None:
        """Take one event into account; return a line worth keeping above the view, if any."""
        user = fields.get("user", "")
        if event in ("retry", "requeued", "start-failed"):
            self.running.pop(name, None)
        if event == "driver-start":
            self.host, self.slots = str(fields.get("host", "")), int(fields.get("slots") or 0)
        elif event == "start":
            priority = fields.get("priority")  # the log says "urgent" or the number
            self.running[name] = Running(name, str(user), priority_text(priority == "urgent", priority), when,
                                         int(fields.get("attempt") or 1))
        elif event in FINAL:
            key = (name, str(user))  # each job once, by its latest run, as the report counts it
            if key in self.last:
                self.counts[self.last[key]] -= 1
            self.last[key] = event
            self.counts[event] += 1
            return finished_line(event, name, fields, self.running.pop(name, None))
        elif event == "retry":
            return (f"↻ {name} ({user}) will run again: attempt {fields.get('attempt')}, after {fields.get('after')} "
                    f"({fields.get('reason') or 'failed'})")
        elif event == "requeued":
            return f"↺ {name} ({user}) back in its queue: {fields.get('reason', '')}"
        elif event == "driver-exit":
            self.queued = int(fields.get("left") or 0)
        elif event in IDLE_EVENTS:
            self.idle, self.note = True, idle_reason(event, fields)
        elif event == "waiting":
            self.note = str(fields.get("note") or event)
            return f"… {self.note}"
        elif event in ("window-closed", "executor-unavailable", "signal"):
            self.note = str(fields.get("note") or fields.get("action") or event)
            return f"! {event}: {self.note}"
        return None

    @property
    def finished(self) -> int:
        return sum(self.counts.values())


def finished_line(event: str, name: str, fields: dict, was: Running | None) -> str:
    """``✓ build (alice) done in 2m13s`` / ``✗ test (bob) failed: exit 3 after 41s — onite output test``: the
    hint only for a job this view saw start (one whose dependency failed has no output)."""
    seconds = fields.get("seconds")
    took = human_duration(float(seconds)) if seconds not in (None, "") else ""
    who = fields.get("user") or (was.user if was else "") or fields.get("by") or ""
    who = f" ({who})" if who else ""
    if event == "done":
        return f"✓ {name}{who} done" + (f" in {took}" if took else "")
    if event == "cancelled":
        return f"⊘ {name}{who} cancelled" + (f" by {fields['by']}" if fields.get("by") else "")
    failed = f"✗ {name}{who} failed: {fields.get('reason') or 'failed'}"
    return failed if was is None else failed + (f" after {took}" if took else "") + f" — onite output {name}"


class DrainView:
    """The live view of one drain: a bar of the jobs finished, the running ones, a line per finished job above."""

    def __init__(self, console) -> None:
        from rich.live import Live

        self.console = console
        self.state = DrainState()
        self._lock = threading.Lock()
        self._live = Live(self, console=console, refresh_per_second=4, transient=True, redirect_stdout=False,
                          redirect_stderr=False)
        self._opened = time.monotonic()

    def listener(self, when: datetime, event: str, name: str, fields: dict) -> None:
        """The driver's thread: each event of its log (a job by its key, shown as the viewer writes it)."""
        with self._lock:
            line = self.state.apply(when, event, label(name), fields)
        if line is not None:  # printable: a reason may quote a path a user chose
            style = STATE_STYLE[event] if event in FINAL else "yellow"
            self.console.print(printable(line), style=style, markup=False, highlight=False)

    def tick(self, driver, now: datetime) -> datetime:
        """The driver's per-turn hook: the queue's length, which only the driver may ask."""
        with self._lock:
            self.state.queued = len(driver.night.index)
        return now + timedelta(seconds=1)

    def __rich__(self):
        """rich's refresh thread: the view as it is now."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            state = self.state
            finished, running, queued = state.finished, list(state.running.values()), state.queued
            counts, host, slots, note = dict(state.counts), state.host, state.slots, state.note
        now = datetime.now().astimezone()
        total = finished + len(running) + queued
        head = Table.grid(padding=(0, 1))
        head.add_row(
            ProgressBar(total=max(total, 1), completed=finished, width=30),
            Text(f"{finished}/{total} jobs", style="bold"),
            Text(f"{counts['done']} done", style="green"),
            Text(f"{counts['failed']} failed", style="red" if counts["failed"] else ""),
            Text(f"{counts['cancelled']} cancelled", style="magenta" if counts["cancelled"] else ""),
            Text(f"{queued} queued", style="cyan"),
            Text(f"elapsed {human_duration(time.monotonic() - self._opened)}", style="dim"),
        )
        parts = [Text(f"onite run on {host or '?'}: {len(running)} of {slots or '?'} slots busy"
                      + (f" — {note}" if note else ""), style="bold"), head]
        if running:
            table = Table(box=None, pad_edge=False, show_header=False)
            for column in ("name", "user", "pri", "elapsed"):
                table.add_column(column, justify="right" if column == "elapsed" else "left",
                                 overflow="ellipsis", no_wrap=True)
            for job in sorted(running, key=lambda r: r.since):
                attempt = f" (attempt {job.attempt})" if job.attempt > 1 else ""
                table.add_row(Text(f"  ▶ {job.name}{attempt}", style="bold blue"), Text(job.user), Text(job.priority),
                              Text(human_duration((now - job.since).total_seconds())))  # Text, never markup
            parts.append(table)
        return Group(*parts)

    def __enter__(self) -> DrainView:
        self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        self._live.stop()
        self.console.print(summary_line(self.state, time.monotonic() - self._opened), markup=False, highlight=False)


def summary_line(state: DrainState, seconds: float) -> str:
    """The line left on the terminal when the drain ends."""
    counts = state.counts
    if state.idle and not state.finished and not state.running:
        return f"onite run: nothing run — {state.note}"
    text = (f"onite run: {counts['done']} done, {counts['failed']} failed, {counts['cancelled']} cancelled "
            f"in {human_duration(seconds)}")
    hints = ["what failed: onite report"] if counts["failed"] else []
    if state.queued:
        text += f"; {state.queued} left queued"
        hints.append("why they wait: onite status")
    return text + (" — " + "; ".join(hints) if hints else "")
