"""``onite`` and ``python -m onite``: the one place where an OniteError becomes one line on stderr, ``onite: <what
is wrong> — <what to do>``, and an exit code; anything else that escapes is a bug and keeps its traceback."""

from __future__ import annotations

import errno  # all but signal, which main sets first thing, are loaded with the interpreter
import io
import os
import signal
import sys
import time


class Interrupted(BaseException):
    """SIGINT, raised where onite's code is (typer and click would take a KeyboardInterrupt for theirs)."""


class OutputFailure(OSError):
    """Standard output could not be written: a full disk, a quota, a failing device under it."""


def _interrupt(signum, frame) -> None:
    raise Interrupted


def main(argv: list[str] | None = None) -> int:
    previous = signal.getsignal(signal.SIGINT)
    try:  # an interrupt anywhere in onite's own code, its imports included, is one line and 130
        signal.signal(signal.SIGINT, _interrupt)  # inside: the first interrupt may come as it is set
        if argv is None:
            _fill_closed_streams()
            _watch_stdout()
        code = _exit_code(_dispatch, sys.argv[1:] if argv is None else list(argv))
        # what is still buffered goes now: a failure to write it is said here, not lost in Python's exit
        flushed = _exit_code(_flush)
        return code or flushed  # the command's own failure, if it had one, stands
    except (Interrupted, KeyboardInterrupt):
        return _interrupted()
    finally:
        if signal.getsignal(signal.SIGINT) is _interrupt:
            signal.signal(signal.SIGINT, previous)


def _interrupted() -> int:
    """One line, nothing imported, no second interrupt: the exit code of an interrupted command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _say("onite: interrupted", spelt=False)
    return 130


def _flush() -> None:
    try:
        sys.stdout.flush()
    except ValueError:  # closed: nothing left to write
        pass


def _exit_code(step, *args) -> int:
    """What ``step`` returns (0 for None), or the exit code of what it raised, said in one line."""
    from onite.core.errors import EXIT_FAILURE, EXIT_USAGE, OniteError

    try:
        return step(*args) or 0
    except OniteError as err:
        _say(f"onite: {err}")
        return err.exit_code
    except (Interrupted, KeyboardInterrupt):
        return _interrupted()
    except BrokenPipeError as err:
        return _reader_gone(err)
    except OutputFailure as err:  # told from a full disk under the spool by where it happened, never by its errno
        _quiet_stdout()
        notes = "".join(f"; {note}" for note in getattr(err, "__notes__", ()))  # what the lost output said
        hint = {errno.EIO: "check the device it goes to",
                errno.EFBIG: "it is larger than your file-size limit: raise it (ulimit -f)"}.get(
                    err.errno, "free some space where it goes")
        _say(f"onite: cannot write its output: {err.strerror or err}{notes} — {hint} (or send it elsewhere)")
        return EXIT_FAILURE
    except SystemExit as exit_:
        cause = exit_.__context__  # click turns a broken pipe into exit 1: it is the reader's choice, as above
        if isinstance(cause, OSError) and cause.errno == errno.EPIPE:
            return _reader_gone(cause)
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)


def _reader_gone(err: OSError) -> int:
    """Standard output's reader went away (onite list | head): its choice, not a failure; 0."""
    _quiet_stdout()
    for note in getattr(err, "__notes__", ()):  # what it did not hear: a submit's job is spooled all the same
        _say(f"onite: its output's reader went away before it read: {note}")
    return 0


def _dispatch(args: list[str]) -> int | None:
    if abs(time.localtime().tm_gmtoff) >= 86_400:  # TZ=UTC+24 is valid to the C library, not to datetime
        from onite.core.errors import InvalidInput

        raise InvalidInput(f"the time zone TZ={os.environ.get('TZ', '')!r} puts local time 24 hours or more from "
                           "UTC, which onite cannot use", "set TZ to a zone such as UTC or Europe/Paris")
    from onite.cli.options import COMPLETE_VAR

    completing = bool(os.environ.get(COMPLETE_VAR))
    if not completing:  # the everyday command lines need no typer (onite.cli.fastpath)
        from onite.cli.fastpath import parse

        parsed = parse(args)
        if parsed is not None:
            func, kwargs = parsed
            return func(**kwargs)
    import typer

    from onite.cli.typerapp import ACTIONS, command_for, complete_shell

    command = command_for(args, everything=completing)
    if completing:  # a shell asks for completions: typer answers, once its shells are known
        from typer.completion import completion_init

        completion_init()
    try:
        result = command.main(args=args, prog_name="onite", standalone_mode=False)
    except typer.Exit as exit_:
        return exit_.exit_code
    except typer.Abort:
        _say("onite: aborted — nothing was changed")
        return 1
    except typer.TyperException as err:  # usage errors from the parser
        sub, group = [], command  # the (sub)command the mistake is in: its --help explains it
        for arg in args:
            if arg in getattr(group, "commands", {}):
                sub.append(arg)
                group = group.commands[arg]
        option = getattr(err, "option_name", None)
        if option in ACTIONS and not sub:  # `onite --show-completion` with no SHELL (typer's options need a value)
            complete_shell(option, None)  # the shell in use
            return 0
        _say(f"onite: {_usage_message(err, args)} — see: onite {''.join(s + ' ' for s in sub)}--help")
        return getattr(err, "exit_code", 2)
    return result  # a command returns its exit code, None for 0 (_exit_code)


def _usage_message(err, args: list[str]) -> str:
    """The parser's message; a number option given something else, or a number out of its range, is said as every
    bad value is (onite.core.errors.bad_value), not in click's words (``'1.5' is not a valid int.``, ``101 is not
    in the range 0<=x<=100.``)."""
    param, message = getattr(err, "param", None), getattr(err, "message", "")
    typed, not_valid, _ = message.rpartition(" is not a valid int")
    number, out_of_range, _ = message.partition(" is not in the range ")
    if not getattr(param, "opts", None) or not (not_valid or out_of_range):
        return err.format_message()
    import ast

    from onite.core.errors import bad_value

    try:
        value = ast.literal_eval(typed) if not_valid else number  # click quotes what was typed with repr()
    except (ValueError, SyntaxError):
        return err.format_message()
    low, high = getattr(param.type, "min", None), getattr(param.type, "max", None)
    expected = "a whole number" + (f" from {low} to {high}" if low is not None and high is not None else "")
    option = next((opt for opt in param.opts if any(arg == opt or arg.startswith(opt + "=") for arg in args)),
                  param.opts[-1])  # as typed
    return bad_value(option, value, expected).what


class _StdoutFile(io.FileIO):
    """Standard output's file descriptor, whose failed writes say they are output failures."""

    def write(self, data):
        try:
            return super().write(data)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise OutputFailure(err.errno, err.strerror) from None


def _fill_closed_streams() -> None:
    """Standard output or error closed (``>&-``), which Python gives as None: what onite would say there is
    dropped, and its descriptor becomes /dev/null, so that no file onite opens takes its number."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w", closefd=False))


def _watch_stdout() -> None:
    """Have a failed write to standard output raise OutputFailure; a reader gone (EPIPE) stays a BrokenPipeError.
    A character the encoding cannot hold (PYTHONIOENCODING=ascii, the report's box drawing) is written escaped."""
    stream = sys.stdout
    try:
        raw = _StdoutFile(stream.fileno(), "w", closefd=False)
    except (AttributeError, ValueError, OSError):  # no stdout, or not a file descriptor: left as it is
        return
    errors = {"strict": "backslashreplace", "surrogateescape": _KEEP_BYTES}.get(stream.errors, stream.errors)
    if errors == _KEEP_BYTES:  # the C locale's ASCII (PYTHONUTF8=0): a path's bytes as they are, a '—' escaped
        import codecs

        codecs.register_error(_KEEP_BYTES, _keep_bytes_escape_the_rest)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=stream.encoding, errors=errors,
                                  line_buffering=stream.line_buffering, write_through=stream.write_through)


_KEEP_BYTES = "onite-surrogateescape-or-backslashreplace"


def _keep_bytes_escape_the_rest(err: UnicodeError) -> tuple[str | bytes, int]:
    """An encoding error handler: a byte that surrogateescape smuggled in is written as it was, any other
    character the encoding cannot hold is escaped (``\\u2014``)."""
    char = err.object[err.start]
    if isinstance(err, UnicodeEncodeError) and 0xDC80 <= ord(char) <= 0xDCFF:
        return bytes([ord(char) - 0xDC00]), err.start + 1
    return char.encode("ascii", "backslashreplace").decode("ascii"), err.start + 1


def _say(line: str, *, spelt: bool = True) -> None:
    """A line on stderr; ``spelt``: its control characters spelt out (it may quote what a user chose)."""
    if spelt:
        from onite.core.safetext import printable

        line = printable(line)
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _quiet_stdout() -> None:
    """No traceback, no second error at exit, once standard output cannot be written."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
