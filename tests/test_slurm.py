"""The slurm executor against the real single-node test cluster (tests/slurm/cluster.sh).

Without a usable cluster these tests skip, with the reason; with
ONITE_SLURM_TESTS=required (as .ci/run sets it) they fail instead, so CI
never passes by skipping them. Jobs start on Slurm's 1-second scheduler tick,
so each test takes a few seconds; time limits are tested through onite's own
cancel at the exact deadline, never by waiting for Slurm's minute limits.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Loaded before run_cli forks: as nobody the child may not be able to read a Python installed under /root.
import onite.cli.options  # noqa: F401
import onite.app.control  # noqa: F401
import onite.app.submit  # noqa: F401
from conftest import REPO, ROOT, OnTerminal, as_user, drain, log_lines, needs_root, result, run_cli, set_config, start_driver, wait_for

pytestmark = pytest.mark.slurm
HOST = os.uname().nodename.split(".")[0]
SQUEUE_TIMEOUT = 30


def _cluster_problem() -> str | None:
    """Why the test cluster cannot be used, or None."""
    if shutil.which("scontrol") is None or shutil.which("sbatch") is None:
        return "the Slurm client commands are not installed (bash tests/slurm/cluster.sh start)"
    if ROOT:
        status = subprocess.run(["bash", str(REPO / "tests/slurm/cluster.sh"), "status"], capture_output=True,
                                text=True, timeout=60)
        if status.returncode != 0:
            return f"tests/slurm/cluster.sh status says the cluster is not usable: {status.stdout.strip()!r}"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return f"scontrol ping: {(ping.stdout + ping.stderr).strip()!r}"
    return None


@pytest.fixture(scope="module")
def cluster_cpus() -> int:
    problem = _cluster_problem()
    if problem:
        if os.environ.get("ONITE_SLURM_TESTS") == "required":
            pytest.fail(f"ONITE_SLURM_TESTS=required but {problem}")
        pytest.skip(problem)
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def _jobs_in_flight() -> str:
    """squeue's lines for every job on the test cluster not yet over (pending, running, completing...)."""
    return subprocess.run(["squeue", "-h", "-t", "PD,R,CG,S,CF,RQ,RS,RH,SE,ST,SO", "-o", "%i %u %T %j"],
                          capture_output=True, text=True, timeout=SQUEUE_TIMEOUT).stdout.strip()


def _wait_for_an_idle_cluster(why: str) -> None:
    """Tests that fill the node (--exclusive) need it free: a job still completing from the test before
    must not make them time out."""
    deadline = time.monotonic() + 120
    while (left := _jobs_in_flight()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert not left, f"the test cluster is not idle {why}; still in flight: {left!r}"


@pytest.fixture
def slurm_spool(spool, cluster_cpus):
    """A spool whose driver hands its jobs to Slurm; any Slurm job a test leaves is cancelled afterwards,
    and the next test starts on an idle cluster."""
    _wait_for_an_idle_cluster("before the test")
    configure(spool)
    yield spool
    from onite.spool import runrecords

    ids = set()
    for path in spool.rglob("*@run"):
        record = runrecords.read(path)
        if record is not None and record.info.get("external_id"):
            ids.add(record.info["external_id"])
    for path in spool.rglob("*@result"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("external_id"):
            ids.add(data["external_id"])
    if ids:
        subprocess.run(["scancel", "--quiet", *sorted(ids)], capture_output=True)
    _wait_for_an_idle_cluster("after the test, its jobs cancelled")


def configure(spool: Path, *, slurm: dict | None = None, **top) -> None:
    """executor = "slurm", ``top`` settings, and a [slurm] table (replacing one written before)."""
    path = spool / "onite.toml"
    path.write_text(path.read_text().split("\n[slurm]\n")[0])
    set_config(spool, executor="slurm", **top)
    table = {"poll": "0.25s", **(slurm or {})}
    with open(path, "a") as handle:
        handle.write("\n[slurm]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items()))


def submit(name, body, *args, user=None, env=None, cwd=None):
    r = run_cli(["submit", name, *args], stdin=body.encode() if isinstance(body, str) else body, user=user, env=env,
                cwd=cwd)
    assert r.code == 0, r
    return r


def slurm_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-O", "State"], capture_output=True, text=True,
                         timeout=SQUEUE_TIMEOUT).stdout
    return out.strip()


def runinfo(spool: Path, name: str) -> dict:
    """What a run's record says (its first line, with the Slurm job id once sbatch has said it); ``name``:
    a key, or root's NAME."""
    from onite.spool import runrecords

    record = runrecords.read(spool / "running" / HOST / f"{name if ':' in name else 'root:' + name}@run")
    return record.info if record is not None else {}


def finish(driver: subprocess.Popen, timeout: float = 30) -> int:
    """Wait for the driver to exit by itself; its exit code (reading its pipes to the end)."""
    driver.communicate(timeout=timeout)
    return driver.returncode


def kill_driver_when(spool: Path, ready, what: str, *args: str) -> None:
    """Start a driver, wait until ``ready()``, then kill -9 it (its Slurm jobs live on)."""
    driver = start_driver(spool, *args)
    try:
        wait_for(ready, timeout=30, what=what)
        os.kill(driver.pid, signal.SIGKILL)
        driver.communicate()
    finally:
        stop(driver)


def drain_with_tools(spool: Path, tools: Path, timeout: float = 120) -> None:
    """A drain whose PATH finds ``tools`` (commands standing for or wrapping Slurm's) first: it ends by itself, exit 0."""
    driver = start_driver(spool, env=dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}"))
    try:
        assert finish(driver, timeout=timeout) == 0
    finally:
        stop(driver)


def stop(driver: subprocess.Popen) -> None:
    if driver.poll() is None:
        os.killpg(driver.pid, signal.SIGKILL)
    driver.communicate()


# ---- identity, environment, directory, output ------------------------------------


@needs_root
def test_jobs_run_in_slurm_as_their_owners_with_exact_env_and_cwd(slurm_spool, workdir):
    who = pwd.getpwnam("nobody")
    env = {"PATH": "/usr/bin:/bin", "MULTI": "line one\nline 'two' $HOME \\ \"q\"", "HOME": "/wrong", "USER": "wrong"}
    raw = {k.encode(): v.encode() for k, v in env.items()}
    raw[b"RAW"] = b"\xff\xfe not utf-8"
    body = ('id -u > id.out; pwd > pwd.out; printenv MULTI > multi.out; printenv RAW > raw.out;'
            'printf "%s|%s|%s" "$HOME" "$USER" "$LOGNAME" > login.out; echo "to stdout"; echo "to stderr" >&2\n')
    for name, user in (("as-root", None), ("as-nobody", "nobody")):
        here = workdir / name
        here.mkdir()
        if user:
            os.chown(here, who.pw_uid, who.pw_gid)
        text_env = {os.fsdecode(k): os.fsdecode(v) for k, v in raw.items()}  # surrogates carry the raw bytes
        r = run_cli(["submit", name], stdin=body.encode(), user=user, cwd=here,
                    env={**text_env, "ONITE_SPOOL": str(slurm_spool)})
        assert r.code == 0, r
    proc = drain(slurm_spool)
    assert proc.returncode == 0, proc.stderr
    for name, uid, home, user in (("as-root", 0, "/root", "root"),
                                  ("as-nobody", who.pw_uid, who.pw_dir, "nobody")):
        here = workdir / name
        rec = result(slurm_spool, name)
        assert rec["state"] == "done" and rec["executor"] == "slurm" and rec["external_id"].isdigit(), rec
        assert (here / "id.out").read_text() == f"{uid}\n"
        assert (here / "pwd.out").read_text() == f"{here}\n"
        assert (here / "multi.out").read_bytes() == raw[b"MULTI"] + b"\n"
        assert (here / "raw.out").read_bytes() == b"\xff\xfe not utf-8\n"
        assert (here / "login.out").read_text() == f"{home}|{user}|{user}"  # from passwd, as a login sets them
        out = slurm_spool / "stdout" / f"{user}:{name}"
        st = out.stat()
        assert st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o600
        assert out.read_text() == "to stdout\nto stderr\n"


def test_stderr_kept_apart_goes_to_its_own_file_through_sbatch_error(slurm_spool, workdir):
    """--stderr-separate: sbatch --error=stdout/NAME@stderr; both files its owner's, 0600; a retry appends to both."""
    configure(slurm_spool, retry_delay="1s")
    both = "printf 'out \\377\\n'; printf 'err \\376\\n' >&2\n"  # bytes that are not UTF-8, exact
    flag = workdir / "failed-once"
    me = pwd.getpwuid(os.getuid()).pw_name
    owners = [("sep-root", None, 0)] if ROOT else [("sep-mine", None, os.getuid())]
    if ROOT:
        owners.append(("sep-nobody", "nobody", pwd.getpwnam("nobody").pw_uid))
    for name, user, _ in owners:
        submit(name, both, "--stderr-separate", user=user, cwd="/tmp")
    submit("sep-retried", both + f"[ -e {flag} ] || {{ touch {flag}; exit 1; }}\n", "--stderr-separate",
           "--retries", "1", cwd="/tmp")
    submit("merged", "echo out; echo err >&2\n", cwd="/tmp")
    assert drain(slurm_spool).returncode == 0
    for name, user, uid in owners:
        rec = result(slurm_spool, name)
        assert (rec["state"], rec["executor"], rec["stderr"]) == ("done", "slurm", "separate"), rec
        key = f"{user or me}:{name}"
        for path, data in ((slurm_spool / "stdout" / key, b"out \xff\n"),
                           (slurm_spool / "stdout" / f"{key}@stderr", b"err \xfe\n")):
            st = path.stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o600)
            assert path.read_bytes() == data
        assert run_cli(["output", name, "--stderr"], user=user).out_bytes == b"err \xfe\n"
    rec = result(slurm_spool, "sep-retried")
    assert (rec["state"], rec["attempt"]) == ("done", 2), rec
    for path, data in ((slurm_spool / "stdout" / "root:sep-retried", b"out \xff\n"),
                       (slurm_spool / "stdout" / "root:sep-retried@stderr", b"err \xfe\n")):
        first, marker, second = path.read_bytes().partition(b"\n[onite] attempt 2 of sep-retried, ")
        assert (first, second.split(b"\n", 1)[1]) == (data, data) and marker, path.read_bytes()
    assert (slurm_spool / "stdout" / "root:merged").read_text() == "out\nerr\n"
    assert not (slurm_spool / "stdout" / "root:merged@stderr").exists()


def test_exit_codes_and_signals_are_recorded(slurm_spool):
    submit("ok", "exit 0\n")
    submit("three", "exit 3\n")
    submit("killed", "kill -9 $$\n")
    submit("py", "#!/usr/bin/env python3\nimport sys; sys.exit(7)\n")
    assert drain(slurm_spool).returncode == 0
    assert result(slurm_spool, "ok")["state"] == "done"
    assert (result(slurm_spool, "three")["exit_code"], result(slurm_spool, "three")["reason"]) == (3, "exit 3")
    assert result(slurm_spool, "killed")["signal"] == 9
    assert result(slurm_spool, "killed")["reason"] == "signal 9 (SIGKILL)"
    assert result(slurm_spool, "py")["exit_code"] == 7


def test_requests_reach_slurm_as_mem_and_cpus_per_task(slurm_spool, cluster_cpus):
    cpus = min(2, cluster_cpus)
    submit("asks", "true\n", "--mem", "100M", "--cpus", str(cpus))
    assert drain(slurm_spool).returncode == 0
    res = result(slurm_spool, "asks")
    assert res["state"] == "done" and (res["mem"], res["cpus"]) == (100, cpus)
    shown = subprocess.run(["scontrol", "show", "job", res["external_id"]], capture_output=True, text=True,
                           timeout=SQUEUE_TIMEOUT).stdout  # kept for MinJobAge after it ended
    assert "MinMemoryNode=100M" in shown and f"CPUs/Task={cpus}" in shown, shown


# ---- order ---------------------------------------------------------------------------

EXCLUSIVE = "#!/bin/sh\n#SBATCH --exclusive\n"  # the user's own line: each job takes the whole node, one at a time


@contextlib.contextmanager
def node_held(spool, workdir):
    """A driver of ``spool`` whose P1 blocker holds the whole node until the gate goes: yields the driver and
    the gate (removed, and the driver stopped, at the end)."""
    gate, blocked = workdir / "gate", workdir / "blocked"
    gate.touch()
    submit("blocker", f"{EXCLUSIVE}touch {blocked}; while [ -e {gate} ]; do sleep 0.05; done\n", "-p", "1")
    driver = start_driver(spool)
    try:
        wait_for(blocked.exists, timeout=30, what="the blocker to run")
        yield driver, gate
    finally:
        gate.unlink(missing_ok=True)
        stop(driver)



def test_priority_order_when_the_cluster_is_full(slurm_spool, workdir):
    """Jobs wait in Slurm behind a blocker; Slurm then starts them in onite's order (--nice)."""
    trace = workdir / "trace"
    with node_held(slurm_spool, workdir) as (driver, gate):
        for name, prio in (("p3", 3), ("p1", 1), ("p2", 2)):
            submit(name, f"{EXCLUSIVE}echo {name} >> {trace}\n", "-p", str(prio))
        wait_for(lambda: all(runinfo(slurm_spool, n).get("external_id") for n in ("p1", "p2", "p3")), timeout=30,
                 what="all three in Slurm")
        assert all(slurm_state(runinfo(slurm_spool, n)["external_id"]) == "PENDING" for n in ("p1", "p2", "p3"))
        gate.unlink()
        assert finish(driver, 60) == 0
    assert trace.read_text().split() == ["p1", "p2", "p3"]


@needs_root
@pytest.mark.attack
def test_a_user_who_lowers_their_slurm_jobs_nice_does_not_pass_another_users_job(slurm_spool, workdir):
    """Jobs waiting in Slurm start in onite's order by their --nice, which Slurm lets a job's owner
    lower to 0 (`scontrol update jobid=J nice=0`): nobody's P7 job, waiting behind a blocker with
    daemon's P2 job, started first once the node was free. The driver now reads each job's nice as
    it polls, and cancels a job whose nice is below the one it was submitted with."""
    trace = workdir / "trace"
    trace.touch(mode=0o666)
    trace.chmod(0o666)  # both users' jobs add to it
    with node_held(slurm_spool, workdir) as (driver, gate):
        submit("first", f"{EXCLUSIVE}echo daemon >> {trace}\n", "-p", "2", user="daemon", cwd="/tmp")
        submit("jumper", f"{EXCLUSIVE}echo nobody >> {trace}\n", "-p", "7", user="nobody", cwd="/tmp")
        jumper = wait_for(lambda: runinfo(slurm_spool, "nobody:jumper").get("external_id"), timeout=30,
                          what="nobody's job in Slurm")
        wait_for(lambda: runinfo(slurm_spool, "daemon:first").get("external_id"), timeout=30, what="daemon's job in Slurm")
        lowered = subprocess.run(["runuser", "-u", "nobody", "--", "scontrol", "update", f"jobid={jumper}", "nice=0"],
                                 capture_output=True, text=True, timeout=SQUEUE_TIMEOUT)
        assert lowered.returncode == 0, lowered.stderr  # Slurm lets it
        wait_for(lambda: slurm_state(jumper) == "CANCELLED", timeout=30, what="the driver to cancel nobody's job")
        gate.unlink()
        assert finish(driver, 60) == 0
    assert trace.read_text().split() == ["daemon"]
    jumped = result(slurm_spool, "nobody:jumper")
    assert jumped["state"] == "cancelled" and "its nice in Slurm was lowered from 60000 to 0" in jumped["reason"], jumped
    assert result(slurm_spool, "daemon:first")["state"] == "done"


def test_max_jobs_is_the_slot_count_and_order_holds(slurm_spool, workdir):
    configure(slurm_spool, slurm={"max_jobs": 1})
    trace = workdir / "trace"
    for name, prio in (("c", 3), ("a", 1), ("b", 2)):
        submit(name, f"echo start {name} >> {trace}; sleep 0.3; echo end {name} >> {trace}\n", "-p", str(prio))
    proc = drain(slurm_spool)
    assert proc.returncode == 0
    assert trace.read_text().split("\n")[:-1] == ["start a", "end a", "start b", "end b", "start c", "end c"]
    assert "slots=1" in next(line for line in log_lines(slurm_spool) if "driver-start" in line)


def test_dependency_chain_runs_in_order_and_a_failure_stops_it(slurm_spool, workdir):
    trace = workdir / "trace"
    submit("first", f"echo first >> {trace}\n", "-p", "7")
    submit("second", f"echo second >> {trace}\n", "--after", "first", "-p", "1")
    submit("third", f"echo third >> {trace}\n", "--after", "second", "-p", "1")
    submit("broken", "exit 1\n", "-p", "7")
    submit("never", f"echo never >> {trace}\n", "--after", "broken")
    assert drain(slurm_spool).returncode == 0
    assert trace.read_text().split() == ["first", "second", "third"]
    assert result(slurm_spool, "never")["state"] == "failed" and "broken" in result(slurm_spool, "never")["reason"]


# ---- stopping ----------------------------------------------------------------------------


@needs_root
def test_cancel_of_a_running_job_scancels_it(slurm_spool, workdir):
    marker = workdir / "started"
    submit("long", f"touch {marker}; sleep 300\n", user="nobody", cwd=workdir)
    driver = start_driver(slurm_spool)
    try:
        wait_for(marker.exists, timeout=30, what="the job to run in Slurm")
        job_id = runinfo(slurm_spool, "nobody:long")["external_id"]
        assert slurm_state(job_id) == "RUNNING"
        r = run_cli(["cancel", "long"], user="nobody")
        assert r.code == 0, r
        assert finish(driver, 30) == 0
    finally:
        stop(driver)
    rec = result(slurm_spool, "long")
    assert rec["state"] == "cancelled" and rec["reason"] == "cancelled by nobody"
    assert slurm_state(job_id) == "CANCELLED"


@needs_root
def test_cancel_of_a_job_still_pending_in_slurm_records_no_start(slurm_spool, workdir):
    """Slurm sets the StartTime of a job cancelled while pending to its cancel: onite logged
    'slurm-start … waited=6.1s' and filed a start and a duration for a job that never ran."""
    with node_held(slurm_spool, workdir) as (driver, gate):
        submit("waiting", f"{EXCLUSIVE}echo ran\n", user="nobody", cwd=workdir)
        wait_for(lambda: runinfo(slurm_spool, "nobody:waiting").get("external_id"), timeout=30, what="it in Slurm")
        job_id = runinfo(slurm_spool, "nobody:waiting")["external_id"]
        assert slurm_state(job_id) == "PENDING"
        r = run_cli(["cancel", "waiting"], user="nobody")
        assert r.code == 0, r
        wait_for(lambda: (slurm_spool / "jobsdone" / "nobody:waiting@result").exists(), timeout=30, what="it filed")
        gate.unlink()
        assert finish(driver, 60) == 0
    rec = result(slurm_spool, "nobody:waiting")
    assert rec["state"] == "cancelled" and rec["reason"] == "cancelled by nobody", rec
    assert rec["started"] is None, rec
    assert not [line for line in log_lines(slurm_spool) if "slurm-start nobody:waiting" in line]


def _running_view(name: str, user: str) -> tuple[dict, dict]:
    """``name``'s entry in the owner's ``onite list --all --json`` and in ``onite status --json``'s running."""
    listed, status = run_cli(["list", "--all", "--json"], user=user), run_cli(["status", "--json"], user=user)
    assert listed.code == 0 and status.code == 0, (listed, status)
    return ([j for j in listed.json()["jobs"] if j["name"] == name] or [{}])[0], \
        ([j for j in status.json()["running"] if j["name"] == name] or [{}])[0]


def test_a_job_pending_or_held_in_slurm_is_not_shown_as_started(slurm_spool, workdir):
    """A job onite handed to Slurm that waits there (the node full, or its owner's scontrol hold) showed in list
    and status as running since the hand-over, its time counting: it has not started, and they say why."""
    with node_held(slurm_spool, workdir) as (driver, gate):
        submit("waiting", f"{EXCLUSIVE}echo ran\n", user="nobody", cwd=workdir)
        wait_for(lambda: runinfo(slurm_spool, "nobody:waiting").get("external_id"), timeout=30, what="it in Slurm")
        job_id = runinfo(slurm_spool, "nobody:waiting")["external_id"]
        assert slurm_state(job_id) == "PENDING"
        wait_for(lambda: _running_view("waiting", "nobody")[0].get("reason", "").startswith("pending in Slurm"),
                 timeout=30, what="list to say it is pending in Slurm")
        listed, running = _running_view("waiting", "nobody")
        assert listed["state"] == "running" and listed["started"] is None and listed["external_id"] == job_id, listed
        assert running["started"] is None and running["elapsed"] is None, running
        assert running["reason"].startswith("pending in Slurm ("), running
        table = run_cli(["list", "--all"], user="nobody", env=dict(os.environ, COLUMNS="250"))
        assert "pending in Slurm" in table.out, table
        waited = run_cli(["wait", "waiting", "--timeout", "1s", "--json"], user="nobody")
        assert waited.json()["jobs"][0]["reason"].startswith("pending in Slurm ("), waited
        waited = run_cli(["wait", "waiting", "--timeout", "1s"], user="nobody")
        assert "waiting: still running (pending in Slurm (" in waited.out, waited
        report = run_cli(["report", "--json"], user="nobody")
        assert report.code == 0, report
        rows = [row for row in report.json()["waiting"] or [] if row["name"] == "waiting"]
        assert rows and rows[0]["reason"].startswith("pending in Slurm ("), report.json()
        held = subprocess.run(["runuser", "-u", "nobody", "--", "scontrol", "hold", job_id], capture_output=True,
                              text=True, timeout=SQUEUE_TIMEOUT)
        assert held.returncode == 0, held
        wait_for(lambda: "JobHeldUser" in _running_view("waiting", "nobody")[0].get("reason", ""), timeout=30,
                 what="list to say its owner holds it in Slurm")
        assert _running_view("waiting", "nobody")[0]["started"] is None
        released = subprocess.run(["runuser", "-u", "nobody", "--", "scontrol", "release", job_id],
                                  capture_output=True, text=True, timeout=SQUEUE_TIMEOUT)
        assert released.returncode == 0, released
        gate.unlink()
        wait_for(lambda: _running_view("waiting", "nobody")[0].get("started") or result_exists(slurm_spool),
                 timeout=60, what="it to start in Slurm")
        assert finish(driver, 60) == 0
    rec = result(slurm_spool, "nobody:waiting")
    assert rec["state"] == "done" and rec["started"] is not None, rec


def test_a_running_slurm_job_is_shown_started_when_its_result_will_say(slurm_spool, workdir):
    """Slurm gives a start to the second: list showed that second, before the hand-over (a job running longer
    than it had been queued), where the result takes the hand-over, the later of the two."""
    marker = workdir / "running"
    submit("now", f"touch {marker}; sleep 300\n", user="nobody", cwd=workdir)
    driver = start_driver(slurm_spool)
    try:
        wait_for(lambda: marker.exists() and _running_view("now", "nobody")[0].get("started"), timeout=30,
                 what="list to show it started in Slurm")
        from datetime import datetime

        handed_over = datetime.fromisoformat(runinfo(slurm_spool, "nobody:now")["started"])
        listed = _running_view("now", "nobody")[0]
        assert datetime.fromisoformat(listed["started"]) >= handed_over, (listed, handed_over)
    finally:
        stop(driver)


def test_the_node_slurm_runs_a_job_on_is_shown_where_it_runs_and_kept_in_its_result(slurm_spool, workdir, monkeypatch):
    """list, status, report and the result said HOST = the driver's host that handed the job over; a Slurm user
    debugging a job wants the node it runs on, as squeue and sacct say it."""
    node = _node()
    marker, gate = workdir / "running", workdir / "gate"
    gate.touch()
    monkeypatch.delenv("COLUMNS", raising=False)  # the terminal's own width
    submit("where", f"touch {marker}; while [ -e {gate} ]; do sleep 0.05; done\n", user="nobody", cwd=workdir)
    driver = start_driver(slurm_spool)
    try:
        wait_for(lambda: marker.exists() and _running_view("where", "nobody")[0].get("nodes"), timeout=30,
                 what="list to show its node")
        listed, running = _running_view("where", "nobody")
        assert listed["nodes"] == node and running["nodes"] == node and listed["host"] == HOST, listed
        code, seen = OnTerminal(slurm_spool, ["list", "--all"], columns=80).finish()
        lines = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode()).replace("\r\n", "\n").splitlines()
        assert code == 0 and all(len(line.rstrip()) <= 80 for line in lines), lines
        assert [line for line in lines if line.rstrip().endswith(f"running in Slurm on node {node}")], lines
        said = f"running in Slurm on node {node} since "
        report = run_cli(["report", "--json"], user="nobody")
        rows = [row for row in report.json()["waiting"] or [] if row["name"] == "where"]
        assert rows and rows[0]["reason"].startswith(said) and rows[0]["reason"].endswith(f", handed over by {HOST}")
        assert said in run_cli(["report"], user="nobody", env=dict(os.environ, COLUMNS="250")).out
        gate.unlink()
        wait_for(lambda: (slurm_spool / "jobsdone" / "nobody:where@result").exists(), timeout=60, what="it filed")
    finally:
        gate.unlink(missing_ok=True)
        stop(driver)
    rec = result(slurm_spool, "nobody:where")
    assert rec["state"] == "done" and rec["nodes"] == node and rec["host"] == HOST, rec
    listed = [j for j in run_cli(["list", "--all", "--json"], user="nobody").json()["jobs"] if j["name"] == "where"]
    assert listed and listed[0]["nodes"] == node, listed


def result_exists(spool: Path) -> bool:
    return (spool / "jobsdone" / "nobody:waiting@result").exists()


@pytest.mark.attack
def test_a_job_its_owner_has_slurm_requeue_is_cancelled_not_run_twice_nor_timed_out_while_pending(slurm_spool, workdir):
    """--no-requeue is its owner's to undo (scontrol update requeue=1, then scontrol requeue): the job went back
    to pending and would have run a second time behind onite's back; onite kept its first start's deadline, so
    it filed 'timeout' for a job that had run seconds and then waited, with no start at all. Slurm's RestartCnt
    tells, even where the driver never saw it running (stopped here from the hand-over to the requeue)."""
    trace = workdir / "trace"
    submit("again", f"#!/bin/sh\necho start >> {trace}\nsleep 60\n", "--timeout", "1m", user="nobody", cwd=workdir)
    driver = start_driver(slurm_spool)
    try:
        wait_for(lambda: runinfo(slurm_spool, "nobody:again").get("external_id"), timeout=30, what="the hand-over")
        job_id = runinfo(slurm_spool, "nobody:again")["external_id"]
        driver.send_signal(signal.SIGSTOP)  # the driver never sees it running: only Slurm's count tells
        try:
            wait_for(trace.exists, timeout=30, what="it to run")
            for args in (["update", f"jobid={job_id}", "requeue=1"], ["requeue", job_id]):
                done = subprocess.run(["runuser", "-u", "nobody", "--", "scontrol", *args], capture_output=True,
                                      text=True, timeout=SQUEUE_TIMEOUT)
                assert done.returncode == 0, done
        finally:
            driver.send_signal(signal.SIGCONT)
        assert finish(driver, 90) == 0
    finally:
        stop(driver)
    rec = result(slurm_spool, "nobody:again")
    assert rec["state"] == "cancelled" and "requeued" in rec["reason"], rec
    assert rec["started"] is not None, rec
    assert trace.read_text().split() == ["start"]


def test_a_job_slurm_ends_at_its_deadline_before_it_ran_records_no_start(slurm_spool):
    """An #SBATCH --deadline its time limit cannot meet: Slurm ends it DEADLINE without ever giving it a
    node. onite filed it with a start (the hand-over) and a duration, as if it had run."""
    submit("late", "#!/bin/sh\n#SBATCH --deadline=now+1minute\necho ran\n", "--timeout", "5m")
    proc = drain(slurm_spool)
    assert proc.returncode == 0, proc.stderr
    rec = result(slurm_spool, "late")
    assert rec["state"] == "failed" and rec["reason"] == "ended by Slurm: DEADLINE (DeadLine)", rec
    assert rec["started"] is None, rec


def test_timeout_is_enforced_at_the_exact_deadline(slurm_spool, workdir):
    marker = workdir / "started"
    submit("slow", f"touch {marker}; sleep 300\n", "--timeout", "3s")
    driver = start_driver(slurm_spool)
    try:
        wait_for(marker.exists, timeout=30, what="the job to run")
        job_id = runinfo(slurm_spool, "slow")["external_id"]
        limit = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
        assert "TimeLimit=00:01:00" in limit  # Slurm gets whole minutes; onite keeps the exact 3 s
        assert finish(driver, 30) == 0
    finally:
        stop(driver)
    rec = result(slurm_spool, "slow")
    assert rec["state"] == "failed" and rec["reason"] == "timeout"
    # never early; and stopped by onite's 3 s, not by Slurm's whole minute (no tighter bound: the machine is shared)
    assert 3.0 <= rec["duration"] < 60.0, rec["duration"]
    assert slurm_state(job_id) == "CANCELLED"


def test_graceful_stop_lets_slurm_jobs_finish_and_hard_stop_requeues(slurm_spool, workdir):
    marker, gate = workdir / "started", workdir / "gate"
    gate.touch()
    submit("finishes", f"touch {marker}; while [ -e {gate} ]; do sleep 0.05; done\n")
    driver = start_driver(slurm_spool)
    try:
        wait_for(marker.exists, timeout=30, what="the job to run")
        driver.send_signal(signal.SIGTERM)
        wait_for(lambda: any("finish running jobs" in line for line in log_lines(slurm_spool)), what="the stop")
        gate.unlink()
        assert finish(driver, 30) == 0
    finally:
        stop(driver)
    assert result(slurm_spool, "finishes")["state"] == "done"

    marker.unlink()
    submit("interrupted", f"touch {marker}; sleep 300\n", "-p", "2")
    driver = start_driver(slurm_spool)
    try:
        wait_for(marker.exists, timeout=30, what="the second job to run")
        job_id = runinfo(slurm_spool, "interrupted")["external_id"]
        stops = sum("finish running jobs" in line for line in log_lines(slurm_spool))
        driver.send_signal(signal.SIGTERM)
        # one signal at a time: two pending SIGTERMs would merge into one
        wait_for(lambda: sum("finish running jobs" in line for line in log_lines(slurm_spool)) > stops,
                 what="the stop")
        driver.send_signal(signal.SIGTERM)
        assert finish(driver, 30) == 0
    finally:
        stop(driver)
    assert (slurm_spool / "jobs" / "P2" / "root:interrupted").exists()  # back in its queue for the next night
    assert slurm_state(job_id) == "CANCELLED"
    assert any(" requeued root:interrupted " in line for line in log_lines(slurm_spool))


def test_a_job_slurm_can_never_start_fails_at_once_and_is_not_retried(slurm_spool, workdir, cluster_cpus):
    """A job asking for more than the cluster has (64 CPUs on a 4-CPU node: PartitionConfig; two nodes in a
    one-node partition: PartitionConfig, then PartitionNodeLimit) waited in Slurm all night, holding its slot (the job behind it never
    ran with max_jobs = 1) and the drain's end. It is cancelled and failed with Slurm's reason, not retried."""
    configure(slurm_spool, slurm={"max_jobs": 1})
    ran = workdir / "ran"
    submit("too-wide", "true\n", "--cpus", str(cluster_cpus * 16), "--retries", "2", "-p", "1")
    submit("two-nodes", "#!/bin/sh\n#SBATCH --nodes=2\ntrue\n", "-p", "1")
    submit("after", f"touch {ran}\n", "-p", "2")
    driver = start_driver(slurm_spool)
    try:
        assert finish(driver, 90) == 0
    finally:
        stop(driver)
    wide, nodes = result(slurm_spool, "too-wide"), result(slurm_spool, "two-nodes")
    assert wide["state"] == "failed" and wide["reason"] == (
        f"Slurm can never start it: PartitionConfig (it asks for {cluster_cpus * 16} CPUs on 1 node; "
        "it violates a limit of its partition)"), wide
    assert wide["attempt"] == 1 and wide["started"] is None, wide  # not retried: it would fail again
    # Slurm says PartitionConfig at first, PartitionNodeLimit once its scheduler has looked at it
    assert nodes["state"] == "failed" and nodes["reason"].startswith("Slurm can never start it: Partition"), nodes
    assert "on 2 nodes;" in nodes["reason"], nodes
    for rec in (wide, nodes):
        assert slurm_state(rec["external_id"]) == "CANCELLED"
    assert ran.exists() and result(slurm_spool, "after")["state"] == "done"


def test_a_job_held_in_slurm_waits_but_a_graceful_stop_puts_it_back_in_its_queue(slurm_spool, workdir):
    """A job its owner holds in Slurm (#SBATCH --hold: JobHeldUser) is theirs to release, and waits; but a graceful
    stop (SIGTERM) waited for it all night. A job still pending in Slurm at a graceful stop is cancelled and goes
    back to its queue, as at a hard stop; one running finishes."""
    marker, gate = workdir / "running", workdir / "gate"
    gate.touch()
    submit("held", "#!/bin/sh\n#SBATCH --hold\ntrue\n", "-p", "1", user="nobody", cwd=workdir)
    submit("runs", f"touch {marker}; while [ -e {gate} ]; do sleep 0.05; done\n", "-p", "2")
    record = slurm_spool / "running" / HOST / "nobody:held@run"
    driver = start_driver(slurm_spool)
    try:
        wait_for(lambda: record.exists() and "JobHeldUser" in record.read_text(), timeout=30,
                 what="Slurm to say its owner holds it")
        wait_for(marker.exists, timeout=30, what="the other job to run")
        job_id = runinfo(slurm_spool, "nobody:held")["external_id"]
        assert slurm_state(job_id) == "PENDING" and driver.poll() is None  # held: not onite's to cancel
        driver.send_signal(signal.SIGTERM)
        wait_for(lambda: slurm_state(job_id) == "CANCELLED", timeout=30, what="the held job's cancel")
        assert driver.poll() is None  # the running job finishes
        gate.unlink()
        assert finish(driver, 60) == 0
    finally:
        gate.unlink(missing_ok=True)
        stop(driver)
    assert (slurm_spool / "jobs" / "P1" / "nobody:held").exists()  # back in its queue for the next night
    assert not (slurm_spool / "jobsdone" / "nobody:held@result").exists()
    assert any(" requeued nobody:held " in line for line in log_lines(slurm_spool))
    assert result(slurm_spool, "runs")["state"] == "done"


@needs_root
def test_node_failure_is_recorded_and_retried(slurm_spool, workdir):
    """--no-requeue: Slurm does not rerun the job behind onite's back; onite's own --retries does."""
    configure(slurm_spool, retry_delay="1s")
    runs, marker = workdir / "runs", workdir / "started"
    submit("fragile", f"echo run >> {runs}; [ $(wc -l < {runs}) -ge 2 ] && exit 0; touch {marker}; sleep 300\n",
           "--retries", "1")
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()[0]
    driver = start_driver(slurm_spool)
    try:
        wait_for(marker.exists, timeout=30, what="the job to run")
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=onite-test"], check=True)
        assert finish(driver, 60) == 0
    finally:
        stop(driver)
        if _cluster_problem():  # ReturnToService=2 brings it back on its own; make sure
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
    rec = result(slurm_spool, "fragile")
    assert rec["state"] == "done" and rec["attempt"] == 2, rec
    assert rec["attempts"][0]["reason"] == "ended by Slurm: NODE_FAIL (NodeDown)"
    assert runs.read_text() == "run\nrun\n"


# ---- a driver that dies --------------------------------------------------------------------


def test_kill_9_of_the_driver_then_reattach_without_rerunning(slurm_spool, workdir):
    starts, gate, done_gate = workdir / "starts", workdir / "gate", workdir / "done-gate"
    gate.touch()
    done_gate.touch()
    submit("survivor", f"echo start >> {starts}; while [ -e {gate} ]; do sleep 0.05; done\n")
    submit("ends-meanwhile", f"echo start >> {starts}.2; while [ -e {done_gate} ]; do sleep 0.05; done; exit 5\n")
    kill_driver_when(slurm_spool, lambda: starts.exists() and Path(f"{starts}.2").exists(), "both jobs to run")
    job_id = runinfo(slurm_spool, "survivor")["external_id"]
    assert slurm_state(job_id) == "RUNNING"  # Slurm jobs outlive their driver
    ended_id = runinfo(slurm_spool, "ends-meanwhile")["external_id"]
    done_gate.unlink()
    wait_for(lambda: slurm_state(ended_id) == "FAILED", timeout=30, what="the second job to end while no driver runs")

    driver = start_driver(slurm_spool)
    try:
        wait_for(lambda: any("re-attached" in line and "survivor" in line for line in log_lines(slurm_spool)),
                 timeout=30, what="the new driver to re-attach")
        gate.unlink()
        assert finish(driver, 30) == 0
    finally:
        stop(driver)
    assert starts.read_text() == "start\n" and Path(f"{starts}.2").read_text() == "start\n"  # each started once
    assert result(slurm_spool, "survivor")["state"] == "done"
    assert result(slurm_spool, "survivor")["external_id"] == job_id
    assert result(slurm_spool, "ends-meanwhile")["exit_code"] == 5


def _ended_while_no_driver_ran(spool, workdir, name: str, first_line: str) -> str:
    """Spool ``name`` (it writes ``first_line`` to workdir/starts, then waits for a gate), kill the driver once
    it runs in Slurm and the driver has recorded its node, and let it end while no driver runs; its Slurm job id."""
    starts, gate = workdir / "starts", workdir / "gate"
    gate.touch()
    submit(name, f"echo {first_line} >> {starts}; while [ -e {gate} ]; do sleep 0.05; done\n")
    kill_driver_when(spool, lambda: starts.exists() and _recorded_node(spool, name), "the job to run in Slurm")
    job_id = runinfo(spool, name)["external_id"]
    gate.unlink()
    wait_for(lambda: slurm_state(job_id) == "COMPLETED", timeout=30, what="the job to end while no driver runs")
    return job_id


def _recorded_node(spool: Path, name: str) -> str | None:
    """The node its run record says Slurm runs root's job ``name`` on."""
    from onite.spool import runrecords

    record = runrecords.read(spool / "running" / HOST / f"root:{name}@run")
    return record.slurm_nodes if record is not None else None


def _node() -> str:
    """The test cluster's node."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True).stdout
    return out.split()[0]


def test_a_job_that_ended_while_no_driver_watched_is_filed_as_ending_when_slurm_says(slurm_spool, workdir):
    """A job that ended while its driver was dead was filed as finished when the next driver came: an
    8-second job showed TOOK 16s (and the report's timeline ran it until the recovery)."""
    from datetime import datetime

    job_id = _ended_while_no_driver_ran(slurm_spool, workdir, "ends-unwatched", "start")
    seen_over = datetime.now().astimezone()
    assert drain(slurm_spool).returncode == 0
    rec = result(slurm_spool, "ends-unwatched")
    assert rec["state"] == "done" and rec["external_id"] == job_id and rec["nodes"] == _node(), rec
    assert datetime.fromisoformat(rec["started"]) <= datetime.fromisoformat(rec["finished"]) <= seen_over, rec


@needs_root
def test_a_slurm_job_onite_stopped_is_filed_as_stopped_after_its_driver_died(slurm_spool, workdir):
    """A driver killed after it cancelled nobody's Slurm jobs (one at its time limit, one at nobody's
    `onite cancel`), while Slurm waited out KillWait: the next driver filed both as `cancelled by
    scancel, outside onite` (the time limit no timeout, the cancel not nobody's). The stop now goes
    into the run record before the scancel, as a local run's does, and the next driver files each as
    onite stopped it."""
    stubborn = "trap 'echo term >> {0}' TERM; touch {0}.started; while :; do sleep 0.1; done\n"
    timed, cancelled = workdir / "timed", workdir / "cancelled"
    submit("timed", stubborn.format(timed), "--timeout", "3s", user="nobody", cwd=workdir)
    submit("cancelled", stubborn.format(cancelled), user="nobody", cwd=workdir)
    driver = start_driver(slurm_spool)
    try:
        # Slurm sends SIGTERM at onite's scancel, SIGKILL after KillWait (5 s): the driver is killed in between
        wait_for(timed.exists, timeout=60, what="the time limit's SIGTERM")
        from onite.__main__ import main

        canceller = as_user(lambda: main(["cancel", "cancelled"]), background=True)  # it waits for the end
        wait_for(cancelled.exists, timeout=30, what="the cancel's SIGTERM")
        os.kill(driver.pid, signal.SIGKILL)
        driver.communicate()
        os.waitpid(canceller, 0)
    finally:
        stop(driver)
    ids = [runinfo(slurm_spool, f"nobody:{name}")["external_id"] for name in ("timed", "cancelled")]
    wait_for(lambda: all(slurm_state(job_id) == "CANCELLED" for job_id in ids), timeout=60,
             what="Slurm to end both while no driver runs")
    assert finish(start_driver(slurm_spool), 60) == 0
    assert [result(slurm_spool, name)["reason"] for name in ("timed", "cancelled")] == ["timeout", "cancelled by nobody"]
    assert result(slurm_spool, "timed")["state"] == "failed"


def test_a_job_slurm_forgot_while_no_driver_ran_is_filed_lost_not_run_again(slurm_spool, workdir):
    """A driver killed while its Slurm job ran, and the next driver started after Slurm
    had forgotten the finished job (MinJobAge; the next night's driver always does): the job was
    requeued and run a second time. sbatch took it, so it may have run: it is now filed as lost."""
    starts = workdir / "starts"
    job_id = _ended_while_no_driver_ran(slurm_spool, workdir, "forgotten", "$SLURM_JOB_ID")
    [record] = (slurm_spool / "running").glob("*/root:forgotten@run")
    gone = str(int(job_id) + 5_000_000)  # an id Slurm never had: as the record reads once Slurm forgot the job
    record.write_bytes(record.read_bytes().replace(f'"{job_id}"'.encode(), f'"{gone}"'.encode()))
    assert runinfo(slurm_spool, "forgotten")["external_id"] == gone
    assert finish(start_driver(slurm_spool), 60) == 0
    assert starts.read_text().split() == [job_id]  # it ran once
    rec = result(slurm_spool, "forgotten")
    assert rec["state"] == "failed" and rec["external_id"] == gone and rec["nodes"] == _node(), rec  # as recorded
    assert rec["reason"].startswith(f"lost: Slurm forgot job {gone} while no driver watched it"), rec
    assert any(" recovered root:forgotten " in line and "ended while no driver watched it" in line
               for line in log_lines(slurm_spool))
    assert not (slurm_spool / "jobs" / "P1" / "root:forgotten").exists()


def test_recover_host_files_a_slurm_job_that_ended_meanwhile_instead_of_running_it_again(slurm_spool, workdir):
    """`onite recover --host` cancelled what still ran and requeued everything, also a
    job Slurm said had ended while no driver watched it: that job ran twice. It is now filed as it ended."""
    starts, gate = workdir / "starts", workdir / "gate"
    gate.touch()
    submit("ended", f"echo x >> {starts}; while [ -e {gate} ]; do sleep 0.05; done; exit 4\n", "-p", "3")
    kill_driver_when(slurm_spool, starts.exists, "the job to run in Slurm", "--host", "gone")
    from onite.spool import runrecords

    job_id = runrecords.read(slurm_spool / "running" / "gone" / "root:ended@run").info["external_id"]
    gate.unlink()
    wait_for(lambda: slurm_state(job_id) == "FAILED", timeout=30, what="the job to end while no driver runs")
    r = run_cli(["recover", "--host", "gone", "--force"])
    assert r.code == 0, r
    assert not (slurm_spool / "jobs" / "P3" / "root:ended").exists()
    rec = result(slurm_spool, "ended")
    assert (rec["state"], rec["exit_code"], rec["external_id"]) == ("failed", 4, job_id), rec
    assert starts.read_text() == "x\n"


@pytest.mark.attack
def test_an_sbatch_that_outlived_its_driver_is_stopped_before_the_job_is_looked_for(slurm_spool, workdir):
    """A driver killed while sbatch ran (slow, or stopped by the job's owner): the next
    driver found no job of the run in Slurm and ran it again, and the first sbatch, still alive,
    submitted it too: it ran twice, once unrecorded. That sbatch is now killed before the search."""
    tools, starts, pidfile = workdir / "tools", workdir / "starts", workdir / "sbatch.pid"
    tools.mkdir()
    (tools / "sbatch").write_text(f'#!/bin/sh\necho $$ > {pidfile}\nkill -STOP $$\nexec /usr/bin/sbatch "$@"\n')
    (tools / "sbatch").chmod(0o755)
    submit("inflight", f"echo $SLURM_JOB_ID >> {starts}\n")
    env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}")
    driver = start_driver(slurm_spool, env=env)
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=30, what="sbatch to run")
        sbatch_pid = int(pidfile.read_text())
        os.kill(driver.pid, signal.SIGKILL)
        driver.communicate()
        assert not runinfo(slurm_spool, "inflight").get("external_id")  # the driver never heard its id
        assert finish(start_driver(slurm_spool), 60) == 0
        gone = not Path(f"/proc/{sbatch_pid}").exists() or \
            Path(f"/proc/{sbatch_pid}/stat").read_text().split(") ")[-1].startswith(("Z", "X"))
    finally:
        stop(driver)
        subprocess.run(["pkill", "-CONT", "-F", str(pidfile)], capture_output=True)
    assert gone, "the dead driver's sbatch is still there, and would submit the job again"
    rec = result(slurm_spool, "inflight")
    assert rec["state"] == "done"
    assert starts.read_text().split() == [rec["external_id"]]


def copying_sbatch(tools: Path, then: str) -> None:
    """An sbatch in ``tools`` that submits the job twice (as an owner who copies their run's comment onto a
    second job would), then does ``then`` (its shell words) instead of answering."""
    tools.mkdir()
    (tools / "sbatch").write_text(f'#!/bin/sh\nscript=$(mktemp)\ncat > "$script"\n'
                                  f'for copy in 1 2; do {shutil.which("sbatch")} "$@" < "$script" > /dev/null; done\n'
                                  f'rm -f "$script"\n{then}\n')
    (tools / "sbatch").chmod(0o755)


def test_an_unsure_submission_slurm_holds_two_jobs_of_fails_with_both_cancelled(slurm_spool, workdir):
    """sbatch said it could not reach the controller, and Slurm then held two jobs of the owner with the
    run's comment: the run failed and both ran on, unwatched. Neither can be told for the run's own:
    both are cancelled, and the reason says so."""
    starts = workdir / "starts"
    copying_sbatch(workdir / "tools", 'echo "sbatch: error: Batch job submission failed: Unable to contact '
                                      'slurm controller (connect failure)" >&2; exit 1')
    submit("twice", f"echo $SLURM_JOB_ID >> {starts}; sleep 300\n")
    drain_with_tools(slurm_spool, workdir / "tools")
    rec = result(slurm_spool, "twice")
    assert rec["state"] == "failed" and "Slurm holds 2 jobs of its owner with its run's comment" in rec["reason"], rec
    copies = rec["reason"].rpartition("(")[2].partition(")")[0].split(", ")
    assert len(copies) == 2
    wait_for(lambda: all(slurm_state(job_id) == "CANCELLED" for job_id in copies), timeout=60,
             what="both copies to be cancelled")


def test_a_dead_drivers_run_slurm_holds_two_jobs_of_is_run_once_they_are_over(slurm_spool, workdir):
    """A driver killed while sbatch ran, and Slurm holding two jobs with the run's comment: the next driver
    took neither (it cannot tell which is the run's), said the run had not reached Slurm and ran it again
    beside both. It now cancels both, waits until they are over, and only then runs the job again."""
    starts, pidfile = workdir / "starts", workdir / "sbatch.pid"
    copying_sbatch(workdir / "tools", f"echo $$ > {pidfile}; kill -STOP $$")
    # the two copies run on until cancelled; the run the next driver starts ends at once
    submit("copied", f'echo $SLURM_JOB_ID >> {starts}; [ "$(wc -l < {starts})" -gt 2 ] || sleep 300\n')
    driver = start_driver(slurm_spool, env=dict(os.environ, PATH=f"{workdir / 'tools'}:{os.environ['PATH']}"))
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=60, what="sbatch to submit twice")
        os.kill(driver.pid, signal.SIGKILL)
        driver.communicate()
        wait_for(lambda: starts.exists() and len(starts.read_text().split()) == 2, timeout=60,
                 what="both copies to run")
        copies = starts.read_text().split()
        assert finish(start_driver(slurm_spool), 180) == 0
    finally:
        stop(driver)
        subprocess.run(["pkill", "-KILL", "-F", str(pidfile)], capture_output=True)
    assert all(slurm_state(job_id) == "CANCELLED" for job_id in copies)
    rec = result(slurm_spool, "copied")
    assert rec["state"] == "done" and rec["external_id"] not in copies, rec
    assert starts.read_text().split()[:2] == copies and len(starts.read_text().split()) == 3
    [line] = [line for line in log_lines(slurm_spool) if " recovered " in line and "root:copied" in line]
    assert "no Slurm job of it is in flight" in line, line


@needs_root
@pytest.mark.attack
def test_a_slurm_job_its_owner_renamed_is_still_cancelled_and_time_limited(slurm_spool, workdir):
    """Onite cancelled a job with `scancel --name=onite:NAME ID`, so an owner who renamed
    their own job (`scontrol update`) had it outlive `onite cancel`, root's included, and its time
    limit. It is now told by its id and its owner's uid, which the owner cannot change."""
    marker = workdir / "started"
    submit("renamed", f"touch {marker}; sleep 300\n", "--timeout", "4m", user="nobody", cwd=workdir)
    driver = start_driver(slurm_spool)
    try:
        wait_for(marker.exists, timeout=30, what="the job to run in Slurm")
        job_id = runinfo(slurm_spool, "nobody:renamed")["external_id"]
        subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--init-groups", "scontrol", "update",
                        f"jobid={job_id}", "name=mine-now"], check=True, capture_output=True, timeout=SQUEUE_TIMEOUT)
        assert run_cli(["cancel", "nobody:renamed"]).code == 0
        assert finish(driver, 60) == 0
    finally:
        stop(driver)
    assert slurm_state(job_id) == "CANCELLED"
    rec = result(slurm_spool, "renamed")
    assert (rec["state"], rec["reason"]) == ("cancelled", "cancelled by root"), rec


@needs_root
@pytest.mark.attack
def test_recover_host_waits_until_a_renamed_slurm_job_is_over_before_running_it_again(slurm_spool, workdir):
    """Recover --host cancelled by name, so a job its owner renamed kept running while
    its rerun started beside it; and a job still in flight when kill_grace ran out was requeued all the
    same. The cancel now goes by the owner's uid, and the claim is requeued only once Slurm says the
    job is over (Slurm kills what ignores TERM after KillWait)."""
    marker = workdir / "started"
    configure(slurm_spool, kill_grace="1s")
    submit("stubborn", f"trap '' TERM; touch {marker}; while :; do sleep 0.1; done\n", "-p", "3", user="nobody",
           cwd=workdir)
    kill_driver_when(slurm_spool, marker.exists, "the job to run in Slurm", "--host", "gone")
    from onite.spool import runrecords

    job_id = runrecords.read(slurm_spool / "running" / "gone" / "nobody:stubborn@run").info["external_id"]
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "name=renamed"], check=True, capture_output=True,
                   timeout=SQUEUE_TIMEOUT)
    r = run_cli(["recover", "--host", "gone", "--force"])
    assert r.code == 0, r
    assert slurm_state(job_id) in ("CANCELLED", "FAILED"), slurm_state(job_id)  # over before it is requeued
    assert (slurm_spool / "jobs" / "P3" / "nobody:stubborn").exists()
    [line] = [line for line in log_lines(slurm_spool) if " recovered nobody:stubborn " in line]
    assert f"Slurm job {job_id} was cancelled" in line, line


def recover_then_release(spool: Path, name: str, gate: Path, *, after: str | None = None) -> str:
    """A driver that recovers job ``name`` (its key; a job held by ``gate``), then lets it end; its ``recovered`` line
    (``after``: there was one before, saying that)."""
    def recovered() -> list[str]:
        return [line for line in log_lines(spool) if f" recovered {name} " in line and (after is None or after not in line)]

    driver = start_driver(spool)
    try:
        wait_for(recovered, timeout=30, what="recovery")
        gate.unlink()
        assert finish(driver, 60) == 0
    finally:
        stop(driver)
    [line] = recovered()
    return line


def test_a_slurm_job_whose_run_record_was_never_written_is_found_by_its_comment(slurm_spool, workdir):
    """A driver killed while sbatch ran (before the run record): the next one finds the job in Slurm
    by its name and comment, cancels it and runs the job again, instead of running it twice at once."""
    starts, gate = workdir / "starts", workdir / "gate"
    gate.touch()
    submit("unrecorded", f"echo $SLURM_JOB_ID >> {starts}; while [ -e {gate} ]; do sleep 0.05; done\n")
    kill_driver_when(slurm_spool, starts.exists, "the job to run in Slurm")
    [record] = (slurm_spool / "running").glob("*/root:unrecorded@run")
    job_id = runinfo(slurm_spool, "unrecorded")["external_id"]
    record.unlink()  # as if the driver had been killed before writing it (an older onite wrote it after sbatch)
    assert slurm_state(job_id) == "RUNNING"
    recovered = recover_then_release(slurm_spool, "root:unrecorded", gate)
    assert slurm_state(job_id) == "CANCELLED"
    assert "requeued" in recovered and f"no run record; Slurm job {job_id} was cancelled" in recovered, recovered
    rec = result(slurm_spool, "unrecorded")
    assert rec["state"] == "done" and rec["external_id"] != job_id
    assert starts.read_text().split() == [job_id, rec["external_id"]]


def test_a_slurm_job_whose_driver_died_as_sbatch_ran_is_taken_back_by_its_run_id(slurm_spool, workdir):
    """A driver killed while sbatch ran left no record of the job, and the next one
    cancelled the job it found and ran it again: with sbatch beside the loop the window is wider, and a
    job finished meanwhile ran twice. The record is now written before sbatch runs, the job's id
    appended once it is known; a record without it is looked up in Slurm by the run's id (in the
    job's comment, among its owner's jobs, in flight or ended): the job is taken back, and runs once."""
    starts, gate = workdir / "starts", workdir / "gate"
    gate.touch()
    submit("halfway", f"echo $SLURM_JOB_ID >> {starts}; while [ -e {gate} ]; do sleep 0.05; done\n", user="nobody",
           cwd="/tmp")
    kill_driver_when(slurm_spool, starts.exists, "the job to run in Slurm")
    [record] = (slurm_spool / "running").glob("*/nobody:halfway@run")
    job_id = runinfo(slurm_spool, "nobody:halfway")["external_id"]
    lines = record.read_bytes().splitlines(keepends=True)
    said = [i for i, line in enumerate(lines) if b'"submitted"' in line]
    assert said, lines
    record.write_bytes(b"".join(lines[:said[0]]))  # as if the driver had died before sbatch said the id (and polled)
    assert not runinfo(slurm_spool, "nobody:halfway").get("external_id")
    empty = workdir / "empty-slurm.conf"  # Slurm's commands refuse it at once (a missing one costs a minute of
    empty.write_text("")                  # looking for the configuration elsewhere first)
    blind = subprocess.run([sys.executable, "-m", "onite", "run", "-q"], capture_output=True, timeout=120,
                           env=dict(os.environ, ONITE_SPOOL=str(slurm_spool), PYTHONPATH=str(REPO),
                                    SLURM_CONF=str(empty)))  # a driver that cannot ask Slurm
    assert any(" recovered nobody:halfway " in line and "left claimed" in line for line in log_lines(slurm_spool)), blind
    assert record.exists() and slurm_state(job_id) == "RUNNING"  # kept, not cancelled nor requeued
    recovered = recover_then_release(slurm_spool, "nobody:halfway", gate, after="left claimed")
    assert "re-attached" in recovered and f"slurm={job_id}" in recovered, recovered
    rec = result(slurm_spool, "halfway")
    assert (rec["state"], rec["external_id"]) == ("done", job_id), rec
    assert starts.read_text().split() == [job_id]


def test_switching_to_local_cancels_what_a_dead_driver_left_in_slurm(slurm_spool, workdir):
    starts, gate = workdir / "starts", workdir / "gate"
    gate.touch()
    submit("moved", f"echo $SLURM_JOB_ID >> {starts}; while [ -e {gate} ]; do sleep 0.05; done\n")
    kill_driver_when(slurm_spool, starts.exists, "the job to run in Slurm")
    job_id = runinfo(slurm_spool, "moved")["external_id"]
    set_config(slurm_spool, executor="local")
    path = slurm_spool / "onite.toml"
    path.write_text(path.read_text().split("\n[slurm]\n")[0] + "\n")
    local = start_driver(slurm_spool)
    try:
        wait_for(lambda: any(" recovered root:moved " in line for line in log_lines(slurm_spool)), timeout=30,
                 what="recovery by the local driver")
        gate.unlink()
        assert finish(local, 60) == 0
    finally:
        stop(local)
    assert slurm_state(job_id) == "CANCELLED"
    recovered = [line for line in log_lines(slurm_spool) if " recovered root:moved " in line]
    assert recovered and f"Slurm job {job_id} was cancelled" in recovered[0], recovered
    rec = result(slurm_spool, "moved")
    assert rec["state"] == "done" and rec["executor"] == "local"
    assert starts.read_text() == f"{job_id}\n\n"  # once in Slurm (cancelled), then locally (no SLURM_JOB_ID)


def test_recover_host_cancels_the_dead_hosts_slurm_jobs_and_requeues_them(slurm_spool, workdir):
    marker = workdir / "started"
    submit("orphan", f"touch {marker}; sleep 300\n", "-p", "3")
    kill_driver_when(slurm_spool, marker.exists, "the job to run in Slurm", "--host", "gone")
    from onite.spool import runrecords

    job_id = runrecords.read(slurm_spool / "running" / "gone" / "root:orphan@run").info["external_id"]
    r = run_cli(["recover", "--host", "gone", "--force"])
    assert r.code == 0, r
    assert slurm_state(job_id) == "CANCELLED"  # nothing would watch it: it is cancelled, not re-attached
    assert (slurm_spool / "jobs" / "P3" / "root:orphan").exists()


def test_recover_host_that_cannot_stop_a_slurm_job_keeps_its_claim_and_says_so(slurm_spool, workdir):
    """A dead host's Slurm job that recover --host cannot cancel nor ask about (no controller) stays claimed
    for the next driver: recover does not call it recovered, and the dead driver is not marked as over, so
    ``onite status`` still warns of it; once Slurm answers, a second recover takes it back."""
    marker = workdir / "started"
    submit("orphan", f"touch {marker}; sleep 300\n", "-p", "3")
    kill_driver_when(slurm_spool, marker.exists, "the job to run in Slurm", "--host", "gone")
    empty = workdir / "empty-slurm.conf"  # Slurm's commands refuse it at once
    empty.write_text("")
    blind = run_cli(["recover", "--host", "gone", "--force"], env=dict(os.environ, SLURM_CONF=str(empty)))
    assert blind.code == 0, blind
    assert "recovered" not in blind.out and "claimed for its next driver" in blind.out and "orphan" in blind.out, blind
    assert (slurm_spool / "running" / "gone" / "root:orphan").exists()
    assert json.loads((slurm_spool / "driver.gone.state").read_text())["state"] != "exited"
    r = run_cli(["recover", "--host", "gone", "--force"])
    assert r.code == 0 and "recovered 1 job(s) of host gone: orphan" in r.out, r
    assert (slurm_spool / "jobs" / "P3" / "root:orphan").exists()
    assert json.loads((slurm_spool / "driver.gone.state").read_text())["state"] == "exited"


def test_a_recover_host_killed_after_its_cancels_leaves_the_next_to_run_the_job_again(slurm_spool, workdir):
    """recover --host sent the dead host's Slurm jobs their cancels before writing anything: killed just after, it left
    the next recover a job Slurm says was CANCELLED and a record with no stop line, which it filed as cancelled
    outside onite (a result, never run again). The cancel is recorded first, as a hard stop's."""
    marker = workdir / "started"
    submit("orphan", f"touch {marker}; sleep 300\n", "-p", "3")
    kill_driver_when(slurm_spool, marker.exists, "the job to run in Slurm", "--host", "gone")
    from onite.spool import runrecords

    job_id = runrecords.read(slurm_spool / "running" / "gone" / "root:orphan@run").info["external_id"]
    tools = workdir / "tools"
    tools.mkdir()
    (tools / "scancel").write_text(f'#!/bin/sh\n{shutil.which("scancel")} "$@"\nkill -9 $PPID\n')  # its recover dies
    (tools / "scancel").chmod(0o755)
    killed = run_cli(["recover", "--host", "gone", "--force"], env=dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}"))
    assert killed.code == -signal.SIGKILL, killed
    wait_for(lambda: slurm_state(job_id) == "CANCELLED", timeout=60, what="the cancel to take effect in Slurm")
    r = run_cli(["recover", "--host", "gone", "--force"])
    assert r.code == 0, r
    assert (slurm_spool / "jobs" / "P3" / "root:orphan").exists()  # back in its queue, to run again
    assert not (slurm_spool / "jobsdone" / "root:orphan@result").exists()
    assert any(" recovered root:orphan " in line and "rerun: requeued" in line for line in log_lines(slurm_spool))


def _listed_first(folder: Path, first: str, then: str) -> bool:
    """Does a folder on ``folder``'s file system list a file ``first`` made before ``then`` ahead of it (ext4 lists
    by a hash of the name)?"""
    probe = folder / ".probe"
    probe.mkdir()
    try:
        (probe / first).touch()
        (probe / then).touch()
        return os.listdir(probe).index(first) < os.listdir(probe).index(then)
    finally:
        shutil.rmtree(probe)


@needs_root
def test_recover_host_cancels_a_job_pending_in_slurm_before_the_room_of_another_cancel_starts_it(slurm_spool, workdir):
    """recover --host cancelled the dead host's Slurm jobs one after the other, each waited for: the job that held
    the node went first, and the one pending behind it started on the room, ran unwatched and was cut short by
    its own cancel and requeued: it ran twice. Each is sent its cancel before any is waited for."""
    names = next((a, b) for a, b in (("big", "small"), ("hold", "pend"), ("a1", "b1"), ("x", "y"), ("p", "q"))
                 if _listed_first(slurm_spool / "running", f"root:{a}", f"root:{b}"))
    started, ran = workdir / "started", workdir / "ran"
    submit(names[0], f"{EXCLUSIVE}touch {started}; sleep 300\n", "-p", "1")
    submit(names[1], f"{EXCLUSIVE}touch {ran}; sleep 300\n", "-p", "2")
    from onite.spool import runrecords

    def handed_over() -> bool:
        record = runrecords.read(slurm_spool / "running" / "gone" / f"root:{names[1]}@run")
        return started.exists() and record is not None and bool(record.info.get("external_id"))

    kill_driver_when(slurm_spool, handed_over, "one job to run in Slurm and one to wait there", "--host", "gone")
    r = run_cli(["recover", "--host", "gone", "--force"])
    assert r.code == 0, r
    assert not ran.exists()  # it never started: requeued, to run once
    assert (slurm_spool / "jobs" / "P2" / f"root:{names[1]}").exists()


# ---- refusals --------------------------------------------------------------------------------


@needs_root
def test_refusals_become_clear_failed_results(slurm_spool, workdir):
    private = workdir / "private"
    private.mkdir()
    os.chown(private, pwd.getpwnam("nobody").pw_uid, -1)
    submit("no-way-in", "echo hi\n", user="nobody", cwd=private)
    os.chown(private, 0, -1)
    os.chmod(private, 0o700)
    submit("crlf", b"#!/bin/sh\r\necho hi\r\n")
    submit("nul", b"echo \0\n")
    submit("array", "#!/bin/sh\n#SBATCH --array=1-3\necho\n")
    huge = "#!/bin/sh\n" + ("# " + "x" * 98 + "\n") * 50_000  # over slurmctld's 4 MiB script limit
    submit("huge", huge)
    assert drain(slurm_spool).returncode == 0
    assert result(slurm_spool, "no-way-in")["reason"] == f"its directory {private} is not accessible to nobody"
    assert result(slurm_spool, "crlf")["reason"].startswith("sbatch did not accept it: Batch script contains DOS")
    assert result(slurm_spool, "nul")["reason"].startswith("sbatch did not accept it: The Slurm controller does not")
    assert result(slurm_spool, "array")["reason"].startswith("'#SBATCH --array=1-3' is not supported")
    assert result(slurm_spool, "huge")["reason"].startswith("sbatch did not accept it:")
    assert f"the job text is {len(huge)} bytes" in result(slurm_spool, "huge")["reason"]


@needs_root
def test_a_job_whose_directory_was_removed_says_it_no_longer_exists(slurm_spool, workdir):
    """The local executor says 'no longer exists' for a removed directory (docs/slurm.md promises the
    same); the slurm executor said 'is not accessible to nobody', as for a directory closed to its owner."""
    gone = workdir / "gone" / "deeper"
    gone.mkdir(parents=True)
    os.chown(gone, pwd.getpwnam("nobody").pw_uid, -1)
    submit("no-dir", "echo hi\n", user="nobody", cwd=gone)
    shutil.rmtree(workdir / "gone")
    assert drain(slurm_spool).returncode == 0
    assert result(slurm_spool, "nobody:no-dir")["reason"] == f"its directory {gone} no longer exists"


@needs_root
def test_a_directive_cut_short_that_sbatch_reads_as_array_is_refused(slurm_spool, workdir):
    """sbatch reads its #SBATCH lines with getopt_long, which takes '--arr=1-2' for '--array=1-2': onite's check
    looked for the whole word only, and nobody's one job became a Slurm job array, which onite polls as one job."""
    submit("arr", "#!/bin/sh\n#SBATCH --arr=1-2\necho\n", user="nobody", cwd=workdir)
    assert drain(slurm_spool).returncode == 0
    told = result(slurm_spool, "nobody:arr")
    assert told["reason"].startswith("'#SBATCH --arr=1-2' is not supported") and told["external_id"] is None, told


@needs_root
def test_a_pbs_array_line_is_refused_not_run_as_a_slurm_job_array(slurm_spool, workdir):
    """sbatch honours '#PBS -t 1-3' as --array=1-3: nobody's one job ran three times in Slurm, filed as one done job."""
    submit("pbs", "#!/bin/sh\n#PBS -t 1-3\necho ran\n", user="nobody", cwd=workdir)
    assert drain(slurm_spool).returncode == 0
    told = result(slurm_spool, "nobody:pbs")
    assert told["reason"].startswith("'#PBS -t' is not supported") and told["external_id"] is None, told


@needs_root
@pytest.mark.attack
@pytest.mark.parametrize("line", ["#PBS --job_array=1-3", "#PBS -N x\\ -t 1-3"])
def test_a_pbs_array_spelt_another_way_is_refused_not_run_as_a_slurm_job_array(slurm_spool, workdir, line):
    """sbatch reads '#PBS --job_array=1-3' (its long form of -J) and '-N x\\ -t 1-3' (its backslash joins no words)
    as --array=1-3: onite's check knew neither, and nobody's one job ran three times in Slurm, filed as one."""
    submit("pbs2", f"#!/bin/sh\n{line}\necho ran\n", user="nobody", cwd=workdir)
    assert drain(slurm_spool).returncode == 0
    told = result(slurm_spool, "nobody:pbs2")
    assert told["reason"].startswith("'#PBS -") and "no job arrays" in told["reason"], told
    assert told["external_id"] is None, told


@needs_root
def test_a_hetjob_separator_in_capitals_is_refused_with_the_reason_hetjob_has(slurm_spool, workdir):
    """sbatch splits a job at '#SBATCH HetJob' as at 'hetjob' (the case is not looked at): onite refused only the
    word in lower case, so the job went to sbatch as a heterogeneous job and failed with sbatch's cryptic 'Could not
    open user environment file 9' (its components cannot share the export file)."""
    submit("het", "#!/bin/sh\n#SBATCH -n1\n#SBATCH HetJob\n#SBATCH -n1\necho ran\n", user="nobody", cwd=workdir)
    assert drain(slurm_spool).returncode == 0
    told = result(slurm_spool, "nobody:het")
    assert told["reason"].startswith("'#SBATCH HetJob' is not supported") and told["external_id"] is None, told


@pytest.mark.parametrize("option", ["--array=1-2", "--wait", "--test-only"])
def test_sbatch_args_that_break_one_job_one_slurm_job_stop_the_driver_in_one_line(slurm_spool, option):
    """The refused #SBATCH options were taken from [slurm] sbatch_args: every job became an array (run twice), or
    its sbatch waited for it, or submitted nothing and the job failed with 'sbatch did not accept it: Job N to start…'."""
    configure(slurm_spool, slurm={"sbatch_args": [option]})
    submit("one", "echo ran\n")
    r = drain(slurm_spool)
    assert r.returncode == 2 and b"sbatch_args" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    assert (slurm_spool / "jobs/P4/root:one").exists() and not list(slurm_spool.rglob("*@result"))


@pytest.mark.parametrize("command", [["run"], ["daemon", "--drain-now"]])
def test_controller_down_puts_the_job_back_and_the_driver_waits_for_it(slurm_spool, world_tmp, command):
    conf = world_tmp / "slurm.conf"  # the real config, but pointing at a port nobody listens on
    real = Path("/etc/slurm/slurm.conf").read_text()
    conf.write_text(real + "\nSlurmctldPort=9\nMessageTimeout=2\n")
    submit("unlucky", "echo lucky after all\n")
    env = {**os.environ, "SLURM_CONF": str(conf), "ONITE_SPOOL": str(slurm_spool),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    driver = subprocess.Popen([sys.executable, "-m", "onite", *command], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: any(" executor-unavailable " in line for line in log_lines(slurm_spool)),
                 what="the driver to find the controller unreachable")
        [line] = [line for line in log_lines(slurm_spool) if " executor-unavailable " in line]
        assert "Unable to contact slurm controller (connect failure)" in line and "retry_in=15s" in line
        assert (slurm_spool / "jobs" / "P4" / "root:unlucky").is_file()  # back in its queue, not failed
        assert not (slurm_spool / "jobsdone" / "root:unlucky@result").exists()
        conf.write_text(real)  # the controller answers again; sbatch reads its config at every call
        wait_for(lambda: (slurm_spool / "jobsdone" / "root:unlucky@result").exists(), timeout=90,
                 what="the driver to try again after its pause")
        if command[0] == "run":
            assert finish(driver, 60) == 0
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGTERM)
        finish(driver, 60)
    assert result(slurm_spool, "unlucky")["state"] == "done" and result(slurm_spool, "unlucky")["attempt"] == 1
    assert (slurm_spool / "stdout" / "root:unlucky").read_text() == "lucky after all\n"


@needs_root
@pytest.mark.attack
def test_what_a_users_sbatch_says_of_the_controller_holds_up_no_one_elses_job(slurm_spool, workdir):
    """sbatch runs as the job's owner, and its words decided that the controller was down: nobody's
    `#SBATCH --partition="connection refused"` (sbatch's refusal echoes it), or a traced sbatch
    that prints `Unable to contact slurm controller`, had root's driver put the job back in its queue
    and start no job for anyone for 15 s, again each time it came up, for ever (such a job never
    fails): with max_jobs = 1 daemon's job never ran. The driver now asks Slurm itself; Slurm
    answers and has no job of that run, so the job fails with sbatch's words."""
    tools = workdir / "tools"
    tools.mkdir()
    (tools / "sbatch").write_text('#!/bin/sh\ncase "$*" in *onite:nobody:liar*)\n  echo "sbatch: error: Batch job '
                                  'submission failed: Unable to contact slurm controller (connect failure)" >&2; exit 1\n'
                                  f'esac\nexec {shutil.which("sbatch")} "$@"\n')
    (tools / "sbatch").chmod(0o755)
    configure(slurm_spool, slurm={"max_jobs": 1})
    submit("echoes", '#!/bin/sh\n#SBATCH --partition="connection refused"\ntrue\n', "-p", "1", user="nobody", cwd="/tmp")
    submit("liar", "true\n", "-p", "1", user="nobody", cwd="/tmp")
    submit("vic", "true\n", "-p", "2", user="daemon", cwd="/tmp")
    drain_with_tools(slurm_spool, tools)
    assert not [line for line in log_lines(slurm_spool) if " executor-unavailable " in line]
    echoes, liar = result(slurm_spool, "echoes"), result(slurm_spool, "liar")
    assert echoes["state"] == "failed" and echoes["reason"].startswith(
        "sbatch did not accept it: invalid partition specified: connection refused"), echoes
    assert liar["state"] == "failed" and "Unable to contact slurm controller" in liar["reason"], liar
    assert result(slurm_spool, "vic")["state"] == "done"


class ControllerProxy:
    """A TCP proxy in front of slurmctld (point SLURM_CONF's SlurmctldPort at ``port``) that loses the answer to
    the first request holding ``marker``, after slurmctld has received it: it closes the client's connection
    (``held`` False: the client reads "Zero Bytes were transmitted or received"), or holds it open unanswered
    until the client gives up ("Socket timed out on send/recv operation" after MessageTimeout). Every
    other request passes both ways."""

    def __init__(self, marker: bytes, *, held: bool) -> None:
        import socket
        import threading

        self.marker, self.held, self.lost = marker, held, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", 6817))
            lose = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, lose), daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client, lose), daemon=True).start()

    def _requests(self, client, server, lose) -> None:
        seen = b""
        try:
            while data := client.recv(65536):
                seen += data
                with self._lock:
                    if not lose.is_set() and self.lost == 0 and self.marker in seen:
                        self.lost += 1
                        lose.set()
                server.sendall(data)
        except OSError:
            pass
        server.close()

    def _answers(self, server, client, lose) -> None:
        import socket

        try:
            while data := server.recv(65536):
                if not lose.is_set():
                    client.sendall(data)
                elif not self.held:
                    break
        except OSError:
            pass
        if not (lose.is_set() and self.held):
            client.shutdown(socket.SHUT_RDWR)
            client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()


@pytest.mark.parametrize("held", [False, True], ids=["closed", "held"])
def test_a_submission_whose_answer_is_lost_runs_once_and_is_watched(slurm_spool, world_tmp, workdir, held):
    """sbatch's request reached the controller, which submitted the job, and its answer was lost: the
    connection closed (sbatch says "Zero Bytes were transmitted or received"), or no answer came within
    MessageTimeout ("Socket timed out on send/recv operation"). The first was taken for a controller
    that never had the job: it went back to its queue and was submitted again, and ran twice; the
    second for a refusal: the job was filed as failed (`sbatch did not accept it`) while it ran,
    unwatched. The driver now looks for the run's job in Slurm (by its comment) and watches the one
    it finds."""
    ledger = workdir / "ledger"
    submit("lossy", f"echo $SLURM_JOB_ID >> {ledger}\n", "--retries", "1")
    with ControllerProxy(b"onite:root:lossy", held=held) as proxy:
        conf = world_tmp / "slurm.conf"
        conf.write_text(Path("/etc/slurm/slurm.conf").read_text() + f"\nSlurmctldPort={proxy.port}\nMessageTimeout=2\n")
        driver = start_driver(slurm_spool, env=dict(os.environ, SLURM_CONF=str(conf)))
        try:
            assert finish(driver, 120) == 0
        finally:
            stop(driver)
        assert proxy.lost == 1
    rec = result(slurm_spool, "lossy")
    assert (rec["state"], rec["attempt"]) == ("done", 1), rec
    assert ledger.read_text().split() == [rec["external_id"]]


def test_a_job_slurm_forgot_is_recorded_as_lost(slurm_spool):
    from datetime import datetime

    from onite.spool.settings import load_config
    from onite.exec.runner import Run
    from onite.exec.identity import current
    from onite.core.job import Job
    from onite.exec.slurm import SlurmRunner

    now = datetime.now().astimezone()
    job = Job(name="root:ghost", priority=1, submitted=now, host=HOST, umask=0o22, cwd=b"/", env={}, body=b"")
    runner = SlurmRunner(load_config(slurm_spool / "onite.toml"), switch_user=False)
    run = Run(name="root:ghost", job=job, owner=current(), rank=1, run_id="x", started=now, started_mono=0.0,
              external_id="987654321")
    assert runner.reattach(run) is False
    runner.runs.append(run)
    [(_, outcome)] = runner.reap()
    assert outcome.describe() == "lost: Slurm forgot job 987654321"


@needs_root
@pytest.mark.attack
def test_a_users_slurm_job_name_cannot_forge_what_squeue_says_of_another_users_job(slurm_spool, workdir):
    """nobody renames its own Slurm job to ``onite:att`` + a newline + a line shaped as
    squeue's answer for daemon's running job (``ID|FAILED|256|…``): the driver filed daemon's job as
    failed while it ran, failed what waited for it, and started its retry beside it; a ``²`` for a
    status crashed the driver. squeue is asked for nothing a user can write, and trusts no line that
    does not look as Slurm writes it."""
    configure(slurm_spool, slots=3, retry_delay="1s")
    gate, ledger = workdir / "gate", workdir / "ledger"
    submit("vic", f"echo start >> {ledger}; while [ ! -e {gate} ]; do sleep 0.1; done\n", "--retries", "1",
           user="daemon", cwd="/tmp")
    submit("dep", "true\n", "--after", "vic", user="daemon", cwd="/tmp")
    submit("att", f"while [ ! -e {gate} ]; do sleep 0.1; done\n", user="nobody", cwd="/tmp")
    driver = start_driver(slurm_spool)
    try:
        vic = wait_for(lambda: runinfo(slurm_spool, "daemon:vic").get("external_id"), what="daemon's job in Slurm")
        att = wait_for(lambda: runinfo(slurm_spool, "nobody:att").get("external_id"), what="nobody's job in Slurm")
        wait_for(lambda: slurm_state(vic) == "RUNNING", what="daemon's job to run")
        for forged in (f"onite:nobody:att\n{vic}|FAILED|256|None|2020-01-01T00:00:00|1|",
                       f"onite:nobody:att\n{vic}|RUNNING|\u00b2|None|N/A|1|"):
            renamed = subprocess.run(["runuser", "-u", "nobody", "--", "scontrol", "update", f"jobid={att}",
                                      f"name={forged}"], capture_output=True, text=True, timeout=SQUEUE_TIMEOUT)
            assert renamed.returncode == 0, renamed.stderr
            for _ in range(8):  # a few of the driver's polls (0.25 s apart)
                assert driver.poll() is None, driver.communicate()
                assert slurm_state(vic) == "RUNNING"
                subprocess.run(["sleep", "0.25"])
        gate.touch()
        assert finish(driver, timeout=120) == 0
    finally:
        gate.touch()
        stop(driver)
    assert (result(slurm_spool, "vic")["state"], result(slurm_spool, "vic")["attempt"]) == ("done", 1)
    assert result(slurm_spool, "dep")["state"] == "done"
    assert ledger.read_text().count("start") == 1


@pytest.mark.attack
def test_an_sbatch_that_names_a_job_that_is_not_the_owners_starts_nothing_watched(slurm_spool, workdir):
    """Sbatch runs as the job's owner, who may trace it and have it print another
    job id (``0``): the driver took it, squeue then refused the whole list of ids for that one, and
    every job in flight was filed as lost while it ran. An id sbatch gives must be a job Slurm knows
    as the owner's; else the run fails, and what sbatch did submit is cancelled: that run's job only, not the
    owner's job of the same name from another spool."""
    tools = workdir / "tools"
    tools.mkdir()
    (tools / "sbatch").write_text(f"#!/bin/sh\n{shutil.which('sbatch')} \"$@\" && echo 0\n")
    (tools / "sbatch").chmod(0o755)
    submit("forged", "sleep 30\n")
    other = subprocess.run(["sbatch", "--parsable", "--job-name=onite:root:forged", "--comment=another spool's",
                            f"--output={workdir}/other.out", "--wrap", "sleep 300"],
                           capture_output=True, text=True, check=True, timeout=SQUEUE_TIMEOUT).stdout.strip()
    try:
        env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}")
        driver = start_driver(slurm_spool, env=env)
        assert finish(driver, timeout=120) == 0
        got = result(slurm_spool, "forged")
        assert got["state"] == "failed" and "sbatch said it submitted job 0, which Slurm does not know" in got["reason"]

        def left() -> list[str]:
            return subprocess.run(["squeue", "-h", "-n", "onite:root:forged", "-o", "%i"], capture_output=True, text=True,
                                  timeout=SQUEUE_TIMEOUT).stdout.split()

        wait_for(lambda: left() == [other], what="its real Slurm job to be cancelled, and only it")
    finally:
        subprocess.run(["scancel", "--quiet", other], capture_output=True, timeout=SQUEUE_TIMEOUT)


@pytest.mark.skipif(shutil.which("strace") is None and os.environ.get("ONITE_STRACE_TESTS") != "required",
                    reason="needs strace (Debian: strace) to kill the driver as it removes a claim")
def test_a_slurm_claim_whose_retry_was_spooled_is_dropped_not_filed_again(slurm_spool, workdir):
    """A driver killed between spooling a failed Slurm job's retry and removing its
    claim: the next one re-attached the claim, filed the first attempt as a final failure (and told
    its owner), logged the retry as skipped, then ran the retry. The stale claim is dropped, as a
    local one is."""
    configure(slurm_spool, retry_delay="1s")
    ledger, mark = workdir / "ledger", workdir / "mark"
    submit("rj", f"echo run >> {ledger}; if [ -e {mark} ]; then exit 0; fi; touch {mark}; exit 3\n", "--retries", "1")
    claim = slurm_spool / "running" / HOST / "root:rj"
    env = dict(os.environ, ONITE_SPOOL=str(slurm_spool), PYTHONPATH=str(REPO))
    subprocess.run([shutil.which("strace"), "-f", "-qq", "-o", "/dev/null", "-P", str(claim), "-e", "trace=unlink,unlinkat",
                    "-e", "inject=unlink,unlinkat:signal=KILL", sys.executable, "-m", "onite", "run", "-q"],
                   env=env, capture_output=True, timeout=120)
    assert claim.exists() and list(slurm_spool.glob("jobs/P*/root:rj")), "the crash left no claim and retry"
    assert drain(slurm_spool).returncode == 0
    lines = [line for line in log_lines(slurm_spool) if " root:rj " in line]
    assert not [line for line in lines if " retry-skipped " in line or " failed " in line], lines
    assert [line for line in lines if "dropped: its retry was already spooled" in line], lines
    assert (result(slurm_spool, "rj")["state"], result(slurm_spool, "rj")["attempt"]) == ("done", 2)
    assert ledger.read_text().count("run") == 2


@needs_root
@pytest.mark.attack
def test_a_user_who_stops_their_own_sbatch_holds_up_no_one_elses_job(slurm_spool, workdir):
    """Sbatch runs as the job's owner, who may stop it (SIGSTOP, found in /proc). It runs beside the
    driver's loop, never waited for by it: the loop goes on polling, enforcing time limits and starting
    other users' jobs. Here nobody's sbatch stops itself as it starts (a wrapper first in the driver's
    PATH stands for the user's kill -STOP, which races it): daemon's ``--timeout 5s`` job is timed out
    at its time, and nobody's fails once its sbatch is past 60 s."""
    tools = workdir / "tools"
    tools.mkdir()
    (tools / "sbatch").write_text(f'#!/bin/sh\n[ "$(id -u)" = {pwd.getpwnam("nobody").pw_uid} ] && kill -STOP $$\n'
                                  f'exec {shutil.which("sbatch")} "$@"\n')
    (tools / "sbatch").chmod(0o755)
    configure(slurm_spool, slots=3)
    submit("vic", "sleep 30\n", "--timeout", "5s", "-p", "1", user="daemon", cwd="/tmp")
    submit("att", "true\n", "-p", "2", user="nobody", cwd="/tmp")
    drain_with_tools(slurm_spool, tools, timeout=180)
    vic, att = result(slurm_spool, "vic"), result(slurm_spool, "att")
    assert (vic["state"], vic["reason"]) == ("failed", "timeout"), vic
    assert att["state"] == "failed" and "sbatch did not return within 60 s" in att["reason"], att


def test_an_sbatch_that_writes_without_end_fills_no_memory(slurm_spool, workdir):
    """Sbatch's output goes to files in memory, and a user tracing their own sbatch may
    have it write without end: it may write 4 MiB to a file, then it is stopped (SIGXFSZ) and the
    job fails; the driver and the other jobs go on (the limit is not passed on to the jobs)."""
    tools = workdir / "tools"
    tools.mkdir()
    (tools / "sbatch").write_text(f'#!/bin/sh\nif [ "$(id -u)" = {pwd.getpwnam("nobody").pw_uid} ]; then\n'
                                  '  head -c 100000000 /dev/zero || echo "stopped at the limit" >&2; exit 1\nfi\n'
                                  f'exec {shutil.which("sbatch")} "$@"\n')
    (tools / "sbatch").chmod(0o755)
    submit("flood", "true\n", user="nobody", cwd="/tmp")
    submit("fine", "head -c 10000000 /dev/zero\n", user="daemon", cwd="/tmp")  # the limit is sbatch's, not the job's
    drain_with_tools(slurm_spool, tools)
    flood = result(slurm_spool, "flood")
    assert flood["state"] == "failed" and "stopped at the limit" in flood["reason"], flood["reason"]
    assert result(slurm_spool, "fine")["state"] == "done"
    assert (slurm_spool / "stdout" / "daemon:fine").stat().st_size == 10_000_000
