"""Several drivers (hosts) drain one spool: exactly-once claims, fair shares, pins, per-host recovery.

Three drivers with different --host names on one machine stand in for three
machines sharing a spool: each has its own lock and its own running/HOST/.
"""

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from conftest import kill_run, REPO, log_lines, result, run_cli, start_driver, wait_for

HOSTS = ["alpha", "beta", "gamma"]
GONE_ALPHA = ("its host alpha has no live driver: the next driver there, or onite recover --host alpha if alpha is "
              "gone for good, recovers it")

BULK = """
import os, sys
from onite.__main__ import main
ran, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(first, first + count):
    r, w = os.pipe()
    # each job appends its own name to a file named after itself: exactly-once is checked from these
    os.write(w, f"echo $$ >> {ran}/j{i:03d}; sleep 0.05\\n".encode())
    os.close(w)
    os.dup2(r, 0)
    os.close(r)
    if main(["submit", f"j{i:03d}"]) != 0:
        sys.exit(1)
"""


def spool_jobs(ran, count):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    per = count // 4
    procs = [subprocess.Popen([sys.executable, "-c", BULK, str(ran), str(k * per), str(per)], env=env)
             for k in range(4)]
    assert [p.wait(120) for p in procs] == [0] * 4


@pytest.mark.slow
def test_three_hosts_share_240_jobs_exactly_once(spool, workdir, cli):
    ran = workdir / "ran"
    ran.mkdir()
    spool_jobs(ran, 240)
    drivers = [start_driver(spool, "--host", host) for host in HOSTS]
    assert [d.wait(180) for d in drivers] == [0, 0, 0]
    # what the jobs themselves wrote: every job ran, and ran once
    runs = {path.name: len(path.read_text().split()) for path in ran.iterdir()}
    assert len(runs) == 240 and set(runs.values()) == {1}
    # onite's own view: the hosts in the log's finish lines, one per job
    done = [line.split()[1].split("[")[0] for line in log_lines(spool) if " done root:j" in line]
    assert len(done) == 240
    hosts_in_log = Counter(line.split()[1].split("[")[0] for line in log_lines(spool) if " done root:j" in line)
    assert set(hosts_in_log) == set(HOSTS)
    for host, jobs in hosts_in_log.items():
        assert 0.15 <= jobs / 240 <= 0.55, hosts_in_log  # nobody starves
    report = cli(["report", "--json"]).json()  # the report shows each host's share (of the kept results)
    assert set(report["hosts"]) <= set(HOSTS) and abs(sum(h["share"] for h in report["hosts"].values()) - 1) < 1e-9


def test_a_pinned_job_waits_for_its_host(spool, workdir, cli):
    r = cli(["submit", "pinned", "--host", "beta"], stdin=f"echo pinned > {workdir}/pinned\n".encode())
    assert r.code == 0
    cli(["submit", "free"], stdin=b"true\n")
    for host in ("alpha", "gamma"):
        proc = start_driver(spool, "--host", host)
        assert proc.wait(60) == 0
    assert (spool / "jobs" / "P4" / "root:pinned").exists() and not (workdir / "pinned").exists()
    assert result(spool, "free")["host"] in ("alpha", "gamma")
    assert start_driver(spool, "--host", "beta").wait(60) == 0
    assert result(spool, "pinned")["host"] == "beta" and (workdir / "pinned").read_text() == "pinned\n"


def test_killed_host_recovers_only_its_own_claim(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    for name in ("a-long", "b-long"):
        run_cli(["submit", name], stdin=f"echo {name} >> {workdir}/starts; while [ -e {gate} ]; do sleep 0.05; done\n"
                .encode())
    alpha = start_driver(spool, "--host", "alpha")
    wait_for(lambda: len(list((spool / "running" / "alpha").glob("*-long"))) == 1, what="alpha's claim")
    beta = start_driver(spool, "--host", "beta")
    wait_for(lambda: len(list((spool / "running" / "beta").glob("*-long"))) == 1, what="beta's claim")
    alphas = [p.name for p in (spool / "running" / "alpha").glob("*-long")]
    os.kill(alpha.pid, signal.SIGKILL)
    alpha.wait()
    gate.unlink()
    assert beta.wait(60) == 0
    # beta finished its own job and left alpha's claim alone
    assert [p.name for p in (spool / "running" / "alpha").glob("*-long")] == alphas
    gate.touch()
    gate.unlink()
    assert start_driver(spool, "--host", "alpha").wait(60) == 0
    assert result(spool, alphas[0])["host"] == "alpha" and result(spool, alphas[0])["state"] == "done"
    assert any(" recovered " + alphas[0] in line and line.split()[1].startswith("alpha[") for line in log_lines(spool))


def test_recover_a_host_that_never_comes_back(spool, workdir, cli):
    """A host gone for good is recovered from another; then status no longer warns that the host's driver died
    (it did, for ever: the admin had done what it asked)."""
    pidfile = workdir / "pid"
    cli(["submit", "stranded"], stdin=f"echo $$ > {pidfile}; sleep 120\n".encode())
    dead = start_driver(spool, "--host", "deadhost")
    wait_for(pidfile.exists, what="the job to start")
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    assert "the driver of host deadhost (pid" in cli(["status"]).out
    kill_run(spool / "running" / "deadhost" / "root:stranded@run")  # the machine "died" with its processes
    r = cli(["recover", "--host", "deadhost"], stdin=b"")
    assert r.code == 2 and "--force" in r.err
    r = cli(["recover", "--host", "deadhost", "--force"])
    assert r.code == 0 and "recovered 1 job(s) of host deadhost: stranded" in r.out, r
    assert (spool / "jobs" / "P4" / "root:stranded").exists()
    assert cli(["recover", "--host", "deadhost", "--force"]).out.startswith("host deadhost has no claimed jobs")
    said = cli(["status"]).out
    assert "the driver of host deadhost (pid" not in said and "died" not in said, said


def test_recover_refuses_while_that_hosts_driver_lives(spool, workdir, cli):
    gate = workdir / "gate"
    gate.touch()
    cli(["submit", "busy"], stdin=f"while [ -e {gate} ]; do sleep 0.05; done\n".encode())
    live = start_driver(spool, "--host", "livehost")
    wait_for(lambda: (spool / "running" / "livehost" / "root:busy").exists(), what="the claim")
    r = cli(["recover", "--host", "livehost", "--force"])
    assert r.code == 3 and "is running" in r.err
    gate.unlink()
    assert live.wait(60) == 0


@pytest.mark.parametrize("alpha_dies", [False, True])
@pytest.mark.attack
def test_a_copy_of_a_job_running_on_another_host_waits_for_that_run(spool, workdir, alpha_dies):
    """nobody copies its own job, claimed and running on alpha, back into a queue (no submit refuses it there):
    beta's driver started the copy while alpha's run went on, two runs of one key at once, and root's cancel
    reached alpha's only. A key claimed on another host waits while that claim's run record says its run has
    not ended, whether alpha's driver lives or was killed (its monitor runs on); a claim whose run ended holds
    nothing back (the retry a dying driver spooled runs)."""
    from conftest import as_user

    go = workdir / "go"
    body = f"touch {workdir}/started.$$; while [ ! -e {go} ]; do sleep 0.05; done\n"
    assert run_cli(["submit", "dup"], stdin=body.encode(), user="nobody", cwd="/tmp").code == 0
    alpha = start_driver(spool, "--host", "alpha")
    beta = None
    try:
        wait_for(lambda: list(workdir.glob("started.*")), what="alpha's run")
        claimed = spool / "running" / "alpha" / "nobody:dup"

        def copy_back():
            data = claimed.read_bytes()
            tmp = spool / "jobs" / "P4" / ".copy"
            tmp.write_bytes(data)
            os.chmod(tmp, 0o600)
            os.rename(tmp, spool / "jobs" / "P4" / "nobody:dup")

        assert as_user(copy_back) == ("ok", None)
        if alpha_dies:
            alpha.kill()
            alpha.wait(30)
        beta = start_driver(spool, "--host", "beta")
        wait_for(lambda: beta.poll() is not None, what="beta to leave the copy queued and end")
        assert beta.returncode == 0
        assert len(list(workdir.glob("started.*"))) == 1  # one run at a time
    finally:
        go.touch()
        if not alpha_dies:
            assert alpha.wait(60) == 0
        if beta is not None and beta.poll() is None:
            beta.kill()
    # beta left the copy (alpha may run it once its first run has ended, as a copy made on one host waits there)
    assert {line.split()[1].split("[")[0] for line in log_lines(spool) if " start nobody:dup " in line} == {"alpha"}


def test_a_copy_of_a_job_whose_run_on_another_host_ended_runs(spool, workdir):
    """alpha's driver dies while its monitor runs nobody's job on; the job ends, and its monitor records that in
    the run record, but alpha's claim stays until alpha's next driver files it. A copy of the job queued meanwhile
    (as the retry a dying driver spooled) is not held back by that claim: beta runs it, and leaves alpha's claim
    to alpha's recovery."""
    from conftest import as_user

    go = workdir / "go"
    body = f"touch {workdir}/started.$$; while [ ! -e {go} ]; do sleep 0.05; done\n"
    assert run_cli(["submit", "again"], stdin=body.encode(), user="nobody", cwd="/tmp").code == 0
    alpha = start_driver(spool, "--host", "alpha")
    # its start line too: the driver logs a start once the monitor says the job began, after the job's first step
    logged = lambda: any(" start nobody:again " in line for line in log_lines(spool))  # noqa: E731
    wait_for(lambda: list(workdir.glob("started.*")) and logged(), what="alpha's run, logged")
    claimed = spool / "running" / "alpha" / "nobody:again"
    record = spool / "running" / "alpha" / "nobody:again@run"
    alpha.kill()
    alpha.wait(30)
    go.touch()  # the job ends under its monitor, which records it
    wait_for(lambda: b'"event":"ended"' in record.read_bytes(), what="the monitor's record of the end")
    assert claimed.exists()

    def copy_back():
        tmp = spool / "jobs" / "P4" / ".copy"
        tmp.write_bytes(claimed.read_bytes())
        os.chmod(tmp, 0o600)
        os.rename(tmp, spool / "jobs" / "P4" / "nobody:again")

    assert as_user(copy_back) == ("ok", None)
    assert start_driver(spool, "--host", "beta").wait(60) == 0
    starts = [line.split()[1].split("[")[0] for line in log_lines(spool) if " start nobody:again " in line]
    assert starts == ["alpha", "beta"] and len(list(workdir.glob("started.*"))) == 2
    assert claimed.exists() and record.exists()  # alpha's to file
    assert start_driver(spool, "--host", "alpha").wait(60) == 0
    assert not claimed.exists() and not record.exists()


def _alpha_killed_mid_job(spool, workdir, cli, name: str):
    """Spool ``name`` (it writes its pid to workdir/starts, then runs until the gate goes), let alpha's driver start
    it, and kill that driver -9 (its monitor lives on); the gate."""
    gate = workdir / "gate"
    gate.touch()
    cli(["submit", name], stdin=f"echo $$ >> {workdir}/starts; while [ -e {gate} ]; do sleep 0.05; done\n".encode())
    alpha = start_driver(spool, "--host", "alpha")
    wait_for(lambda: (workdir / "starts").exists(), what="the job to start")
    os.kill(alpha.pid, signal.SIGKILL)
    alpha.wait()
    return gate


def test_recover_leaves_a_job_whose_monitor_still_runs_here_and_says_so(spool, workdir, cli):
    """alpha's driver is killed -9 but its machine (this one) lives: the job runs on under its monitor. onite recover
    --host alpha cannot wait for it, so it must not claim to have recovered it: it leaves the claim to alpha's next
    driver (which adopts it) and says so."""
    gate = _alpha_killed_mid_job(spool, workdir, cli, "lives")
    r = cli(["recover", "--host", "alpha", "--force"])
    assert r.code == 0 and "recovered 1 job(s)" not in r.out, r
    assert "lives" in r.out and "still running" in r.out and "onite run --host alpha" in r.out, r
    assert (spool / "running" / "alpha" / "root:lives").exists()
    gate.unlink()
    assert start_driver(spool, "--host", "alpha").wait(60) == 0
    assert result(spool, "lives")["state"] == "done" and len((workdir / "starts").read_text().split()) == 1


def test_a_small_host_leaves_a_job_that_fits_another_host_queued(spool, workdir, cli):
    """alpha is small ([hosts.alpha] mem = "1G"), beta big (4G): submit takes --mem 2G, for beta can run it. alpha's
    driver must leave it queued for beta, not fail it as a job that 'can never run'."""
    with open(spool / "onite.toml", "a") as handle:
        handle.write('\n[hosts.alpha]\nmem = "1G"\ncpus = 1\n\n[hosts.beta]\nmem = "4G"\ncpus = 2\n')
    assert cli(["submit", "big", "--mem", "2G"], stdin=f"echo big > {workdir}/big\n".encode()).code == 0
    assert cli(["submit", "small", "--mem", "500M"], stdin=b"true\n").code == 0
    with open(spool / "onite.toml", "a") as handle:  # this machine's own host is small too: list judges by it
        handle.write(f'\n[hosts.{os.uname().nodename.split(".")[0]}]\nmem = "1G"\n')
    listed = cli(["list"]).out
    assert "will fail" not in listed and "waits for another host" in listed, listed
    assert start_driver(spool, "--host", "alpha").wait(60) == 0
    assert result(spool, "small")["host"] == "alpha"
    assert (spool / "jobs" / "P4" / "root:big").exists(), [line for line in log_lines(spool) if " big" in line]
    assert start_driver(spool, "--host", "beta").wait(60) == 0
    assert result(spool, "big")["host"] == "beta" and result(spool, "big")["state"] == "done"
    assert (workdir / "big").read_text() == "big\n"


def test_a_job_too_big_for_this_host_is_taken_for_a_host_known_by_its_heartbeat(spool, workdir, cli):
    """Submit judged a job by the hosts onite.toml names, while the driver and list also count a host whose driver
    has drained the spool from another machine: a --mem 2G job was refused here, though the big host runs it. One
    rule now (onite.core.resources.never_fits over the spool's hosts): submit takes it, this host's driver leaves
    it queued, and list says it waits for another host."""
    import json
    from datetime import datetime

    from onite.drain import heartbeat as hb
    from onite.spool.paths import SpoolDir

    here = os.uname().nodename.split(".")[0]
    with open(spool / "onite.toml", "a") as handle:
        handle.write(f'\n[hosts.{here}]\nmem = "1G"\ncpus = 1\n')
    assert "can never run" in cli(["submit", "big", "--mem", "2G"], stdin=b"true\n").err
    now = datetime.now().astimezone()
    beat = hb.Beat(host="far", pid=1, start_ticks=None, boot_id="other", machine="far.example", role=hb.Role.RUN,
                   started_by="cron", since=now, state=hb.BeatState.EXITED, updated=now, ended=now)
    SpoolDir(spool).state_path(hb.HEARTBEAT, "far").write_text(json.dumps(beat.to_json()))
    assert cli(["submit", "big", "--mem", "2G"], stdin=b"true\n").code == 0
    assert "can never run" in cli(["submit", "pinned", "--mem", "2G", "--host", here], stdin=b"true\n").err
    assert "waits for another host" in cli(["list"]).out
    assert start_driver(spool).wait(60) == 0
    assert (spool / "jobs" / "P4" / "root:big").exists(), [line for line in log_lines(spool) if " big" in line]


def test_a_host_whose_heartbeat_is_weeks_old_runs_no_job_unless_onite_toml_names_it(spool, workdir, cli):
    """A machine that drained the spool once and was retired left its heartbeat, which counted for ever as a host of
    unknown size: a --mem 2G job too big for this host was taken at submit, list said it waited for another host, and
    it waited for ever. A heartbeat not updated for RETIRED_AFTER is no host now, by the one rule (spool_hosts):
    submit refuses, list says the queued job will fail, the driver fails it; [hosts.far] in onite.toml still counts."""
    import json
    from datetime import datetime, timedelta

    from onite.drain import heartbeat as hb
    from onite.spool.paths import SpoolDir

    here = os.uname().nodename.split(".")[0]
    with open(spool / "onite.toml", "a") as handle:
        handle.write(f'\n[hosts.{here}]\nmem = "1G"\ncpus = 1\n')
    path = SpoolDir(spool).state_path(hb.HEARTBEAT, "far")

    def far_beat(age: timedelta) -> None:
        then = datetime.now().astimezone() - age
        path.write_text(json.dumps(hb.Beat(host="far", pid=1, start_ticks=None, boot_id="other", machine="far.example",
                                           role=hb.Role.RUN, started_by="cron", since=then, state=hb.BeatState.EXITED,
                                           updated=then, ended=then).to_json()))

    far_beat(timedelta(days=1))
    assert cli(["submit", "big", "--mem", "2G"], stdin=b"true\n").code == 0  # far drained yesterday: it may run it
    far_beat(timedelta(days=30))
    assert "far" not in hb.spool_hosts(SpoolDir(spool), datetime.now().astimezone())
    r = cli(["submit", "bigger", "--mem", "2G"], stdin=b"true\n")
    assert r.code == 3 and "can never run" in r.err, r
    listed = cli(["list"]).out
    assert "will fail" in listed and "waits for another host" not in listed, listed
    assert start_driver(spool).wait(60) == 0
    assert result(spool, "big")["state"] == "failed" and "2G memory" in result(spool, "big")["reason"]
    with open(spool / "onite.toml", "a") as handle:  # the admin's word outranks a stale file
        handle.write("\n[hosts.far]\nslots = 1\n")
    assert cli(["submit", "bigger", "--mem", "2G"], stdin=b"true\n").code == 0
    assert "waits for another host" in cli(["list"]).out


def test_wait_says_when_the_job_it_waits_for_runs_on_a_host_whose_driver_died(spool, workdir, cli):
    """alpha's driver is killed -9 mid-job: nothing files the job until a driver starts on alpha. onite wait said
    only 'waiting for stuck (running)…' and blocked; it says why it may wait for ever, and what starts it. Once the
    job has ended there, wait says so at once: not filed yet, until a driver starts on alpha."""
    gate = _alpha_killed_mid_job(spool, workdir, cli, "stuck")
    r = cli(["wait", "stuck", "--timeout", "1"])
    assert r.code == 6 and f"stuck is running, but {GONE_ALPHA}" in r.err, r
    gate.unlink()
    wait_for(lambda: '"ended"' in (spool / "running" / "alpha" / "root:stuck@run").read_text(), what="the job's end")
    r = cli(["wait", "stuck"])
    assert r.code == 0 and f"not filed yet, as {GONE_ALPHA}" in r.out, r
    assert start_driver(spool, "--host", "alpha").wait(60) == 0
    assert cli(["wait", "stuck"]).code == 0 and (spool / "jobsdone" / "root:stuck@result").exists()


COUNT_BEATS = """
import atexit, os
import onite.drain.heartbeat as hb
_calls, _beats = [0], hb.beats
def beats(spool):
    _calls[0] += 1
    return _beats(spool)
hb.beats = beats
atexit.register(lambda: open(os.environ["BEATS_COUNT"], "a").write(f"{_calls[0]}\\n"))
"""


@pytest.mark.attack
def test_a_flood_of_jobs_too_big_for_this_host_each_of_its_own_size_costs_one_look_at_the_heartbeats(
        spool, workdir, cli):
    """nobody spools 40 jobs too big for alpha (1G) that beta (64G) fits, each asking for its own size: alpha's
    driver leaves them queued, and must read the spool's heartbeats once per pick, not once per size at every
    pick (40 reads of every driver.HOST.state before each of root's jobs starts)."""
    with open(spool / "onite.toml", "a") as handle:
        handle.write('\n[hosts.alpha]\nmem = "1G"\ncpus = 1\n\n[hosts.beta]\nmem = "64G"\ncpus = 2\n')
    flood = 40
    for i in range(flood):
        assert cli(["submit", f"big{i}", "--mem", f"{2000 + i}M"], stdin=b"true\n", user="nobody",
                   cwd="/tmp").code == 0
    for i in range(3):
        assert cli(["submit", f"small{i}", "--mem", "10M"], stdin=b"true\n").code == 0
    shim, count = workdir / "count-beats", workdir / "beats-count"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(COUNT_BEATS)
    driver = start_driver(spool, "--host", "alpha",
                          env=dict(os.environ, PYTHONPATH=str(shim), BEATS_COUNT=str(count)))
    assert driver.wait(120) == 0, driver.stderr.read()
    assert all(result(spool, f"small{i}")["state"] == "done" for i in range(3))
    assert len(list((spool / "jobs").glob("*/nobody:big*"))) == flood  # left queued for beta, none failed
    reads = sum(int(line) for line in count.read_text().split())
    assert 0 < reads < flood, f"{reads} reads of the heartbeats for {flood} sizes"


def test_submit_pinned_to_a_host_without_drains_says_so_of_that_host(spool, cli):
    """alpha's daemon (on another machine) drains the spool; gamma has none and beta never drained it. A job
    pinned to gamma was told 'no drain is scheduled, so nothing will run it — onite cron --install': false of the
    spool (alpha's daemon drains it), and the fix scheduled this machine, whose drains skip a job pinned to gamma."""
    import json
    from datetime import datetime, timedelta

    from onite.drain import heartbeat as hb
    from onite.spool.paths import SpoolDir

    now = datetime.now().astimezone()
    beat = hb.Beat(host="alpha", pid=1, start_ticks=None, boot_id="other", machine="alpha.example",
                   role=hb.Role.DAEMON, started_by="systemd", since=now, state=hb.BeatState.IDLE, updated=now,
                   next_drain=now + timedelta(hours=1), next_by="daemon")
    SpoolDir(spool).state_path(hb.HEARTBEAT, "alpha").write_text(json.dumps(beat.to_json()))
    with open(spool / "onite.toml", "a") as handle:
        handle.write("\n[hosts.gamma]\nslots = 1\n")
    assert "by the daemon on host alpha" in cli(["submit", "free"], stdin=b"true\n").err
    said = cli(["submit", "pinned", "--host", "gamma"], stdin=b"true\n").err
    assert "only on host gamma; no drain is scheduled on host gamma, so nothing will run it" in said, said
    assert "onite cron --install on host gamma" in said, said
    said = cli(["submit", "typo", "--host", "gama"], stdin=b"true\n").err
    assert "(none of the spool's hosts " in said and "is gama: is it right?)" in said, said


def test_list_says_a_job_pinned_to_no_host_of_the_spool_waits_for_a_driver_none_runs(spool, cli):
    """A job pinned to a misspelt host (or one renamed, or gone for 8 days) waited for ever, list and status saying
    only 'pinned to host gama', as of a job whose host drains tonight."""
    with open(spool / "onite.toml", "a") as handle:
        handle.write("\n[hosts.gamma]\nslots = 1\n")
    assert cli(["submit", "typo", "--host", "gama"], stdin=b"true\n").code == 0
    assert cli(["submit", "fine", "--host", "gamma"], stdin=b"true\n").code == 0
    listed = cli(["list", "--plain"]).out
    assert "pinned to host gama, which no driver drains (none has in 8 days)" in listed, listed
    assert "pinned to host gamma\n" in listed or "pinned to host gamma " in listed, listed
    assert "pinned to host gama, which no driver drains" in cli(["status"]).out


def small_daemon_and_big_host(spool) -> None:
    """Hosts alpha (1G, 1 CPU), whose daemon's heartbeat says it drains within the hour, and beta (4G, 2 CPUs), with
    nothing scheduled."""
    import json
    from datetime import datetime, timedelta

    from onite.drain import heartbeat as hb
    from onite.spool.paths import SpoolDir

    with open(spool / "onite.toml", "a") as handle:
        handle.write('\n[hosts.alpha]\nmem = "1G"\ncpus = 1\n\n[hosts.beta]\nmem = "4G"\ncpus = 2\n')
    now = datetime.now().astimezone()
    beat = hb.Beat(host="alpha", pid=1, start_ticks=None, boot_id="other", machine="alpha.example",
                   role=hb.Role.DAEMON, started_by="systemd", since=now, state=hb.BeatState.IDLE, updated=now,
                   next_drain=now + timedelta(hours=1), next_by="daemon")
    SpoolDir(spool).state_path(hb.HEARTBEAT, "alpha").write_text(json.dumps(beat.to_json()))


def test_submit_promises_no_drain_on_a_host_too_small_for_the_job(spool, cli):
    """alpha (1G) has a daemon, beta (4G) nothing scheduled. A --mem 2G job was told 'next drain … by the daemon on
    host alpha', whose drains leave it queued for another host: it would wait for ever under that promise."""
    small_daemon_and_big_host(spool)
    assert "by the daemon on host alpha" in cli(["submit", "small", "--mem", "512M"], stdin=b"true\n").err
    said = cli(["submit", "big", "--mem", "2G", "--cpus", "1"], stdin=b"true\n").err
    assert "host alpha" not in said and "no drain is scheduled on a host that can give it what it asks for" in said, said


def test_a_drain_logs_a_job_too_big_for_its_host_as_waiting_for_another_host(spool, cli):
    """alpha (1G) drains while a --mem 2G job waits for beta (4G): its nothing-due line said the job 'waits for room
    (memory or CPUs)', as if alpha would start it once its jobs ended."""
    with open(spool / "onite.toml", "a") as handle:
        handle.write('\n[hosts.alpha]\nmem = "1G"\ncpus = 1\n\n[hosts.beta]\nmem = "4G"\ncpus = 2\n')
    assert cli(["submit", "big", "--mem", "2G"], stdin=b"true\n").code == 0
    assert start_driver(spool, "--host", "alpha").wait(60) == 0
    idle = [line for line in log_lines(spool) if " nothing-due " in line]
    assert len(idle) == 1 and "root:big: waits for another host)" in idle[0], idle


def test_wait_says_when_no_scheduled_drain_may_run_the_job(spool, cli):
    """alpha's daemon (1G) drains the spool. onite wait for a job pinned to gamma, or asking 2G, said only
    'waiting for it (queued)…' and waited for ever, as if alpha's drain would start it."""
    small_daemon_and_big_host(spool)
    for name, options in (("pinned", ["--host", "gamma"]), ("big", ["--mem", "2G"]), ("small", [])):
        assert cli(["submit", name, *options], stdin=b"true\n").code == 0
    said = cli(["wait", "pinned", "big", "small", "--timeout", "1"]).err
    assert "no drain is scheduled on a host that may run pinned (only host gamma)" in said, said
    assert "no drain is scheduled on a host that may run big (one that can give what it asks for)" in said, said
    assert "may run small" not in said, said


def test_recover_of_a_dead_daemons_host_without_claims_ends_the_warning(spool, cli):
    """gone's daemon (another machine) died idle, with no job claimed. status said to start it again; recover --host
    gone said 'no claimed jobs' and left status saying so for ever."""
    import json
    from datetime import datetime, timedelta

    from onite.drain import heartbeat as hb
    from onite.spool.paths import SpoolDir

    then = datetime.now().astimezone() - timedelta(minutes=10)
    beat = hb.Beat(host="gone", pid=1, start_ticks=None, boot_id="other", machine="gone.example",
                   role=hb.Role.DAEMON, started_by="systemd", since=then, state=hb.BeatState.IDLE, updated=then)
    SpoolDir(spool).state_path(hb.HEARTBEAT, "gone").write_text(json.dumps(beat.to_json()))
    assert "the daemon on host gone died" in cli(["status"]).out
    r = cli(["recover", "--host", "gone", "--force"])
    assert r.code == 0 and r.out.startswith("host gone has no claimed jobs"), r
    said = cli(["status"]).out
    assert "died" not in said, said
