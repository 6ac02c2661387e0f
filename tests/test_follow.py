"""``onite output NAME --follow``: a job's output as it grows, like ``pueue follow`` / ``tsp -t``
(onite.app.wait.follow).

Real drivers and real jobs that write in steps, each step gated on a file
the test removes: the follower must show each step before the next one
exists, and end by itself when the job has finished.
"""

import os
import select
import subprocess
import sys
import time

import pytest

from conftest import REPO, drain, needs_root, run_cli, start_driver, wait_for


def submit(name, body, *args, user=None):
    r = run_cli(["submit", name, *args], stdin=body.encode(), user=user, cwd="/tmp")
    assert r.code == 0, r


def stepped_job(workdir, name, steps=3, last_exit=0):
    """A job that prints `NAME step K` and then waits for workdir/NAME.gK to be removed, for each step."""
    gates = [workdir / f"{name}.g{k}" for k in range(1, steps)]
    for gate in gates:
        gate.touch()
    lines = [f"echo {name} step 1"]
    for k, gate in enumerate(gates, 2):
        lines.append(f"while [ -e {gate} ]; do sleep 0.05; done")
        lines.append(f"echo {name} step {k}")
    lines.append(f"exit {last_exit}")
    return "\n".join(lines) + "\n", gates


class Follower:
    """`onite output NAME -f` as a real process, read as it writes."""

    def __init__(self, spool, *args):
        env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen([sys.executable, "-m", "onite", "output", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out = b""
        self.err = b""

    def read_until(self, text: bytes, *, stderr=False, timeout=60.0):
        """Read both pipes until ``text`` is in stdout (or stderr); what that stream holds by then."""
        deadline = time.monotonic() + timeout
        while text not in (self.err if stderr else self.out):
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {text!r}; got {self.out!r}, stderr {self.err!r}"
            ready, _, _ = select.select([self.proc.stdout, self.proc.stderr], [], [], left)
            for stream in ready:
                chunk = os.read(stream.fileno(), 65536)
                assert chunk, f"the follower ended: {self.out!r}, {self.err!r}"
                if stream is self.proc.stdout:
                    self.out += chunk
                else:
                    self.err += chunk
        return self.err if stderr else self.out

    def finish(self, timeout=60.0):
        out, err = self.proc.communicate(timeout=timeout)
        self.out += out
        self.err += err
        return self.proc.returncode


def test_follow_shows_a_running_job_step_by_step_and_ends_with_it(spool, workdir):
    body, gates = stepped_job(workdir, "steps", last_exit=3)
    submit("steps", body)
    driver = start_driver(spool)
    try:
        wait_for(lambda: (spool / "stdout" / "root:steps").exists()
                 and b"step 1" in (spool / "stdout" / "root:steps").read_bytes(), what="the first step")
        follower = Follower(spool, "steps", "--follow")
        assert follower.read_until(b"steps step 1\n") == b"steps step 1\n"  # the output so far, at once
        gates[0].unlink()
        assert follower.read_until(b"step 2\n") == b"steps step 1\nsteps step 2\n"  # before step 3 can exist
        assert follower.proc.poll() is None  # the job still runs: so does the follower
        gates[1].unlink()
        assert follower.finish() == 5  # as onite wait: the job failed
        assert follower.out == b"steps step 1\nsteps step 2\nsteps step 3\n"
        assert follower.err == b"onite: steps: failed (exit 3)\n"
    finally:
        for gate in gates:
            gate.unlink(missing_ok=True)
        driver.wait(60)


def test_follow_of_a_queued_job_waits_for_it_to_start_and_never_shows_an_earlier_run(spool, workdir):
    submit("again", "echo the earlier run\n")
    assert drain(spool).returncode == 0
    body, gates = stepped_job(workdir, "again", steps=2)
    submit("again", body)
    follower = Follower(spool, "again", "-f")
    said = follower.read_until(b"\n", stderr=True)
    assert said.startswith("onite: no drain is scheduled, so nothing will start one — ".encode()), said  # none runs yet
    assert said.endswith("; again is queued; waiting for it to start…\n".encode()), said
    assert follower.proc.poll() is None and follower.out == b""
    driver = start_driver(spool)
    try:
        assert follower.read_until(b"again step 1\n") == b"again step 1\n"  # not "the earlier run"
        gates[0].unlink()
        assert follower.finish() == 0
        assert follower.out == b"again step 1\nagain step 2\n"
        assert follower.err.endswith(b"onite: again: done\n")
    finally:
        for gate in gates:
            gate.unlink(missing_ok=True)
        driver.wait(60)


def test_follow_of_a_held_job_says_what_lets_it_run(spool, cli):
    """`output -f` (and `wait`) of a held job said only that it was held and waited, for ever unless released."""
    submit("kept", "echo out\n", "--hold")
    follower = Follower(spool, "kept", "-f")
    said = follower.read_until(b"\n", stderr=True)
    assert said == b"onite: kept is held; waiting for it to start (nothing runs it until onite release kept)\xe2\x80\xa6\n"
    assert cli(["cancel", "kept"]).code == 0
    assert follower.finish() == 5


def test_follow_of_a_finished_job_prints_it_and_exits(spool, cli):
    submit("over", "echo all of it\n")
    assert drain(spool).returncode == 0
    r = cli(["output", "over", "--follow"])
    assert (r.code, r.out, r.err) == (0, "all of it\n", "onite: over: done\n")
    submit("gone", "echo never\n")
    assert cli(["cancel", "gone"]).code == 0
    r = cli(["output", "gone", "-f"])  # cancelled before it ran: no output, and how it ended
    assert (r.code, r.out) == (5, "") and r.err.startswith("onite: gone: cancelled by "), r
    r = cli(["output", "nosuch", "-f"])
    assert (r.code, r.err) == (1, "onite: no job 'nosuch' is queued, running or finished — see onite list --all\n")


@needs_root
def test_follow_of_another_users_job_is_refused_before_waiting(spool, cli):
    submit("roots", "true\n")
    r = cli(["output", "root:roots", "-f"], user="nobody")
    assert (r.code, r.err) == (3, "onite: the output of 'root:roots' belongs to root — only its owner and root may "
                                  "read it\n")


@pytest.mark.parametrize("stderr", [False, True])
def test_follow_stderr_kept_apart(spool, cli, stderr):
    submit("apart", "echo out; echo err >&2\n", "--stderr-separate")
    assert drain(spool).returncode == 0
    r = cli(["output", "apart", "-f", *(["--stderr"] if stderr else [])])
    assert (r.code, r.out) == (0, "err\n" if stderr else "out\n")


def test_follow_stderr_of_a_job_that_keeps_it_with_stdout_says_so(spool, cli):
    said = ("onite: job 'merged' keeps stderr with its stdout (it was spooled without --stderr-separate) — "
            "follow it with: onite output merged --follow\n")
    submit("merged", "echo out; echo err >&2\n")
    r = cli(["output", "merged", "-f", "--stderr"])  # queued: its job file says so
    assert (r.code, r.err) == (1, said)
    assert drain(spool).returncode == 0
    r = cli(["output", "merged", "-f", "--stderr"])  # finished: its result says so
    assert (r.code, r.err) == (1, said)


def test_follow_ends_when_the_run_ended_while_no_driver_runs(spool, workdir):
    """The driver killed with kill -9 mid-job, then the job ends: its run record says how, and ``onite wait`` says
    so at once (not filed yet). ``output -f`` followed it for ever, until a driver started; it prints the output
    and ends as wait does (5: the run failed, exit 3), saying the result is not filed yet."""
    import signal

    marker = workdir / "lost.started"
    assert run_cli(["submit", "lost"], stdin=f"echo first; touch {marker}; sleep 1; exit 3\n".encode()).code == 0
    driver = start_driver(spool)
    wait_for(marker.exists, what="the job to start")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    wait_for(lambda: any('"ended"' in p.read_text() for p in (spool / "running").glob("*/root:lost@run")),
             what="the monitor to record the end")
    r = run_cli(["output", "lost", "-f"], timeout=30)
    assert r.code == 5 and r.out == "first\n" and "not filed yet" in r.err, (r.code, r.out, r.err)
    assert r.err.startswith("onite: lost: failed (exit 3; not filed yet"), r.err
