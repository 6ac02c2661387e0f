"""The spawner: a small process that forks the jobs' monitors, so that the big driver never forks.

A fork copies the page tables of the process that forks, and every page
either side then writes is copied once more: the cost grows with the
driver's heap, and it is paid on both sides (docs/performance.md, the
per-job budget). So the local executor starts, with its first job, one
spawner: a fresh interpreter (``python -E -S``) that imports only the
monitor (onite.exec.monitor) and waits on a socket. It keeps one monitor
forked ahead, which has left the driver's session and ignores its signals
(``monitor.prepare``) and waits for its Plan: the fork is not on the path
from one job's end to the next job's start. For each job the driver sends
the monitor's Plan and, with SCM_RIGHTS, the descriptors the Plan names
(the script, the output files, the run record, the driver's pipe, the
driver lock); the spawner passes that datagram on to a waiting monitor
(or, if there is none, forks one: ``monitor.start``, the code the
driver used to run), closes its copies and, if no monitor waits, forks the
next. Nothing is sent back: the driver goes on at once, and hears of the run
on its pipe, from the monitor (or ``failed``, from the spawner, if no
monitor could be forked). The monitor, not the spawner and not the
driver, is the job's parent, and it records the job's end as before: what the
driver's death leaves is what it left before (docs/internals.md, "The monitor
and recovery").

A monitor serves one run after another (``Pool``): once its job has ended,
what the job left is ended and every descriptor of the run is closed (the
driver hears the end of the run's pipe), it tells the spawner it waits
again. Forking a process per job was most of a trivial job's cost. A monitor
whose job left something it could not end exits instead, as does one whose
spawner is gone: after its driver died, a monitor lives only until its run is
over, as before.

Invariants: the spawner holds no descriptor of a job between two requests,
in particular not the driver lock (a monitor holds it, passed with its
request, until its ``monitor`` line is written, as when it was forked by the
driver); a request is one datagram, so a driver killed while sending it
either sent it whole or not at all (then its descriptors, the lock among
them, are closed with the socket, and the claim has no ``monitor`` line:
recovery requeues it); the spawner exits when the driver's end of the socket
closes, and is killed if the driver dies (PR_SET_PDEATHSIG). Where it cannot
be started, or dies, the driver forks the monitor itself, as before.
"""

from __future__ import annotations

import errno
import gc
import marshal
import os
import signal
import socket
import subprocess
import sys
from dataclasses import fields

from onite.exec import contain, monitor

MAX_REQUEST = 1 << 20  # bytes of one request: a job's environment and command line
FD_FIELDS = ("script_fd", "stdout_fd", "stderr_fd", "record_fd", "notify_fd", "lock_fd")
PR_SET_PDEATHSIG = 1
IDLE = b"idle"  # a monitor to its spawner: its run is over, it waits for the next
MONITOR_RUNS = 1000  # runs one monitor serves before it exits (a bound on what it may have leaked)
MAX_WAITING = 8  # monitors kept waiting beyond the busy ones
SEND_WAIT = 30.0  # seconds a request may wait for room in the socket (a stopped spawner must not hang the driver)


class SpawnerGone(OSError):
    """The spawner cannot be asked (it could not start, or it died): fork the monitor here."""


class Spawner:
    """The driver's end of one spawner process (started on the first ``spawn``)."""

    def __init__(self, contained: bool = True) -> None:
        self.contained = contained  # monitors make themselves subreapers (onite.exec.contain)
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self.failed = False  # it could not be started or died: the caller forks monitors itself

    def spawn(self, plan: monitor.Plan) -> None:
        """Have the spawner hand ``plan`` to a monitor. Nothing comes back: the run's pipe says the
        rest (what the monitor tells; ``failed`` if no monitor could be forked; its end when the
        monitor is done with the run), so the driver does not wait for the spawner between jobs.

        Raises:
            SpawnerGone: the request was not sent (the spawner cannot be started or asked, or the
                request is too large for one datagram): nothing was forked for it.
        """
        if self._sock is None:
            self._start()
        fds = [getattr(plan, name) for name in FD_FIELDS if getattr(plan, name) is not None]
        values = tuple(fds.index(getattr(plan, f.name)) if f.name in FD_FIELDS and getattr(plan, f.name) is not None
                       else getattr(plan, f.name) for f in fields(plan))
        try:
            socket.send_fds(self._sock, [marshal.dumps((values, plan.script_fd))], fds)
        except OSError as err:
            if err.errno == errno.EMSGSIZE:  # this request only (a huge environment): nothing was sent
                raise SpawnerGone(err.errno, "the request is larger than one datagram") from None
            self._lost()
            raise SpawnerGone(err.errno, f"the spawner is gone: {err.strerror}") from None

    def _start(self) -> None:
        """Start the spawner process: a fresh interpreter that imports the monitor and nothing else."""
        if self.failed:
            raise SpawnerGone(0, "the spawner could not be started")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        boot = f"import sys; sys.path.insert(0, {root!r}); from onite.exec.spawner import serve; serve({theirs.fileno()}, {self.contained!r})"
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

    def _lost(self) -> None:
        self.failed = True
        self.close()

    def close(self) -> None:
        """Let the spawner go: it exits when its socket closes (monitors it forked go on)."""
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


# ---- the spawner's side -------------------------------------------------------------


def serve(fd: int, contained: bool) -> None:
    """The spawner's loop: hand each request to a waiting monitor (``Pool``), until the driver's end
    closes. ``contained``: monitors make themselves subreapers (onite.exec.contain)."""
    sock = socket.socket(fileno=fd)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # the driver decides; it closes the socket, or dies
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel (each resets this)
    gc.disable()  # no collection walks (and so copies) the pages a monitor shares with this process
    gc.freeze()
    contain.preload()
    prctl = contain.libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        return  # the driver died before the line above
    pool = Pool(contained)
    while True:
        pool.fill()
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 16)
        except InterruptedError:
            continue
        if not data:
            pool.close()
            return
        pool.hand(data, fds)
        for received in fds:
            os.close(received)


class Pool:
    """The monitors this spawner has forked that may take a request: those waiting (one forked ahead
    of the next request, and those whose run is over) and those busy with a run. A monitor
    tells, on its socket, when its run is over and it waits for another (``IDLE``); one whose
    run left something it could not end, or that served ``MONITOR_RUNS`` runs, exits instead."""

    def __init__(self, contained: bool) -> None:
        self.contained = contained
        self.waiting: list[socket.socket] = []  # each monitor's end of the socket its Plans come by
        self.busy: list[socket.socket] = []

    def fill(self) -> None:
        """Have one monitor waiting, forked now if none is free (not on the path of a request)."""
        self._collect()
        if not self.waiting:
            conn = _fork_ahead(self.contained)
            if conn is not None:
                self.waiting.append(conn)

    def hand(self, data: bytes, fds: list[int]) -> None:
        """Give one request to a waiting monitor (one forked now if none takes it)."""
        self._collect()
        while self.waiting:
            conn = self.waiting.pop()
            try:
                socket.send_fds(conn, [data], fds)  # one datagram: it has it whole, or not at all
            except OSError:
                conn.close()  # it died meanwhile: the next one, or fork one now
                continue
            self.busy.append(conn)
            return
        _fork_now(data, fds)

    def _collect(self) -> None:
        """Move the busy monitors whose run is over to the waiting ones; forget those that exited."""
        still = []
        for conn in self.busy:
            try:
                word = conn.recv(16, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                still.append(conn)
                continue
            except OSError:
                word = b""
            if word == IDLE and len(self.waiting) < MAX_WAITING:
                self.waiting.append(conn)
            else:
                conn.close()  # it exited, or enough wait: closing its socket ends it
        self.busy = still

    def close(self) -> None:
        """Let every monitor go: waiting ones exit now, busy ones once their run is over."""
        for conn in self.waiting + self.busy:
            conn.close()
        self.waiting, self.busy = [], []


def _fork_ahead(contained: bool) -> socket.socket | None:
    """Fork a monitor now, while no job waits for it: it prepares itself (onite.exec.monitor step 1)
    and waits for its Plans; our end of its socket. None if no process can be forked now (the
    request forks one)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        code = 70
        try:
            ours.close()
            code = _wait_and_run(theirs, contained)
        finally:
            os._exit(code)
    theirs.close()
    return ours


def _wait_and_run(conn: socket.socket, contained: bool) -> int:
    """In a monitor of the spawner's: prepare, then run each Plan that comes, one after another, saying
    ``IDLE`` after each; the exit code once the spawner is gone, has monitors enough, or this one
    must not serve another run."""
    try:
        monitor.prepare(contained)
        gc.enable()  # this copy lives for many runs: its own garbage is collected (the spawner's stays frozen)
        served = 0
        while True:
            data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 16)
            if not data:
                return 0  # the spawner is gone (its driver ended or died), or has monitors enough
            if monitor.run(_plan(data, fds), prepared=True, keep=frozenset({conn.fileno()})) != 0:
                return 0  # something of the job could not be ended: no other run shares this process
            served += 1
            if served >= MONITOR_RUNS:
                return 0  # said by exiting, not by IDLE: no request can be sent to it after it decided
            try:
                conn.send(IDLE)
            except OSError:
                return 0
    except BaseException:  # noqa: BLE001 - nothing may escape into the copy of the spawner
        if os.environ.get("ONITE_DEBUG_MONITOR"):
            import traceback
            with open(os.environ["ONITE_DEBUG_MONITOR"], "a") as f:
                traceback.print_exc(file=f)
        return 70


def _fork_now(data: bytes, fds: list[int]) -> None:
    """Fork the monitor of a request here (no monitor was waiting). If none can be forked, the run's
    pipe says so (``failed``), as a monitor would have: nothing of the job ran."""
    try:
        plan = _plan(data, fds)
    except Exception:  # noqa: BLE001 - a malformed request (the driver's bug): its pipe closes unheard
        return
    try:
        monitor.start(plan)
    except OSError as err:
        try:
            os.write(plan.notify_fd, f"failed cannot start its monitor: {err.strerror}\n".encode())
        except OSError:
            pass


def _plan(data: bytes, fds: list[int]) -> monitor.Plan:
    """The Plan a request carries, with the descriptors received in place of the driver's numbers."""
    sent, script_fd = marshal.loads(data)
    values = dict(zip([f.name for f in fields(monitor.Plan)], sent))
    for name in FD_FIELDS:
        if values[name] is not None:
            values[name] = fds[values[name]]
    # the interpreter reads the script as /dev/fd/N: N is its number here, not in the driver
    path, here = f"/dev/fd/{script_fd}".encode(), f"/dev/fd/{values['script_fd']}".encode()
    values["argv"] = tuple(here if part == path else part for part in values["argv"])
    return monitor.Plan(**values)
