"""Exactly once: a driver killed at any moment neither runs a job again nor loses one.

Every job here appends to a ledger (outside the spool) when it starts and ends, so the
tests count real runs, not what onite says about them. The crash harness kills the driver
with ``strace --inject`` at each of its durable steps in turn (before the Nth rename,
unlink, write, monitor start, mkdir, request to a monitor: every point between two steps),
then lets the next driver recover; the random harness kills several
drivers sharing one spool at random moments while jobs are spooled. Each ledger must show
every job run exactly once per attempt, none lost, no two copies at once, and no final
result ever changed (docs/job-control.md, "Exactly once").
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, ROOT, drain, log_lines, needs_root, result, run_cli, set_config, start_driver, wait_for

HOST = os.uname().nodename.split(".")[0]
STRACE = shutil.which("strace")
needs_strace = pytest.mark.skipif(STRACE is None and not os.environ.get("ONITE_STRACE_TESTS") == "required",
                                  reason="needs strace (Debian: strace) to kill the driver at each durable step")


def submit(name: str, body: str, *args: str, spool: Path | None = None) -> None:
    where = ["--spool", str(spool)] if spool is not None else []
    r = run_cli([*where, "submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


def ledger_lines(ledger: Path) -> list[list[str]]:
    return [line.split() for line in ledger.read_text().splitlines()] if ledger.exists() else []


def runs_of(ledger: Path) -> dict[str, int]:
    """How many times each job (attempt) started, by the ledger."""
    counts: dict[str, int] = {}
    for words in ledger_lines(ledger):
        if words[1] == "start":
            counts[words[0]] = counts.get(words[0], 0) + 1
    return counts


def workload(spool: Path, workdir: Path) -> Path:
    """Three jobs that cover claim, start, finish, a retry, a dependency and retention."""
    ledger = workdir / "ledger"
    set_config(spool, retry_delay="0.05", keep=2)
    submit("a", f"echo 'a start' >> {ledger}; echo 'a end' >> {ledger}\n", spool=spool)
    flag = workdir / "b.failed-once"
    submit("b", f"if [ -e {flag} ]; then echo 'b2 start' >> {ledger}; echo 'b2 end' >> {ledger}; exit 0; fi\n"
                f"touch {flag}; echo 'b1 start' >> {ledger}; echo 'b1 end' >> {ledger}; exit 1\n", "--retries", "1",
           spool=spool)
    submit("c", f"echo 'c start' >> {ledger}; echo 'c end' >> {ledger}\n", "--after", "a", spool=spool)
    return ledger


EXPECTED = {"a": 1, "b1": 1, "b2": 1, "c": 1}


def driver_argv() -> list[str]:
    return [sys.executable, "-m", "onite", "run", "-q"]


def traced_driver(strace_pid: int) -> list[int]:
    """The driver strace runs (a list of one once it runs): its child that runs Python, not a short-lived
    child strace forks for itself at its start (to probe the kernel), which exits at once."""
    found = []
    for task in Path(f"/proc/{strace_pid}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:3] == [os.fsencode(sys.executable), b"-m", b"onite"]:
                found.append(int(pid))
    return found


def driver_env(spool: Path) -> dict:
    return dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))


def drain_killing_at_second_chdir(spool: Path, key: str) -> list[int]:
    """Drain under strace, which kills each traced process at its second chdir (a monitor, or the
    child opening a PAM session: the one back to / once the job's interpreter runs); wait for the
    driver's exit, then stop and return the processes of job ``key`` still running."""
    from onite.exec import contain
    from onite.exec.processes import find_run_processes, stop_processes

    traced = subprocess.Popen([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=chdir",
                               "-e", "inject=chdir:signal=KILL:when=2", *driver_argv()], env=driver_env(spool))
    try:  # strace waits for every process it traces: the driver's exit is what counts
        [driver] = wait_for(lambda: traced_driver(traced.pid), what="the driver to start")
        wait_for(lambda: not Path(f"/proc/{driver}").exists() or contain.is_zombie(driver), timeout=60,
                 what="the driver to exit")
    finally:
        traced.kill()
        traced.wait(timeout=30)
    find = lambda: find_run_processes(str(spool), key, lambda run_id: True)  # noqa: E731
    left = find()
    stop_processes(find, 0.0)
    return left


def count_syscalls(spool: Path, syscalls: list[str]) -> dict[str, int]:
    """How often an undisturbed driver makes each system call on this workload (strace -c)."""
    out = spool.parent / "strace-count"
    subprocess.run([STRACE, "-qq", "-c", "-U", "name,calls", "-o", str(out), "-e", f"trace={','.join(syscalls)}",
                    *driver_argv()], env=driver_env(spool), check=True, timeout=120, capture_output=True)
    counts = {}
    for line in out.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in syscalls and words[1].isdigit():
            counts[words[0]] = int(words[1])
    return counts


def settle(spool: Path) -> None:
    """Drain until every job is filed: recovery, adopted jobs, retries."""
    for _ in range(5):
        proc = drain(spool)
        assert proc.returncode == 0, proc.stderr
        claims = [p for p in (spool / "running").glob("*/*") if "@" not in p.name and not p.name.startswith(".")]
        queued = [p for p in (spool / "jobs").glob("*/*") if not p.name.startswith(".")]
        if not claims and not queued:
            return
    raise AssertionError(f"still claimed or queued: {claims + queued}")


def check_exactly_once(spool: Path, ledger: Path, what: str) -> None:
    assert runs_of(ledger) == EXPECTED, f"{what}: {ledger.read_text()}\n" + "\n".join(log_lines(spool)[-30:])
    for name in "bc":  # keep = 2: a's result may have been pruned (its ledger says it ran once)
        assert result(spool, name)["state"] == "done", f"{what}: {name}"
    assert result(spool, "b")["attempt"] == 2
    assert not [p for p in (spool / "running").glob("*/*") if not p.name.startswith(".")], what
    # and the log tells each end once (a driver killed between removing a filed job's
    # run record and logging its end left no line, and recovery could not know)
    ends = [line.split(" ")[3] for line in log_lines(spool) if line.split(" ")[2:3] == ["done"]]
    assert sorted(ends) == ["root:a", "root:b", "root:c"], f"{what}: {ends}"


# vfork: the driver starts a monitor; sendmsg: it sends a monitor a run (onite.exec.local)
SYSCALLS = ["rename", "renameat2", "unlink", "write", "vfork", "clone", "mkdir", "memfd_create", "sendmsg"]


@pytest.fixture(scope="module")
def durable_steps(tmp_path_factory) -> dict[str, int]:
    """How often an undisturbed driver makes each of SYSCALLS on the workload (counted once per module)."""
    from conftest import init_spool_at

    folder = tmp_path_factory.mktemp("probe")
    probe_spool = init_spool_at(folder / "spool")
    workload(probe_spool, folder)
    counts = count_syscalls(probe_spool, SYSCALLS)
    forks = counts.get("sendmsg", 0)  # runs sent to monitors
    assert counts.get("rename", 0) + counts.get("renameat2", 0) >= 6 and forks >= 4, counts
    return counts


@needs_strace
@pytest.mark.slow
@pytest.mark.parametrize("syscall", SYSCALLS)
def test_a_driver_killed_before_any_durable_step_runs_nothing_twice_and_loses_nothing(tmp_path, durable_steps,
                                                                                        syscall):
    """kill -9 of the driver before its Nth rename, unlink, write, fork, …, for every N."""
    from conftest import init_spool_at

    total = durable_steps.get(syscall, 0)
    kills = 0
    for n in range(1, total + 1):
        where = tmp_path / f"{syscall}-{n}"
        where.mkdir()
        spool = init_spool_at(where / "spool")
        ledger = workload(spool, where)
        proc = subprocess.run([STRACE, "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
                               "-e", f"inject={syscall}:signal=KILL:when={n}", *driver_argv()],
                              env=driver_env(spool), timeout=120, capture_output=True)
        kills += proc.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)
        settle(spool)
        check_exactly_once(spool, ledger, f"killed before {syscall} #{n}")
        shutil.rmtree(where, ignore_errors=True)
    # a driver may make one call fewer than the probe's (one message to a monitor fewer): the last N may miss
    assert kills >= (total + 1) // 2, f"only {kills} kills of {total}: the injection did not take"


KILLS = 16  # drivers killed by the random harness, each at a random moment of its drain


@pytest.mark.slow
def test_several_drivers_killed_at_random_never_run_a_job_twice(spool, workdir):
    """Three drivers (hosts) share the spool while jobs are spooled; one of them is killed -9 at
    random moments, again and again. Seeded, so that a failure can be replayed. Killing drivers
    changes no job's outcome: each ends as it would in a night where none died (a job over its time
    limit times out, and what waits for it fails)."""
    rng = random.Random(int(os.environ.get("ONITE_CHAOS_SEED", "1124")))
    ledger = workdir / "ledger"
    set_config(spool, retry_delay="0.05", keep=500, kill_grace="1s")
    names = []
    expected: dict[str, tuple[str, str | None]] = {}  # name -> (state, reason it fails with)

    def spool_some(count: int) -> None:
        for _ in range(count):
            name = f"j{len(names):03d}"
            names.append(name)
            if rng.random() < 0.1:  # over its time limit, and a job that waits for it
                body = f"echo \"{name} start $$\" >> {ledger}; sleep 2; echo \"{name} end $$\" >> {ledger}\n"
                submit(name, body, "--timeout", "0.3", "-p", str(rng.randint(1, 7)))
                expected[name] = ("failed", "timeout")
                after = f"{name}-after"
                submit(after, f"echo \"{after} start $$\" >> {ledger}\n", "--after", name)
                names.append(after)
                expected[after] = ("failed", None)
                continue
            expected[name] = ("done", None)
            pause = rng.choice(["0", "0.05", "0.2", "0.5"])
            fail = rng.random() < 0.2
            flag = workdir / f"{name}.failed"
            body = (f"n={name}; [ -e {flag} ] && n={name}-2; echo \"$n start $$\" >> {ledger}; sleep {pause}; "
                    f"echo \"$n end $$\" >> {ledger}; ")
            body += f"[ -e {flag} ] && exit 0; touch {flag}; exit 1\n" if fail else "exit 0\n"
            submit(name, body, *(["--retries", "1"] if fail else []), "-p", str(rng.randint(1, 7)))

    drivers: dict[str, subprocess.Popen] = {}
    finals: dict[str, tuple] = {}

    def watch_results() -> None:
        for path in (spool / "jobsdone").glob("*@result"):
            try:
                rec = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            key = (rec["state"], rec["run_id"], rec["attempt"])
            name = rec["name"].removeprefix("root:")
            if name in finals:
                assert finals[name] == key, f"the final result of {name} changed: {finals[name]} -> {key}"
            finals[name] = key

    def keep_drivers_running() -> None:
        for host in ("h1", "h2", "h3"):
            proc = drivers.get(host)
            if proc is None or proc.poll() is not None:
                drivers[host] = start_driver(spool, "--host", host, "--slots", "2", "-q")

    spool_some(20)
    kills = 0
    deadline = time.monotonic() + 300  # only if drivers never get to be killed
    try:
        while kills < KILLS and time.monotonic() < deadline:
            keep_drivers_running()
            time.sleep(rng.uniform(0.05, 0.6))  # a random moment of their drain is what is killed
            victim = drivers[rng.choice(sorted(drivers))]
            if victim.poll() is None:
                victim.kill()
                victim.wait()
                kills += 1
            if rng.random() < 0.5:
                spool_some(rng.randint(1, 4))
            watch_results()
    finally:
        for proc in drivers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in drivers.values():
            proc.wait(60)
    for host in ("h1", "h2", "h3"):  # each host recovers its own claims
        assert drain(spool, "--host", host).returncode == 0
    watch_results()
    settle(spool)
    watch_results()
    starts: dict[str, int] = {}
    for words in ledger_lines(ledger):
        if words[1] == "start":
            starts[words[0]] = starts.get(words[0], 0) + 1
    twice = {name: count for name, count in starts.items() if count > 1}
    assert not twice, f"run more than once: {twice}"
    lost = [name for name in names if name not in finals]
    assert not lost, f"lost: {lost}"
    for name in names:
        assert finals[name][0] == expected[name][0], (name, finals[name])
        if expected[name][1] is not None:
            reason = json.loads((spool / "jobsdone" / f"root:{name}@result").read_text())["reason"]
            assert reason == expected[name][1], (name, reason)
    ended = {words[0] for words in ledger_lines(ledger) if words[1] == "end"}
    assert not {name for name, want in expected.items() if want[1] == "timeout"} & ended  # none outran its limit
    assert not {name for name in names if name.endswith("-after")} & set(starts)  # no dependent of one ran
    assert kills == KILLS
    reruns = [line for line in log_lines(spool) if " recovered " in line and "rerun" in line]
    assert not reruns, reruns  # only the drivers died: every monitor kept its job's end


@pytest.fixture
def small_disk(world_tmp, monkeypatch):
    """A spool on a 2 MB tmpfs of its own (ONITE_SPOOL points at it), and that tmpfs: a disk to fill."""
    if not ROOT:
        pytest.skip("needs root to mount a small tmpfs as a full disk")
    mnt = world_tmp / "disk"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        os.chmod(mnt, 0o755)
        from conftest import init_spool_at

        spool = init_spool_at(mnt / "spool")
        monkeypatch.setenv("ONITE_SPOOL", str(spool))
        yield mnt, spool
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(filler: Path, chunk: int = 65536) -> Path:
    """Fill the small disk with the file ``filler``, ``chunk`` bytes at a time; that file."""
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * chunk)
                handle.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_starts_nothing_and_loses_nothing(small_disk, workdir):
    mnt, spool = small_disk
    ledger = workdir / "ledger"
    for i in range(20):
        submit(f"j{i:02d}", f"echo 'j{i:02d} start' >> {ledger}\n", spool=spool)
    filler = fill(mnt / "filler")
    proc = drain(spool)
    assert proc.returncode == 4, proc.stderr
    assert b"cannot record" in proc.stderr, proc.stderr
    assert not ledger.exists() or not ledger.read_text()  # nothing ran
    assert len([p for p in (spool / "jobs" / "P4").iterdir() if not p.name.startswith(".")]) == 20
    filler.unlink()
    settle(spool)
    assert runs_of(ledger) == {f"j{i:02d}": 1 for i in range(20)}


def test_a_quiet_drain_on_a_full_disk_says_one_line(small_disk):
    """``onite run -q`` on a full spool (cron's drain) said two lines on stderr: the log's own
    ``onite: cannot write the log …`` and then the driver's error, which names that same reason.
    The driver's error is the one line."""
    mnt, spool = small_disk
    submit("j", "true\n", spool=spool)
    filler = fill(mnt / "filler")
    proc = drain(spool, "-q")
    filler.unlink()
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 4, lines
    assert len(lines) == 1 and lines[0].startswith("onite: cannot record a run"), lines


def test_a_full_disk_stops_a_drain_of_a_long_queue_at_once(small_disk):
    """With 300 jobs queued on a full disk the driver claimed one job after another,
    failing each one's record and putting it back, and never looked at a signal: it ran for minutes,
    deaf to TERM. Now it stops at the first start it cannot record, and exits 4."""
    mnt, spool = small_disk
    r = run_cli(["submit", "L", "--lines", "-q"], stdin=b"".join(b"echo %d\n" % i for i in range(300)))
    assert r.code == 0, r
    filler = fill(mnt / "filler")
    driver = start_driver(spool, "-q")
    try:
        code = driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert code == 4, driver.stderr.read()
    assert sum(" cannot-record " in line for line in log_lines(spool)) <= 1
    assert len([p for p in (spool / "jobs" / "P4").iterdir() if not p.name.startswith(".")]) == 300
    filler.unlink()


def test_a_job_cancelled_on_a_full_disk_is_filed_once_there_is_room(small_disk):
    """A queued job cancelled while the disk was full was deleted: no queue file, no
    cancel/ entry, no result, no log line, whether root filed it at once or a driver filed a user's
    withdrawal. It stays withdrawn (it never runs) and is filed as cancelled once there is room."""
    mnt, spool = small_disk
    submit("rootjob", "echo a\n", spool=spool)
    assert run_cli(["submit", "userjob"], stdin=b"echo b\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["cancel", "userjob"], user="nobody", cwd="/tmp").code == 0  # withdrawn; a driver files it
    filler = fill(mnt / "filler")
    r = run_cli(["cancel", "rootjob"])
    assert r.code == 0 and "it will not run" in r.out, r
    assert drain(spool).returncode == 4
    filler.unlink()
    assert drain(spool).returncode == 0
    for key in ("root:rootjob", "nobody:userjob"):
        assert result(spool, key)["state"] == "cancelled", key
        assert (spool / "jobsdone" / key).exists(), key
    assert not list((spool / "jobs").glob("*/*job"))


def test_a_log_and_a_stderr_over_the_file_size_limit_do_not_stop_a_drain(spool, workdir):
    """Under ``ulimit -f`` with stderr a file (cron's ``2>>file``), once onite.log
    reached the limit the driver's line saying so could not be written either, and it died mid-drain:
    exit 1, a finished job left claimed, the rest unrun. Its drain goes on; it says so once."""
    import resource

    set_config(spool, keep=100)
    r = run_cli(["submit", "u", "--lines", "-q"], stdin=b"".join(b"echo %d\n" % i for i in range(60)))
    assert r.code == 0, r
    err = workdir / "driver.err"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))

    with open(err, "wb") as stderr:
        proc = subprocess.run(driver_argv(), env=driver_env(spool), stdout=subprocess.DEVNULL, stderr=stderr,
                              preexec_fn=limit, timeout=120)
    said = err.read_text()
    assert proc.returncode in (0, 4), said
    assert not [p for p in (spool / "running").glob("*/*") if "@" not in p.name and not p.name.startswith(".")]
    assert said.count("cannot write the log") <= 1, said
    settle(spool)
    assert len(list((spool / "jobsdone").glob("root:u-*@result"))) == 60


def test_a_hosts_first_drain_out_of_inodes_is_one_line(world_tmp):
    """A host's first drain makes running/HOST/; on a file system out of inodes that
    ended in a traceback, exit 1. It is one line, exit 4, and the queue is as it was."""
    if not ROOT:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = world_tmp / "inodes"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,nr_inodes=40", "tmpfs", str(mnt)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        from conftest import init_spool_at

        spool = init_spool_at(mnt / "spool")
        spare = mnt / "spare"
        spare.touch()
        spooled = 0
        while run_cli(["--spool", str(spool), "submit", f"j{spooled}", "-q"], stdin=b"true\n").code == 0:
            spooled += 1  # until no inode is left
        assert spooled
        spare.unlink()  # one left: the driver's lock takes it
        proc = drain(spool)
        assert proc.returncode == 4 and b"Traceback" not in proc.stderr, proc.stderr
        assert b"No space left on device" in proc.stderr, proc.stderr
        assert len(list((spool / "jobs" / "P4").iterdir())) == spooled
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_disk_a_job_fills_leaves_no_heartbeat_of_a_gone_driver(small_disk):
    """A job fills the spool's disk with its output: the driver cannot record, and exits 4. Its last
    heartbeat cannot be written either: it is removed, not left saying a gone driver drains."""
    _, spool = small_disk
    submit("filler", "head -c 4000000 /dev/zero\n", spool=spool)
    submit("after", "true\n", spool=spool)
    proc = drain(spool)
    assert proc.returncode == 4, proc.stderr
    beats = list(spool.glob("driver.*.state"))
    assert all('"draining"' not in p.read_text() for p in beats), [p.read_text() for p in beats]


def python_descendants(pid: int) -> list[int]:
    """The Python processes below ``pid``: a driver's monitors (not the jobs' shells)."""
    children: dict[int, list[int]] = {}
    comm: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            head, _, rest = text.rpartition(") ")
            comm[int(entry.name)] = head.partition(" (")[2]
            children.setdefault(int(rest.split()[1]), []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        todo.extend(children.get(child, []))
        if comm.get(child, "").startswith("python"):
            found.append(child)
    return found


def traced(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone: nothing to wait for
    return any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in status.splitlines())


@needs_strace
@needs_root
def test_a_job_whose_monitor_cannot_record_itself_never_starts(spool, workdir):
    """Recovery takes a run record without its monitor's line for a job that never started, and runs
    it: so a monitor that cannot append that line (strace fails every write to the record, as a full
    disk or an I/O error would) must start nothing. The driver puts the job back and starts nothing
    more (exit 4); killed instead, it leaves the job to run once."""
    ledger, gate, release = workdir / "ledger", workdir / "gate", workdir / "release"
    submit("opener", f"echo 'opener start' >> {ledger}; while [ ! -e {gate} ]; do sleep 0.05; done\n", "-p", "1")
    submit("victim", f"echo 'victim start' >> {ledger}; while [ ! -e {release} ]; do sleep 0.05; done\n", "-p", "2")
    driver = start_driver(spool)
    tracer = None
    try:
        wait_for(lambda: runs_of(ledger).get("opener") == 1, what="the first job to start")
        helpers = wait_for(lambda: python_descendants(driver.pid), what="the driver's monitors")
        record = spool / "running" / HOST / "root:victim@run"
        tracer = subprocess.Popen([STRACE, "-qq", "-f", "-o", "/dev/null", "-P", str(record), "-e", "trace=write",
                                   "-e", "inject=write:error=EIO", *[f"-p{pid}" for pid in helpers]],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: all(traced(pid) for pid in helpers), what="strace to attach")
        gate.touch()  # the opener ends: the victim goes to a monitor whose every write to its record fails
        wait_for(lambda: driver.poll() is not None or runs_of(ledger).get("victim"), what="the victim's fate")
    finally:
        if driver.poll() is None:
            os.kill(driver.pid, signal.SIGKILL)  # a driver that started the victim dies with it unrecorded
        code = driver.wait()
        if tracer is not None:
            tracer.terminate()
            tracer.wait(30)
        release.touch()
    settle(spool)
    assert runs_of(ledger) == {"opener": 1, "victim": 1}, ledger.read_text()
    assert code == 4, driver.stderr.read()
    assert [line for line in log_lines(spool) if " cannot-record " in line and "victim" in line]
    assert result(spool, "victim")["state"] == "done"


@needs_root
def test_a_job_killed_for_its_memory_while_no_driver_was_alive_keeps_its_start(spool, workdir):
    """A job that ran, and was killed for its memory while no driver was alive, was
    filed by recovery with no start, as if it had never run: "never started" was read from a reason
    on a run not yet announced, and a recovered run never is. Only a start that failed says so now."""
    ledger, gate = workdir / "ledger", workdir / "gate"
    hog = "/usr/bin/python3 -c 'x = bytearray(400 << 20); import time; time.sleep(1)'"
    submit("hog", f"echo 'hog start' >> {ledger}; while [ ! -e {gate} ]; do sleep 0.05; done; exec {hog}\n",
           "--mem", "64M")
    driver = start_driver(spool)
    try:
        wait_for(lambda: runs_of(ledger).get("hog") == 1, what="the job to start")
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    gate.touch()
    record = spool / "running" / HOST / "root:hog@run"
    wait_for(lambda: b'"event":"ended"' in record.read_bytes(), what="its monitor to record its end")
    settle(spool)
    done = result(spool, "hog")
    assert "out of memory" in done["reason"] and done["started"] is not None, done
    assert runs_of(ledger) == {"hog": 1}


@needs_strace
@needs_root
def test_an_adopted_run_whose_job_never_started_is_filed_with_no_start(spool, world_tmp):
    """A job whose directory was gone, its driver killed while its monitor was
    finding that out (strace holds each chdir 3 s): the next driver adopted the live monitor and
    filed the job with the claim's start, though it never started."""
    gone = world_tmp / "gone"
    gone.mkdir()
    r = run_cli(["submit", "gone"], stdin=b"true\n", cwd=gone)
    assert r.code == 0, r
    gone.rmdir()
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    tracer = subprocess.Popen([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=chdir",
                               "-e", "inject=chdir:delay_enter=3000000", sys.executable, "-m", "onite", "run"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        record = spool / "running" / HOST / "root:gone@run"
        wait_for(lambda: record.exists() and b'"event":"monitor"' in record.read_bytes(), what="its monitor")
        state = json.loads(next(spool.glob("driver.*.state")).read_text())
        os.kill(state["pid"], signal.SIGKILL)
        settle(spool)
    finally:
        os.killpg(tracer.pid, signal.SIGKILL)
        tracer.wait()
    assert any(" recovered root:gone " in line and "adopted" in line for line in log_lines(spool)), log_lines(spool)
    done = result(spool, "gone")
    assert done["reason"] == f"its directory {gone} no longer exists" and done["started"] is None, done


@needs_strace
def test_a_job_whose_exit_status_was_lost_keeps_its_start(spool, workdir):
    """A job that ran, whose monitor lost its exit status (strace makes its waitid
    fail with ECHILD, as when something else reaps it), was filed with no start, and ``output``
    said it did not run: a ``failed`` line after the job's own is not a start that failed."""
    ledger = workdir / "ledger"
    submit("lost", f"echo 'lost start' >> {ledger}; sleep 0.5\n")
    subprocess.run([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=waitid",
                    "-e", "inject=waitid:error=ECHILD:delay_enter=300000", *driver_argv()],
                   env=driver_env(spool), timeout=120, capture_output=True)
    settle(spool)
    done = result(spool, "lost")
    assert "exit status was lost" in done["reason"] and done["started"] is not None, done
    assert runs_of(ledger) == {"lost": 1}
    r = run_cli(["output", "lost"])
    assert "did not run" not in r.err, r


@needs_strace
def test_a_job_a_hard_stop_ended_goes_back_to_its_queue_when_its_driver_dies_before_putting_it_back(spool, workdir):
    """A hard stop (SIGQUIT) ended a job, and its driver was killed (strace, at the rename that puts the job back)
    before it put it back: the next driver filed the run as failed, "interrupted", where the live driver would have
    queued it again. It goes back to its queue, and runs again."""
    ledger, started = workdir / "ledger", workdir / "started"
    submit("cut", f"echo 'cut start' >> {ledger}; [ -e {started} ] && exit 0; touch {started}; sleep 300\n", "-p", "4")
    driver = subprocess.Popen(driver_argv(), env=driver_env(spool), start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(started.exists, what="the job to start")
        back = spool / "jobs" / "P4" / "root:cut"  # strace kills the driver at the rename that would put it there
        tracer = subprocess.Popen([STRACE, "-qq", "-o", "/dev/null", "-P", str(back), "-e", "inject=all:signal=KILL",
                                   "-p", str(driver.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: traced(driver.pid), what="strace to attach")
            os.kill(driver.pid, signal.SIGQUIT)
            assert driver.wait(timeout=60) == -signal.SIGKILL
        finally:
            tracer.kill()
            tracer.wait()
    finally:
        driver.kill()
        driver.wait()
    assert (spool / "running" / HOST / "root:cut").exists()  # killed before it put it back
    drain(spool)
    assert any(" recovered root:cut " in line and "rerun: requeued" in line for line in log_lines(spool))
    assert result(spool, "cut")["state"] == "done"
    assert runs_of(ledger) == {"cut": 2}


def test_status_and_reload_signals_never_kill_a_driver_starting_or_ending(spool, workdir):
    """USR1 and HUP sent as soon as the driver's pid can be read (its lock), and on until it has
    exited: it logs a status line and reloads; it never dies of them."""
    lock = spool / "locks" / f"driver.{HOST}.lock"
    for attempt in range(3):
        submit(f"quick{attempt}", "true\n")
        proc = start_driver(spool, "-q")
        sent = 0
        while proc.poll() is None and sent < 400:
            try:
                text = lock.read_text()
            except OSError:
                text = ""
            if f"pid={proc.pid}" in text:
                for sig in (signal.SIGUSR1, signal.SIGHUP):
                    try:
                        os.kill(proc.pid, sig)
                        sent += 1
                    except ProcessLookupError:
                        break
                time.sleep(0.002)
        assert proc.wait(30) == 0, (sent, proc.stderr.read() if proc.stderr else "")
        assert sent, "no signal was sent while it ran"
        assert result(spool, f"quick{attempt}")["state"] == "done"


def test_a_detached_driver_survives_signals_sent_at_once(spool, workdir):
    submit("detached", f"touch {workdir}/ran\n")
    r = run_cli(["run", "--detach"])
    assert r.code == 0, r
    pid = int(r.out.split("pid ")[1].split(")")[0])
    for _ in range(20):
        for sig in (signal.SIGUSR1, signal.SIGHUP):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    wait_for((workdir / "ran").exists, what="the detached driver to run the job")
    wait_for(lambda: any(" driver-exit " in line for line in log_lines(spool)), what="the driver to exit")
    assert result(spool, "detached")["state"] == "done"


@pytest.mark.alone  # it sweeps (or looks at) the folder of job cgroups that every driver here shares
def test_empty_job_cgroups_that_killed_drivers_left_are_swept_once_old():
    """A monitor killed before it gave its slot's cgroup to a run leaves an empty cgroup no record
    names, and a driver killed as it starts may leave the probe it makes to learn it may make cgroups:
    a starting driver removes those, but only empty ones, only slot and probe names, and only old
    ones (a monitor may be about to join a young one)."""
    from onite.exec import contain

    found = contain.discover(True)
    if found.kind != contain.CGROUP2:
        pytest.skip(f"no writable cgroup v2 tree here ({found.why}): nothing to sweep")
    leftover, busy, other, probe = (f"{found.base}/{n}" for n in
                                    (f"{contain.SLOT}99999-1", f"{contain.SLOT}99999-2", "not-a-slot",
                                     f"{contain.PROBE}99999"))
    for path in (leftover, busy, other, probe):
        os.makedirs(path, exist_ok=True)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        Path(f"{busy}/cgroup.procs").write_text(str(sleeper.pid))
        contain.sweep_stale([found.base], older_than=3600)
        assert os.path.isdir(leftover) and os.path.isdir(probe)  # young: kept
        contain.sweep_stale([found.base], older_than=0)
        assert not os.path.exists(leftover) and not os.path.exists(probe)
        assert os.path.isdir(busy) and sleeper.poll() is None  # populated: kept, its process untouched
        assert os.path.isdir(other)  # not a slot's
    finally:
        sleeper.kill()
        sleeper.wait()
        contain.remove_cgroup(busy)
        os.rmdir(other)


@pytest.mark.alone  # it sweeps (or looks at) the folder of job cgroups that every driver here shares
def test_a_driver_leaves_no_empty_folder_of_job_cgroups_in_its_own_cgroup(spool, workdir):
    """A driver makes its jobs' cgroups in a folder under its own cgroup (``<cgroup>/onite``). Left
    there empty, it would keep whatever made the driver's cgroup (a supervisor that is not systemd)
    from removing it: the driver removes it as it ends. A driver that shares its cgroup with another
    makes the folder again for its next job if the other removed it."""
    import uuid

    from onite.exec import contain

    found = contain.discover(True)
    if found.kind != contain.CGROUP2:
        pytest.skip(f"no writable cgroup v2 tree here ({found.why}): no folder of job cgroups")
    if Path(f"{found.base}/cgroup.subtree_control").read_text().strip():
        pytest.skip("the folder holds controllers for limits here: a driver leaves it (contain.remove_base)")
    own = f"{contain.cgroup_mounts('/proc/self/mountinfo')[contain.CGROUP2]}/onite-test-{uuid.uuid4().hex[:8]}"  # the driver's
    os.mkdir(own)
    try:
        submit("a", f"cat /proc/self/cgroup > {workdir}/a.cg\n")
        done = subprocess.run(["sh", "-c", f'echo $$ > {own}/cgroup.procs && exec "$0" -m onite run -q',
                               sys.executable], capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"{os.path.basename(own)}/onite/" in (workdir / "a.cg").read_text()  # it ran in the folder
        assert not os.path.exists(f"{own}/onite")
    finally:
        os.rmdir(own)  # fails if the driver left its folder there
    folder = f"{own}-gone/onite"  # what another driver's end leaves: no folder, then a job of ours
    os.mkdir(os.path.dirname(folder))
    try:
        assert contain.make_cgroup(f"{folder}/20261124T010203-vm-1-1")
        assert os.path.isdir(f"{folder}/20261124T010203-vm-1-1")
        contain.remove_base(contain.Containment(contain.CGROUP2, folder))
        assert os.path.isdir(folder)  # a run's cgroup is still in it
        os.rmdir(f"{folder}/20261124T010203-vm-1-1")
        contain.remove_base(contain.Containment(contain.CGROUP2, folder))
        assert not os.path.exists(folder)
    finally:
        for path in (f"{folder}/20261124T010203-vm-1-1", folder, os.path.dirname(folder)):
            if os.path.isdir(path):
                os.rmdir(path)


SUBREAPER_DRIVER = """
import sys
from onite.drain.driver import Driver
from onite.exec.contain import SUBREAPER, Containment
from onite.spool.paths import SpoolDir
driver = Driver(SpoolDir(sys.argv[1]))
driver._containment = Containment(SUBREAPER, why="a test: a host without cgroup v2")
sys.exit(driver.run())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are root's to make")
def test_what_a_killed_run_left_outside_its_group_is_killed_by_its_v1_groups_before_it_runs_again(spool, workdir):
    """A host with no cgroup v2 for jobs but v1 limit groups: the driver and the job's monitor are
    killed, and the job had started a process in a session of its own (outside its process group).
    Before the job runs again, recovery kills that process too: it is in the run's v1 groups."""
    from onite.exec.limits import discover

    if not discover(None).v1:
        pytest.skip("this machine has no cgroup v1 memory controller")
    pids, marker = workdir / "pids", workdir / "started"
    body = (f"setsid sleep 300 & echo $! >> {pids}; [ -e {marker} ] && exit 0; touch {marker}; sleep 60\n")
    assert run_cli(["submit", "escaper"], stdin=body.encode()).code == 0
    env = dict(os.environ, PYTHONPATH=str(REPO))
    first = subprocess.Popen([sys.executable, "-c", SUBREAPER_DRIVER, str(spool)], env=env, start_new_session=True)
    wait_for(marker.exists, what="the job to start")
    record = wait_for(lambda: next((spool / "running").glob("*/root:escaper@run"), None), what="the run record")
    monitor = wait_for(lambda: next((json.loads(line)["pid"] for line in record.read_text().splitlines()
                                     if '"monitor"' in line), None), what="the monitor's line")
    escaped = int(wait_for(lambda: pids.read_text().split() or None, what="the escaped process")[0])
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    os.kill(monitor, signal.SIGKILL)  # as if the machine's OOM killer took it: nothing recorded the end
    second = subprocess.run([sys.executable, "-c", SUBREAPER_DRIVER, str(spool)], env=env, timeout=120)
    assert second.returncode == 0
    assert result(spool, "escaper")["state"] == "done"
    try:
        wait_for(lambda: not os.path.exists(f"/proc/{escaped}") or
                 Path(f"/proc/{escaped}/stat").read_text().split(") ")[1].startswith("Z"),
                 what="the first run's escaped process to be killed", timeout=10)
    finally:
        for pid in pids.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


@needs_root
def test_a_claim_whose_file_its_owner_changed_is_recovered_from_its_record_never_run_again(spool, workdir):
    """A claimed job file in running/HOST/ is still its owner's, who may rewrite it while it runs. A
    driver killed meanwhile: the next one recovers the run from its record (root's), whether the job
    ended while no driver watched it (it is filed) or still runs (it is adopted): it never runs again
    for what its file says now."""
    import signal

    gates = {name: workdir / f"{name}.gate" for name in ("ended", "running")}
    for name, gate in gates.items():
        body = f"echo ran >> {workdir}/{name}.ledger\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n"
        assert run_cli(["submit", name], stdin=body.encode()).code == 0
    set_config(spool, slots=2)
    driver = start_driver(spool)
    for name in gates:
        wait_for(lambda: (workdir / f"{name}.ledger").exists(), what=f"{name} to start")
        wait_for(lambda: '"job"' in next((spool / "running").glob(f"*/root:{name}@run")).read_text(),
                 what=f"{name}'s monitor to record it")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    for name in gates:
        [claim] = list((spool / "running").glob(f"*/root:{name}"))
        claim.write_text("not a job any more\n")  # as its owner may
    gates["ended"].touch()
    [record] = list((spool / "running").glob("*/root:ended@run"))
    wait_for(lambda: '"ended"' in record.read_text(), what="the job to end while no driver runs")
    later = start_driver(spool)
    wait_for(lambda: (spool / "jobsdone" / "root:ended@result").exists(), what="the ended job to be filed")
    gates["running"].touch()
    assert later.wait(timeout=60) == 0
    for name in gates:
        assert result(spool, name)["state"] == "done", result(spool, name)
        assert (workdir / f"{name}.ledger").read_text() == "ran\n"  # once
    assert not any(" requeued " in line or "rerun" in line for line in log_lines(spool)), log_lines(spool)


@needs_root
@needs_strace
def test_a_retry_whose_driver_died_before_clearing_its_name_keeps_it(spool, workdir, tmp_path):
    """The driver spools a job's retry and is killed just after it got its key, while nobody's forgery
    at that key, put in another queue while the retry was being written, has an earlier ctime than
    the retry's. Recovery drops the stale claim: the retry runs, once, and nobody's file never does."""
    from conftest import as_user, init_spool_at
    from test_attacks import job_file

    def spool_b(target: Path, where: Path) -> Path:
        ledger, flag = where / "ledger", where / "failed-once"
        set_config(target, retry_delay="0.05")
        submit("b", f"echo ran >> {ledger}; [ -e {flag} ] && exit 0; touch {flag}; exit 1\n", "-p", "5",
               "--retries", "1", spool=target)
        return ledger

    # which renameat2 of an undisturbed drain gives the retry its key (the first to jobs/P5/root:b)
    (tmp_path / "probe").mkdir()
    spool_b(init_spool_at(tmp_path / "probe" / "spool"), tmp_path / "probe")
    trace = tmp_path / "trace"
    subprocess.run([STRACE, "-qq", "-o", str(trace), "-e", "trace=renameat2", *driver_argv()],
                   env=driver_env(tmp_path / "probe" / "spool"), check=True, timeout=120, capture_output=True)
    calls = [line for line in trace.read_text().splitlines() if line.startswith("renameat2(")]
    n = next(i for i, line in enumerate(calls, 1) if '/jobs/P5/root:b"' in line)

    ledger = spool_b(spool, workdir)
    # hold the driver before that rename (long enough to plant) and after it (until it is killed)
    traced = subprocess.Popen([STRACE, "-qq", "-o", "/dev/null", "-e", "trace=renameat2", "-e",
                               f"inject=renameat2:delay_enter=1000000:delay_exit=60000000:when={n}",
                               *driver_argv()], env=driver_env(spool))
    folder = spool / "jobs" / "P5"
    wait_for(lambda: any(p.name.startswith(".root:b.") for p in folder.iterdir()), what="the retry being written")
    planted = job_file("root:b", "/tmp", b"true\n")

    def plant():
        fd = os.open(spool / "jobs" / "P1" / "root:b", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, planted)
        os.close(fd)
    assert as_user(plant) == ("ok", None)
    wait_for((folder / "root:b").exists, what="the retry to get its key")
    [driver] = traced_driver(traced.pid)
    os.kill(driver, signal.SIGKILL)  # pending: the driver dies as soon as strace lets it go
    traced.kill()  # (strace would hear of the death only once its delay is over)
    traced.wait(timeout=30)
    wait_for(lambda: not Path(f"/proc/{driver}").exists(), what="the driver to die")
    assert (spool / "jobs" / "P1" / "root:b").stat().st_ctime_ns < (folder / "root:b").stat().st_ctime_ns
    assert list((spool / "running").glob("*/root:b"))  # the stale claim is still there

    settle(spool)
    res = result(spool, "b")
    assert (res["user"], res["state"], res["attempt"]) == ("root", "done", 2), res
    assert ledger.read_text() == "ran\nran\n"  # each attempt once
    assert not any(" start root:b " in line and "user=nobody" in line for line in log_lines(spool)), log_lines(spool)
    assert any("dropped: its retry was already spooled" in line for line in log_lines(spool))
    assert any(" refused root:b " in line and "a forgery" in line for line in log_lines(spool)), log_lines(spool)


@needs_root
@needs_strace
def test_an_edit_the_driver_took_as_it_claimed_the_job_outlives_the_driver_killed_before_writing_it(spool):
    """nobody's edit, acknowledged (`changed; it keeps its place`), is taken by the driver as it claims the job;
    the driver is killed before the claimed file holds it (strace holds its fchown of the file as edited, the
    first fchown a driver makes). Recovery puts the job back in its queue, never started: it must run as
    edited. Found by a fault campaign: the edit was gone with the driver, and the job ran as first spooled."""
    r = run_cli(["submit", "x", "--mem", "10M"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 0, r
    r = run_cli(["edit", "x", "--mem", "20M", "--timeout", "1h"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "x: changed; it keeps its place\n"), r
    traced = subprocess.Popen([STRACE, "-qq", "-o", "/dev/null", "-e", "trace=fchown",
                               "-e", "inject=fchown:delay_enter=60000000:when=1", *driver_argv()],
                              env=driver_env(spool))
    claims = spool / "running" / HOST
    wait_for(lambda: not list((spool / "edit").iterdir()) and list(claims.glob(".nobody:x.*.tmp")),
             what="the driver to take the edit and write the claim as edited")
    [driver] = traced_driver(traced.pid)
    os.kill(driver, signal.SIGKILL)
    traced.kill()
    traced.wait(timeout=30)
    wait_for(lambda: not Path(f"/proc/{driver}").exists(), what="the driver to die")
    assert b"mem: 10M" in (claims / "nobody:x").read_bytes()  # the claim as first spooled
    settle(spool)
    assert any("recovered nobody:x action=requeued" in line for line in log_lines(spool)), log_lines(spool)
    assert result(spool, "nobody:x")["mem"] == 20
    assert b"timeout: 3600" in (spool / "jobsdone" / "nobody:x").read_bytes()


@needs_root
@needs_strace
def test_a_job_its_owner_cancelled_keeps_its_result_when_the_driver_filing_it_is_killed(spool):
    """nobody withdraws its queued job (`onite cancel`: `cancelled`); the driver, filing it, has moved it out of
    cancel/ into jobsdone/ under a dot-name (strace holds it just after that rename) when it is killed. The job
    must still end with its `cancelled` result. Before, it had none: the dot-name was left for retention to remove,
    and `list`, `wait` and its dependants found no trace of it. Found by reading the code for a fault campaign.
    Its job file, left under the dot-name, is put in place once a minute old (at a drain's end), so that it can be
    restarted: before, it was removed an hour later, and `onite restart` found nothing."""
    from onite.spool.cancels import STAGED_AGE, finish_filings
    from onite.spool.paths import SpoolDir

    assert run_cli(["submit", "x"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    r = run_cli(["cancel", "x"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "x: cancelled\n"), r
    [pending] = list((spool / "cancel").iterdir())
    traced = subprocess.Popen([STRACE, "-qq", "-o", "/dev/null", "-P", str(pending), "-e", "trace=rename",
                               "-e", "inject=rename:delay_exit=60000000:when=1", *driver_argv()], env=driver_env(spool))
    wait_for(lambda: not pending.exists(), what="the driver to move the withdrawn job out of cancel/")
    [driver] = traced_driver(traced.pid)
    os.kill(driver, signal.SIGKILL)
    traced.kill()
    traced.wait(timeout=30)
    wait_for(lambda: not Path(f"/proc/{driver}").exists(), what="the driver to die")
    settle(spool)
    done = result(spool, "nobody:x")
    assert (done["state"], done["reason"]) == ("cancelled", "cancelled by nobody"), done
    r = run_cli(["wait", "x"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (5, "x: cancelled by nobody\n"), r
    assert run_cli(["restart", "x"], user="nobody", cwd="/tmp").code == 1  # staged: not in place yet
    assert finish_filings(SpoolDir(spool), time.time()) == 0  # its filer may still be at it
    assert finish_filings(SpoolDir(spool), time.time() + STAGED_AGE) == 1  # as a drain's end a minute on does
    assert not [p for p in (spool / "jobsdone").iterdir() if p.name.startswith(".")]
    r = run_cli(["restart", "x"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "x\n"), r


@needs_strace
def test_a_driver_killed_as_it_creates_a_run_record_leaves_nothing_refused(spool, workdir):
    """The driver is killed before it writes the first line of a job's new run record (the record is created
    empty, before the job is claimed): nothing of the job happened. The next driver must run it once and set
    nothing aside: before, it moved the empty record to refused/ as damaged, with a `refused` line in the log
    and one more `refused` in the counts, for an admin to look into. Found by a fault campaign."""
    ledger = workdir / "ledger"
    submit("x", f"echo ran >> {ledger}\n", spool=spool)
    record = spool / "running" / HOST / "root:x@run"
    proc = subprocess.run([STRACE, "-qq", "-o", "/dev/null", "-P", str(record), "-e", "trace=write",
                           "-e", "inject=write:signal=KILL:when=1", *driver_argv()],
                          env=driver_env(spool), timeout=120, capture_output=True)
    assert record.exists() and record.stat().st_size == 0, proc.stderr
    settle(spool)
    assert ledger.read_text() == "ran\n" and result(spool, "x")["state"] == "done"
    assert not list((spool / "refused").iterdir()), log_lines(spool)
    assert not [line for line in log_lines(spool) if line.split()[2] == "refused"]


@needs_root
@needs_strace
def test_a_job_whose_monitor_dies_as_it_starts_it_leaves_nothing_running(spool, workdir):
    """The job's monitor is killed just after it started the job, before it recorded the job's pid
    (strace kills each monitor at its second chdir: the one back to / once the job's interpreter
    runs). The driver, alive, files the run as "monitor killed" and spools its retry: what the
    first copy left (its cgroup, its limit groups) must be killed first, or the retry runs beside
    it, unwatched; before, both copies ran on after the driver had exited."""
    set_config(spool, retry_delay="0.05")
    submit("slow", "sleep 60\n", "--retries", "1", spool=spool)
    left = drain_killing_at_second_chdir(spool, "root:slow")
    assert not left, f"processes of the job still run, unwatched: {left}"
    lines = log_lines(spool)
    assert sum("monitor of this job was killed" in line and line.split()[2] == "start-failed"
               for line in lines) == 2, lines  # each attempt's monitor died once its job had started
    assert result(spool, "slow")["state"] == "failed"


@needs_strace
def test_a_job_filed_as_its_driver_died_still_gets_its_line_in_the_log(spool, workdir):
    """The driver is killed as it removes the run record of a job it has just filed (result
    written, job moved to jobsdone/, its end logged: the line comes before
    the record goes, as a kill between the two would leave no line at all). Recovery finds the record and
    logs the end only if the log does not already say it for that run: once, either way. The log
    is what the morning report and a dependency's outcome are read from."""
    submit("u1", "exit 3\n", spool=spool)
    record = spool / "running" / HOST / "root:u1@run"
    subprocess.run([STRACE, "-qq", "-o", "/dev/null", "-P", str(record), "-e", "trace=unlink",
                    "-e", "inject=unlink:signal=KILL:when=1", *driver_argv()],
                   env=driver_env(spool), timeout=120, capture_output=True)
    assert result(spool, "u1")["state"] == "failed" and record.exists()
    settle(spool)
    lines = [line for line in log_lines(spool) if " failed root:u1 " in line]
    assert len(lines) == 1 and "exit=3" in lines[0] and "run=" in lines[0], log_lines(spool)
    assert not record.exists()
    # a record whose end the log lacks (a log that lost its last line) still gets it from recovery
    submit("u2", "exit 4\n", spool=spool)
    record = spool / "running" / HOST / "root:u2@run"
    subprocess.run([STRACE, "-qq", "-o", "/dev/null", "-P", str(record), "-e", "trace=unlink",
                    "-e", "inject=unlink:signal=KILL:when=1", *driver_argv()],
                   env=driver_env(spool), timeout=120, capture_output=True)
    log = spool / "onite.log"
    log.write_text("".join(line + "\n" for line in log_lines(spool) if " failed root:u2 " not in line))
    settle(spool)
    lines = [line for line in log_lines(spool) if " failed root:u2 " in line]
    assert len(lines) == 1 and "logged by recovery" in lines[0], log_lines(spool)


@pytest.mark.attack
def test_a_log_line_a_full_disk_cut_never_swallows_the_next_drains_lines(small_disk):
    """nobody fills the spool's disk with a dot-file in a queue (no listing shows it) and removes it later.
    The driver's first line on the full disk crossed a page of onite.log and was cut where the room ended;
    the next drain's driver-start line was appended to that half line, so no drain seemed to start: the
    morning report ended at the drain before, and daemon's payroll, run and filed, was in no report.
    A line is written whole or not at all, and the next starts on a line of its own."""
    import re
    from datetime import datetime, timezone

    from conftest import as_user
    from onite.spool.log import format_line, parse_line

    mnt, spool = small_disk
    assert run_cli(["submit", "early"], stdin=b"true\n", user="daemon", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert run_cli(["submit", "payroll"], stdin=b"true\n", user="daemon", cwd="/tmp").code == 0
    log = spool / "onite.log"
    room = 4096 - log.stat().st_size % 4096
    pad = room - 100 if room > 200 else room + 4096 - 100  # an earlier night's line: 100 bytes left in this page
    head = format_line(datetime(2020, 1, 1, tzinfo=timezone.utc), "vm", 1, "warning", note="")
    with open(log, "a") as handle:
        handle.write(head[:-1] + "note=" + "x" * (pad - len(head) - 5) + "\n")
    assert 4096 - log.stat().st_size % 4096 == 100
    hog = spool / "jobs" / "P4" / ".hog"

    assert as_user(lambda: fill(hog, 4096))[0] == "oserror"  # its buffer's last flush: the disk is full
    assert drain(spool).returncode == 4
    stopped = time.time()
    as_user(lambda: os.unlink(hog))  # the disk frees again
    wait_for(lambda: time.time() >= stopped + 2, what="a later second than the stopped drain's (the log's times)")
    assert drain(spool).returncode == 0
    assert [line for line in log_lines(spool) if parse_line(line) is None] == []
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]")
    assert [line for line in log_lines(spool) if len(stamp.findall(line)) > 1] == []  # no line glued to another
    jobs = run_cli(["report", "--json"], user="daemon", cwd="/tmp").json()["jobs"]
    assert {(j["name"], j["state"]) for j in jobs} >= {("payroll", "done")}, jobs


@pytest.mark.attack
def test_a_drain_a_users_output_stopped_on_a_full_disk_is_told_as_it_is(small_disk, workdir):
    """nobody's job writes until the spool's disk is full, beside daemon's payroll, which then ends (exit 0):
    its result cannot be written, and the driver exits 4. The morning report says the drain stopped because
    it could not record a run, never that payroll is 'running' (nothing runs) or that daemon's other job
    merely 'waits for the next drain' (which stops the same way while the disk is full); status says so
    too. Once there is room, payroll is filed once and its output is whole."""
    mnt, spool = small_disk
    set_config(spool, slots=2)
    ledger, gate = workdir / "ledger", workdir / "gate"
    # hog fills the disk only once payroll runs: a full disk before payroll's run record is written would start
    # nothing more (that is another test's), and hog's monitor can beat the driver's second start by far
    assert run_cli(["submit", "hog", "-p", "1"], stdin=f"while [ ! -e {ledger} ]; do sleep 0.02; done\n"
                   "head -c 9000000 /dev/zero\n".encode(), user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "payroll", "-p", "1"], stdin=f"echo start >> {ledger}\nwhile [ ! -e {gate} ]; do "
                   f"sleep 0.05; done\necho end >> {ledger}\n".encode(), user="daemon", cwd="/tmp").code == 0
    assert run_cli(["submit", "later", "-p", "2"], stdin=b"true\n", user="daemon", cwd="/tmp").code == 0
    driver = start_driver(spool)

    def hog_running() -> bool:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"head\0-c\09000000\0":
                    return True
            except OSError:
                pass
        return False

    try:  # not by the log's word: the log is on the full disk too, and may have no room for its line
        wait_for(lambda: ledger.exists() and (mnt / "spool" / "stdout" / "nobody:hog").exists()
                 and os.statvfs(mnt).f_bavail == 0 and not hog_running(),
                 what="the disk to fill (hog's result cannot be written)")
        gate.touch()
        assert driver.wait(timeout=60) == 4
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    report = run_cli(["report", "--json"], user="daemon", cwd="/tmp").json()
    said = {row["name"]: row["reason"] for row in report["waiting"]}
    assert said["payroll"].startswith("ended at ") and "has no live driver: the next driver there" in said["payroll"], said
    assert "could not record" in said["later"], said
    text = run_cli(["report"], user="daemon", cwd="/tmp").out
    assert "stopped: it could not record" in text, text
    status = run_cli(["status", "--json"], user="daemon", cwd="/tmp").json()
    assert any("file system" in w and "full" in w for w in status["warnings"]), status["warnings"]
    # list --all: payroll is still claimed, and its time stops where it ended (it kept counting, as if it ran)
    listed = {j["name"]: j for j in run_cli(["list", "--all", "--json"], user="daemon", cwd="/tmp").json()["jobs"]}
    assert listed["payroll"]["state"] == "running" and listed["payroll"]["reason"] == "ended, not filed yet", listed
    assert listed["payroll"]["finished"] is not None, listed
    (spool / "stdout" / "nobody:hog").unlink()  # root makes room
    assert drain(spool).returncode == 0
    assert ledger.read_text() == "start\nend\n"
    assert result(spool, "daemon:payroll")["state"] == "done"
    assert result(spool, "daemon:later")["state"] == "done"
    status = run_cli(["status", "--json"], user="daemon", cwd="/tmp").json()
    assert not any("file system" in w for w in status["warnings"]), status["warnings"]
