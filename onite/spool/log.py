"""The activity log, SPOOL/onite.log: append-only, one line per event.

    2026-11-22T20:00:01+01:00 vm[4711] start nightly-report user=alice priority=3 attempt=1

Each line is written with one write(2) on an O_APPEND descriptor, so lines
from concurrent writers on one machine never interleave. Only drivers (and
the spool's owner) write it; users read it with ``onite log``.

Job names, reasons and file names in a line come from users, so no value can
forge a line or reach a terminal: a value (or a name that is not a job name)
that holds a space, a quote, a backslash or a character that safetext spells
out is written in double quotes, with ``\\\\``, ``\\"``, ``\\n``, ``\\t``, ``\\r``,
``\\e``, ``\\xHH`` and ``\\uHHHH`` for those characters, and ``parse_line``
gives back exactly what was logged.
"""

from __future__ import annotations

import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import TextIO

from onite.core.clock import SYSTEM, Clock
from onite.core.names import is_valid_name
from onite.core.safetext import UNSAFE_CHARS

_NEEDS_QUOTES = re.compile(f'[\\s"\\\\{UNSAFE_CHARS}]')
_ESCAPED = re.compile(f'[\\\\"{UNSAFE_CHARS}]')
_SPELLED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}


def _spell(match: re.Match) -> str:
    ch = match.group()
    named = _SPELLED.get(ch)
    if named:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _quoted(text: str) -> str:
    """``text`` in double quotes, every character that could end the line, the value or the quote, or
    act on a terminal, escaped: what ``parse_line`` reads back as ``text``."""
    return '"' + _ESCAPED.sub(_spell, text) + '"'


def format_line(when: datetime, host: str, pid: int, event: str, name: str = "", /, **fields: object) -> str:
    """One line of the log, its newline included: whatever ``name`` and the fields hold, one line."""
    parts = [when.isoformat(timespec="seconds"), f"{host}[{pid}]", event]
    if name:
        parts.append(name if is_valid_name(name) else _quoted(name))  # a stray file's name, say
    for key, value in fields.items():
        if value is None or value == "":
            continue
        text = str(value)
        if _NEEDS_QUOTES.search(text):
            text = _quoted(text)
        parts.append(f"{key}={text}")
    return " ".join(parts) + "\n"


class ActivityLog:
    """Appends events to onite.log (and mirrors them to ``echo``, e.g. stderr under systemd).

    ``listener(when, event, name, fields)`` is told of every event as data, after
    it is logged: ``onite run``'s live progress on a terminal is drawn from it.
    """

    def __init__(self, path: Path, host: str, *, echo: TextIO | None = None, clock: Clock = SYSTEM,
                 listener=None) -> None:
        """``on_failure(why)``, if set later, is told each time a line cannot be written (a driver
        starts nothing more then)."""
        self.on_failure = None
        self.path = path
        self.host = host
        self.echo = echo
        self.clock = clock
        self.listener = listener
        self._fd: int | None = None
        self._said: set[int | None] = set()  # the errnos of the failures already said on stderr
        self.pid = os.getpid()

    def _open(self) -> int | None:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            except OSError as err:
                self._cannot_write(err)
                return None
        return self._fd

    def _cannot_write(self, err: OSError) -> None:
        """Tell ``on_failure``, and say on stderr once for each reason, that the log cannot be written
        (stderr may be on the same full disk, or under the same file-size limit)."""
        if self.on_failure is not None:
            self.on_failure(f"cannot write the log {self.path}: {err.strerror}")
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
                os.write(fd, line.encode("utf-8", "replace"))
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


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of the log, read from its end (the log may be large).

    Raises:
        SpoolIOError: it cannot be read (not a file, no permission, …).
    """
    import stat

    from onite.core.errors import SpoolIOError

    if lines <= 0:
        return []
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise IsADirectoryError(21, "not a regular file", str(path))
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            block, data = 8192, b""
            while size > 0 and data.count(b"\n") <= lines:
                step = min(block, size)
                size -= step
                handle.seek(size)
                data = handle.read(step) + data
                block *= 2
    except FileNotFoundError:
        return []
    except OSError as err:
        raise SpoolIOError(path, "reading", err) from None
    text = data.decode("utf-8", "replace").splitlines()
    return text[-lines:]


OUTCOMES = ("done", "failed", "cancelled")  # the events that say how a job's run ended (its user in user=)
OUTCOME_LOOKBACK = 8 << 20  # bytes of the log's end first read for them: what older logs said is not looked for
OUTCOMES_KEPT = 200_000  # (name, user) outcomes kept at most (8 MB of log holds about 50,000)


class Outcomes:
    """How the latest run of each (job name, user) ended, as the end of onite.log tells it: read once
    (its last OUTCOME_LOOKBACK bytes), then only what was appended since, at each question. A look
    that asks of 200 jobs reads the log once, and a driver reads each line it appends once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ino: int | None = None
        self._offset = 0
        self._last: dict[tuple[str, str], str] = {}

    def last(self, name: str, user: str) -> str | None:
        """"done", "failed" or "cancelled"; None if the log does not tell.

        Raises:
            SpoolIOError: the log cannot be read.
        """
        self._catch_up()
        return self._last.get((name, user))

    def _catch_up(self) -> None:
        import stat

        from onite.core.errors import SpoolIOError

        try:
            with open(self.path, "rb") as handle:
                st = os.fstat(handle.fileno())
                if not stat.S_ISREG(st.st_mode):
                    return
                if st.st_ino != self._ino or not 0 <= st.st_size - self._offset <= OUTCOME_LOOKBACK \
                        or len(self._last) > OUTCOMES_KEPT:
                    # a new log (rotated, truncated), much of it since the last look, or a daemon's months
                    # of names: start from its end again
                    self._ino, self._last = st.st_ino, {}
                    self._offset = max(0, st.st_size - OUTCOME_LOOKBACK)
                    cut = self._offset > 0  # the first line read may be cut: it is no line
                else:
                    cut = False
                handle.seek(self._offset)
                data = handle.read(st.st_size - self._offset)
        except FileNotFoundError:
            return
        except OSError as err:
            raise SpoolIOError(self.path, "reading", err) from None
        end = data.rfind(b"\n") + 1  # a line still being written is read once it is whole
        lines = data[:end].split(b"\n")
        self._offset += end
        for raw in lines[1 if cut else 0:]:
            event = raw.split(b" ", 3)[2:3]
            if event and event[0].decode("ascii", "replace") in OUTCOMES:
                line = parse_line(raw.decode("utf-8", "replace"))
                if line and line["name"] and "user" in line["fields"]:
                    self._last[(line["name"], line["fields"]["user"])] = line["event"]


def logged_final(path: Path, run_id: str) -> bool:
    """Does the log's end (its last OUTCOME_LOOKBACK bytes) hold how the run ``run_id`` ended (a
    ``done``, ``failed`` or ``cancelled`` line with its ``run=``)? False if it cannot be read."""
    mark = f" run={run_id}".encode()
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - OUTCOME_LOOKBACK))
            data = handle.read(OUTCOME_LOOKBACK)
    except OSError:
        return False
    for raw in data.split(b"\n"):
        if raw.endswith(mark) or mark + b" " in raw:
            event = raw.split(b" ", 3)[2:3]
            if event and event[0].decode("ascii", "replace") in OUTCOMES:
                return True
    return False


def last_outcome(path: Path, name: str, user: str) -> str | None:
    """How the latest run of ``user``'s job ``name`` ended, as the log's end tells it (``Outcomes``).

    Raises:
        SpoolIOError: the log cannot be read.
    """
    return Outcomes(path).last(name, user)


_TOKEN = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)=("(?:[^"\\]|\\.)*"|\S*)|("(?:[^"\\]|\\.)*")|(\S+)')
_UNQUOTE = {"n": "\n", "\\": "\\", '"': '"', "t": "\t", "r": "\r", "e": "\x1b"}
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.DOTALL)


def _unspell(match: re.Match) -> str:
    code = match.group(1)
    if len(code) > 1:  # xHH or uHHHH
        return chr(int(code[1:], 16))
    return _UNQUOTE.get(code, code)


def _unquoted(text: str) -> str:
    """What ``_quoted`` was given: ``text`` without its quotes, its escapes undone."""
    return _ESCAPE.sub(_unspell, text[1:-1])


def parse_line(line: str) -> dict | None:
    """A line of onite.log as data (``format_line`` read back); None for a line it did not write.
    Total: any text gives one or the other.

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


def log_json(lines: list[str]) -> str:
    """``onite log --json``: the lines as events (docs/json.md); a line onite did not write is kept as text."""
    from onite.core.jsontext import dumps as _dumps  # json.dumps(indent=1)'s text, at C speed

    events = [parse_line(line) or {"text": line} for line in lines]
    return _dumps({"version": 1, "events": events})
