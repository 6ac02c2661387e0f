"""Shell completion: which shell a user means, its script, and installing it.

Typer writes the scripts and answers the shells' completion requests
(``_ONITE_COMPLETE=complete_bash onite``); this module decides which shell
``--show-completion [SHELL]`` and ``--install-completion [SHELL]`` are for:
the one named, else the shell onite was started from (shellingham reads the
process tree), else the login shell ($SHELL). A shell onite cannot complete
(sh, dash, ksh, or none found) is an InvalidInput that names the shells it
can and how to name one, never typer's "Shell None is not supported".
"""

from __future__ import annotations

import os
from pathlib import Path

from onite.core.errors import InvalidInput, OniteError

SHELLS = ("bash", "zsh", "fish")
PROG = "onite"
COMPLETE_VAR = "_ONITE_COMPLETE"  # what the scripts set to ask onite for completions
ACTIONS = ("--show-completion", "--install-completion")  # onite's own options, whose SHELL may be left out


class CompletionIOError(OniteError):
    """A start-up file or completion script could not be written."""


def detect_shell(environ) -> str | None:
    """The name of the shell the user types into: the nearest shell among onite's parent processes,
    else the basename of $SHELL; None if neither is known."""
    try:
        import shellingham

        name, _ = shellingham.detect_shell()
        if name:
            return name.lower()
    except Exception:  # noqa: BLE001 - ShellDetectionFailure, or a /proc it cannot read: try $SHELL
        pass
    login = os.path.basename(environ.get("SHELL") or "")
    return login.lower() or None


def choose_shell(named: str | None, environ, *, action: str) -> str:
    """The shell ``named``, or the detected one, if onite completes it.

    Raises:
        InvalidInput: the named or detected shell is not one of SHELLS, or none was found.
    """
    how = f"onite {action} {SHELLS[0]}"
    if named:
        shell = named.strip().lower()
        if shell not in SHELLS:
            raise InvalidInput(f"onite cannot complete the shell {named!r}: it completes {_spelled()}",
                               f"name one of them, e.g. {how}")
        return shell
    shell = detect_shell(environ)
    if shell is None:
        raise InvalidInput(f"cannot tell which shell you use; onite completes {_spelled()}",
                           f"name yours, e.g. {how}")
    if shell not in SHELLS:
        from onite.core.safetext import printable

        raise InvalidInput(f"your shell is {printable(shell)}, which onite cannot complete; it completes {_spelled()}",
                           f"name one of them, e.g. {how}")
    return shell


def _spelled() -> str:
    return ", ".join(SHELLS[:-1]) + " and " + SHELLS[-1]


def act(option: str, shell: str | None) -> None:
    """``--show-completion [SHELL]``: print the script; ``--install-completion [SHELL]``: install it.

    Raises:
        InvalidInput: as choose_shell.
        CompletionIOError: as install.
    """
    chosen = choose_shell(shell, os.environ, action=option)
    if option == "--show-completion":
        print(script(chosen))
    else:
        print(f"{chosen} completion installed in {install(chosen)}; it works in shells started from now on")


def script(shell: str) -> str:
    """The completion script of ``shell`` (one of SHELLS), as ``--show-completion`` prints it."""
    from typer.completion import get_completion_script

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell)


def install(shell: str) -> Path:
    """Install the completion of ``shell`` (one of SHELLS) for the calling user; the script's path.

    Raises:
        CompletionIOError: a start-up file or the script could not be written.
    """
    from typer.completion import install as typer_install

    try:
        _, path = typer_install(shell=shell, prog_name=PROG, complete_var=COMPLETE_VAR)
    except OSError as err:
        where = getattr(err, "filename", None) or "your home directory"
        raise CompletionIOError(f"cannot install {shell} completion: {where}: {err.strerror or err}",
                                f"print the script instead: onite --show-completion {shell}") from None
    return path
