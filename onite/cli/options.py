"""The typer application and what its commands share: options, the spool, the terminal, shell completion.

These modules do not use ``from __future__ import annotations``: typer reads every command's annotations
each time it builds the command line, and as strings each one is compiled and evaluated again (30 ms).
"""

import contextlib
import os
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from onite.core.config import MAX_SLOTS
from onite.core.errors import InvalidInput, OniteError
from onite.core.job import MAX_RETRIES
from onite.core.resources import MAX_CPUS

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_ONITE_COMPLETE"  # what the completion scripts set to ask onite for completions
ACTIONS = ("--show-completion", "--install-completion")  # onite's own options, whose SHELL may be left out
# the commands in `onite --help`: what users type every day first, the administrator's last; any other after them
ORDER = ("submit", "list", "status", "cancel", "output", "wait", "find", "hold", "release", "restart", "uniqname",
         "report", "log", "recur", "init", "run", "daemon", "recover", "cron")


class OniteCommand(TyperCommand):
    """A command whose usage line names its arguments as its help does: ``NAME``, ``[NAME]...`` (typer: ``{NAME}``)."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces += param.get_usage_pieces(ctx)
                continue
            var = param.metavar or param.name.upper()
            pieces.append((var if param.required else f"[{var}]") + ("..." if param.nargs != 1 else ""))
        return pieces


class OniteGroup(TyperGroup):
    """A group that lists its commands in ORDER, each with the whole first sentence of its help (click cuts it
    at 45 columns with "...")."""

    def list_commands(self, ctx) -> list[str]:
        rank = {name: i for i, name in enumerate(ORDER)}
        return sorted(self.commands, key=lambda name: rank.get(name, len(ORDER)))

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, _first_sentence(self.commands[name].help or "")) for name in self.list_commands(ctx)
                if not self.commands[name].hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _first_sentence(text: str) -> str:
    words = text.split("\n\n")[0].split()
    for i, word in enumerate(words):
        if word.endswith("."):
            return " ".join(words[:i + 1])
    return " ".join(words)


class OniteTyper(typer.Typer):
    """typer.Typer whose commands are OniteCommands unless they say otherwise."""

    def command(self, name=None, *, cls=None, **kwargs):
        return super().command(name, cls=cls or OniteCommand, **kwargs)


# -h as in every other tool; no completion options of typer's, which cannot find the shell when none is named
SETTINGS = dict(cls=OniteGroup, add_completion=False, context_settings={"help_option_names": ["-h", "--help"]},
                rich_markup_mode=None, pretty_exceptions_enable=False)
app = OniteTyper(**SETTINGS)  # its help: the docstring of _options


def _spool_help() -> str:
    """--spool's help, saying which spool is in use now and why."""
    text = ("Spool directory (default: $ONITE_SPOOL, else the system spool /var/spool/onite (spool in "
            "/etc/onite.toml) for root, and for everyone once root has set it up, else ~/.local/state/onite).")
    try:
        from onite.spool.locate import locate

        return f"{text} In use now: {locate(None, os.environ, os.geteuid()).describe()}."
    except Exception:  # noqa: BLE001 - help must never fail; a bad /etc/onite.toml is said by the commands
        return text


def complete_name(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a job's name: a queued or running one, or (output, restart) a finished one too."""
    from onite.app.listing import completion_names
    from onite.spool.paths import SpoolDir

    try:
        return completion_names(SpoolDir(locate_spool(None).path), incomplete,
                                finished=ctx.command.name in ("output", "restart"))
    except Exception:  # noqa: BLE001 - completion must never print a traceback into the user's shell
        return []


SpoolOpt = Annotated[Optional[str], typer.Option("--spool", metavar="DIR", help=_spool_help(), show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout (docs/json.md).")]
PlainOpt = Annotated[bool, typer.Option("--plain", help="One line per row, never wrapped, states in words: what a pipe "
                                        "gets (docs/cli.md, OUTPUT FOR SCRIPTS).")]
LiveNamesArg = Annotated[list[str], typer.Argument(metavar="NAME", autocompletion=complete_name)]
# a job's options, shared by submit and recur add (whose every instance is such a job)
PriorityOpt = Annotated[Optional[int], typer.Option("-p", "--priority", metavar="N",
                                                    help="1 runs first; default from onite.toml.")]
UrgentOpt = Annotated[bool, typer.Option("--urgent", help="Run before every priority (root and admins only).")]
AfterOpt = Annotated[Optional[list[str]], typer.Option(
    "--after", metavar="NAME", help="Wait until this job has finished successfully (repeatable).")]
AtOpt = Annotated[Optional[str], typer.Option("--at", metavar="WHEN", help="Not before this time: now, HH:MM, "
                                              "YYYY-MM-DDTHH:MM, 'tomorrow HH:MM', +2h.")]
TimeoutOpt = Annotated[Optional[str], typer.Option("--timeout", metavar="DUR", help="Time limit: 90s, 45m, 2h, 1h30m "
                                                    "(a bare number is seconds).")]
RetriesOpt = Annotated[Optional[int], typer.Option("--retries", metavar="N", min=0, max=MAX_RETRIES,
                                         help="Retry a failed job this many times, with back-off.")]
HostOpt = Annotated[Optional[str], typer.Option("--host", metavar="HOST",
                                                help="Run only on this host (when several share the spool).")]
StderrOpt = Annotated[Optional[bool], typer.Option(
    "--stderr-separate/--stderr-merged", show_default=False, help="Keep stderr apart from stdout (read it with onite "
    "output NAME --stderr), or with it; default: stderr_separate in onite.toml.")]
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
SlotsOpt = Annotated[Optional[int], typer.Option("--slots", metavar="N", min=1, max=MAX_SLOTS,
                                                 help="Jobs at once (default: slots in onite.toml).")]
DriverHostOpt = Annotated[Optional[str], typer.Option("--host", metavar="HOST", help="This driver's host name "
                                                      "(default: host in onite.toml, else the short hostname).")]

_GLOBAL: dict[str, str | None] = {"spool": None}


def _print_version(wanted: bool) -> None:
    if wanted:
        from onite import __version__

        print(f"onite {__version__}")
        raise typer.Exit(0)


def _completion(option: typer.CallbackParam, shell: Optional[str]) -> None:
    if shell is not None:  # given without one, onite.__main__ acts for the shell in use
        complete_shell(option.opts[0], shell)
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
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
    """Bare ``onite`` (or ``onite recur``): its help on stdout, exit 0 (click's no_args_is_help: stderr, exit 2)."""
    print(ctx.get_help())
    raise typer.Exit(0)


def complete_shell(action: str, named: str | None) -> None:
    """``--show-completion [SHELL]``: print the script; ``--install-completion [SHELL]``: install it.
    InvalidInput: a shell onite cannot complete (sh, dash, ksh), or none found."""
    from typer import completion

    from onite.core.safetext import printable

    how, spelt = f"name one of them, e.g. onite {action} {SHELLS[0]}", ", ".join(SHELLS[:-1]) + " and " + SHELLS[-1]
    if named:
        shell = named.strip().lower()
        if shell not in SHELLS:
            raise InvalidInput(f"onite cannot complete the shell {named!r}: it completes {spelt}", how)
    else:  # the nearest shell among onite's parent processes, else the login shell
        shell = os.path.basename(os.environ.get("SHELL") or "").lower() or None
        with contextlib.suppress(Exception):  # ShellDetectionFailure, or a /proc it cannot read
            import shellingham

            shell = shellingham.detect_shell()[0].lower() or shell
    if shell is None:
        raise InvalidInput(f"cannot tell which shell you use; onite completes {spelt}",
                           f"name yours, e.g. onite {action} {SHELLS[0]}")
    if shell not in SHELLS:
        raise InvalidInput(f"your shell is {printable(shell)}, which onite cannot complete; it completes {spelt}", how)
    if action == "--show-completion":
        print(completion.get_completion_script(prog_name="onite", complete_var=COMPLETE_VAR, shell=shell))
        return
    try:
        _, path = completion.install(shell=shell, prog_name="onite", complete_var=COMPLETE_VAR)
    except OSError as err:
        where = getattr(err, "filename", None) or "your home directory"
        raise OniteError(f"cannot install {shell} completion: {where}: {err.strerror or err}",
                         f"print the script instead: onite --show-completion {shell}") from None
    print(f"{shell} completion installed in {path}; it works in shells started from now on")


def locate_spool(spool: str | None):
    """Which spool ``--spool`` (given to the command or before it) names, or the default (onite.spool.locate)."""
    from onite.spool.locate import locate

    return locate(spool_of(spool), os.environ, os.geteuid())


def spool_of(spool: str | None) -> str | None:
    """The --spool a command was given: after its name, else before it (``onite --spool DIR list``)."""
    return spool or _GLOBAL["spool"]


def open_spool(spool: str | None, *, reading: bool = False):
    """The spool a command works on, checked; a personal default spool is created on first use. ``reading``: the
    command only reads it, and goes on past a bad onite.toml, said once on stderr, with the defaults of what is
    wrong (the driver and the admin's commands refuse it)."""
    from onite.app.common import open_spool as open_target

    target = open_target(spool_of(spool), reading=reading)
    if reading and target.reload_config() and target.config_faults:  # now: said before anything else
        first, more = target.config_faults[0], len(target.config_faults) - 1
        say(f"onite: warning: {first}{f' (and {more} more)' if more else ''}; read as if left out here, but a "
            "drain refuses the file until it is fixed")
    return target


MAX_WIDTH = 1000  # columns: COLUMNS may say anything, and a report's timeline is as wide as the terminal
NARROW = 40  # columns below which a table cannot show a name: the plain layout, which the terminal folds


def console(stderr: bool = False):
    """A rich Console on stdout (or stderr), 1 to MAX_WIDTH columns wide (COLUMNS=0 printed nothing at all,
    COLUMNS=99999999999 filled memory)."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not 1 <= out.width <= MAX_WIDTH:
        out.width = 80 if out.width < 1 else MAX_WIDTH
    return out


def is_plain(out, plain: bool) -> bool:
    """Write plain lines, not a table: asked for, not a terminal, or a terminal too narrow for one."""
    return plain or not out.is_terminal or out.width < NARROW


def terminal(plain: bool):
    """(a Console on stdout, whether its tables are plain) on a terminal; (None, True) elsewhere: a pipe or a
    file gets plain lines, written without rich, which is not even imported (a twentieth of a second)."""
    try:
        out = console() if sys.stdout.isatty() else None
    except (AttributeError, ValueError):  # none, or closed
        out = None
    return out, out is None or is_plain(out, plain)


def ask(prompt: str) -> str:
    """A line typed at the terminal; end of input (Ctrl-D) is an empty answer, as Enter is."""
    try:
        return input(prompt).strip()
    except EOFError:
        print()
        return ""


def confirm(what: str, flag: str, lines: list[str], question: str) -> bool:
    """Did the person at the terminal answer yes, having read ``lines``?
    Raises InvalidInput: no terminal to ask on (``flag`` confirms instead)."""
    if not sys.stdin.isatty():
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
