"""The spawner (onite.exec.spawner): a small process forks the jobs' monitors, never the driver,
and nothing of it outlives its driver or keeps the driver lock from the next one."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from conftest import log_lines, result, run_cli, start_driver, wait_for

from onite.exec.contain import is_zombie


def parent_of(pid: int) -> int:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rindex(b")") + 2:].split()[1])


def gated_job(spool: Path, workdir: Path, name: str) -> tuple[Path, Path]:
    """Spool ``name``, a job that runs until its gate is removed and counts its runs in a ledger."""
    gate, ledger = workdir / f"{name}.gate", workdir / f"{name}.ledger"
    gate.touch()
    body = f"echo start >> {ledger}; while [ -e {gate} ]; do sleep 0.05; done\n"
    assert run_cli(["submit", name], stdin=body.encode()).code == 0
    return gate, ledger


def monitor_pid(spool: Path, name: str) -> int:
    """The pid its monitor recorded, once it has (and its job runs)."""
    def recorded():
        for record in (spool / "running").glob(f"*/{name}@run"):
            events = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
            if any(e.get("event") == "job" for e in events):
                return next(e["pid"] for e in events if e.get("event") == "monitor")
        return None
    return wait_for(recorded, what="the monitor to record the job")


def test_a_jobs_monitor_is_forked_by_the_spawner_not_by_the_driver(spool, workdir):
    gate, ledger = gated_job(spool, workdir, "spawned")
    driver = start_driver(spool)
    try:
        spawner = parent_of(monitor_pid(spool, "spawned"))
        assert spawner != driver.pid and parent_of(spawner) == driver.pid
        assert b"onite.exec.spawner" in Path(f"/proc/{spawner}/cmdline").read_bytes()
    finally:
        gate.unlink()
    driver.communicate(timeout=60)
    assert driver.returncode == 0
    assert result(spool, "spawned")["state"] == "done"
    assert ledger.read_text().split() == ["start"]
    wait_for(lambda: is_zombie(spawner), what="the spawner to exit with its driver")


def test_a_killed_drivers_spawner_exits_and_leaves_the_lock_and_the_job_to_the_next_driver(spool, workdir):
    gate, ledger = gated_job(spool, workdir, "survivor")
    driver = start_driver(spool)
    monitor = monitor_pid(spool, "survivor")
    spawner = parent_of(monitor)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    wait_for(lambda: is_zombie(spawner), what="the spawner to die with its driver")
    assert not is_zombie(monitor)  # the job's monitor, not the spawner, keeps the job
    second = start_driver(spool)  # it takes the lock at once: no spawner holds it
    wait_for(lambda: any("adopted" in line and "survivor" in line for line in log_lines(spool)),
             what="the next driver to adopt the run")
    gate.unlink()
    second.communicate(timeout=60)
    assert second.returncode == 0
    assert result(spool, "survivor")["state"] == "done"
    assert ledger.read_text().split() == ["start"]


def test_where_no_spawner_can_start_the_driver_forks_the_monitors_itself(spool, workdir, monkeypatch):
    """An interpreter that cannot be started again (its file gone, say): the jobs still run, each
    under a monitor that the driver forked, as before the spawner."""
    from onite.drain.driver import Driver
    from onite.spool.paths import SpoolDir

    trace = workdir / "trace"
    for name in "ab":  # each job writes its monitor's parent
        assert run_cli(["submit", name], stdin=f"cut -d' ' -f4 /proc/$PPID/stat >> {trace}\n".encode()).code == 0
    monkeypatch.setattr("sys.executable", str(workdir / "no-such-python"))
    assert Driver(SpoolDir(spool)).run() == 0
    assert result(spool, "a")["state"] == result(spool, "b")["state"] == "done"
    assert trace.read_text().split() == [str(os.getpid())] * 2
