"""The spawner: a small process that forks the jobs' monitors, so that the big driver never forks.

A fork copies the page tables of the process that forks, and every page
either side then writes is copied once more: the cost grows with the
driver's heap, and it is paid on both sides (docs/performance.md, the
per-job budget). So the local executor starts, with its first job, one
spawner: a fresh interpreter (``python -E -S``) that imports only the
monitor (onite.exec.monitor) and waits on a socket.

The spawner forks monitors; the driver talks to them directly. Each
monitor has a socket of its own, and the spawner gives the driver its end
(SCM_RIGHTS) and keeps none: one monitor at start, one more whenever the
driver asks (``MORE``: it has handed out its last waiting one, so one is
forked while the job runs, not on the path from one job's end to the next
job's start). A waiting monitor has left the driver's session, drops its
signals (``monitor.prepare``) and waits for a Plan. For each job the driver
sends the monitor's Plan and, with SCM_RIGHTS, the descriptors the Plan
names (the script, the output files, the run record, the driver's pipe, the
driver lock) straight to a waiting monitor; only when none waits does it go
to the spawner, which forks a monitor for it and gives it to the driver
busy (``BUSY``), or, if no process can be forked, says ``failed`` on the
run's pipe. Nothing is sent back: the driver goes on at once, and hears of
the run on its pipe, from the monitor. The monitor, not the spawner and not
the driver, is the job's parent, and it records the job's end as before:
what the driver's death leaves is what it left before (docs/internals.md,
"The monitor and recovery").

A monitor serves one run after another: once its job has ended, what the
job left is ended and every descriptor of the run is closed (the driver
hears the end of the run's pipe), it tells the driver, on its socket, that
it waits again (``IDLE``). Forking a process per job was most of a trivial
job's cost. A monitor whose job left something it could not end exits
instead, as does one whose driver's end is closed: after its driver died, a
monitor lives only until its run is over, as before.

A run can be made ready ahead (``prepare``): while every slot is busy, the
driver hands a waiting monitor the Plan of the job most likely to start next,
without its claim (``READY``: no run record, output file or lock yet; nothing
on disk changes), and the monitor makes its cgroups, sets the limits that come
before the fork and joins them (onite.exec.monitor.ready). When that job is
claimed, ``GO`` brings the claim's descriptors and the monitor goes on from
step 2 as any other; if another job is picked, the driver ends, or the job
changed, ``DROP`` (or the end of its socket) has it undo what it made and
wait again. So the start of the next job waits for none of that.

The spawner process's side is onite.exec.spawnserver.

Invariants: neither the spawner nor a waiting monitor holds a descriptor
of a job between two requests, in particular not the driver lock (a
monitor holds it, passed with its request, until its ``monitor`` line is
written, as when it was forked by the driver); a request is one datagram,
so a driver killed while sending it either sent it whole or not at all
(then its descriptors, the lock among them, are closed with the socket,
and the claim has no ``monitor`` line: recovery requeues it); the spawner
exits when the driver's end of its socket closes, and is killed if the
driver dies (PR_SET_PDEATHSIG). Where it cannot be started, or dies, the
driver forks the monitor itself, as before.
"""

from __future__ import annotations

import errno
import marshal
import os
import select
import socket
import subprocess
import sys
from dataclasses import fields, replace

from onite.exec import monitor

MAX_REQUEST = 1 << 20  # bytes of one request: a job's environment and command line
FD_FIELDS = ("script_fd", "stdout_fd", "stderr_fd", "record_fd", "notify_fd", "lock_fd")
PR_SET_PDEATHSIG = 1
IDLE = b"idle"  # a monitor to the driver: its run is over, it waits for the next; the spawner: a new one waits
BUSY = b"busy"  # the spawner to the driver: a monitor it forked for the driver's request, which it took
MORE = b"more"  # the driver to the spawner: fork one more monitor to wait for a request
RUN, READY, GO, DROP = "run", "ready", "go", "drop"  # the kinds of request a monitor takes (marshal tuples)
CLAIM_FIELDS = ("record_fd", "record_path", "stdout_fd", "stderr_fd", "notify_fd", "lock_fd")  # sent with GO
MONITOR_RUNS = 1000  # runs one monitor serves before it exits (a bound on what it may have leaked)
MAX_WAITING = 8  # monitors kept waiting beyond the busy ones
SEND_WAIT = 30.0  # seconds a request may wait for room in the socket (a stopped spawner must not hang the driver)
READY_UNDO_WAIT = 2.0  # seconds the driver, as it ends, waits for a monitor made ready to undo it


class SpawnerGone(OSError):
    """The spawner cannot be asked (it could not start, or it died): fork the monitor here."""


class Spawner:
    """The driver's end of one spawner process (started on the first ``spawn``), and the monitors
    it forked: those waiting for a Plan and those busy with a run."""

    def __init__(self, contained: bool = True) -> None:
        self.contained = contained  # monitors make themselves subreapers (onite.exec.contain)
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self.failed = False  # it could not be started or died: the caller forks monitors itself
        self._waiting: list[socket.socket] = []  # our end of each monitor's socket: monitors waiting
        self._busy: list[socket.socket] = []  # monitors busy with a run (they say IDLE when it is over)
        self._asked = False  # a monitor asked of the spawner (MORE) has not come yet
        self._ready: socket.socket | None = None  # a monitor made ready ahead for a run (``prepare``)

    def spawn(self, plan: monitor.Plan) -> None:
        """Hand ``plan`` to a waiting monitor, else have the spawner fork one for it. Nothing comes
        back: the run's pipe says the rest (what the monitor tells; ``failed`` if no monitor could
        be forked; its end when the monitor is done with the run), so the driver waits for no
        process between jobs.

        Raises:
            SpawnerGone: the request was not sent (the spawner cannot be started or asked, or the
                request is too large for one datagram): nothing was forked for it.
        """
        if self._sock is None:
            self._start()
        data, fds = encode(RUN, plan)
        self._collect()
        if self._sock is None:  # it died since the last request (its end of the socket closed)
            raise SpawnerGone(0, "the spawner is gone")
        while self._waiting:
            conn = self._waiting.pop()
            try:
                socket.send_fds(conn, [data], fds)  # one datagram: it has it whole, or not at all
            except OSError as err:
                if err.errno == errno.EMSGSIZE:  # this request only (a huge environment): nothing was sent
                    self._waiting.append(conn)
                    raise SpawnerGone(err.errno, "the request is larger than one datagram") from None
                conn.close()  # it died meanwhile: the next one, or the spawner's
                continue
            self._busy.append(conn)
            if not self._waiting:
                self._ask()  # one forked ahead, while this job runs, for the next
            return
        try:  # none waits: the spawner forks one for this request (and gives it to us, busy)
            socket.send_fds(self._sock, [data], fds)
        except OSError as err:
            if err.errno == errno.EMSGSIZE:
                raise SpawnerGone(err.errno, "the request is larger than one datagram") from None
            self._lost()
            raise SpawnerGone(err.errno, f"the spawner is gone: {err.strerror}") from None

    def prepare(self, plan: monitor.Plan) -> bool:
        """Hand a waiting monitor ``plan`` without its claim's descriptors (None in it), to make ready
        ahead (onite.exec.monitor.ready) while the job before it runs; ``go`` then starts it, ``drop``
        lets it go. False if no monitor waits (none is forked for this) or one is ready already.

        Raises:
            SpawnerGone: the spawner cannot be started.
        """
        if self._sock is None:
            self._start()
        self._collect()
        if self._ready is not None or not self._waiting:
            return False
        data, fds = encode(READY, plan)
        conn = self._waiting.pop()
        try:
            socket.send_fds(conn, [data], fds)
        except OSError:
            conn.close()  # it died meanwhile, or the request is too large: started the usual way
            return False
        self._ready = conn
        if not self._waiting:
            self._ask()
        return True

    def go(self, **claim) -> None:
        """Start the run made ready (``prepare``), with the descriptors of its claim (CLAIM_FIELDS, as
        keywords: the Plan's fields the ready one lacks).

        Raises:
            SpawnerGone: no monitor is ready, or it died (nothing was started: start it the usual way).
        """
        conn, self._ready = self._ready, None
        if conn is None:
            raise SpawnerGone(0, "no monitor is ready")
        values = {name: claim[name] for name in CLAIM_FIELDS}
        fds = [fd for name, fd in values.items() if name.endswith("_fd") and fd is not None]
        values = {name: fds.index(v) if name.endswith("_fd") and v is not None else v for name, v in values.items()}
        try:
            socket.send_fds(conn, [marshal.dumps((GO, values))], fds)  # one datagram: as spawn's
        except OSError as err:
            conn.close()
            raise SpawnerGone(err.errno, "the monitor made ready is gone") from None
        self._busy.append(conn)

    def drop(self) -> None:
        """Let the run made ready go unstarted: its monitor undoes what it made, and waits again."""
        conn, self._ready = self._ready, None
        if conn is None:
            return
        try:
            conn.send(marshal.dumps((DROP,)))
        except OSError:
            conn.close()
            return
        self._busy.append(conn)  # it says IDLE once its cgroups are gone

    @property
    def has_ready(self) -> bool:
        return self._ready is not None

    def _ask(self) -> None:
        """Ask the spawner for one more waiting monitor, unless one is on its way."""
        if self._asked or self._sock is None:
            return
        try:
            self._sock.send(MORE)
            self._asked = True
        except OSError:
            self._lost()  # the next request forks its monitor here

    def _collect(self) -> None:
        """Take the monitors the spawner sent (waiting, or busy with the request it forked them for),
        and move the busy ones whose run is over (IDLE) to the waiting ones; forget those that exited."""
        while self._sock is not None and select.select([self._sock], [], [], 0)[0]:
            try:
                word, fds, _, _ = socket.recv_fds(self._sock, 16, 1)
            except OSError:
                word, fds = b"", []
            if not word:
                self._lost()  # the spawner died: monitors are forked here from now on
                return
            for fd in fds:
                conn = socket.socket(fileno=fd)
                conn.set_inheritable(False)  # SCM_RIGHTS descriptors arrive inheritable
                (self._waiting if word == IDLE else self._busy).append(conn)
            if word == IDLE:
                self._asked = False
        still = []
        for conn in self._busy:
            try:
                word = conn.recv(16, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                still.append(conn)
                continue
            except OSError:
                word = b""
            if word == IDLE and len(self._waiting) < MAX_WAITING:
                self._waiting.append(conn)
            else:
                conn.close()  # it exited, or enough wait: closing its socket ends it
        self._busy = still

    def _start(self) -> None:
        """Start the spawner process: a fresh interpreter that imports the monitor and nothing else."""
        if self.failed:
            raise SpawnerGone(0, "the spawner could not be started")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        boot = f"import sys; sys.path.insert(0, {root!r}); from onite.exec.spawnserver import serve; serve({theirs.fileno()}, {self.contained!r})"
        try:
            self._proc = subprocess.Popen([sys.executable, "-E", "-S", "-c", boot], pass_fds=(theirs.fileno(),),
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as err:
            ours.close()
            self.failed = True
            raise SpawnerGone(err.errno, f"cannot start the spawner: {err.strerror}") from None
        finally:
            theirs.close()
        ours.settimeout(SEND_WAIT)  # a spawner stopped with SIGSTOP fills the socket: then it is given up
        self._sock = ours
        self._asked = True  # it forks one monitor ahead of the first request

    def _lost(self) -> None:
        self.failed = True
        self.close()

    def close(self) -> None:
        """Let the spawner and the monitors go: the spawner exits when its socket closes, a waiting
        monitor at once, a busy one once its run is over."""
        if self._ready is not None:  # it removes the cgroups it made before the driver removes their folder
            ready = self._ready
            self.drop()
            if select.select([ready], [], [], READY_UNDO_WAIT)[0]:
                try:
                    ready.recv(16, socket.MSG_DONTWAIT)
                except OSError:
                    pass
        for conn in self._waiting + self._busy:
            conn.close()
        self._waiting, self._busy, self._asked = [], [], False
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


# ---- the requests, as both ends read them ----------------------------------------


def encode(kind: str, plan: monitor.Plan) -> tuple[bytes, list[int]]:
    """A request of ``kind`` (RUN, READY) for ``plan``: the datagram, and the descriptors it sends (its
    fields name them by their index among those)."""
    fds = [getattr(plan, name) for name in FD_FIELDS if getattr(plan, name) is not None]
    values = tuple(fds.index(getattr(plan, f.name)) if f.name in FD_FIELDS and getattr(plan, f.name) is not None
                   else getattr(plan, f.name) for f in fields(plan))
    return marshal.dumps((kind, values, plan.script_fd)), fds


def with_claim(plan: monitor.Plan, request: tuple, fds: list[int]) -> monitor.Plan:
    """``plan`` (made ready) with the descriptors of its claim that a GO ``request`` (unmarshalled) brought."""
    _, sent = request
    return replace(plan, **{name: fds[v] if name.endswith("_fd") and v is not None else v for name, v in sent.items()})


def decode_plan(request: tuple, fds: list[int]) -> monitor.Plan:
    """The Plan a RUN or READY ``request`` (unmarshalled) carries, with the descriptors received in place
    of the driver's numbers."""
    _, sent, script_fd = request
    values = dict(zip([f.name for f in fields(monitor.Plan)], sent))
    for name in FD_FIELDS:
        if values[name] is not None:
            values[name] = fds[values[name]]
    # the interpreter reads the script as /dev/fd/N: N is its number here, not in the driver
    path, here = f"/dev/fd/{script_fd}".encode(), f"/dev/fd/{values['script_fd']}".encode()
    values["argv"] = tuple(here if part == path else part for part in values["argv"])
    return monitor.Plan(**values)
