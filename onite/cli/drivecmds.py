"""The commands that drain: run (now, or in the background), recover --host, daemon."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from onite.app import run as run_app
from onite.cli import shared
from onite.cli.options import SpoolOpt, app, ask, spool_of
from onite.core.clock import SYSTEM
from onite.core.config import MAX_SLOTS
from onite.core.errors import InvalidInput


@app.command()
def run(
    detach: Annotated[bool, typer.Option("--detach", help="Run in the background, immune to hang-up, logging to onite.log.")] = False,
    slots: Annotated[Optional[int], typer.Option("--slots", metavar="N", min=1, max=MAX_SLOTS, help="Jobs at once (default: slots in onite.toml).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", metavar="HH:MM", help="Start no job at or after this time (HH:MM).")] = None,
    host: Annotated[Optional[str], typer.Option("--host", metavar="HOST", help="This driver's host name (default: host in onite.toml, else the short hostname).")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Print the log lines on stderr, also on a terminal "
                                          "(which otherwise gets a live view of the drain).")] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print nothing (onite.log has every event); for cron.")] = False,
    scheduled: Annotated[bool, typer.Option("--scheduled", help="Drain only inside a night window opened by a time "
                                            "of `schedule` (for timers that may start late); else log and exit 0.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Drain the queue now: lock, spool due recurring jobs, recover, run jobs in order, record results."""
    # onite.cli.fastcli runs well-formed `onite run`s without typer: a driver of 100,000 jobs is smaller without it
    code = shared.run_driver(spool_of(spool), detach=detach, slots=slots, until=until, host=host,
                             verbose=verbose, quiet=quiet, scheduled=scheduled)
    raise typer.Exit(code)


@app.command()
def recover(
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="The host whose driver died and will not come back.")],
    force: Annotated[bool, typer.Option("--force", help="Do not ask for confirmation.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Requeue (or fail, per on_interrupt) the jobs a dead host had claimed (root)."""
    target, claims = run_app.host_claims(spool_of(spool), host)
    if not claims:
        print(f"host {host} has no claimed jobs")
        return
    if not force:
        if not sys.stdin.isatty():
            raise InvalidInput("recover needs a confirmation", "run it on a terminal, or add --force")
        print(f"host {host} claimed: {', '.join(claims)}")
        print("Only go on if that host is down and will not come back with these jobs still running there.")
        if ask("requeue them? [y/N] ").lower() not in ("y", "yes"):
            print("nothing changed")
            return
    done = run_app.recover_host(target, host)
    print(f"recovered {len(done)} job(s) of host {host}: {', '.join(done)}")


@app.command()
def daemon(
    drain_now: Annotated[bool, typer.Option("--drain-now", help="Drain once at start (e.g. after maintenance), "
                                            "then follow the schedule.")] = False,
    slots: Annotated[Optional[int], typer.Option("--slots", metavar="N", min=1, max=MAX_SLOTS, help="Jobs at once (default: slots in onite.toml).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", metavar="HH:MM", help="Start no job at or after this time (HH:MM; default: until in onite.toml).")] = None,
    host: Annotated[Optional[str], typer.Option("--host", metavar="HOST", help="This driver's host name (default: host in onite.toml, else the short hostname).")] = None,
    wake: Annotated[bool, typer.Option("--wake", help="Do not start a daemon: tell the one running for this host "
                                       "to drain now (root).")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Stay running: drain at the times in `schedule`, run --at jobs and recurring jobs when due (docs/scheduling.md)."""
    if wake:
        print(run_app.wake_daemon(spool_of(spool), host, SYSTEM.now()))
        return
    raise typer.Exit(run_app.run_daemon(spool_of(spool), drain_now=drain_now, slots=slots, until=until, host=host,
                                        echo=sys.stderr))
