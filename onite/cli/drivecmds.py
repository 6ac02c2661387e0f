"""The commands that drain: run (now, or in the background), recover --host, daemon."""

import contextlib
import os
import signal
import sys
from typing import Annotated, Optional

from onite.cli.options import DriverHostOpt, Opt, SlotsOpt, SpoolOpt, command, confirm, console, spool_of
from onite.core.clock import SYSTEM


@command()
def run(
    detach: Annotated[bool, Opt("--detach", help="Run in the background, immune to hang-up, logging to "
                                "onite.log.")] = False,
    slots: SlotsOpt = None,
    until: Annotated[Optional[str], Opt("--until", metavar="HH:MM",
                                        help="Start no job at or after this time (HH:MM).")] = None,
    host: DriverHostOpt = None,
    verbose: Annotated[bool, Opt("-v", "--verbose", help="Print the log lines on stderr, also on a terminal "
                                 "(which otherwise gets a live view of the drain).")] = False,
    quiet: Annotated[bool, Opt("-q", "--quiet", help="Print nothing (onite.log has every event); "
                               "for cron.")] = False,
    scheduled: Annotated[bool, Opt(
        "--scheduled", help="Drain only inside a night window opened by a time of `schedule` (for timers that may "
        "start late); else log and exit 0.")] = False,
    spool: SpoolOpt = None,
) -> int:
    """Drain the queue now: lock, spool due recurring jobs, recover, run jobs in order, record results."""
    from onite.app import run as run_app

    target, until_time = run_app.driver_target(spool_of(spool), until, host)
    if detach:
        code, text = run_app.detach_driver(target, slots, until, host, scheduled)
        print(text)
        return code
    shown, view = _watch(quiet=quiet, verbose=verbose)
    _ignore_late_signals()  # the driver's handlers save this and put it back as they let go: no gap
    try:
        with view:
            return run_app.drive(target, until_time, slots=slots, host=host, scheduled=scheduled, **shown)
    finally:
        _ignore_late_signals()


def _watch(*, quiet: bool, verbose: bool):
    """How ``onite run`` shows its drain (onite.cli.progress): drive()'s keyword arguments, the context to drain in."""
    from onite.cli.progress import LINES, LIVE, DrainView, choose_mode

    try:
        is_terminal = os.isatty(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        is_terminal = False
    mode = choose_mode(quiet=quiet, verbose=verbose, is_terminal=is_terminal,
                       dumb=os.environ.get("TERM", "") in ("dumb", "unknown"))
    if mode != LIVE:
        return {"echo": sys.stderr if mode == LINES else None}, contextlib.nullcontext()
    view = DrainView(console(stderr=True))
    return {"listener": view.listener, "tick": view.tick}, view


def _ignore_late_signals() -> None:
    """A status or reload request that comes before the driver catches signals, or after it has let go of its
    lock (its pid was read before), finds a process starting or about to exit, which must not die of it."""
    for sig in (signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)


@command()
def recover(
    host: Annotated[str, Opt("--host", metavar="HOST",
                             help="The host whose driver died and will not come back.")],
    force: Annotated[bool, Opt("--force", help="Do not ask for confirmation.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Requeue (or fail, per on_interrupt) the jobs a dead host had claimed (root)."""
    from onite.app import run as run_app
    from onite.app.common import label
    from onite.core.errors import Refused
    from onite.drain.driver import Driver

    target, claims = run_app.host_claims(spool_of(spool), host)
    if not claims:
        with contextlib.suppress(Refused):  # its driver lives: nothing to do
            Driver(target, host=host).recover_host()  # under its lock: a dead driver's heartbeat is marked exited
        print(f"host {host} has no claimed jobs")
        return
    if not force and not confirm("recover", "--force", [
            f"host {host} claimed: {', '.join(map(label, claims))}",
            "Only go on if that host is down and will not come back with these jobs still running there."],
            "requeue them? [y/N] "):
        print("nothing changed")
        return
    done, left, kept = Driver(target, host=host).recover_host()  # requeued (or failed, per on_interrupt)
    if done or not (left or kept):
        print(f"recovered {len(done)} job(s) of host {host}: {', '.join(map(label, done))}")
    if left:
        print(f"left {len(left)} job(s) of host {host} still running under their monitors on this machine: "
              f"{', '.join(map(label, left))} — its next driver adopts them: onite run --host {host}")
    if kept:
        print(f"left {len(kept)} job(s) of host {host} claimed for its next driver, for they may still run and "
              f"cannot be stopped now: {', '.join(map(label, kept))} — onite log says why; run onite recover "
              f"--host {host} again once they can")


@command()
def daemon(
    drain_now: Annotated[bool, Opt("--drain-now", help="Drain once at start (e.g. after maintenance), "
                                   "then follow the schedule.")] = False,
    slots: SlotsOpt = None,
    until: Annotated[Optional[str], Opt("--until", metavar="HH:MM", help="Start no job at or after this "
                                        "time (HH:MM; default: until in onite.toml).")] = None,
    host: DriverHostOpt = None,
    wake: Annotated[bool, Opt("--wake", help="Do not start a daemon: tell the one running for this host "
                              "to drain now (root).")] = False,
    spool: SpoolOpt = None,
) -> Optional[int]:
    """Stay running: drain at the times in `schedule`, run --at jobs and recurring jobs when due
    (docs/scheduling.md)."""
    from onite.app import run as run_app

    if wake:
        print(run_app.wake_daemon(spool_of(spool), host, SYSTEM.now()))
        return
    return run_app.run_daemon(spool_of(spool), drain_now=drain_now, slots=slots, until=until, host=host,
                              echo=sys.stderr)
