"""Admission (follow-ups to requests): one rule for the driver and for what `list` says, requests held from
admission to the end, defaults applied at submit, a reserve larger than the machine refused.

Real drivers, real processes, real files; a job that runs is gated on a file the test removes, and overlap
is seen through files the jobs write. No timing is asserted.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import drain, log_lines, result, run_cli, set_config, start_driver, wait_for
from onite.core.config import parse_config
from onite.core.errors import ConfigError, InvalidInput
from onite.core.jobfile import decode, encode
from onite.core.admission import Admit, Busy, admit, room
from onite.core.resources import MAX_CPUS, Need, host_capacity, never_fits, parse_cpus
from onite.core.runrecord import admitted_need, parse

HOST = os.uname().nodename.split(".")[0]
NOW = datetime(2026, 11, 24, 20, 0, tzinfo=timezone.utc)
CAP = Need(mem=1024, cpus=4, slots=4)
TOML = "/srv/onite/onite.toml"  # the file a config was read from, which capacity errors name


# ---- the rule, pure ---------------------------------------------------------------------------


def _pass(jobs, running=(), *, backfill=False):
    """One pass in queue order, as the driver and `list` make it: (name, verdict, reason) of each job."""
    where, head, said = room("vm", CAP, running), None, []
    for name, need, ends in jobs:
        got = admit(name, need, ends, where, head, backfill=backfill)
        head = got.head
        said.append((name, got.verdict, got.reason))
    return said


def test_a_request_larger_than_the_host_never_runs_and_waits_for_nothing():
    [(_, verdict, reason)] = _pass([("big", Need(2048, 1), None)])
    assert verdict is Admit.NEVER and reason == "it asks for 2G memory, but the host has 1G: it can never run on host vm"


def test_strict_order_the_first_job_that_does_not_fit_holds_up_the_rest():
    running = [Busy(Need(768, 1), NOW + timedelta(hours=1))]
    said = _pass([("h", Need(512, 1), None), ("s", Need(0, 0), None), ("t", Need(128, 1), NOW)], running)
    assert said == [("h", Admit.WAIT, "waits for 512M memory (256M free)"), ("s", Admit.BEHIND, "waits behind h"),
                    ("t", Admit.BEHIND, "waits behind h")]


def test_backfill_says_why_a_job_that_fits_now_is_held():
    running = [Busy(Need(512, 1), NOW + timedelta(hours=1))]
    said = _pass([("h", Need(768, 1), None), ("nolimit", Need(384, 1), None),
                  ("short", Need(256, 1), NOW + timedelta(minutes=10)), ("huge", Need(640, 1), NOW)],
                 running, backfill=True)
    assert said == [("h", Admit.WAIT, "waits for 768M memory (512M free)"),
                    ("nolimit", Admit.WAIT, "waits behind h: it could delay h's start"),
                    ("short", Admit.BACKFILL, ""),
                    ("huge", Admit.WAIT, "waits for 640M memory (512M free)")]


# ---- capacity: a reserve larger than the machine -----------------------------------------------


def test_a_reserve_that_leaves_nothing_is_a_config_error_on_this_machine_only():
    config = parse_config('reserve_mem = "32G"\nreserve_cpus = 2\n')
    with pytest.raises(ConfigError) as err:
        host_capacity(config, "vm", (16384, 8), source=TOML)
    assert err.value.exit_code == 2 and str(err.value).startswith(f"{TOML}: reserve_mem = 32G leaves no memory for jobs on host vm")
    assert "whose machine has 16G" in str(err.value) and "[hosts.vm]" in str(err.value)
    with pytest.raises(ConfigError, match="reserve_cpus = 2 leaves no CPU for jobs on host vm, whose machine has 2 CPUs"):
        host_capacity(config, "vm", (65536, 2), source=TOML)
    # another host's machine is not known here: only its own driver can tell
    assert host_capacity(config, "far", (None, None), source=TOML).mem > 0
    # an admin's own amount is what counts, whatever the reserve
    config = parse_config('reserve_mem = "32G"\n[hosts.vm]\nmem = "4G"\ncpus = 1\n')
    assert host_capacity(config, "vm", (16384, 1), source=TOML) == Need(4096, 1, 1)


def test_a_job_never_fits_only_when_no_host_of_the_spool_could_run_it():
    """The one rule of submit, the driver and list: some host fits, or why none does."""
    config = parse_config('reserve_mem = "1G"\n[hosts.small]\nmem = "1G"\ncpus = 1\n')
    need = Need(2048, 1)
    assert never_fits(config, need, {"small": (None, None), "far": (None, None)}, source=TOML) == ""  # far: unknown, unbounded
    assert never_fits(config, need, {"small": (None, None)}, source=TOML) == "it asks for 2G memory, but the host has 1G (host small)"
    # several hosts: each one's size, never one host's alone as if it were the spool's
    assert never_fits(config, need, {"small": (None, None), "here": (2048, 4)}, source=TOML) == \
        "it asks for 2G memory, and no host of the spool has that much (small: 1G; here: 1G)"
    assert never_fits(config, Need(2048, 2), {"small": (None, None), "here": (4096, 1)}, source=TOML) == \
        "it asks for 2G memory and 2 CPUs, and no host of the spool has that much (small: 1G, 1 CPU; here: 3G, 1 CPU)"
    assert never_fits(config, need, {"here": (1024, 4), "far": (None, None)}, source=TOML) == ""
    with pytest.raises(ConfigError, match="reserve_mem = 1G leaves no memory for jobs on host here"):
        never_fits(config, need, {"here": (1024, 4), "small": (None, None)}, source=TOML)
    assert never_fits(config, need, {}, source=TOML) == "no host of the spool can run it"


@pytest.mark.parametrize("text", ['[hosts.a]\nmem = "0"', "[hosts.a]\nmem = 0", "[hosts.a]\ncpus = 0"])
def test_a_host_amount_of_zero_is_refused_when_onite_toml_is_read(text):
    with pytest.raises(ConfigError, match="hosts.a"):
        parse_config(text)


def test_a_reserve_larger_than_the_machine_stops_the_driver_not_the_queue(spool, workdir):
    """Its errors name onite.toml's full path, as every other error of the file does (they said onite.toml:)."""
    assert run_cli(["submit", "asks", "--mem", "64M"], stdin=b"true\n").code == 0
    assert run_cli(["submit", "plain"], stdin=b"true\n").code == 0
    set_config(spool, reserve_mem="1024T")
    proc = drain(spool)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and err.startswith(f"onite: {spool}/onite.toml: reserve_mem = 1024T"), err
    assert "lower reserve_mem" in err
    listed = {j["name"]: j for j in run_cli(["list", "--json"]).json()["jobs"]}
    assert set(listed) == {"asks", "plain"}  # nothing failed, nothing ran
    assert listed["asks"]["waiting"].startswith(f"waits: {spool}/onite.toml: reserve_mem = 1024T"), listed
    r = run_cli(["submit", "more", "--mem", "64M"], stdin=b"true\n")
    assert r.code == 2 and r.err.count("\n") == 1 and f"{spool}/onite.toml: reserve_mem = 1024T" in r.err, r
    r = run_cli(["daemon"], timeout=30)
    assert r.code == 2 and r.err.startswith(f"onite: {spool}/onite.toml: reserve_mem = 1024T"), r


def test_a_drain_under_a_reloaded_reserve_that_leaves_nothing_logs_it_and_touches_no_job(spool):
    """A daemon's drain, after onite.toml was reloaded with such a reserve: one error line, no job failed."""
    from onite.drain.driver import Driver
    from onite.spool.paths import SpoolDir

    assert run_cli(["submit", "asks", "--mem", "64M"], stdin=b"true\n").code == 0
    set_config(spool, reserve_cpus=MAX_CPUS)
    Driver(SpoolDir(spool)).drain()
    assert [j["name"] for j in run_cli(["list", "--json"]).json()["jobs"]] == ["asks"]
    errors = [line for line in log_lines(spool) if " error " in line]
    assert len(errors) == 1 and f"{spool}/onite.toml: reserve_cpus = {MAX_CPUS} leaves no CPU" in errors[0], errors
    assert not any(" driver-start " in line or " failed " in line for line in log_lines(spool))


# ---- the request admitted is the one held ------------------------------------------------------


def _gated(workdir, name: str) -> str:
    (workdir / f"{name}.gate").touch()
    return (f"cd {workdir}; ls *.running > {name}.seen 2>/dev/null; touch {name}.running\n"
            f"while [ -e {name}.gate ]; do sleep 0.02; done\nrm {name}.running\n")


def _capacity(spool, mem: str, cpus: int, **values) -> None:
    set_config(spool, **values)
    with open(spool / "onite.toml", "a") as handle:
        handle.write(f'\n[hosts.{HOST}]\nmem = "{mem}"\ncpus = {cpus}\n')


def submit(name, body, *args):
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


def _rewrite(path, **fields) -> None:
    """What a job's owner may do to their file: write it again, in place (a real second write)."""
    job = decode(path.read_bytes())
    with open(path, "r+b") as handle:
        handle.write(encode(job._replace(**fields)))
        handle.truncate()


def test_a_job_rewritten_between_pick_and_start_runs_with_what_was_admitted(spool, workdir):
    """The owner enlarges the request in their file after the driver admitted it and before it is
    claimed: the run holds the 256M it was admitted with (its limits, its room, its result), so the
    job that holds a slot and 768M and it never overfill the 1G host."""
    from onite.drain.driver import Driver
    from onite.spool.paths import SpoolDir

    _capacity(spool, "1G", 4, slots=2)
    submit("hold", _gated(workdir, "hold"), "--mem", "768M")
    submit("grow", f"rm {workdir}/hold.gate\n", "--mem", "256M", "--timeout", "1h")
    driver = Driver(SpoolDir(spool))
    real_pick = driver.picker.pick
    rewritten = []

    def pick():
        picked = real_pick()
        if picked is not None and picked[0].name == "root:grow" and not rewritten:
            _rewrite(picked[0].path, mem=1024, timeout=timedelta(days=2))
            rewritten.append(True)
        return picked

    driver.picker.pick = pick
    assert driver.run() == 0
    assert rewritten
    res = result(spool, "grow")
    assert res["state"] == "done" and res["mem"] == 256, res
    assert any(" warning root:grow " in line and "admitted" in line for line in log_lines(spool))


def _kill_driver_while_kept_runs(spool, workdir):
    """Start a driver, kill it once the job ``kept`` runs and its monitor recorded it; its claimed file."""
    import signal

    driver = start_driver(spool)
    wait_for((workdir / "kept.running").exists, what="the job")
    [record] = list((spool / "running").glob("*/root:kept@run"))
    wait_for(lambda: '"event":"job"' in record.read_text(), what="the monitor to record the job")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    [claimed] = list((spool / "running").glob("*/root:kept"))
    return claimed


def test_recovery_takes_a_running_jobs_request_from_its_run_record(spool, workdir):
    """A driver dies; the owner rewrites the claimed file of their running job; the next driver adopts the
    run holding what it was admitted with (its record), not what the file says now."""
    _capacity(spool, "1G", 4, slots=2)
    submit("kept", _gated(workdir, "kept"), "--mem", "256M")
    claimed = _kill_driver_while_kept_runs(spool, workdir)
    _rewrite(claimed, mem=1024)
    # beside the 256M it holds, 768M is free: a job that asks for it starts while it runs
    submit("beside", f"cd {workdir}; ls *.running > beside.seen; rm kept.gate\n", "--mem", "768M")
    assert drain(spool).returncode == 0
    assert (workdir / "beside.seen").read_text().split() == ["kept.running"]
    assert result(spool, "kept")["mem"] == 256


def test_recovery_takes_a_running_jobs_time_limit_from_its_run_record_for_backfill(spool, workdir):
    """The owner rewrites their running job's time limit from 1 hour to 2 days while no driver runs. The
    next driver estimates its end from the record (1 hour), as the run is held to it: a job of 1 day
    would delay the 1G job that waits for that end, so it is not backfilled beside it."""
    _capacity(spool, "1G", 4, slots=3, backfill=True)
    submit("kept", _gated(workdir, "kept"), "--mem", "512M", "--timeout", "1h")
    claimed = _kill_driver_while_kept_runs(spool, workdir)
    _rewrite(claimed, timeout=timedelta(days=2))
    submit("head", "true\n", "--mem", "1G", "-p", "1")
    submit("filler", f"cd {workdir}; ls *.running > filler.seen 2>/dev/null; rm kept.gate\n",
           "--mem", "256M", "--timeout", "1d", "-p", "2")
    # a job with no request behind them is backfilled in the same pass: once it ran, filler's turn was decided
    submit("probe", f"touch {workdir}/probe.ran\n", "-p", "3")
    second = start_driver(spool)
    wait_for((workdir / "probe.ran").exists, what="the probe job")
    (workdir / "kept.gate").unlink(missing_ok=True)
    second.communicate(timeout=60)
    assert second.returncode == 0
    starts = [line.split()[3] for line in log_lines(spool) if line.split()[2:3] == ["start"]]
    assert starts.index("root:head") < starts.index("root:filler"), starts
    assert not any(" start root:filler " in line and "backfilled" in line for line in log_lines(spool))


def test_a_run_records_request_is_read_back_bounded():
    assert admitted_need({"mem": 4096, "cpus": 2}) == Need(4096, 2)
    assert admitted_need({}) == Need(0, 0)  # a record of an onite before requests
    assert admitted_need({"mem": -1, "cpus": True}) == Need(0, 0)
    assert admitted_need({"mem": 1 << 40, "cpus": "2"}) == Need(0, 0)
    rec = parse(b'{"record":2,"deadline":"2026-11-24T21:00:00+00:00","kill_grace":10.0}\n')
    assert rec.latest_end() == datetime(2026, 11, 24, 21, 0, 10, tzinfo=timezone.utc)
    assert parse(b'{"record":2,"deadline":"9999-12-31T23:59:59+00:00","kill_grace":10}\n').latest_end() is None
    assert parse(b'{"record":2,"deadline":null,"kill_grace":10}\n').latest_end() is None


# ---- what list says is what the driver does ----------------------------------------------------


def _waiting(name: str) -> str | None:
    [job] = [j for j in run_cli(["list", "--json"]).json()["jobs"] if j["name"] == name]
    return job["waiting"]


def test_list_says_a_job_too_big_for_the_host_will_fail_as_the_driver_files_it(spool, workdir):
    _capacity(spool, "1G", 2)
    submit("fits", "true\n", "--mem", "1G")
    toml = spool / "onite.toml"  # the admin shrinks the host after it was spooled
    toml.write_text(toml.read_text().replace('mem = "1G"', 'mem = "512M"'))
    said = _waiting("fits")
    assert said == f"will fail: it asks for 1G memory, but the host has 512M: it can never run on host {HOST}", said
    assert drain(spool).returncode == 0
    res = result(spool, "fits")
    assert res["state"] == "failed" and said.removeprefix("will fail: ") in res["reason"], res


def test_list_with_backfill_says_a_job_that_fits_now_is_held_for_the_head_job(spool, workdir):
    _capacity(spool, "1G", 4, slots=4, backfill=True)
    submit("a", _gated(workdir, "a"), "--mem", "512M", "--timeout", "1h")
    submit("h", "true\n", "--mem", "768M")
    submit("nolimit", f"cd {workdir}; ls *.gate > nolimit.seen 2>/dev/null; true\n", "--mem", "384M")
    driver = start_driver(spool)
    wait_for((workdir / "a.running").exists, what="a")
    assert _waiting("h") == "waits for 768M memory (512M free)"
    # it fits in the 512M free, but it has no time limit and would hold 384M past h's start
    assert _waiting("nolimit") == "waits behind h: it could delay h's start"
    (workdir / "a.gate").unlink()
    assert driver.wait(timeout=60) == 0
    assert "a.gate" not in (workdir / "nolimit.seen").read_text().split()  # the driver held it, as list said


def test_list_in_strict_order_says_who_waits_behind_whom(spool, workdir):
    _capacity(spool, "1G", 4, slots=3)
    submit("a", _gated(workdir, "a"), "--mem", "768M")
    submit("h", "true\n", "--mem", "512M")
    submit("s", "true\n", "--mem", "128M")
    submit("plain", "true\n")
    driver = start_driver(spool)
    wait_for((workdir / "a.running").exists, what="a")
    assert _waiting("h") == "waits for 512M memory (256M free)"
    assert _waiting("s") == "waits behind h"
    assert _waiting("plain") == "waits behind h"
    (workdir / "a.gate").unlink()
    assert driver.wait(timeout=60) == 0


# ---- defaults: the spool's, when the job is spooled ---------------------------------------------


def test_defaults_are_applied_at_submit_and_a_later_change_leaves_queued_jobs_alone(spool, workdir):
    set_config(spool, default_mem="64M", default_cpus=1)
    submit("early", "true\n")
    submit("own", "true\n", "--cpus", "2")
    [path] = list((spool / "jobs").glob("*/root:early"))
    assert (decode(path.read_bytes()).mem, decode(path.read_bytes()).cpus) == (64, 1)
    set_config(spool, default_mem="128M", default_cpus=2)
    submit("late", "true\n")
    assert drain(spool).returncode == 0
    assert (result(spool, "early")["mem"], result(spool, "early")["cpus"]) == (64, 1)
    assert (result(spool, "own")["mem"], result(spool, "own")["cpus"]) == (64, 2)
    assert (result(spool, "late")["mem"], result(spool, "late")["cpus"]) == (128, 2)


# ---- requests from the other ways in -------------------------------------------------------------


def test_lines_batches_carry_the_request(spool):
    r = run_cli(["submit", "batch", "--lines", "--mem", "96M", "--cpus", "1"], stdin=b"echo one\necho two\n")
    assert r.code == 0, r
    jobs = [decode(p.read_bytes()) for p in sorted((spool / "jobs").glob("*/root:batch-*"))]
    assert len(jobs) == 2 and all((j.mem, j.cpus) == (96, 1) for j in jobs)


def test_recur_add_stores_the_request_and_its_instances_carry_it(spool):
    from onite.core.recurring import instance_job

    r = run_cli(["recur", "add", "nightly", "--every", "1h", "--mem", "1536M", "--cpus", "1"], stdin=b"true\n")
    assert r.code == 0, r
    template = decode((spool / "recur" / "root:nightly").read_bytes())
    assert (template.mem, template.cpus) == (1536, 1)
    instance = instance_job(template, "root:nightly", NOW, NOW, priorities=7)
    assert (instance.mem, instance.cpus) == (1536, 1)
    r = run_cli(["recur", "add", "bad", "--every", "1h", "--cpus", "0"], stdin=b"true\n")
    assert r.code == 2 and r.err == f"onite: --cpus '0': expected a number of CPUs from 1 to {MAX_CPUS}\n", r


# ---- small ones ----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))  # edge cases: below
@given(st.one_of(st.text(max_size=40), st.from_regex(r"\s*0*[0-9]{1,12}\s*", fullmatch=True)))
def test_the_cpu_count_parser_reads_the_whole_value(text):
    try:
        count = parse_cpus(text)
    except InvalidInput as err:
        assert str(err).endswith(f"expected a number of CPUs from 1 to {MAX_CPUS}")
        assert not (text.strip().isascii() and text.strip().isdigit() and 1 <= int(text.strip()) <= MAX_CPUS)
        return
    assert 1 <= count <= MAX_CPUS and count == int(text.strip())


@pytest.mark.parametrize("text", ["0000015000", "0" * 9 + "1" + "0" * 5, "9" * 5000, "4097", "0", "+2", "2.0", "٣"])
def test_a_cpu_count_past_its_first_characters_is_still_checked(text):
    with pytest.raises(InvalidInput):
        parse_cpus(text)


def test_leading_zeros_are_a_count_still():
    assert parse_cpus("0004") == 4 and parse_cpus(" 16 ") == 16
