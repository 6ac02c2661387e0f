"""The benchmark scripts that drive onite's own code keep working as that code changes.

benchmarks/floor.py starts jobs with onite's job-starting code (onite.exec.jobstart, contain,
limits) and no driver: these tests run it on a few jobs and check that it says how long they took
and leaves no cgroup behind. benchmarks/run.py's CPU figures (what a job costs, how many cores a
drain keeps busy, what bounds two slots) are checked as arithmetic on given samples, and the
machine's busy CPU as read from /proc/stat; the command figures' regular install of the tree is
checked to run its own copy. Nothing here is timed (docs/performance.md says what it measures).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import job_cgroup_folders

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
FLOOR = BENCHMARKS / "floor.py"


@pytest.fixture(scope="module")
def bench():
    """benchmarks/run.py as a module (it imports harness and peers from its own folder)."""
    spec = importlib.util.spec_from_file_location("onite_benchmarks_run", BENCHMARKS / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def run_floor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FLOOR), *args], capture_output=True, text=True, timeout=120)


def test_the_floor_without_cgroups_starts_its_jobs_and_says_how_long_they_took(tmp_path):
    done = run_floor("5", "bare")
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 0


def test_the_floor_refuses_what_it_does_not_know():
    for args in ((), ("five", "bare"), ("5", "loose")):
        done = run_floor(*args)
        assert done.returncode == 2 and done.stderr.startswith("usage: floor.py")


def leftovers() -> list[str]:
    """floor.py's cgroups still there, in every folder a driver here would make job cgroups in."""
    return [f"{folder}/{name}" for folder in job_cgroup_folders() if os.path.isdir(folder)
            for name in os.listdir(folder) if name.startswith("floor-")]


def test_the_floor_in_cgroups_removes_every_cgroup_it_made_or_says_why_it_cannot():
    before = leftovers() if os.geteuid() == 0 else []
    done = run_floor("5", "contained")
    if done.returncode == 3:  # not root, or no cgroups here: it says so instead of measuring nothing
        assert done.stderr.startswith("floor.py: nothing contains jobs here")
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 0
    assert leftovers() == before


def test_the_machines_busy_cpu_grows_by_what_a_process_burns(bench):
    before = bench.h.busy_cpu_seconds()
    spent = time.process_time()
    while time.process_time() - spent < 0.3:  # CPU, not wall time: a busy loop of 0.3 s of this process's CPU
        pass
    after = bench.h.busy_cpu_seconds()
    assert before is not None and after is not None
    assert after - before >= 0.2  # every process counts, so at least what this one burnt, less a tick or two
    assert bench.h.usable_cores() >= 1


def test_the_cpu_figures_say_what_bounds_two_slots(bench):
    n = 1000
    runs = {"1": [2.0, 2.5], "2": [1.5, 1.6]}  # wall seconds of each drain
    busy = {"1": [3.0, 3.5], "2": [3.0, 3.2]}  # the machine's busy CPU seconds over each
    figures = {r.name: r for r in bench.h.with_ratios([
        bench.h.Result(bench.TSP_DRAIN, 500.0, "jobs/s"), bench.h.Result(bench.TSP_CPU, 2.0, "ms/job"),
        *bench.cpu_results(n, runs, busy)])}
    usable = bench.h.usable_cores()
    per_job = figures["onite: CPU per job, 1 slot"]
    assert per_job.value == pytest.approx(3.25) and per_job.ratio == pytest.approx(3.25 / 2.0)
    assert figures["onite: CPU per job, 2 slots"].ratio == pytest.approx(3.1 / 3.25)
    cores = figures["onite: cores busy, 1 slot"]
    assert (cores.min, cores.max) == (pytest.approx(1.4), pytest.approx(1.5))
    assert figures["onite: 2 slots' ceiling on these cores"].value == pytest.approx(
        (usable / 1.5 + usable / 1.4) / 2)
    ceiling = figures["onite: drain ceiling on these cores"]
    assert ceiling.value == pytest.approx((usable / 3.0 * n + usable / 3.2 * n) / 2)
    assert ceiling.ratio == pytest.approx(ceiling.value / 500.0)


def test_without_cpu_figures_the_drain_reports_none(bench):
    assert bench.cpu_results(10, {"1": [1.0], "2": [1.0]}, {"1": [], "2": []}) == []


def test_an_ext4_without_a_journal_is_told_from_one_with(bench, tmp_path):
    harness = sys.modules["harness"]
    sys_block, jbd2 = tmp_path / "dev-block", tmp_path / "jbd2"
    sys_block.mkdir()
    jbd2.mkdir()
    (sys_block / "254:0").symlink_to("../../devices/virtio1/block/vda")
    (sys_block / "7:1").symlink_to("../../devices/virtual/block/loop1")
    (jbd2 / "loop1-8").mkdir()
    assert harness.has_journal("7:1", sys_block=str(sys_block), jbd2=str(jbd2))
    assert not harness.has_journal("254:0", sys_block=str(sys_block), jbd2=str(jbd2))
    assert harness.has_journal("8:1", sys_block=str(sys_block), jbd2=str(jbd2))  # cannot tell: not said
    assert harness.filesystem_type("/proc/self") == "proc"


def test_the_cli_figures_run_a_regular_install_of_this_tree(bench, tmp_path):
    """Its own copy of onite, and no editable finder importing pathlib into the baseline's start-up."""
    python, onite = bench.regular_install(str(tmp_path / "install"))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # as bench_cli runs it
    probe = subprocess.run([python, "-c", "import sys; before = 'pathlib' in sys.modules; import onite; "
                            "print(before, onite.__file__)"], capture_output=True, text=True, check=True, cwd=tmp_path,
                           env=env)
    before, where = probe.stdout.split()
    assert before == "False" and where.startswith(str(tmp_path / "install"))
    assert subprocess.run([onite, "--version"], capture_output=True, text=True).stdout == "onite 0.1.0\n"
