"""The commands that show what happened: output, log, cron, status, wait, report."""

import codecs
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

from onite.cli.options import (Arg, JsonOpt, Opt, PlainOpt, SpoolOpt, command, complete_name, console, is_plain,
                               open_spool, say, spool_of, terminal, warn_damaged)
from onite.core.clock import SYSTEM
from onite.core.errors import NoTrace
from onite.core.safetext import printable, printable_output


@command()
def output(
    name: Annotated[str, Arg(metavar="NAME", autocompletion=complete_name)],
    stderr: Annotated[bool, Opt("--stderr", help="Print its stderr, kept apart when it was spooled with "
                                "--stderr-separate.")] = False,
    follow: Annotated[bool, Opt("-f", "--follow", help="Print the output as it grows until the job has "
                                "finished (a queued job: once it starts), then how it ended, on stderr; "
                                "exit 0 if it was done, 5 if not.")] = False,
    raw: Annotated[bool, Opt("--raw", help="Another user's output (root reading it) byte for byte on a "
                             "terminal too, escape sequences included (by default they are spelt out "
                             "there; a pipe or a file always gets the bytes).")] = False,
    spool: SpoolOpt = None,
) -> Optional[int]:
    """Print the captured output of your job NAME (its latest run): stdout, with stderr unless kept apart."""
    from onite.app.common import key_for
    from onite.spool.outputs import copy_data, newer_run_note, open_job_output

    target = open_spool(spool, reading=True)
    name = key_for(name)
    if follow:  # the output as it grows, then how it ended on stderr; wait's exit code (0 done, 5 not)
        from onite.app.wait import exit_status, follow as follow_job, job_line
        from onite.spool.scan import key_uid

        sink = Sink(key_uid(name), raw)
        try:
            final = follow_job(target, name, sink, stderr=stderr, announce=_announce)
        finally:
            sink.finish()
        say(f"onite: {job_line(final)}")
        return exit_status([final])
    try:
        handle = open_job_output(target, name, os.geteuid(), stderr=stderr)
    except NoTrace as err:
        from onite.app.report import pruned_output

        raise pruned_output(target, name, os.geteuid()) or err from None
    with handle:
        owner = os.fstat(handle.fileno()).st_uid
        note = newer_run_note(target, name, owner)
        if note is not None:
            say(f"onite: note: {note}")
        out = Sink(owner, raw)
        copy_data(handle.fileno(), out.write)
        out.finish()


def _announce(text: str) -> None:
    """What a command waits for, on stderr: stdout is the outcome (wait) or the job's output, byte for byte."""
    say(f"onite: {text}…")


class Sink:
    """Where ``onite output`` writes a job's output: stdout's bytes, but on a terminal another user's output
    (root reading it) with every control character spelt out, lines and tabs kept, unless ``raw``: as is, it
    could retitle root's window, write root's clipboard (OSC 52) or hide what follows."""

    def __init__(self, owner: int | None, raw: bool) -> None:
        self.out = sys.stdout.buffer
        self.spell = not raw and owner != os.geteuid() and sys.stdout.isatty()
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")  # a character split between reads

    def write(self, data: bytes, final: bool = False) -> None:
        self.out.write(printable_output(self.decoder.decode(data, final)).encode() if self.spell else data)

    def flush(self) -> None:
        self.out.flush()

    def finish(self) -> None:
        """The output is over: what is left of a split character is spelt out too."""
        self.write(b"", final=True)
        self.flush()


@command()
def log(
    lines: Annotated[int, Opt("-n", "--lines", metavar="N", min=0, max=10**9,
                                       help="How many of the last lines.")] = 20,
    as_json: JsonOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Print the last lines of the activity log."""
    from onite.spool.log import log_json, readable, tail

    tailed = tail(open_spool(spool, reading=True).log_path, lines)
    if as_json:
        print(log_json(tailed))
        return
    for line in tailed:  # onite escapes what it logs; a line from elsewhere may not be
        print(printable(readable(line)))


@command()
def cron(
    install: Annotated[bool, Opt("--install", help="Write them into your crontab (root's, for the system "
                                 "spool) as a marked block, replacing an earlier one, and record that "
                                 "drains are scheduled.")] = False,
    uninstall: Annotated[bool, Opt("--uninstall", help="Remove that block and the record.")] = False,
    force: Annotated[bool, Opt("--force", help="With --install: write this onite even where it lives in "
                               "a checkout or a home directory, or other users cannot run it.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Print root crontab lines that start the driver at the times in `schedule` (--install: install them)."""
    from onite.app.crontab import cron_command

    print(cron_command(spool_of(spool), SYSTEM.now(), install=install, uninstall=uninstall, force=force), end="")


@command()
def metrics(spool: SpoolOpt = None) -> None:
    """Print the spool's Prometheus metrics (text format), from its files: queue, outcomes, drains."""
    from onite.drain.metrics import metrics_text

    print(metrics_text(open_spool(spool, reading=True), SYSTEM.now()), end="")


@command()
def status(as_json: JsonOpt = False, plain: PlainOpt = False, spool: SpoolOpt = None) -> None:
    """Drivers running, queue sizes, running jobs, the next scheduled drain."""
    from onite.app.status import gather, status_json

    info = gather(open_spool(spool, reading=True), SYSTEM.now())
    if as_json:
        print(status_json(info))
        return
    from onite.cli.render import print_status

    out, plain = terminal(plain)
    print_status(out, info, plain=plain)


@command()
def wait(
    names: Annotated[Optional[list[str]], Arg(metavar="NAME", autocompletion=complete_name,
                                              help="Jobs to wait for; none: the drains running now.")] = None,
    timeout: Annotated[Optional[str], Opt("--timeout", metavar="DUR", help="Give up after this long "
                                          "(exit 6): 90s, 45m, 2h (a bare number is seconds).")] = None,
    as_json: JsonOpt = False,
    spool: SpoolOpt = None,
) -> Optional[int]:
    """Block until the named jobs (or the current drains) have finished; exit 0 if all were done, 5 if not."""
    from onite.app import wait as waiting
    from onite.core.timeparse import parse_duration

    limit = parse_duration(timeout, what="--timeout").total_seconds() if timeout is not None else None
    target = open_spool(spool, reading=True)
    waited = (waiting.wait_jobs(target, names, timeout=limit, announce=_announce) if names
              else waiting.wait_drains(target, timeout=limit, announce=_announce))
    lines = waited.lines() if names else [waited.summary()]
    # a reason may quote a path a user chose (its directory): escaped, as list and report do
    print(waiting.wait_json(target, waited) if as_json else "\n".join(printable(line) for line in lines))
    return waited.exit_code


@command()
def report(
    night: Annotated[Optional[str], Opt("--night", metavar="DATE", help="Report the night of this date, "
                                        "from noon to the next noon, local time: 2026-11-22, today or "
                                        "yesterday.")] = None,
    user: Annotated[Optional[str], Opt("--user", metavar="USER", help="Only this user's jobs.")] = None,
    html: Annotated[Optional[Path], Opt("--html", metavar="FILE", help="Write the report as a "
                                        "self-contained HTML page instead of printing it (- is stdout; "
                                        "with --json: print the JSON too).")] = None,
    since: Annotated[Optional[str], Opt(
        "--since", metavar="WHEN", help="Report jobs from this time: 12h, 19:00 or 2026-11-21T19:00 (default: the "
        "last drain session; with --until, 24 hours before it).")] = None,
    until: Annotated[Optional[str], Opt("--until", metavar="WHEN", help="Report jobs up to this time: 2h, "
                                        "07:00 or 2026-11-22T07:00 (default: now).")] = None,
    as_json: JsonOpt = False,
    plain: PlainOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """The morning report: what failed and why, what still waits, what ran when (default: the last drain session)."""
    from onite.app import report as rep

    from onite.spool.log import unreadable

    target = open_spool(spool, reading=True)
    data = rep.build(target, SYSTEM.now(), since, night=night, until=until, user=user)
    warn_damaged(data.damaged)
    if problem := unreadable(target.log_path):  # the window and what the records do not tell come from it
        say(f"onite: warning: {problem}: the report goes by the result records alone — ask root to make it readable")
    if html:
        from onite.cli.reportpage import to_html, write_html

        if str(html) == "-":  # the page alone on stdout (with --json, the JSON after it)
            sys.stdout.buffer.write(to_html(data).encode("utf-8"))
            sys.stdout.flush()
        else:
            write_html(html, data)
        if not as_json:
            if sys.stdout.isatty() and str(html) != "-" and not _is_stdout(html):  # a morning cron job mails nothing
                print(f"HTML report written to {printable(str(html))}")
            return
    if as_json:
        from onite.app.reporttext import to_json

        print(to_json(data))
        return
    from onite.cli.render import print_report

    out = console()
    print_report(out, data, plain=is_plain(out, plain))


def _is_stdout(path: Path) -> bool:
    """Is ``path`` this process's standard output (``--html /dev/stdout``), which gets the page alone?"""
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError):
        return False
