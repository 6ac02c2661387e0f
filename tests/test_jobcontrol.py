"""Job control on a real night: slots, timeouts, retries, dependencies, urgent, hold, windows,
signals, cancel, crash recovery (real processes, real signals; nothing waits on a bare sleep)."""

import os
import signal
import subprocess
import sys
from datetime import datetime, time as dtime, timedelta

import pytest

from conftest import REPO, ManualClock, drain, log_lines, result, run_cli, set_config, start_driver, wait_for

HOST = os.uname().nodename.split(".")[0]


def submit(name, body, *args, **kw):
    r = run_cli(["submit", name, *args], stdin=body.encode() if isinstance(body, str) else body, **kw)
    assert r.code == 0, r
    return r


def probe_job(spool, workdir, name, slots):
    """A job that records how many jobs run at once as it starts (a folder of names, lock-free), then
    stays until it has seen ``slots`` jobs run at once, or the queue is empty: the bound is reached
    however slowly the machine starts jobs, and the driver is tested against it for the whole drain."""
    live, queue = workdir / "live", spool / "jobs" / "P4"
    return (f"touch {live}/{name}; n=$(ls {live} | wc -l); echo $n >> {workdir}/peaks\n"
            f'while [ $n -lt {slots} ] && [ -n "$(ls {queue})" ]; do sleep 0.01; n=$(ls {live} | wc -l); done\n'
            f"rm {live}/{name}\n")


@pytest.mark.parametrize("slots", [1, 3])
def test_slots_bound_holds_and_is_reached(spool, workdir, slots):
    (workdir / "live").mkdir()
    for i in range(9):
        submit(f"p{i}", probe_job(spool, workdir, f"p{i}", slots))
    assert drain(spool, "--slots", str(slots)).returncode == 0
    peaks = [int(x) for x in (workdir / "peaks").read_text().split()]
    assert len(peaks) == 9
    assert max(peaks) == slots  # never more than N, and N was reached


def test_slots_from_config(spool, workdir):
    set_config(spool, slots=2)
    (workdir / "live").mkdir()
    for i in range(6):
        submit(f"c{i}", probe_job(spool, workdir, f"c{i}", 2))
    drain(spool)
    assert max(int(x) for x in (workdir / "peaks").read_text().split()) == 2


def test_slots_keep_priority_order(spool, workdir):
    trace = workdir / "trace"
    for name, prio in [("low", 7), ("mid", 4), ("top", 1), ("mid2", 4)]:
        submit(name, f"echo {name} >> {trace}; sleep 0.2\n", "-p", str(prio))
    drain(spool, "--slots", "2")
    # both slots start at once, so which of the two writes first is the scheduler's choice
    assert sorted(trace.read_text().split()[:2]) == ["mid", "top"]


def test_timeout_kills_the_whole_group_including_grandchildren(spool, workdir):
    set_config(spool, kill_grace="1s")
    pids = workdir / "pids"
    # the job ignores TERM in a grandchild to prove the KILL after the grace period reaches it
    submit("slow", f"echo $$ >> {pids}; (trap '' TERM; sleep 120 & echo $! >> {pids}; wait) & wait\n",
           "--timeout", "1s")
    proc = drain(spool)
    assert proc.returncode == 0
    rec = result(spool, "slow")
    assert rec["state"] == "failed" and rec["reason"] == "timeout"
    for pid in map(int, pids.read_text().split()):
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") or " Z " in open(f"/proc/{pid}/stat").read(),
                 what=f"process {pid} to be gone")


def test_default_timeout_from_config(spool):
    set_config(spool, timeout="1s", kill_grace="1s")
    submit("sleepy", "sleep 30\n")
    drain(spool)
    assert result(spool, "sleepy")["reason"] == "timeout"


def test_leftover_background_processes_die_with_their_job(spool, workdir):
    set_config(spool, kill_grace="1s")
    pidfile = workdir / "bgpid"
    submit("leaver", f"sleep 120 & echo $! > {pidfile}; exit 0\n")
    drain(spool)
    pid = int(pidfile.read_text())
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or " Z " in open(f"/proc/{pid}/stat").read(),
             what="the job's background process to be killed")


def drive_to_wakes(clock):
    """A driver's ``tick``: whenever it waits for a time (a not-before time, a back-off), let its clock
    jump there, so that it never waits in real time."""
    def tick(driver, now):
        if driver.night.wake_at is not None and driver.night.wake_at > now:
            clock.set(driver.night.wake_at)

    return tick


def test_retries_with_backoff_record_every_attempt(spool, workdir):
    """Back-off 1m, then 2m, on the driver's clock, which the test moves on (nothing waits three minutes)."""
    from onite.drain.driver import Driver
    from onite.spool.paths import SpoolDir

    set_config(spool, retry_delay="1m")
    count = workdir / "count"
    submit("flaky", f"echo x >> {count}; [ $(wc -l < {count}) -ge 3 ]\n", "--retries", "3")
    clock = ManualClock(datetime.now().astimezone())
    assert Driver(SpoolDir(spool), clock=clock, tick=drive_to_wakes(clock)).run() == 0
    rec = result(spool, "flaky")
    assert rec["state"] == "done" and rec["attempt"] == 3
    assert [a["exit_code"] for a in rec["attempts"]] == [1, 1, 0]
    starts = [datetime.fromisoformat(a["started"]) for a in rec["attempts"]]
    assert starts[1] - starts[0] >= timedelta(minutes=1) and starts[2] - starts[1] >= timedelta(minutes=2)
    assert sum(" retry root:flaky " in line for line in log_lines(spool)) == 2


def test_retries_give_up_after_n(spool):
    set_config(spool, retry_delay="1s")
    submit("hopeless", "exit 7\n", "--retries", "1")
    drain(spool)
    rec = result(spool, "hopeless")
    assert rec["state"] == "failed" and rec["exit_code"] == 7 and len(rec["attempts"]) == 2


def test_dependency_chain_with_a_failing_base(spool, workdir):
    trace = workdir / "trace"
    submit("base-ok", f"echo base-ok >> {trace}\n", "-p", "5")
    submit("base-bad", f"echo base-bad >> {trace}; exit 1\n", "-p", "5")
    submit("child-ok", f"echo child-ok >> {trace}\n", "-p", "1", "--after", "base-ok")
    submit("child-bad", f"echo child-bad >> {trace}\n", "-p", "1", "--after", "base-bad")
    submit("grandchild", f"echo grandchild >> {trace}\n", "-p", "1", "--after", "child-bad")
    submit("both", f"echo both >> {trace}\n", "--after", "base-ok", "--after", "child-ok")
    drain(spool)
    # after every job the queue is looked at again: the P1 child overtakes the P5 base
    assert trace.read_text().split() == ["base-ok", "child-ok", "both", "base-bad"]
    assert result(spool, "child-bad")["reason"] == "dependency base-bad failed"
    assert result(spool, "grandchild")["reason"] == "dependency child-bad failed"
    assert result(spool, "child-bad")["started"] is None
    assert result(spool, "both")["state"] == "done"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to act as the users nobody and daemon")
def test_a_dependency_on_another_users_job_names_its_user(spool, workdir):
    """``--after USER:NAME`` waits for USER's job NAME (a bare NAME is the waiting job's own user's):
    nobody's report runs once daemon's build succeeded, and not for a build of anyone else's."""
    os.chmod(workdir, 0o777)
    gate = workdir / "gate"
    submit("build", f"while [ ! -e {gate} ]; do sleep 0.05; done\n", "-p", "5", user="daemon", cwd="/tmp")
    r = run_cli(["submit", "report", "-p", "1", "--after", "build"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (2, "onite: no job 'build' of yours — did you mean daemon:build?\n"), r  # nobody:build
    submit("report", f"echo ran > {workdir}/report\n", "-p", "1", "--after", "daemon:build", user="nobody", cwd="/tmp")
    for bad, said in (("no-such-user:build", "no job 'build' of no-such-user's is queued, running or finished"),
                      ("root:build", "no job 'build' of root's is queued, running or finished"),
                      ("a b:build", "invalid user name 'a b'"), ("daemon:../x", "invalid dependency name")):
        r = run_cli(["submit", "other", "--after", bad], stdin=b"true\n", user="nobody", cwd="/tmp")
        assert r.code == 2 and said in r.err, (bad, r)
    driver = start_driver(spool)
    rows = {j["name"]: j for j in run_cli(["status", "--json"], user="nobody").json()["waiting"]}
    assert rows["report"]["reason"] in ("after daemon:build (running)", "after daemon:build (queued)"), rows
    gate.touch()
    assert driver.wait(timeout=120) == 0
    assert result(spool, "report")["state"] == "done" and (workdir / "report").read_text() == "ran\n"
    assert result(spool, "build")["user"] == "daemon"


def test_dependency_on_cancelled_job_fails(spool, cli):
    submit("parent", "true\n")
    submit("kid", "true\n", "--after", "parent")
    assert cli(["cancel", "parent"]).code == 0
    drain(spool)
    assert result(spool, "kid")["reason"] == "dependency parent was cancelled"


def test_urgent_runs_before_p1(spool, workdir, cli):
    trace = workdir / "trace"
    submit("p1", f"echo p1 >> {trace}\n", "-p", "1")
    submit("urgent", f"echo urgent >> {trace}\n", "-p", "5", "--urgent")
    drain(spool)
    assert trace.read_text().split() == ["urgent", "p1"]
    listed = [j for j in cli(["list", "--all", "--json"]).json()["jobs"] if j["name"] == "urgent"]
    assert listed[0]["urgent"] is True


def test_hold_and_release(spool, workdir, cli):
    trace = workdir / "trace"
    submit("held", f"echo held >> {trace}\n", "--hold")
    submit("later", f"echo later >> {trace}\n", "-p", "7")
    assert cli(["list", "--json"]).json()["jobs"][0]["state"] == "held"
    drain(spool)
    assert trace.read_text().split() == ["later"]
    assert cli(["find", "held"]).code == 0
    assert cli(["release", "held"]).code == 0
    assert cli(["hold", "held"]).code == 0 and cli(["release", "held"]).code == 0
    drain(spool)
    assert trace.read_text().split() == ["later", "held"]
    r = cli(["hold", "nosuch"])
    assert r.code == 1 and "no job 'nosuch' is queued" in r.err



def test_a_job_released_while_the_driver_runs_is_run_by_it(spool, workdir, cli):
    """The driver leaves held jobs out of its picks; a release makes it look again."""
    trace, gate = workdir / "trace", workdir / "gate"
    gate.touch()
    submit("held", f"echo held >> {trace}\n", "--hold", "-p", "1")
    submit("blocker", f"echo blocker >> {trace}; while [ -e {gate} ]; do sleep 0.02; done\n", "-p", "5")
    submit("last", f"echo last >> {trace}\n", "-p", "6")
    driver = start_driver(spool)
    wait_for(lambda: trace.exists() and "blocker" in trace.read_text(), what="the blocker to start")
    assert cli(["release", "held"]).code == 0
    gate.unlink()
    assert driver.wait(60) == 0
    assert trace.read_text().split() == ["blocker", "held", "last"]

def test_not_before_time_waits_inside_the_window(spool, workdir):
    """Inside the night's window the driver waits for a not-before time (on its clock: the test moves it
    on once the untimed job is done), then runs the job."""
    from onite.drain.driver import Driver
    from onite.spool.paths import SpoolDir

    trace = workdir / "trace"
    clock = ManualClock(datetime.now().astimezone())
    at = clock.now() + timedelta(minutes=30)
    submit("timed", f"echo timed >> {trace}\n", "--at", at.isoformat())
    submit("now", f"echo now >> {trace}\n", "-p", "7")
    until = (clock.now() + timedelta(hours=1)).time().replace(microsecond=0)
    assert Driver(SpoolDir(spool), clock=clock, until=until, tick=drive_to_wakes(clock)).run() == 0
    assert trace.read_text().split() == ["now", "timed"]
    assert datetime.fromisoformat(result(spool, "timed")["started"]) >= at


def test_without_a_window_future_jobs_wait_for_a_later_drain(spool, workdir, cli):
    trace = workdir / "trace"
    submit("tomorrow", f"echo tomorrow >> {trace}\n", "--at", "+12h")
    submit("tonight", f"echo tonight >> {trace}\n")
    assert drain(spool).returncode == 0  # returns instead of sleeping for twelve hours
    assert trace.read_text().split() == ["tonight"]
    assert [j["name"] for j in cli(["list", "--json"]).json()["jobs"]] == ["tomorrow"]


def test_until_window_leaves_the_rest_queued(spool, workdir, cli):
    """The window closes while the first job runs (the test moves the driver's clock past `until` once it
    runs): the jobs behind it stay queued for the next night."""
    from onite.drain.driver import Driver
    from onite.spool.paths import SpoolDir

    trace, gate = workdir / "trace", workdir / "gate"
    gate.touch()
    submit("first", f"echo first >> {trace}; while [ -e {gate} ]; do sleep 0.02; done\n", "-p", "1")
    submit("second", f"echo second >> {trace}\n", "-p", "2")
    submit("third", f"echo third >> {trace}\n", "-p", "3")
    clock = ManualClock(datetime.now().astimezone().replace(hour=6, minute=59, second=0, microsecond=0))

    def close_the_window(driver, now):
        if trace.exists() and gate.exists():  # the first job runs: 07:00 comes, then it ends
            clock.set(now.replace(hour=7, minute=0, second=1))
            gate.unlink()

    driver = Driver(SpoolDir(spool), clock=clock, until=dtime(7, 0), tick=close_the_window)
    assert driver.run() == 0
    assert trace.read_text().split() == ["first"]
    assert [j["name"] for j in cli(["list", "--json"]).json()["jobs"]] == ["second", "third"]
    assert any("window-closed" in line and "left=2" in line for line in log_lines(spool))
    drain(spool)
    assert trace.read_text().split() == ["first", "second", "third"]


def test_sigint_finishes_running_and_starts_nothing(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("running", f"while [ -e {gate} ]; do sleep 0.02; done; echo finished > {workdir}/out\n", "-p", "1")
    submit("waiting", "true\n", "-p", "2")
    driver = start_driver(spool)
    wait_for(lambda: (spool / "running" / HOST / "root:running").exists(), what="the first job")
    driver.send_signal(signal.SIGINT)
    wait_for(lambda: any("action=\"finish running jobs" in ln for ln in log_lines(spool)), what="the signal")
    gate.unlink()
    assert driver.wait(30) == 0
    assert result(spool, "running")["state"] == "done" and (workdir / "out").read_text() == "finished\n"
    assert (spool / "jobs" / "P2" / "root:waiting").exists()


def test_double_sigterm_requeues_running_jobs(spool, workdir):
    pidfile = workdir / "pid"
    submit("long", f"echo $$ > {pidfile}; sleep 120\n", "-p", "3")
    driver = start_driver(spool)
    # the shell creates the file before it writes the pid: wait for a whole line
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().endswith("\n") and pidfile.read_text(),
                       what="the job to start"))
    driver.send_signal(signal.SIGTERM)
    wait_for(lambda: any("finish running jobs" in ln for ln in log_lines(spool)), what="first TERM")
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(30) == 0
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or " Z " in open(f"/proc/{pid}/stat").read(),
             what="the job to be killed")
    assert (spool / "jobs" / "P3" / "root:long").exists()
    assert not (spool / "jobsdone" / "root:long@result").exists()
    assert any(" requeued root:long " in line for line in log_lines(spool))


def test_sigquit_kills_and_requeues(spool, workdir):
    pidfile = workdir / "pid"
    submit("q", f"echo $$ > {pidfile}; sleep 120\n")
    driver = start_driver(spool)
    wait_for(pidfile.exists, what="the job to start")
    driver.send_signal(signal.SIGQUIT)
    assert driver.wait(30) == 0
    assert (spool / "jobs" / "P4" / "root:q").exists()
    [exit_line] = [line for line in log_lines(spool) if " driver-exit " in line]
    assert " left=1 " in exit_line, exit_line  # the job put back is left in the queue: it said left=0


def test_a_job_that_ended_before_a_sigquit_was_heard_is_filed_not_run_again(spool, workdir):
    """The job ends (exit 0, its monitor records it) while the driver is busy (here: stopped), and the
    QUIT arrives before the driver has heard the end: the hard stop's kill came too late, so the job
    is filed as it ended. Before, it was requeued as interrupted and the next drain ran it again."""
    gate, ledger = workdir / "gate", workdir / "ledger"
    gate.touch()
    submit("q", f"echo start >> {ledger}; while [ -e {gate} ]; do sleep 0.02; done; echo end >> {ledger}\n")
    driver = start_driver(spool)
    wait_for(lambda: ledger.exists() and "start" in ledger.read_text(), what="the job to start")
    os.kill(driver.pid, signal.SIGSTOP)
    try:
        gate.unlink()
        wait_for(lambda: any('"ended"' in p.read_text() for p in (spool / "running").glob("*/root:q@run")),
                 what="the monitor to record the end")
        driver.send_signal(signal.SIGQUIT)
    finally:
        os.kill(driver.pid, signal.SIGCONT)
    assert driver.wait(30) == 0
    assert result(spool, "q")["state"] == "done"
    assert not any(" requeued root:q " in line for line in log_lines(spool))
    assert drain(spool).returncode == 0
    assert ledger.read_text() == "start\nend\n"  # once


def test_usr1_logs_status_and_hup_reloads(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("busy", f"while [ -e {gate} ]; do sleep 0.02; done\n")
    driver = start_driver(spool)
    wait_for(lambda: (spool / "running" / HOST / "root:busy").exists(), what="the job to start")
    driver.send_signal(signal.SIGUSR1)
    wait_for(lambda: any(" status " in ln and "running=root:busy" in ln for ln in log_lines(spool)), what="status line")
    set_config(spool, slots=3)
    driver.send_signal(signal.SIGHUP)
    wait_for(lambda: any(" reloaded " in ln and "slots=3" in ln for ln in log_lines(spool)), what="reload")
    gate.unlink()
    assert driver.wait(30) == 0


def test_cancel_a_running_job(spool, workdir, cli):
    pidfile = workdir / "pid"
    submit("victim", f"echo $$ > {pidfile}; sleep 120\n")
    driver = start_driver(spool)
    wait_for(pidfile.exists, what="the job to start")
    r = cli(["cancel", "victim"])
    assert r.code == 0 and "cancelled" in r.out, r
    assert driver.wait(30) == 0
    rec = result(spool, "victim")
    assert rec["state"] == "cancelled" and rec["reason"].startswith("cancelled by ")


def test_cancellable_lists_the_callers_running_then_queued_jobs_and_await_cancel_tells_how_one_ended(spool, workdir):
    from onite.spool.paths import SpoolDir
    from onite.app.control import CancelReport, await_cancel, cancel, select_jobs

    pidfile = workdir / "pid"
    submit("runner", f"echo $$ > {pidfile}; sleep 120\n")
    submit("later", "true\n", "--hold")
    submit("last", "true\n", "--hold")
    driver = start_driver(spool)
    wait_for(pidfile.exists, what="the job to start")
    target = SpoolDir(spool)
    assert [(v.name, v.state) for v in select_jobs(target, [], os.geteuid(), every=True).chosen] == \
        [("root:runner", "running"), ("root:later", "held"), ("root:last", "held")]
    assert select_jobs(target, [], os.geteuid() + 4242, every=True).chosen == []  # someone else's pick list
    asked = CancelReport("root:later", "requested", "as asked")
    assert await_cancel(target, asked) is asked  # not running: nothing to wait for
    report = cancel(target, "runner", os.geteuid(), datetime.now().astimezone())
    assert report.action == "requested"
    ended = await_cancel(target, report)
    assert ended.name == "root:runner" and ended.action == "cancelled" and ended.detail.startswith("cancelled by "), ended
    assert driver.wait(30) == 0


def test_cancel_queued_job_and_not_found(spool, cli):
    submit("gone", "true\n")
    r = cli(["cancel", "gone"])
    assert r.code == 0 and r.out == "gone: cancelled\n"
    assert result(spool, "gone")["state"] == "cancelled"
    r = cli(["cancel", "gone"])
    assert (r.code, r.err) == (3, "onite: job 'gone' was cancelled already — spool it again: onite restart gone\n"), r
    r = cli(["cancel"], stdin=b"")
    assert r.code == 2 and "no job name given" in r.err


def test_an_unavailable_executor_requeues_the_job_waits_and_goes_on(spool, workdir):
    """A Slurm controller that does not answer is not the job's fault: it goes back, the driver waits
    (on its clock, which the test moves on: no pause is waited out in real time)."""
    from onite.drain.driver import Driver
    from onite.exec.local import LocalRunner
    from onite.exec.runner import Unavailable
    from onite.spool.paths import SpoolDir

    class UnavailableTwice(LocalRunner):
        refusals = 2

        def start(self, run, output_path, **options):
            if self.refusals:
                self.refusals -= 1
                raise Unavailable("the controller does not answer (test)")
            super().start(run, output_path, **options)

    clock = ManualClock(datetime.now().astimezone())

    def tick(driver, now):  # the driver waits out the executor's pause on its clock: let that time pass
        if driver.night.wake_at is not None and driver.night.wake_at > now:
            clock.set(driver.night.wake_at)

    trace = workdir / "trace"
    submit("a", f"echo a >> {trace}\n")
    submit("b", f"echo b >> {trace}\n")
    runner = UnavailableTwice(shell="/bin/sh", kill_grace=1.0, switch_user=False)
    assert Driver(SpoolDir(spool), runner=runner, clock=clock, tick=tick).run() == 0
    assert sorted(trace.read_text().split()) == ["a", "b"]
    for name in "ab":
        assert result(spool, name)["state"] == "done" and result(spool, name)["attempt"] == 1
    pauses = [line for line in log_lines(spool) if " executor-unavailable " in line]
    assert len(pauses) == 2
    assert "retry_in=15s" in pauses[0] and "retry_in=30s" in pauses[1]  # PAUSE_FIRST, then twice as long
    assert "the controller does not answer (test)" in pauses[0]


def test_a_dependent_failed_late_keeps_its_own_submit_time(spool, workdir):
    """Its failure is filed after 70 held jobs behind it were looked at (and its parse no longer kept)."""
    from onite.api import Spool

    gate = workdir / "gate"
    gate.touch()
    submit("base", f"touch {workdir}/started; while [ -e {gate} ]; do sleep 0.02; done; exit 1\n", "-p", "1")
    submit("dependent", "true\n", "-p", "1", "--after", "base")
    spooled = datetime.now().astimezone()
    Spool(spool).submit_many([(f"held-{i:03d}", "true\n") for i in range(70)], priority=1, hold=True)
    driver = start_driver(spool, "--slots", "2")
    wait_for((workdir / "started").exists, what="the base job to start")
    # a status line is logged at the top of a turn of the loop: the turn that started base picked for the
    # free slot too, looking at the dependent and the held jobs
    os.kill(driver.pid, signal.SIGUSR1)
    wait_for(lambda: any(" status " in line and "running=root:base" in line for line in log_lines(spool)),
             what="the driver's status line")
    gate.unlink()
    assert driver.wait(60) == 0
    record = result(spool, "dependent")
    assert record["state"] == "failed" and "base" in record["reason"]
    assert datetime.fromisoformat(record["submitted"]) <= spooled


SUBMITTER = """
import os, sys
from onite.__main__ import main
k, n, ran = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
failed = 0
for i in range(n):
    r, w = os.pipe()
    os.write(w, f"touch {ran}/s{k}-{i}\\n".encode())
    os.close(w)
    os.dup2(r, 0)
    os.close(r)
    failed += main(["submit", f"s{k}-{i}", "-p", str(1 + i % 7)]) != 0
sys.exit(failed)
"""


def test_six_concurrent_submitters_then_two_slots(spool, workdir):
    ran = workdir / "ran"
    ran.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    submitters = [subprocess.Popen([sys.executable, "-c", SUBMITTER, str(k), "40", str(ran)], env=env)
                  for k in range(6)]
    assert [p.wait(120) for p in submitters] == [0] * 6
    assert len([p for p in (spool / "jobs").rglob("*") if p.is_file()]) == 240
    assert drain(spool, "--slots", "2", timeout=300).returncode == 0
    assert len(os.listdir(ran)) == 240
    assert len([p for p in (spool / "jobsdone").iterdir() if p.name.endswith("@result")]) == 50  # keep = 50
    assert sum(" done root:s" in line for line in log_lines(spool)) == 240
    assert not [p for p in (spool / "jobs").rglob("*") if p.is_file()]


def test_one_name_spooled_at_once_into_every_priority_is_queued_once(spool):
    """Seven submits of one name, each into another priority, all at once: each folder's no-replace rename let
    several pass (the name queued in up to six folders, each copy run in turn, each run's output overwriting the
    last). Exactly one is spooled, and every other submit is refused as a taken name."""
    env = dict(os.environ, PYTHONPATH=str(REPO), ONITE_SPOOL=str(spool))
    for round_ in range(6):
        submits = [subprocess.Popen([sys.executable, "-m", "onite", "submit", "-q", "-p", str(p), f"same{round_}"],
                                    env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE) for p in range(1, 8)]
        for p in submits:  # each reads its text only once all are started, so their checks meet
            p.stdin.write(b"true\n")
            p.stdin.close()
        codes = sorted(p.wait(60) for p in submits)
        copies = [f for f in (spool / "jobs").rglob(f"root:same{round_}")]
        assert len(copies) == 1 and codes == [0] + [3] * 6, (copies, codes, [p.stderr.read() for p in submits])


def test_one_batch_spooled_at_once_into_two_priorities_queues_each_name_once(spool):
    """The same as a batch (submit --lines): two batches of the same names into P1 and P2 at once queued each name
    twice, and each ran twice. Each name is queued once at most, and a submit that took names back says so."""
    env = dict(os.environ, PYTHONPATH=str(REPO), ONITE_SPOOL=str(spool))
    for round_ in range(8):
        submits = [subprocess.Popen([sys.executable, "-m", "onite", "submit", "-q", "--lines", "-p", str(p),
                                     f"batch{round_}"], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE) for p in (1, 2)]
        for p in submits:
            p.stdin.write(b"true\ntrue\n")
            p.stdin.close()
        codes = [p.wait(60) for p in submits]
        names = [f.name for f in (spool / "jobs").rglob(f"root:batch{round_}-*")]
        assert len(names) == len(set(names)) and set(codes) <= {0, 3}, (names, codes)
        assert codes.count(0) == 0 or sorted(names) == [f"root:batch{round_}-0000{i}" for i in (1, 2)], (names, codes)


def test_a_cancelled_job_still_ending_when_the_driver_is_stopped_hard_is_filed_cancelled(spool, workdir):
    """A running job is cancelled, and takes its kill_grace to end (it ignores TERM); meanwhile the driver is stopped
    hard (QUIT). Its record's first stop line is the cancel, as a recovering driver files it: the live driver put it
    back in its queue as interrupted, and the next drain ran the job its owner had cancelled."""
    import threading

    set_config(spool, kill_grace="2s")
    pidfile = workdir / "pid"
    submit("victim", f"trap '' TERM; echo $$ > {pidfile}; while :; do sleep 0.05; done\n")
    driver = start_driver(spool)
    wait_for(pidfile.exists, what="the job to start")
    cancel = threading.Thread(target=run_cli, args=(["cancel", "victim"],))
    cancel.start()
    wait_for(lambda: any(b'"why":"cancel"' in p.read_bytes() for p in (spool / "running").glob("*/root:victim@run")),
             what="the cancel's stop line")
    driver.send_signal(signal.SIGQUIT)
    assert driver.wait(60) == 0
    cancel.join(60)
    assert not list((spool / "jobs").rglob("root:victim")), "put back in its queue"
    assert result(spool, "victim")["state"] == "cancelled"
