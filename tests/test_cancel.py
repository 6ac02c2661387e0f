"""``onite cancel 'PATTERN'`` and ``onite cancel --all``: a user's own jobs; root's, everyone's after a yes.

Real users (``nobody`` and ``daemon`` when root), a real driver for a running
job; root's confirmation is typed on a real pseudo-terminal.
"""

import os
import pty
import subprocess
import sys
import time

import pytest

from conftest import REPO, log_lines, needs_root, result, run_cli, set_config, start_driver, wait_for


def submit(name, *, user=None, body=b"true\n"):
    r = run_cli(["submit", name], stdin=body, user=user, cwd="/tmp")
    assert r.code == 0, r


def queued(spool):
    """The keys of the queued jobs."""
    return sorted(p.name for p in (spool / "jobs").rglob("*") if p.is_file())


@needs_root
def test_a_users_pattern_cancels_only_their_own_jobs(spool, cli):
    for name, user in [("build-n1", "nobody"), ("build-n2", "nobody"), ("test-n", "nobody"), ("build-d", "daemon"),
                       ("build-root", None)]:
        submit(name, user=user)
    r = cli(["cancel", "build-*"], user="daemon")  # NAME patterns are the caller's own names
    assert (r.code, r.out) == (0, "build-d: cancelled\ncancelled 1 job(s)\n"), r
    submit("build-d", user="daemon")
    r = cli(["cancel", "*:build-*"], user="daemon")  # USER:NAME patterns match everyone's keys
    assert r.code == 0, r
    assert r.out == ("build-d: cancelled\n"
                     "cancelled 1 job(s); skipped 3 of other users' (nobody, root): you may cancel only yours\n")
    # nobody's and root's survive
    assert queued(spool) == ["nobody:build-n1", "nobody:build-n2", "nobody:test-n", "root:build-root"]
    r = cli(["cancel", "build-n?", "test-n"], user="nobody")  # a pattern and a name together: the name first
    assert (r.code, r.out) == (0, "test-n: cancelled\nbuild-n1: cancelled\nbuild-n2: cancelled\n"
                                  "cancelled 3 job(s)\n"), r
    submit("last-n", user="nobody")
    r = cli(["cancel", "--all"], user="nobody")
    assert (r.code, r.out) == (0, "last-n: cancelled\n"
                                  "cancelled 1 job(s); skipped 1 of other users' (root): you may cancel only yours\n")
    r = cli(["cancel", "--all"], user="nobody")  # nothing of theirs is left
    assert (r.code, r.err) == (1, "onite: --all matches none of your jobs — it matches root's build-root; only root "
                                  "may cancel them\n")
    assert queued(spool) == ["root:build-root"]


def test_a_pattern_that_matches_nothing_and_all_with_names(spool, cli):
    submit("alpha")
    r = cli(["cancel", "zeta-*", "--yes"])
    assert (r.code, r.out, r.err) == (1, "", "onite: no queued or running job of yours matches 'zeta-*' — see onite list\n")
    r = cli(["cancel", "--all", "alpha"])
    assert (r.code, r.err) == (2, "onite: --all cancels every job of yours and takes no NAME — drop the names, or --all\n")
    assert queued(spool) == ["root:alpha"]


@needs_root
def test_root_cancels_everyones_after_a_yes_and_never_unasked_off_a_terminal(spool, workdir, cli):
    gate = workdir / "gate"
    gate.touch()
    submit("run-me", user="nobody", body=f"while [ -e {gate} ]; do sleep 0.05; done\n".encode())
    submit("job-a", user="nobody")
    submit("job-b")
    r = cli(["cancel", "--all"])  # stdin is a pipe: no one to ask
    assert (r.code, r.err) == (2, "onite: cancelling every user's jobs by --all as root needs a confirmation — run it "
                                  "on a terminal, or add --yes\n")
    assert answered(spool, ["cancel", "*:job-*"], "n\n").endswith("cancelling every user's jobs by '*:job-*' as root:\r\n"
                                                                 "  nobody:job-a  (queued, nobody)\r\n"
                                                                 "  job-b  (queued, root)\r\n"
                                                                 "cancel these 2 job(s)? [y/N] nothing cancelled\r\n")
    assert queued(spool) == ["nobody:job-a", "nobody:run-me", "root:job-b"]
    assert answered(spool, ["cancel", "*:job-*"], "y\n").endswith("nobody:job-a: cancelled\r\njob-b: cancelled\r\n"
                                                                 "cancelled 2 job(s)\r\n")
    driver = start_driver(spool)
    try:
        wait_for(lambda: not queued(spool), what="run-me to start")
        r = cli(["cancel", "--all", "--yes"])
        assert r.code == 0 and r.out.startswith("nobody:run-me: cancelled (cancelled by root"), r
        assert result(spool, "run-me")["state"] == "cancelled"
    finally:
        gate.unlink(missing_ok=True)
        driver.wait(60)


@needs_root
def test_a_pattern_that_matches_only_other_users_jobs_says_whose_they_are(spool, cli):
    """``onite cancel 'd*'`` where only daemon had d-jobs said ``no queued or running job of yours matches 'd*'``,
    as if none matched. It names whose jobs the pattern matches and who may cancel them, on one line; root is told
    that its NAME pattern is its own jobs, and what reaches every user's, which its question then says."""
    for name, user in (("d1", "daemon"), ("d2", "daemon"), ("x1", "daemon"), ("x1", None), ("n1", "nobody")):
        submit(name, user=user)
    for pattern in ("d*", "*:d*"):
        r = cli(["cancel", pattern], user="nobody")
        assert (r.code, r.out, r.err) == (1, "", f"onite: '{pattern}' matches none of your jobs — it matches daemon's "
                                                 "d1, d2; only daemon or root may cancel them\n"), r
    r = cli(["cancel", "x?"], user="nobody")
    assert r.err == ("onite: 'x?' matches none of your jobs — it matches daemon's x1 and root's x1; only their owners "
                     "or root may cancel them\n"), r
    for name in ("d3", "d4"):
        submit(name, user="daemon")
    r = cli(["cancel", "d*"], user="nobody")
    assert r.err == ("onite: 'd*' matches none of your jobs — it matches daemon's 4 jobs (d1, d2, d3, …); only daemon "
                     "or root may cancel them\n"), r
    r = cli(["cancel", "n*", "--yes"])  # root's NAME pattern is root's jobs
    assert (r.code, r.err) == (1, "onite: 'n*' matches none of your jobs — it matches nobody's n1; '*:n*' matches "
                                  "every user's jobs\n"), r
    r = cli(["cancel", "*:n*"])  # stdin is a pipe: no one to ask
    assert (r.code, r.err) == (2, "onite: cancelling every user's jobs by '*:n*' as root needs a confirmation — run "
                                  "it on a terminal, or add --yes\n"), r
    r = cli(["cancel", "x*"])
    assert r.err.startswith("onite: cancelling root's jobs by 'x*' as root needs a confirmation"), r
    set_config(spool, own_only=False)  # nobody may cancel daemon's jobs by name, never by a pattern
    r = cli(["cancel", "d*"], user="nobody")
    assert r.err == ("onite: 'd*' matches none of your jobs — it matches daemon's 4 jobs (d1, d2, d3, …); a pattern "
                     "reaches only your jobs: cancel theirs by name (onite cancel daemon:d1)\n"), r
    assert len(queued(spool)) == 7


def answered(spool, argv, answer: str) -> str:
    """Run onite with a pseudo-terminal as its stdin and stdout, type ``answer``; what it printed."""
    master, slave = pty.openpty()
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "onite", *argv], stdin=slave, stdout=slave, stderr=slave, env=env,
                            close_fds=True)
    os.close(slave)
    os.write(master, answer.encode())
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(60) == 0, out
    return out.decode()


@pytest.mark.parametrize("word, pattern", [("build-*", True), ("x?", True), ("[ab]", True), ("build-1", False),
                                           ("a.b_c-d", False)])
def test_is_pattern(word, pattern):
    from onite.app.control import is_pattern

    assert is_pattern(word) is pattern


def test_a_running_job_that_ends_on_its_own_as_it_is_cancelled_is_not_counted_cancelled(spool):
    """``cancel --all`` counted every job it asked a driver to stop: one that ended on
    its own first (exit 0, the moment its request appeared, while its driver was busy: here stopped
    with SIGSTOP) was said ``quick: done`` and counted in ``cancelled 1 job(s)``. Only the jobs it
    cancelled count."""
    import signal

    submit("quick", body=b'while :; do for f in "$ONITE_JOB_SPOOL"/cancel/"$ONITE_JOB"@*; do [ -e "$f" ] && exit 0; '
                         b'done; sleep 0.01; done\n')
    driver = start_driver(spool, "-q")
    try:
        record = wait_for(lambda: next((spool / "running").glob("*/root:quick@run"), None), what="the job's run record")
        wait_for(lambda: '"event":"job"' in record.read_text(), what="the job to start")
        os.kill(driver.pid, signal.SIGSTOP)  # the driver hears of neither the request nor the job's end
        cancel = subprocess.Popen([sys.executable, "-m", "onite", "cancel", "--all", "--yes"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=dict(os.environ, ONITE_SPOOL=str(spool),
                                                                   PYTHONPATH=str(REPO)))
        wait_for(lambda: not record.exists() or '"event":"ended"' in record.read_text(), what="the job to end")
        submit("later", body=b"sleep 0.3\n")  # keeps the drain going past the driver's next looks at cancel/
        # and cancel/ no longer fresh: the driver looks again at a folder it has seen only while it may change
        from onite.drain.cancels import FRESH_NS

        wait_for(lambda: time.time_ns() - (spool / "cancel").stat().st_mtime_ns > FRESH_NS, what="cancel/ to age")
    finally:
        os.kill(driver.pid, signal.SIGCONT)
    out, err = cancel.communicate(timeout=60)
    assert driver.wait(timeout=60) == 0
    assert result(spool, "quick")["state"] == "done", "\n".join(log_lines(spool))
    assert (cancel.returncode, out.decode()) == (0, "quick: done\ncancelled 0 job(s)\n"), err
    # the request died with the run it came too late for: the next job of that name is not cancelled by it
    assert result(spool, "later")["state"] == "done" and list((spool / "cancel").iterdir()) == []
    submit("quick")
    assert start_driver(spool, "-q").wait(timeout=60) == 0
    assert result(spool, "quick")["state"] == "done", "\n".join(log_lines(spool))


@needs_root
def test_a_cancel_that_meets_a_run_ended_but_not_yet_filed_cancels_the_retry_it_is_filed_with(spool, workdir):
    """A job's first attempt fails while its driver is busy (stopped with SIGSTOP, its end recorded by its
    monitor); its owner cancels it then: a request, `requested`. The driver, going on, took the run as ended and
    the request as too late for it, dropped the request, then spooled the retry, which ran: the job ran again
    after its cancel. The request waits for the run's filing: its retry is cancelled, never started. Found by
    reading the code for a fault campaign."""
    import signal

    from conftest import set_config

    set_config(spool, retry_delay="0.05", kill_grace="1s")
    ledger, gate = workdir / "ledger", workdir / "gate"
    r = run_cli(["submit", "x", "--retries", "1"], user="nobody", cwd="/tmp",
                stdin=f"echo ran >> {ledger}; while [ ! -e {gate} ]; do sleep 0.05; done; exit 1\n".encode())
    assert r.code == 0, r
    driver = start_driver(spool, "-q")
    try:
        record = wait_for(lambda: next((spool / "running").glob("*/nobody:x@run"), None), what="the job's run record")
        wait_for(lambda: '"event":"job"' in record.read_text(), what="the job to start")
        os.kill(driver.pid, signal.SIGSTOP)  # the driver hears of neither the job's end nor the request
        gate.touch()
        wait_for(lambda: '"event":"ended"' in record.read_text(), what="the job to end")
        r = run_cli(["cancel", "x"], user="nobody", cwd="/tmp")  # no answer from the driver: the request is said
        assert r.code == 0 and r.out.startswith("x: requested"), r
    finally:
        os.kill(driver.pid, signal.SIGCONT)
    assert driver.wait(timeout=60) == 0
    assert ledger.read_text() == "ran\n", "\n".join(log_lines(spool))
    res = result(spool, "nobody:x")
    assert (res["state"], res["reason"], res["attempt"]) == ("cancelled", "cancelled by nobody", 2), res
    assert list((spool / "cancel").iterdir()) == []


def test_a_job_cancelled_while_its_retry_waits_keeps_the_attempts_that_ran(spool, workdir):
    """A job failed, and its retry waits out its back-off: a cancel now files it cancelled with the attempt
    that ran (its start, its exit), not as if it never started; ``list --all`` shows that start."""
    import json

    from conftest import set_config

    set_config(spool, retry_delay="1h")
    ledger = workdir / "ledger"
    assert run_cli(["submit", "flaky", "--retries", "2"], stdin=f"echo run >> {ledger}; exit 3\n".encode()).code == 0
    driver = start_driver(spool)
    try:
        wait_for(lambda: any(" retry root:flaky " in line for line in log_lines(spool)), what="the retry to be spooled")
        r = run_cli(["cancel", "flaky"])
        assert r.code == 0, r
        wait_for(lambda: (spool / "jobsdone" / "root:flaky@result").exists(), what="the cancel to be filed")
    finally:
        driver.terminate()
        driver.communicate(timeout=60)
    res = result(spool, "flaky")
    assert res["state"] == "cancelled" and res["attempt"] == 2, res
    [tried] = res["attempts"]
    assert tried["exit_code"] == 3 and tried["started"] and res["started"] == tried["started"], res
    assert ledger.read_text().split() == ["run"]
    [listed] = [job for job in json.loads(run_cli(["list", "--all", "--json"]).out)["jobs"] if job["name"] == "flaky"]
    assert listed["state"] == "cancelled" and listed["started"] == tried["started"], listed


@needs_root
def test_a_pattern_cancel_names_the_jobs_it_dooms_for_users_and_root(spool):
    """``cancel 'b*'`` says each queued job that will now fail because it waits (--after) for one it cancelled,
    or for such a job: a user's own, after the cancel; root's list before its question shows them too."""
    for name in ("b1", "b2", "b3", "other"):
        submit(name, user="nobody")
    assert run_cli(["submit", "load", "--after", "b2"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "sum", "--after", "load"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "free", "--after", "other"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    r = run_cli(["cancel", "b*"], user="nobody", cwd="/tmp")
    assert r.code == 0, r
    assert r.out.splitlines()[-3:] == ["cancelled 3 job(s)", "will fail: load (waits for b2)",
                                       "will fail: sum (waits for load)"], r.out
    for name in ("b1", "b2", "b3"):
        submit(name, user="nobody")
    shown = answered(spool, ["cancel", "*:b*"], "n\n")
    assert ("  will fail: nobody:load (waits for nobody:b2)\r\n  will fail: nobody:sum (waits for nobody:load)\r\n"
            "cancel these 3 job(s)?") in shown, shown
    assert shown.endswith("nothing cancelled\r\n") and len(queued(spool)) == 7


@needs_root
def test_a_cancel_by_name_names_the_jobs_it_dooms_as_a_pattern_does(spool):
    """``cancel b2`` said only ``b2: cancelled``, while ``cancel 'b2*'`` went on to say that load and sum will now
    fail: by name it says them too, its own user's (daemon's job waiting for b2 is daemon's to learn), and root's
    cancel of a user's job names theirs."""
    for name in ("b1", "b2"):
        submit(name, user="nobody")
    assert run_cli(["submit", "load", "--after", "b2"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "sum", "--after", "load"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "theirs", "--after", "nobody:b2"], stdin=b"true\n", user="daemon",
                   cwd="/tmp").code == 0
    r = run_cli(["cancel", "b2"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "b2: cancelled\nwill fail: load (waits for b2)\nwill fail: sum (waits for load)\n"), r
    r = run_cli(["cancel", "b1"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "b1: cancelled\n"), r  # nothing waits for b1
    submit("b3", user="nobody")
    assert run_cli(["submit", "c", "--after", "b3"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    r = run_cli(["cancel", "nobody:b3"])
    assert (r.code, r.out) == (0, "nobody:b3: cancelled\nwill fail: nobody:c (waits for nobody:b3)\n"), r


@needs_root
@pytest.mark.attack
def test_a_forgery_waiting_for_a_cancelled_job_is_not_named_doomed(spool, cli):
    """Only a job at its own user's key counts as a dependent: a file nobody put at root's key is a forgery,
    which the driver sets aside, not a job a cancel dooms."""
    submit("b1")
    assert run_cli(["submit", "load", "--after", "b1"], stdin=b"true\n").code == 0
    load = next((spool / "jobs").rglob("root:load"))
    forged = spool / "jobs" / "P2" / "root:fake"
    forged.write_bytes(load.read_bytes().replace(b"name: root:load", b"name: root:fake"))
    os.chown(forged, 65534, 65534)
    r = cli(["cancel", "b*", "--yes"])
    assert (r.code, r.out) == (0, "b1: cancelled\ncancelled 1 job(s)\nwill fail: load (waits for b1)\n"), r


@needs_root
@pytest.mark.attack
def test_a_pattern_cancel_judges_dependants_as_edited_and_steps_over_a_file_that_is_no_job(spool, cli):
    """What a job waits for is what its latest edit says (``edit --after``), as the driver judges it; and a
    file anyone dropped in a queue that is no job (damaged) neither stops root's pattern cancel nor is named."""
    for name in ("old", "new"):
        submit(name)
    assert run_cli(["submit", "dep", "--after", "old"], stdin=b"true\n").code == 0
    assert cli(["edit", "dep", "--after", "new"]).code == 0
    junk = spool / "jobs" / "P4" / "nobody:junk"
    junk.write_bytes(b"\x00not a job\n")
    os.chown(junk, 65534, 65534)
    r = cli(["cancel", "o*", "--yes"])
    assert (r.code, r.out) == (0, "old: cancelled\ncancelled 1 job(s)\n"), r  # dep waits for new now
    r = cli(["cancel", "n*", "--yes"])
    assert (r.code, r.out) == (0, "new: cancelled\ncancelled 1 job(s)\nwill fail: dep (waits for new)\n"), r


def test_a_job_whose_only_dependency_is_an_edits_is_named_doomed(spool, cli):
    """A job spooled waiting for nothing (its file has no after: line) that an edit made wait for a job: cancelling
    that job names it, though doomed_by decodes only the files that may wait for something (edits.waits_for)."""
    submit("new")
    submit("dep")
    assert cli(["edit", "dep", "--after", "new"]).code == 0
    r = cli(["cancel", "new"])
    assert (r.code, r.out) == (0, "new: cancelled\nwill fail: dep (waits for new)\n"), r


@needs_root
def test_a_job_waiting_for_a_cancelled_job_fails_though_an_earlier_run_of_that_name_is_done(spool, workdir):
    """nobody's `x` ran and is done; it is spooled again (held), `d` waits for it, and nobody cancels it while the
    driver files another job (strace holds the driver there): the withdrawn `x` waits in cancel/ for the driver's
    next look at it, and the driver, picking next, found no `x` queued and took the earlier run's result for how
    `x` ended: `d` ran, though the `x` it waited for was cancelled. Found by reading the code for a fault campaign."""
    from test_exactly_once import HOST, STRACE, driver_argv, driver_env, traced_driver

    if STRACE is None:
        pytest.skip("needs strace to hold the driver as it files a job")
    ledger = workdir / "ledger"
    submit("x", user="nobody")
    assert subprocess.run([sys.executable, "-m", "onite", "run"], env=driver_env(spool), timeout=120).returncode == 0
    assert run_cli(["restart", "x", "--hold"], user="nobody", cwd="/tmp").code == 0
    r = run_cli(["submit", "d", "--after", "x"], stdin=f"echo ran >> {ledger}\n".encode(), user="nobody", cwd="/tmp")
    assert r.code == 0, r
    assert run_cli(["submit", "e", "-p", "1"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    claim = spool / "running" / HOST / "nobody:e"
    traced = subprocess.Popen([STRACE, "-qq", "-o", "/dev/null", "-P", str(claim), "-e", "trace=rename",
                               "-e", "inject=rename:delay_enter=60000000:when=1", *driver_argv()], env=driver_env(spool))
    # its result written, the driver is held before it moves e's claim into jobsdone/
    wait_for((spool / "jobsdone" / "nobody:e@result").exists, what="the driver to file e")
    r = run_cli(["cancel", "x"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "x: cancelled\nwill fail: d (waits for x)\n"), r
    [driver] = traced_driver(traced.pid)
    traced.kill()  # strace lets the driver go on
    traced.wait(timeout=30)
    wait_for(lambda: not os.path.exists(f"/proc/{driver}"), what="the driver to exit")
    assert not ledger.exists(), "d ran though the x it waited for was cancelled"
    assert (result(spool, "nobody:d")["state"], result(spool, "nobody:d")["reason"]) == \
        ("failed", "dependency x was cancelled")


def _held_cli(spool, path, log, *argv):
    """``onite ARGV`` as root under strace, which holds its first lstat of ``path`` until strace is killed; it
    is there once ``log`` (strace's output) names the path."""
    from test_exactly_once import STRACE, driver_env

    if STRACE is None:
        pytest.skip("needs strace to hold a command between its looks")
    return subprocess.Popen([STRACE, "-qq", "-o", str(log), "-P", str(path), "-e", "trace=newfstatat,lstat",
                             "-e", "inject=newfstatat,lstat:delay_enter=60000000:when=1",
                             sys.executable, "-m", "onite", *argv], env=driver_env(spool),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _let_go(tracer):
    """Kill strace: the process it held goes on; (exit code, stdout, stderr) of that process, once it has ended."""
    [child] = [int(pid) for task in os.listdir(f"/proc/{tracer.pid}/task")
               for pid in open(f"/proc/{tracer.pid}/task/{task}/children").read().split()]
    tracer.kill()
    tracer.wait(timeout=30)
    wait_for(lambda: not os.path.exists(f"/proc/{child}"), what="the command to end")
    return child


def test_a_cancel_that_looks_as_the_job_is_claimed_finds_it_running(spool, workdir):
    """``onite cancel x`` looked at running/ and then at the queue; the driver claimed x in between (strace holds
    the command before its look at the queue): it said `no job 'x' is queued or running` (exit 1), and x ran. It
    must find the job and have its driver stop it. Found by reading the code for a fault campaign."""
    from test_exactly_once import HOST

    gate, log = workdir / "gate", workdir / "strace.log"
    submit("x", body=f"while [ ! -e {gate} ]; do sleep 0.05; done\n".encode())
    queued = spool / "jobs" / "P4" / "root:x"
    cancel = _held_cli(spool, queued, log, "cancel", "x")
    try:
        wait_for(lambda: log.exists() and str(queued) in log.read_text(), what="cancel to look at the queue")
        driver = start_driver(spool, "-q")
        wait_for((spool / "running" / HOST / "root:x").exists, what="the driver to claim x")
        _let_go(cancel)
        out, err = cancel.communicate(timeout=60)
    finally:
        gate.touch()
    assert driver.wait(timeout=60) == 0
    assert out.startswith("x: cancelled") or out.startswith("x: requested"), (out, err)
    assert result(spool, "x")["state"] == "cancelled"


def test_a_cancel_that_looks_as_a_killed_drivers_claim_is_requeued_finds_it_queued(spool, workdir):
    """The other way round: a claim a killed driver left is put back in its queue by the next driver's recovery
    while ``onite cancel x`` is between its look at running/ (strace holds it there) and the queue: the queue is
    looked at again, and x is cancelled before it can run again (that driver is held before its new claim)."""
    from test_exactly_once import HOST, STRACE, driver_argv, driver_env

    ledger, log, driver_log = workdir / "ledger", workdir / "strace.log", workdir / "driver-strace.log"
    submit("x", body=f"echo ran >> {ledger}\n".encode())
    subprocess.run([STRACE, "-qq", "-o", "/dev/null", "-e", "trace=sendmsg", "-e", "inject=sendmsg:signal=KILL:when=1",
                    *driver_argv()], env=driver_env(spool), timeout=120, capture_output=True)
    claim = spool / "running" / HOST / "root:x"
    assert claim.exists()  # claimed, never handed to a monitor
    cancel = _held_cli(spool, claim, log, "cancel", "x")
    queued = spool / "jobs" / "P4" / "root:x"
    driver = subprocess.Popen([STRACE, "-qq", "-o", str(driver_log), "-P", str(queued), "-e", "trace=rename",
                               "-e", "inject=rename:delay_enter=60000000:when=1", *driver_argv()], env=driver_env(spool))
    try:
        wait_for(lambda: log.exists() and str(claim) in log.read_text(), what="cancel to look at running/")
        wait_for(lambda: driver_log.exists() and str(queued) in driver_log.read_text(),
                 what="recovery to put x back in its queue, and the driver to claim it again")
        _let_go(cancel)
        out, err = cancel.communicate(timeout=60)
    finally:
        _let_go(driver)  # its claim finds x gone
    assert out == "x: cancelled\n", err
    assert not ledger.exists() and result(spool, "x")["state"] == "cancelled"


@needs_root
@pytest.mark.parametrize("how", [["b*"], ["b1", "b2", "b3"]])
def test_a_cancel_of_a_running_job_and_queued_ones_lets_none_of_the_queued_ones_start(spool, how):
    """``onite cancel 'b*'`` (or ``cancel b1 b2 b3``) with b1 running and b2, b3 queued waited for b1 to end
    before it withdrew b2: the driver, freed by b1's end, started b2, which the command then cancelled running,
    and so b3 (each ran for a moment, as cancelled while running). Every job is now withdrawn or asked to stop
    before any is waited for: b2 and b3 never start."""
    from conftest import set_config

    set_config(spool, kill_grace="1s")
    for name in ("b1", "b2", "b3"):
        submit(name, user="nobody", body=b"sleep 30\n")
    driver = start_driver(spool, "-q")
    try:
        wait_for(lambda: any(line.split()[2] == "start" for line in log_lines(spool)), what="b1 to start")
        r = run_cli(["cancel", *how], user="nobody", cwd="/tmp")
        assert r.code == 0, r
        assert r.out.splitlines()[:3] == ["b1: cancelled (cancelled by nobody)", "b2: cancelled", "b3: cancelled"], r
    finally:
        driver.communicate(timeout=60)
    assert [line.split()[3] for line in log_lines(spool) if line.split()[2] == "start"] == ["nobody:b1"]
    assert [result(spool, f"nobody:{n}")["started"] is None for n in ("b1", "b2", "b3")] == [False, True, True]


def test_a_cancel_that_loses_the_race_to_another_cancel_says_so(spool):
    """Two ``onite cancel x`` at once (no driver anywhere): the one whose rename into cancel/ found the job
    gone said 'job x started running as you cancelled it — run onite cancel x again to stop it', and nothing
    was running. It says that another cancel took it (or it ran and ended), not that it runs."""
    from onite.core.errors import NotFound
    from onite.spool.cancels import withdraw
    from onite.spool.paths import SpoolDir
    from onite.spool.scan import find_queued

    assert run_cli(["submit", "x"], stdin=b"true\n").code == 0
    sd = SpoolDir(spool)
    import pwd

    [entry] = find_queued(sd, f"{pwd.getpwuid(os.geteuid()).pw_name}:x")
    withdraw(sd, entry)  # the other cancel's rename
    with pytest.raises(NotFound) as err:
        withdraw(sd, entry)
    assert "started running" not in str(err.value) and "another cancel took it" in str(err.value), err.value
