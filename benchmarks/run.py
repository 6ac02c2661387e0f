"""onite's figures, each beside a baseline measured in the same run, and the same workloads through its peers.

    python benchmarks/run.py [--quick] [--json] [--dir DIR] [--peers LIST] [--only LIST]

Run it with the interpreter onite is installed in (``.venv/bin/python
benchmarks/run.py``): onite's commands are run as that installation's
``onite`` script, and ``python -c pass`` is timed with the same interpreter;
``cli`` times a regular (not editable) install of the same files beside its
own interpreter.

Workloads (benchmarks/README.md says what each measures; docs/performance.md has the latest figures):

  real        (r) the goal's workload: 10 ms jobs (``sleep 0.01``) spooled by another user and
              drained by root, 1 and 2 slots, beside xargs -P1/-P2 and task-spooler on the same
              jobs, taking turns (as root)
  drain       (a) N trivial jobs (``true``) drained by one ``onite run``, 1 slot,
              against a bare subprocess loop of the same N; end to end with
              ``onite submit --lines``; (b) the same with 2 slots; the 1-slot rate
              against task-spooler's drain of a filled queue (when that peer runs);
              the CPU a job costs (the whole machine's, over each drain, against
              task-spooler's), the cores each drain keeps busy, and so the most 2
              slots can gain on these cores; each against xargs running the same
              jobs one and two at a time; and (as root) another user's jobs
  cli         (c) submit, find, list, status, cancel, output, wait and --help on a spool of
              1k queued and 1k kept results of several users, in turns with ``python -c pass``
  bulk        (d) ``onite submit NAME --lines``: jobs per second through one process
  list        (e) ``onite list --json`` with 1k, 10k and 100k queued
  scale       (f) cost per job while draining the front of a queue of 1k and of
              100k; (g) the driver's peak RSS with each
  floor       (j) the floor of a job here: N jobs ``true`` started one after another
              by onite's own job-starting code, in their cgroups and in none, with
              no driver, monitor or record (benchmarks/floor.py); against
              task-spooler's drain, and the 1-slot drain against it
  cost        (i) per job: system calls (of the driver and every process it starts), new
              files, fsyncs, forks and execs, by strace -f
  morning     (h) a night of N finished jobs: ``onite report`` (table and timeline,
              --json, --html), ``onite status --json`` and ``onite wait``; and the
              drain rate with a notice per job (``notify_command = /bin/true``)
              against the same drain without
  peers       the baseline and task-spooler, nq and GNU parallel (peers.py)

Every spool, queue and file is made in a fresh folder under ``--dir`` (default:
the temporary directory), removed afterwards; the peers' queues too. Figures
are reported, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import harness as h  # this script is run from its own folder: sys.path[0]
import peers

BASE_RATE = peers.BASE_RATE
BASE_CLI = peers.BASE_CLI
BASE_RSS = "python -c pass peak RSS"
DRAIN_1 = "onite: drain, 1 slot"
TSP_DRAIN = "tsp -S 1: drain of a filled queue"
TSP_CPU = "tsp -S 1: CPU per job, drain"
CPU_1 = "onite: CPU per job, 1 slot"
CORES_1 = "onite: cores busy, 1 slot"
PER_JOB_SMALL = "onite: per-job drain cost, {} queued"
FLOOR = "onite: floor, a job in its cgroups, one at a time"


@dataclasses.dataclass(frozen=True)
class Plan:
    n: int  # jobs per drain (a, b)
    repeats: int  # runs of each drain and bulk submit
    latency_repeats: int  # invocations per single-command latency
    one_by_one: int  # jobs submitted one `onite submit` each, end to end
    bulk: int  # jobs per bulk-submit figure (d)
    sizes: tuple[int, int, int]  # queue sizes for `list --json` (e); the first and last for (f, g)
    warm: int  # jobs drained before the per-job clock starts (f)
    stride: int  # jobs per per-job sample (f)
    windows: int  # samples per drain (f)
    warm_spool: int  # jobs drained through the spool before the first sample (f)
    night: int  # finished jobs kept for the morning's commands, and drained with and without notices (h)
    peer: peers.Config


DEFAULT = Plan(n=2000, repeats=3, latency_repeats=20, one_by_one=200, bulk=10_000,
               sizes=(1_000, 10_000, 100_000), warm=50, stride=250, windows=3, warm_spool=500,
               night=5_000, peer=peers.DEFAULT)
QUICK = Plan(n=100, repeats=1, latency_repeats=5, one_by_one=20, bulk=1_000,
             sizes=(300, 1_000, 3_000), warm=20, stride=50, windows=2, warm_spool=100,
             night=300, peer=peers.QUICK)

SECTIONS = ("real", "drain", "floor", "cost", "cli", "bulk", "list", "scale", "morning")
PEERS = ("baseline", "task-spooler", "nq", "parallel")


# --------------------------------------------------------------------------
# Running onite


def onite_argv() -> list[str]:
    """The ``onite`` script of this interpreter's installation (what users type), else ``-m onite``."""
    script = Path(sys.executable).with_name("onite")
    return [str(script)] if script.exists() else [sys.executable, "-m", "onite"]


ONITE = onite_argv()


class OniteSpool:
    """A private spool made by ``onite init`` in a fresh folder; ``close()`` removes it."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bench-onite-")
        self.root = os.path.join(self.dir, "spool")
        self.env = dict(os.environ, ONITE_SPOOL=self.root)
        self.job = os.path.join(self.dir, "job.sh")
        Path(self.job).write_text("true\n")
        self.run("init")
        self.configure(pam="off")  # no session unless a workload asks: figures not hanging on /etc/pam.d
        self.batches = 0

    def run(self, *args: str, stdin_path: str | None = None) -> None:
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        try:
            subprocess.run([*ONITE, *args], stdin=stdin, stdout=subprocess.DEVNULL, env=self.env, cwd=self.dir,
                           check=True)
        finally:
            if stdin_path:
                stdin.close()

    def submit_lines(self, lines: Sequence[str]) -> float:
        """Seconds for one ``onite submit NAME --lines`` of these job texts (start-up included)."""
        self.batches += 1
        path = os.path.join(self.dir, f"lines-{self.batches}")
        Path(path).write_text("".join(line + "\n" for line in lines))
        started = time.perf_counter()
        self.run("submit", f"b{self.batches}", "--lines", stdin_path=path)
        elapsed = time.perf_counter() - started
        os.unlink(path)
        return elapsed

    def drain(self, *args: str) -> float:
        """Seconds for one ``onite run`` (start-up and exit included)."""
        return self.drain_with_cpu(*args)[0]

    def drain_with_cpu(self, *args: str) -> tuple[float, float | None]:
        """Seconds for one ``onite run``, and the CPU seconds the machine was busy meanwhile
        (every process: the driver, its monitors, the jobs, the kernel's workers)."""
        busy, started = h.busy_cpu_seconds(), time.perf_counter()
        self.run("run", "-q", *args)
        elapsed, busy_after = time.perf_counter() - started, h.busy_cpu_seconds()
        refused = os.listdir(os.path.join(self.root, "refused"))
        if refused:  # a figure of jobs set aside, not run, would be a false one
            raise SystemExit(f"run.py: the drain refused {len(refused)} job files (e.g. {refused[0]}): no figure")
        return elapsed, None if busy is None or busy_after is None else busy_after - busy

    def give_jobs(self, owner_of) -> None:
        """Give each queued job file (the ``turn``-th, in name order) to ``owner_of(turn)`` (a pwd entry;
        None: keep it): renamed to that user's key USER:NAME and owned by them, as their submit makes it."""
        turn = 0
        for folder, _, files in os.walk(os.path.join(self.root, "jobs")):
            for file in sorted(files):
                owner = owner_of(turn)
                turn += 1
                if owner is not None:
                    os.chown(os.path.join(folder, file), owner.pw_uid, owner.pw_gid)
                    os.rename(os.path.join(folder, file), os.path.join(folder, f"{owner.pw_name}:{file.partition(':')[2]}"))

    def configure(self, **values: str) -> None:
        """Set these keys of its onite.toml (the skeleton's lines for them replaced)."""
        path = Path(self.root) / "onite.toml"
        lines = [line for line in path.read_text().splitlines() if line.split("=")[0].strip() not in values]
        path.write_text("\n".join(lines + [f'{key} = "{value}"' for key, value in values.items()]) + "\n")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------
# (j) the floor: a job's own process, as onite starts it, and nothing else


def floor_seconds(n: int, mode: str) -> float:
    """Seconds for N jobs through benchmarks/floor.py (``contained`` or ``bare``), this interpreter."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.py")
    done = subprocess.run([sys.executable, script, str(n), mode], capture_output=True, text=True)
    if done.returncode == 3:
        raise peers.Skip(done.stderr.strip())
    if done.returncode != 0:
        raise RuntimeError(f"floor.py {mode} failed: {done.stderr.strip()}")
    return float(done.stdout)


def bench_floor(plan: Plan) -> list[h.Result]:
    """What no 1-slot drain of onite's can pass on this machine: the job's process alone (sh reading
    its script from a memfd, started by onite's monitor code), with the cgroups a driver here would
    give it and with none. The rest of a drain's cost is the driver and the monitor's protocol."""
    n = plan.n
    results = []
    try:
        contained = h.Stats.of(floor_seconds(n, "contained") for _ in range(plan.repeats))
        results.append(h.Result.from_stats(
            FLOOR, contained.rate(n), "jobs/s", TSP_DRAIN,
            note=f"N={n} `true` started by onite.exec.jobstart in their cgroups (made, joined, left, read, removed), "
                 "no driver, monitor or record; ratio to task-spooler's drain"))
    except peers.Skip as why:
        print(f"run.py: no floor in cgroups: {why}", file=sys.stderr)
    bare = h.Stats.of(floor_seconds(n, "bare") for _ in range(plan.repeats))
    results.append(h.Result.from_stats("onite: floor, a job in no cgroup, one at a time", bare.rate(n), "jobs/s",
                                       TSP_DRAIN, note=f"N={n}: the same in no cgroup (what containment costs)"))
    return results


# --------------------------------------------------------------------------
# (i) what one job costs: system calls, new files, fsyncs, processes (strace)

COUNTED = {  # what is counted per job, by system call
    "forks": ("clone", "clone3", "fork", "vfork"),
    "execs": ("execve", "execveat"),
    "fsyncs": ("fsync", "fdatasync", "syncfs", "sync_file_range"),
}


def strace_counts(spool: OniteSpool, out: str) -> dict[str, int]:
    """Every system call of one ``onite run`` and of all its processes (strace -f), counted."""
    strace = shutil.which("strace")
    subprocess.run([strace, "-f", "-qq", "-o", out, *ONITE, "run", "-q"], env=spool.env, cwd=spool.dir, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts = {"syscalls": 0, "new files": 0, **{key: 0 for key in COUNTED}}
    with open(out, encoding="utf-8", errors="replace") as trace:
        for line in trace:
            _, _, call = line.partition(" ")
            call = call.lstrip()
            if call.startswith(("<...", "+++", "---")):
                continue  # the end of a call counted at its start; exits; signals
            name = call.split("(", 1)[0]
            counts["syscalls"] += 1
            for key, names in COUNTED.items():
                counts[key] += name in names
            failed = "= -1 " in call
            if not failed and ((name in ("open", "openat") and "O_CREAT" in call) or name in ("mkdir", "mkdirat",
                                                                                         "memfd_create", "creat")):
                counts["new files"] += 1
    os.unlink(out)
    return counts


def bench_cost(plan: Plan) -> list[h.Result]:
    """Per job: the system calls of the driver and of every process it starts (the job's own
    ``true`` included), the files and folders it creates (O_CREAT opens, mkdir: run record,
    output, result, cgroup; memfd: the script), fsyncs, forks and execs. Measured as the
    difference between a drain of N jobs and a drain of none (start-up and exit cancel out)."""
    if shutil.which("strace") is None:
        raise peers.Skip("strace is not installed (Debian: apt install strace)")
    n = max(50, plan.n // 10)
    spool = OniteSpool()
    try:
        empty = strace_counts(spool, os.path.join(spool.dir, "strace-0"))
        spool.submit_lines(["true"] * n)
        full = strace_counts(spool, os.path.join(spool.dir, "strace-n"))
    finally:
        spool.close()
    note = f"N={n} `true` jobs, 1 slot, strace -f: (drain of N − drain of none) / N"
    return [h.Result(f"onite: per job, {key}", (full[key] - empty[key]) / n, "/job", note=note) for key in full]


# --------------------------------------------------------------------------
# (a, b) draining N trivial jobs


def bench_drain(plan: Plan) -> list[h.Result]:
    """One spool for every run, 1 and 2 slots taking turns: a new file costs very differently from
    one folder to another on some file systems, and the ratios should not depend on which folders
    a spool was given."""
    n, sleepers = plan.n, max(20, plan.n // 8)
    runs: dict[str, list[float]] = {key: [] for key in ("submit", "1", "2", "sleepy 1", "sleepy 2")}
    busy: dict[str, list[float | None]] = {"1": [], "2": []}  # CPU seconds of each drain of `true`, beside runs
    spool = OniteSpool()
    try:
        for _ in range(plan.repeats):
            for slots in ("1", "2"):
                runs["submit"].append(spool.submit_lines(["true"] * n))
                elapsed, cpu = spool.drain_with_cpu("--slots", slots)
                runs[slots].append(elapsed)
                busy[slots].append(cpu)  # None where /proc/stat cannot be read: then no CPU figure at all
                spool.submit_lines(["sleep 0.01"] * sleepers)
                runs[f"sleepy {slots}"].append(spool.drain("--slots", slots))
        started = time.perf_counter()
        for i in range(plan.one_by_one):
            spool.run("submit", f"j{i}", stdin_path=spool.job)
        spool.drain()
        singles = h.Stats.of([time.perf_counter() - started])
        others = other_users_drains(spool, n, plan.repeats)
    finally:
        spool.close()
    one, two = h.Stats.of(runs["1"]), h.Stats.of(runs["2"])
    both = h.Stats.of(a + b for a, b in zip(runs["submit"][::2], runs["1"]))
    sleepy_one, sleepy_two = h.Stats.of(runs["sleepy 1"]), h.Stats.of(runs["sleepy 2"])
    return [
        h.Result.from_stats(DRAIN_1, one.rate(n), "jobs/s", BASE_RATE,
                            note=f"N={n} queued `true`, one `onite run` (its start-up included), sequential"),
        h.Result.from_stats("onite: drain, 2 slots", two.rate(n), "jobs/s", DRAIN_1,
                            note=f"N={n}, `onite run --slots 2`; ratio to 1 slot"),
        h.Result.from_stats("onite: drain, 1 slot, against tsp", one.rate(n), "jobs/s", TSP_DRAIN,
                            note=f"N={n}: the 1-slot drain again; ratio to task-spooler's drain of a filled queue"),
        h.Result.from_stats("onite: drain, 1 slot, against xargs -P1", one.rate(n), "jobs/s", peers.XARGS_1,
                            note=f"N={n}: the 1-slot drain again; ratio to xargs running the same jobs one at a time"),
        h.Result.from_stats("onite: drain, 2 slots, against xargs -P2", two.rate(n), "jobs/s", peers.XARGS_2,
                            note=f"N={n}: the 2-slot drain again; ratio to xargs running them two at a time"),
        h.Result.from_stats("onite: drain, 1 slot, against its floor", one.rate(n), "jobs/s", FLOOR,
                            note=f"N={n}: the 1-slot drain again; ratio to the floor of its jobs (floor workload)"),
        h.Result.from_stats("onite: drain of 10 ms jobs, 1 slot", sleepy_one.rate(sleepers), "jobs/s",
                            note=f"N={sleepers} jobs `sleep 0.01`: jobs that leave the driver time to keep up"),
        h.Result.from_stats("onite: drain of 10 ms jobs, 2 slots", sleepy_two.rate(sleepers), "jobs/s",
                            "onite: drain of 10 ms jobs, 1 slot", note="the same, `--slots 2`; ratio to 1 slot"),
        h.Result.from_stats("onite: end to end (submit --lines, run)", both.rate(n), "jobs/s", BASE_RATE,
                            note=f"N={n}: one `onite submit --lines`, then one `onite run`; compare tsp -S 1"),
        h.Result.from_stats("onite: end to end, one submit per job", singles.rate(plan.one_by_one), "jobs/s",
                            BASE_RATE, note=f"N={plan.one_by_one}: one `onite submit` process per job, then `onite run`"),
        *cpu_results(n, runs, busy),
        *others,
    ]


OTHER_USER = "nobody"


# --------------------------------------------------------------------------
# (r) real work: 10 ms jobs of another user, drained by root, against xargs and task-spooler

SLEEP_JOB = "sleep 0.01"
REAL_1, REAL_2 = "onite: 10 ms jobs of another user, 1 slot", "onite: 10 ms jobs of another user, 2 slots"
REAL_PAM = "onite: the same, 1 slot, each job in a PAM session of its owner's"
XARGS_SLEEP_1, XARGS_SLEEP_2 = "xargs -P1: the same 10 ms jobs", "xargs -P2: the same 10 ms jobs"
TSP_SLEEP_1, TSP_SLEEP_2 = "tsp -S 1: the same 10 ms jobs", "tsp -S 2: the same 10 ms jobs"


def xargs_sleep(n: int, at_once: int) -> None:
    """N ``sh -c 'sleep 0.01'`` by xargs, ``at_once`` at a time: what one or two slots can reach here."""
    subprocess.run(["xargs", "-P", str(at_once), "-n", "1", "/bin/sh", "-c", SLEEP_JOB], input=b"x\n" * n,
                   check=True, stdout=subprocess.DEVNULL)


def tsp_sleep(n: int, slots: int) -> float:
    """Seconds task-spooler takes to run N ``sh -c 'sleep 0.01'`` queued behind a gate, from its release."""
    q = peers.TspQueue(slots)
    gate = peers.Gate(q.dir)
    try:
        q.submit(*gate.argv)
        for _ in range(n):
            q.submit("/bin/sh", "-c", SLEEP_JOB)
        q.submit_sentinel()
        started = time.perf_counter()
        gate.release()
        q.wait_last()
        return time.perf_counter() - started
    finally:
        gate.close()
        q.close()


def bench_real(plan: Plan) -> list[h.Result]:
    """The drain a night is made of: jobs that run (10 ms each), spooled by another user (their file's
    owner) and drained by root, on 1 and 2 slots, each drain a whole ``onite run`` (its start-up
    included); beside xargs and task-spooler running the same jobs, the six taking turns in each round
    so that the machine's drift falls on all of them alike."""
    import pwd

    if os.geteuid() != 0:
        raise peers.Skip("run as root: root drains another user's jobs")
    try:
        other = pwd.getpwnam(OTHER_USER)
    except KeyError:
        raise peers.Skip(f"no user {OTHER_USER} to spool the jobs") from None
    n = max(40, plan.n // 4)
    has_tsp = shutil.which("tsp") is not None
    runs: dict[str, list[float]] = {k: [] for k in (REAL_1, REAL_2, REAL_PAM, XARGS_SLEEP_1, XARGS_SLEEP_2,
                                                     TSP_SLEEP_1, TSP_SLEEP_2)}
    spool, pam_spool = OniteSpool(), OniteSpool()
    service = pam_service()  # onite's PAM service, under a name of this run's
    if service:
        pam_spool.configure(pam="required", pam_service=service)
    for made in (spool, pam_spool):
        os.chmod(made.dir, 0o755)  # the jobs' directory: theirs to enter
    try:
        for _ in range(plan.repeats):
            for slots, name, where in ((1, REAL_1, spool), (2, REAL_2, spool), (1, REAL_PAM, pam_spool)):
                if where is pam_spool and not service:
                    continue
                where.submit_lines([SLEEP_JOB] * n)
                where.give_jobs(lambda turn: other)
                runs[name].append(where.drain("--slots", str(slots)))
            for at_once, name in ((1, XARGS_SLEEP_1), (2, XARGS_SLEEP_2)):
                started = time.perf_counter()
                xargs_sleep(n, at_once)
                runs[name].append(time.perf_counter() - started)
            if has_tsp:
                runs[TSP_SLEEP_1].append(tsp_sleep(n, 1))
                runs[TSP_SLEEP_2].append(tsp_sleep(n, 2))
    finally:
        spool.close()
        pam_spool.close()
        if service:
            os.unlink(f"/etc/pam.d/{service}")
    rate = {name: h.Stats.of(samples).rate(n) for name, samples in runs.items() if samples}
    note = f"N={n} `{SLEEP_JOB}` of {OTHER_USER}"
    results = [
        h.Result.from_stats(XARGS_SLEEP_1, rate[XARGS_SLEEP_1], "jobs/s", note=f"N={n} `sh -c '{SLEEP_JOB}'` one "
                            "at a time: what one slot of any spooler can reach here"),
        h.Result.from_stats(XARGS_SLEEP_2, rate[XARGS_SLEEP_2], "jobs/s", XARGS_SLEEP_1, note="two at a time"),
    ]
    if has_tsp:
        results += [
            h.Result.from_stats(TSP_SLEEP_1, rate[TSP_SLEEP_1], "jobs/s", XARGS_SLEEP_1,
                                note="queued behind a gate, timed from its release; output stored"),
            h.Result.from_stats(TSP_SLEEP_2, rate[TSP_SLEEP_2], "jobs/s", XARGS_SLEEP_2, note="the same, 2 slots"),
            h.Result.from_stats(REAL_1 + ", against tsp", rate[REAL_1], "jobs/s", TSP_SLEEP_1,
                                note=note + ", one `onite run` (its start-up included)"),
        ]
    results += [
        h.Result.from_stats(REAL_1 + ", against xargs", rate[REAL_1], "jobs/s", XARGS_SLEEP_1, note=note),
        h.Result.from_stats(REAL_2 + ", against xargs", rate[REAL_2], "jobs/s", XARGS_SLEEP_2,
                            note=note + ", `onite run --slots 2`"),
    ]
    if REAL_PAM in rate:
        results.append(h.Result.from_stats(REAL_PAM, rate[REAL_PAM], "jobs/s", REAL_1 + ", against xargs",
                                           note=note + ", pam = \"required\" (onite init's service file): "
                                           "the ratio is what a session costs a job"))
    return results


def pam_service() -> str | None:
    """onite's PAM service file installed as /etc/pam.d/onite-bench-PID (the caller removes it); None
    where this machine has no PAM or pamela cannot load libpam."""
    from onite.exec.pam import discover
    from onite.spool.skeleton import install_pam_service

    name = f"onite-bench-{os.getpid()}"
    if not os.path.isdir("/etc/pam.d") or not install_pam_service(Path("/etc/pam.d"), name).startswith(
            "PAM: installed"):
        return None
    if discover("required", name, True).service is None:
        os.unlink(f"/etc/pam.d/{name}")
        return None
    return name


def other_users_drains(spool: OniteSpool, n: int, repeats: int) -> list[h.Result]:
    """A root driver draining another user's jobs (the system spool's usual night): N `true` spooled,
    then given to OTHER_USER (a job is its file owner's), and drained on 1 slot; none where this is not
    root or there is no such user. Each job's process then switches to its owner's credentials, which
    the standard library does with a fork (of its monitor) instead of a vfork."""
    import pwd

    try:
        other = pwd.getpwnam(OTHER_USER)
    except KeyError:
        return []
    if os.geteuid() != 0:
        return []
    os.chmod(spool.dir, 0o755)  # the jobs' directory: theirs to enter
    elapsed, cpus = [], []
    for _ in range(repeats):
        spool.submit_lines(["true"] * n)
        spool.give_jobs(lambda turn: other)
        took, cpu = spool.drain_with_cpu()
        elapsed.append(took)
        cpus.append(cpu)
    note = f"N={n} `true` of the user {OTHER_USER}, drained by root on 1 slot"
    results = [h.Result.from_stats("onite: drain, 1 slot, another user's jobs", h.Stats.of(elapsed).rate(n), "jobs/s",
                                   DRAIN_1, note=note + "; ratio to root's own jobs")]
    if None not in cpus:
        results.append(h.Result.from_stats("onite: CPU per job, another user's jobs",
                                           h.Stats.of(c / n * 1000 for c in cpus), "ms/job", CPU_1, note=note + ": the machine's busy CPU, per job; ratio to root's own jobs"))
    return results


def cpu_results(n: int, runs: Mapping[str, Sequence[float]], busy: Mapping[str, Sequence[float | None]]) -> list[h.Result]:
    """What bounds 2 slots: the CPU a `true` job costs (every process of the machine, over each
    drain) and how many cores a drain keeps busy. Two slots cannot pass the usable cores over
    the cores one slot keeps busy, unless a job costs less CPU with two slots than with one."""
    if not busy["1"] or not busy["2"] or None in (*busy["1"], *busy["2"]):
        return []  # every drain's figure or none: each CPU sample goes with the wall time beside it
    cores = {slots: h.Stats.of(cpu / wall for cpu, wall in zip(busy[slots], runs[slots])) for slots in busy}
    per_job = {slots: h.Stats.of(cpu / n * 1000 for cpu in busy[slots]) for slots in busy}
    usable = h.usable_cores()
    return [
        h.Result.from_stats(CPU_1, per_job["1"], "ms/job", TSP_CPU,
                            note=f"N={n}: the machine's busy CPU over each 1-slot drain (driver, monitors, jobs, "
                                 "kernel), per job; ratio to task-spooler's over its drain"),
        h.Result.from_stats("onite: CPU per job, 2 slots", per_job["2"], "ms/job", CPU_1,
                            note="the same over each 2-slot drain; ratio to 1 slot"),
        h.Result.from_stats(CORES_1, cores["1"], "cores", note=f"busy CPU over wall time, of {usable} usable: "
                            "a 1-slot drain overlaps filing one job with running the next"),
        h.Result.from_stats("onite: cores busy, 2 slots", cores["2"], "cores", CORES_1,
                            note="the same for 2 slots; ratio to 1 slot"),
        h.Result.from_stats("onite: 2 slots' ceiling on these cores", h.Stats.of(usable / c for c in cores["1"].samples),
                            "× 1 slot", note=f"{usable} usable cores over the cores 1 slot keeps busy: the most "
                            "`--slots 2` can gain over 1 slot at 1 slot's CPU per job (compare the 2-slot drain's ratio)"),
        h.Result.from_stats("onite: drain ceiling on these cores", h.Stats.of(usable / cpu * n for cpu in busy["2"]),
                            "jobs/s", TSP_DRAIN, note=f"{usable} usable cores, every one busy, at the 2-slot drain's CPU "
                            "per job: what no number of slots can pass; ratio to task-spooler's drain"),
    ]


# --------------------------------------------------------------------------
# (c) single commands


CLI_BASE = "python -c pass, beside onite's commands"
CLI_TYPER = "python -c 'import typer': the floor of a typer command line"
CLI_STDLIB = "python -c 'import pathlib, datetime, json, tomllib, …': the standard library's floor"
STDLIB = ("pathlib", "datetime", "json", "tomllib", "typing", "enum", "signal", "functools")
BASELINES = (CLI_BASE, CLI_STDLIB, CLI_TYPER)
CLI_USERS = ("nobody", "daemon", "bin")  # besides root, as root: a regular install's spool holds several users' jobs


def cli_spool(queued: int, kept: int) -> tuple[OniteSpool, list[str]]:
    """A spool of ``kept`` results of one drain and ``queued`` jobs, of root and CLI_USERS in turn (as root);
    the users whose jobs they are."""
    import pwd

    spool = OniteSpool()
    users = []
    if os.geteuid() == 0:
        os.chmod(spool.dir, 0o755)  # the jobs' directory: theirs to enter
        users = [pwd.getpwnam(name) for name in CLI_USERS if name in {p.pw_name for p in pwd.getpwall()}]
    set_keys(spool, keep=str(kept))
    def in_turn(turn: int):  # root, then each of ``users``
        return users[turn % (len(users) + 1) - 1] if turn % (len(users) + 1) else None

    spool.submit_lines(["true"] * kept)  # b1-00001 …: root's own is each (len(users) + 1)th
    spool.give_jobs(in_turn)
    spool.drain()
    spool.submit_lines(["true"] * queued)  # b2-00001 …
    spool.give_jobs(in_turn)
    return spool, ["root" if os.geteuid() == 0 else "you", *(user.pw_name for user in users)]


def bench_cli(plan: Plan) -> list[h.Result]:
    """The commands people type all day, on a spool of 1,000 queued jobs and 1,000 kept results of several users,
    each timed beside ``python -c pass`` in the same rounds (one of each in turn, so that the machine's load falls
    on all alike): the ratio is how many interpreter start-ups a command costs."""
    size = plan.sizes[0]
    spool, users = cli_spool(size, size)
    own = lambda i, batch: f"b{batch}-{1 + len(users) * i:05d}"  # noqa: E731 - this user's own jobs
    rounds = plan.latency_repeats
    python, onite = regular_install(os.path.join(spool.dir, "install"))
    env = {key: value for key, value in spool.env.items() if key != "PYTHONPATH"}  # the install's own onite
    commands = {
        CLI_BASE: lambda i: [python, "-c", "pass"],
        CLI_STDLIB: lambda i: [python, "-c", f"import {', '.join(STDLIB)}"],
        CLI_TYPER: lambda i: [python, "-c", "import typer"],
        "submit": lambda i: [onite, "submit", f"one-{i}"],
        "find": lambda i: [onite, "find", own(rounds + 2, 2)],  # a job of root's that no round cancels
        "list": lambda i: [onite, "list"],
        "status": lambda i: [onite, "status"],
        "cancel": lambda i: [onite, "cancel", own(i, 2)],
        "output": lambda i: [onite, "output", own(i, 1)],
        "wait": lambda i: [onite, "wait", own(i, 1)],
        "--help": lambda i: [onite, "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}  # user and system time of the command's process
    try:
        for i in range(-2, rounds):  # two rounds of warm-up
            for name, argv in commands.items():
                with open(spool.job, "rb") as stdin:
                    before, started = children_cpu(), time.perf_counter()
                    subprocess.run(argv(i + 2), stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=env, cwd=spool.dir, check=True)
                    if i >= 0:
                        times[name].append(time.perf_counter() - started)
                        cpu[name].append(children_cpu() - before)
    finally:
        spool.close()
    note = f"{size:,} queued and {size:,} kept results of {', '.join(users)}; median of {rounds} rounds"
    results = [h.Result.from_stats(CLI_BASE, h.Stats.of(times[CLI_BASE]).scaled(1000), "ms", BASE_CLI,
                                   note="timed in turns with each command below; ratio to the peers' baseline")]
    results.append(h.Result.from_stats(CLI_STDLIB, h.Stats.of(times[CLI_STDLIB]).scaled(1000), "ms", CLI_BASE,
                                       note="the standard modules every everyday command imports, nothing else"))
    results.append(h.Result.from_stats(CLI_TYPER, h.Stats.of(times[CLI_TYPER]).scaled(1000), "ms", CLI_BASE,
                                       note="typer imported, nothing else: what no command of onite's can pass"))
    results += [h.Result.from_stats(f"onite {name}, 1k queued, 1k kept", h.Stats.of(times[name]).scaled(1000), "ms",
                                    CLI_BASE, note=note if name == "submit" else "")
                for name in commands if name not in BASELINES]
    # CPU time: what the machine's other load changes least (a busy machine stretches the wall time of all)
    results += [h.Result.from_stats(f"{name}, CPU" if name in BASELINES else f"onite {name}, CPU",
                                    h.Stats.of(cpu[name]).scaled(1000), "ms CPU",
                                    None if name == CLI_BASE else f"{CLI_BASE}, CPU",
                                    note="user and system time of the process, the same rounds" if name == CLI_BASE
                                    else "") for name in commands]
    return results


def regular_install(folder: str) -> tuple[str, str]:
    """onite as a regular (not editable) install has it, in a venv made in ``folder``: its interpreter and
    its ``onite`` script.

    The venv sees this installation's packages (typer, rich …) through a .pth line, which site does not
    scan for .pth files of its own; onite's files are copied in and compiled, as pip's wheel install does.
    An editable install's finder imports pathlib, re and more into every start-up, ``python -c pass``'s
    too: about 20 ms here, which halves every ratio against it.
    """
    import compileall
    import importlib.util
    import site

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True)
    python = os.path.join(folder, "bin", "python")
    packages = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              check=True, capture_output=True, text=True).stdout.strip()
    Path(packages, "installed.pth").write_text("".join(f"{path}\n" for path in site.getsitepackages()))
    source = list(importlib.util.find_spec("onite").submodule_search_locations)[0]
    shutil.copytree(source, os.path.join(packages, "onite"), ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(os.path.join(packages, "onite"), quiet=1)
    script = os.path.join(folder, "bin", "onite")
    Path(script).write_text(f"#!{python}\nimport sys\nfrom onite.__main__ import main\nsys.exit(main())\n")
    os.chmod(script, 0o755)
    return python, script


def children_cpu() -> float:
    """User and system seconds of every child this process has waited for."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------
# (d) bulk submit


def bench_bulk(plan: Plan) -> list[h.Result]:
    stats = h.measure(lambda spool: spool.submit_lines(["true"] * plan.bulk), plan.repeats,
                      setup=OniteSpool, teardown=OniteSpool.close)
    return [h.Result.from_stats("onite submit --lines: bulk rate", stats.rate(plan.bulk), "jobs/s", BASE_RATE,
                                note=f"{plan.bulk} lines, one process, start-up included, each job fsync'ed")]


# --------------------------------------------------------------------------
# (e) listing, (f) per-job cost at scale, (g) the driver's memory


def marker_lines(total: int, plan: Plan, stamps: str) -> list[str]:
    """``total`` jobs of ``true``; jobs at the window edges record the time; then one stops the driver.

    The job that stops it sends SIGTERM to its parent, the driver: it lets
    the running job end, starts nothing more and exits, leaving the rest queued.
    """
    lines = ["true"] * total
    for k in range(plan.windows + 1):
        lines[plan.warm + k * plan.stride - 1] = f"date +%s%N >> {stamps}"
    lines[plan.warm + plan.windows * plan.stride] = "kill -TERM $PPID"
    return lines


def drain_front(spool: OniteSpool, stamps: str, timeout: float = 600) -> tuple[list[float], int]:
    """Drain until the stop job; return seconds per job of each window and the driver's peak RSS (KiB)."""
    proc = subprocess.Popen([*ONITE, "run", "-q"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            env=spool.env, cwd=spool.dir)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)  # the stop job never ran: do not drain a whole big queue
            deadline = float("inf")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args)
    stamps_ns = [int(x) for x in Path(stamps).read_text().split()]
    return [(b - a) / 1e9 for a, b in zip(stamps_ns, stamps_ns[1:])], usage.ru_maxrss


def bench_scale(plan: Plan, sections: set[str]) -> list[h.Result]:
    """One spool, grown from the small size to the big one, so that both per-job figures come from
    the same folders (see bench_drain); the front of the queue is drained at each end."""
    small, middle, large = plan.sizes
    results: list[h.Result] = []
    per_job: dict[int, h.Stats] = {}
    rss: dict[int, int] = {}

    def list_ms(spool: OniteSpool, size: int) -> None:
        if "list" in sections:
            stats = h.time_cmd([*ONITE, "list", "--json"], plan.repeats, warmup=1, env=spool.env)
            results.append(h.Result.from_stats(f"onite list --json, {size:,} queued", stats.scaled(1000), "ms",
                                               BASE_CLI, note="stat-only listing, one JSON document"))

    def measure_front(spool: OniteSpool, size: int) -> None:
        if "scale" in sections:
            samples, peak = drain_front(spool, os.path.join(spool.dir, f"stamps-{size}"))
            per_job[size] = h.Stats.of(s / plan.stride for s in samples)
            rss[size] = peak

    spool = OniteSpool()
    try:
        if "scale" in sections:  # the first jobs of a spool cost more (new folders, no retention yet)
            spool.submit_lines(["true"] * plan.warm_spool)
            spool.drain()
        spool.submit_lines(marker_lines(small, plan, os.path.join(spool.dir, f"stamps-{small}")))
        list_ms(spool, small)
        measure_front(spool, small)
        # what the first drain left stays at the front, before the next batch's markers
        left = small - (plan.warm + plan.windows * plan.stride + 1) if "scale" in sections else small
        fill = [spool.submit_lines(marker_lines(middle - left, plan, os.path.join(spool.dir, f"stamps-{large}")))]
        list_ms(spool, middle)
        fill.append(spool.submit_lines(["true"] * (large - middle)))
        list_ms(spool, large)
        results.append(h.Result("onite submit --lines: filling a big queue", (large - left) / sum(fill), "jobs/s",
                                BASE_RATE, note=f"{middle - left:,} then {large - middle:,} lines into one folder"))
        measure_front(spool, large)
    finally:
        spool.close()
    if per_job:
        small_name = PER_JOB_SMALL.format(f"{small:,}")
        note = (f"{plan.windows} windows of {plan.stride} jobs after {plan.warm} or more drained (and"
                f" {plan.warm_spool} through the spool before), timed by jobs that run `date +%s%N`")
        results.append(h.Result.from_stats(small_name, per_job[small].scaled(1000), "ms/job", note=note))
        results.append(h.Result.from_stats(PER_JOB_SMALL.format(f"{large:,}"), per_job[large].scaled(1000), "ms/job",
                                           small_name, note="the same spool grown to the big queue, the rest staying queued"))
        results.append(h.Result(f"onite run: peak RSS, {small:,} queued", rss[small] / 1024, "MiB", BASE_RSS,
                                note="the driver process (its jobs are smaller), from wait4 rusage"))
        results.append(h.Result(f"onite run: peak RSS, {large:,} queued", rss[large] / 1024, "MiB", BASE_RSS,
                                note="the same with the big queue"))
    return results


# --------------------------------------------------------------------------
# (h) the morning: reading a night of results; the cost of a notice per job


def set_keys(spool: OniteSpool, **values: str) -> None:
    """Set keys of the spool's onite.toml (values are TOML text); a key already there is replaced."""
    path = Path(spool.root) / "onite.toml"
    lines = [line for line in path.read_text().splitlines() if line.split("=")[0].strip() not in values]
    path.write_text("\n".join(lines + [f"{key} = {value}" for key, value in values.items()]) + "\n")


def bench_morning(plan: Plan) -> list[h.Result]:
    """One spool keeps a night of ``plan.night`` results (one job in 50 fails); the morning's commands
    read them. Then the same number of jobs is drained with a notice per job, and without, in turns."""
    n = plan.night
    spool = OniteSpool()
    drains: dict[str, list[float]] = {"plain": [], "notified": []}
    try:
        set_keys(spool, keep=str(3 * n * (plan.repeats + 1)))
        spool.submit_lines(["exit 3" if i % 50 == 49 else "true" for i in range(n)])
        spool.drain()
        page = os.path.join(spool.dir, "night.html")
        timed = {
            "report": h.time_cmd([*ONITE, "report"], plan.repeats, warmup=1, env=spool.env),
            "report --json": h.time_cmd([*ONITE, "report", "--json"], plan.repeats, warmup=1, env=spool.env),
            "report --html": h.time_cmd([*ONITE, "report", "--json", "--html", page], plan.repeats, warmup=1,
                                        env=spool.env),
            "status --json": h.time_cmd([*ONITE, "status", "--json"], plan.repeats, warmup=1, env=spool.env),
            "wait": h.time_cmd([*ONITE, "wait", "b1-00001"], plan.latency_repeats, warmup=1, env=spool.env,
                               stderr=subprocess.DEVNULL),
        }
        page_kib = os.path.getsize(page) / 1024
        for _ in range(plan.repeats):
            for kind in ("plain", "notified"):
                if kind == "notified":
                    set_keys(spool, notify='"command"', notify_on='"always"', notify_command='"/bin/true"')
                else:
                    set_keys(spool, notify='"none"')
                spool.submit_lines(["true"] * n)
                drains[kind].append(spool.drain())
    finally:
        spool.close()
    notes = {"report": "table and timeline, written to a file (no colour)", "report --json": "one JSON document",
             "report --html": "the page (and --json, to keep the terminal out); {page_kib:,.0f} KiB",
             "status --json": "the night's summary included", "wait": "a job that finished: one look, exit 0"}
    results = [h.Result.from_stats(f"onite {name}, {n:,} finished", stats.scaled(1000), "ms", BASE_CLI,
                                   note=notes[name].format(page_kib=page_kib)) for name, stats in timed.items()]
    plain = h.Stats.of(drains["plain"])
    results.append(h.Result.from_stats("onite: drain, no notices", plain.rate(n), "jobs/s", BASE_RATE,
                                       note=f"N={n} `true`, 1 slot, in turns with the next"))
    results.append(h.Result.from_stats("onite: drain, a notice per job", h.Stats.of(drains["notified"]).rate(n),
                                       "jobs/s", "onite: drain, no notices",
                                       note="notify = command, notify_on = always, notify_command = /bin/true"))
    return results


# --------------------------------------------------------------------------
# Command line


def creation_cost_us(directory: str, count: int = 200) -> float:
    """Median microseconds to create an empty file in a fresh folder under ``directory``.

    New files (inodes) are what a spooler makes per job; their cost varies by
    orders of magnitude between file systems and even between folders of one
    (ext4 looks for a free inode near the parent folder's).
    """
    folder = tempfile.mkdtemp(prefix="bench-create-", dir=directory)
    try:
        samples = []
        for i in range(count):
            started = time.perf_counter()
            os.close(os.open(os.path.join(folder, str(i)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            samples.append(time.perf_counter() - started)
        return h.Stats.of(samples).median * 1e6
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def prepare_bytecode() -> str:
    """Compile onite's modules as an installation does, and let every command use the .pyc files.

    With PYTHONDONTWRITEBYTECODE set (some sandboxes set it) an editable
    install compiles every module from source at every start: tens of
    milliseconds that no installed onite pays.
    """
    import compileall
    import importlib.util

    dropped = os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None
    spec = importlib.util.find_spec("onite")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("run.py: onite is not importable here; run me with the interpreter onite is installed in")
    folder = list(spec.submodule_search_locations)[0]
    compileall.compile_dir(folder, quiet=1)
    return f"modules in {folder}, compiled" + (" (PYTHONDONTWRITEBYTECODE unset for the run)" if dropped else "")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, single runs: a smoke test, not figures")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--dir", help="where spools and peer queues are made (default: the temporary directory)")
    parser.add_argument("--only", help=f"comma-separated subset of onite's workloads: {', '.join(SECTIONS)}")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"comma-separated peers to run (default {','.join(PEERS)}; '' for none)")
    return parser.parse_args(argv)


def subset(value: str | None, known: Sequence[str], what: str) -> list[str]:
    if value is None:
        return list(known)
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in names if v not in known]
    if unknown:
        raise SystemExit(f"run.py: unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else DEFAULT
    sections = set(subset(args.only, SECTIONS, "workload"))
    peer_names = subset(args.peers, PEERS, "peer")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        tempfile.tempdir = os.path.abspath(args.dir)  # peers.py's queues (mkdtemp) go there too
    work = tempfile.gettempdir()
    bytecode = prepare_bytecode()
    env = h.describe_environment()
    env["onite"] = f"{' '.join(ONITE)}; {bytecode}"
    env["work dir"] = f"{work} ({h.filesystem_type(work)}); creating a file there: {creation_cost_us(work):.0f} µs"
    env.update({f"{pkg} version": peers.package_version(pkg) for pkg in peers.PACKAGES if pkg != "at"})
    workloads: list[tuple[str, Callable[[], list[h.Result]]]] = []
    workloads += [(f"peer {name}", lambda name=name: peers.PEERS[name](plan.peer)) for name in peer_names]
    if "real" in sections:
        workloads.append(("real", lambda: bench_real(plan)))
    if "drain" in sections:
        workloads.append(("drain", lambda: bench_drain(plan)))
    if "floor" in sections:
        workloads.append(("floor", lambda: bench_floor(plan)))
    if "cost" in sections:
        workloads.append(("cost", lambda: bench_cost(plan)))
    if "cli" in sections:
        workloads.append(("cli", lambda: bench_cli(plan)))
    if "bulk" in sections:
        workloads.append(("bulk", lambda: bench_bulk(plan)))
    if sections & {"list", "scale"}:
        workloads.append(("list and scale", lambda: bench_scale(plan, sections)))
    if "morning" in sections:
        workloads.append(("morning", lambda: bench_morning(plan)))
    results: list[h.Result] = []
    skipped: list[str] = []
    began = time.perf_counter()
    for name, workload in workloads:
        print(f"run.py: measuring {name}…", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            results += workload()
        except peers.Skip as e:
            skipped.append(f"{name}: {e}")
            print(f"run.py: skipped {name}: {e}", file=sys.stderr)
            continue
        print(f"run.py: {name} took {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    extra = {
        "load average at end": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "run time": f"{time.perf_counter() - began:.0f} s",
        "plan": {k: v for k, v in dataclasses.asdict(plan).items() if k != "peer"},
        "peer plan": dataclasses.asdict(plan.peer),
        "skipped": skipped,
    }
    h.print_report(results, env, as_json=args.json, extra=extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
