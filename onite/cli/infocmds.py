"""The commands that show what happened: output, log, cron, status, wait, report."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from onite.cli import shared
from onite.cli.options import JsonOpt, PlainOpt, SpoolOpt, app, complete_any, console, is_plain, open_spool, spool_of
from onite.core.clock import SYSTEM


@app.command()
def output(
    name: Annotated[str, typer.Argument(metavar="NAME", autocompletion=complete_any)],
    stderr: Annotated[bool, typer.Option("--stderr", help="Print its stderr, kept apart when it was spooled with "
                                         "--stderr-separate.")] = False,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Print the output as it grows until the job has "
                                         "finished (a queued job: once it starts), then how it ended, on stderr; "
                                         "exit 0 if it was done, 5 if not.")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Another user's output (root reading it) byte for byte on a "
                                      "terminal too, escape sequences included (by default they are spelt out "
                                      "there; a pipe or a file always gets the bytes).")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Print the captured output of your job NAME (its latest run): stdout, with stderr unless kept apart."""
    from onite.spool.outputs import newer_run_note, open_job_output

    target = open_spool(spool)
    if follow:
        raise typer.Exit(shared.follow_output(target, name, stderr=stderr, raw=raw))
    with open_job_output(target, name, os.geteuid(), stderr=stderr) as handle:
        owner = os.fstat(handle.fileno()).st_uid
        note = newer_run_note(target, name, owner)
        if note is not None:
            print(f"onite: note: {note}", file=sys.stderr)
        out = shared.output_sink(owner, raw)
        while chunk := handle.read(1 << 16):
            out.write(chunk)
        getattr(out, "finish", out.flush)()


@app.command()
def log(
    lines: Annotated[int, typer.Option("-n", "--lines", metavar="N", min=0, help="How many of the last lines.")] = 20,
    as_json: JsonOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Print the last lines of the activity log."""
    from onite.spool.log import log_json, tail

    target = open_spool(spool)
    if as_json:
        print(log_json(tail(target.log_path, lines)))
        return
    from onite.core.safetext import printable

    for line in tail(target.log_path, lines):  # onite escapes what it logs; a line from elsewhere may not be
        print(printable(line))


@app.command()
def cron(
    install: Annotated[bool, typer.Option("--install", help="Write them into your crontab (root's, for the system "
                                          "spool) as a marked block, replacing an earlier one, and record that "
                                          "drains are scheduled.")] = False,
    uninstall: Annotated[bool, typer.Option("--uninstall", help="Remove that block and the record.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Print root crontab lines that start the driver at the times in `schedule` (--install: install them)."""
    from onite.app.crontab import cron_command

    print(cron_command(spool_of(spool), SYSTEM.now(), install=install, uninstall=uninstall), end="")


@app.command()
def status(as_json: JsonOpt = False, plain: PlainOpt = False, spool: SpoolOpt = None) -> None:
    """Drivers running, queue sizes, running jobs, the next scheduled drain."""
    from onite.app.status import gather, status_json

    target = open_spool(spool)
    info = gather(target, SYSTEM.now())
    if info.damaged:
        from onite.spool.results import damaged_note

        shared.warn(damaged_note(info.damaged))
    if as_json:
        print(status_json(info))
        return
    from onite.cli.statusview import render_status

    out = console()
    render_status(out, info, plain=is_plain(out, plain))


@app.command()
def wait(
    names: Annotated[Optional[list[str]], typer.Argument(metavar="NAME", help="Jobs to wait for; none: the drains running now.")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", metavar="DUR", help="Give up after this long (exit 6): 90s, 45m, 2h.")] = None,
    as_json: JsonOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Block until the named jobs (or the current drains) have finished; exit 0 if all were done, 5 if not."""
    # onite.cli.fastcli runs well-formed waits without typer: scripts call it in loops
    raise typer.Exit(shared.wait_command(names or [], timeout, spool_of(spool), as_json=as_json))


@app.command()
def report(
    night: Annotated[Optional[str], typer.Option("--night", metavar="DATE", help="Report the night of this date, from noon to the next noon, local time: 2026-11-22, today or yesterday.")] = None,
    user: Annotated[Optional[str], typer.Option("--user", metavar="USER", help="Only this user's jobs.")] = None,
    html: Annotated[Optional[Path], typer.Option("--html", metavar="FILE", help="Also write the report as a self-contained HTML page.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", metavar="WHEN", help="Report jobs from this time: 12h, 19:00 or 2026-11-21T19:00 (default: the last drain session).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", metavar="WHEN", help="Report jobs up to this time: 2h, 07:00 or 2026-11-22T07:00 (default: now).")] = None,
    as_json: JsonOpt = False,
    plain: PlainOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """The morning report: what failed and why, what still waits, what ran when (default: the last drain session)."""
    from onite.app import report as rep

    data = rep.build(open_spool(spool), SYSTEM.now(), since, night=night, until=until, user=user)
    if data.damaged:
        from onite.spool.results import damaged_note

        shared.warn(damaged_note(data.damaged))
    if html:  # first: a page that cannot be written is an error, with no report printed before it
        from onite.cli.reportpage import write_html

        write_html(html, data)
    if as_json:
        print(rep.to_json(data))
    else:
        from onite.cli.render import print_report

        out = console()
        print_report(out, data, plain=is_plain(out, plain))
        if html:
            print(f"HTML report written to {html}")
