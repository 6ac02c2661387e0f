"""What onite's commands share: how they declare their options and are found, the spool, the terminal.

A command is a function registered with ``@command``, its parameters annotated with ``Opt`` and ``Arg`` (which take
what ``typer.Option`` and ``typer.Argument`` take): its one declaration, made a typer command line by
onite.cli.typerapp and parsed without typer by onite.cli.fastpath. It returns its exit code (None: 0). No ``from
__future__ import annotations`` in these modules: typer would compile and evaluate each annotation again (30 ms).
"""

import importlib
import os
import sys
from collections.abc import Callable
from typing import Annotated, Optional

from onite.core.config import MAX_RETRIES, MAX_SLOTS
from onite.core.errors import InvalidInput
from onite.core.resources import MAX_CPUS

COMPLETE_VAR = "_ONITE_COMPLETE"  # what the completion scripts set to ask onite for completions


class Opt:
    """An option, declared as to ``typer.Option``: its names, then its settings (metavar, help, min, max, ...);
    a callable ``help`` is called only when typer builds the command line."""

    def __init__(self, *decls: str, **settings) -> None:
        self.decls, self.settings = decls, settings


class Arg(Opt):
    """An argument, declared as to ``typer.Argument``."""


COMMANDS: dict[tuple[str | None, str], Callable] = {}  # (group, name): every command, once its module is imported
GROUPS: dict[str, str] = {}  # a group of commands: its help


def command(name: str | None = None, *, group: str | None = None, after_dashes: bool = False):
    """Register a command function under ``name`` (default: its own, as typer names it). ``after_dashes``: the
    words after ``--`` are the job's command line (``submit NAME -- make -j8``) rather than arguments."""
    def register(func: Callable) -> Callable:
        func.after_dashes = after_dashes
        COMMANDS[(group, name or func.__name__.lower().replace("_", "-"))] = func
        return func
    return register


MODULES = ("jobcmds", "infocmds", "drivecmds", "recurcmds")  # the command modules, the most typed first


def top_command(name: str) -> Callable | None:
    """The command ``name`` (not a group's), importing command modules only until it is registered."""
    for module in MODULES:
        if (None, name) in COMMANDS:
            break
        importlib.import_module(f"onite.cli.{module}")
    return COMMANDS.get((None, name))


def every_command() -> dict[tuple[str | None, str], Callable]:
    for module in MODULES:
        importlib.import_module(f"onite.cli.{module}")
    return COMMANDS


_GLOBAL: dict[str, Optional[object]] = {"spool": None, "command": None}  # what the parser saw beside the options


def set_parsed(**seen) -> None:
    """What the parser found around a command's options: ``spool`` before its name, ``command`` after ``--``."""
    _GLOBAL.update(seen)


def command_line() -> list[str] | None:
    """The words after ``--`` (``onite submit NAME -- COMMAND ARGS``), None without ``--``."""
    return _GLOBAL["command"]


def _spool_help() -> str:
    """--spool's help, saying which spool is in use now and why."""
    text = ("Spool directory (default: $ONITE_SPOOL, else the system spool /var/spool/onite (spool in "
            "/etc/onite.toml) for root, and for everyone once root has set it up, else ~/.local/state/onite).")
    try:
        from onite.spool.locate import locate

        return f"{text} In use now: {locate(None, os.environ, os.geteuid()).describe()}."
    except Exception:  # noqa: BLE001 - help must never fail; a bad /etc/onite.toml is said by the commands
        return text


def complete_name(ctx, incomplete: str) -> list[str]:
    """Shell completion of a job's name: a queued or running one, or (output, wait) a finished one too, after
    restart a finished one only; after hold a queued one no hold holds, after release a held one (what each can
    act on)."""
    command = ctx.command.name
    return _names(incomplete, live=command != "restart", finished=command in ("output", "restart", "wait"),
                  held={"hold": False, "release": True}.get(command))


def complete_after(incomplete: str) -> list[str]:
    """Shell completion of --after's job: a queued, running or finished one (a done job lets it run)."""
    return _names(incomplete, finished=True)


def _names(incomplete: str, *, live: bool = True, finished: bool, held: bool | None = None) -> list[str]:
    from onite.app.listing import completion_names
    from onite.spool.paths import SpoolDir

    try:
        return completion_names(SpoolDir(locate_spool(None).path), incomplete, live=live, finished=finished,
                                held=held)
    except Exception:  # noqa: BLE001 - completion must never print a traceback into the user's shell
        return []


def choices(*words: str) -> Callable[[str], list[str]]:
    """Shell completion of an option that takes one of ``words``."""
    return lambda incomplete: [w for w in words if w.startswith(incomplete)]


SpoolOpt = Annotated[Optional[str], Opt("--spool", metavar="DIR", help=_spool_help, show_default=False)]
JsonOpt = Annotated[bool, Opt("--json", help="One JSON document on stdout (docs/json.md).")]
PlainOpt = Annotated[bool, Opt("--plain", help="One line per row, never wrapped, states in words: what a pipe "
                               "gets (docs/cli.md, OUTPUT FOR SCRIPTS).")]
LiveNamesArg = Annotated[list[str], Arg(metavar="NAME", autocompletion=complete_name)]
# a job's options, shared by submit and recur add (whose every instance is such a job)
PriorityOpt = Annotated[Optional[int], Opt("-p", "--priority", metavar="N",
                                           help="1 runs first; default from onite.toml.")]
UrgentOpt = Annotated[bool, Opt("--urgent", help="Run before every priority (root and admins only).")]
AfterOpt = Annotated[Optional[list[str]], Opt(
    "--after", metavar="NAME", autocompletion=complete_after,
    help="Wait until this job has finished successfully (repeatable).")]
AtOpt = Annotated[Optional[str], Opt("--at", metavar="WHEN", help="Not before this time: now, HH:MM, "
                                     "YYYY-MM-DDTHH:MM, 'tomorrow HH:MM', +2h.")]
TimeoutOpt = Annotated[Optional[str], Opt("--timeout", metavar="DUR", help="Time limit: 90s, 45m, 2h, 1h30m "
                                                    "(a bare number is seconds).")]
RetriesOpt = Annotated[Optional[int], Opt("--retries", metavar="N", min=0, max=MAX_RETRIES,
                                         help="Retry a failed job this many times, with back-off.")]
QuietOpt = Annotated[bool, Opt("-q", "--quiet", help="Do not say on stderr what was spooled and when it is "
                                "expected to run.")]
HostOpt = Annotated[Optional[str], Opt("--host", metavar="HOST",
                                       help="Run only on this host (when several share the spool).")]
StderrOpt = Annotated[Optional[bool], Opt(
    "--stderr-separate/--stderr-merged", show_default=False, help="Keep stderr apart from stdout (read it with onite "
    "output NAME --stderr), or with it; default: stderr_separate in onite.toml.")]
NotifyOpt = Annotated[Optional[str], Opt(
    "--notify", metavar="mail|command|none", autocompletion=choices("mail", "command", "none"), help="How to tell you it finished; default: notify in onite.toml.")]
NotifyOnOpt = Annotated[Optional[str], Opt(
    "--notify-on", metavar="failure|always", autocompletion=choices("failure", "always"), help="When to tell you; default: notify_on in onite.toml.")]
MEM_HELP = ("Memory it needs, as Slurm writes it: 4G, 512M (a bare number is MiB); held by the kernel where it "
            "can; ")
MemOpt = Annotated[Optional[str], Opt("--mem", metavar="SIZE", help=MEM_HELP + "default: default_mem in onite.toml.")]
# a string, checked by onite (onite.core.resources.parse_cpus): its words, not the parser's range check
CPUS_HELP = f"CPUs it needs, 1 to {MAX_CPUS}; "
CpusOpt = Annotated[Optional[str], Opt("--cpus", metavar="N", help=CPUS_HELP + "default: default_cpus in onite.toml.")]
# edit and restart change a job that already has its options: one left out keeps the job's value, not
# onite.toml's default
KeptPriorityOpt = Annotated[Optional[int], Opt("-p", "--priority", metavar="N",
                                               help="1 runs first; not given: as it was.")]
KeptMemOpt = Annotated[Optional[str], Opt("--mem", metavar="SIZE", help=MEM_HELP + "not given: as it was.")]
KeptCpusOpt = Annotated[Optional[str], Opt("--cpus", metavar="N", help=CPUS_HELP + "not given: as it was.")]
SlotsOpt = Annotated[Optional[int], Opt("--slots", metavar="N", min=1, max=MAX_SLOTS,
                                        help="Jobs at once (default: this host's slots in onite.toml; slurm: [slurm] max_jobs).")]
DriverHostOpt = Annotated[Optional[str], Opt("--host", metavar="HOST", help="This driver's host name "
                                             "(default: host in onite.toml, else the short hostname).")]

def locate_spool(spool: str | None):
    """Which spool ``--spool`` (given to the command or before it) names, or the default (onite.spool.locate)."""
    from onite.spool.locate import locate

    return locate(spool_of(spool), os.environ, os.geteuid())


def spool_of(spool: str | None) -> str | None:
    """The --spool a command was given: after its name, else before it (``onite --spool DIR list``)."""
    return spool if spool is not None else _GLOBAL["spool"]


def open_spool(spool: str | None, *, reading: bool = False):
    """The spool a command works on, checked (a personal default one created on first use). ``reading``: a command
    that spools nothing (it reads, or withdraws or holds a queued job) goes on past a bad onite.toml, said on
    stderr, with the defaults of what is wrong (the driver and the commands that spool refuse it)."""
    from onite.app.common import open_spool as open_target

    target = open_target(spool_of(spool), reading=reading)
    if reading and target.reload_config() and target.config_faults:  # said before anything else
        first, more = target.config_faults[0], len(target.config_faults) - 1
        say(f"onite: warning: {first}{f' (and {more} more)' if more else ''}; read as if left out here, but until "
            "it is fixed a new drain refuses the file and a running daemon keeps its previous settings")
    return target


MAX_WIDTH = 1000  # columns: COLUMNS may say anything, and a report's timeline is as wide as the terminal
NARROW = 40  # columns below which a table cannot show a name: the plain layout, which the terminal folds


def console(stderr: bool = False):
    """A rich Console on stdout (or stderr), 1 to MAX_WIDTH columns wide (rich, left to COLUMNS, prints nothing at
    all for COLUMNS=0 and fills memory for COLUMNS=99999999999)."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not 1 <= out.width <= MAX_WIDTH:
        out.width = 80 if out.width < 1 else MAX_WIDTH
    return out


def is_plain(out, plain: bool) -> bool:
    """Write plain lines, not a table: asked for, not a terminal, or a terminal too narrow for one."""
    return plain or not out.is_terminal or out.width < NARROW


def terminal(plain: bool):
    """(a Console on stdout, whether its tables are plain) on a terminal; (sys.stdout, True) elsewhere: a pipe or
    a file gets plain lines, written without rich, which is not even imported (a twentieth of a second)."""
    try:
        out = console() if sys.stdout.isatty() else None
    except (AttributeError, ValueError):  # none, or closed
        out = None
    return (sys.stdout, True) if out is None else (out, is_plain(out, plain))


def ask(prompt: str) -> str:
    """A line typed at the terminal; end of input (Ctrl-D) is an empty answer, as Enter is."""
    try:
        return input(prompt).strip()
    except EOFError:
        print()
        return ""


def on_terminal() -> bool:
    """Is stdin a terminal? Not when it is closed (``<&-``, which Python gives as None)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


def confirm(what: str, flag: str, lines: list[str], question: str) -> bool:
    """Did the person at the terminal answer yes, having read ``lines``?
    Raises InvalidInput: no terminal to ask on (``flag`` confirms instead)."""
    if not on_terminal():
        raise InvalidInput(f"{what} needs a confirmation", f"run it on a terminal, or add {flag}")
    for line in lines:
        print(line)
    return ask(question).lower() in ("y", "yes")


def say(line: str) -> None:
    """One line on stderr, beside a command's output (which stays what it is, e.g. valid JSON), spelt out."""
    from onite.core.safetext import printable

    try:
        print(printable(line), file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def warn_damaged(records: list[str]) -> None:
    """Name on stderr the result records that could not be read back and were left out."""
    if records:
        from onite.spool.results import damaged_note

        say(damaged_note(records))
