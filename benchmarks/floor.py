"""The floor of one onite job on this machine: its process alone, started as onite's monitor starts it.

    python benchmarks/floor.py N contained|bare

Starts N jobs ``true``, one after another, with onite's own code
(onite.exec.jobstart, onite.exec.contain, onite.exec.limits): the script in a
memfd read by ``/bin/sh`` as /dev/fd/N, forked and executed by subprocess's C
code, in a new session; ``contained``: in the cgroups a driver here would give
it (its containment cgroup and its v1 groups, made, joined, left and removed,
what it used read back), ``bare``: in none. No driver, no monitor of its own,
no record, no output file, no result: what a drain adds to a job is everything
else. Prints the seconds the N jobs took (run.py turns it into a rate); no
drain of onite's on one slot can go faster than this.

Exit status 3 (and why on stderr) where ``contained`` has nothing to contain
with: not root, or no cgroups.
"""

from __future__ import annotations

import os
import sys
import time

from onite.exec import contain, jobstart, limits
from onite.exec.plan import Plan

ENV = {b"PATH": b"/usr/local/bin:/usr/bin:/bin", b"LANG": b"C.UTF-8"}


def ways(contained: bool) -> tuple[contain.Containment, limits.Limiter]:
    """How a driver of this process's would contain and limit its jobs (or neither, ``bare``)."""
    if not contained:
        return contain.Containment(contain.OFF, why="bare"), limits.Limiter(why="bare")
    cont = contain.discover(True)
    return cont, limits.discover(cont.base if cont.kind == contain.CGROUP2 else None)


def start_one(i: int, cont: contain.Containment, lim: limits.Limiter, null: int) -> None:
    """One job, from its cgroups' making to their removal (onite.exec.monitor's order)."""
    run_id = f"floor-{os.getpid()}-{i}"
    script = os.memfd_create("onite-floor", 0)
    try:
        os.write(script, b"true\n")
        os.lseek(script, 0, os.SEEK_SET)
        cgroup = f"{cont.base}/{run_id}" if cont.kind == contain.CGROUP2 else None
        groups = lim.groups(run_id, cgroup)
        plan = Plan(argv=(b"/bin/sh", os.fsencode(f"/dev/fd/{script}")), env=ENV, cwd=b"/", umask=0o022,
                    uid=None, gid=None, groups=(), script_fd=script, stdout_fd=null, stderr_fd=None,
                    record_fd=null, record_path="", lock_fd=None, cgroup=cgroup,
                    contain=cont.kind, kill_grace=1.0, limit_groups=groups,
                    limit_steps=lim.steps(run_id, cgroup, None), usage_reads=lim.reads(run_id, cgroup))
        if cgroup:
            contain.make_cgroup(cgroup)
        limits.apply(plan.limit_steps)
        pid, why = jobstart.start(plan)
    finally:
        os.close(script)
    try:
        if pid is None:
            raise SystemExit(f"floor.py: the job could not start: {jobstart.reason(why, plan)}")
        os.wait4(pid, 0)
        limits.usage(plan.usage_reads)
    finally:
        if cgroup:
            contain.remove_cgroup(cgroup)
        limits.remove(groups)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit() or argv[1] not in ("contained", "bare"):
        print("usage: floor.py N contained|bare", file=sys.stderr)
        return 2
    n, contained = int(argv[0]), argv[1] == "contained"
    cont, lim = ways(contained)
    if contained and cont.kind == contain.OFF and lim.describe().startswith("not enforced"):
        print(f"floor.py: nothing contains jobs here: {cont.describe()}; {lim.describe()}", file=sys.stderr)
        return 3
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    started = time.perf_counter()
    for i in range(n):
        start_one(i, cont, lim, null)
    print(f"{time.perf_counter() - started:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
