"""An ``sbatch`` in flight: started as the job's owner, and never waited for by the driver's loop.

The owner may stop or trace it, so the loop never blocks on it: its script, output and errors are
memory files, its end is seen through its pidfd, and it is killed at its deadline.
"""

from __future__ import annotations

import os
import resource
import subprocess
from dataclasses import dataclass

OUTPUT_LIMIT = 1 << 20  # bytes of sbatch's stdout or stderr read back (it says a line or two)
FILE_LIMIT = 4 << 20  # bytes it may write to a file: its output files are memory, which a user tracing it must not fill


@dataclass
class Submission:
    """One sbatch process and what it will say."""

    proc: subprocess.Popen
    out_fd: int
    err_fd: int
    deadline: float  # on the driver's monotonic clock: killed if still running then
    pidfd: int | None = None  # readable once it has exited (None: it is polled)
    record_fd: int | None = None  # its run's record (O_APPEND), where its job's id goes; closed with it

    def done(self) -> bool:
        return self.proc.poll() is not None

    def result(self) -> tuple[int, bytes, bytes]:
        return self.proc.returncode, _read_all(self.out_fd), _read_all(self.err_fd)

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()

    def close(self) -> None:
        for fd in (self.out_fd, self.err_fd, self.pidfd, self.record_fd):
            if fd is not None:
                os.close(fd)


def launch(argv: list[bytes], script: bytes, *, env: dict, umask: int, pass_fds: tuple[int, ...], deadline: float,
           ident=None) -> Submission:
    """Start ``argv`` with ``script`` on its stdin, as ``ident`` (None: as this process), in ``/``; OSError if not."""
    script_fd = memory_file("onite-script", script)
    out_fd = memory_file("onite-sbatch-out")
    err_fd = memory_file("onite-sbatch-err")
    try:
        proc = subprocess.Popen(
            argv, stdin=script_fd, stdout=out_fd, stderr=err_fd, env=env, cwd="/", umask=umask, pass_fds=pass_fds,
            preexec_fn=_limit_files,
            **({"user": ident.uid, "group": ident.gid, "extra_groups": list(ident.groups)} if ident else {}),
        )
    except BaseException:
        os.close(out_fd)
        os.close(err_fd)
        raise
    finally:
        os.close(script_fd)
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = None  # polled instead
    return Submission(proc=proc, out_fd=out_fd, err_fd=err_fd, deadline=deadline, pidfd=pidfd)


def _limit_files() -> None:
    """In the child, as its owner (nothing imported: it may not read our modules); a hard limit it cannot raise."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def memory_file(name: str, data: bytes = b"") -> int:
    """A close-on-exec file in memory holding ``data``, at its start; OSError if it cannot be made or written."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_all(fd: int) -> bytes:
    return os.pread(fd, OUTPUT_LIMIT, 0)
