"""The activity log, SPOOL/onite.log: append-only, one line per event.

    2026-11-22T20:00:01+01:00 vm[4711] start nightly-report user=alice priority=3 attempt=1

Each line is written with one write(2) on an O_APPEND descriptor, so lines
from concurrent writers on one machine never interleave. Only drivers (and
the spool's owner) write it; users read it with ``onite log``.
"""

from __future__ import annotations

import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import TextIO


_NEEDS_QUOTES = re.compile(r'[\s"]')


def format_line(when: datetime, host: str, pid: int, event: str, name: str = "", /, **fields: object) -> str:
    parts = [when.isoformat(timespec="seconds"), f"{host}[{pid}]", event]
    if name:
        parts.append(name)
    for key, value in fields.items():
        if value is None or value == "":
            continue
        text = str(value)
        if not text or _NEEDS_QUOTES.search(text):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts) + "\n"


class ActivityLog:
    """Appends events to onite.log (and mirrors them to ``echo``, e.g. stderr under systemd).

    ``listener(when, event, name, fields)`` is told of every event as data, after
    it is logged: ``onite run``'s live progress on a terminal is drawn from it.
    """

    def __init__(self, path: Path, host: str, *, echo: TextIO | None = None,
                 clock=lambda: datetime.now().astimezone(), listener=None) -> None:
        self.path = path
        self.host = host
        self.echo = echo
        self.clock = clock
        self.listener = listener
        self._fd: int | None = None
        self.pid = os.getpid()

    def _open(self) -> int | None:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as err:
                print(f"onite: cannot write the log {self.path}: {err.strerror}", file=sys.stderr)
                return None
        return self._fd

    def event(self, event: str, name: str = "", /, **fields: object) -> None:
        when = self.clock()
        line = format_line(when, self.host, self.pid, event, name, **fields)
        fd = self._open()
        if fd is not None:
            try:
                os.write(fd, line.encode("utf-8", "replace"))
            except OSError as err:
                print(f"onite: cannot write the log {self.path}: {err.strerror}", file=sys.stderr)
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
    """The last ``lines`` lines of the log, read from its end (the log may be large)."""
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as handle:
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
    text = data.decode("utf-8", "replace").splitlines()
    return text[-lines:]
