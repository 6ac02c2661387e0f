"""The driver: order, late arrivals, the lock, retention, failures, recovery (real processes)."""

import os
from datetime import datetime, timedelta
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (REPO, drain, kill_driver_mid_job, log_lines, next_ctime_tick, result, run_cli, set_config,
                      start_driver, wait_for)

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
    wait_for(lambda: (spool / "running" / HOST / "root:hold-the-lock").exists(), what="claim")
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
    assert (spool / "stdout" / "root:fails").read_text() == "boom\n"


def test_output_and_records_of_a_finished_job(spool, cli):
    submit("report", "echo out; echo err >&2\n", "-p", "3")
    drain(spool)
    r = cli(["output", "report"])
    assert r.code == 0 and r.out == "out\nerr\n"
    assert oct((spool / "stdout" / "root:report").stat().st_mode & 0o777) == "0o600"
    rec = result(spool, "report")
    for key in ("name", "user", "uid", "priority", "state", "submitted", "host", "started", "finished", "exit_code",
                "signal", "reason", "attempt", "attempts", "run_id"):
        assert key in rec
    assert rec["host"] == HOST and rec["priority"] == 3 and rec["exit_code"] == 0
    assert rec["nodes"] is None  # no Slurm node ran it
    assert (spool / "jobsdone" / "root:report").exists() and not list((spool / "running").rglob("root:report*"))
    listed = cli(["list", "--all", "--json"]).json()
    job = next(j for j in listed["jobs"] if j["name"] == "report")
    assert job["state"] == "done" and job["host"] == HOST and job["exit_code"] == 0 and job["duration"] is not None
    assert job["nodes"] is None


def test_a_finished_name_can_be_spooled_again(spool, cli):
    submit("again", "echo first\n")
    drain(spool)
    submit("again", "echo second\n")
    drain(spool)
    assert cli(["output", "again"]).out == "second\n"


def test_a_name_spooled_again_while_it_runs_starts_once_the_first_is_filed(spool, workdir):
    """A job queued at a running job's key (written into the queue by hand: submit refuses the name)
    waits for that run to be filed, though its slot is free as soon as it ends (filing comes after the
    next start): it is never claimed onto the first one's claim. `marker`, queued behind it, starts in
    the other slot: the driver has then listed the queue with the second `twice` in it."""
    ledger, gate, queued = workdir / "ledger", workdir / "gate", spool / "jobs" / "P4" / "root:twice"
    gate.touch()
    submit("twice", f"echo two >> {ledger}\n")
    os.rename(queued, workdir / "second")
    submit("twice", f"echo one >> {ledger}; while [ -e {gate} ]; do sleep 0.02; done\n")
    driver = start_driver(spool, "--slots", "2")
    wait_for(lambda: ledger.exists() and ledger.read_text() == "one\n", what="the first run")
    os.rename(workdir / "second", queued)
    next_ctime_tick()
    submit("marker", f"echo marker >> {ledger}\n")
    wait_for(lambda: "marker" in ledger.read_text(), what="the marker job")
    gate.unlink()
    assert driver.wait(timeout=60) == 0, driver.stderr.read()
    assert ledger.read_text().split() == ["one", "marker", "two"]
    assert result(spool, "twice")["state"] == "done"
    assert not list((spool / "refused").iterdir())
    assert [line.split()[2] for line in log_lines(spool) if " root:twice " in line].count("done") == 2


def test_retention_keeps_the_last_n(spool, cli):
    set_config(spool, keep=3)
    for i in range(6):
        submit(f"job{i}", f"echo {i}\n", "-p", "4")
    drain(spool)
    kept = sorted(p.name for p in (spool / "jobsdone").iterdir() if p.name.endswith("@result"))
    assert kept == ["root:job3@result", "root:job4@result", "root:job5@result"]
    assert sorted(p.name for p in (spool / "stdout").iterdir()) == ["root:job3", "root:job4", "root:job5"]
    assert sorted(p.name for p in (spool / "jobsdone").iterdir() if "@" not in p.name) == ["root:job3", "root:job4",
                                                                                           "root:job5"]


def test_retention_runs_as_the_drain_goes_on_and_keeps_the_last_n(spool):
    """Past 50 filed jobs the drain prunes as it goes on, then once more at its end: every job runs, and the last
    ``keep`` are what is left."""
    set_config(spool, keep=3)
    submit("n", "".join(f"echo {i}\n" for i in range(60)), "--lines")
    drain(spool)
    kept = sorted(p.name for p in (spool / "jobsdone").iterdir() if p.name.endswith("@result"))
    assert kept == ["root:n-00058@result", "root:n-00059@result", "root:n-00060@result"]
    assert sorted(p.name for p in (spool / "stdout").iterdir()) == ["root:n-00058", "root:n-00059", "root:n-00060"]
    lines = log_lines(spool)
    assert sum(" done " in line for line in lines) == 60
    pruned = [line for line in lines if " pruned " in line]
    assert len(pruned) == 2, pruned  # one as it went on (after the 50th), one at its end: 57 in all
    assert sum(int(line.split("removed=")[1].split()[0]) for line in pruned) == 57


def test_retention_leaves_every_file_of_a_name_queued_again(spool):
    """A job spooled again under the name of a result beyond ``keep`` keeps that result, its job file and its
    output until it is filed anew: another host's driver may be filing it as this one prunes."""
    set_config(spool, keep=1)
    submit("again", "echo first\n")
    drain(spool)
    submit("again", "echo second\n", "--hold")
    submit("x", "true\n")
    submit("y", "true\n")
    drain(spool)
    done = spool / "jobsdone"
    assert (done / "root:again@result").exists() and (done / "root:again").exists()
    assert (spool / "stdout" / "root:again").read_bytes() == b"first\n"
    assert not (done / "root:x@result").exists() and (done / "root:y@result").exists()


@pytest.mark.parametrize("edited", [False, True], ids=["spooled", "edited"])
def test_retention_keeps_a_result_a_queued_job_of_its_owner_waits_for(spool, edited):
    """``publish --after build`` (spooled so, or given it by ``onite edit``) waits behind a hold while its owner's
    later jobs push ``build`` past ``keep``: build's result is kept while publish waits (it failed 'dependency
    build no longer exists'), and publish runs once released; then build's result goes like any other."""
    set_config(spool, keep=1)
    submit("build", "echo built\n")
    drain(spool)
    if edited:
        submit("publish", "true\n", "--hold")
        assert run_cli(["edit", "publish", "--after", "build"]).code == 0
    else:
        submit("publish", "true\n", "--after", "build", "--hold")
    submit("x", "true\n")
    submit("y", "true\n")
    drain(spool)
    done = spool / "jobsdone"
    assert (done / "root:build@result").exists() and (spool / "stdout" / "root:build").read_bytes() == b"built\n"
    assert not (done / "root:x@result").exists()
    assert run_cli(["release", "publish"]).code == 0
    drain(spool)
    assert result(spool, "publish")["state"] == "done"
    assert not (done / "root:build@result").exists()


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
    wait_for(lambda: (spool / "jobsdone" / "root:bg@result").exists(), what="the detached driver to run the job")
    assert (workdir / "bg").read_text() == "ran\n"


@pytest.mark.parametrize("value", ["\u00b3", "9" * 5000, "-1", "x"])
def test_a_run_given_a_detach_descriptor_that_is_none_just_drains(spool, value):
    """ONITE_DETACH_REPORT is for the driver ``run --detach`` starts; any other value is ignored."""
    submit("plain", "true\n")
    done = subprocess.run([sys.executable, "-m", "onite", "run"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), ONITE_DETACH_REPORT=value))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    assert (spool / "jobsdone" / "root:plain@result").exists()


def test_detach_waits_for_its_drivers_word_however_slowly_it_starts(spool, workdir):
    """A background driver that is slow to start (a loaded machine; here its Python holds its start two
    seconds) is still told as draining: ``run --detach`` waits for the driver's word, not a set time."""
    slow = workdir / "slow-start"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(2)\n")
    submit("bg", f"echo ran > {workdir}/bg\n")
    r = run_cli(["run", "--detach"], env=dict(os.environ, PYTHONPATH=str(slow)))
    assert r.code == 0 and ": draining; it logs to " in r.out, r
    wait_for(lambda: (spool / "jobsdone" / "root:bg@result").exists(), what="the detached driver to run the job")


def test_a_killed_drivers_running_job_is_adopted_not_run_again(spool, workdir):
    """kill -9 of the driver mid-job: the job goes on under its monitor; the next driver adopts it,
    waits for it and files it once (docs/job-control.md, "Exactly once")."""
    ledger, gate = workdir / "ledger", workdir / "gate"
    gate.touch()
    submit("victim", f"echo start $$ >> {ledger}; sleep 60 & while [ -e {gate} ]; do sleep 0.02; done; "
                     f"echo end $$ >> {ledger}; exit 3\n")
    driver = start_driver(spool)
    wait_for(lambda: ledger.exists() and "start" in ledger.read_text(), what="the job to start")
    wait_for(lambda: '"event":"job"' in (spool / "running" / HOST / "root:victim@run").read_text(), what="its record")
    (spool / "running" / HOST / ".root:victim@run.999.tmp").write_text("{")  # as if killed while writing one
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    leader = int(ledger.read_text().split()[1])
    assert os.path.exists(f"/proc/{leader}")  # a killed driver leaves its job running
    second = start_driver(spool)
    wait_for(lambda: any(" recovered root:victim " in line for line in log_lines(spool)), what="recovery")
    gate.unlink()
    assert second.wait(60) == 0
    assert ledger.read_text().split() == ["start", str(leader), "end", str(leader)]  # ran once
    [recovered] = [line for line in log_lines(spool) if " recovered root:victim " in line]
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
    record = spool / "running" / HOST / "root:orphan@run"
    wait_for(lambda: '"event":"job"' in record.read_text(), what="its record")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    gate.unlink()
    wait_for(lambda: '"event":"ended"' in record.read_text(), what="the monitor to record the end")
    drain(spool)
    assert ledger.read_text().split() == ["start"]
    rec = result(spool, "orphan")
    assert rec["state"] == "failed" and rec["exit_code"] == 7
    assert any(" recovered root:orphan " in line and "while no driver was running" in line for line in log_lines(spool))


def test_an_adopted_job_keeps_its_time_limit(spool, workdir):
    set_config(spool, kill_grace="1s")
    submit("slow", f"touch {workdir}/started; sleep 60\n", "--timeout", "2s")
    driver = start_driver(spool)
    wait_for((workdir / "started").exists, what="the job to start")
    wait_for(lambda: '"event":"job"' in (spool / "running" / HOST / "root:slow@run").read_text(), what="its record")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert drain(spool).returncode == 0
    rec = result(spool, "slow")
    assert rec["state"] == "failed" and rec["reason"] == "timeout"


def test_a_time_limit_ends_the_job_while_no_driver_is_alive_and_its_dependent_fails(spool, workdir):
    """The monitor, not the driver, enforces a job's time limit: with its driver killed, the job is ended at
    its deadline (TERM, then KILL after kill_grace), recorded as timed out, and filed so by the next driver
    however long after; the job that waits for it fails. What the job itself wrote is what the test judges."""
    ledger = workdir / "ledger"
    set_config(spool, kill_grace="1s")
    submit("slow", f"echo start >> {ledger}; trap '' TERM; sleep 3; echo end >> {ledger}\n", "--timeout", "1s")
    submit("next", f"echo next >> {ledger}\n", "--after", "slow")
    driver = start_driver(spool)
    record = spool / "running" / HOST / "root:slow@run"
    wait_for(lambda: record.exists() and '"event":"job"' in record.read_text(), what="its record's job line")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    wait_for(lambda: '"event":"ended"' in record.read_text(), what="the monitor to end the job and record it")
    assert '"event":"stop","why":"timeout"' in record.read_text()
    assert drain(spool).returncode == 0
    assert ledger.read_text().split() == ["start"]  # killed before its sleep was over: no "end", no "next"
    slow, nxt = result(spool, "slow"), result(spool, "next")
    assert slow["state"] == "failed" and slow["reason"] == "timeout", slow
    assert nxt["state"] == "failed" and "slow" in nxt["reason"], nxt


def test_a_cancelled_job_whose_driver_died_is_filed_cancelled_however_it_exited(spool, workdir):
    """A driver honours a cancel (the ``stop`` line in the run record, then the monitor ends the job) and
    dies before it files the run; the job caught TERM and exited 0. The next driver files it as
    cancelled, from the record, never as done."""
    gate = workdir / "gate"
    gate.touch()
    submit("victim", f"trap 'sleep 1; exit 0' TERM; while [ -e {gate} ]; do sleep 0.05; done\n")
    driver = start_driver(spool)
    record = spool / "running" / HOST / "root:victim@run"
    wait_for(lambda: record.exists() and '"event":"job"' in record.read_text(), what="its record's job line")
    from onite.spool.cancels import request_cancel
    from onite.spool.paths import SpoolDir

    request_cancel(SpoolDir(spool), "root:victim")
    wait_for(lambda: '"event":"stop"' in record.read_text(), what="the driver to write the stop line")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    wait_for(lambda: '"event":"ended"' in record.read_text(), what="the monitor to end the job")
    assert drain(spool).returncode == 0
    rec = result(spool, "victim")
    assert rec["state"] == "cancelled" and rec["exit_code"] == 0, rec


def test_a_retry_that_cannot_be_written_is_kept_for_the_next_driver(spool, workdir):
    """Under a file-size limit (ulimit -f) the failed job's retry, a large file, cannot be written
    (EFBIG): as on a full disk, the driver keeps the run for the next driver, starts nothing once it
    knows, says so, and exits 4; the next driver spools the retry, which runs. Nothing was filed failed
    at attempt 1. The job queued behind it started in the slot it left, before it was filed: it runs
    to its end and is filed."""
    import resource

    ledger = workdir / "ledger"
    set_config(spool, retry_delay="0.05")
    # the environment and the text, each below the limit, and the retry, which holds both, above it
    env = dict(os.environ, ONITE_TEST_BIG="x" * 30_000)
    body = f"# {'x' * 30_000}\necho run >> {ledger}; [ -e {workdir}/flag ] && exit 0; touch {workdir}/flag; exit 1\n"
    assert run_cli(["submit", "flaky", "--retries", "1"], stdin=body.encode(), env=env).code == 0
    submit("after", f"echo after >> {ledger}\n", "-p", "7")
    submit("later", f"echo later >> {ledger}\n", "-p", "7")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))

    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "onite", "run"], env=env, capture_output=True, timeout=120,
                          preexec_fn=limited)
    assert proc.returncode == 4, proc.stderr
    assert b"cannot record" in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr
    assert ledger.read_text().split() == ["run", "after"]  # not `later`: nothing started once it was known
    assert result(spool, "after")["state"] == "done"
    assert not (spool / "jobsdone" / "root:flaky@result").exists()
    assert drain(spool).returncode == 0
    assert ledger.read_text().split() == ["run", "after", "run", "later"]
    res = result(spool, "flaky")
    assert res["state"] == "done" and res["attempt"] == 2 and len(res["attempts"]) == 2, res


def orphaned_run(spool: Path, workdir: Path, name: str) -> tuple[Path, Path, Path]:
    """Spool ``name``, a job that counts its runs in a ledger and runs until its gate is removed; start a driver and
    kill it -9 once the job runs: its monitor goes on. The ledger, the gate and the run's record."""
    ledger, gate = workdir / "ledger", workdir / "gate"
    gate.touch()
    submit(name, f"echo run >> {ledger}; while [ -e {gate} ]; do sleep 0.05; done\n")
    driver = start_driver(spool)
    record = spool / "running" / HOST / f"root:{name}@run"
    wait_for(lambda: record.exists() and '"event":"job"' in record.read_text(), what="its record's job line")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    return ledger, gate, record


@pytest.mark.parametrize("damage", ["cut", "garbled", "zeroed", "deleted"])
def test_a_damaged_run_record_is_read_as_damage(spool, workdir, damage):
    """The run record of a running job is damaged while no driver runs (cut in half, garbled, zeroed,
    deleted): recovery cannot know whether the job ran, so it stops what runs of it, keeps what is
    left of the record in refused/, and runs the job again saying why (``rerun``), never as a job that
    had not started (``requeued``)."""
    ledger, gate, record = orphaned_run(spool, workdir, "hurt")
    data = record.read_bytes()
    if damage == "deleted":
        record.unlink()
    else:
        record.write_bytes({"cut": data[: len(data) // 2], "garbled": data.replace(b'"event"', b'"ev\xffnt"'),
                            "zeroed": bytes(len(data))}[damage])
    gate.unlink()
    assert drain(spool).returncode == 0
    [recovered] = [line for line in log_lines(spool) if " recovered root:hurt " in line]
    assert "rerun" in recovered and ("damaged" in recovered or "missing" in recovered), recovered
    assert result(spool, "hurt")["state"] == "done"
    assert ledger.read_text().split() == ["run", "run"]
    kept = list((spool / "refused").glob("root:hurt@run@*"))
    assert (kept == []) == (damage == "deleted"), kept
    assert all(f"kept in refused/ as {path.name})" in recovered for path in kept), recovered  # its very name


def test_a_record_line_a_full_disk_cut_short_is_no_damage_to_the_lines_after_it(spool, workdir):
    """A full disk cut a line of a running job's record short (the driver's stop line, say); the monitor's lines
    were appended to it. Recovery read that as a damaged record and ran the job again; the line after the cut
    is read whole, and the job is filed once, as it ended."""
    ledger, gate, record = orphaned_run(spool, workdir, "cut")
    with open(record, "ab") as handle:
        handle.write(b'{"event":"stop","why":"cance')
    gate.unlink()
    wait_for(lambda: '"event":"ended"' in record.read_text(), what="its monitor to record the end")
    assert b'"cance{"event":"exited"' in record.read_bytes()
    assert drain(spool).returncode == 0
    assert result(spool, "cut")["state"] == "done"
    assert ledger.read_text().split() == ["run"]
    assert not list((spool / "refused").glob("root:cut@run@*"))


def test_a_run_whose_claimed_file_was_deleted_is_filed_as_lost(spool, workdir):
    """The claimed job file is deleted while no driver runs (an admin's rm): its run record says a run
    was started; recovery files the job as lost, with a result and a log line, never silently."""
    _, gate, record = orphaned_run(spool, workdir, "gone")
    (spool / "running" / HOST / "root:gone").unlink()
    gate.unlink()
    wait_for(lambda: '"event":"ended"' in record.read_text(), what="its monitor to record the end")
    assert drain(spool).returncode == 0
    res = result(spool, "gone")
    assert res["state"] == "failed" and res["reason"].startswith("lost: its claimed job file was deleted"), res
    assert any(" failed root:gone " in line and "lost" in line for line in log_lines(spool))
    assert not record.exists()


def test_a_job_whose_machine_died_runs_again_and_says_so(spool, workdir):
    """Nothing recorded how it ended (its monitor died with it): the one case of a rerun, logged."""
    kill_driver_mid_job(spool, workdir, "again", machine_dies=True)
    drain(spool)
    [recovered] = [line for line in log_lines(spool) if " recovered root:again " in line]
    assert "rerun" in recovered and "recorded no end" in recovered
    assert result(spool, "again")["state"] == "done"


def test_a_job_whose_run_record_was_deleted_is_found_by_its_environment(spool, workdir):
    """A job's run record is deleted while it runs and no driver is alive: the next driver finds the
    job's processes by ONITE_RUN_ID (even one that left for its own session), not a namesake's, stops
    them and runs the job again, saying why."""
    pids, rerun = workdir / "pids", workdir / "rerun"
    submit("victim", f"[ -e {rerun} ] && exit 0; echo $$ >> {pids}; setsid sleep 60 & sleep 60 & wait\n")
    namesake = subprocess.Popen(["sleep", "600"], env=dict(os.environ, ONITE_JOB="root:victim",
                                                          ONITE_JOB_SPOOL="/elsewhere",
                                                          ONITE_RUN_ID=f"20261123T010203-{HOST}-1-1"))
    try:
        driver = start_driver(spool)
        wait_for(lambda: pids.exists(), what="the job to start")
        wait_for((spool / "running" / HOST / "root:victim@run").exists, what="the run record")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        (spool / "running" / HOST / "root:victim@run").unlink()
        leader = int(pids.read_text())
        wait_for(lambda: len(job_processes(spool, "root:victim")) == 3, what="the job's two sleeps")
        job_pids = job_processes(spool, "root:victim")
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
    [recovered] = [line for line in log_lines(spool) if " recovered root:victim " in line]
    assert "rerun" in recovered and "its run record is missing" in recovered, recovered
    assert "of its processes, found by ONITE_RUN_ID, were stopped" in recovered, recovered
    assert result(spool, "victim")["state"] == "done"


def job_processes(spool, key):
    """Pids of processes whose environment says they are job ``key`` of ``spool``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"ONITE_JOB={key}".encode() in env and f"ONITE_JOB_SPOOL={spool}".encode() in env:
            found.append(int(entry))
    return found


def test_a_job_knows_its_name_run_id_and_spool(spool, workdir):
    submit("curious", f'echo "$ONITE_JOB $ONITE_RUN_ID $ONITE_JOB_SPOOL" > {workdir}/seen\n')
    drain(spool)
    name, run_id, root = (workdir / "seen").read_text().split()
    assert (name, run_id, root) == ("root:curious", result(spool, "curious")["run_id"], str(spool))


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
    expected = [[what, f"root:j-{i:05}"] for i in range(1, len(names) + 1) for what in ("start", "done")]
    assert events == expected, events


@pytest.mark.attack
def test_a_driver_started_by_hand_says_what_it_waits_for(spool, cli):
    """A hand-started ``onite run`` with only a job ``--at`` hours away stayed for
    it, holding the host's lock and running what users spooled meanwhile, with nothing on its
    terminal or in the log to say why. It says so now, once."""
    import signal

    set_config(spool, until=(datetime.now() - timedelta(minutes=1)).strftime("%H:%M"))  # a window of ~24 h
    submit("later", "true\n", "--at", "+2h")
    driver = start_driver(spool)
    try:
        wait_for(lambda: any(" waiting " in line for line in log_lines(spool)), what="the waiting line")
        submit("meanwhile", "true\n")
        wait_for(lambda: (spool / "jobsdone" / "root:meanwhile@result").exists(), what="the job spooled meanwhile")
    finally:
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(60) == 0
    [line] = [line for line in log_lines(spool) if " waiting " in line]
    assert "nothing can start now: a queued job waits for a later --at time" in line, line
    assert "until=" not in line and f"{datetime.now() + timedelta(hours=2):%H:%M}" not in line  # the job's own


def test_a_driver_that_has_logged_its_exit_ignores_int_and_term(spool):
    """``onite run`` is leaving once its exit is logged: an INT or a TERM that comes then (a second
    Ctrl-C, a service manager's stop) neither kills it nor turns its exit 0 into a failure."""
    script = ("import os, signal, sys; from onite.drain.driver import Driver; from onite.spool.paths import SpoolDir\n"
              f"code = Driver(SpoolDir({str(spool)!r})).run(leaving=True)\n"
              "os.kill(os.getpid(), signal.SIGTERM); os.kill(os.getpid(), signal.SIGINT)\n"
              "print('still here', code)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert (done.returncode, done.stdout) == (0, "still here 0\n"), done.stderr
    assert any(" driver-exit " in line for line in log_lines(spool))


def test_an_interrupt_before_a_driver_has_its_lock_ends_it_in_one_line(spool):
    """INT before the driver's pid is anywhere to be read (here: as soon as onite's own code runs):
    one line and exit 130, never a traceback. The INT is sent once main has set its handler: on a
    loaded machine a timer may fire before that, where an INT is the interpreter's to report."""
    script = ("import os, signal, sys; from onite.__main__ import main, _interrupt\n"
              "def alarm(*_):\n"
              "    if signal.getsignal(signal.SIGINT) is _interrupt:\n"
              "        os.kill(os.getpid(), signal.SIGINT)\n"
              "    else:\n"
              "        signal.setitimer(signal.ITIMER_REAL, 0.0002)\n"
              "signal.signal(signal.SIGALRM, alarm)\n"
              "signal.setitimer(signal.ITIMER_REAL, float(sys.argv[1]))\n"
              "code = main(['run'])\n"
              "signal.setitimer(signal.ITIMER_REAL, 0)\n"
              "sys.exit(code)\n")
    for delay in ("0.0005", "0.002", "0.005", "0.01", "0.02", "0.05", "0.08"):
        done = subprocess.run([sys.executable, "-c", script, delay], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=str(REPO), ONITE_SPOOL=str(spool)))
        # (an INT that lands in a callback of Python's own import machinery is Python's to print and lose)
        if "Exception ignored in" not in done.stderr:
            assert "Traceback" not in done.stderr, (delay, done.stderr)
        assert done.returncode in (0, 130), done
        if done.returncode == 130:
            assert done.stderr.strip().splitlines()[-1:] == ["onite: interrupted"], (delay, done)
