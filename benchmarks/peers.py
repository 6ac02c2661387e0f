"""Baseline and peer measurements: what onite's figures will be compared with.

    python benchmarks/peers.py [--n N] [--quick] [--json] [--repeats R] [--only PEER,...]

Each ``bench_*`` function measures one peer and returns ``harness.Result``s.
A peer whose program is missing is skipped with a note saying which Debian
package provides it. Every queue gets private state (its own socket, queue
directory or job ids) that is removed afterwards, so a run neither sees nor
disturbs anybody's real queue.

The jobs are trivial (``true``) on purpose: the figures are the spooler's own
cost per job, which is what a spooler adds to a night of real work.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

import harness as h  # this script is run from its own folder: sys.path[0]

# Figures that the others are related to (Result.baseline_name).
BASE_RATE = "baseline: sh -c true loop"
XARGS_1 = "baseline: xargs -P1 sh -c true"
XARGS_2 = "baseline: xargs -P2 sh -c true"
BASE_CLI = "baseline: python -c pass"

# task-spooler keeps one connected client process per queued job and refuses
# more than TS_MAXCONN (default 1000) connections; a few go to the server's own
# use, so about 990 jobs fit. Pre-filling stays well below that.
TSP_QUEUE_CAP = 900


@dataclasses.dataclass(frozen=True)
class Config:
    n: int  # jobs per drain
    repeats: int  # repetitions of each drain (medians are reported)
    slow_repeats: int  # repetitions of a drain that takes tens of seconds a run
    latency_repeats: int  # invocations per single-command latency
    at_queue: int  # jobs queued with at before timing atq


# The default run takes about three minutes on 2 cores; nq's drain with its
# files kept is the one slow workload (~30 s a run at N=2000), run once.
DEFAULT = Config(n=2000, repeats=3, slow_repeats=1, latency_repeats=20, at_queue=10_000)
QUICK = Config(n=100, repeats=1, slow_repeats=1, latency_repeats=5, at_queue=200)


class Skip(Exception):
    """This peer cannot be measured here; the message says how to fix that."""


def require(binary: str, package: str) -> None:
    if shutil.which(binary) is None:
        raise Skip(f"`{binary}` not found; install it with: apt-get install {package}")


def run_quiet(argv: Sequence[str], **kwargs) -> None:
    """Run a command that must succeed, with no stdin and its output dropped.

    /dev/null rather than a pipe matters for spoolers that fork into the
    background: a child holding our pipe would make run() wait for the job.
    """
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True, **kwargs)


def package_version(package: str) -> str:
    """Installed Debian version of a package, for the environment lines."""
    if shutil.which("dpkg-query") is None:
        return "unknown (not a Debian system)"
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "not installed"


class Gate:
    """A FIFO that a gate job (``cat FIFO``) blocks on until ``release()``.

    Queued first, the gate job holds the queue's only slot, so N jobs can be
    queued behind it and the drain timed on its own, apart from submission:
    the overnight case, where the queue fills by day and drains by night.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "gate")
        os.mkfifo(self.path)
        self.released = False

    @property
    def argv(self) -> list[str]:
        return ["cat", self.path]

    def release(self, timeout: float = 30.0) -> None:
        """Open and close the write end: ``cat`` reads end-of-file and exits.

        Non-blocking, retried, so that a gate job that never started fails
        the run after ``timeout`` instead of hanging it. Idempotent, so that
        clean-up can call it again after an error.
        """
        deadline = time.monotonic() + timeout
        while not self.released:
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
                self.released = True
            except OSError as e:  # ENXIO: no reader yet
                if e.errno != errno.ENXIO or time.monotonic() > deadline:
                    raise
                time.sleep(0.001)

    def close(self) -> None:
        """Release the gate if a failed run has not, so no job stays blocked."""
        try:
            self.release(timeout=5.0)
        except OSError:
            pass


# --------------------------------------------------------------------------
# (a) baseline


def sh_true_loop(n: int) -> None:
    for _ in range(n):
        subprocess.run(["/bin/sh", "-c", "true"], check=True)


def xargs_true(n: int, at_once: int) -> None:
    """N `sh -c true` by xargs, ``at_once`` at a time: C's own fork, exec and wait, with nothing kept."""
    subprocess.run(["xargs", "-P", str(at_once), "-n", "1", "/bin/sh", "-c", "true"], input=b"x\n" * n,
                   check=True, stdout=subprocess.DEVNULL)


def bench_baseline(cfg: Config) -> list[h.Result]:
    """The cheapest way to run N jobs, and the cheapest Python command line.

    The interpreter is the one running this script (sys.executable), the one
    onite's CLI would run under here; a `python3` on PATH may be a wrapper
    script (pyenv shims are) that would add its own start-up.
    """
    py = sys.executable
    results = [
        h.Result.from_stats(BASE_RATE, h.measure(lambda _: sh_true_loop(cfg.n), cfg.repeats).rate(cfg.n),
                            "jobs/s", note=f"N={cfg.n}, sequential, no queue at all"),
        h.Result.from_stats(XARGS_1, h.measure(lambda _: xargs_true(cfg.n, 1), cfg.repeats).rate(cfg.n),
                            "jobs/s", BASE_RATE, note=f"N={cfg.n} `sh -c true` one at a time by xargs -P1: the "
                            "most one slot of any spooler can run here"),
        h.Result.from_stats(XARGS_2, h.measure(lambda _: xargs_true(cfg.n, 2), cfg.repeats).rate(cfg.n),
                            "jobs/s", XARGS_1, note=f"N={cfg.n}, two at a time (xargs -P2): the most two slots "
                            "can run here; ratio to one at a time"),
        h.Result.from_stats(BASE_CLI, h.time_cmd([py, "-c", "pass"], cfg.latency_repeats).scaled(1000),
                            "ms", note=f"{py}; includes site-packages .pth start-up hooks"),
        h.Result.from_stats("python -S -c pass (no site import)",
                            h.time_cmd([py, "-S", "-c", "pass"], cfg.latency_repeats).scaled(1000),
                            "ms", BASE_CLI, note="the interpreter's floor without site-packages"),
    ]
    system_py = "/usr/bin/python3"
    if os.path.exists(system_py) and os.path.realpath(system_py) != os.path.realpath(py):
        results.append(h.Result.from_stats(
            "/usr/bin/python3 -c pass", h.time_cmd([system_py, "-c", "pass"], cfg.latency_repeats).scaled(1000),
            "ms", BASE_CLI, note="the distribution's interpreter, for comparison"))
    results += [
        h.Result.from_stats("exec /bin/true", h.time_cmd(["/bin/true"], cfg.latency_repeats).scaled(1000),
                            "ms", BASE_CLI, note="fork+exec floor of any command"),
        h.Result("python -c pass peak RSS", h.peak_rss_kib([py, "-c", "pass"]) / 1024, "MiB",
                 note="baseline for a Python CLI's memory"),
    ]
    return results


# --------------------------------------------------------------------------
# (b) task-spooler


class TspQueue:
    """A private task-spooler server: its own socket and output directory.

    The first `tsp` call starts the server; `close()` kills it (waiting
    clients die with it) and removes the directory.
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.dir = tempfile.mkdtemp(prefix="bench-tsp-")
        # TMPDIR is where tsp writes each job's output file (ts-out.XXXXXX).
        self.env = dict(os.environ, TS_SOCKET=os.path.join(self.dir, "socket"), TMPDIR=self.dir)
        self.tsp("-S", str(slots))

    def tsp(self, *args: str) -> None:
        run_quiet(["tsp", *args], env=self.env)

    def submit(self, *argv: str) -> None:
        # -B: fail at once if the queue is full rather than block forever.
        # Output is stored (no -n) as onite stores each job's output.
        self.tsp("-B", *argv)

    def submit_sentinel(self) -> None:
        """Queue a last job needing every slot: it can start only when all
        earlier jobs have finished, so waiting for it waits for them all
        (`tsp -w` alone waits for one job, and with 2 slots the last queued
        is not necessarily the last to finish)."""
        self.tsp("-N", str(self.slots), "true")

    def wait_last(self) -> None:
        self.tsp("-w")  # waits for the last job added

    def close(self) -> None:
        subprocess.run(["tsp", "-K"], env=self.env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def tsp_end_to_end(n: int, slots: int, repeats: int, store_output: bool = True) -> h.Stats:
    """Seconds from the first submit to all N finished, submitting as fast as
    we can while the server runs them.

    More than TSP_QUEUE_CAP jobs are fine here: if the server's connection
    limit is reached, the submitting `tsp` blocks until a job ends (tsp's own
    back-pressure) and that wait is part of the end-to-end time. The trivial
    jobs finish about as fast as they are submitted, so it rarely triggers.

    ``store_output=False`` submits with -n: the job writes to the submitter's
    stdout (/dev/null here) instead of an output file tsp creates per job.
    """
    options = [] if store_output else ["-n"]

    def run(q: TspQueue) -> None:
        for _ in range(n):
            q.tsp(*options, "true")  # without -B: block (not fail) when the queue is full
        q.submit_sentinel()
        q.wait_last()

    return h.measure(run, repeats, setup=lambda: TspQueue(slots), teardown=TspQueue.close)


def tsp_fill_and_drain(n: int, repeats: int) -> dict[str, h.Stats]:
    """Seconds to queue n jobs behind a gate (fill), then to run them (drain)."""

    def run() -> dict[str, float]:
        q = TspQueue(1)
        gate = Gate(q.dir)
        try:
            q.submit(*gate.argv)
            laps = h.Laps()
            for _ in range(n):
                q.submit("true")
            q.submit_sentinel()
            laps.lap("fill")
            busy = h.busy_cpu_seconds()
            gate.release()
            q.wait_last()
            laps.lap("drain")
            busy_after = h.busy_cpu_seconds()
            if busy is not None and busy_after is not None:
                laps.phases["drain cpu"] = busy_after - busy
            return laps.phases
        finally:
            gate.close()
            q.close()

    return h.measure_phases(run, repeats)


def tsp_submit_latency(repeats: int) -> h.Stats:
    q = TspQueue(1)
    try:
        stats = h.time_cmd(["tsp", "true"], repeats, env=q.env)
        # Let the submitted jobs end before the server is killed: a job's
        # client that outlives the server writes an error file next to the
        # socket after the directory is gone.
        q.submit_sentinel()
        q.wait_last()
        return stats
    finally:
        q.close()


def bench_tsp(cfg: Config) -> list[h.Result]:
    require("tsp", "task-spooler")
    pre = min(cfg.n, TSP_QUEUE_CAP)
    phases = tsp_fill_and_drain(pre, cfg.repeats)
    return [
        h.Result.from_stats("tsp -S 1: end to end", tsp_end_to_end(cfg.n, 1, cfg.repeats).rate(cfg.n), "jobs/s",
                            BASE_RATE, note=f"N={cfg.n}, first submit to all finished, 1 slot, output stored"),
        h.Result.from_stats("tsp -S 1 -n: end to end", tsp_end_to_end(cfg.n, 1, cfg.repeats, store_output=False)
                            .rate(cfg.n), "jobs/s", BASE_RATE, note=f"N={cfg.n}, output not stored (-n)"),
        h.Result.from_stats("tsp -S 2: end to end", tsp_end_to_end(cfg.n, 2, cfg.repeats).rate(cfg.n), "jobs/s",
                            BASE_RATE, note=f"N={cfg.n}, 2 slots"),
        h.Result.from_stats("tsp: fill (submit rate)", phases["fill"].rate(pre), "jobs/s", BASE_RATE,
                            note=f"{pre} jobs queued behind a gate job (queue limit ~990, TS_MAXCONN)"),
        h.Result.from_stats("tsp -S 1: drain of a filled queue", phases["drain"].rate(pre), "jobs/s", BASE_RATE,
                            note=f"{pre} pre-queued jobs, timed from the gate's release"),
        *([h.Result.from_stats("tsp -S 1: CPU per job, drain", phases["drain cpu"].scaled(1000 / pre), "ms/job",
                               note="the machine's busy CPU over that drain (server, jobs, kernel), per job")]
          if "drain cpu" in phases else []),
        h.Result.from_stats("tsp: one submit", tsp_submit_latency(cfg.latency_repeats).scaled(1000), "ms",
                            BASE_CLI, note="`tsp true` into an idle private server"),
    ]


# --------------------------------------------------------------------------
# (c) nq


class NqQueue:
    """A private nq queue: a fresh NQDIR (nq's queue is the directory)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bench-nq-")
        self.env = dict(os.environ, NQDIR=self.dir)

    def submit(self, *argv: str, clean: bool = False) -> None:
        # -q: no job id on stdout; -c: delete the output file of a job that
        # exited 0, so finished jobs stop costing every later job a look.
        run_quiet(["nq", "-q", *(["-c"] if clean else []), *argv], env=self.env)

    def wait_all(self) -> None:
        """`nq -w` with no job id waits for every job queued before it."""
        run_quiet(["nq", "-w"], env=self.env)

    def close(self) -> None:
        self.wait_all()  # no job may still write into the directory
        shutil.rmtree(self.dir, ignore_errors=True)


def nq_fill_and_drain(n: int, repeats: int, clean: bool) -> dict[str, h.Stats]:
    """Seconds to queue n jobs behind a gate (fill), then to run them (drain).

    Timing the drain apart from submission matters for nq: every queued job
    is a process that, each time the job before it ends, rescans the whole
    queue directory and flocks every earlier file, so the cost per job grows
    with the number queued and with finished files left behind.
    """

    def run() -> dict[str, float]:
        q = NqQueue()
        gate = Gate(q.dir)
        try:
            q.submit(*gate.argv)
            laps = h.Laps()
            for _ in range(n):
                q.submit("true", clean=clean)
            laps.lap("fill")
            gate.release()
            q.wait_all()
            laps.lap("drain")
            return laps.phases
        finally:
            gate.close()
            q.close()

    return h.measure_phases(run, repeats)


def nq_submit_latency(repeats: int) -> h.Stats:
    q = NqQueue()
    try:
        return h.time_cmd(["nq", "-q", "true"], repeats, env=q.env)
    finally:
        q.close()


def bench_nq(cfg: Config) -> list[h.Result]:
    require("nq", "nq")
    small = max(1, cfg.n // 4)
    kept = nq_fill_and_drain(cfg.n, cfg.slow_repeats, clean=False)
    kept_small = nq_fill_and_drain(small, cfg.repeats, clean=False)
    cleaned = nq_fill_and_drain(cfg.n, cfg.repeats, clean=True)
    return [
        h.Result.from_stats("nq: fill (submit rate)", kept["fill"].rate(cfg.n), "jobs/s", BASE_RATE,
                            note=f"{cfg.n} jobs queued behind a gate job; each submit fsyncs the queue directory"),
        h.Result.from_stats("nq: drain", kept["drain"].rate(cfg.n), "jobs/s", BASE_RATE,
                            note=f"N={cfg.n} pre-queued, output files kept (nq's default), until `nq -w` returns;"
                                 f" {cfg.slow_repeats} run(s)"),
        h.Result.from_stats("nq: drain, N/4", kept_small["drain"].rate(small), "jobs/s", BASE_RATE,
                            note=f"N={small}: nq's cost per job grows with the queue's length"),
        h.Result.from_stats("nq -c: drain", cleaned["drain"].rate(cfg.n), "jobs/s", BASE_RATE,
                            note=f"N={cfg.n}, -c removes each successful job's file"),
        h.Result.from_stats("nq: one submit", nq_submit_latency(cfg.latency_repeats).scaled(1000), "ms",
                            BASE_CLI, note="`nq -q true` into an empty private NQDIR"),
    ]


# --------------------------------------------------------------------------
# (d) GNU parallel


def parallel_run(n: int, jobs: int) -> None:
    """N `true` commands with -jJOBS, start-up of parallel itself included.

    -N0 runs the command with no argument appended (one input line = one
    job). PARALLEL_SHELL pins the shell parallel wraps each command in, so
    the figure does not depend on the caller's $SHELL.
    """
    env = dict(os.environ, PARALLEL_SHELL="/bin/sh")
    subprocess.run(["parallel", "--will-cite", f"-j{jobs}", "-N0", "true"],
                   input=b"x\n" * n, stdout=subprocess.DEVNULL, env=env, check=True)


def bench_parallel(cfg: Config) -> list[h.Result]:
    require("parallel", "parallel")
    return [
        h.Result.from_stats(f"parallel -j{jobs}", h.measure(lambda _: parallel_run(cfg.n, jobs), cfg.repeats)
                            .rate(cfg.n), "jobs/s", BASE_RATE, note=f"N={cfg.n} `true`, parallel's start-up included")
        for jobs in (1, 2)
    ]


# --------------------------------------------------------------------------
# (e) at


JOB_ID = re.compile(rb"^job (\d+) at ", re.MULTILINE)
AT_QUEUE = "z"  # a queue of its own, so our jobs are told apart from others
AT_SPOOL = "/var/spool/cron/atjobs"  # Debian's spool directory


def at_submit() -> str:
    """Queue one `true` a year from now in queue z; return its job id.

    at tells the job id on stderr (with a warning when atd is not running,
    which is harmless: atq and atrm read the spool directly).
    """
    proc = subprocess.run(["at", "-q", AT_QUEUE, "now + 1 year"], input=b"true\n",
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    match = JOB_ID.search(proc.stderr)
    if not match:
        raise RuntimeError(f"at gave no job id: {proc.stderr.decode(errors='replace').strip()}")
    return match.group(1).decode()


def at_remove(ids: Sequence[str]) -> None:
    """Remove the given at jobs, and only them.

    atrm rescans the whole spool (a stat and uid switches per file) for each
    id it is given: removing 10,000 jobs that way takes minutes. Where we may
    write the spool (root), unlink our job files directly, as atrm does for
    each file it matches; atrm then handles whatever is left.
    """
    left = set(ids)
    if os.access(AT_SPOOL, os.W_OK | os.X_OK):
        for name in os.listdir(AT_SPOOL):
            job = at_job_number(name)
            if job in left:
                os.unlink(os.path.join(AT_SPOOL, name))
                left.discard(job)
    remaining = sorted(left, key=int)
    for i in range(0, len(remaining), 500):
        subprocess.run(["atrm", *remaining[i:i + 500]], stdin=subprocess.DEVNULL, check=False)


def at_job_number(name: str) -> str | None:
    """Job number of a spool file of our queue, or None.

    at names a job file QNNNNNMMMMMMMM: the queue letter, the job number in 5
    hex digits, the run time in minutes in 8 hex digits.
    """
    if len(name) != 14 or name[0] != AT_QUEUE:
        return None
    try:
        return str(int(name[1:6], 16))
    except ValueError:
        return None


def atq_count() -> int:
    out = subprocess.run(["atq"], capture_output=True, check=True).stdout
    return len(out.splitlines())


def atd_running() -> bool:
    return subprocess.run(["pgrep", "-x", "atd"], stdout=subprocess.DEVNULL, check=False).returncode == 0


def bench_at(cfg: Config) -> list[h.Result]:
    """Submit rate and listing time of the system's at spool.

    at has no private queue: the jobs go into the system spool (queue z, a
    year ahead, never run) and the ids we got back are removed afterwards,
    whatever happens. atd is not needed: at writes the spool itself.
    """
    for binary in ("at", "atq", "atrm"):
        require(binary, "at")
    ids: list[str] = []
    try:
        submits = h.measure(lambda _: ids.append(at_submit()), cfg.at_queue)
        queued = atq_count()
        listing = h.time_cmd(["atq"], cfg.latency_repeats).scaled(1000)
    finally:
        at_remove(ids)
    signalled = "; atd is running and is signalled at each submit" if atd_running() else "; atd not running"
    return [
        h.Result("at: submit rate", cfg.at_queue / submits.total, "jobs/s", BASE_RATE,
                 note=f"{cfg.at_queue} `at -q z now + 1 year` in one run{signalled}"),
        h.Result.from_stats("at: one submit", submits.scaled(1000), "ms", BASE_CLI,
                            note=f"median over those {cfg.at_queue} submits"),
        h.Result.from_stats("at: atq listing the queue", listing, "ms", BASE_CLI,
                            note=f"{queued} jobs in the spool"),
    ]


# --------------------------------------------------------------------------
# Command line


PEERS: dict[str, Callable[[Config], list[h.Result]]] = {
    "baseline": bench_baseline,
    "task-spooler": bench_tsp,
    "nq": bench_nq,
    "parallel": bench_parallel,
    "at": bench_at,
}
PACKAGES = ("task-spooler", "nq", "parallel", "at")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, help=f"jobs per drain (default {DEFAULT.n}, quick {QUICK.n})")
    parser.add_argument("--repeats", type=int,
                        help="repetitions of every drain, the slow one included; medians are reported")
    parser.add_argument("--quick", action="store_true", help="small N and single runs: a smoke test, not figures")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(PEERS)}")
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> Config:
    cfg = QUICK if args.quick else DEFAULT
    if args.n is not None:
        cfg = dataclasses.replace(cfg, n=args.n)
    if args.repeats is not None:
        cfg = dataclasses.replace(cfg, repeats=args.repeats, slow_repeats=args.repeats)
    if cfg.n < 1 or cfg.repeats < 1:
        raise SystemExit("peers.py: --n and --repeats must be at least 1")
    return cfg


def selected_peers(only: str | None) -> list[str]:
    if not only:
        return list(PEERS)
    names = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in names if name not in PEERS]
    if unknown:
        raise SystemExit(f"peers.py: unknown peer {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = config_from(args)
    env = h.describe_environment()
    env.update({f"{pkg} version": package_version(pkg) for pkg in PACKAGES})
    results: list[h.Result] = []
    skipped: list[str] = []
    for name in selected_peers(args.only):
        # Progress goes to stderr so that --json output stays one document.
        print(f"peers.py: measuring {name}…", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            results += PEERS[name](cfg)
        except Skip as e:
            skipped.append(f"{name}: {e}")
            print(f"peers.py: skipped {name}: {e}", file=sys.stderr)
            continue
        print(f"peers.py: {name} took {time.perf_counter() - started:.1f} s", file=sys.stderr)
    # Load at the end too: a rise during the run means other work competed
    # with it, and the figures are lower and more spread out than they should.
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    extra = {"load average at end": load, "parameters": dataclasses.asdict(cfg), "skipped": skipped}
    h.print_report(results, env, as_json=args.json, extra=extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
