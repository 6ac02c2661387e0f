"""The typer application and what its commands share: --spool, --json, --plain, completion, the terminal.

onite's command line is a thin layer over the library (onite.app): each
command parses its options, calls one library function and prints what it
returns. Each command and option is declared once, as a typer parameter: the
commands are in onite.cli.jobcmds (submit, list, cancel, …),
onite.cli.drivecmds (run, recover, daemon), onite.cli.recurcmds (recur …) and
onite.cli.infocmds (output, log, cron, status, wait, report);
onite.cli.commands gathers them into ``app``. Errors are raised as OniteError
by the library and printed by ``onite.__main__`` as one line. Here, and only
in the command line, the clock is read (onite.core.clock.SYSTEM) and passed
down.

These modules do not use ``from __future__ import annotations``: typer reads
every command's annotations each time it builds the command line, and as
strings each one is compiled and evaluated again (30 ms of every command).
"""

import os
import sys
from typing import Annotated, Optional

import typer

from onite.core.resources import MAX_CPUS

HELP_NAMES = {"help_option_names": ["-h", "--help"]}  # -h as in every other tool; no command uses -h for more

app = typer.Typer(
    add_completion=False,  # typer's options cannot name a shell and detect one when none is named: ours can
    context_settings=HELP_NAMES,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="onite: spool batch jobs by day, run them at night in priority order, as their owners.",
)


def _spool_help() -> str:
    """--spool's help, saying which spool is in use now and why (computed once, when the help is built)."""
    text = ("Spool directory (default: $ONITE_SPOOL, else the system spool /var/spool/onite (spool in "
            "/etc/onite.toml) for root, and for everyone once root has set it up, else ~/.local/state/onite).")
    try:
        from onite.spool.locate import locate

        return f"{text} In use now: {locate(None, os.environ, os.geteuid()).describe()}."
    except Exception:  # noqa: BLE001 - help must never fail; a bad /etc/onite.toml is said by the commands
        return text


SpoolOpt = Annotated[Optional[str], typer.Option("--spool", metavar="DIR", help=_spool_help(), show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout (docs/json.md).")]
PlainOpt = Annotated[bool, typer.Option("--plain", help="One line per row, never wrapped, states in words: what a pipe "
                                        "gets (docs/cli.md, OUTPUT FOR SCRIPTS).")]
StderrOpt = Annotated[Optional[bool], typer.Option("--stderr-separate/--stderr-merged", show_default=False,
                                                   help="Keep stderr apart from stdout (read it with onite output "
                                                   "NAME --stderr), or with it; default: stderr_separate in onite.toml.")]
NotifyOpt = Annotated[Optional[str], typer.Option(
    "--notify", metavar="mail|command|none", help="How to tell you it finished; default: notify in onite.toml.")]
NotifyOnOpt = Annotated[Optional[str], typer.Option(
    "--notify-on", metavar="failure|always", help="When to tell you; default: notify_on in onite.toml.")]
MemOpt = Annotated[Optional[str], typer.Option(
    "--mem", metavar="SIZE", help="Memory it needs, as Slurm writes it: 4G, 512M (a bare number is megabytes); "
    "held by the kernel where it can; default: default_mem in onite.toml.")]
# a string, checked by onite (onite.core.resources.parse_cpus): its words, not the parser's range check
CpusOpt = Annotated[Optional[str], typer.Option(
    "--cpus", metavar="N", help=f"CPUs it needs, 1 to {MAX_CPUS}; default: default_cpus in onite.toml.")]


_GLOBAL: dict[str, str | None] = {"spool": None}


def complete_live(incomplete: str) -> list[str]:
    """Shell completion of a queued or running job's name (cancel, hold, release)."""
    return _complete(incomplete, finished=False)


def complete_any(incomplete: str) -> list[str]:
    """Shell completion of any job's name, finished ones included (output)."""
    return _complete(incomplete, finished=True)


def _complete(incomplete: str, *, finished: bool) -> list[str]:
    from onite.app.listing import completion_names

    try:
        target = locate_spool(None)
        from onite.spool.paths import SpoolDir

        return completion_names(SpoolDir(target.path), incomplete, finished=finished)
    except Exception:  # noqa: BLE001 - completion must never print a traceback into the user's shell
        return []


def _print_version(wanted: bool) -> None:
    if wanted:
        from onite import __version__

        print(f"onite {__version__}")
        raise typer.Exit(0)


def _completion(option: typer.CallbackParam, shell: Optional[str]) -> None:
    if shell is not None:  # given without one, onite.__main__ acts for the shell in use
        from onite.cli import completion

        completion.act(option.opts[0], shell)
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)  # bare `onite`: its help on stdout, exit 0 (show_help)
def _options(
    ctx: typer.Context,
    spool: SpoolOpt = None,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print onite's version and exit.")] = False,
    show_completion: Annotated[Optional[str], typer.Option(
        "--show-completion", metavar="[SHELL]", is_eager=True, callback=_completion, show_default=False,
        help="Print the completion script of SHELL (bash, zsh or fish; default: the shell you use), "
        "to install it by hand.")] = None,
    install_completion: Annotated[Optional[str], typer.Option(
        "--install-completion", metavar="[SHELL]", is_eager=True, callback=_completion, show_default=False,
        help="Install completion for SHELL (bash, zsh or fish; default: the shell you use).")] = None,
) -> None:
    """onite: spool batch jobs by day, run them at night in priority order, as their owners."""
    if ctx.invoked_subcommand is None:
        if spool is not None:
            ctx.fail("Missing command.")
        show_help(ctx)
    _GLOBAL["spool"] = spool  # `onite --spool DIR list` as well as `onite list --spool DIR`


def show_help(ctx: typer.Context) -> None:
    """Bare ``onite`` (or ``onite recur``): its help on stdout, exit 0, where click's no_args_is_help
    says it on stderr, exit 2 -- as a usage mistake."""
    print(ctx.get_help())
    raise typer.Exit(0)


def locate_spool(spool: str | None):
    """Which spool ``--spool`` (given to the command or before it) names, or the default (onite.spool.locate)."""
    from onite.spool.locate import locate

    return locate(spool or _GLOBAL["spool"], os.environ, os.geteuid())


def spool_of(spool: str | None) -> str | None:
    """The --spool a command was given: after its name, else before it (``onite --spool DIR list``)."""
    return spool or _GLOBAL["spool"]


def open_spool(spool: str | None):
    """The spool a command works on, checked; a personal default spool is created on first use."""
    from onite.app.common import open_spool as open_target

    return open_target(spool_of(spool))


def console(stderr: bool = False):
    """A rich Console on stdout (or stderr) with a width it can print in."""
    from rich.console import Console

    return within_bounds(Console(stderr=stderr, highlight=False, soft_wrap=False))


MAX_WIDTH = 1000  # columns: COLUMNS may say anything, and a report's timeline is as wide as the terminal


def within_bounds(out):
    """``out`` (a rich Console) with a width it can print in: COLUMNS=0 printed nothing at all, and
    COLUMNS=99999999999 filled memory."""
    if out.width < 1:
        out.width = 80
    elif out.width > MAX_WIDTH:
        out.width = MAX_WIDTH
    return out


NARROW = 40  # columns below which a table cannot show a name: the plain layout, which the terminal folds


def is_plain(out, plain: bool) -> bool:
    """Write plain lines, not a table: asked for, not a terminal, or a terminal too narrow for one."""
    return plain or not out.is_terminal or out.width < NARROW


def terminal():
    """A Console on stdout if it is a terminal, else None: a pipe or a file gets plain lines, written
    without rich, which is not even imported (a twentieth of a second)."""
    try:
        return console() if sys.stdout.isatty() else None
    except (AttributeError, ValueError):  # none, or closed
        return None


def ask(prompt: str) -> str:
    """A line typed at the terminal; end of input (Ctrl-D) is an empty answer, as Enter is."""
    try:
        return input(prompt).strip()
    except EOFError:
        print()
        return ""


def warn(line: str) -> None:
    """One line on stderr, beside a command's output (which stays what it is, e.g. valid JSON)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def say(line: str) -> None:
    """A line for the person at the keyboard, on stderr (stdout is for scripts); text a user chose is
    spelt out (onite.core.safetext)."""
    from onite.core.safetext import printable

    warn(printable(line))
