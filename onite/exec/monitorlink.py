"""The driver's end of a job's monitor: what it says on its pipe, and whether it is done with the run.

The monitor (onite.exec.monitor) writes ``started PID``, ``exited``, ``ended STATUS`` or
``failed REASON`` lines on a pipe; the driver reads them without blocking
(``messages``). A monitor of the spawner's (onite.exec.spawner) serves one
run after another, and the driver does not learn its pid: it is done with a
run when it closes that run's pipe. A monitor the driver forked is done when
it exits (its pidfd wakes the driver's poll); one adopted from a dead driver
(not its child, and without a pipe) is watched by its pidfd or a signal 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(eq=False)
class MonitorLink:
    """The driver's end of one job's monitor (onite.exec.monitor): its process, its pidfd, its pipe."""

    pid: int | None  # None: a spawner's monitor, done with this run at its pipe's end (it may serve others)
    pidfd: int | None  # readable once it exits
    pipe: int | None  # what it tells the driver (None: adopted from a dead driver, no pipe)
    child: bool  # our child (we reap it), or adopted from a dead driver
    buffer: bytes = b""
    exited: bool = False

    def close(self) -> None:
        for fd in (self.pidfd, self.pipe):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.pidfd = self.pipe = None

    def messages(self) -> list[str]:
        """The whole lines the monitor wrote since the last call."""
        self._fill()
        lines = self.buffer.split(b"\n")
        self.buffer = lines.pop()
        return [line.decode("utf-8", "replace") for line in lines]

    def _fill(self) -> None:
        """Read what the pipe holds into the buffer; close it at its end."""
        if self.pipe is None:
            return
        data = b""
        while True:
            try:
                chunk = os.read(self.pipe, 4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:  # the monitor closed it: it is done with the run (or it exited)
                os.close(self.pipe)
                self.pipe = None
                break
            data += chunk
        self.buffer += data

    def is_done(self) -> bool:
        """Is the monitor done with this run: has it closed the run's pipe (a spawner's monitor, which
        may serve another), or exited? (A child of ours is reaped here.) What it wrote before is kept
        for ``messages``."""
        if self.exited:
            return True
        if self.pid is None:
            self._fill()
            if self.pipe is not None:
                return False
        elif self.child:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid = self.pid
            if pid == 0:
                return False
        elif self.pidfd is not None:
            import select

            if not select.select([self.pidfd], [], [], 0)[0]:
                return False
        else:
            try:
                os.kill(self.pid, 0)
                return False
            except ProcessLookupError:
                pass
            except PermissionError:
                return False
        self.exited = True
        self.close()
        return True


def parse_usage(text: str) -> dict | None:
    """The monitor's ``usage`` message to the driver: the JSON object ``usage`` made; None if damaged."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
