"""How one onite job becomes one ``sbatch`` call (pure: no processes, no files, no clock).

The environment goes in an export file and sbatch runs with an empty one (no SBATCH_* becomes an
option), as the job's owner, behind a ``cd`` done as the owner (Slurm would run a job whose
directory it cannot enter in /tmp). onite's own options come last, where they win.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from datetime import timedelta

from onite.core.config import SlurmConfig
from onite.core.names import job_label

MAX_ENV_STRING = 128 * 1024  # the kernel's MAX_ARG_STRLEN for one "NAME=value": past it slurmstepd fails late

CD_FAILED = 121  # the wrapper's exit status when the owner cannot enter the job's directory
CD_GONE = 122  # ... when it does not exist: a directory above it the owner may enter lacks the path below
# sh's cd tells no errno: the wrapper walks up from the directory to the first one that exists (as the
# owner sees it); if the owner may enter the one above the first missing name, that name is gone
_CD_WRAPPER = ('cd -- "$1" 2>/dev/null || { p=$1; while [ ! -e "$p" ]; do q=${p%%/*}; '
               'cd -- "${q:-/}" 2>/dev/null && exit %d; [ -n "$q" ] || break; p=$q; done; exit %d; }; '
               'shift; exec "$@"' % (CD_GONE, CD_FAILED))


def script_text(body: bytes, shell: str) -> bytes:
    """The job text, behind ``#!SHELL`` when it names no interpreter (sbatch refuses a script without one)."""
    return body if body.startswith(b"#!") else b"#!" + os.fsencode(shell) + b"\n" + body


def time_limit_minutes(timeout: timedelta) -> int:
    """Slurm's time limit for ``timeout``: whole minutes, rounded up, at least one."""
    return max(1, math.ceil(timeout.total_seconds() / 60))


def nice_for(priority: int, urgent: bool, step: int) -> int:
    """``--nice`` for an onite priority: users may not go below 0, so P1 and urgent get 0 (``step``: docs/slurm.md)."""
    return 0 if urgent else (priority - 1) * step


def export_file(env: dict[bytes, bytes]) -> bytes:
    """NAME=value records, each ended by NUL."""
    return b"".join(name + b"=" + value + b"\0" for name, value in env.items())


def oversized_variable(env: dict[bytes, bytes]) -> str | None:
    """The first variable too large to ever reach a program (see MAX_ENV_STRING), or None."""
    for name, value in env.items():
        if len(name) + len(value) + 2 > MAX_ENV_STRING:
            return f"{os.fsdecode(name)} ({len(value)} bytes)"
    return None


def output_pattern(path: bytes) -> bytes:
    """``path`` as an sbatch --output/--error pattern naming exactly it: % doubled, but in a path holding a
    backslash, which sbatch takes literally already."""
    return path if b"\\" in path else path.replace(b"%", b"%%")


# Short options of sbatch that take no argument: in "-vW" the W is an option of its own.
_FLAGS = set("hHkOQsuvV")
_ARRAY = "one onite job must be one Slurm job (no job arrays)"
_WAIT = "sbatch must return at once (onite polls the job)"
_HETJOB = "one onite job must be one Slurm job (no heterogeneous jobs)"
_TEST_ONLY = "sbatch must submit the job (with it, sbatch only says when Slurm would start it)"
_REFUSED = {"--array": _ARRAY, "-a": _ARRAY, "--wait": _WAIT, "-W": _WAIT, "hetjob": _HETJOB, "packjob": _HETJOB,
            "--test-only": _TEST_ONLY}
# sbatch also honours #PBS lines (unless --ignore-pbs): Torque's -t and PBS Pro's -J are its --array, and so are
# their long forms --array and --job_array (getopt_long again: --job_a=1-3 too); h, I, V, z take no argument there.
_PBS_FLAGS = set("hIVz")
_PBS_REFUSED = {"-t": _ARRAY, "-J": _ARRAY, "--array": _ARRAY, "--job_array": _ARRAY}
_SPACE = b" \t\n\v\f\r"  # C's isspace


def unsupported_directive(script: bytes) -> str | None:
    """Why an ``#SBATCH`` (or ``#PBS``) line of the script's header cannot run under onite, or None."""
    for raw in script.split(b"\n")[1:]:
        line = raw.strip()
        if not line:
            continue
        if not line.startswith(b"#"):
            break
        magic = next((m for m in (b"#SBATCH", b"#PBS") if line.startswith(m)), None)
        if magic is None:
            continue
        for word in _directive_words(line[len(magic):]):
            if magic == b"#PBS":
                what = _PBS_REFUSED.get(_option(word, _PBS_FLAGS, _PBS_REFUSED))
            else:  # sbatch takes the separator in any case: '#SBATCH HetJob' splits the job as 'hetjob' does
                what = _REFUSED.get(_option(word)) or (_HETJOB if word.lower() in ("hetjob", "packjob") else None)
            if what:
                return f"'{magic.decode()} {word}' is not supported: {what}"
    return None


def _directive_words(text: bytes) -> list[str]:
    """The words of a directive line as sbatch splits it (its _get_argument), not as a shell would: a backslash
    takes the next character literally but never joins two words, a quote holds spaces until its like, and a
    ``#`` neither quoted nor escaped ends the line."""
    words, word, quote, escaped = [], bytearray(), 0, False
    for c in text:
        if not quote and c in _SPACE:
            words.append(word)
            word, escaped = bytearray(), False
        elif escaped:
            escaped = False
            word.append(c)
        elif c == 0x5C:  # backslash
            escaped = True
        elif quote:
            if c == quote:
                quote = 0
            else:
                word.append(c)
        elif c in b"'\"":
            quote = c
        elif c == 0x23:  # '#': the rest is a comment
            break
        else:
            word.append(c)
    return [w.decode("utf-8", "replace") for w in (*words, word) if w]


def unsupported_args(args: tuple[str, ...]) -> str | None:
    """Why an option of [slurm] sbatch_args cannot be used (as the #SBATCH lines refused), or None."""
    for word in args:
        if what := _REFUSED.get(_option(word)):
            return f"{word!r} is not supported: {what}"
    return None


def _option(word: str, flags: set[str] = _FLAGS, refused: dict[str, str] = _REFUSED) -> str:
    """The option ``word`` gives (``--name``, or the first short one that is no flag: ``-vW`` → ``-W``); a long one
    cut short is the refused one it starts (getopt_long takes ``--arr=1-3`` for ``--array=1-3``)."""
    if word.startswith("--"):
        name = word.split("=", 1)[0]
        return next((full for full in refused if len(name) > 2 and full.startswith(name)), name)
    if word.startswith("-"):
        for letter in word[1:]:
            if letter not in flags or f"-{letter}" in refused:
                return f"-{letter}"  # the rest is this option's argument
    return word


def run_comment(run_id: str, spool: str) -> str:
    """``onite:RUN_ID:SPOOLTAG``, by which recovery finds a job a driver killed during sbatch never recorded
    (SPOOLTAG, a hash, tells spools apart without showing paths)."""
    return f"onite:{run_id}:{hashlib.sha256(os.fsencode(spool)).hexdigest()[:16]}"


def run_of_comment(comment: str, spool: str) -> str | None:
    """The run id in a comment made by run_comment for ``spool``, else None."""
    run_id = comment.strip().removeprefix("onite:").rpartition(":")[0]
    return run_id if run_id and comment.strip() == run_comment(run_id, spool) else None


def sbatch_argv(sbatch: str, *, name: str, cwd: bytes, output: bytes, env_fd: int,
                timeout: timedelta | None, priority: int, urgent: bool, slurm: SlurmConfig,
                error: bytes | None = None, comment: str | None = None, mem: int | None = None,
                cpus: int | None = None) -> list[bytes]:
    """The sbatch command line for one job (the script goes to its stdin)."""
    chosen = {"partition": slurm.partition, "account": slurm.account,
              "time": timeout is not None and time_limit_minutes(timeout),
              "mem": mem and f"{mem}M", "cpus-per-task": cpus}
    argv = [sbatch, *slurm.sbatch_args, *(f"--{option}={value}" for option, value in chosen.items() if value)]
    return [os.fsencode(arg) for arg in argv] + [
        b"--parsable",
        b"--no-requeue",  # a job that ran once must not run again behind onite's back (node failure)
        f"--job-name={job_label(name)}".encode(),
        b"--chdir=" + cwd,
        b"--output=" + output_pattern(output),
        *([b"--error=" + output_pattern(error)] if error is not None else []),
        b"--open-mode=append",  # onite created the file for its owner; a retry adds to it
        f"--export-file={env_fd}".encode(),
        f"--nice={nice_for(priority, urgent, slurm.nice_step)}".encode(),
        *([f"--comment={comment}".encode()] if comment else []),
    ]


def as_owner_in(cwd: bytes, argv: list[bytes]) -> list[bytes]:
    """``argv`` behind the wrapper that enters ``cwd`` first, as the owner."""
    return [b"/bin/sh", b"-c", _CD_WRAPPER.encode(), b"onite-sbatch", cwd, *argv]


def parse_job_id(stdout: bytes) -> str | None:
    """The job id from ``sbatch --parsable`` ("123" or "123;cluster"), or None."""
    lines = stdout.decode("ascii", "replace").strip().splitlines() or [""]
    job_id = lines[-1].split(";", 1)[0].strip()
    return job_id if job_id.isdigit() else None


SCRIPT_LIMIT = 4 * 1024 * 1024  # slurmctld's default max_script_size


# What sbatch says when it lost the controller (slurm_strerror's words), after it sent the job or before. Its
# owner may have it say anything, so these words only send the driver to ask Slurm itself (onite.exec.slurm).
_CUT = ("zero bytes were transmitted or received", "socket timed out on send/recv operation",
        "unable to contact slurm controller (send failure)", "unable to contact slurm controller (receive failure)",
        "unable to contact slurm controller (shutdown failure)", "slurmctld is not responding")
_UNSENT = ("unable to contact slurm controller (connect failure)", "connection refused", "communication connection failure")
CUT, UNSENT = "cut", "unsent"


def lost_controller(stderr: bytes) -> str | None:
    """CUT if sbatch says it lost the controller after sending the job, UNSENT if before, else None."""
    text = stderr.decode("utf-8", "replace").lower()
    return next((kind for kind, words in ((CUT, _CUT), (UNSENT, _UNSENT)) if any(w in text for w in words)), None)


def refusal(stderr: bytes, script_size: int = 0) -> str:
    """sbatch's complaint as one line (with the likely cause of a cryptic one)."""
    lines = [re.sub(r"^sbatch: (error: )?", "", line.strip()) for line in stderr.decode("utf-8", "replace").splitlines()]
    text = " ".join(line for line in lines if line)[:500] or "no message"
    if script_size > SCRIPT_LIMIT:
        text += (f" (the job text is {script_size} bytes; Slurm takes 4 MiB unless "
                 "SchedulerParameters=max_script_size allows more)")
    return text


def answer(code: int, stdout: bytes, stderr: bytes, *, script_size: int, cwd: bytes, owner: str) -> tuple[str | None, str]:
    """What an sbatch that ran as ``owner`` said: (its job id, ""), or (None, why it gave none)."""
    if code == CD_FAILED:
        return None, f"its directory {cwd.decode('utf-8', 'backslashreplace')} is not accessible to {owner}"
    if code == CD_GONE:
        return None, f"its directory {cwd.decode('utf-8', 'backslashreplace')} no longer exists"
    job_id = parse_job_id(stdout) if code == 0 else None
    if job_id is not None:
        return job_id, ""
    return None, f"sbatch did not accept it: {refusal(stderr, script_size)}"


UNREACHED = "the Slurm controller does not answer"  # an Unavailable's reason starts so
