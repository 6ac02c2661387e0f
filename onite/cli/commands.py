"""onite's command line: parse, call one library function, render. No logic lives here.

Every command takes ``--spool DIR`` (or ONITE_SPOOL). Errors are raised as
OniteError by the library and printed by ``onite.__main__`` as one line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from onite.app import commands
from onite.app.commands import now
from onite.core.errors import InvalidInput, NotFound
from onite.core.jobfile import MAX_RETRIES

HELP_NAMES = {"help_option_names": ["-h", "--help"]}  # -h as in every other tool; no command uses -h for more

app = typer.Typer(
    no_args_is_help=True,  # onite.__main__ prints that help on stdout, exit 0 (typer: stderr, exit 2)
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


def _show_completion(shell: Optional[str]) -> None:
    # onite.cli.fastcli takes `onite --show-completion [SHELL]` first (typer cannot make SHELL optional)
    if shell is not None:
        from onite.cli import completion

        print(completion.script(completion.choose_shell(shell, os.environ, action="--show-completion")))
        raise typer.Exit(0)


def _install_completion(shell: Optional[str]) -> None:
    if shell is not None:
        from onite.cli import completion

        chosen = completion.choose_shell(shell, os.environ, action="--install-completion")
        print(f"{chosen} completion installed in {completion.install(chosen)}; it works in shells started from now on")
        raise typer.Exit(0)


@app.callback()
def _options(
    spool: SpoolOpt = None,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print onite's version and exit.")] = False,
    show_completion: Annotated[Optional[str], typer.Option(
        "--show-completion", metavar="[SHELL]", is_eager=True, callback=_show_completion, show_default=False,
        help="Print the completion script of SHELL (bash, zsh or fish; default: the shell you use), "
        "to install it by hand.")] = None,
    install_completion: Annotated[Optional[str], typer.Option(
        "--install-completion", metavar="[SHELL]", is_eager=True, callback=_install_completion, show_default=False,
        help="Install completion for SHELL (bash, zsh or fish; default: the shell you use).")] = None,
) -> None:
    """onite: spool batch jobs by day, run them at night in priority order, as their owners."""
    _GLOBAL["spool"] = spool  # `onite --spool DIR list` as well as `onite list --spool DIR`


def locate_spool(spool: str | None):
    """Which spool ``--spool`` (given to the command or before it) names, or the default (onite.spool.locate)."""
    from onite.spool.locate import locate

    return locate(spool or _GLOBAL["spool"], os.environ, os.geteuid())


def open_spool(spool: str | None):
    """The spool a command works on, checked; a personal default spool is created on first use."""
    return commands.open_spool(spool or _GLOBAL["spool"])


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


# ---- init ------------------------------------------------------------------------------


@app.command()
def init(
    priorities: Annotated[Optional[int], typer.Option("--priorities", metavar="N", min=1, max=99, help="Number of priority folders P1..Pn.")] = None,
    spool: SpoolOpt = None,
) -> None:
    """Create the spool (idempotent; never overwrites a changed onite.toml)."""
    from onite.spool.locate import check_may_init
    from onite.spool.skeleton import init_spool

    where = locate_spool(spool)
    check_may_init(where, os.geteuid())
    report = init_spool(where.path, priorities, system=os.geteuid() == 0)
    kind = "system spool (multi-user modes)" if os.geteuid() == 0 else "personal spool"
    made = ", ".join(report.created) if report.created else "nothing new"
    print(f"{report.root}: {kind}; created {made}")
    if report.config_kept:
        print(f"{report.root / 'onite.toml'}: kept as you changed it")


# ---- submit ----------------------------------------------------------------------------


class CommandAfterDashes(TyperCommand):
    """``onite submit NAME [options] -- COMMAND ARGS…``: the words after the first ``--`` are the job's
    command line, taken away before the parser sees them (so ``-x`` among them is never an option)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            args, ctx.meta["onite.command"] = args[:at], args[at + 1:]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx) -> list[str]:
        return super().collect_usage_pieces(ctx) + ["[-- COMMAND [ARGS]...]"]


@app.command(cls=CommandAfterDashes)
def submit(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Job name: letters, digits, '.', '_', '-' (100 at most).")],
    priority: Annotated[Optional[int], typer.Option("-p", "--priority", metavar="N", help="1 runs first; default from onite.toml.")] = None,
    urgent: Annotated[bool, typer.Option("--urgent", help="Run before every priority (root and admins only).")] = False,
    after: Annotated[Optional[list[str]], typer.Option("--after", metavar="NAME", help="Wait until this job has finished successfully (repeatable).")] = None,
    at: Annotated[Optional[str], typer.Option("--at", metavar="WHEN", help="Not before this time: now, HH:MM, YYYY-MM-DDTHH:MM, 'tomorrow HH:MM', +2h.")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", metavar="DUR", help="Time limit: 90s, 45m, 2h, 1h30m.")] = None,
    retries: Annotated[int, typer.Option("--retries", metavar="N", min=0, max=MAX_RETRIES, help="Retry a failed job this many times, with back-off.")] = 0,
    host: Annotated[Optional[str], typer.Option("--host", metavar="HOST", help="Run only on this host (when several share the spool).")] = None,
    hold: Annotated[bool, typer.Option("--hold", help="Spool it held; onite release NAME lets it run.")] = False,
    unique: Annotated[bool, typer.Option("--unique", help="Append a unique suffix to NAME and print the final name.")] = False,
    lines: Annotated[bool, typer.Option("--lines", help="Each non-empty line of stdin is a job: NAME-00001, NAME-00002, … in order.")] = False,
    stderr_separate: StderrOpt = None,
    notify: NotifyOpt = None,
    notify_on: NotifyOnOpt = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Do not say on stderr what was spooled and when it "
                                        "is expected to run.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Spool the job text on stdin, with your environment, directory and umask; or, after --, the
    command line that follows (quoted exactly; stdin is not read). Says on stderr when it is expected to run."""
    # onite.cli.fastcli runs well-formed submits without typer: keep the two in step (tests/test_fastcli.py)
    from onite.app.submit import SubmitRequest

    argv = ctx.meta.get("onite.command")
    body = commands.command_text(argv, lines=lines) if argv is not None else b""
    request = SubmitRequest(name=name, body=body, priority=priority, urgent=urgent, after=tuple(after or ()), at=at,
                            timeout=timeout, retries=retries, host=host, hold=hold, unique=unique,
                            stderr_separate=stderr_separate, notify=notify, notify_on=notify_on)
    said = commands.submit_command(request, spool or _GLOBAL["spool"], lines=lines, quiet=quiet)
    if said is not None:
        print(said)


# ---- looking at the queue -------------------------------------------------------------


@app.command("list")
def list_(
    all_: Annotated[bool, typer.Option("--all", "-a", help="Also running and finished jobs.")] = False,
    by_host: Annotated[bool, typer.Option("--by-host", help="Group running and finished jobs by the host that ran them (implies --all).")] = False,
    as_json: JsonOpt = False,
    plain: PlainOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Queued jobs in run order and why each waits (with --all: running and finished ones too)."""
    from onite.app.listing import list_jobs

    if as_json:  # onite.cli.fastcli does the same without typer
        print(commands.list_json(spool or _GLOBAL["spool"], include_all=all_))
        return
    target = open_spool(spool)
    when = now()
    damaged: list[str] = []
    views = list_jobs(target, include_all=all_ or by_host, now=when, damaged=damaged)  # hosts: those of running and finished jobs
    if damaged:
        from onite.spool.results import damaged_note

        commands.warn(damaged_note(damaged))
    if not views:
        print("no jobs queued" if not all_ else "no jobs")
        return
    from onite.cli.render import print_job_list

    out = console()
    print_job_list(views, when, detailed=all_, by_host=by_host, out=out, plain=plain or not out.is_terminal)


@app.command()
def find(name: Annotated[str, typer.Argument(metavar="NAME")], spool: SpoolOpt = None) -> None:
    """Exit 0 if a job NAME is queued or running, 1 if not."""
    if not commands.find(name, spool or _GLOBAL["spool"]):
        raise typer.Exit(1)


@app.command()
def uniqname(base: Annotated[str, typer.Argument(metavar="BASE")], spool: SpoolOpt = None) -> None:
    """Print an unused job name starting with BASE."""
    print(commands.uniqname(base, spool or _GLOBAL["spool"]))


# ---- changing jobs -----------------------------------------------------------------------


@app.command()
def restart(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A finished job (done, failed or cancelled).",
                                        autocompletion=complete_any)],
    new_name: Annotated[Optional[str], typer.Option("--name", metavar="NEW", help="Spool it as NEW (e.g. while "
                                                    "NAME is queued again).")] = None,
    unique: Annotated[bool, typer.Option("--unique", help="Append a unique suffix to the name.")] = False,
    hold: Annotated[bool, typer.Option("--hold", help="Spool it held; onite release lets it run.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Spool a finished job again: its text, environment, directory, umask and options; print its name."""
    print(commands.restart_job(spool or _GLOBAL["spool"], name, new_name=new_name, unique=unique, hold=hold))


@app.command()
def cancel(
    names: Annotated[Optional[list[str]], typer.Argument(metavar="NAME", help="Jobs to cancel, or quoted patterns "
                                                         "('build-*'); none: pick from a list.",
                                                         autocompletion=complete_live)] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every queued and running job of yours (root: everyone's).")] = False,
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask root to confirm a pattern or --all.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Cancel queued or running jobs (your own, unless you are root or own_only = false)."""
    from onite.app.control import is_pattern

    target = open_spool(spool)
    if all_ or any(is_pattern(n) for n in names or ()):
        if all_ and names:
            raise InvalidInput("--all cancels every job of yours and takes no NAME", "drop the names, or --all")
        named = [n for n in names or () if not is_pattern(n)]
        picked = pick_by_pattern(target, [n for n in names or () if is_pattern(n)], every=all_, yes=yes)
        matched = [v.name for v in picked.chosen if v.name not in named]
        done = cancel_each(target, named + matched, matched)
        users = ", ".join(sorted({v.user for v in picked.skipped}))
        print(f"cancelled {done} job(s)" + (f"; skipped {len(picked.skipped)} of other users' ({users}): you may "
                                            "cancel only yours" if picked.skipped else ""))
        return
    cancel_each(target, names or pick_interactively(target), [])


def cancel_each(target, names: list[str], matched: list[str]) -> int:
    """Cancel each job, saying how it went; how many were. A job in ``matched`` (by a pattern) that
    ended or started since it was matched is said and skipped; any other error stops here."""
    from onite.app.control import await_cancel, cancel as cancel_job

    done = 0
    for name in names:
        try:
            report = cancel_job(target, name, os.geteuid(), now())
        except NotFound as err:
            if name not in matched:
                raise
            print(f"{name}: not cancelled ({err.what})")
            continue
        if report.action == "requested":
            report = await_cancel(target, report)
        print(f"{name}: {report.action}" + (f" ({report.detail})" if report.detail else ""))
        done += 1
    return done


def pick_by_pattern(target, patterns: list[str], *, every: bool, yes: bool):
    """The jobs patterns (or --all) pick for the caller (onite.app.control.Selection), confirmed by root.

    Raises:
        InvalidInput: root without --yes where no terminal can confirm.
        NotFound: nothing of the caller's matches.
    """
    from onite.app.control import select_jobs

    picked = select_jobs(target, patterns, os.geteuid(), every=every)
    what = "--all" if every else " ".join(repr(p) for p in patterns)
    if not picked.chosen:
        others = ""
        if picked.skipped:
            users = ", ".join(sorted({v.user for v in picked.skipped}))
            others = f" (it matches {len(picked.skipped)} of other users': {users})"
        raise NotFound(f"no queued or running job of yours matches {what}{others}", "see onite list")
    if os.geteuid() == 0 and not yes:
        if not sys.stdin.isatty():
            raise InvalidInput(f"cancelling by {what} as root needs a confirmation", "run it on a terminal, or add --yes")
        for view in picked.chosen:
            print(f"  {view.name}  ({view.state}, {view.user})")
        if ask(f"cancel these {len(picked.chosen)} job(s)? [y/N] ").lower() not in ("y", "yes"):
            print("nothing cancelled")
            raise typer.Exit(0)
    return picked


def pick_interactively(target) -> list[str]:
    """The seed's numbered pick list: only on a terminal."""
    from onite.app.control import cancellable

    if not sys.stdin.isatty():
        raise InvalidInput("no job name given", "name the job(s): onite cancel NAME…")
    views = cancellable(target, os.geteuid())
    if not views:
        print("you have no queued or running jobs")
        return []
    for number, view in enumerate(views, 1):
        print(f"{number:3d}  {view.name}  ({view.state}, {view.user})")
    answer = ask("cancel which job? number, or Enter for none: ")
    if not answer:
        print("nothing cancelled")
        return []
    if not answer.isdigit() or not 1 <= int(answer) <= len(views):
        raise InvalidInput(f"no job numbered {answer!r}", f"answer a number from 1 to {len(views)}")
    return [views[int(answer) - 1].name]


def ask(prompt: str) -> str:
    """A line typed at the terminal; end of input (Ctrl-D) is an empty answer, as Enter is."""
    try:
        return input(prompt).strip()
    except EOFError:
        print()
        return ""


@app.command()
def hold(names: Annotated[list[str], typer.Argument(metavar="NAME", autocompletion=complete_live)], spool: SpoolOpt = None) -> None:
    """Hold queued jobs: they keep their place but are skipped until released."""
    _set_hold(names, spool, held=True)


@app.command()
def release(names: Annotated[list[str], typer.Argument(metavar="NAME", autocompletion=complete_live)], spool: SpoolOpt = None) -> None:
    """Release held jobs (they keep their place in their priority)."""
    _set_hold(names, spool, held=False)


def _set_hold(names: list[str], spool: str | None, *, held: bool) -> None:
    from onite.app.control import set_hold

    target = open_spool(spool)
    for name in names:
        set_hold(target, name, os.geteuid(), held)
        print(f"{name}: {'held' if held else 'released'}")


# ---- the driver -------------------------------------------------------------------------


@app.command()
def run(
    detach: Annotated[bool, typer.Option("--detach", help="Run in the background, immune to hang-up, logging to onite.log.")] = False,
    slots: Annotated[Optional[int], typer.Option("--slots", metavar="N", min=1, max=4096, help="Jobs at once (default: slots in onite.toml).")] = None,
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
    code = commands.run_driver(spool or _GLOBAL["spool"], detach=detach, slots=slots, until=until, host=host,
                               verbose=verbose, quiet=quiet, scheduled=scheduled)
    raise typer.Exit(code)


@app.command()
def recover(
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="The host whose driver died and will not come back.")],
    force: Annotated[bool, typer.Option("--force", help="Do not ask for confirmation.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Requeue (or fail, per on_interrupt) the jobs a dead host had claimed (root)."""
    target, claims = commands.host_claims(spool or _GLOBAL["spool"], host)
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
    done = commands.recover_host(target, host)
    print(f"recovered {len(done)} job(s) of host {host}: {', '.join(done)}")


@app.command()
def daemon(
    drain_now: Annotated[bool, typer.Option("--drain-now", help="Drain once at start (e.g. after maintenance), "
                                            "then follow the schedule.")] = False,
    slots: Annotated[Optional[int], typer.Option("--slots", metavar="N", min=1, max=4096, help="Jobs at once (default: slots in onite.toml).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", metavar="HH:MM", help="Start no job at or after this time (HH:MM; default: until in onite.toml).")] = None,
    host: Annotated[Optional[str], typer.Option("--host", metavar="HOST", help="This driver's host name (default: host in onite.toml, else the short hostname).")] = None,
    wake: Annotated[bool, typer.Option("--wake", help="Do not start a daemon: tell the one running for this host "
                                       "to drain now (root).")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Stay running: drain at the times in `schedule`, run --at jobs and recurring jobs when due (docs/scheduling.md)."""
    if wake:
        print(commands.wake_daemon(spool or _GLOBAL["spool"], host))
        return
    raise typer.Exit(commands.run_daemon(spool or _GLOBAL["spool"], drain_now=drain_now, slots=slots, until=until,
                                         host=host))


# ---- recurring jobs ------------------------------------------------------------------------

recur_app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None, context_settings=HELP_NAMES,
                        pretty_exceptions_enable=False,
                        help="Recurring jobs: templates spooled as a job each time their rule fires.")
app.add_typer(recur_app, name="recur")


@recur_app.command("add")
def recur_add(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Template name (instances are NAME-YYYYMMDDTHHMM).")],
    cron_expr: Annotated[Optional[str], typer.Option("--cron", metavar="EXPR", help="Five-field cron expression, e.g. '0 20 * * 1-5'.")] = None,
    every: Annotated[Optional[str], typer.Option("--every", metavar="DUR", help="Interval from local midnight: 25m, 2h, 1d.")] = None,
    offset: Annotated[Optional[str], typer.Option("--offset", metavar="DUR", help="With --every: shift every fire by this much (2m).")] = None,
    priority: Annotated[Optional[int], typer.Option("-p", "--priority", metavar="N", help="1 runs first; default from onite.toml.")] = None,
    urgent: Annotated[bool, typer.Option("--urgent", help="Instances run before every priority (root and admins only).")] = False,
    after: Annotated[Optional[list[str]], typer.Option("--after", metavar="NAME", help="Each instance waits for this job (repeatable).")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", metavar="DUR", help="Time limit of each instance: 90s, 45m, 2h.")] = None,
    retries: Annotated[int, typer.Option("--retries", metavar="N", min=0, max=MAX_RETRIES, help="Retry a failed instance this many times.")] = 0,
    host: Annotated[Optional[str], typer.Option("--host", metavar="HOST", help="Instances run only on this host.")] = None,
    stderr_separate: StderrOpt = None,
    notify: NotifyOpt = None,
    notify_on: NotifyOnOpt = None,
    spool: SpoolOpt = None,
) -> None:
    """Store the job text on stdin as a recurring job, with your environment, directory and umask."""
    from onite.exec import identity
    from onite.app.recur import RecurRequest, add
    from onite.app.submit import capture

    target = open_spool(spool)
    request = RecurRequest(name=name, body=commands.read_job_text(target.config.max_job_size), cron=cron_expr, every=every,
                           offset=offset, priority=priority, urgent=urgent, after=tuple(after or ()),
                           timeout=timeout, retries=retries, host=host, stderr_separate=stderr_separate,
                           notify=notify, notify_on=notify_on)
    when = now()
    _, rule = add(target, request, capture(when), identity.current())
    from onite.core.schedule import describe, next_fire

    print(f"{name}: {describe(rule)}; next at {next_fire(rule, when).isoformat(timespec='seconds')}")


@recur_app.command("list")
def recur_list(as_json: JsonOpt = False, plain: PlainOpt = False, spool: SpoolOpt = None) -> None:
    """Recurring jobs: name, owner, rule, next fire, priority."""
    from onite.app.recur import templates, templates_json

    target = open_spool(spool)
    when = now()
    views = templates(target, when)
    if as_json:
        print(templates_json(views, when))
        return
    if not views:
        print("no recurring jobs")
        return
    from onite.cli.render import print_recur_list

    out = console()
    print_recur_list(views, when, out=out, plain=plain or not out.is_terminal)


@recur_app.command("remove")
def recur_remove(names: Annotated[list[str], typer.Argument(metavar="NAME")], spool: SpoolOpt = None) -> None:
    """Remove recurring jobs (your own, unless you are root). Instances already spooled stay."""
    from onite.app.recur import remove

    target = open_spool(spool)
    for name in names:
        remove(target, name, os.geteuid())
        print(f"{name}: removed")


@recur_app.command("next")
def recur_next(
    name: Annotated[Optional[str], typer.Argument(metavar="NAME", help="A recurring job; or give a rule with --cron/--every.")] = None,
    count: Annotated[int, typer.Option("-n", "--count", metavar="N", min=1, max=10000, help="How many fire times.")] = 5,
    start: Annotated[Optional[str], typer.Option("--from", metavar="WHEN", help="Start after this time (default: now): "
                                                 "2026-01-05T00:00, HH:MM, +2h.")] = None,
    cron_expr: Annotated[Optional[str], typer.Option("--cron", metavar="EXPR", help="Preview this cron expression instead.")] = None,
    every: Annotated[Optional[str], typer.Option("--every", metavar="DUR", help="Preview this interval instead.")] = None,
    offset: Annotated[Optional[str], typer.Option("--offset", metavar="DUR", help="With --every.")] = None,
    spool: SpoolOpt = None,
) -> None:
    """Print the next fire times, one per line, in ISO 8601 (local time)."""
    from onite.app.recur import preview
    from onite.core.schedule import parse_rule
    from onite.core.timeparse import parse_when

    if (name is not None) == any(v is not None for v in (cron_expr, every, offset)):
        raise InvalidInput("give a recurring job's NAME or a rule (--cron EXPR, or --every DUR [--offset DUR])",
                           "e.g. onite recur next nightly, or onite recur next --every 25m --offset 2m")
    rule = parse_rule(cron=cron_expr, every=every, offset=offset) if name is None else None
    when = now()
    start_at = parse_when(start, when) if start else when
    target = open_spool(spool) if name is not None else None
    for fire in preview(target, name, rule, start_at, count):
        print(fire.isoformat(timespec="seconds"))


# ---- results -----------------------------------------------------------------------------


@app.command()
def output(
    name: Annotated[str, typer.Argument(metavar="NAME", autocompletion=complete_any)],
    stderr: Annotated[bool, typer.Option("--stderr", help="Print its stderr, kept apart when it was spooled with "
                                         "--stderr-separate.")] = False,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Print the output as it grows until the job has "
                                         "finished (a queued job: once it starts), then how it ended, on stderr; "
                                         "exit 0 if it was done, 5 if not.")] = False,
    spool: SpoolOpt = None,
) -> None:
    """Print the captured output of your job NAME (its latest run): stdout, with stderr unless kept apart."""
    from onite.spool.outputs import open_job_output

    target = open_spool(spool)
    if follow:
        raise typer.Exit(commands.follow_output(target, name, stderr=stderr))
    with open_job_output(target, name, os.geteuid(), stderr=stderr) as handle:
        out = sys.stdout.buffer
        while chunk := handle.read(1 << 16):
            out.write(chunk)
        out.flush()


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
    print(commands.cron_command(spool or _GLOBAL["spool"], install=install, uninstall=uninstall), end="")


@app.command()
def status(as_json: JsonOpt = False, plain: PlainOpt = False, spool: SpoolOpt = None) -> None:
    """Drivers running, queue sizes, running jobs, the next scheduled drain."""
    from onite.app.status import gather, status_json

    target = open_spool(spool)
    info = gather(target, now())
    if info.damaged:
        from onite.spool.results import damaged_note

        commands.warn(damaged_note(info.damaged))
    if as_json:
        print(status_json(info))
        return
    from onite.app.status import render_status

    out = console()
    render_status(out, info, plain=plain or not out.is_terminal)


@app.command()
def wait(
    names: Annotated[Optional[list[str]], typer.Argument(metavar="NAME", help="Jobs to wait for; none: the drains running now.")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", metavar="DUR", help="Give up after this long (exit 6): 90s, 45m, 2h.")] = None,
    as_json: JsonOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Block until the named jobs (or the current drains) have finished; exit 0 if all were done, 5 if not."""
    # onite.cli.fastcli runs well-formed waits without typer: scripts call it in loops
    raise typer.Exit(commands.wait_command(names or [], timeout, spool or _GLOBAL["spool"], as_json=as_json))


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

    data = rep.build(open_spool(spool), now(), since, night=night, until=until, user=user)
    if data.damaged:
        from onite.spool.results import damaged_note

        commands.warn(damaged_note(data.damaged))
    if html:  # first: a page that cannot be written is an error, with no report printed before it
        rep.write_html(html, data)
    if as_json:
        print(rep.to_json(data))
    else:
        rep.render(console(), data, plain=plain)
        if html:
            print(f"HTML report written to {html}")
