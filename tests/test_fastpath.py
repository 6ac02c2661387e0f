"""onite.cli.fastpath parses the everyday command lines without typer: what it takes, it takes exactly as typer
does (the same function, arguments, --spool and submit's -- COMMAND), and what it leaves, typer decides."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onite.cli import fastpath, options
from onite.cli.options import every_command
from onite.cli.typerapp import command_for

COMMANDS = every_command()
TOP = sorted(name for group, name in COMMANDS if group is None)
VALUES = ["3", "0", "-1", "x", "", " 4", "+2", "1_0", "٣", "99999", "a=b", "b*", "-", "--", "--help", "-h",
          "--nosuch", "-qa", "-p3", "--spool", "/tmp/s", "--all=1", "--priority=2", "--timeout=10"]


def option_words(name: str) -> list[str]:
    declared = fastpath._declarations(COMMANDS[(None, name)])
    return sorted(declared[0]) if declared else []


def seen_after(parse, args: list[str]):
    """What a parser makes of ``args``: (function, keyword arguments, --spool before the command, -- COMMAND),
    or None where it takes nothing."""
    options.set_parsed(spool="unset", command="unset")
    parsed = parse(args)
    return None if parsed is None else (*parsed, options.spool_of(None), options.command_line())


def typer_parse(args: list[str]):
    """typer's reading of ``args``: the function it would run and with what; None for help or a usage error."""
    calls = []
    command = command_for(args, run=lambda func, kwargs: calls.append((func, kwargs)))
    try:
        command.main(args=args, prog_name="onite", standalone_mode=False)
    except (Exception, SystemExit):  # a usage error, --help's exit
        return None
    return calls[0] if calls else None


@pytest.mark.parametrize("args", [
    ["submit", "job"], ["submit", "job", "-p", "3", "--timeout", "2h", "--after", "a", "--after", "b"],
    ["submit", "job", "--lines", "-q"], ["submit", "job", "--stderr-merged", "--mem=4G", "--cpus", "2"],
    ["submit", "job", "--", "make", "-j8", "--", "x"], ["--spool", "/tmp/s", "list"], ["list", "--all", "--plain"],
    ["list", "-a", "--json", "--spool", "/tmp/s"], ["status"], ["status", "--json"], ["find", "job"],
    ["cancel"], ["cancel", "a", "b*", "-y"], ["cancel", "--all", "--yes"], ["output", "job", "-f", "--stderr"],
    ["wait"], ["wait", "a", "b", "--timeout", "10", "--json"], ["hold", "a", "b"], ["release", "a"],
    ["restart", "job", "--timeout", "2h", "-p", "1"], ["edit", "job", "--after", "x"], ["log", "-n", "5"],
    ["run", "--slots", "2", "-q"], ["uniqname", "base"], ["report", "--since", "12h"],
    ["report", "--html", "f.html", "--json"], ["init"]], ids=" ".join)
def test_the_everyday_command_lines_are_parsed_without_typer_as_typer_parses_them(capsys, args):
    fast = seen_after(fastpath.parse, args)
    assert fast is not None, "left to typer"
    expected = seen_after(typer_parse, args)
    assert fast == expected


@pytest.mark.parametrize("args", [
    [], ["--help"], ["-h"], ["list", "--help"], ["submit"], ["submit", "-p", "x", "job"], ["list", "--nosuch"],
    ["submit", "job", "-p", "0x3"], ["run", "--slots", "0"], ["list", "-ap"], ["--version"], ["recur", "list"],
    ["nosuchcommand"], ["find", "a", "b"], ["cancel", "--", "-x"], ["hold"],
    ["submit", "job", "-p", "1", "-p", "2"], ["log", "-n", "-1"], ["list", "--all=yes"]], ids=str)
def test_what_it_cannot_take_for_certain_it_leaves_to_typer(args):
    """Help, a group's command, a bad or doubtful value, an unknown or clustered option, a missing argument."""
    assert fastpath.parse(args) is None


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_whatever_it_takes_typer_takes_the_same_way(data):
    name = data.draw(st.sampled_from(TOP))
    words = st.sampled_from(option_words(name) + VALUES) | st.text(max_size=4)
    args = data.draw(st.lists(st.sampled_from([[], ["--spool", "/tmp/s"]]), max_size=1))
    args = [*(args[0] if args else []), name, *data.draw(st.lists(words, max_size=7))]
    fast = seen_after(fastpath.parse, args)
    if fast is not None:
        assert seen_after(typer_parse, args) == fast, args
