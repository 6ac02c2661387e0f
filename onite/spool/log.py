"""The activity log, SPOOL/onite.log: append-only, one line per event.

    2026-11-22T20:00:01+01:00 vm[4711] start nightly-report user=alice priority=3 attempt=1

Each line is one write(2) on an O_APPEND descriptor, so concurrent writers' lines never interleave;
the half line of a write that ran out of room is truncated away, so that no later line is appended to
it. Values come from users, so one that holds a space, a quote, a backslash or a character safetext
spells out is quoted and escaped: no value can forge a line or reach a terminal, and ``parse_line``
gives back exactly what was logged.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TextIO

from onite.core.clock import SYSTEM, Clock
from onite.core.errors import SpoolIOError
from onite.core.names import is_valid_key
from onite.core.safetext import UNSAFE_CHARS

# compiled (and cached by re) at a process's first write, not at import: readers of the log never write
_NEEDS_QUOTES = f'[\\s"\\\\{UNSAFE_CHARS}]'
_ESCAPED = f'[\\\\"{UNSAFE_CHARS}]'
_SPELLED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}
_UNSPELLED = {spelled[1]: char for char, spelled in _SPELLED.items()}
_TOKEN = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)=("(?:[^"\\]|\\.)*"|\S*)|("(?:[^"\\]|\\.)*")|(\S+)')
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.DOTALL)
CANNOT_RECORD = "cannot record"  # driver-exit reason= of a drain stopped by a write it needed (a full disk)
OUTCOMES = (b"done", b"failed", b"cancelled")  # the events that say how a run ended (its user in user=)
OUTCOME_LOOKBACK = 8 << 20  # bytes of the log's end read for outcomes: older lines are not looked for


def _spell(match: re.Match) -> str:
    ch = match.group()
    code = ord(ch)
    return _SPELLED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def _quoted(text: str) -> str:
    return '"' + re.sub(_ESCAPED, _spell, text) + '"'


def _unquoted(text: str) -> str:
    def unspell(match: re.Match) -> str:
        code = match.group(1)
        return chr(int(code[1:], 16)) if len(code) > 1 else _UNSPELLED.get(code, code)

    return _ESCAPE.sub(unspell, text[1:-1])


_BYTE = re.compile(r"\\(\\|udc[89a-f][0-9a-f])")  # an escaped backslash, or a byte that is not UTF-8 (_spell)


def readable(line: str) -> str:
    """A line of the log as ``onite log`` shows it: a byte that is not UTF-8, logged as ``\\udcff`` (so that
    ``parse_line`` gives back that byte, not U+00FF), spelt ``\\xff`` as onite.core.safetext spells it."""
    if "\\" not in line:
        return line
    return _BYTE.sub(lambda m: m.group() if m.group(1) == "\\" else "\\x" + m.group(1)[3:], line)


def format_line(when: datetime, host: str, pid: int, event: str, name: str = "", /, **fields: object) -> str:
    """One line of the log, its newline included, whatever ``name`` and the fields hold."""
    parts = [when.isoformat(timespec="seconds"), f"{host}[{pid}]", event]
    if name:
        parts.append(name if is_valid_key(name) else _quoted(name))  # a stray file's name, say
    for key, value in fields.items():
        if value is None or value == "":
            continue
        text = str(value)
        parts.append(f"{key}={_quoted(text) if re.search(_NEEDS_QUOTES, text) else text}")
    return " ".join(parts) + "\n"


def parse_line(line: str) -> dict | None:
    """A line of onite.log as data, or None for a line ``format_line`` did not write; total.

    ``{"time": ISO, "host": str, "pid": int, "event": str, "name": str | None, "fields": {key: text}}``
    """
    head = line.rstrip("\n").split(" ", 3)
    if len(head) < 3 or not head[1].endswith("]") or "[" not in head[1]:
        return None
    host, _, pid = head[1][:-1].rpartition("[")
    try:
        datetime.fromisoformat(head[0])
        pid_number = int(pid)
    except ValueError:
        return None
    name, fields = None, {}
    for match in _TOKEN.finditer(head[3] if len(head) > 3 else ""):
        key, value, quoted, bare = match.groups()
        if key is None:
            if name is None and not fields:
                name = _unquoted(quoted) if quoted is not None else bare
            continue
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = _unquoted(value)
        fields[key] = value
    return {"time": head[0], "host": host, "pid": pid_number, "event": head[2], "name": name, "fields": fields}


class ActivityLog:
    """Appends events to onite.log, mirrored to ``echo`` (stderr under systemd); ``listener(when, event, name,
    fields)`` is told of each event once logged (``onite run``'s progress); ``on_failure(why)``, if set, of each
    line that cannot be written (a driver starts nothing more then)."""

    def __init__(self, path: Path, host: str, *, echo: TextIO | None = None, clock: Clock = SYSTEM,
                 listener=None) -> None:
        self.on_failure = None
        self.path = path
        self.host = host
        self.echo = echo
        self.clock = clock
        self.listener = listener
        self._fd: int | None = None
        self._cut = False  # the log ends in a half line: the next line starts with a newline
        self._said: set[int | None] = set()  # the errnos already said on stderr
        self.pid = os.getpid()

    def _open(self) -> int | None:
        if self._fd is None:
            flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                for last in (False, False, True):  # one moved away (logrotate) between the two opens: again
                    try:  # made here (first, or after a rotation): every user reads it, whatever our umask
                        self._fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                        os.fchmod(self._fd, 0o644)
                        break
                    except FileExistsError:  # as its admin left it
                        try:
                            self._fd = os.open(self.path, flags)
                            break
                        except FileNotFoundError:
                            if last:
                                raise
            except OSError as err:
                self._cannot_write(err)
            else:
                try:  # a writer killed with a half line written: the log ends without a newline
                    size = os.fstat(self._fd).st_size
                    self._cut = size > 0 and os.pread(self._fd, 1, size - 1) != b"\n"
                except OSError:
                    self._cut = False
        return self._fd

    def _write(self, fd: int, data: bytes) -> None:
        """Append ``data``, a whole line, or nothing. Raises OSError."""
        if self._cut:
            data = b"\n" + data
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])  # after a short write, the next says why (ENOSPC, EFBIG)
        except OSError:
            if written:
                self._cut = True  # unless the half line goes: then the next line starts with a newline
                try:
                    end = os.lseek(fd, 0, os.SEEK_CUR)  # where this process's last write ended
                    if os.fstat(fd).st_size == end:  # no other line came after it
                        os.ftruncate(fd, end - written)  # shrinking a file needs no room
                        self._cut = data[:1] == b"\n"
                except OSError:
                    pass
            raise
        self._cut = False

    def _cannot_write(self, err: OSError) -> None:
        """Tell ``on_failure``, else stderr, once a reason (stderr may be on the same full disk)."""
        if self.on_failure is not None:
            self.on_failure(f"cannot write the log {self.path}: {err.strerror}")
            return
        if err.errno in self._said:
            return
        self._said.add(err.errno)
        try:
            print(f"onite: cannot write the log {self.path}: {err.strerror}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def event(self, event: str, name: str = "", /, **fields: object) -> None:
        when = self.clock.now()
        line = format_line(when, self.host, self.pid, event, name, **fields)
        fd = self._open()
        if fd is not None:
            try:
                self._write(fd, line.encode("utf-8", "replace"))
            except OSError as err:
                self._cannot_write(err)
        if self.echo is not None:
            try:
                self.echo.write(line)
                self.echo.flush()
            except (OSError, ValueError):
                pass
        if self.listener is not None:
            self.listener(when, event, name, fields)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


LONGEST_LINE = 1 << 20  # what is kept of a line read back: onite writes none longer than a few KiB


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of the log. Raises SpoolIOError, as ``lines_back``."""
    return list(itertools.islice(lines_back(path), max(lines, 0)))[::-1]


def unreadable(path: Path) -> str | None:
    """``cannot read PATH: Permission denied`` if the log is there but this process may not read it, else None."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot read {path}: {err.strerror or err}"
    return None


def lines_back(path: Path) -> Iterator[str]:
    """The log's lines from its last to its first, read from its end a block at a time; none if it is missing.
    Raises SpoolIOError: it cannot be read (not a regular file, no permission, …)."""
    try:  # O_NONBLOCK: a FIFO put at its place is refused, not waited on
        handle = open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    except FileNotFoundError:
        return
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    with handle:
        try:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise IsADirectoryError(21, "not a regular file", str(path))
            # the line being read back is kept in pieces, its last first, and joined once whole; of a line
            # longer than LONGEST_LINE (a zeroed stretch a crash left) only its end is kept
            at, pieces, kept = handle.seek(0, os.SEEK_END), [], 0
            while at > 0:
                step = min(1 << 16, at)
                at -= step
                handle.seek(at)
                block = handle.read(step)
                lines = block.split(b"\n")
                if len(lines) == 1:  # no line ends here
                    if kept < LONGEST_LINE:
                        pieces.append(block)
                        kept += len(block)
                    continue
                pieces.append(lines[-1])
                for raw in [b"".join(reversed(pieces)), *reversed(lines[1:-1])]:
                    if raw:
                        yield raw.decode("utf-8", "replace")
                pieces, kept = [lines[0]], len(lines[0])  # it may begin in the block before
        except OSError as err:
            raise SpoolIOError(path, "reading", err) from None
        if rest := b"".join(reversed(pieces)):
            yield rest.decode("utf-8", "replace")


def _is_outcome(raw: bytes) -> bool:
    event = raw.split(b" ", 3)[2:3]
    return bool(event) and event[0] in OUTCOMES


def logged_final(path: Path, run_id: str) -> bool:
    """Does the log's end say how the run ``run_id`` ended? False if it cannot be read."""
    mark = f" run={run_id}".encode()
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - OUTCOME_LOOKBACK))
            data = handle.read(OUTCOME_LOOKBACK)
    except OSError:
        return False
    return any((raw.endswith(mark) or mark + b" " in raw) and _is_outcome(raw) for raw in data.split(b"\n"))


def log_json(lines: list[str]) -> str:
    """``onite log --json`` (docs/json.md); a line onite did not write is kept as text."""
    import json

    return json.dumps({"version": 1, "events": [parse_line(line) or {"text": line} for line in lines]}, indent=1)
