"""The spawner process: forks the jobs' monitors and hands them to the driver (onite.exec.spawner).

It runs as a fresh interpreter (``python -E -S``) started by the driver's
Spawner with its first job, and imports only this module, the spawner's
protocol (onite.exec.spawner) and the monitor: so a monitor forked here copies
a small process, not the driver. The driver's end, the invariants and the
requests (RUN, READY, GO, DROP) are described in onite.exec.spawner.
"""

from __future__ import annotations

import gc
import marshal
import os
import signal
import socket

from onite.exec import contain, monitor
from onite.exec.spawner import (BUSY, GO, IDLE, MAX_REQUEST, MONITOR_RUNS, MORE, PR_SET_PDEATHSIG, READY,
                                decode_plan, with_claim)


def serve(fd: int, contained: bool) -> None:
    """The spawner's loop: fork a monitor for each request (MORE: one that waits; a Plan: one that
    takes it) and give the driver our end of its socket, until the driver's end closes.
    ``contained``: monitors make themselves subreapers (onite.exec.contain)."""
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
    if not _offer(sock, contained):  # one monitor waits before the first request
        return
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 16)
        except InterruptedError:
            continue
        except OSError:
            return  # the driver closed its end with a monitor we gave it unread (ECONNRESET)
        if not data:
            return  # the driver is gone, or let us go
        try:
            served = _offer(sock, contained) if data == MORE else _take(sock, contained, data, fds)
        finally:
            for received in fds:
                os.close(received)
        if not served:
            return


def _offer(sock: socket.socket, contained: bool) -> bool:
    """Fork a monitor that waits, and give it to the driver; False if the driver is gone."""
    conn = _fork_ahead(contained, sock)
    return conn is None or _give(sock, IDLE, conn)  # none forked: the next request forks its own


def _take(sock: socket.socket, contained: bool, data: bytes, fds: list[int]) -> bool:
    """Fork a monitor for the request ``data`` (no monitor of the driver's was waiting) and give it
    to the driver, busy; False if the driver is gone."""
    conn = _fork_ahead(contained, sock)
    if conn is None:
        _fork_now(data, fds)  # says ``failed`` on the run's pipe if no process can be forked
        return True
    try:
        socket.send_fds(conn, [data], fds)
    except OSError:
        pass  # it died at once: the run's pipe closes unheard, and its record decides
    return _give(sock, BUSY, conn)


def _give(sock: socket.socket, word: bytes, conn: socket.socket) -> bool:
    """Send the driver our end of a monitor's socket (``word``: IDLE, it waits; BUSY, it took the
    request); False if the driver is gone. The monitor's socket then has one end in the monitor and
    one in the driver: when the driver's closes (it ended or died), the monitor exits once its run is over."""
    try:
        socket.send_fds(sock, [word], [conn.fileno()])
        return True
    except OSError:
        return False
    finally:
        conn.close()


def _fork_ahead(contained: bool, driver: socket.socket) -> socket.socket | None:
    """Fork a monitor: it prepares itself (onite.exec.monitor step 1) and waits for its Plans; our
    end of its socket (``driver``: the spawner's socket to the driver, which the monitor does not
    keep). None if no process can be forked now."""
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
            driver.close()
            code = _wait_and_run(theirs, contained)
        finally:
            os._exit(code)
    theirs.close()
    return ours


def _wait_and_run(conn: socket.socket, contained: bool) -> int:
    """In a monitor of the spawner's: prepare, then run each Plan that comes (from the driver), one
    after another, saying ``IDLE`` after each; the exit code once the driver is gone or has monitors
    enough, or this one must not serve another run."""
    try:
        monitor.prepare(contained)
        gc.enable()  # this copy lives for many runs: its own garbage is collected (the spawner's stays frozen)
        served = 0
        while True:
            data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 16)
            if not data:
                return 0  # the driver's end closed (it ended or died, or has monitors enough)
            request = marshal.loads(data)
            plan, made = decode_plan(request, fds), None
            if request[0] == READY:
                made = monitor.ready(plan)
                data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 16)
                request = marshal.loads(data) if data else (None,)
                if request[0] != GO:  # dropped, or the driver is gone
                    monitor.unready(plan, made)
                    for fd in fds + [plan.script_fd]:
                        os.close(fd)
                    if not data:
                        return 0
                    conn.send(IDLE)
                    continue
                plan = with_claim(plan, request, fds)
            if monitor.run(plan, prepared=True, keep=frozenset({conn.fileno()}), made=made) != 0:
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
        plan = decode_plan(marshal.loads(data), fds)
    except Exception:  # noqa: BLE001 - a malformed request (the driver's bug): its pipe closes unheard
        return
    try:
        monitor.start(plan)
    except OSError as err:
        try:
            os.write(plan.notify_fd, f"failed cannot start its monitor: {err.strerror}\n".encode())
        except OSError:
            pass


