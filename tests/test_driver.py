"""The driver: order, late arrivals, the lock, retention, failures, recovery (real processes)."""

import os
from datetime import datetime, timedelta
import signal
import subprocess
from pathlib import Path

from conftest import drain, kill_driver_mid_job, log_lines, result, run_cli, set_config, start_driver, wait_for

HOST = os.uname().nodename.split(".")[0]


def submit(name, body, *args):
    r = run_cli(["submit", name, *args], stdin=body.encode() if isinstance(body, str) else body)
    assert r.code == 0, r
    return r


def order_of(path: Path) -> list[str]:
    return path.read_text().split()


def test_priority_then_fifo(spool, workdir):
    trace = workdir / "trace"
    for name, prio in [("a", 4), ("b", 2), ("c", 4), ("d", 1), ("e", 2), ("f", 7)]:
        submit(name, f"echo {name} >> {trace}\n", "-p", str(prio))
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    assert order_of(trace) == ["d", "b", "e", "a", "c", "f"]
    assert not list((spool / "jobs").rglob("*")) or all(p.is_dir() for p in (spool / "jobs").rglob("*"))


def test_late_high_priority_job_runs_next(spool, workdir):
    trace, gate = workdir / "trace", workdir / "gate"
    gate.touch()
    submit("first", f"echo first >> {trace}; while [ -e {gate} ]; do sleep 0.02; done\n", "-p", "5")
    submit("second", f"echo second >> {trace}\n", "-p", "5")
    submit("third", f"echo third >> {trace}\n", "-p", "6")
    driver = start_driver(spool)
    wait_for(lambda: trace.exists() and "first" in trace.read_text(), what="first job to start")
    submit("late", f"echo late >> {trace}\n", "-p", "1")
    gate.unlink()
    assert driver.wait(60) == 0
    assert order_of(trace) == ["first", "late", "second", "third"]


def test_second_driver_logs_and_exits_at_once(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("hold-the-lock", f"while [ -e {gate} ]; do sleep 0.02; done\n")
    first = start_driver(spool)
    wait_for(lambda: (spool / "running" / HOST / "hold-the-lock").exists(), what="claim")
    second = drain(spool)
    assert second.returncode == 0 and first.poll() is None  # it did not wait for the lock: the first still runs
    assert any("driver-busy" in line for line in log_lines(spool))
    gate.unlink()
    assert first.wait(30) == 0


def test_failed_job_does_not_stop_the_night(spool, workdir):
    submit("fails", "echo boom >&2; exit 3\n", "-p", "1")
    submit("killed", "kill -9 $$\n", "-p", "2")
    submit("works", f"echo fine > {workdir}/ok\n", "-p", "3")
    assert drain(spool).returncode == 0
    assert result(spool, "fails")["state"] == "failed" and result(spool, "fails")["exit_code"] == 3
    assert result(spool, "fails")["reason"] == "exit 3"
    assert result(spool, "killed")["signal"] == 9 and result(spool, "killed")["reason"] == "signal 9 (SIGKILL)"
    assert result(spool, "works")["state"] == "done" and (workdir / "ok").read_text() == "fine\n"
    assert (spool / "stdout" / "fails").read_text() == "boom\n"


def test_output_and_records_of_a_finished_job(spool, cli):
    submit("report", "echo out; echo err >&2\n", "-p", "3")
    drain(spool)
    r = cli(["output", "report"])
    assert r.code == 0 and r.out == "out\nerr\n"
    assert oct((spool / "stdout" / "report").stat().st_mode & 0o777) == "0o600"
    rec = result(spool, "report")
    for key in ("name", "user", "uid", "priority", "state", "submitted", "host", "started", "finished", "exit_code",
                "signal", "reason", "attempt", "attempts", "run_id"):
        assert key in rec
    assert rec["host"] == HOST and rec["priority"] == 3 and rec["exit_code"] == 0
    assert (spool / "jobsdone" / "report").exists() and not list((spool / "running").rglob("report*"))
    listed = cli(["list", "--all", "--json"]).json()
    job = next(j for j in listed["jobs"] if j["name"] == "report")
    assert job["state"] == "done" and job["host"] == HOST and job["exit_code"] == 0 and job["duration"] is not None


def test_a_finished_name_can_be_spooled_again(spool, cli):
    submit("again", "echo first\n")
    drain(spool)
    submit("again", "echo second\n")
    drain(spool)
    assert cli(["output", "again"]).out == "second\n"


def test_retention_keeps_the_last_n(spool, cli):
    set_config(spool, keep=3)
    for i in range(6):
        submit(f"job{i}", f"echo {i}\n", "-p", "4")
    drain(spool)
    kept = sorted(p.name for p in (spool / "jobsdone").iterdir() if p.name.endswith("@result"))
    assert kept == ["job3@result", "job4@result", "job5@result"]
    assert sorted(p.name for p in (spool / "stdout").iterdir()) == ["job3", "job4", "job5"]
    assert sorted(p.name for p in (spool / "jobsdone").iterdir() if "@" not in p.name) == ["job3", "job4", "job5"]


def test_vanished_directory_fails_with_a_clear_reason(spool, world_tmp):
    gone = world_tmp / "gone"
    gone.mkdir()
    r = run_cli(["submit", "orphan"], stdin=b"true\n", cwd=gone)
    assert r.code == 0
    gone.rmdir()
    drain(spool)
    rec = result(spool, "orphan")
    assert rec["state"] == "failed" and rec["reason"] == f"its directory {gone} no longer exists"


def test_missing_interpreter_fails_clearly(spool):
    submit("nointerp", "#!/no/such/interpreter\necho\n")
    drain(spool)
    assert result(spool, "nointerp")["reason"] == "cannot start /no/such/interpreter: no such file"


def test_detach_runs_in_the_background(spool, workdir, cli):
    gate = workdir / "gate"
    gate.touch()
    submit("bg", f"while [ -e {gate} ]; do sleep 0.02; done; echo ran > {workdir}/bg\n")
    r = cli(["run", "--detach"])
    assert r.code == 0 and "driver started in the background (pid " in r.out and ": draining; it logs to " in r.out
    gate.unlink()
    wait_for(lambda: (spool / "jobsdone" / "bg@result").exists(), what="the detached driver to run the job")
    assert (workdir / "bg").read_text() == "ran\n"


def test_detach_waits_for_its_drivers_word_however_slowly_it_starts(spool, workdir):
    """A background driver that is slow to start (a loaded machine; here its Python holds its start two
    seconds) is still told as draining: ``run --detach`` waits for the driver's word, not a set time."""
    slow = workdir / "slow-start"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(2)\n")
    submit("bg", f"echo ran > {workdir}/bg\n")
    r = run_cli(["run", "--detach"], env=dict(os.environ, PYTHONPATH=str(slow)))
    assert r.code == 0 and ": draining; it logs to " in r.out, r
    wait_for(lambda: (spool / "jobsdone" / "bg@result").exists(), what="the detached driver to run the job")


def test_a_killed_drivers_running_job_is_adopted_not_run_again(spool, workdir):
    """kill -9 of the driver mid-job: the job goes on under its monitor; the next driver adopts it,
    waits for it and files it once (docs/job-control.md, "Exactly once")."""
    ledger, gate = workdir / "ledger", workdir / "gate"
    gate.touch()
    submit("victim", f"echo start $$ >> {ledger}; sleep 60 & while [ -e {gate} ]; do sleep 0.02; done; "
                     f"echo end $$ >> {ledger}; exit 3\n")
    driver = start_driver(spool)
    wait_for(lambda: ledger.exists() and "start" in ledger.read_text(), what="the job to start")
    wait_for(lambda: '"event":"job"' in (spool / "running" / HOST / "victim@run").read_text(), what="its record")
    (spool / "running" / HOST / ".victim@run.999.tmp").write_text("{")  # as if killed while writing one
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    leader = int(ledger.read_text().split()[1])
    assert os.path.exists(f"/proc/{leader}")  # a killed driver leaves its job running
    second = start_driver(spool)
    wait_for(lambda: any(" recovered victim " in line for line in log_lines(spool)), what="recovery")
    gate.unlink()
    assert second.wait(60) == 0
    assert ledger.read_text().split() == ["start", str(leader), "end", str(leader)]  # ran once
    [recovered] = [line for line in log_lines(spool) if " recovered victim " in line]
    assert "adopted" in recovered
    rec = result(spool, "victim")
    assert rec["state"] == "failed" and rec["exit_code"] == 3 and rec["attempt"] == 1
    assert not list((spool / "running" / HOST).iterdir())


def test_a_job_that_ended_while_no_driver_ran_is_filed_from_its_record(spool, workdir):
    """The monitor records the exit status: a job that ends after its driver died is filed with it,
    not run again."""
    ledger, gate = workdir / "ledger", workdir / "gate"
    gate.touch()
    submit("orphan", f"echo start >> {ledger}; while [ -e {gate} ]; do sleep 0.02; done; exit 7\n")
    driver = start_driver(spool)
    wait_for(lambda: ledger.exists(), what="the job to start")
    record = spool / "running" / HOST / "orphan@run"
    wait_for(lambda: '"event":"job"' in record.read_text(), what="its record")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    gate.unlink()
    wait_for(lambda: '"event":"ended"' in record.read_text(), what="the monitor to record the end")
    drain(spool)
    assert ledger.read_text().split() == ["start"]
    rec = result(spool, "orphan")
    assert rec["state"] == "failed" and rec["exit_code"] == 7
    assert any(" recovered orphan " in line and "while no driver was running" in line for line in log_lines(spool))


def test_an_adopted_job_keeps_its_time_limit(spool, workdir):
    set_config(spool, kill_grace="1s")
    submit("slow", f"touch {workdir}/started; sleep 60\n", "--timeout", "2s")
    driver = start_driver(spool)
    wait_for((workdir / "started").exists, what="the job to start")
    wait_for(lambda: '"event":"job"' in (spool / "running" / HOST / "slow@run").read_text(), what="its record")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert drain(spool).returncode == 0
    rec = result(spool, "slow")
    assert rec["state"] == "failed" and rec["reason"] == "timeout"


def test_a_job_whose_machine_died_runs_again_and_says_so(spool, workdir):
    """Nothing recorded how it ended (its monitor died with it): the one case of a rerun, logged."""
    kill_driver_mid_job(spool, workdir, "again", machine_dies=True)
    drain(spool)
    [recovered] = [line for line in log_lines(spool) if " recovered again " in line]
    assert "rerun" in recovered and "recorded no end" in recovered
    assert result(spool, "again")["state"] == "done"


def test_a_job_whose_run_record_was_never_written_is_found_by_its_environment(spool, workdir):
    """A driver killed after starting a job and before writing its run record: the next driver finds
    the job's processes by ONITE_RUN_ID (even one that left for its own session), not a namesake's."""
    pids, rerun = workdir / "pids", workdir / "rerun"
    submit("victim", f"[ -e {rerun} ] && exit 0; echo $$ >> {pids}; setsid sleep 60 & sleep 60 & wait\n")
    namesake = subprocess.Popen(["sleep", "600"], env=dict(os.environ, ONITE_JOB="victim", ONITE_JOB_SPOOL="/elsewhere",
                                                          ONITE_RUN_ID=f"20261123T010203-{HOST}-1-1"))
    try:
        driver = start_driver(spool)
        wait_for(lambda: pids.exists(), what="the job to start")
        wait_for((spool / "running" / HOST / "victim@run").exists, what="the run record")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        (spool / "running" / HOST / "victim@run").unlink()  # as if killed just before writing it
        leader = int(pids.read_text())
        wait_for(lambda: len(job_processes(spool, "victim")) == 3, what="the job's two sleeps")
        job_pids = job_processes(spool, "victim")
        assert leader in job_pids
        rerun.touch()
        drain(spool)
        for pid in job_pids:
            wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
                     what=f"pid {pid} to die")
        assert namesake.poll() is None  # same name, another spool: not touched
    finally:
        namesake.kill()
        namesake.wait()
    [recovered] = [line for line in log_lines(spool) if " recovered victim " in line]
    assert "requeued" in recovered and "3 of its processes, found by ONITE_RUN_ID, were stopped" in recovered
    assert result(spool, "victim")["state"] == "done"


def job_processes(spool, name):
    """Pids of processes whose environment says they are job ``name`` of ``spool``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"ONITE_JOB={name}".encode() in env and f"ONITE_JOB_SPOOL={spool}".encode() in env:
            found.append(int(entry))
    return found


def test_a_job_knows_its_name_run_id_and_spool(spool, workdir):
    submit("curious", f'echo "$ONITE_JOB $ONITE_RUN_ID $ONITE_JOB_SPOOL" > {workdir}/seen\n')
    drain(spool)
    name, run_id, root = (workdir / "seen").read_text().split()
    assert (name, run_id, root) == ("curious", result(spool, "curious")["run_id"], str(spool))


def test_recovery_with_on_interrupt_fail(spool, workdir):
    set_config(spool, on_interrupt="fail")
    kill_driver_mid_job(spool, workdir, "doomed", machine_dies=True)
    drain(spool)
    rec = result(spool, "doomed")
    assert rec["state"] == "failed" and "interrupted" in rec["reason"]


def test_a_job_failed_by_recovery_keeps_where_its_stderr_went(spool, workdir):
    set_config(spool, on_interrupt="fail", stderr_separate=True)
    kill_driver_mid_job(spool, workdir, "doomed", machine_dies=True)
    drain(spool)
    rec = result(spool, "doomed")
    assert rec["state"] == "failed" and rec["stderr"] == "separate"  # docs/spool-format.md: where its stderr went


def test_the_log_says_a_job_is_done_before_the_next_one_starts_in_its_slot(spool, workdir):
    """One slot: `done A` comes before `start B` (the log never reads as a slot overrun), though B starts
    as soon as A's monitor says A exited, before it has said how: B's start and end are logged after A's
    end. 400 jobs, with the other core kept busy, so that a monitor is late now and then."""
    names = [f"j{i:03}" for i in range(400)]
    r = run_cli(["submit", "j", "--lines"], stdin=b"true\n" * len(names))
    assert r.code == 0, r
    hog = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        assert drain(spool).returncode == 0
    finally:
        hog.kill()
        hog.wait()
    events = [line.split()[2:4] for line in log_lines(spool) if line.split()[2] in ("start", "done", "failed")]
    expected = [[what, f"j-{i:05}"] for i in range(1, len(names) + 1) for what in ("start", "done")]
    assert events == expected, events


def test_a_driver_started_by_hand_says_what_it_waits_for(spool, cli):
    """(a seventh look) a hand-started ``onite run`` with only a job ``--at`` hours away stayed for
    it, holding the host's lock and running what users spooled meanwhile, with nothing on its
    terminal or in the log to say why. It says so now, once."""
    import signal

    set_config(spool, until=(datetime.now() - timedelta(minutes=1)).strftime("%H:%M"))  # a window of ~24 h
    submit("later", "true\n", "--at", "+2h")
    driver = start_driver(spool)
    try:
        wait_for(lambda: any(" waiting " in line for line in log_lines(spool)), what="the waiting line")
        submit("meanwhile", "true\n")
        wait_for(lambda: (spool / "jobsdone" / "meanwhile@result").exists(), what="the job spooled meanwhile")
    finally:
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(60) == 0
    [line] = [line for line in log_lines(spool) if " waiting " in line]
    assert "nothing can start now: a queued job waits for a later --at time" in line, line
    assert "until=" not in line and f"{datetime.now() + timedelta(hours=2):%H:%M}" not in line  # the job's own
