"""The benchmark scripts that drive onite's own code keep working as that code changes.

benchmarks/floor.py starts jobs with onite's job-starting code (onite.exec.jobstart, contain,
limits) and no driver: these tests run it on a few jobs and check that it says how long they took
and leaves no cgroup behind. Nothing here is timed (docs/performance.md says what it measures).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import job_cgroup_folders

FLOOR = Path(__file__).resolve().parent.parent / "benchmarks" / "floor.py"


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
