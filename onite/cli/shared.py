"""What ``onite submit``, ``find``, ``list --json``, ``run`` and ``wait`` do once parsed, by either path.

The typer commands (onite.cli.commands) and the fast path (onite.cli.fastcli)
both call these, so that the two do exactly the same thing and print the
same lines: each opens the spool, calls one library function (onite.app) and
prints what it returns. Nothing here imports typer, rich (but for the live
view of a drain on a terminal) or pydantic: a script that spools jobs in a
loop pays for the work, not for the command-line machinery
(docs/performance.md). Here, and only in the command line, the clock is read
(onite.core.clock.SYSTEM) and passed down.
"""

from __future__ import annotations

import os
import sys

from onite.core.clock import SYSTEM
from onite.core.request import SubmitRequest
from onite.core.safetext import printable


def submit(request: SubmitRequest, spool: str | None, *, lines: bool, quiet: bool = False) -> None:
    """``onite submit``: spool the job (or, with ``lines``, the jobs), say on stderr what was spooled and
    when it is expected to run (unless ``quiet``), print the final name where there is one to print.

    Raises:
        InvalidInput, Refused, SpoolError, SpoolIOError: as onite.app.submitline.submit_command.
    """
    from onite.app.submitline import submit_command

    out, said = submit_command(request, spool, lines=lines, now=SYSTEM.now(), confirm=not quiet)
    if said is not None:
        say(said)
    if out is not None:
        try:
            print(out, flush=True)
        except OSError as err:  # stdout on a full disk: the job is spooled, and its name must not go with the line
            err.add_note(out if lines else f"the job is spooled as {out}")
            raise


def find(name: str, spool: str | None) -> bool:
    """``onite find NAME``: is a job of that name queued or running?"""
    from onite.app.common import open_spool
    from onite.app.find import find as find_job

    return find_job(open_spool(spool), name)


def list_json(spool: str | None, *, include_all: bool = False) -> None:
    """``onite list --json [--all]``: print the document (docs/json.md); damaged records are named on stderr."""
    from onite.app.common import open_spool
    from onite.app.listing import list_json as document
    from onite.spool.results import damaged_note

    target = open_spool(spool)
    damaged: list[str] = []
    text = document(target, include_all=include_all, now=SYSTEM.now(), damaged=damaged)
    if damaged:
        warn(damaged_note(damaged))
    print(text)


def run_driver(spool: str | None, *, detach: bool = False, slots: int | None = None, until: str | None = None,
               host: str | None = None, verbose: bool = False, quiet: bool = False, scheduled: bool = False) -> int:
    """``onite run``: drain the queue now (or start a driver in the background); the exit code.

    On a terminal it shows a live view of the drain; elsewhere (cron, a pipe,
    systemd) the log lines on stderr; with ``quiet`` nothing (onite.cli.progress).
    """
    from onite.app import run

    target, until_time = run.driver_target(spool, until, host)
    if detach:
        code, text = run.detach_driver(target, slots, until, host, scheduled)
        print(text)
        return code
    from onite.cli.progress import LINES, LIVE, choose_mode

    mode = choose_mode(quiet=quiet, verbose=verbose, is_terminal=_is_terminal(sys.stderr),
                       dumb=os.environ.get("TERM", "") in ("dumb", "unknown"))
    options = dict(slots=slots, host=host, scheduled=scheduled)
    _ignore_late_signals()  # the driver's handlers save this and put it back as they let go: no gap
    if mode != LIVE:
        try:
            return run.drive(target, until_time, echo=sys.stderr if mode == LINES else None, **options)
        finally:
            _ignore_late_signals()
    from rich.console import Console

    from onite.cli.progress import DrainView

    view = DrainView(within_bounds(Console(stderr=True, highlight=False)))
    with view:
        try:
            return run.drive(target, until_time, listener=view.listener, tick=view.tick, **options)
        finally:
            _ignore_late_signals()


def _ignore_late_signals() -> None:
    """A status or reload request that comes before the driver catches signals, or after it has let
    go of its lock (its pid was read before), finds a process starting or about to exit, which must
    not die of it. Set before the drain too: its signal catcher restores what it found, at once."""
    import signal

    for sig in (signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)


def _is_terminal(stream) -> bool:
    try:
        return stream is not None and os.isatty(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False


def wait_command(names: list[str], timeout: str | None, spool: str | None, *, as_json: bool = False) -> int:
    """``onite wait``: block, print how the jobs (or, with no names, the drains running now) ended, and
    return the exit code (onite.app.wait)."""
    from onite.app import wait as waiting
    from onite.app.common import open_spool
    from onite.core.timeparse import parse_duration

    limit = parse_duration(timeout, what="--timeout").total_seconds() if timeout is not None else None
    target = open_spool(spool)

    def announce(text: str) -> None:  # on stderr, so that stdout holds only the outcome
        print(f"onite: {text}…", file=sys.stderr, flush=True)

    if names:
        waited = waiting.wait_jobs(target, names, timeout=limit, announce=announce)
    else:
        waited = waiting.wait_drains(target, timeout=limit, announce=announce)
    lines = waited.lines() if names else [waited.summary()]
    # a reason may quote a path a user chose (its directory): escaped, as list and report do
    print(waiting.wait_json(target, waited) if as_json else "\n".join(printable(line) for line in lines))
    return waited.exit_code


class SpeltOut:
    """Another user's job output on its way to a terminal (root's, reading it): every control character
    spelt out (onite.core.safetext.printable_output), lines and tabs kept. A job's output is what its
    owner's programs wrote; as is, it could retitle root's window, write root's clipboard (OSC 52)
    or hide what follows. ``--raw``, a pipe or a file get the bytes as they are."""

    def __init__(self, out) -> None:
        import codecs

        self.out = out
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")  # a character split between reads

    def write(self, data: bytes) -> int:
        from onite.core.safetext import printable_output

        self.out.write(printable_output(self.decoder.decode(data)).encode())
        return len(data)

    def flush(self) -> None:  # a character split between two reads stays in the decoder until its end comes
        self.out.flush()

    def finish(self) -> None:
        """The output is over: what is left of a split character is spelt out too."""
        from onite.core.safetext import printable_output

        self.out.write(printable_output(self.decoder.decode(b"", final=True)).encode())
        self.out.flush()


def output_sink(owner: int | None, raw: bool):
    """Where ``onite output`` writes the output of a job of ``owner``: stdout's bytes, or SpeltOut on a
    terminal when the output is not the caller's own (nor its owner known) and ``raw`` was not asked."""
    out = sys.stdout.buffer
    if raw or owner == os.geteuid() or not sys.stdout.isatty():
        return out
    return SpeltOut(out)


def follow_output(target, name: str, *, stderr: bool = False, raw: bool = False) -> int:
    """``onite output NAME --follow``: copy the job's output to stdout as it grows; once it has
    finished, say how on stderr; the exit code (``onite wait``'s: 0 done, 5 not).

    Raises:
        as onite.app.follow.follow.
    """
    from onite.app.follow import follow, job_owner
    from onite.app.wait import exit_status, job_line

    def announce(text: str) -> None:  # on stderr: stdout is the job's output, byte for byte
        print(f"onite: {text}…", file=sys.stderr, flush=True)

    owner = job_owner(target, name, os.geteuid())
    sink = output_sink(owner, raw)
    try:
        final = follow(target, name, os.geteuid(), sink, stderr=stderr, announce=announce, owner=owner)
    finally:
        getattr(sink, "finish", sink.flush)()
    print(f"onite: {printable(job_line(final))}", file=sys.stderr, flush=True)  # a reason may quote a path
    return exit_status([final])


def warn(line: str) -> None:
    """One line on stderr, beside a command's output (which stays what it is, e.g. valid JSON)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def say(line: str) -> None:
    """A line for the person at the keyboard, on stderr (stdout is for scripts); text a user chose is
    spelt out (onite.core.safetext)."""
    try:
        print(printable(line), file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


MAX_WIDTH = 1000  # columns: COLUMNS may say anything, and a report's timeline is as wide as the terminal


def within_bounds(out):
    """``out`` (a rich Console) with a width it can print in: COLUMNS=0 printed nothing at all, and
    COLUMNS=99999999999 filled memory."""
    if out.width < 1:
        out.width = 80
    elif out.width > MAX_WIDTH:
        out.width = MAX_WIDTH
    return out
