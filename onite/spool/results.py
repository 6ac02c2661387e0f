"""Result records ``jobsdone/NAME@result``, each finished job's (onite.core.state.Result): written by the
driver, replaced atomically, read by everyone; a damaged one is DamagedRecord, never a traceback, and
listings leave it out and name it (``damaged_note``).
"""

from __future__ import annotations

from onite.core.errors import DamagedRecord, SpoolIOError
from onite.core.names import is_valid_key
from onite.core.state import Result
from onite.core.values import loads_object
from onite.spool.files import replace_file
from onite.spool.paths import RESULT, SpoolDir
from onite.spool.scan import listing


def read_result(spool: SpoolDir, name: str) -> Result | None:
    """The result of the latest finished run of ``name``, or None.
    Raises DamagedRecord: torn, damaged, or another name's; SpoolIOError."""
    path = spool.result_path(name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    hint = "remove it, or restore it from a backup"
    try:
        result = Result.from_json(loads_object(data))
    except ValueError as err:  # also bytes that are not UTF-8
        raise DamagedRecord(f"damaged result record {path}: {str(err)[:200]}", hint) from None
    except DamagedRecord as err:
        err.what = err.what.replace("damaged result record", f"damaged result record {path}", 1)
        raise
    if result.name != name:
        raise DamagedRecord(f"damaged result record {path}: it is the record of {result.name!r}", hint)
    return result


def result_names(spool: SpoolDir) -> list[str]:
    """The names of the jobs whose result is kept, unread."""
    names = (entry.name[: -len(RESULT)] for entry in listing(spool.done_dir) if entry.name.endswith(RESULT))
    return [name for name in names if is_valid_key(name)]


def read_results(spool: SpoolDir, damaged: list[str] | None = None) -> list[Result]:
    """Every kept result that can be read, oldest finish first; the names of damaged ones go to ``damaged``.
    Raises SpoolIOError: a record cannot be read."""
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
    """The warning a command prints on stderr for the damaged records it left out."""
    names = ", ".join(f"jobsdone/{name}{RESULT}" for name in sorted(damaged)[:5])
    more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
    return (f"onite: warning: {len(damaged)} damaged result record(s) left out: {names}{more} — "
            "the spool's administrator can look at them and remove them")


def result_record(result: Result) -> bytes:
    """The bytes of ``jobsdone/NAME@result`` (also what a notify hook reads on stdin)."""
    import json

    return (json.dumps(result.to_json(), indent=1) + "\n").encode()


def write_result(spool: SpoolDir, result: Result) -> None:
    """Write (or replace) ``jobsdone/NAME@result``, atomically. Raises SpoolIOError."""
    replace_file(spool.result_path(result.name), result_record(result), mode=0o644)
