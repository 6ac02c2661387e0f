"""The everyday command lines parsed without typer (whose import is most of a short command's time), from each
command's own Opt and Arg declarations, as typer reads them (tests/test_fastpath.py holds it to typer).

It takes only what it can parse for certain: ``--spool DIR`` before the command, long options (``--opt VALUE``,
``--opt=VALUE``), short ones standing alone (``-p 3``), flags, arguments, and submit's ``-- COMMAND``. Anything
else (help, an unknown or clustered option, a doubtful value, an option given twice, a group's command) is left to
typer: this parser never says a command line is wrong, so the two cannot disagree on an error."""

import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Union, get_args, get_origin

from onite.cli.options import Arg, Opt, set_parsed, top_command

UNDERSTOOD = {"metavar", "help", "min", "max", "show_default", "autocompletion"}  # settings that change no parse
_MISSING = object()


def parse(args: list[str]) -> tuple[Callable, dict] | None:
    """(the command's function, its keyword arguments) for ``args``, or None: typer's to parse."""
    spool, at = None, 0
    while at < len(args) and args[at].startswith("-"):  # onite's own options: --spool only
        if spool is not None or args[at] != "--spool" or at + 1 == len(args) or args[at + 1].startswith("-"):
            return None
        spool, at = args[at + 1], at + 2
    command = top_command(args[at]) if at < len(args) else None
    if command is None:
        return None
    rest, words = args[at + 1:], None
    if command.after_dashes and "--" in rest:
        cut = rest.index("--")
        rest, words = rest[:cut], rest[cut + 1:]
    kwargs = parse_parameters(command, rest)
    if kwargs is None:
        return None
    set_parsed(spool=spool, command=words)
    return command, kwargs


def parse_parameters(func: Callable, args: list[str]) -> dict | None:
    """``func``'s keyword arguments from its command line ``args``, or None where typer must decide."""
    declared = _declarations(func)
    if declared is None:
        return None
    options, arguments, defaults = declared
    values: dict = {}
    positional: list[str] = []
    words = iter(args)
    for word in words:
        if word.startswith("-") and word != "-" and not _is_option(word):
            return None  # `-- NAME`, `-qa`, `-p3`: typer's
        if not _is_option(word):
            positional.append(word)
            continue
        option, has_value, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if option not in options:
            return None
        name, kind, flag_value, settings = options[option]
        if kind == "flag":
            if has_value:
                return None
            values[name] = flag_value
            continue
        if not has_value:
            value = next(words, None)
            if value is None or value.startswith("-"):
                return None
        if kind == "list":
            values.setdefault(name, []).append(value)
            continue
        if name in values:
            return None  # given twice: typer's rule
        value = _converted(value, kind, settings)
        if value is _MISSING:
            return None
        values[name] = value
    if not _place(arguments, positional, values):
        return None
    for name, default in defaults.items():
        if name not in values:
            if default is _MISSING:
                return None  # a required option not given
            values[name] = default
    return values


def _is_option(word: str) -> bool:
    """An option's word as this parser takes it: ``--name[=value]`` or ``-x``."""
    return word.startswith("--") and len(word) > 2 or len(word) == 2 and word[0] == "-" and word[1] != "-"


def _place(arguments: list[tuple[str, str, object]], positional: list[str], values: dict) -> bool:
    """Give the arguments their words in order, a list taking what is left; False: typer's to judge."""
    for index, (name, kind, default) in enumerate(arguments):
        if kind == "list":
            if index != len(arguments) - 1 or (not positional and default is _MISSING):
                return False
            values[name] = positional[:] if positional else default
            positional = []
        elif positional:
            values[name] = positional.pop(0)
        elif default is _MISSING:
            return False
        else:
            values[name] = default
    return not positional


def _converted(value: str, kind: str, settings: dict):
    if kind != "int":
        return value if kind == "str" else Path(value)
    try:
        number = int(value)  # what click's INT takes: ' 3', '+3', '1_000'
    except ValueError:
        return _MISSING
    low, high = settings.get("min"), settings.get("max")
    return _MISSING if (low is not None and number < low) or (high is not None and number > high) else number


def _declarations(func: Callable):
    """(option word -> (parameter, kind, flag value, settings), arguments in order, every parameter's default);
    None when a parameter is of a kind this parser leaves to typer."""
    code = func.__code__
    names = code.co_varnames[:code.co_argcount]
    defaults = dict(zip(names[len(names) - len(func.__defaults__ or ()):], func.__defaults__ or ()))
    options, arguments, every = {}, [], {}
    for name in names:
        declared, kind = _declared(func.__annotations__.get(name))
        if declared is None or kind is None or not UNDERSTOOD.issuperset(declared.settings):
            return None
        default = defaults.get(name, _MISSING)
        every[name] = default
        if isinstance(declared, Arg):
            arguments.append((name, kind, default))
            continue
        for decl in declared.decls or (f"--{name.replace('_', '-')}",):
            on, _, off = decl.partition("/")
            options[on.strip()] = (name, kind, True, declared.settings)
            if off:
                options[off.strip()] = (name, kind, False, declared.settings)
    return options, arguments, every


def _declared(annotation) -> tuple[Opt | None, str | None]:
    """An annotation's Opt or Arg, and the kind of value it takes: flag, str, int, path or list (of str)."""
    if get_origin(annotation) is not Annotated:
        return None, None
    base, *extras = get_args(annotation)
    declared = [extra for extra in extras if isinstance(extra, Opt)]
    if get_origin(base) in (Union, types.UnionType):  # Optional[X]
        others = [arg for arg in get_args(base) if arg is not type(None)]
        base = others[0] if len(others) == 1 else None
    if get_origin(base) is list:
        kind = "list" if get_args(base) == (str,) else None
    else:
        kind = {bool: "flag", int: "int", str: "str", Path: "path"}.get(base)
    return (declared[0] if len(declared) == 1 else None), kind
