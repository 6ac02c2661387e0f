"""Result records ``jobsdone/NAME@result``: the JSON record of each finished job (onite.core.state.Result).

Written by the driver (and by ``onite cancel`` where the caller may file),
replaced atomically, world-readable. Read back by root and by every user, so
a record torn by a crash or damaged on disk is DamagedRecord, never a
traceback; the commands that list records leave such ones out and name them
(``damaged_note``).
"""

from __future__ import annotations

import os

from onite.core.clock import ctime_ns_upto
from onite.core.errors import DamagedRecord, SpoolIOError
from onite.core.names import is_valid_name
from onite.core.state import Result
from onite.core.values import loads_object
from onite.spool.files import replace_file
from onite.spool.paths import RESULT, SpoolDir


def read_result(spool: SpoolDir, name: str) -> Result | None:
    """The result record of the latest finished run of ``name``, or None if there is none.

    Raises:
        DamagedRecord: there is one, but it cannot be read back (torn by a power cut, damaged,
            or the record of another name).
        SpoolIOError: it cannot be read.
    """
    path = spool.result_path(name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    try:
        fields = loads_object(data)
    except ValueError as err:  # also bytes that are not UTF-8
        raise DamagedRecord(f"damaged result record {path}: {str(err)[:200]}",
                            "remove it, or restore it from a backup") from None
    try:
        result = Result.from_json(fields)
    except DamagedRecord as err:
        err.what = err.what.replace("damaged result record", f"damaged result record {path}", 1)
        raise
    if result.name != name:
        raise DamagedRecord(f"damaged result record {path}: it is the record of {result.name!r}",
                            "remove it, or restore it from a backup")
    return result


def result_names(spool: SpoolDir) -> list[str]:
    """The names of the jobs whose result record is kept (jobsdone/NAME@result), unread; a file whose
    name is not a job's plus ``@result`` is no job's record and is left out."""
    try:
        with os.scandir(spool.done_dir) as it:
            return [name for name in (entry.name[: -len(RESULT)] for entry in it if entry.name.endswith(RESULT))
                    if is_valid_name(name)]
    except FileNotFoundError:
        return []


def read_results(spool: SpoolDir, damaged: list[str] | None = None) -> list[Result]:
    """Every kept result record that can be read, oldest finish first. The names of those that
    cannot (DamagedRecord) are added to ``damaged``, if given, for the caller to report.

    Raises:
        SpoolIOError: a record cannot be read.
    """
    records = []
    for name in result_names(spool):
        try:
            record = read_result(spool, name)
        except DamagedRecord:
            if damaged is not None:
                damaged.append(name)
            continue
        if record is not None:
            records.append(record)
    records.sort(key=lambda r: (r.finished, r.name))
    return records


def damaged_note(damaged: list[str]) -> str:
    """The warning a command prints (on stderr) when it left out the damaged result records ``damaged``."""
    names = ", ".join(f"jobsdone/{name}{RESULT}" for name in sorted(damaged)[:5])
    more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
    return (f"onite: warning: {len(damaged)} damaged result record(s) left out: {names}{more} — "
            "the spool's administrator can look at them and remove them")


def result_record(result: Result) -> bytes:
    """The bytes of ``jobsdone/NAME@result`` for ``result`` (also what a notify hook reads on stdin)."""
    from onite.core.jsontext import dumps

    return (dumps(result.to_json()) + "\n").encode()


def kept_owner(spool: SpoolDir, name: str) -> tuple[int, int] | None:
    """Whose job's result of ``name`` is kept (its uid), and when that job got its place in the
    queue, as the latest ctime in ns it stands for (else when it started, or finished, where the
    record does not say); None if none is kept (or it is damaged).

    Raises:
        SpoolIOError: it cannot be read.
    """
    try:
        previous = read_result(spool, name)
    except DamagedRecord:
        return None  # it says nothing anyone can rely on
    if previous is None:
        return None
    return previous.uid, ctime_ns_upto(previous.queued or previous.started or previous.finished)


def may_replace_result(spool: SpoolDir, name: str, uid: int) -> bool:
    """May a record about a job of ``uid`` that never ran (refused, withdrawn) replace the kept
    result of ``name``? Not another user's: a file anyone can drop in the spool must not turn
    someone else's finished job into a failed or cancelled one (and fail what waits for it)."""
    try:
        kept = kept_owner(spool, name)
    except SpoolIOError:
        return False
    return kept is None or kept[0] == uid


def write_result(spool: SpoolDir, result: Result) -> None:
    """Write (or replace) ``jobsdone/NAME@result``, atomically.

    Raises:
        SpoolIOError: it cannot be written.
    """
    from onite.spool.retention import remember_owner

    st = replace_file(spool.result_path(result.name), result_record(result), mode=0o644)
    remember_owner(result.name, st, result.uid)  # retention need not read back what was just written
