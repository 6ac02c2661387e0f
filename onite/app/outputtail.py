"""A failed job's last lines of output, as the one who asks may see them (reading only).

Invariant: the lines are read only for the job's owner and root, only from a regular file of the job's
user written during that run (O_NOFOLLOW), with their control characters spelt out.
"""

from __future__ import annotations

from onite.core.record import Record
from onite.spool.outputs import run_tail
from onite.spool.paths import SpoolDir
from onite.core.jobview import JobView
from onite.core.safetext import printable
from onite.core.policy import owner_or_root

TAIL_BYTES = 8192  # read from the end of the file: enough for the few lines shown
TAIL_WIDTH = 200  # a longer line of output is cut (a terminal crops at its width)


class Tail(Record):
    """The end of a failed job's output, as its reader may see it."""

    lines: tuple[str, ...] = ()
    private: bool = False  # someone else's
    kept: bool = True  # false: no output of that run is kept (removed, or replaced by a later run's)


def read_tail(spool: SpoolDir, job: JobView, reader: int, lines: int) -> Tail:
    """The last ``lines`` lines of what ``job`` printed: its stderr when it kept that apart, else its output."""
    if not owner_or_root(reader, job.uid):
        return Tail(private=True)
    path = spool.stderr_path(job.name) if job.stderr == "separate" else spool.output_path(job.name)
    data = run_tail(path, job.uid, job.started, job.finished, max_bytes=TAIL_BYTES, lines=lines)
    if data is None:
        return Tail(kept=False)  # removed, or another run's file (a later job of that name, or one before)
    text = data.decode("utf-8", "replace").splitlines()
    # a retry's output follows the earlier attempts', after its marker line (onite.exec.launch.attempt_marker)
    marker = f"[onite] attempt {job.attempt} of {job.name.partition(':')[2]}, "
    text = text[max((i + 1 for i, line in enumerate(text) if line.startswith(marker)), default=0):]
    cut = [printable(line) for line in text]
    return Tail(lines=tuple(line if len(line) <= TAIL_WIDTH else line[:TAIL_WIDTH - 1] + "…" for line in cut))
