"""Reusable measuring helpers for onite's benchmarks.

Everything here is deliberately small and dependency-free (standard library
only) so that any benchmark script can ``import harness`` from this folder:

* ``measure`` / ``measure_phases`` time a callable K times;
* ``time_cmd`` / ``median_cmd_ms`` time one command invocation K times;
* ``peak_rss_kib`` gives the peak resident set size of a child process;
* ``busy_cpu_seconds`` / ``usable_cores`` say how much of the machine's CPU
  a workload kept busy (every process, the kernel's own workers included);
* ``Result`` is one reported figure, ``with_ratios`` relates figures to a
  baseline measured in the same run, ``print_report`` prints them as a table
  or as one JSON document;
* ``describe_environment`` says what machine the figures come from.

Timings are wall-clock (``time.perf_counter``): what a user waits for. They are
reported, never asserted: they depend on the machine and on its other load.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


# --------------------------------------------------------------------------
# Samples and their summary


@dataclasses.dataclass(frozen=True)
class Stats:
    """Summary of repeated samples (seconds, ms, jobs/s… as the caller chose)."""

    median: float
    min: float
    max: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Iterable[float]) -> Stats:
        values = tuple(samples)
        if not values:
            raise ValueError("no samples")
        return cls(statistics.median(values), min(values), max(values), values)

    def scaled(self, factor: float) -> Stats:
        """The same samples multiplied by ``factor`` (e.g. 1000 for s → ms)."""
        return Stats.of(v * factor for v in self.samples)

    def rate(self, count: float) -> Stats:
        """Per-second rate of ``count`` items, each sample being seconds.

        Computed per sample (not from the median time) so min and max stay
        actual observed rates.
        """
        return Stats.of(count / v for v in self.samples)

    @property
    def total(self) -> float:
        return sum(self.samples)


def measure(
    fn: Callable[[Any], object],
    repeats: int = 3,
    *,
    setup: Callable[[], Any] | None = None,
    teardown: Callable[[Any], object] | None = None,
    warmup: int = 0,
) -> Stats:
    """Wall seconds of ``fn(context)``, ``repeats`` times.

    ``setup()`` runs before each call, untimed, and its return value is the
    context handed to ``fn`` and then to ``teardown`` (which runs even if
    ``fn`` fails): a fresh queue per repetition keeps repetitions independent.
    ``warmup`` untimed calls first fill caches (page cache, dentries, the
    interpreter's own imports) that a cold first run would otherwise charge.
    """

    def one_run() -> float:
        context = setup() if setup else None
        try:
            start = time.perf_counter()
            fn(context)
            return time.perf_counter() - start
        finally:
            if teardown:
                teardown(context)

    for _ in range(warmup):
        one_run()
    return Stats.of(one_run() for _ in range(repeats))


def measure_phases(fn: Callable[[], Mapping[str, float]], repeats: int = 3) -> dict[str, Stats]:
    """Repeat ``fn`` that times its own phases and returns ``{phase: seconds}``.

    For workloads where one run has several parts worth reporting apart
    (e.g. filling a queue, then draining it), and only the workload knows
    where one part ends.
    """
    runs = [fn() for _ in range(repeats)]
    return {phase: Stats.of(run[phase] for run in runs) for phase in runs[0]}


def busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has been busy since boot: user, nice, system, irq and
    softirq time of /proc/stat's ``cpu`` line (not idle, iowait, or time the hypervisor gave
    to other machines). Every process counts, so a workload's figure is the difference over
    it, on an otherwise quiet machine; None where /proc/stat cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 8 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def usable_cores() -> int:
    """Logical CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


class Laps:
    """Stopwatch for ``measure_phases``: ``lap(name)`` records the time since
    the previous lap (or since creation) under ``name``."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = now - self._last
        self._last = now


# --------------------------------------------------------------------------
# Commands


def time_cmd(argv: Sequence[str], repeats: int = 20, *, warmup: int = 2, **run_kwargs: Any) -> Stats:
    """Wall seconds of ``subprocess.run(argv)``, ``repeats`` times.

    This is the latency a script pays per invocation: fork/exec, the program's
    start-up and work, and its exit. Output goes to /dev/null unless the
    caller says otherwise (a pipe would add reading to the figure). The
    command must succeed, or the figure would time an error path.
    """
    run_kwargs.setdefault("stdin", subprocess.DEVNULL)
    run_kwargs.setdefault("stdout", subprocess.DEVNULL)
    run_kwargs.setdefault("check", True)
    return measure(lambda _: subprocess.run(argv, **run_kwargs), repeats, warmup=warmup)


def median_cmd_ms(argv: Sequence[str], repeats: int = 20, **run_kwargs: Any) -> float:
    """Median wall time of one invocation of ``argv``, in milliseconds."""
    return time_cmd(argv, repeats, **run_kwargs).median * 1000


def peak_rss_kib(argv: Sequence[str], **popen_kwargs: Any) -> int:
    """Peak resident set size (KiB) of the command ``argv``, run to its end.

    Uses the rusage that wait4(2) returns for exactly this child, as
    ``/usr/bin/time -f %M`` does, without needing that package: the kernel
    keeps the high-water mark, so even a process living a millisecond is
    measured (polling /proc/PID/status VmHWM can miss it or read it after
    exit). The figure is the largest single process among the child and the
    descendants it waited for, not the sum of a process tree.
    """
    popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
    popen_kwargs.setdefault("stdout", subprocess.DEVNULL)
    proc = subprocess.Popen(argv, **popen_kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    # Tell Popen the child is reaped, so it never waits for that pid again.
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv)
    return usage.ru_maxrss  # KiB on Linux


# --------------------------------------------------------------------------
# Results


@dataclasses.dataclass(frozen=True)
class Result:
    """One reported figure.

    ``value`` is the median; ``ratio`` is ``value / baseline value`` where
    ``baseline_name`` names another Result of the same run and unit (filled
    in by ``with_ratios``). ``min``/``max`` give the spread over repetitions
    and ``note`` says what was measured (N, options, caveats).
    """

    name: str
    value: float
    unit: str
    baseline_name: str | None = None
    ratio: float | None = None
    min: float | None = None
    max: float | None = None
    note: str = ""

    @classmethod
    def from_stats(cls, name: str, stats: Stats, unit: str, baseline_name: str | None = None,
                   note: str = "") -> Result:
        return cls(name, stats.median, unit, baseline_name, None, stats.min, stats.max, note)


def with_ratios(results: Sequence[Result]) -> list[Result]:
    """Fill in each result's ratio to its baseline from the same list.

    A ratio needs the baseline to be in this run (figures from another run or
    machine are not comparable) and in the same unit; otherwise it stays None.
    """
    by_name = {r.name: r for r in results}
    out = []
    for r in results:
        base = by_name.get(r.baseline_name) if r.baseline_name else None
        if base is not None and base.unit == r.unit and base.value:
            r = dataclasses.replace(r, ratio=r.value / base.value)
        out.append(r)
    return out


def _fmt(value: float | None) -> str:
    """Three significant figures at least, thousands separated; '-' for none."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_table(results: Sequence[Result]) -> str:
    """Results as an aligned text table, one figure a line, notes after."""
    headers = ("figure", "median", "min–max", "unit", "ratio", "ratio to")
    rows = [
        (
            r.name,
            _fmt(r.value),
            f"{_fmt(r.min)}–{_fmt(r.max)}" if r.min is not None else "",
            r.unit,
            f"{r.ratio:.2f}×" if r.ratio is not None else "",
            r.baseline_name if r.ratio is not None else "",
        )
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = {1, 2, 4}  # right-align numbers so magnitudes line up

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [line(headers), line(["-" * w for w in widths])]
    lines += [line(row) for row in rows]
    notes = [f"  {r.name}: {r.note}" for r in results if r.note]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


def format_environment(env: Mapping[str, Any]) -> str:
    return "\n".join(f"{key}: {value}" for key, value in env.items())


def print_report(
    results: Sequence[Result],
    env: Mapping[str, Any],
    *,
    as_json: bool = False,
    extra: Mapping[str, Any] | None = None,
    file: Any = None,
) -> None:
    """Print the environment and the results (ratios filled in).

    With ``as_json`` it is one JSON document ``{"environment", "results",
    **extra}``; otherwise the environment lines, a blank line and the table.
    ``extra`` carries run parameters and skipped workloads.
    """
    file = file or sys.stdout
    results = with_ratios(results)
    if as_json:
        doc = {"environment": dict(env), **(extra or {}), "results": [dataclasses.asdict(r) for r in results]}
        json.dump(doc, file, indent=2)
        file.write("\n")
        return
    print(format_environment(env), file=file)
    for key, value in (extra or {}).items():
        print(f"{key}: {value}", file=file)
    print(file=file)
    print(format_table(results), file=file)


# --------------------------------------------------------------------------
# Environment


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _unescape_mount_path(path: str) -> str:
    """/proc/self/mountinfo writes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and path[i + 1:i + 4].isdigit():
            out.append(chr(int(path[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def filesystem_type(path: str) -> str:
    """File system type of the mount holding ``path`` (e.g. ext4, tmpfs), and ``ext4 (no journal)``
    for an ext4 without one.

    The longest mount point that contains the path wins, which is how the
    kernel resolves it (barring over-mounts, which the last entry settles).
    An ext4 without a journal never reuses an inode freed in the last five
    minutes or so: each new file skips past all of them, so on such a disk a
    spooler's figures depend on how much was deleted just before
    (docs/performance.md).
    """
    target = os.path.realpath(path)
    best, best_type, best_device = "", "unknown", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields, _, rest = line.partition(" - ")
                words = fields.split()
                mount_point = _unescape_mount_path(words[4])
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, best_type, best_device = mount_point, rest.split()[0], words[2]
    except OSError:
        pass
    if best_type == "ext4" and not has_journal(best_device):
        return "ext4 (no journal)"
    return best_type


def has_journal(device: str, *, sys_block: str = "/sys/dev/block", jbd2: str = "/proc/fs/jbd2") -> bool:
    """Does the ext4 on ``device`` (``major:minor``) have a journal? Its journal has a folder in
    /proc/fs/jbd2 named after the block device (``vda-8``). True when it cannot be told."""
    try:
        name = os.path.basename(os.readlink(os.path.join(sys_block, device)))
        return any(entry.rpartition("-")[0] == name for entry in os.listdir(jbd2))
    except OSError:
        return True


def memory_total() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def describe_environment() -> dict[str, str]:
    """What the figures were measured on, for docs and for judging noise.

    The load average is taken at the start: figures from a machine that was
    busy with something else are slower and more spread out.
    """
    tmp = tempfile.gettempdir()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "cpu": cpu_model(),
        "cores": f"{os.cpu_count()} logical, {usable} usable by this process",
        "memory": memory_total(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})",
        "temp dir": f"{tmp} ({filesystem_type(tmp)})",
        "load average at start": load,
    }
