"""The typer command line, made of the commands onite.cli.options registers: help, usage errors, completion,
and every command line onite.cli.fastpath leaves to it."""

import contextlib
import functools
import inspect
import os
from collections.abc import Callable
from typing import Annotated, Optional, get_args, get_origin

import typer
from typer.core import TyperCommand, TyperGroup

from onite.cli.options import COMPLETE_VAR, GROUPS, Arg, Opt, SpoolOpt, every_command, set_parsed
from onite.core.errors import InvalidInput, OniteError

SHELLS = ("bash", "zsh", "fish")
ACTIONS = ("--show-completion", "--install-completion")  # onite's own options, whose SHELL may be left out
# the commands in `onite --help`: what users type every day first, the administrator's last (each command is here)
ORDER = ("submit", "list", "status", "cancel", "output", "wait", "find", "hold", "release", "restart", "edit",
         "uniqname", "report", "log", "recur", "init", "run", "daemon", "recover", "cron", "metrics")


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


class CommandAfterDashes(OniteCommand):
    """``onite submit NAME [options] -- COMMAND ARGS…``: the words after the first ``--`` are the job's command
    line, taken away before the parser sees them (so ``-x`` among them is never an option)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            args, words = args[:at], args[at + 1:]
            set_parsed(command=words)
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx) -> list[str]:
        return super().collect_usage_pieces(ctx) + ["[-- COMMAND [ARGS]...]"]


class OniteGroup(TyperGroup):
    """A group that lists its commands in ORDER, each with the whole first sentence of its help (click cuts it
    at 45 columns with "...")."""

    def list_commands(self, ctx) -> list[str]:
        rank = {name: i for i, name in enumerate(ORDER)}
        return sorted(self.commands, key=lambda name: rank.get(name, len(ORDER)))

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, _first_sentence(self.commands[name].help or "")) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _first_sentence(text: str) -> str:
    paragraph = " ".join(text.split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]


# -h as in every other tool; no completion options of typer's, which cannot find the shell when none is named
SETTINGS = dict(cls=OniteGroup, add_completion=False, context_settings={"help_option_names": ["-h", "--help"]},
                rich_markup_mode=None, pretty_exceptions_enable=False)


def command_for(args: list[str], *, everything: bool = False, run: Callable | None = None):
    """The click command that runs ``args``: only the command they name (building every command's parameters costs
    more than running most); every command for help, completion (``everything``) and a name that is no command's
    (click then suggests one). ``run(func, kwargs)``, if given, runs the command's function instead of calling it."""
    name = _command_name(args)
    commands = every_command()
    chosen = {key: value for key, value in commands.items() if name == (key[0] or key[1])}  # key: (group, name)
    if everything or not chosen:
        chosen = commands
    app = typer.Typer(**SETTINGS)
    app.callback(invoke_without_command=True)(_typer_function(_options))
    groups = {}
    for (group, command_name), command in chosen.items():
        if group is not None and group not in groups:
            groups[group] = typer.Typer(**SETTINGS, help=GROUPS[group])
            groups[group].callback(invoke_without_command=True)(_group_help)  # bare `onite recur`: its help
            app.add_typer(groups[group], name=group)
        where = app if group is None else groups[group]
        where.command(command_name, cls=CommandAfterDashes if command.after_dashes else OniteCommand)(
            _typer_function(command, run))
    return typer.main.get_command(app)


def _command_name(args: list[str]) -> str | None:
    """The first word of ``args`` that is neither an option of onite's own nor --spool's value."""
    words = iter(args)
    for word in words:
        if word == "--spool":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _typer_function(func: Callable, run: Callable | None = None) -> Callable:
    """``func`` as typer reads a command: its Opt and Arg annotations made typer's (``run``: command_for's)."""
    def typed(**kwargs):
        return func(**kwargs) if run is None else run(func, kwargs)

    functools.update_wrapper(typed, func)
    params = [param.replace(annotation=_typer_annotation(param.annotation))
              for param in inspect.signature(func).parameters.values()]
    typed.__signature__ = inspect.Signature(params)
    typed.__annotations__ = {param.name: param.annotation for param in params}
    return typed


def _typer_annotation(annotation):
    if get_origin(annotation) is not Annotated:
        return annotation
    base, *extras = get_args(annotation)
    return Annotated[(base, *map(_typer_parameter, extras))]


def _typer_parameter(declared):
    if not isinstance(declared, Opt):
        return declared
    settings = {key: value() if key == "help" and callable(value) else value
                for key, value in declared.settings.items()}
    return (typer.Argument if isinstance(declared, Arg) else typer.Option)(*declared.decls, **settings)


def _print_version(wanted: bool) -> None:
    if wanted:
        from onite import __version__

        print(f"onite {__version__}")
        raise typer.Exit(0)


def _completion(option: typer.CallbackParam, shell: Optional[str]) -> None:
    if shell is not None:  # given without one, onite.__main__ acts for the shell in use
        complete_shell(option.opts[0], shell)
        raise typer.Exit(0)


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
    set_parsed(spool=spool, command=None)  # `onite --spool DIR list` as well as `onite list --spool DIR`


def _group_help(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        show_help(ctx)


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


