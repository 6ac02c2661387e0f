"""The command line's fast path: ``onite submit``, ``find``, ``list --json``, ``run`` and ``wait`` without typer.

(Also ``--show-completion [SHELL]`` and ``--install-completion [SHELL]``,
whose SHELL typer cannot make optional: onite.cli declares them with a
value, for its help and for spellings this module leaves to it.)

Scripts run the first three in loops, and typer's start-up (it imports
pydantic to parse options) costs several times what the command itself
does; a driver holding 100,000 queued jobs is a third smaller without it. So
``onite.__main__`` first offers the arguments to ``run``, which parses
exactly the documented spellings of these commands and calls the same
functions as the typer commands (onite.cli.shared). Anything it does not
fully understand -- ``--help``, an unknown or misspelt option, ``-p3``,
``--``, a missing value, a value typer would reject, a repeated option --
makes it return None, and typer parses the arguments as always: typer
stays the one source of help and of usage errors. tests/test_fastcli.py
checks that both paths spool the same jobs and fail the same way.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"[0-9]{1,9}")
# The spellings this path takes, each with the name of typer's parameter it sets (onite.cli.jobcmds,
# drivecmds, infocmds): (options that take a value, flags). tests/test_fastcli.py checks them against
# typer's own parameters, and ranges() against typer's ranges.
OPTIONS = {
    "submit": ({"-p": "priority", "--priority": "priority", "--after": "after", "--at": "at", "--timeout": "timeout",
                "--retries": "retries", "--host": "host", "--spool": "spool", "--notify": "notify",
                "--notify-on": "notify_on", "--mem": "mem", "--cpus": "cpus"},
               {"--urgent": "urgent", "--hold": "hold", "--unique": "unique", "--lines": "lines",
                "--stderr-separate": "stderr_separate", "--stderr-merged": "stderr_merged", "-q": "quiet",
                "--quiet": "quiet"}),
    "find": ({"--spool": "spool"}, {}),
    "list": ({"--spool": "spool"}, {"--json": "as_json", "--all": "all_", "-a": "all_"}),
    "run": ({"--slots": "slots", "--until": "until", "--host": "host", "--spool": "spool"},
            {"--detach": "detach", "-v": "verbose", "--verbose": "verbose", "-q": "quiet", "--quiet": "quiet",
             "--scheduled": "scheduled"}),
    "wait": ({"--timeout": "timeout", "--spool": "spool"}, {"--json": "as_json"}),
}


def ranges() -> dict[tuple[str, str], tuple[int, int]]:
    """The whole numbers (inclusive) an option takes, as typer's range checks have them."""
    from onite.core.config import MAX_SLOTS
    from onite.core.job import MAX_RETRIES

    return {("submit", "retries"): (0, MAX_RETRIES), ("run", "slots"): (1, MAX_SLOTS)}


def run(args: list[str]) -> int | None:
    """Run ``args`` (without the program name) if this module understands all of it; else None.

    Raises:
        OniteError: as the command does (the caller prints it, as for typer's path).
    """
    spool, rest = _global_spool(args)
    if not rest:
        return None
    command, rest = rest[0], rest[1:]
    if command.partition("=")[0] in _COMPLETION:
        return _completion(command, rest)
    if command == "submit":
        return _submit(rest, spool)
    if command == "find":
        return _find(rest, spool)
    if command == "list":
        return _list(rest, spool)
    if command == "run":
        return _run(rest, spool)
    if command == "wait":
        return _wait(rest, spool)
    return None


_COMPLETION = ("--show-completion", "--install-completion")
_SHORT = ("submit", "find", "list", "wait")  # every command of this path but run: a driver may leave threads


def is_short(args: list[str]) -> bool:
    """Whether ``args`` (which ``run`` took) is a command that, once it returns, has no thread, child
    or unflushed file left: the process may end without Python's exit (onite.__main__)."""
    rest = _global_spool(args)[1]
    return bool(rest) and rest[0] in _SHORT


def _completion(option: str, rest: list[str]) -> int | None:
    """``onite --show-completion [SHELL]``, ``--install-completion [SHELL]``: typer cannot make the
    value optional, so its options (onite.cli) take only the spelling with a value."""
    name, eq, shell = option.partition("=")
    if not eq:
        if len(rest) > 1 or (rest and rest[0].startswith("-")):
            return None
        shell = rest[0] if rest else None
    elif rest:
        return None
    import os

    from onite.cli import completion

    chosen = completion.choose_shell(shell, os.environ, action=name)
    if name == "--show-completion":
        print(completion.script(chosen))
    else:
        print(f"{chosen} completion installed in {completion.install(chosen)}; it works in shells started from now on")
    return 0


def _global_spool(args: list[str]) -> tuple[str | None, list[str] | None]:
    """``onite --spool DIR COMMAND …``: the spool given before the command, and the rest."""
    if args and args[0] == "--spool":
        return (args[1], args[2:]) if len(args) > 1 and not args[1].startswith("-") else (None, None)
    if args and args[0].startswith("--spool="):
        return args[0][len("--spool="):], args[1:]
    return None, args


def _parse(args: list[str], values: dict[str, str], flags: dict[str, str]) -> tuple[list[str], dict] | None:
    """Positional arguments and options as click would see them, or None for anything unusual."""
    positional: list[str] = []
    options: dict = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            if arg == "-":
                return None
            positional.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if name in flags and not eq:
            options[flags[name]] = True
            continue
        if name not in values or (eq and not name.startswith("--")):
            return None  # --help, -h, -p3, --no-hold, --, a typo: typer's to explain
        if not eq:
            if i >= len(args) or args[i].startswith("-"):
                return None  # a missing value, or one click might read as an option
            value = args[i]
            i += 1
        key = values[name]
        if key == "after":
            options.setdefault("after", []).append(value)
        elif key in options:
            return None  # click keeps the last of a repeated option; leave that to it
        else:
            options[key] = value
    return positional, options


def _submit(args: list[str], global_spool: str | None) -> int | None:
    parsed = _parse(args, *OPTIONS["submit"])
    if parsed is None:
        return None
    positional, options = parsed
    if len(positional) != 1:
        return None
    priority = options.pop("priority", None)
    retries = options.pop("retries", "0")
    if priority is not None and not _NUMBER.fullmatch(priority):
        return None
    if not _in_range(retries, *ranges()["submit", "retries"]):
        return None  # typer's range check words the error
    separate, merged = options.pop("stderr_separate", False), options.pop("stderr_merged", False)
    if separate and merged:
        return None  # click keeps the last of the two; leave that to it
    from onite.cli import shared
    from onite.core.request import SubmitRequest

    spool, lines, quiet = options.pop("spool", None), options.pop("lines", False), options.pop("quiet", False)
    request = SubmitRequest.of(positional[0], b"", dict(
        options, priority=int(priority) if priority is not None else None, retries=int(retries),
        stderr_separate=True if separate else False if merged else None))
    shared.submit(request, spool or global_spool, lines=lines, quiet=quiet)
    return 0


def _in_range(text: str, low: int, high: int) -> bool:
    return bool(_NUMBER.fullmatch(text)) and low <= int(text) <= high


def _find(args: list[str], global_spool: str | None) -> int | None:
    parsed = _parse(args, *OPTIONS["find"])
    if parsed is None or len(parsed[0]) != 1:
        return None
    from onite.cli import shared

    return 0 if shared.find(parsed[0][0], parsed[1].get("spool") or global_spool) else 1


def _list(args: list[str], global_spool: str | None) -> int | None:
    """``onite list --json [--all]``: the table needs rich, and is typer's."""
    parsed = _parse(args, *OPTIONS["list"])
    if parsed is None or parsed[0] or not parsed[1].get("as_json"):
        return None
    from onite.cli import shared

    shared.list_json(parsed[1].get("spool") or global_spool, include_all=parsed[1].get("all_", False))
    return 0


def _run(args: list[str], global_spool: str | None) -> int | None:
    """``onite run``: a driver without typer is smaller, which matters with 100,000 jobs queued."""
    parsed = _parse(args, *OPTIONS["run"])
    if parsed is None or parsed[0]:
        return None
    options = parsed[1]
    slots = options.get("slots")
    if slots is not None and not _in_range(slots, *ranges()["run", "slots"]):
        return None  # typer's range check words the error
    from onite.cli import shared

    return shared.run_driver(options.get("spool") or global_spool, detach=options.get("detach", False),
                             slots=int(slots) if slots else None, until=options.get("until"),
                             host=options.get("host"), verbose=options.get("verbose", False),
                             quiet=options.get("quiet", False), scheduled=options.get("scheduled", False))


def _wait(args: list[str], global_spool: str | None) -> int | None:
    """``onite wait [NAME…] [--timeout DUR] [--json]``: scripts wait for jobs in loops."""
    parsed = _parse(args, *OPTIONS["wait"])
    if parsed is None:
        return None
    from onite.cli import shared

    names, options = parsed
    return shared.wait_command(names, options.get("timeout"), options.get("spool") or global_spool,
                               as_json=options.get("as_json", False))
