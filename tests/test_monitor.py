"""A job's monitor (onite.exec.monitor): a fresh interpreter the driver starts and keeps, the job's
parent, serving one run after another; nothing of it keeps the driver lock from the next driver,
and it outlives its driver only until its run is over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import REPO, drain, log_lines, needs_root, result, run_cli, set_config, start_driver, wait_for

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
    """The pid the monitor of root's job ``name`` recorded, once it has (and its job runs)."""
    def recorded():
        for record in (spool / "running").glob(f"*/root:{name}@run"):
            events = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
            if any(e.get("event") == "job" for e in events):
                return next(e["pid"] for e in events if e.get("event") == "monitor")
        return None
    return wait_for(recorded, what="the monitor to record the job")


def test_a_jobs_monitor_is_a_fresh_interpreter_started_by_the_driver_not_a_copy_of_it(spool, workdir):
    gate, ledger = gated_job(spool, workdir, "spawned")
    driver = start_driver(spool)
    try:
        monitor = monitor_pid(spool, "spawned")
        assert monitor != driver.pid and parent_of(monitor) == driver.pid
        assert b"onite.exec.monitor" in Path(f"/proc/{monitor}/cmdline").read_bytes()
    finally:
        gate.unlink()
    _, err = driver.communicate(timeout=60)
    assert driver.returncode == 0 and b"Traceback" not in err, err
    assert result(spool, "spawned")["state"] == "done"
    assert ledger.read_text().split() == ["start"]
    wait_for(lambda: is_zombie(monitor) or not Path(f"/proc/{monitor}").exists(),
             what="the monitor to exit once its driver let it go")


def test_a_killed_drivers_monitor_keeps_its_job_and_leaves_the_lock_to_the_next_driver(spool, workdir):
    gate, ledger = gated_job(spool, workdir, "survivor")
    driver = start_driver(spool)
    monitor = monitor_pid(spool, "survivor")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert not is_zombie(monitor)  # the job's monitor keeps the job
    second = start_driver(spool)  # it takes the lock at once: no monitor holds it
    wait_for(lambda: any("adopted" in line and " root:survivor " in line for line in log_lines(spool)),
             what="the next driver to adopt the run")
    gate.unlink()
    second.communicate(timeout=60)
    assert second.returncode == 0
    assert result(spool, "survivor")["state"] == "done"
    assert ledger.read_text().split() == ["start"]


def test_a_waiting_monitor_that_died_is_passed_over(spool, workdir):
    """The monitors that wait for a run are killed (the OOM killer picks them too): the driver's next
    request to one of them fails whole, and the job goes to another monitor; nothing is lost."""
    gate, _ = gated_job(spool, workdir, "first")
    assert run_cli(["submit", "second"], stdin=b"true\n").code == 0
    driver = start_driver(spool)
    busy = monitor_pid(spool, "first")
    waiting = wait_for(lambda: [int(pid) for pid in Path(f"/proc/{driver.pid}/task/{driver.pid}/children").read_text().split()
                                if int(pid) != busy], what="a monitor started ahead")
    for pid in waiting:
        os.kill(pid, signal.SIGKILL)
    # dead, not just signalled: a monitor killed only after it took the request never started the job
    # (its run is filed as such, retryable), which is not what this test is about
    wait_for(lambda: all(is_zombie(pid) for pid in waiting),
             what="the killed monitors to be gone")
    gate.unlink()
    _, err = driver.communicate(timeout=60)
    assert driver.returncode == 0 and b"Traceback" not in err, err
    assert result(spool, "first")["state"] == result(spool, "second")["state"] == "done"


def test_where_no_monitor_can_be_started_each_job_fails_saying_so(spool, workdir, monkeypatch):
    """An interpreter that cannot be started again (its file gone, say): each job is filed as failed,
    never having run, with the reason; the driver ends normally."""
    from onite.drain.driver import Driver
    from onite.spool.paths import SpoolDir

    marker = workdir / "ran"
    for name in "ab":
        assert run_cli(["submit", name], stdin=f"touch {marker}\n".encode()).code == 0
    monkeypatch.setattr("sys.executable", str(workdir / "no-such-python"))
    assert Driver(SpoolDir(spool)).run() == 0
    for name in "ab":
        res = result(spool, name)
        assert res["state"] == "failed" and res["reason"].startswith("cannot start its monitor: "), res
    assert not marker.exists()


def test_a_monitor_serves_one_run_after_another(spool, workdir):
    """Monitors are not started per job: one that is done with a run (its job ended, what the job left
    was ended, the run's descriptors closed) waits for the next. Each job still has a monitor of its
    own while it runs, and it is not the driver."""
    trace = workdir / "trace"
    for n in range(6):  # each job writes its monitor's pid
        assert run_cli(["submit", f"j{n}"], stdin=f"echo $PPID >> {trace}\n".encode()).code == 0
    driver = start_driver(spool)
    _, err = driver.communicate(timeout=60)
    assert driver.returncode == 0
    assert b"Traceback" not in err, err  # nor from a monitor started ahead that the driver never took
    assert all(result(spool, f"j{n}")["state"] == "done" for n in range(6))
    monitors = trace.read_text().split()
    assert len(monitors) == 6 and len(set(monitors)) < 6
    assert str(driver.pid) not in monitors


def test_a_reused_monitor_outlives_a_killed_driver_only_until_its_run_is_over(spool, workdir):
    """The driver dies while a job runs under a monitor that would serve the next run: the monitor
    keeps the job, the next driver adopts the run, and once the job ends the monitor records it and
    exits (it waits for no other run: its driver is gone)."""
    assert run_cli(["submit", "first", "-p", "1"], stdin=b"true\n").code == 0
    gate, ledger = gated_job(spool, workdir, "second")
    driver = start_driver(spool)
    monitor = monitor_pid(spool, "second")
    wait_for(lambda: result(spool, "first"), what="the first job to be filed")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert not is_zombie(monitor)
    second = start_driver(spool)
    wait_for(lambda: any("adopted" in line and " root:second " in line for line in log_lines(spool)),
             what="the next driver to adopt the run")
    gate.unlink()
    second.communicate(timeout=60)
    assert second.returncode == 0
    assert result(spool, "second")["state"] == "done" and ledger.read_text().split() == ["start"]
    wait_for(lambda: is_zombie(monitor), what="the monitor to exit once its run was over")


def test_a_job_whose_environment_is_larger_than_a_datagram_runs_with_it_whole(spool, workdir):
    """A job whose environment is hundreds of KB: its Plan reaches its monitor whole (it travels in a
    memory file, not in the datagram), and the next job runs under a monitor as usual."""
    trace = workdir / "trace"
    big = dict(os.environ, **{f"ONITE_TEST_BIG{n}": "x" * 100_000 for n in range(4)})  # one string: 128 KB at most
    for name, env in (("huge", big), ("after", None)):
        body = f"echo ${{#ONITE_TEST_BIG3}} >> {trace}\n"
        assert run_cli(["submit", name], stdin=body.encode(), env=env).code == 0
    driver = start_driver(spool)
    driver.communicate(timeout=60)
    assert result(spool, "huge")["state"] == result(spool, "after")["state"] == "done"
    assert trace.read_text().split() == ["100000", "0"]


def test_a_monitor_whose_job_is_no_child_of_its_says_its_status_is_unknown():
    """waitid fails with ECHILD (the job was reaped elsewhere): the monitor says the status is not
    known, it does not take that for exit 0."""
    out = subprocess.run([sys.executable, "-c", "from onite.exec import jobend; print(jobend.leader_exit(1))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["None"]


@needs_root
def test_a_monitor_that_served_one_owner_serves_the_next_with_roots_ids_and_theirs_for_the_job(spool):
    """Jobs of two owners in turn: each runs with exactly its owner's ids, and every monitor, whoever's
    job it served before, holds root's ids again (it entered the last job's directory as its owner)."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    probe = ("echo \"$(id -u) $(id -g) $(id -G | tr ' ' ,) $PPID $(grep -E '^(Uid|Gid|Groups):' /proc/$PPID/status"
             " | tr -s '\\t ' ' ' | tr '\\n' '|')\" >> /tmp/onite-test-owners-$ONITE_RUN_ID\n")
    names = []
    for n in range(6):
        user = "nobody" if n % 2 else None
        r = run_cli(["submit", f"o{n}"], stdin=probe.encode(), user=user, cwd="/tmp")
        assert r.code == 0, r
        names.append((f"o{n}", user))
    driver = start_driver(spool)
    driver.communicate(timeout=60)
    try:
        for name, user in names:
            res = result(spool, name)
            assert res["state"] == "done", res
            [line] = Path(f"/tmp/onite-test-owners-{res['run_id']}").read_text().splitlines()
            uid, gid, groups, _, monitor = line.split(" ", 4)
            want = (nobody.pw_uid, nobody.pw_gid) if user else (0, 0)
            assert (int(uid), int(gid)) == want, line
            assert "Uid: 0 0 0 0|Gid: 0 0 0 0|" in monitor, line
    finally:
        for path in Path("/tmp").glob("onite-test-owners-*"):
            path.unlink()


def test_a_killed_monitor_fails_its_run_and_its_job_is_killed_with_it(spool, workdir):
    """The monitor of a running job is killed (the OOM killer, an admin): the driver hears its socket
    end without an end recorded, kills what runs of the job (nobody would report it), and files the
    job as failed, saying why; the next job runs under another monitor."""
    gate, ledger = gated_job(spool, workdir, "orphaned")
    assert run_cli(["submit", "next"], stdin=b"true\n").code == 0
    driver = start_driver(spool)
    monitor = monitor_pid(spool, "orphaned")
    job = wait_for(lambda: next((json.loads(line)["pid"] for record in (spool / "running").glob("*/root:orphaned@run")
                                 for line in record.read_text().splitlines() if '"event":"job"' in line), None),
                   what="the job's pid")
    os.kill(monitor, signal.SIGKILL)
    driver.communicate(timeout=60)
    try:
        assert driver.returncode == 0
        res = result(spool, "orphaned")
        assert res["state"] == "failed" and "monitor of this job was killed" in res["reason"], res
        assert result(spool, "next")["state"] == "done"
        wait_for(lambda: is_zombie(job), what="the job to be killed with its monitor")
    finally:
        gate.unlink(missing_ok=True)


def test_a_job_whose_monitor_was_killed_is_retried_when_it_has_retries_left(spool, workdir):
    """onite's machinery failed, not the job: like a Slurm node that died, the run counts as an attempt
    and the job's retry runs it again (killed first: nothing runs beside its retry)."""
    set_config(spool, retry_delay="0.05")
    gate, ledger = workdir / "again.gate", workdir / "again.ledger"
    gate.touch()
    body = f"echo start >> {ledger}; [ -s {ledger}.2 ] || while [ -e {gate} ]; do sleep 0.05; done\n"
    assert run_cli(["submit", "again", "--retries", "1"], stdin=body.encode()).code == 0
    driver = start_driver(spool)
    monitor = monitor_pid(spool, "again")
    wait_for(lambda: ledger.read_text(), what="the job's first start")  # killed once it runs, not before
    Path(f"{ledger}.2").write_text("the retry need not wait\n")
    os.kill(monitor, signal.SIGKILL)
    driver.communicate(timeout=60)
    try:
        res = result(spool, "again")
        assert res["state"] == "done" and res["attempt"] == 2, res
        assert "monitor of this job was killed" in res["attempts"][0]["reason"], res
        assert ledger.read_text().splitlines() == ["start", "start"]
    finally:
        gate.unlink(missing_ok=True)


@pytest.mark.parametrize("driver_alive", [False, True], ids=["driver-killed", "driver-alive"])
def test_a_monitor_killed_while_it_ends_what_its_job_left_keeps_the_jobs_exit_status(spool, workdir, driver_alive):
    """The job exits 0 and leaves a child that ignores TERM: its monitor, while it waits out kill_grace for that
    child, is killed -9 (the OOM killer). It recorded the leader's status as it saw it (``exited``): the next
    drain (or, alive, its own driver, hearing the monitor's socket end) kills the child and files the job as
    done, exit 0, attempt 1; it neither runs it again nor fails it."""
    set_config(spool, kill_grace="10m")
    gate, ledger, leftover = workdir / "kept.gate", workdir / "kept.ledger", workdir / "kept.leftover"
    gate.touch()
    # the child says its pid once it ignores TERM: a TERM before its trap (a loaded machine) would end it
    body = (f"[ -e {ledger} ] || {{ sh -c 'trap \"\" TERM; echo $$ > {leftover}; while :; do sleep 1; done' & }}\n"
            f"echo start >> {ledger}; while [ -e {gate} ]; do sleep 0.05; done; exit 0\n")
    assert run_cli(["submit", "kept", "--retries", "1"], stdin=body.encode()).code == 0
    driver = start_driver(spool)
    monitor_pid(spool, "kept")
    if not driver_alive:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    child = int(wait_for(lambda: leftover.read_text().strip(), what="the job's leftover child"))
    gate.unlink()  # the job's leader exits; its monitor TERMs the child, which stays
    [record] = list((spool / "running").glob("*/root:kept@run"))
    try:
        def exited():
            events = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
            return events if any(e.get("event") == "exited" for e in events) else None
        events = wait_for(exited, what="the monitor to record its job's exit")
        assert not any(e.get("event") == "ended" for e in events)  # it waits for the child
        os.kill(next(e["pid"] for e in events if e.get("event") == "monitor"), signal.SIGKILL)
        if driver_alive:
            _, err = driver.communicate(timeout=120)
            assert driver.returncode == 0 and b"Traceback" not in err, err
        else:
            done = drain(spool)
            assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
        res = result(spool, "kept")
        assert res["state"] == "done" and res["exit_code"] == 0 and res["attempt"] == 1, res
        assert ledger.read_text().split() == ["start"]
        wait_for(lambda: not Path(f"/proc/{child}").exists() or is_zombie(child), what="the leftover to be killed")
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


@needs_root
def test_a_monitor_that_cannot_be_started_fails_its_run_and_the_night_goes_on(spool, tmp_path):
    """No monitor can be started (the machine's process table is full: here a pids cgroup holds the
    driver and no more): the job is filed as failed with that reason and never ran, the next job gets
    the same, and the driver ends normally."""
    pids = Path("/sys/fs/cgroup/pids")
    if not (pids / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 pids controller at /sys/fs/cgroup/pids to fill the process table with")
    group = pids / f"onite-test-{uuid.uuid4().hex[:12]}"
    group.mkdir()
    try:
        (group / "pids.max").write_text("1\n")  # the driver
        marker = tmp_path / "ran"
        for name in ("first", "second"):
            assert run_cli(["submit", name], stdin=f"touch {marker}\n".encode()).code == 0
        env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
        procs = str(group / "cgroup.procs")

        def join() -> None:
            with open(procs, "w") as handle:
                handle.write("0")

        driver = subprocess.run([sys.executable, "-m", "onite", "run"], env=env, capture_output=True, timeout=60,
                                preexec_fn=join)
        assert driver.returncode == 0, driver.stderr
        for name in ("first", "second"):
            res = result(spool, name)
            assert res["state"] == "failed" and res["reason"].startswith("cannot start its monitor: "), res
        assert not marker.exists()
        assert any("start-failed" in line and "cannot start its monitor" in line for line in log_lines(spool))
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        wait_for(lambda: not (group / "cgroup.procs").read_text().strip(), what="the test's pids group to empty")
        group.rmdir()
