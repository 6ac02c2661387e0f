"""``onite wait``: real spools, real drivers, `onite wait` in a real child process; jobs gated on a
file the test removes. Exit statuses: 0 done, 1 unknown, 2 usage, 5 failed/cancelled/unknown outcome,
6 timeout. Nothing asserts a timing."""

import json
import re
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from conftest import REPO, ManualClock, drain, needs_root, run_cli, start_driver, wait_for
from onite.spool.paths import SpoolDir
from onite.spool.accounts import user_name
from onite.app import wait as w
from onite.core.state import JobState, Result


def submit(name, body, *args, **kw):
    r = run_cli(["submit", name, *args], stdin=body.encode(), **kw)
    assert r.code == 0, r
    return r


def gated(gate, code=0):
    return f"while [ -e {gate} ]; do sleep 0.02; done\nexit {code}\n"


def start_wait(spool, *args):
    """`onite wait …` as a real process, as start_driver starts `onite run`."""
    env = dict(os.environ, ONITE_SPOOL=str(spool))
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "onite", "wait", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def running(spool, key):
    return any((spool / "running" / h / key).exists() for h in os.listdir(spool / "running"))


@pytest.fixture
def gate(workdir):
    path = workdir / "gate"
    path.touch()
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def procs():
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- named jobs ------------------------------------------------------------------------------


@pytest.mark.parametrize("code, expected_exit, line", [(0, 0, "build: done"), (3, 5, "build: failed (exit 3)")])
def test_wait_blocks_until_the_job_ends_and_reports_it(spool, gate, procs, code, expected_exit, line):
    submit("build", gated(gate, code))
    procs.append(driver := start_driver(spool))
    wait_for(lambda: running(spool, "root:build"), what="build to start")
    procs.append(waiter := start_wait(spool, "build"))
    assert waiter.stderr.readline() == "onite: waiting for build (running)…\n"  # it looked, and blocks
    gate.unlink()
    rc, out, err = finish(waiter)
    assert (rc, out.splitlines()) == (expected_exit, [line]), err
    driver.wait(timeout=60)


def test_wait_for_a_queued_job_that_is_cancelled(spool, gate, procs):
    submit("c1", gated(gate))
    procs.append(waiter := start_wait(spool, "c1"))
    r = run_cli(["cancel", "c1"])
    assert r.code == 0, r
    rc, out, _ = finish(waiter)
    assert (rc, out.strip()) == (5, f"c1: cancelled by {user_name(os.geteuid())}")


def test_wait_for_a_running_job_that_is_cancelled(spool, gate, procs):
    submit("c2", gated(gate))
    procs.append(driver := start_driver(spool))
    wait_for(lambda: running(spool, "root:c2"), what="c2 to start")
    procs.append(waiter := start_wait(spool, "c2", "--json"))
    assert run_cli(["cancel", "c2"]).code == 0
    rc, out, _ = finish(waiter)
    doc = json.loads(out)
    assert rc == 5 and doc["exit_code"] == 5 and doc["waited"] == "jobs" and not doc["timed_out"]
    assert [(j["name"], j["state"]) for j in doc["jobs"]] == [("c2", "cancelled")]
    assert doc["jobs"][0]["reason"].startswith("cancelled by")
    driver.wait(timeout=60)


def test_unknown_name_exits_1_at_once_without_waiting(spool, gate):
    submit("known", gated(gate))  # queued, no driver: waiting for it would never end
    r = run_cli(["wait", "known", "ghost", "phantom"], timeout=30)
    assert r.code == 1 and r.out == ""
    assert "'ghost', 'phantom'" in r.err and "known" not in r.err


def test_usage_errors_exit_2(spool):
    assert run_cli(["wait", "../x"]).code == 2
    bad = run_cli(["wait", "x", "--timeout", "soon"])
    assert bad.code == 2 and "--timeout" in bad.err


def test_timeout_passes_first(spool, gate, procs):
    submit("slow", gated(gate))
    submit("never", "true\n", "--hold")
    procs.append(start_driver(spool))
    wait_for(lambda: running(spool, "root:slow"), what="slow to start")
    r = run_cli(["wait", "slow", "never", "--timeout", "1s"])
    assert r.code == 6, r
    assert r.out.splitlines() == ["slow: still running", "never: still held"]
    # a drain runs: nothing to warn of but the hold, which it could wait through for ever
    assert r.err == ("onite: never is held: nothing runs it until onite release never; waiting for slow (running), "
                     "never (held)…\n"), r


def test_waiting_for_a_queued_job_that_no_drain_will_run_says_so(spool):
    submit("idle", "true\n")
    r = run_cli(["wait", "idle", "--timeout", "1s"])
    assert (r.code, r.out) == (6, "idle: still queued\n"), r
    assert r.err.startswith("onite: no drain is scheduled, so nothing will start one — "), r
    assert r.err.endswith("; waiting for idle (queued)…\n"), r


def test_several_names_mixed(spool):
    submit("ok1", "true\n")
    submit("bad1", "exit 4\n")
    submit("ok2", "true\n")
    assert drain(spool).returncode == 0
    r = run_cli(["wait", "ok1", "bad1", "ok2", "ok1"])
    assert (r.code, r.out.splitlines()) == (5, ["ok1: done", "bad1: failed (exit 4)", "ok2: done"])
    r = run_cli(["wait", "ok2", "ok1"])
    assert (r.code, r.out.splitlines()) == (0, ["ok2: done", "ok1: done"])


def test_a_job_spooled_again_is_waited_for_not_its_earlier_run(spool, gate, procs):
    submit("again", "exit 2\n")
    assert drain(spool).returncode == 0
    submit("again", gated(gate))
    procs.append(waiter := start_wait(spool, "again"))
    assert "waiting for again (queued)…" in waiter.stderr.readline()  # its word, before any driver claims it
    procs.append(start_driver(spool))
    wait_for(lambda: running(spool, "root:again"), what="the new run to start")
    assert waiter.poll() is None  # the failed record of the first run does not end the wait
    gate.unlink()
    assert finish(waiter)[:2] == (0, "again: done\n")


# ---- the current drain ---------------------------------------------------------------------


def test_no_driver_running_exits_0_at_once(spool):
    r = run_cli(["wait"], timeout=30)
    assert (r.code, r.out.strip()) == (0, "no drain is running")
    doc = run_cli(["wait", "--json"]).json()
    assert doc["exit_code"] == 0 and doc["drivers"] == [] and doc["jobs"] == []


@pytest.mark.parametrize("fail", [False, True])
def test_wait_for_the_drain(spool, gate, procs, fail):
    if fail:
        submit("broken", "exit 7\n", "-p", "1")
    submit("long", gated(gate), "-p", "2")
    procs.append(driver := start_driver(spool))
    wait_for(lambda: running(spool, "root:long"), what="long to start")
    procs.append(waiter := start_wait(spool))
    assert waiter.stderr.readline().startswith("onite: waiting for the drain on ")  # it looked, and blocks
    gate.unlink()
    rc, out, err = finish(waiter)
    driver.wait(timeout=60)
    if fail:
        assert (rc, out.strip()) == (5, "drain finished: 1 done, 1 failed (broken)"), err
    else:
        assert (rc, out.strip()) == (0, "drain finished: 1 done"), err


def test_wait_for_the_drain_times_out(spool, gate, procs):
    submit("long", gated(gate))
    procs.append(start_driver(spool))
    wait_for(lambda: running(spool, "root:long"), what="long to start")
    doc = run_cli(["wait", "--timeout", "1s", "--json"]).json()
    assert doc["exit_code"] == 6 and doc["timed_out"] and doc["still"] == doc["drivers"] and len(doc["still"]) == 1


# ---- the decisions and the poll loop, without processes ------------------------------------


NOW = datetime(2026, 11, 23, 7, 0, tzinfo=timezone.utc)


def record(name, state="done", run_id="r1", minutes=0, exit_code=0):
    return Result(name=name, uid=0, user="root", priority=4, urgent=False, state=JobState(state),
                  reason="" if state == "done" else f"exit {exit_code}", exit_code=exit_code, signal=None,
                  host="vm", submitted=NOW, queued=None, started=NOW, finished=NOW + timedelta(minutes=minutes),
                  attempt=1, run_id=run_id)


def test_judge_ignores_the_record_of_an_earlier_run():
    watch, verdict = w.judge(w.Watch("j"), w.Seen("j", "queued", record("j", "failed", "old", exit_code=1)))
    assert verdict is w.PENDING and watch.seen_live
    watch, verdict = w.judge(watch, w.Seen("j", None, record("j", "failed", "old", exit_code=1)))
    assert verdict is w.PENDING  # in between two looks, or gone: not the old outcome
    watch, verdict = w.judge(watch, w.Seen("j", None, record("j", "done", "new", minutes=5)))
    assert verdict.state == "done" and w.job_line(verdict) == "j: done"


def test_judge_a_job_gone_without_a_record_is_unknown_after_a_few_looks():
    watch, _ = w.judge(w.Watch("j"), w.Seen("j", "running"))
    verdicts = []
    for _ in range(w.GONE_LOOKS):
        watch, verdict = w.judge(watch, w.Seen("j", None))
        verdicts.append(verdict)
    assert verdicts[:-1] == [w.PENDING] * (w.GONE_LOOKS - 1)
    assert verdicts[-1].state == "unknown" and w.exit_status([verdicts[-1]]) == 5
    assert w.job_line(verdicts[-1]).startswith("j: unknown (it left the queue")


def test_judge_a_withdrawal_newer_than_the_record_wins():
    from onite.core.jobview import JobView

    later = NOW + timedelta(hours=1)
    withdrawn = JobView(name="j", uid=0, user="alice", state="cancelled", priority=None, urgent=False,
                        submitted=later, finished=later, reason="cancelled by alice")
    _, verdict = w.judge(w.Watch("j"), w.Seen("j", None, record("j"), withdrawn))
    assert w.job_line(verdict) == "j: cancelled by alice"
    _, verdict = w.judge(w.Watch("j"), w.Seen("j", None, record("j", minutes=120), withdrawn))
    assert w.job_line(verdict) == "j: done"


def test_judge_takes_the_result_filed_with_the_file_it_saw_live_for_its_own():
    """The driver writes a result before it moves the job's file into jobsdone/: a look in between sees the job
    live beside its own result. The file's inode tells whose result it is once the file is filed."""
    for live in ("running", "queued"):
        watch, verdict = w.judge(w.Watch("j"), w.Seen("j", live, record("j", "failed", "r2", exit_code=1),
                                                      files=frozenset({7})))
        assert verdict is w.PENDING and watch.stale is not None
        _, verdict = w.judge(watch, w.Seen("j", None, record("j", "failed", "r2", exit_code=1), filed=7))
        assert verdict.state == "failed"
    # an earlier run's result, and jobsdone/ still holds that run's file: not this job's end
    watch, _ = w.judge(w.Watch("j"), w.Seen("j", "running", record("j", "done", "r1"), files=frozenset({7})))
    watch, verdict = w.judge(watch, w.Seen("j", None, record("j", "done", "r1"), filed=3))
    assert verdict is w.PENDING and watch.gone == 1


def test_a_job_seen_live_while_its_result_is_filed_ends_with_that_result(spool):
    """A run's result is written before its claim leaves running/, and a queued job failed unrun (its dependency
    failed) has its result written before its file leaves the queue: a wait's first look in between sees the job
    live beside its own result, which is no earlier run's."""
    from onite.core.state import unrun_result
    from onite.spool import runrecords
    from onite.spool.results import write_result

    submit("j", "exit 3\n")
    assert drain(spool).returncode == 0
    submit("q", "true\n")
    target = SpoolDir(spool)
    me = user_name(os.geteuid())
    key, queued = f"{me}:j", f"{me}:q"
    host = target.hosts()[0]
    result = w.look(target, key, with_result=True).result
    # as j stood mid-filing: its result written, its claim and record still there
    os.rename(target.done_dir / key, target.running_dir(host) / key)
    moves = {target.running_dir(host) / key: target.done_dir / key}
    os.close(runrecords.create(target.run_record_path(host, key), {"run_id": result.run_id, "name": key}))
    # as q stood while the driver failed it unrun: its result written, its file still queued
    write_result(target, unrun_result(name=queued, uid=os.geteuid(), user=me, state=JobState.FAILED,
                                      reason="its dependency p failed", host=host, now=datetime.now().astimezone()))
    folder = next(folder for _, folder in target.queue_folders() if (folder / queued).exists())
    moves[folder / queued] = target.done_dir / queued

    class Filing(ManualClock):  # the driver finishes the filings while the waiter pauses
        def sleep(self, seconds):
            for before, after in list(moves.items()):
                os.rename(before, after)
                del moves[before]
            if os.path.exists(target.run_record_path(host, key)):
                os.unlink(target.run_record_path(host, key))
            super().sleep(seconds)

    waited = w.wait_jobs(target, ["j", "q"], timeout=30, clock=Filing(NOW))
    assert waited.lines() == ["j: failed (exit 3)", "q: failed (its dependency p failed)"]


def test_exit_status():
    done, failed = w.Final("a", "done"), w.Final("b", "failed")
    assert w.exit_status([done, done]) == 0
    assert w.exit_status([done, failed]) == 5
    assert w.exit_status([done], timed_out=True) == 6


def test_poll_loop_backs_off_and_stops_at_the_timeout(spool, gate):
    submit("stuck", gated(gate))
    sleeps = []

    class Recording(ManualClock):
        def sleep(self, seconds):
            sleeps.append(seconds)
            super().sleep(seconds)

    waited = w.wait_jobs(SpoolDir(spool), ["stuck"], timeout=10, clock=Recording(NOW))
    assert waited.timed_out and waited.exit_code == 6 and waited.still == {"stuck": "queued"}
    assert sleeps[0] == w.POLL_FIRST and max(sleeps) == w.POLL_MAX
    assert sleeps == sorted(sleeps[:-1]) + sleeps[-1:]  # growing, but for the last, cut at the deadline
    assert sum(sleeps) == pytest.approx(10)


def test_drain_summary_names_failed_and_cancelled():
    from onite.core.jobview import result_view

    jobs = [result_view(record("a")), result_view(record("b", "failed", exit_code=2)),
            result_view(record("c", "cancelled"))]
    waited = w.DrainsWaited(["vm"], NOW, jobs, [])
    assert waited.summary() == "drain finished: 1 done, 1 failed (b), 1 cancelled (c)"
    assert waited.exit_code == 5
    assert w.DrainsWaited([], None, [], []).summary() == "no drain is running"


def test_drain_since_is_the_earliest_drain(monkeypatch):
    from types import SimpleNamespace

    from onite.drain.heartbeat import Role

    beats = [SimpleNamespace(host="a", role=Role.RUN, since=NOW),
             SimpleNamespace(host="b", role=Role.DAEMON, since=NOW - timedelta(days=3)),
             SimpleNamespace(host="c", role=Role.DAEMON, since=NOW - timedelta(days=9))]
    running = [SimpleNamespace(host="b", started=NOW - timedelta(minutes=5))]
    monkeypatch.setattr("onite.drain.heartbeat.live_beats", lambda root, now: beats)  # draining imports them
    monkeypatch.setattr("onite.app.listing.running_views", lambda spool: running)
    found = w.draining(SimpleNamespace(root=None), NOW)
    assert found == {"a": NOW, "b": NOW - timedelta(minutes=5)}  # a daemon's: its first running job; c is idle
    assert min(found.values()) == NOW - timedelta(minutes=5)


def test_missing_spool_is_one_line(world_tmp):
    r = run_cli(["wait", "x", "--spool", str(world_tmp / "missing")])
    assert r.code == 4 and r.err.startswith("onite: no spool at") and r.err.count("\n") == 1


@needs_root
def test_any_user_may_wait_for_anyone_s_job(spool, workdir):
    submit("roots", "true\n")
    submit("nobodys", "exit 1\n", user="nobody", cwd=workdir)
    assert drain(spool).returncode == 0
    r = run_cli(["wait", "root:roots", "nobodys"], user="nobody", cwd=workdir)
    assert (r.code, r.out.splitlines()) == (5, ["root:roots: done", "nobodys: failed (exit 1)"]), r


@needs_root
def test_user_colon_name_waits_for_that_user_s_job_of_the_name(spool, workdir):
    """``onite wait nobody:build`` follows nobody's ``build``; root's ``build`` and ``root:build`` are no job."""
    submit("build", "exit 3\n", user="nobody", cwd=workdir)
    assert drain(spool).returncode == 0
    r = run_cli(["wait", "nobody:build"])
    assert (r.code, r.out.splitlines()) == (5, ["nobody:build: failed (exit 3)"]), r
    r = run_cli(["wait", "build"], user="nobody", cwd=workdir)
    assert (r.code, r.out.splitlines()) == (5, ["build: failed (exit 3)"]), r
    r = run_cli(["wait", "build"])  # root's own build: there is none
    assert r.code == 1 and "'build'" in r.err, r
    r = run_cli(["wait", "root:build"], user="nobody", cwd=workdir)
    assert r.code == 1 and "root:build" in r.err, r


def test_user_colon_name_errors(spool):
    r = run_cli(["wait", "no-such-user-x:build"])
    assert r.code == 1 and "no user 'no-such-user-x'" in r.err and r.err.count("\n") == 1, r
    r = run_cli(["wait", "bad user:build"])
    assert r.code == 2 and "invalid user name" in r.err, r


def _ended_while_no_driver_runs(spool, workdir, name, *options):
    """Job ``name`` (exit 3) started, its driver killed with kill -9, then its run ended: nothing files it."""
    import signal

    marker = workdir / f"{name}.started"
    assert run_cli(["submit", name, *options], stdin=f"touch {marker}; sleep 1; exit 3\n".encode()).code == 0
    driver = start_driver(spool)
    wait_for(marker.exists, what="the job to start")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    wait_for(lambda: any('"ended"' in p.read_text() for p in (spool / "running").glob(f"*/root:{name}@run")),
             what="the monitor to record the end")


def test_a_run_that_ended_while_no_driver_runs_is_said_at_once(spool, workdir):
    """The driver killed with kill -9 mid-job, the job then ends: its run record says how, but nothing files it
    until a driver starts. wait waited for that driver (until --timeout, exit 6); it says how the run ended,
    that it is not filed yet, and exits as a filed result would (5: the run failed)."""
    _ended_while_no_driver_runs(spool, workdir, "bad")
    r = run_cli(["wait", "bad", "--timeout", "60"])
    assert r.code == 5, (r.code, r.out, r.err)
    assert r.out.startswith("bad: failed (exit 3; not filed yet, as its host "), r.out
    assert "has no live driver: the next driver there, or onite recover --host " in r.out, r.out


def test_a_failed_run_with_retries_left_is_waited_for_while_no_driver_runs(spool, workdir):
    """Its next drain runs it again (onite.core.state.Outcome.retried, the driver's rule): it has not failed yet."""
    _ended_while_no_driver_runs(spool, workdir, "again", "--retries", "1")
    r = run_cli(["wait", "again", "--timeout", "1"])
    assert r.code == 6 and "not filed yet" not in r.out, (r.code, r.out, r.err)


def test_a_drain_whose_driver_died_mid_job_is_not_said_finished(spool, gate, procs):
    """kill -9 of the driver while `onite wait` (no NAME) waits for its drain: its job is left claimed with no
    live driver to file it. wait said `drain finished: 0 done` and exit 0; it names the job left so, in
    status's words, and exits 5 (a job of the drain left no record of how it ended)."""
    import signal

    submit("long", gated(gate))
    procs.append(driver := start_driver(spool))
    wait_for(lambda: running(spool, "root:long"), what="long to start")
    procs.append(waiter := start_wait(spool))
    assert waiter.stderr.readline().startswith("onite: waiting for the drain on ")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    rc, out, err = finish(waiter)
    assert rc == 5 and len(out.splitlines()) == 1, (rc, out, err)
    assert out.startswith("drain finished: 0 done; long is running, but its host "), out
    assert "has no live driver: the next driver there, or onite recover --host " in out, out
    doc = run_cli(["wait", "--json"]).json()  # no drain runs now: nothing to wait for, as before
    assert doc["exit_code"] == 0


def test_a_job_whose_record_is_pruned_while_waiting_is_told_from_the_log(spool):
    """Retention prunes every 50 filings, faster than wait's looks: a job seen queued, done and pruned between two
    looks was `unknown`, exit 5, so `onite wait build && deploy` failed on a success. The log tells its end."""
    from conftest import set_config

    set_config(spool, keep=1)
    submit("first", "true\n")
    sp = SpoolDir(spool)
    watch, _ = w.step(sp, w.Watch("root:first"), datetime.now().astimezone())  # seen queued
    assert watch.seen_live
    submit("second", "true\n")
    assert drain(spool).returncode == 0
    assert not (spool / "jobsdone" / "root:first@result").exists()  # pruned: keep = 1
    for _ in range(w.GONE_LOOKS):
        watch, final = w.step(sp, watch, datetime.now().astimezone())
    assert final.state == "done" and "pruned (keep = 1)" in final.reason and w.exit_status([final]) == 0, final


def test_a_job_whose_record_was_pruned_is_told_from_the_log(spool, workdir):
    """``keep = 1``: the first two jobs' records are pruned. wait said they were never queued, running or
    finished (exit 1); the log tells how each ended, and its exit status is theirs. Results are no secret
    from other users (the log is world-readable, as a kept record is): nobody learns the same."""
    from conftest import set_config

    set_config(spool, keep=1)
    submit("first", "exit 3\n")
    submit("second", "true\n")
    submit("third", "true\n")
    assert drain(spool).returncode == 0
    assert not (spool / "jobsdone" / "root:first@result").exists()
    r = run_cli(["wait", "second"])
    assert r.code == 0 and r.err == "", r
    assert re.fullmatch(r"second: done \(at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d; its record and output were pruned "
                        r"\(keep = 1\)\)\n", r.out), r
    r = run_cli(["wait", "first", "third"])
    assert r.code == 5, r
    first, third = r.out.splitlines()
    assert first.startswith("first: failed (exit 3 at ") and first.endswith("(keep = 1))") and third == "third: done"
    r = run_cli(["wait", "root:first"], user="nobody", cwd=workdir)
    assert (r.code, r.out) == (5, first.replace("first", "root:first", 1) + "\n"), r
    r = run_cli(["wait", "never"])
    assert r.code == 1 and "no job 'never' is queued, running or finished" in r.err, r
