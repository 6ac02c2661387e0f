"""A job's start made ready ahead (onite.exec.spawner READY/GO/DROP, onite.drain.start.Starter.read_ahead):
while every slot is busy, a waiting monitor makes the next job's cgroups and joins them; the pick and the
claim still decide what runs, and nothing of a job made ready but not started is left behind.

Real drivers, real monitors, real cgroups (root, cgroup v2); jobs gated on files the tests remove."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
import signal
from pathlib import Path

import pytest
from conftest import log_lines, needs_root, result, run_cli, start_driver, wait_for

from onite.exec import contain

pytestmark = needs_root


@pytest.fixture
def base():
    """The folder of the jobs' cgroups a driver here uses (skips where jobs get none)."""
    found = contain.discover(True)
    if found.kind != contain.CGROUP2:
        pytest.skip(f"jobs get no cgroup v2 here: {found.describe()}")
    return Path(found.base)


def submit(name: str, body: str, *args: str) -> None:
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


def run_id(spool: Path, name: str) -> str | None:
    for record in (spool / "running").glob(f"*/{name}@run"):
        try:
            return json.loads(record.read_text().splitlines()[0])["run_id"]
        except (OSError, IndexError, ValueError):
            return None
    return None


def made_ready(base: Path, spool: Path, running: str) -> tuple[Path, int] | None:
    """The cgroup of a run made ready ahead by the driver running ``running``, and the monitor waiting in it
    (a run's id names its driver's pid: another test's leftovers are not taken for it)."""
    busy = run_id(spool, running)
    if busy is None:
        return None
    driver = busy.split("-")[-2]
    for folder in base.iterdir():
        if not folder.is_dir() or folder.name == busy or folder.name.split("-")[-2:-1] != [driver]:
            continue
        pids = (folder / "cgroup.procs").read_text().split()
        if len(pids) == 1:
            return folder, int(pids[0])
    return None


def finish(driver, timeout: float = 60) -> None:
    _, err = driver.communicate(timeout=timeout)
    assert driver.returncode == 0 and b"Traceback" not in err, err


def starts(spool: Path) -> list[str]:
    return [line.split()[3] for line in log_lines(spool) if line.split()[2:3] == ["start"]]


@contextmanager
def second_made_ready(spool: Path, workdir: Path, base: Path, second: str):
    """A driver running ``first`` (gated) with ``second`` (that text) made ready behind it: yields the driver,
    the cgroup made ahead and the monitor waiting in it; on leaving, ``first`` is let go and the driver ends."""
    gate = workdir / "first.gate"
    gate.touch()
    submit("first", f"while [ -e {gate} ]; do sleep 0.02; done\n")
    submit("second", second)
    driver = start_driver(spool)
    try:
        folder, monitor = wait_for(lambda: made_ready(base, spool, "first"), what="the next job to be made ready")
        yield driver, folder, monitor
    finally:
        gate.unlink(missing_ok=True)
    if driver.returncode is None:
        finish(driver)


def test_the_next_job_is_made_ready_while_one_runs_and_its_monitor_starts_it(spool, workdir, base):
    with second_made_ready(spool, workdir, base, "echo parent=$PPID\n") as (_, folder, monitor):
        assert (spool / "jobs" / "P4" / "second").exists()  # made ready, not claimed: still queued
    assert result(spool, "second")["state"] == "done"
    assert (spool / "stdout" / "second").read_text() == f"parent={monitor}\n"  # the monitor made ready ran it
    assert not folder.exists()


def test_a_job_rewritten_after_it_was_made_ready_runs_as_its_file_says(spool, workdir, base):
    with second_made_ready(spool, workdir, base, "echo old\n"):
        with open(spool / "jobs" / "P4" / "second", "r+b") as handle:  # its owner's file, rewritten in place
            text = handle.read().replace(b"echo old\n", b"echo new, longer\n")
            handle.seek(0)
            handle.write(text)
    assert (spool / "stdout" / "second").read_text() == "new, longer\n"
    assert not base.exists() or [name for name in os.listdir(base) if not name.startswith(".")] == []


def test_a_job_cancelled_while_made_ready_never_runs_and_leaves_no_cgroup(spool, workdir, base):
    marker = workdir / "second.ran"
    with second_made_ready(spool, workdir, base, f"touch {marker}\n") as (_, folder, _monitor):
        assert run_cli(["cancel", "second"]).code == 0
    assert result(spool, "second")["state"] == "cancelled"
    assert not marker.exists()
    assert not folder.exists()


def test_a_job_spooled_at_a_higher_priority_runs_before_the_one_made_ready(spool, workdir, base):
    with second_made_ready(spool, workdir, base, "true\n") as (_, folder, _monitor):
        submit("urgent-ish", "true\n", "-p", "1")
    assert starts(spool) == ["first", "urgent-ish", "second"]
    assert not folder.exists()


def test_a_held_job_made_ready_does_not_run(spool, workdir, base):
    with second_made_ready(spool, workdir, base, "true\n") as (_, folder, _monitor):
        assert run_cli(["hold", "second"]).code == 0
    assert starts(spool) == ["first"]
    assert (spool / "jobs" / "P4" / "second").exists()
    assert not folder.exists()


def test_a_driver_killed_while_a_job_is_made_ready_leaves_it_queued_and_its_cgroup_goes(spool, workdir, base):
    ledger = workdir / "second.ledger"
    with second_made_ready(spool, workdir, base, f"echo ran >> {ledger}\n") as (driver, folder, monitor):
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        # the monitor made ready hears its driver's end: it undoes what it made and exits
        wait_for(lambda: not folder.exists(), what="the cgroup made ahead to go")
        wait_for(lambda: not Path(f"/proc/{monitor}").exists() or contain.is_zombie(monitor),
                 what="the monitor made ready to exit")
        assert (spool / "jobs" / "P4" / "second").exists()
    second = start_driver(spool)
    finish(second)
    assert ledger.read_text() == "ran\n"  # once
    assert result(spool, "first")["state"] == "done" and result(spool, "second")["state"] == "done"
