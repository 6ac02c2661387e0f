"""Requests: jobs say what they need, the driver packs them, the kernel holds them to it.

Real drivers, real processes, real cgroups. Overlap is observed through
files the jobs write (``*.running`` while a job runs, gated on a file the
test removes); no timing is asserted.
"""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import drain, log_lines, needs_root, result, run_cli, set_config, start_driver, wait_for
from onite.core.config import parse_config
from onite.core.errors import ConfigError, InvalidInput, JobFormatError
from onite.core.jobfile import decode, encode
from onite.core.admission import Busy, may_backfill, reserve
from onite.exec.limits import MONITOR_SLACK
from onite.core.resources import MAX_MEM, Need, format_mem, human_bytes, parse_mem, too_big

HOST = os.uname().nodename.split(".")[0]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
NOW = datetime(2026, 11, 24, 20, 0, tzinfo=timezone.utc)


# ---- sizes, in Slurm's words -------------------------------------------------------------


@pytest.mark.parametrize("text, mib", [("4G", 4096), ("4g", 4096), ("512M", 512), ("2048", 2048), ("1T", 1 << 20),
                                       ("100K", 1), ("1025K", 2), (" 8G ", 8192)])
def test_sizes_are_read_as_slurm_writes_them(text, mib):
    assert parse_mem(text) == mib


def test_a_bare_size_is_mib_everywhere():
    """One parser: ``--mem 512``, ``default_mem = 512`` and ``max_job_size = 512`` all mean 512 MiB."""
    from onite.core.config import parse_config
    from onite.core.resources import parse_size

    assert parse_size("512", what="x") == parse_size("512M", what="x") == 512 << 20
    assert parse_size("100K", what="x") == 100 << 10
    config = parse_config("max_job_size = 512\ndefault_mem = 512\n[hosts.a]\nmem = 512\n")
    assert config.max_job_size == 512 << 20 and config.default_mem == parse_mem("512") == config.hosts["a"].mem == 512
    assert parse_config('max_job_size = "512K"').max_job_size == 512 << 10


@pytest.mark.parametrize("text", ["", "0", "0G", "4.5G", "4GB", "-1", "G", "4 G", "1P", "١G", "99999999999999999T"])
def test_a_size_slurm_would_not_take_is_refused(text):
    with pytest.raises(InvalidInput):
        parse_mem(text)


@FUZZ
@given(st.text(max_size=30))
def test_the_size_parser_is_total(text):
    try:
        mib = parse_mem(text)
    except InvalidInput:
        return
    assert 1 <= mib <= MAX_MEM


@FUZZ
@given(st.integers(1, MAX_MEM))
def test_every_size_is_written_so_that_it_reads_back(mib):
    assert parse_mem(format_mem(mib)) == mib


def test_amounts_used_are_shown_with_one_decimal():
    assert human_bytes(4 << 30) == "4.0G"
    assert human_bytes(300 << 20) == "300.0M"
    assert human_bytes(1000) == "1K"


# ---- the job file and onite.toml ---------------------------------------------------------


def _job_bytes(**headers) -> bytes:
    head = "".join(f"{k}: {v}\n" for k, v in headers.items())
    return (f"onite-job: 1\nname: root:j\npriority: 3\nsubmitted: 2026-11-22T14:03:11+01:00\nhost: vm\numask: 0022\n"
            f"cwd: /tmp\n{head}\necho hi\n").encode()


def test_requests_round_trip_through_the_job_file():
    job = decode(_job_bytes(mem="1536M", cpus="2"))
    assert (job.mem, job.cpus) == (1536, 2)
    assert b"mem: 1536M\ncpus: 2\n" in encode(job)
    assert decode(encode(job)) == job


@pytest.mark.parametrize("headers", [{"mem": "0"}, {"mem": "lots"}, {"cpus": "0"}, {"cpus": "1e3"}, {"cpus": "5000"}])
def test_a_damaged_request_is_a_damaged_job_file(headers):
    with pytest.raises(JobFormatError):
        decode(_job_bytes(**headers))


def test_an_unknown_key_is_kept_and_ignored():
    job = decode(_job_bytes(**{"gpus": "2"}))
    assert job.extra == (("gpus", "2"),)


def test_onite_toml_takes_defaults_reserve_backfill_and_host_capacity():
    config = parse_config('default_mem = "2G"\ndefault_cpus = 1\nreserve_mem = "1G"\nreserve_cpus = 1\n'
                          'backfill = true\n[hosts.big]\nmem = "64G"\ncpus = 16\n[hosts.small]\nslots = 2\n')
    assert (config.default_mem, config.default_cpus, config.reserve_mem, config.reserve_cpus) == (2048, 1, 1024, 1)
    assert config.backfill is True
    assert (config.hosts["big"].mem, config.hosts["big"].cpus, config.hosts["big"].slots) == (65536, 16, None)
    assert config.slots_for("small") == 2 and config.slots_for("big") == config.slots


@pytest.mark.parametrize("text", ['default_mem = "4.5G"', "default_cpus = 0", 'reserve_mem = "-1"', "backfill = 1",
                                  '[hosts.a]\nmem = "x"', "[hosts.a]\ncpus = true", "[hosts.a]\ngpus = 1"])
def test_a_bad_request_setting_names_its_key(text):
    with pytest.raises(ConfigError):
        parse_config(text)


# ---- packing, pure --------------------------------------------------------------------------


CAP = Need(mem=1024, cpus=4, slots=4)


def test_a_job_that_ends_before_the_head_can_start_may_backfill():
    running = [Busy(Need(512, 1), NOW + timedelta(hours=1))]
    head = reserve(CAP, running, Need(768, 1))
    assert head.at == NOW + timedelta(hours=1)
    assert may_backfill(Need(256, 1), NOW + timedelta(minutes=10), Need(512, 3, 3), head)


def test_a_job_with_no_time_limit_backfills_only_beside_the_heads_reservation():
    running = [Busy(Need(512, 1), NOW + timedelta(hours=1))]
    head = reserve(CAP, running, Need(768, 1))
    free = Need(512, 3, 3)
    assert not may_backfill(Need(384, 1), None, free, head)  # it would still hold 384M when the head needs 768M
    assert may_backfill(Need(256, 1), None, free, head)  # 768M + 256M: both fit once the running job ends


def test_a_job_that_ends_after_the_heads_reservation_is_held_to_the_spare():
    running = [Busy(Need(512, 1), NOW + timedelta(hours=1))]
    head = reserve(CAP, running, Need(768, 1))
    assert not may_backfill(Need(384, 1), NOW + timedelta(hours=2), Need(512, 3, 3), head)


def test_when_the_head_waits_for_a_job_without_time_limit_only_what_stays_free_beside_it_backfills():
    running = [Busy(Need(512, 3), None)]
    head = reserve(CAP, running, Need(256, 2))  # 1 CPU free, it needs 2: its start is unknown
    assert head.at is None
    assert not may_backfill(Need(0, 1), NOW + timedelta(minutes=1), Need(512, 1, 3), head)  # the CPU it waits for
    assert may_backfill(Need(256, 0), None, Need(512, 1, 3), head)  # memory it does not need


def test_a_request_bigger_than_the_host_says_what_it_lacks():
    assert too_big(Need(2048, 1), CAP) == "it asks for 2G memory, but the host has 1G"  # as --mem writes it
    assert too_big(Need(1536, 8), Need(1000, 4)) == "it asks for 1536M memory, but the host has 1000M and 8 CPUs, " \
        "but the host has 4"
    assert too_big(Need(512, 2), Need(1024, 1)) == "it asks for 2 CPUs, but the host has 1"
    assert too_big(Need(512, 4), CAP) == ""
    assert Need(0, 1).shortage(Need(0, 0)) == "1 CPU (0 free)"  # not "1 CPUs"


# ---- real nights ----------------------------------------------------------------------------


def _capacity(spool, mem: str, cpus: int, **values) -> None:
    set_config(spool, **values)
    with open(spool / "onite.toml", "a") as handle:
        handle.write(f'\n[hosts.{HOST}]\nmem = "{mem}"\ncpus = {cpus}\n')


def gated(workdir, name: str) -> str:
    """A job that says it runs (NAME.running), notes which jobs ran when it started (NAME.seen), waits
    until the test removes NAME.gate, and says it ended."""
    (workdir / f"{name}.gate").touch()
    return (f"cd {workdir}; ls *.running > {name}.seen 2>/dev/null; touch {name}.running\n"
            f"while [ -e {name}.gate ]; do sleep 0.02; done\nrm {name}.running\n")


def submit(name, body, *args):
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


def test_jobs_that_fit_run_together_and_one_that_does_not_waits(spool, workdir):
    _capacity(spool, "1G", 4, slots=3)
    submit("a", gated(workdir, "a"), "--mem", "512M")
    submit("b", gated(workdir, "b"), "--mem", "512M")
    submit("c", gated(workdir, "c"), "--mem", "512M")
    driver = start_driver(spool)
    wait_for(lambda: (workdir / "a.running").exists() and (workdir / "b.running").exists(), what="a and b together")
    listing = run_cli(["list"])
    assert "waits for 512M memory (none free)" in listing.out, listing
    (workdir / "a.gate").unlink()
    wait_for(lambda: (workdir / "c.running").exists(), what="c, once a ended")
    assert (workdir / "c.seen").read_text().split() == ["b.running"]  # a had ended; b still ran
    for name in ("b", "c"):
        (workdir / f"{name}.gate").unlink()
    assert driver.wait(timeout=60) == 0
    assert result(spool, "c")["mem"] == 512


def test_strict_order_nothing_jumps_a_job_that_waits_for_room(spool, workdir):
    _capacity(spool, "1G", 4, slots=3)
    submit("a", gated(workdir, "a"), "--mem", "768M")
    submit("h", gated(workdir, "h"), "--mem", "512M")
    submit("s", f"cd {workdir}; ls *.gate > s.seen 2>/dev/null; true\n", "--mem", "128M")
    driver = start_driver(spool)
    wait_for(lambda: (workdir / "a.running").exists(), what="a")
    (workdir / "a.gate").unlink()
    wait_for(lambda: (workdir / "h.running").exists(), what="h, once a ended")
    (workdir / "h.gate").unlink()
    assert driver.wait(timeout=60) == 0
    assert "a.gate" not in (workdir / "s.seen").read_text().split()  # s, which fit, waited behind h


def test_backfill_starts_only_what_cannot_delay_the_head_job(spool, workdir):
    _capacity(spool, "1G", 4, slots=4, backfill=True)
    submit("a", gated(workdir, "a"), "--mem", "512M", "--timeout", "1h")
    submit("h", gated(workdir, "h"), "--mem", "768M")
    submit("nolimit", f"cd {workdir}; ls *.gate > nolimit.seen 2>/dev/null; true\n", "--mem", "384M")
    submit("short", gated(workdir, "short"), "--mem", "256M", "--timeout", "10m")
    driver = start_driver(spool)
    # a cannot end before the test removes a.gate: the short job started past h, while a ran
    wait_for(lambda: (workdir / "short.running").exists(), what="the short job, backfilled")
    (workdir / "a.gate").unlink()
    wait_for(lambda: (workdir / "h.running").exists(), what="h, once a ended")
    (workdir / "short.gate").unlink()
    (workdir / "h.gate").unlink()
    assert driver.wait(timeout=60) == 0
    seen = (workdir / "nolimit.seen").read_text().split()
    assert "a.gate" not in seen  # no time limit: it would have held 384M past h's start
    starts = [line for line in log_lines(spool) if " start " in line]
    assert any("short" in line and "backfilled" in line for line in starts), starts
    assert not any("nolimit" in line and "backfilled" in line for line in starts), starts


def test_a_job_bigger_than_the_host_is_refused_at_submit_and_failed_by_the_driver(spool, workdir):
    _capacity(spool, "1G", 2)
    r = run_cli(["submit", "big", "--mem", "2G"], stdin=b"true\n")
    assert r.code == 3 and r.err.count("\n") == 1 and "2G memory" in r.err, r
    assert r.err.startswith("onite: job 'big' can never run"), r  # the caller's own job, by its NAME
    submit("fits", "true\n", "--mem", "1G")
    toml = spool / "onite.toml"  # the admin shrinks the host after it was spooled
    toml.write_text(toml.read_text().replace('mem = "1G"', 'mem = "512M"'))
    assert drain(spool).returncode == 0
    res = result(spool, "fits")
    assert res["state"] == "failed" and "1G memory" in res["reason"] and "never run" in res["reason"], res


def test_every_result_records_peak_memory_and_cpu_time(spool, workdir):
    submit("burn", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done\n")
    assert drain(spool).returncode == 0
    res = result(spool, "burn")
    assert res["state"] == "done"
    assert res["peak_mem"] > 0 and res["cpu_time"] > 0, res


def test_a_run_gets_only_the_v1_groups_that_do_something():
    """Each v1 group is a folder made and removed, and two moves, per job: a run gets the memory
    group (its peak and OOM kills are read there); the cpu group only when it asks for CPUs (it
    holds the quota); the cpuacct group only where no cgroup v2 of its own counts its CPU."""
    from onite.exec.limits import Limiter

    limiter = Limiter(v1={"memory": "/m/onite", "cpu": "/c/onite", "cpuacct": "/a/onite"})
    assert limiter.groups("r", "/u/onite/r") == ("/m/onite/r",)
    assert limiter.groups("r", None) == ("/a/onite/r", "/m/onite/r")  # cpuacct, memory
    assert limiter.groups("r", None, 2) == ("/c/onite/r", "/a/onite/r", "/m/onite/r")
    made = {path for path, text, _ in limiter.steps("r", "/u/onite/r", None) if text is None}
    assert made == {"/m/onite/r"}
    made = {path for path, text, _ in limiter.steps("r", "/u/onite/r", 2) if text is None}
    assert made == {"/c/onite/r", "/m/onite/r"}  # a CPU request: its group holds the quota
    reads = {key: path for key, path, *_ in limiter.reads("r", "/u/onite/r")}
    assert reads == {"peak_mem": "/m/onite/r/memory.max_usage_in_bytes", "oom": "/m/onite/r/memory.oom_control",
                     "cpu": "/u/onite/r/cpu.stat"}
    assert {key: path for key, path, *_ in limiter.reads("r", None)}["cpu"] == "/a/onite/r/cpuacct.usage"


def test_a_memory_limit_is_written_after_the_fork_and_a_cpu_limit_before():
    """The memory limit is set once the job's process exists and its monitor has left the job's
    groups (``memory_steps``, after the fork): set before, it would hold the monitor too while it
    forks the job, and the OOM killer takes the largest process of a group."""
    from onite.exec.limits import Limiter

    v1 = Limiter(v1={"memory": "/m/onite", "cpu": "/c/onite"})
    assert not any("memory." in path for path, *_ in v1.steps("r", None, 2))
    assert v1.memory_steps("r", None, 64) == (("/m/onite/r/memory.limit_in_bytes", str(64 << 20), "memory"),
                                               ("/m/onite/r/memory.memsw.limit_in_bytes", str(64 << 20), ""))
    assert v1.memory_steps("r", None, None) == ()
    v2 = Limiter(v2="/u/onite")
    assert v2.steps("r", "/u/onite/r", 2) == (("/u/onite/r/cpu.max", "200000 100000", "cpu"),)
    assert [path for path, *_ in v2.memory_steps("r", "/u/onite/r", 64)] == ["/u/onite/r/memory.max",
                                                                              "/u/onite/r/memory.swap.max"]
    assert Limiter().memory_steps("r", None, 64) == ()


def _has_v1_memory() -> bool:
    from onite.exec.limits import discover

    return os.geteuid() == 0 and not discover(None).describe().startswith("not enforced")


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no memory controller to hold a job to its --mem")
def test_a_job_past_its_memory_is_killed_and_recorded_as_out_of_memory(spool, workdir):
    hog = "import sys\nblocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n"
    (workdir / "hog.py").write_text(hog)
    submit("hog", f"exec python3 {workdir}/hog.py\n", "--mem", "64M")
    submit("fine", "true\n", "--mem", "64M")
    assert drain(spool).returncode == 0
    res = result(spool, "hog")
    assert res["state"] == "failed"
    assert res["reason"].startswith("out of memory (asked 64M, peaked "), res
    assert 60 << 20 <= res["peak_mem"] <= (64 << 20) + MONITOR_SLACK, res  # room for its monitor's pages
    assert result(spool, "fine")["state"] == "done"


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no memory controller to hold a job to its --mem")
def test_a_job_whose_small_processes_the_kernel_killed_for_its_memory_is_out_of_memory_though_it_exits_0(spool):
    """nobody's job starts 20 processes of 8M each under --mem 64M and exits 0 whatever became of them: the kernel
    killed most of them, yet the job was filed done, exit 0, with no word of its memory. It is filed as out of
    memory, as Slurm files such a job OUT_OF_MEMORY, and not retried."""
    child = "import time; x = bytearray(8 << 20); [x.__setitem__(i, 1) for i in range(0, len(x), 4096)]; time.sleep(1)"
    body = (f"ps=''; for i in $(seq 1 20); do python3 -c '{child}' & ps=\"$ps $!\"; done\n"
            "k=0; for p in $ps; do wait $p || k=$((k+1)); done; echo \"$k killed\"; exit 0\n")
    r = run_cli(["submit", "many", "--mem", "64M", "--retries", "1"], stdin=body.encode(), user="nobody", cwd="/tmp")
    assert r.code == 0, r
    assert drain(spool).returncode == 0
    killed = int((spool / "stdout" / "nobody:many").read_text().split()[-2])
    assert killed > 0
    res = result(spool, "nobody:many")
    assert (res["state"], res["exit_code"], res["attempt"]) == ("failed", 0, 1), res
    assert res["reason"].startswith("out of memory (asked 64M, peaked "), res
    listed = run_cli(["list", "--all"]).out
    assert "out of memory (asked 64M" in listed, listed


def _run_groups(spool, name):
    """The cgroup v1 groups a run's monitor gave its job (its line in the run record)."""
    from onite.spool import runrecords

    [path] = list((spool / "running").glob(f"*/root:{name}@run"))
    return list(runrecords.read(path).groups)


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no memory controller to hold a job to its --mem")
def test_the_limits_are_set_before_the_job_runs(spool, workdir):
    body = (f"cat /proc/self/cgroup > {workdir}/cg; touch {workdir}/in\n"
            f"while [ ! -e {workdir}/out ]; do sleep 0.02; done\n")
    submit("lim", body, "--mem", "96M", "--cpus", "1")
    driver = start_driver(spool)
    wait_for(lambda: (workdir / "in").exists(), what="the job")
    groups = _run_groups(spool, "lim")
    mem_group = [g for g in groups if "/memory/" in g][0]
    # the memory limit comes once the monitor has left the job's groups, a moment after the job's start
    wait_for(lambda: int(open(f"{mem_group}/memory.limit_in_bytes").read()) <= (96 << 20) + MONITOR_SLACK,
             what="the memory limit")
    assert 96 << 20 <= int(open(f"{mem_group}/memory.limit_in_bytes").read())
    cpu_group = [g for g in groups if "/cpu/" in g]
    if cpu_group:
        assert int(open(f"{cpu_group[0]}/cpu.cfs_quota_us").read()) == 100_000
    assert os.path.basename(mem_group) in (workdir / "cg").read_text()
    (workdir / "out").touch()
    assert driver.wait(timeout=60) == 0
    assert not any(os.path.exists(g) for g in groups)  # removed with the run


def _has_v1_cpu() -> bool:
    from onite.exec.limits import discover

    return os.geteuid() == 0 and "cpu" in discover(None).v1


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no cgroup v1 memory controller to refuse a limit")
def test_a_job_past_its_memory_before_its_limit_is_set_is_told_apart(tmp_path):
    """cgroup v1 refuses a limit below what a group holds and cannot reclaim (EBUSY, no swap here):
    a job that took more than it asked for in the moment between its fork and its limit is then
    killed by its monitor, and ``apply_memory`` says so rather than leaving it without a limit."""
    import subprocess
    import sys
    import uuid

    from onite.exec.limits import apply_memory, discover

    limiter = discover(None)
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    group = f"{limiter.v1['memory']}/{run_id}"
    os.makedirs(group)
    ready = tmp_path / "ready"
    hog = subprocess.Popen(["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" -c "$1"', sys.executable,
                            f"import pathlib, time; b = bytearray(48 << 20); b[::4096] = b'x' * len(b[::4096]); "
                            f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"])
    try:
        wait_for(ready.exists, what="the process to take its memory")
        assert apply_memory(limiter.memory_steps(run_id, None, 8)) == ([], True)
        assert int(open(f"{group}/memory.limit_in_bytes").read()) > 8 << 20  # refused: not set
        assert apply_memory(limiter.memory_steps(run_id, None, 256)) == ([], False)
        assert 256 << 20 <= int(open(f"{group}/memory.limit_in_bytes").read()) <= (256 << 20) + MONITOR_SLACK
    finally:
        hog.kill()
        hog.wait()
        wait_for(lambda: not open(f"{group}/cgroup.procs").read().strip(), what="the group to empty")
        os.rmdir(group)


@needs_root
def test_the_monitors_of_many_tiny_memory_jobs_all_survive(spool):
    """While a monitor forks a job it is in the job's memory group, and the OOM killer takes a
    group's largest process: a job with a tiny --mem that allocates at once must never take its
    root monitor with it. So the limit is set once the monitor has left (onite.exec.limits.
    apply_memory). Set before the fork, 2 drains of 13 of these twelve jobs lost a monitor with the
    job in a CPU group of its own, 4 of 6 without. Whichever of a job's processes the kernel kills,
    the job is told apart from onite's failure."""
    body = "x=$(head -c 20000000 /dev/zero | tr '\\0' x); [ ${#x} -eq 20000000 ]\n"  # whichever process is taken, it fails
    names = [f"greedy{i}" for i in range(12)]
    for name in names:
        assert run_cli(["submit", name, "--mem", "1M"], stdin=body.encode(), user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    for name in names:
        res = result(spool, name)
        assert res["state"] == "failed" and res["reason"].startswith("out of memory (asked 1M"), (res["state"], res["reason"], res.get("exit_code"), res.get("signal"), res.get("peak_mem"))
    assert not any("monitor" in line for line in log_lines(spool) if " failed " in line)


@needs_root
@pytest.mark.skipif(not _has_v1_cpu(), reason="no cgroup v1 cpu controller here: no job gets a cpu group")
def test_only_a_job_that_asks_for_cpus_runs_in_a_cpu_group_of_its_own(spool, workdir):
    """A job that asks for no CPUs runs in its v1 memory group (its peak is read there) but in its
    driver's cpu group: its own would hold nothing."""
    for name, asks in (("plain", ()), ("memonly", ("--mem", "64M")), ("cpuonly", ("--cpus", "1"))):
        submit(name, f"cat /proc/self/cgroup > {workdir}/{name}.cg\n", *asks)
    assert drain(spool).returncode == 0

    def group(name: str, controller: str) -> str:
        lines = (workdir / f"{name}.cg").read_text().splitlines()
        return next(line.split(":", 2)[2] for line in lines if controller in line.split(":")[1].split(","))

    assert "/onite/" in group("plain", "memory") and "/onite/" not in group("plain", "cpu")
    assert "/onite/" in group("memonly", "memory") and "/onite/" not in group("memonly", "cpu")
    assert "/onite/" in group("cpuonly", "cpu")
    assert all(result(spool, name)["state"] == "done" for name in ("plain", "memonly", "cpuonly"))


def test_list_and_its_json_show_what_a_job_asked_for_and_used(spool, workdir):
    submit("burn2", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done\n", "--mem", "1G", "--cpus", "1")
    assert drain(spool).returncode == 0
    [doc] = [j for j in run_cli(["list", "--all", "--json"]).json()["jobs"] if j["name"] == "burn2"]
    assert (doc["mem"], doc["cpus"]) == (1024, 1) and doc["peak_mem"] > 0 and doc["cpu_time"] > 0, doc
    import re

    lines = run_cli(["list", "--all", "--plain"]).out.splitlines()
    titles = re.split(r" {2,}", lines[0])
    [row] = [re.split(r" {2,}", line) for line in lines if "burn2" in line]
    assert re.fullmatch(r"[0-9.]+[KMG]/1G", row[titles.index("MEM")]), row
    assert re.fullmatch(r"[0-9.]+s", row[titles.index("CPU")]), row


@needs_root
def test_status_says_how_requests_are_held_and_the_capacity(spool, workdir):
    _capacity(spool, "1G", 2)
    submit("t", "true\n")
    assert drain(spool).returncode == 0
    out = run_cli(["status"]).out
    line = next(line for line in out.splitlines() if line.startswith("limits"))
    assert "capacity 1G memory, 2 CPUs" in line
    assert line.split()[1:3] == ["last", "drain:"], line  # the last driver's words, not a measure of now
    assert ("cgroup" in line) if _has_v1_memory() else ("not enforced" in line)


# ---- the kernel's files (cgroup v2 only where this machine has none: a fake folder) --------------


def test_without_a_memory_controller_limits_are_not_enforced(tmp_path):
    from onite.exec.limits import discover

    (tmp_path / "mountinfo").write_text("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n")
    (tmp_path / "cgroup").write_text("0::/\n")
    found = discover(None, mountinfo=str(tmp_path / "mountinfo"), own=str(tmp_path / "cgroup"))
    assert found.describe().startswith("not enforced")


@needs_root
def test_cgroup_v2_limits_and_use_are_read_from_their_files(tmp_path):
    from onite.exec.limits import apply, apply_memory, discover, usage

    base = tmp_path / "onite"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text("")
    limiter = discover(str(base))
    assert limiter.v2 == str(base) and "+memory +cpu" in (base / "cgroup.subtree_control").read_text()
    job = base / "run-1"
    job.mkdir()
    assert limiter.groups("run-1") == () and apply(limiter.steps("run-1", str(job), 2)) == []
    assert apply_memory(limiter.memory_steps("run-1", str(job), 4096)) == ([], False)
    assert (job / "memory.max").read_text() == str(4 << 30) and (job / "cpu.max").read_text() == "200000 100000"
    (job / "memory.peak").write_text("123456789\n")
    (job / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    (job / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    assert usage(limiter.reads("run-1", str(job))) == {"peak_mem": 123456789, "oom": 1, "cpu": 2.5}


@needs_root
def test_the_pids_limit_leaves_room_for_the_monitor_then_is_the_jobs(tmp_path):
    """cgroup v2 where its folder has the pids controller (memory and cpu or not), else v1; set one above
    ``max_pids`` while the monitor is in the group, then to it; nowhere with max_pids = 0."""
    from onite.exec.limits import Limiter, apply, discover

    base = tmp_path / "onite"
    base.mkdir()
    (base / "cgroup.controllers").write_text("hugetlb pids\n")
    (base / "cgroup.subtree_control").write_text("")
    limiter = discover(str(base), 50, mountinfo=str(tmp_path / "none"), own=str(tmp_path / "none"))
    assert limiter.v2 is None and limiter.pids_v2 == str(base) and "+pids" in (base / "cgroup.subtree_control").read_text()
    assert limiter.describe() == ("not enforced (no memory controller this driver may use); "
                                  "at most 50 processes a job (cgroup v2 pids)")
    job = base / "run-1"
    job.mkdir()
    assert apply(limiter.pids_steps("run-1", str(job), 1)) == [] and (job / "pids.max").read_text() == "51"
    assert apply(limiter.pids_steps("run-1", str(job), 0)) == [] and (job / "pids.max").read_text() == "50"
    assert apply(limiter.pids_steps("run-2", str(base / "run-2"), 0)) == ["pids"]  # its cgroup was not made
    v1 = Limiter(v1={"memory": "/m/onite", "pids": "/p/onite"}, max_pids=50)
    assert v1.groups("run-3") == ("/m/onite/run-3", "/p/onite/run-3")
    assert v1.pids_steps("run-3", None, 1) == (("/p/onite/run-3/pids.max", "51", "pids"),)
    assert v1.describe() == "cgroup v1 (memory); at most 50 processes a job (cgroup v1 pids)"
    off = Limiter(v1={"memory": "/m/onite"})
    assert off.pids_steps("run-4", None, 1) == () and off.describe() == "cgroup v1 (memory); no pids limit (max_pids = 0)"


@needs_root
def test_a_limit_that_cannot_be_set_is_named_for_the_start_line(tmp_path):
    """The job still runs (a limit is no reason not to), but the limits it asked for and did not get
    are named: the start line of the log says ``unenforced=memory``."""
    from onite.exec.limits import Limiter, apply, apply_memory

    job = tmp_path / "run-1"
    (job / "memory.max").mkdir(parents=True)  # a write to it fails (EISDIR), as a kernel refusal would
    limiter = Limiter(v2=str(tmp_path))
    assert apply(limiter.steps("run-1", str(job), 1)) == []
    assert apply_memory(limiter.memory_steps("run-1", str(job), 64)) == (["memory"], False)
    assert (job / "cpu.max").read_text() == "100000 100000"
    assert apply(limiter.steps("run-2", str(tmp_path / "run-2"), 1)) == ["cpu"]  # its cgroup was not made
    assert apply_memory(limiter.memory_steps("run-2", str(tmp_path / "run-2"), 64)) == (["memory"], False)
    v1 = Limiter(v1={"memory": str(tmp_path / "no" / "such"), "cpuacct": str(tmp_path)})
    assert apply(v1.steps("run-3", None, 1)) == []  # no cpu controller: nothing to hold its CPUs
    assert apply_memory(v1.memory_steps("run-3", None, 64)) == (["memory"], False)  # its group cannot be made
    assert (tmp_path / "run-3").is_dir()


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no cgroup v1 groups to leave behind")
def test_recovery_removes_the_limit_groups_a_dead_monitor_left(spool, workdir):
    from conftest import kill_driver_mid_job

    set_config(spool, default_mem="64M")
    kill_driver_mid_job(spool, workdir, "lost", machine_dies=True)
    groups = _run_groups(spool, "lost")
    assert groups and all(os.path.isdir(g) for g in groups)
    assert drain(spool).returncode == 0
    assert not any(os.path.exists(g) for g in groups)
    assert result(spool, "lost")["mem"] == 64


def _v1_memory_mount() -> str | None:
    from onite.exec.contain import cgroup_mounts

    return cgroup_mounts("/proc/self/mountinfo").get("memory")


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no cgroup v1 memory controller: a driver makes no v1 folder")
def test_a_driver_leaves_no_empty_folder_of_v1_groups_in_its_own_group(spool, workdir):
    """A driver makes a folder for its jobs' v1 groups under its own group (``<group>/onite``). Left
    there empty, it would keep whatever made the driver's group (a supervisor that is not systemd)
    from removing it: the driver removes it as it ends."""
    import subprocess
    import sys
    import uuid

    own = f"{_v1_memory_mount()}/onite-test-{uuid.uuid4().hex[:8]}"
    os.mkdir(own)
    try:
        submit("a", f"cat /proc/self/cgroup > {workdir}/a.cg\n", "--mem", "64M")
        done = subprocess.run(["sh", "-c", f'echo $$ > {own}/cgroup.procs && exec "$0" -m onite run -q',
                               sys.executable], capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"{os.path.basename(own)}/onite/" in (workdir / "a.cg").read_text()  # its group was in the folder
        assert result(spool, "a")["state"] == "done"
        assert not os.path.exists(f"{own}/onite")
    finally:
        os.rmdir(own)  # fails if the driver left its folder there


def test_a_v1_group_whose_folder_another_driver_removed_is_made_with_its_folder(tmp_path):
    """Two drivers in one group share the folder; the one that ends first removes it when it is
    empty, and the other makes it again for its next job."""
    from onite.exec.limits import Limiter, apply

    folder = tmp_path / "onite"
    limiter = Limiter(v1={"memory": str(folder)})
    assert apply(limiter.steps("run-1", None, None)) == [] and (folder / "run-1").is_dir()
    (folder / "run-1").rmdir()
    limiter.remove_folders()
    assert not folder.exists()
    assert apply(limiter.steps("run-2", None, None)) == [] and (folder / "run-2").is_dir()
    limiter.remove_folders()
    assert folder.is_dir()  # a group is still in it: it stays


def test_a_header_key_this_onite_does_not_know_is_logged_and_ignored(spool, workdir):
    submit("newer", "true\n")
    [path] = list((spool / "jobs").glob("*/root:newer"))
    path.write_bytes(path.read_bytes().replace(b"onite-job: 1\n", b"onite-job: 1\ngpus: 2\n", 1))
    assert drain(spool).returncode == 0
    assert result(spool, "newer")["state"] == "done"
    assert any(" warning root:newer " in line and "keys=gpus" in line for line in log_lines(spool)), log_lines(spool)


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no memory controller to hold a job to its --mem")
def test_a_job_out_of_memory_while_no_driver_runs_is_filed_as_out_of_memory_and_not_retried(spool, workdir):
    """Recovery files a run from its record as a live driver would: the kernel's OOM kill is `out of
    memory`, which is not retried (filed as a bare signal 9, it was: the job ran again)."""
    import signal

    (workdir / "hog.py").write_text("blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n")
    gate, started = workdir / "gate", workdir / "hog.started"
    gate.touch()
    submit("hog", f"touch {started}; while [ -e {gate} ]; do sleep 0.05; done; exec python3 {workdir}/hog.py\n",
           "--mem", "64M", "--retries", "1")
    driver = start_driver(spool)
    wait_for(started.exists, what="the job to start")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    gate.unlink()
    [record] = list((spool / "running").glob("*/root:hog@run"))
    wait_for(lambda: '"ended"' in record.read_text(), what="its monitor to record the end")
    assert drain(spool).returncode == 0
    res = result(spool, "hog")
    assert res["state"] == "failed" and res["reason"].startswith("out of memory (asked 64M, peaked "), res
    assert res["peak_mem"] > 0 and res["attempt"] == 1, res  # not retried
    assert not any(" retry root:hog " in line for line in log_lines(spool)), log_lines(spool)


@needs_root
def test_the_smallest_request_starts_another_users_job_and_its_monitor_survives(spool):
    """--mem 1M, by another user: the monitor is in the job's cgroups only while it forks the job's
    process (onite.exec.jobstart), and that fork fits; what the job then does is held to 1M."""
    for name, body in (("tiny", "echo small\n"), ("greedy", "head -c 50000000 /dev/zero | tail -c 1 >/dev/null; x=$(head -c 20000000 /dev/zero | tr '\\0' x); [ ${#x} -eq 20000000 ]\n")):
        r = run_cli(["submit", name, "--mem", "1M"], stdin=body.encode(), user="nobody", cwd="/tmp")
        assert r.code == 0, r
    assert drain(spool).returncode == 0
    tiny, greedy = result(spool, "tiny"), result(spool, "greedy")
    assert tiny["state"] == "done" and tiny["user"] == "nobody", tiny["reason"]
    assert greedy["state"] == "failed" and greedy["reason"].startswith("out of memory (asked 1M"), greedy
    assert not any("monitor" in line for line in log_lines(spool) if " failed " in line)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/memory"),
                    reason="needs root and a cgroup v1 memory hierarchy at /sys/fs/cgroup/memory")
def test_a_v1_group_with_a_process_in_it_is_populated():
    """A v1 group has no cgroup.events: whether it holds a process is read from its cgroup.procs (the sweep
    of leftover groups passes over a populated one), and a group that is gone holds none."""
    from onite.exec import contain

    path = f"/sys/fs/cgroup/memory/onite-test-{os.getpid()}"
    os.mkdir(path)
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert not contain.is_populated(path)
        with open(f"{path}/cgroup.procs", "w") as procs:
            procs.write(str(proc.pid))
        assert contain.is_populated(path)
    finally:
        proc.kill()
        proc.wait()
        os.rmdir(path)
    assert not contain.is_populated(path)


@needs_root
@pytest.mark.skipif(not _has_v1_memory(), reason="no memory controller to hold a job to its --mem")
def test_a_job_killed_for_its_memory_is_told_to_ask_for_more(spool, workdir):
    """The report's (and status's) next step for a job killed at its --mem asks for twice as much, as a timeout's
    asks for a longer --timeout: `onite restart hog` alone was killed at the same size again."""
    (workdir / "hog.py").write_text("blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n")
    submit("hog", f"exec python3 {workdir}/hog.py\n", "--mem", "64M")
    assert drain(spool).returncode == 0
    assert result(spool, "hog")["reason"].startswith("out of memory (asked 64M")
    [failure] = run_cli(["report", "--json"]).json()["failures"]
    assert failure["next"] == "onite restart hog --mem 128M"
    # status reads the log alone: the memory asked is the filed line's mem=, not parsed out of its reason
    assert run_cli(["status", "--json"]).json()["last_night"]["next"] == ["onite restart hog --mem 128M"]
    [filed] = [line for line in log_lines(spool) if line.split()[2] == "failed"]
    assert " mem=64 " in f"{filed} ", filed
    assert run_cli(failure["next"].split()[1:]).code == 0
    assert decode((spool / "jobs" / "P4" / "root:hog").read_bytes()).mem == 128
