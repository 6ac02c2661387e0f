"""Attacks on the root driver by a plain user, each made as that user would make it.

Every test here is an attack that worked on onite before this suite existed: a real second
user (``nobody``, and ``daemon`` where two users are needed) writes files, makes links and
folders, holds locks and runs processes; root drains as cron would. Each test checks that the
attack fails and that the night goes on. docs/security.md counts them. (Parsers and names:
tests/test_hostile_files.py and tests/test_fuzz_parsers.py; locks: tests/test_shared.py.)
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
import pwd
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from conftest import (REPO, as_user, drain, init_spool_at, log_lines, needs_root, next_ctime_tick, nobody, read_so_far,
                      result, run_cli, set_config, sparse_templates, start_driver, wait_for)
from onite.core.job import Attempt, Job
from onite.core.jobfile import encode
from onite.exec.contain import signal_pid

pytestmark = [needs_root, pytest.mark.attack]
HOST = os.uname().nodename.split(".")[0]


def plant_job(path: Path, text: bytes, user: str = "nobody") -> None:
    """``user`` writes a job file by hand at ``path`` (a queue folder's entry), as submit never would."""
    def write():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, text)
        os.close(fd)
    assert as_user(write, user) == ("ok", None)


def job_file(name: str, cwd: str | Path, body: bytes = b"true\n", **fields) -> bytes:
    job = Job(name=name, priority=4, submitted=datetime.now().astimezone(), host="vm", umask=0o022,
              cwd=os.fsencode(str(cwd)), env={b"PATH": b"/usr/bin:/bin"}, body=body, **fields)
    return encode(job)


def plant(path: Path, data: bytes, mode: int = 0o600) -> None:
    """``nobody`` creates ``path`` holding ``data``."""
    def write():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        os.write(fd, data)
        os.close(fd)
        os.chmod(path, mode)
    assert as_user(write) == ("ok", None)


def plant_template(spool: Path, key: str, body: bytes, rule, owner: str) -> None:
    """A template of ``owner``'s at ``key`` in recur/, as `recur add` would have written it three days ago."""
    from onite.core.recurring import rule_fields
    from onite.spool.files import create_file

    who = pwd.getpwnam(owner)
    job = Job(name=key, priority=3, submitted=datetime.now().astimezone() - timedelta(days=3), host="vm", umask=0o022,
              cwd=b"/", env={b"PATH": b"/usr/bin:/bin"}, body=body, extra=rule_fields(rule))
    create_file(spool / "recur", key, encode(job), owner=(who.pw_uid, who.pw_gid))


def submit(name: str, body: str, *args: str, user: str | None = None) -> None:
    r = run_cli(["submit", name, *args], stdin=body.encode(), user=user, cwd="/tmp")
    assert r.code == 0, r


# ---- 2. a job never reads what its owner cannot -----------------------------------------------


def test_a_forged_directory_gives_a_job_nothing_its_owner_could_not_read(spool, world_tmp, workdir):
    """The job's directory is entered after the drop to its owner; and the reason a user reads in the
    log is the same whether the private path exists, is a file or is missing (no oracle)."""
    private = world_tmp / "private"
    private.mkdir(mode=0o700)
    (private / "secret.txt").write_text("root's secret\n")
    (private / "a-file").write_text("x\n")
    cases = {"snoop": private, "missing": private / "no-such-dir", "notdir": private / "a-file"}
    for name, cwd in cases.items():
        plant(spool / "jobs" / "P4" / f"nobody:{name}",
              job_file(f"nobody:{name}", cwd, f"cat secret.txt > {workdir}/{name}.out\n".encode()))
    assert drain(spool).returncode == 0
    reasons = set()
    for name, cwd in cases.items():
        rec = result(spool, name)
        assert rec["state"] == "failed" and rec["user"] == "nobody"
        reasons.add(rec["reason"].replace(str(cwd), "DIR"))
        assert not (workdir / f"{name}.out").exists()
    assert reasons == {"cannot enter its directory DIR: permission denied"}
    assert "root's secret" not in (spool / "onite.log").read_text()


# ---- 3. root never runs a user's settings -------------------------------------------------------


def test_init_never_adopts_a_spool_folder_a_user_made(world_tmp):
    public = world_tmp / "public"
    public.mkdir()
    public.chmod(0o1777)  # as /tmp: anyone may make a folder here
    evil = public / "spool"

    def prepare():
        evil.mkdir()
        (evil / "onite.toml").write_text('notify = "command"\nnotify_command = "/tmp/evil-hook"\n')
    assert as_user(prepare) == ("ok", None)
    r = run_cli(["--spool", str(evil), "init"])
    assert r.code == 3 and "will not adopt" in r.err and "belongs to" in r.err, r
    assert sorted(os.listdir(evil)) == ["onite.toml"]  # nothing was made in it


@pytest.mark.parametrize("change, problem", [
    ("toml-owner", "onite.toml belongs to uid"),
    ("toml-mode", "onite.toml is writable by others"),
    ("jobsdone-mode", "jobsdone is writable by others"),
    ("queue-not-sticky", "writable by others without the sticky bit"),
    ("running-link", "running is a symbolic link"),
    ("parent-writable", "is writable by others (mode 0777)"),
])
def test_the_driver_refuses_a_spool_a_user_could_have_changed(world_tmp, change, problem):
    parent = world_tmp / "parent"
    parent.mkdir()
    spool = init_spool_at(parent / "spool")
    if change == "toml-owner":
        os.chown(spool / "onite.toml", nobody().pw_uid, -1)
    elif change == "toml-mode":
        (spool / "onite.toml").chmod(0o666)
    elif change == "jobsdone-mode":
        (spool / "jobsdone").chmod(0o777)
    elif change == "queue-not-sticky":
        (spool / "jobs" / "P4").chmod(0o777)
    elif change == "running-link":
        (spool / "running").rename(world_tmp / "elsewhere")
        (spool / "running").symlink_to(world_tmp / "elsewhere")
    elif change == "parent-writable":
        parent.chmod(0o777)
    for command in (["run"], ["daemon"]):
        r = run_cli(["--spool", str(spool), *command], timeout=30)
        assert r.code == 3 and "will not trust" in r.err and problem in r.err, (command, r)
    if change not in ("toml-owner", "running-link", "parent-writable"):  # root's own files: init repairs their modes
        r = run_cli(["--spool", str(spool), "init"])  # and says which (it said "created nothing new")
        repaired = {"toml-mode": "onite.toml 0666 → 0644", "jobsdone-mode": "jobsdone/ 0777 → 0755",
                    "queue-not-sticky": "jobs/P4/ 0777 → 1777"}[change]
        assert r.code == 0 and f"{spool}: repaired the modes of {repaired}\n" in r.out, r
        assert run_cli(["--spool", str(spool), "run", "-q"]).code == 0


# ---- 5. links never stall the driver, nor lead root's writes astray ------------------------------

def test_a_file_root_rewrites_is_never_written_through_a_name_planted_beside_it(tmp_path):
    """replace_file writes under a dot-name no one can guess, created anew: a hard link or a symlink planted
    at a name a writer could predict (``.NAME.PID.tmp``) is neither truncated nor followed."""
    from onite.spool.files import replace_file

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    target = tmp_path / "state.json"
    os.link(victim, tmp_path / f".state.json.{os.getpid()}.tmp")
    os.symlink(victim, tmp_path / f".state.json.{os.getpid()}.0.tmp")
    for data in (b"one\n", b"two\n"):
        replace_file(target, data, mode=0o640)
        assert target.read_bytes() == data and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert victim.read_bytes() == b"precious\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".state.json.")) == [
        f".state.json.{os.getpid()}.0.tmp", f".state.json.{os.getpid()}.tmp"]  # the plants, left as they were


def test_two_hard_links_that_keep_changing_mode_do_not_stall_the_night(spool, workdir):
    first, second = spool / "jobs" / "P1" / "nobody:link-one", spool / "jobs" / "P1" / "nobody:link-two"
    plant(first, job_file("nobody:link-one", "/tmp"))

    def churn():
        os.link(first, second)
        deadline = time.monotonic() + 30
        mode = 0o600
        while time.monotonic() < deadline and (first.exists() or second.exists()):
            mode ^= 0o040  # 0600, 0640: always a fresh ctime
            for path in (first, second):
                try:
                    os.chmod(path, mode)
                except OSError:
                    pass
            time.sleep(0.001)
    churner = as_user(churn, background=True)
    try:
        wait_for(lambda: second.exists(), what="the second link")
        for name in "abc":
            submit(name, f"echo {name} >> {workdir}/trace\n")
        assert drain(spool, timeout=60).returncode == 0
    finally:
        os.kill(churner, signal.SIGKILL)
        os.waitpid(churner, 0)
    assert (workdir / "trace").read_text().split() == ["a", "b", "c"]
    refused = [line for line in log_lines(spool) if " refused nobody:link-" in line]
    assert refused and all("hard links" in line for line in refused), refused


# ---- 6. the cancel inbox trusts nothing it finds ---------------------------------------------


def test_the_cancel_inbox_survives_files_links_and_folders_swapped_under_it(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("slow", f"while [ -e {gate} ]; do sleep 0.02; done\n")
    inbox = spool / "cancel"

    def swap():
        deadline = time.monotonic() + 8
        i = 0
        while time.monotonic() < deadline:
            path = inbox / f"nobody:vjob@x{i % 3}"
            kind = i % 4
            try:
                if kind == 0:
                    path.write_bytes(job_file("nobody:vjob", "/tmp"))
                elif kind == 1:
                    path.symlink_to("/etc/shadow")
                elif kind == 2:
                    path.mkdir()
                    (path / "inside").write_text("x")
                else:
                    os.mkfifo(path)
            except OSError:
                pass
            time.sleep(0.003)
            for entry in list(inbox.iterdir()):
                try:
                    if entry.is_dir() and not entry.is_symlink():
                        for inner in entry.iterdir():
                            inner.unlink()
                        entry.rmdir()
                    else:
                        entry.unlink()
                except OSError:
                    pass
            i += 1
    attacker = as_user(swap, background=True)
    from conftest import start_driver

    driver = start_driver(spool, "-q")
    try:
        wait_for(lambda: sum(" nobody:vjob " in line for line in log_lines(spool)) >= 5,
                 what="the driver to act on nobody's files in cancel/ five times")
        gate.unlink()
        assert driver.wait(60) == 0, driver.stderr.read()
    finally:
        os.kill(attacker, signal.SIGKILL)
        os.waitpid(attacker, 0)
    assert drain(spool).returncode == 0
    done = spool / "jobsdone"
    for entry in done.iterdir():
        st = os.lstat(entry)
        assert stat.S_ISREG(st.st_mode), f"{entry} is not a regular file"
    assert result(spool, "slow")["state"] == "done"
    assert not any("Traceback" in line for line in log_lines(spool))


@pytest.mark.parametrize("kind", ["symlink", "folder", "fifo", "hard-link"])
def test_what_is_not_a_withdrawn_job_file_is_set_aside_never_filed(spool, kind):
    """Each kind of entry a user can make in cancel/, given to the driver's filing directly."""
    from onite.spool.cancels import NotAJob, file_withdrawn
    from onite.spool.paths import SpoolDir

    entry = spool / "cancel" / "nobody:vjob@x"

    def make():
        if kind == "symlink":
            entry.symlink_to("/etc/shadow")
        elif kind == "folder":
            entry.mkdir()
            (entry / "inside").write_text("x")
        elif kind == "fifo":
            os.mkfifo(entry)
        else:
            entry.write_bytes(job_file("nobody:vjob", "/tmp"))
            os.link(entry, spool / "cancel" / "nobody:vjob@y")
    assert as_user(make) == ("ok", None)
    with pytest.raises(NotAJob):
        file_withdrawn(SpoolDir(spool), entry, by="nobody", now=datetime.now().astimezone())
    assert not os.path.lexists(spool / "jobsdone" / "nobody:vjob")
    assert not (spool / "jobsdone" / "nobody:vjob@result").exists()
    assert not os.path.lexists(entry)
    assert drain(spool).returncode == 0  # and the driver, finding the rest, goes on


def test_a_forged_cancel_never_replaces_another_users_result(spool, workdir):
    submit("vjob", "true\n")
    assert drain(spool).returncode == 0
    before = result(spool, "vjob")
    submit("dependent", f"touch {workdir}/dependent-ran\n", "--after", "vjob")
    plant(spool / "cancel" / "root:vjob@forged", job_file("root:vjob", "/tmp"))
    assert drain(spool).returncode == 0
    assert result(spool, "vjob") == before  # root's done job is still done
    assert result(spool, "dependent")["state"] == "done" and (workdir / "dependent-ran").exists()
    assert not any(" cancelled root:vjob " in line for line in log_lines(spool))  # no end of root's job: a refusal
    [line] = [line for line in log_lines(spool) if " refused root:vjob " in line]
    assert "a forgery" in line and "owner=nobody" in line


# ---- 8. a forgery planted at a user's key blocks nothing ---------------------------------------


@pytest.mark.parametrize("held", [False, True], ids=["queued", "held"])
def test_a_forgery_planted_at_another_priority_blocks_no_cancel_or_release(spool, held):
    """``daemon`` holds and cancels its own job while ``nobody`` has planted a file at its key in P1
    (held by a marker of nobody's, or not: neither is daemon's hold)."""
    submit("mine", "true\n", "--hold", user="daemon")
    plant(spool / "jobs" / "P1" / "daemon:mine", job_file("daemon:mine", "/tmp"))
    if held:
        plant(spool / "hold" / "daemon:mine@nobody", b"")
    r = run_cli(["release", "mine"], user="daemon", cwd="/tmp")
    assert r.code == 0, r
    [listed] = [j for j in run_cli(["list", "--json"]).json()["jobs"] if j["name"] == "daemon:mine"]
    assert listed["user"] == "daemon" and listed["waiting"] != "held", listed  # nobody's forgery is not daemon's job
    r = run_cli(["cancel", "mine"], user="daemon", cwd="/tmp")
    assert r.code == 0 and "cancelled" in r.out, r
    assert (spool / "jobs" / "P1" / "daemon:mine").exists()  # nobody's own file: not daemon's to touch
    assert not (spool / "jobs" / "P4" / "daemon:mine").exists()


def test_roots_hold_and_release_reach_the_users_job_not_a_forgery_planted_at_its_key(spool):
    """nobody planted a file at the key of daemon's queued ``X`` in P1, listed first:
    root's ``hold daemon:X`` must hold daemon's job, not nobody's file, and root's ``release
    daemon:Z`` release daemon's held ``Z``."""
    submit("X", "echo daemon-ran\n", "-p", "4", user="daemon")
    plant(spool / "jobs" / "P1" / "daemon:X", job_file("daemon:X", "/tmp"))
    r = run_cli(["hold", "daemon:X"])
    assert r.code == 0, r
    assert [p.stat().st_uid for p in (spool / "hold").iterdir()] == [pwd.getpwnam("daemon").pw_uid]
    assert drain(spool).returncode == 0
    assert not any(" start daemon:X " in line for line in log_lines(spool))
    submit("Z", "true\n", "-p", "4", "--hold", user="daemon")
    plant(spool / "jobs" / "P1" / "daemon:Z", job_file("daemon:Z", "/tmp"))
    r = run_cli(["release", "daemon:Z"])
    assert r.code == 0, r
    [listed] = [j for j in run_cli(["list", "--json"]).json()["jobs"] if j["name"] == "daemon:Z"]
    assert listed["user"] == "daemon" and listed["waiting"] != "held", listed


def test_a_forgery_planted_at_a_users_key_holds_up_neither_their_wait_nor_their_follow(spool):
    """daemon's ``build`` was done; nobody planted a file at its key in P1 and held
    it: daemon's ``onite wait build`` must not wait for nobody's file. nobody's forgery at the key of
    daemon's queued ``X`` must not make daemon's ``onite output X -f`` refuse ("belongs to nobody").
    And a waiter that saw daemon's job must not be told "cancelled by nobody" once nobody's held
    forgery came and went with a withdrawal. The job at a key is its user's file only."""
    from onite.app import wait as w
    from onite.spool.paths import SpoolDir

    submit("build", "true\n", user="daemon")
    waiter = w.start(SpoolDir(spool), ["daemon:build"])["daemon:build"]  # daemon's wait, begun while queued
    assert drain(spool).returncode == 0
    plant(spool / "jobs" / "P1" / "daemon:build", job_file("daemon:build", "/tmp"))
    plant(spool / "hold" / "daemon:build@nobody", b"")  # and held
    seen = w.look(SpoolDir(spool), "daemon:build", with_result=True)
    assert w.judge(waiter, seen)[1].state == "done"
    plant(spool / "cancel" / "daemon:build@x", job_file("daemon:build", "/tmp"))  # nobody "withdraws" its forgery
    (spool / "jobs" / "P1" / "daemon:build").unlink()
    seen = w.look(SpoolDir(spool), "daemon:build", with_result=True)
    assert w.judge(waiter, seen)[1].state == "done"
    r = run_cli(["wait", "build", "--timeout", "20s"], user="daemon", cwd="/tmp")
    assert (r.code, r.out) == (0, "build: done\n"), r

    import threading

    submit("X", "echo daemon-output\n", user="daemon")
    plant(spool / "jobs" / "P1" / "daemon:X", job_file("daemon:X", "/tmp"))
    followed = []
    follower = threading.Thread(target=lambda: followed.append(
        run_cli(["output", "X", "-f"], user="daemon", cwd="/tmp", timeout=90)))
    follower.start()
    wait_for(lambda: follows_or_ended(follower), what="the follower to wait for X, or to have refused")
    assert drain(spool).returncode == 0
    follower.join(120)
    [r] = followed
    assert (r.code, r.out) == (0, "daemon-output\n"), r


def follows_or_ended(thread) -> bool:
    """``run_cli``'s child in ``thread`` (a process forked by this one that became daemon) sleeps between
    two of the follow's looks, or has ended."""
    daemon = str(pwd.getpwnam("daemon").pw_uid)
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            if int(fields["PPid"]) == os.getpid() and fields["Uid"].split()[0] == daemon:
                return open(f"/proc/{entry}/wchan").read() == "hrtimer_nanosleep"
        except (OSError, KeyError):  # it ended meanwhile
            continue
    return not thread.is_alive()


# ---- 9. every process a job starts ends with it ---------------------------------------------


ESCAPES = """\
setsid sleep 300 & echo $! >> {pids}
( set -m; sleep 300 & echo $! >> {pids} )
sh -c 'sleep 300 & echo $! >> {pids}' &
nohup sleep 300 >/dev/null 2>&1 & echo $! >> {pids}
sleep 0.2
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def escapees(pids: Path) -> list[int]:
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 4, what="the four escapes")
    return [int(p) for p in pids.read_text().split()]


def test_processes_that_leave_the_jobs_group_end_with_the_job(spool, workdir):
    pids = workdir / "pids"
    submit("escape", ESCAPES.format(pids=pids), user="nobody")
    assert drain(spool).returncode == 0
    for pid in escapees(pids):
        wait_for(lambda: not alive(pid), what=f"escaped pid {pid} to end")
    assert result(spool, "escape")["state"] == "done"
    assert any(" driver-start " in line and "contain=" in line for line in log_lines(spool))
    said = run_cli(["status", "--json"], user="nobody", cwd="/tmp").json()["containment"]
    assert said["host"] == HOST and said["kind"].split()[0] in ("cgroup2", "subreaper")
    assert "contain   " in run_cli(["status"]).out


def test_a_timed_out_job_leaves_nothing_running(spool, workdir):
    set_config(spool, kill_grace="1s")
    pids = workdir / "pids"
    submit("stuck", ESCAPES.format(pids=pids) + "trap '' TERM; sleep 300\n", "--timeout", "2s", user="nobody")
    assert drain(spool).returncode == 0
    for pid in escapees(pids):
        wait_for(lambda: not alive(pid), what=f"escaped pid {pid} to end")
    assert result(spool, "stuck")["reason"] == "timeout"


def test_a_record_line_a_full_disk_cut_short_hides_no_later_stop_from_the_monitor(spool, workdir):
    """nobody's job fills the disk as root cancels it: root's stop line is cut short (a full disk's short write,
    made here as it leaves one), so the job runs on. Root's next stop (its shutdown, a cancel) is written whole
    after the cut: runrecord.parse reads it, but the monitor took the merged line for damage and never stopped
    the job, which escaped every stop but its time limit. The monitor reads such a line as parse does."""
    ledger, gate = workdir / "ledger", workdir / "gate"
    gate.touch()
    submit("runaway", f"echo start >> {ledger}; while [ -e {gate} ]; do sleep 0.05; done; echo escaped >> {ledger}\n",
           user="nobody")
    driver = start_driver(spool, "-q")
    cancel = None
    try:
        record = wait_for(lambda: next((spool / "running").glob("*/nobody:runaway@run"), None), what="its record")
        wait_for(lambda: '"event":"job"' in record.read_text(), what="the job to start")
        with open(record, "ab") as handle:
            handle.write(b'{"event":"stop","why":"cance')
        cancel = subprocess.Popen([sys.executable, "-m", "onite", "cancel", "nobody:runaway"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=dict(os.environ, ONITE_SPOOL=str(spool),
                                                                   PYTHONPATH=str(REPO)))
        wait_for(lambda: not record.exists() or '"event":"ended"' in record.read_text(), what="the cancelled job to end")
    finally:
        gate.unlink(missing_ok=True)
        assert driver.wait(timeout=60) == 0
        if cancel is not None:
            cancel.communicate(timeout=60)
    assert result(spool, "runaway")["state"] == "cancelled"
    assert ledger.read_text().split() == ["start"]


def test_the_subreaper_contains_jobs_where_there_is_no_cgroup(spool, workdir):
    """Where no cgroup v2 can be made (a container), the monitor reaps what the job leaves behind."""
    from onite.exec.contain import SUBREAPER, Containment
    from onite.drain.driver import Driver
    from onite.exec.local import LocalRunner
    from onite.spool.paths import SpoolDir

    pids = workdir / "pids"
    submit("escape", ESCAPES.format(pids=pids), user="nobody")
    target = SpoolDir(spool)
    runner = LocalRunner(shell="/bin/sh", kill_grace=2.0, switch_user=True,
                         containment=Containment(SUBREAPER, why="a test"))
    driver = Driver(target, runner=runner)
    driver._containment = runner.containment
    assert driver.run() == 0
    for pid in escapees(pids):
        wait_for(lambda: not alive(pid), what=f"escaped pid {pid} to end")


HOP = """\
exec 3>{alive}
python3 -c '
import os, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1] + ".started", "w").close()
while not os.path.exists(sys.argv[1]):  # each generation forks the next, leaves its session and exits
    if os.fork():
        os._exit(0)
    os.setsid()
' {stop} &
sleep 0.5
"""


@pytest.mark.parametrize("contain", ["as found", "v1 groups"])
def test_a_process_that_keeps_forking_away_and_ignores_term_ends_with_the_job(spool, workdir, contain):
    """A job leaves behind a process that forks a new one and exits, again and again, each in a session of its
    own, ignoring SIGTERM: its pid is never the same twice, so no list of pids read once can end it, and no look
    at /proc finds it for sure. Each generation holds a fifo open: the last one gone, its reader sees the end.
    A cgroup v2 is killed whole; where the monitor contains the job as a subreaper, the job's v1 pids group
    first takes no new process, then what it holds is killed."""
    stop, alive_fifo = workdir / "stop", workdir / "alive"
    os.mkfifo(alive_fifo)
    os.chmod(alive_fifo, 0o666)
    reader = os.open(alive_fifo, os.O_RDONLY | os.O_NONBLOCK)

    def all_gone() -> bool:
        try:
            return os.read(reader, 1) == b""  # no writer left
        except BlockingIOError:
            return False

    try:
        assert run_cli(["submit", "hop"], stdin=HOP.format(alive=alive_fifo, stop=stop).encode(), user="nobody",
                       cwd="/tmp").code == 0
        if contain == "v1 groups":
            from onite.drain.driver import Driver
            from onite.exec import limits
            from onite.exec.contain import SUBREAPER, Containment
            from onite.exec.local import LocalRunner
            from onite.spool.paths import SpoolDir

            limiter = limits.discover(None, max_pids=100)
            if "pids" not in limiter.v1:
                pytest.skip("no cgroup v1 pids controller on this machine")
            runner = LocalRunner(shell="/bin/sh", kill_grace=1.0, switch_user=True, limiter=limiter,
                                 containment=Containment(SUBREAPER, why="a test"))
            driver = Driver(SpoolDir(spool), runner=runner)
            driver._containment = runner.containment
            assert driver.run() == 0
        else:
            set_config(spool, kill_grace="1s")
            assert drain(spool).returncode == 0
        assert result(spool, "nobody:hop")["state"] == "done"
        assert (workdir / "stop.started").exists()  # it did start hopping
        wait_for(all_gone, timeout=20, what="every generation of the hopping process to end")
    finally:
        stop.touch()  # whatever is left stops by itself
        os.close(reader)


def test_contain_false_lets_a_job_leave_a_daemon_behind(spool, workdir):
    set_config(spool, contain=False)
    pids = workdir / "pids"
    # the job ends once its daemon has its own session (before that, it is still in the job's group)
    submit("daemonise", f"setsid sleep 300 & p=$!; echo $p >> {pids}; "
                        f"while [ \"$(cut -d' ' -f6 /proc/$p/stat)\" != \"$p\" ]; do sleep 0.01; done\n", user="nobody")
    assert drain(spool).returncode == 0
    [pid] = [int(p) for p in pids.read_text().split()]
    try:
        assert alive(pid)
        assert any(" driver-start " in line and "contain=\"off" in line for line in log_lines(spool))
    finally:
        os.kill(pid, signal.SIGKILL)


# ---- the whole night, on a spool full of what users can put there ------------------------------


def test_the_driver_survives_a_fuzzed_spool_for_a_whole_night(spool, workdir):
    """200 files of every kind a user can make, in every folder a user can write, around 10 good jobs:
    the night ends normally, every good job runs, nothing is left in the queue, and no traceback."""
    rng = random.Random(int(os.environ.get("ONITE_FUZZ_SEED", "1313")))
    good = [f"good{i}" for i in range(10)]
    for name in good:
        submit(name, f"echo {name} >> {workdir}/trace\n", "-p", str(rng.randint(1, 7)))
    valid = job_file("nobody:x", "/tmp")
    folders = [spool / "jobs" / f"P{p}" for p in range(1, 8)] + [spool / "jobs" / "urgent"]

    def make_mess():
        made = 0
        for i in range(200):
            folder = rng.choice(folders + [spool / "cancel", spool / "recur", spool / "hold"])
            name = rng.choice(["nobody:", "nobody:", "root:", ""]) + f"f{i}" + rng.choice(["", "@x", ".y"])
            path = folder / name
            kind = rng.randrange(9)
            try:
                if kind == 0:
                    path.write_bytes(os.urandom(rng.randrange(0, 4096)))
                elif kind == 1:  # a valid header with one line mangled
                    lines = valid.split(b"\n")
                    j = rng.randrange(len(lines))
                    lines[j] = lines[j][: rng.randrange(len(lines[j]) + 1)] + os.urandom(rng.randrange(8))
                    path.write_bytes(b"\n".join(lines))
                elif kind == 2:
                    path.symlink_to(rng.choice(["/etc/shadow", "/root", str(folders[0]), "/dev/zero"]))
                elif kind == 3:
                    os.mkfifo(path)
                elif kind == 4:
                    path.mkdir()
                elif kind == 5:
                    path.write_bytes(valid)
                    os.link(path, folder / f"{name}-link")
                elif kind == 6:
                    path.write_bytes(valid)
                    os.chmod(path, rng.choice([0o666, 0o4755, 0o400, 0o000, 0o620]))
                elif kind == 7:
                    with open(path, "wb") as handle:  # huge, sparse
                        handle.truncate(rng.choice([20, 40]) << 20)
                else:
                    path.write_bytes(valid.replace(b"name: nobody:x", f"name: {name}".encode()))
                made += 1
            except OSError:
                continue
        return made
    status, made = as_user(make_mess)
    assert status == "ok" and made > 150
    proc = drain(spool, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert b"Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert sorted((workdir / "trace").read_text().split()) == sorted(good)
    left = [p for folder in folders for p in folder.iterdir() if not p.name.startswith(".")]
    assert not [p for p in left if stat.S_ISREG(os.lstat(p).st_mode) and os.lstat(p).st_nlink == 1
                and os.lstat(p).st_mode & 0o200 and not os.lstat(p).st_mode & 0o7022], left
    for command in (["status"], ["list", "--all"], ["report"], ["log", "-n", "500"], ["recur", "list"]):
        r = run_cli(command)
        assert r.code == 0 and "Traceback" not in r.err, (command, r)
        r = run_cli(command, user="nobody", cwd="/tmp")
        assert "Traceback" not in r.err, (command, r)


# ---- 12. a key is its user's: a forgery planted by hand takes nothing ------------------------------
#
# onite submit refuses a key that is queued or running; a file written straight into a queue folder
# is not refused by it. ``nobody`` plants a file at a key of ``daemon``'s (docs/spool-format.md, KEYS).


def _gated(gate: Path, end: str) -> str:
    """A job text that waits for ``gate`` to exist, then ends with ``end``."""
    return f"while [ ! -e {gate} ]; do sleep 0.05; done\n{end}\n"


def _refused_as(spool: Path, name: str, owner: str) -> list[str]:
    return [line for line in log_lines(spool) if f" refused {name} " in line and f"owner={owner}" in line]


def test_a_forgery_planted_while_a_job_runs_takes_neither_its_retry_nor_its_result(spool, workdir):
    set_config(spool, retry_delay="0.05")
    gate = workdir / "gate"
    submit("victim", f"[ -e {workdir}/tried ] && exit 0; touch {workdir}/tried\n" + _gated(gate, "exit 1"),
           "--retries", "1", user="daemon")
    driver = start_driver(spool)
    wait_for((workdir / "tried").exists, what="the first attempt")
    plant(spool / "jobs" / "P4" / "daemon:victim", job_file("daemon:victim", "/tmp", b"id > /tmp/nobody-ran\n"))
    gate.touch()
    assert driver.wait(timeout=120) == 0
    res = result(spool, "daemon:victim")
    assert (res["user"], res["state"], res["attempt"]) == ("daemon", "done", 2), res
    assert _refused_as(spool, "daemon:victim", "nobody"), log_lines(spool)
    assert not any(" retry-skipped daemon:victim " in line for line in log_lines(spool))
    assert not os.path.exists("/tmp/nobody-ran")


def test_a_forgery_planted_while_a_job_runs_cannot_let_what_waits_for_it_run(spool, workdir):
    """``deploy --after build``: build fails, so deploy must never run, whatever ``nobody`` plants."""
    gate = workdir / "gate"
    submit("build", _gated(gate, "exit 1"), user="daemon")
    submit("deploy", f"touch {workdir}/deployed\n", "--after", "build", user="daemon")
    driver = start_driver(spool)
    wait_for(lambda: any(p.name == "daemon:build" for p in (spool / "running").glob("*/*")), what="build to start")
    plant(spool / "jobs" / "P7" / "daemon:build", job_file("daemon:build", "/tmp"))
    gate.touch()
    assert driver.wait(timeout=120) == 0
    assert result(spool, "daemon:build")["user"] == "daemon" and result(spool, "daemon:build")["state"] == "failed"
    assert result(spool, "daemon:deploy")["state"] == "failed" and not (workdir / "deployed").exists()
    assert _refused_as(spool, "daemon:build", "nobody"), log_lines(spool)


def test_another_users_file_at_a_failed_dependencys_key_cannot_let_what_waits_for_it_run(spool, workdir):
    """daemon's ``build`` failed; daemon's ``deploy --after build`` must fail too. ``nobody`` spools a
    ``build`` of its own that succeeds, and writes one by hand at daemon's key: neither is daemon's
    build, and the file at daemon's key is refused at night."""
    submit("build", "exit 1\n", user="daemon")
    assert drain(spool).returncode == 0 and result(spool, "daemon:build")["state"] == "failed"
    submit("deploy", f"touch {workdir}/deployed\n", "--after", "build", "-p", "7", user="daemon")
    submit("build", "true\n", "-p", "1", user="nobody")  # its own build: another key
    plant_job(spool / "jobs" / "P1" / "daemon:build", job_file("daemon:build", "/tmp", b"true\n"))
    assert drain(spool).returncode == 0
    assert (result(spool, "daemon:build")["user"], result(spool, "daemon:build")["state"]) == ("daemon", "failed")
    assert result(spool, "nobody:build")["state"] == "done"
    assert _refused_as(spool, "daemon:build", "nobody"), log_lines(spool)[-8:]
    deploy = result(spool, "daemon:deploy")
    assert deploy["state"] == "failed" and not (workdir / "deployed").exists(), deploy
    assert deploy["reason"] == "dependency build failed", deploy


def test_a_finished_jobs_result_and_output_stay_its_owners(spool, workdir):
    """Alice's ``build`` finished; bob's run of a ``build`` replaced alice's result and
    output: she found only his job in the morning. Now bob's own ``build`` is another key, and a file
    he writes at alice's key is refused: her result and output stay hers; she may reuse the name."""
    submit("build", "echo daemon-output\n", user="daemon")
    assert drain(spool).returncode == 0
    before = result(spool, "daemon:build")
    submit("build", "echo nobody-output\n", user="nobody")
    plant_job(spool / "jobs" / "P1" / "daemon:build", job_file("daemon:build", "/tmp", b"echo nobody-forged\n"))
    assert drain(spool).returncode == 0
    assert result(spool, "daemon:build") == before
    assert (spool / "stdout" / "daemon:build").read_bytes() == b"daemon-output\n"
    assert (spool / "stdout" / "nobody:build").read_bytes() == b"nobody-output\n"
    assert _refused_as(spool, "daemon:build", "nobody"), log_lines(spool)[-8:]
    submit("build", "echo again\n", user="daemon")  # its owner's next run replaces its own
    assert drain(spool).returncode == 0
    assert (spool / "stdout" / "daemon:build").read_bytes() == b"again\n"


def test_another_users_files_prune_none_of_a_users_results(spool):
    """``keep`` counted every user's results together, and every file the driver
    refuses is filed as its owner's: nobody dropped empty files into a queue (no job, no disk) and
    root's drain pruned daemon's finished ``payroll``, its output gone and its name free. Now each
    user keeps their own last ``keep``."""
    set_config(spool, keep=3)
    submit("payroll", "echo totals\n", user="daemon")
    assert drain(spool).returncode == 0
    for i in range(6):
        plant(spool / "jobs" / "P1" / f"nobody:junk{i}", b"")
    submit("mine", "true\n", user="nobody")
    assert drain(spool).returncode == 0
    assert result(spool, "daemon:payroll")["user"] == "daemon"
    assert (spool / "stdout" / "daemon:payroll").read_bytes() == b"totals\n"
    nobodys = [p.name for p in (spool / "jobsdone").iterdir() if p.name.endswith("@result")
               and p.name != "daemon:payroll@result"]
    assert len(nobodys) == 3, nobodys  # nobody's own beyond its three are pruned
    assert any(" pruned " in line for line in log_lines(spool))


def test_another_users_queued_dependants_keep_none_of_a_users_results_past_keep(spool):
    """Retention keeps a result a queued job waits for, so that a done dependency stays done: nobody queues held
    jobs ``--after daemon:build`` to keep daemon's results and outputs on disk past daemon's ``keep`` for ever.
    Only a job of the result's own owner keeps it."""
    set_config(spool, keep=1)
    submit("build", "echo big\n", user="daemon")
    assert drain(spool).returncode == 0
    submit("watcher", "true\n", "--after", "daemon:build", "--hold", user="nobody")
    submit("next", "true\n", user="daemon")
    submit("later", "true\n", user="daemon")
    assert drain(spool).returncode == 0
    assert not (spool / "jobsdone" / "daemon:build@result").exists()
    assert not (spool / "stdout" / "daemon:build").exists()


def test_a_hard_link_to_another_users_file_files_no_result_for_them(spool, world_tmp):
    """nobody hard-links a file of daemon's it may write (a shared 0666 log) into a
    queue at the key of daemon's finished ``build`` (the link is daemon's file): the link was refused, and filed as daemon's
    failure, replacing daemon's kept result; daemon's ``deploy --after build`` then failed, and the
    report and daemon's notice said daemon's build had failed. A link says nothing of who put it
    there: it is set aside and logged, and nobody's result is filed for it."""
    home = world_tmp / "daemon"
    home.mkdir()
    os.chown(home, pwd.getpwnam("daemon").pw_uid, -1)
    shared = home / "shared.log"
    assert as_user(lambda: (shared.write_text("data\n"), os.chmod(shared, 0o666)) and None, "daemon")[0] == "ok"
    submit("build", "true\n", user="daemon")
    assert drain(spool).returncode == 0
    submit("deploy", "true\n", "--after", "build", "--hold", user="daemon")
    assert as_user(lambda: os.link(shared, spool / "jobs" / "P3" / "daemon:build"), "nobody") == ("ok", None)
    assert as_user(lambda: os.link(shared, spool / "jobs" / "P3" / "daemon:never"), "nobody") == ("ok", None)
    assert drain(spool).returncode == 0
    assert [line for line in log_lines(spool) if " refused daemon:build " in line and "hard links" in line]
    assert (result(spool, "daemon:build")["user"], result(spool, "daemon:build")["state"]) == ("daemon", "done")
    assert not (spool / "jobsdone" / "daemon:never@result").exists()  # no failure invented for daemon either
    assert run_cli(["release", "deploy"], user="daemon", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert result(spool, "deploy")["state"] == "done"
    assert shared.read_text() == "data\n"


def test_a_reason_quoting_a_users_path_cannot_start_a_report_line_of_its_own(spool, world_tmp):
    """nobody spools a job from a directory named with runs of spaces (or blanks that
    pass for them: the braille blank) around a sentence shaped like a failure of daemon's, then
    removes it: the reason quotes the path, and on an 80-column terminal, or a reader folding the
    plain report at 80, root read a line of its own saying daemon's ``deploy`` failed. A reason's
    runs of spaces are one space, such blanks are spelt out, and on a terminal a sentence's lines
    after its first are indented."""
    from conftest import OnTerminal

    fake = "daemon:deploy (daemon, P3) failed: exit 1 after 12s"
    home = world_tmp / "nobody"
    home.mkdir()
    os.chown(home, nobody().pw_uid, -1)
    gone = home / (" " * 23 + fake + " " * 36 + "\u2800" * 30 + "x")
    assert as_user(lambda: gone.mkdir() and None) == ("ok", None)
    r = run_cli(["submit", "x1"], stdin=b"true\n", user="nobody", cwd=gone)
    assert r.code == 0, r
    assert as_user(lambda: gone.rmdir() and None) == ("ok", None)
    assert drain(spool).returncode == 0
    plain = run_cli(["report"]).out
    [sentence] = [line for line in plain.splitlines() if line.startswith("nobody:x1 (nobody")]
    assert "  " not in sentence and "\\u2800" in sentence, sentence
    code, seen = OnTerminal(spool, ["report"], env={"COLUMNS": "80", "LINES": "50"}).finish()
    lines = seen.decode().replace("\x1b[0m", "").replace("\x1b[1;31m", "").splitlines()
    start = next(i for i, line in enumerate(lines) if "nobody:x1 (nobody" in line)
    assert lines[start + 1].startswith("    "), lines[start:start + 4]
    assert not [line for line in lines if line.lstrip("✗ ").startswith(fake) and not line.startswith(" ")], lines


def test_a_name_planted_while_its_owners_job_runs_does_not_run_after_it(spool, workdir):
    """nobody writes a file by hand at the key of daemon's running ``build``: it waits (a key is one
    job's at a time), and once daemon's has finished it must not run at the key, its result
    replacing daemon's: it is a forgery."""
    gate = workdir / "gate"
    submit("build", _gated(gate, "echo daemon-build"), user="daemon")
    driver = start_driver(spool)
    wait_for(lambda: (spool / "running" / HOST / "daemon:build").exists(), what="daemon's build to start")
    plant_job(spool / "jobs" / "P1" / "daemon:build", job_file("daemon:build", "/tmp", b"echo nobody-build\n"))
    gate.touch()
    assert driver.wait(timeout=120) == 0
    assert (result(spool, "daemon:build")["user"], result(spool, "daemon:build")["state"]) == ("daemon", "done")
    assert (spool / "stdout" / "daemon:build").read_bytes() == b"daemon-build\n"
    assert _refused_as(spool, "daemon:build", "nobody"), log_lines(spool)[-8:]


def keep_name(target: Path, data: bytes | None) -> int:
    """``nobody`` puts a file of its own (``data``; None: a folder) back under ``target`` the moment
    the name is free, over and over (renameat2(RENAME_NOREPLACE) of one prepared beside it): the pid
    of that process."""
    def keeper():
        import ctypes

        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
        name = os.fsencode(str(target))
        for i in range(10**9):
            dot = f"{target.parent}/.keep{i}"
            if data is None:
                os.mkdir(dot)
            else:
                fd = os.open(dot, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, data)
                os.close(fd)
            while os.path.lexists(name):
                pass
            if renameat2(-100, os.fsencode(dot), -100, name, 1) != 0:
                (os.rmdir if data is None else os.unlink)(dot)
    return as_user(keeper, background=True)


def stop(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_name_put_back_each_time_it_is_moved_aside_cannot_take_a_retry(spool, workdir):
    """While daemon's job runs, nobody keeps a file at its key in the folder its retry goes back
    to, putting it back the moment the driver moves it aside: the retry was dropped ("a new job of
    that name is queued"), and nobody's file ran under the name. The retry is written in one step
    with what is there swapped out, so it is never dropped."""
    set_config(spool, retry_delay="0.05")
    gate, flag = workdir / "gate", workdir / "failed-once"
    submit("build", f"[ -e {flag} ] && exit 0\ntouch {flag}\n" + _gated(gate, "exit 1"), "-p", "4", "--retries", "1",
           user="daemon")
    os.chmod(workdir, 0o777)
    driver = start_driver(spool)
    wait_for(lambda: any(p.name == "daemon:build" for p in (spool / "running").glob("*/*")), what="build to start")
    keeper = keep_name(spool / "jobs" / "P4" / "daemon:build", job_file("daemon:build", "/tmp"))
    try:
        wait_for(lambda: (spool / "jobs" / "P4" / "daemon:build").exists(), what="nobody's file")
        gate.touch()
        wait_for(lambda: any(" retry daemon:build " in ln or " retry-skipped daemon:build " in ln
                             for ln in log_lines(spool)), what="the retry")
    finally:
        stop(keeper)
    assert driver.wait(timeout=120) == 0
    res = result(spool, "daemon:build")
    assert (res["user"], res["state"], res["attempt"]) == ("daemon", "done", 2), (res, log_lines(spool))
    assert not any(" retry-skipped " in line for line in log_lines(spool))
    assert not any(" start daemon:build " in line and "user=nobody" in line for line in log_lines(spool))
    assert _refused_as(spool, "daemon:build", "nobody"), log_lines(spool)


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_name_put_back_each_time_it_is_moved_aside_cannot_take_a_recurring_jobs_run(spool, kind):
    """nobody keeps a file (or a folder) at the key of daemon's recurring job's due run (its key is
    known in advance): the run was never spooled, and the fire was recorded as done. It is
    written in one step with what is there swapped out."""
    from onite.core.rules import parse_rule

    fire = (datetime.now().astimezone() - timedelta(hours=2)).replace(second=0, microsecond=0)
    plant_template(spool, "daemon:tick", b"true\n", parse_rule(cron=f"{fire.minute} {fire.hour} * * *"), "daemon")
    name = f"daemon:tick-{fire:%Y%m%dT%H%M}"
    next_ctime_tick()  # nobody's files come later than the template
    keeper = keep_name(spool / "jobs" / "P3" / name, job_file(name, "/tmp") if kind == "file" else None)
    try:
        wait_for(lambda: (spool / "jobs" / "P3" / name).exists(), what="nobody's file")
        driver = start_driver(spool)
        wait_for(lambda: any(" recur-" in ln and name in ln for ln in log_lines(spool)), what="the fire")
    finally:
        stop(keeper)
    assert driver.wait(timeout=120) == 0
    assert (spool / "jobsdone" / f"{name}@result").exists(), "\n".join(log_lines(spool))
    res = result(spool, name)
    assert (res["user"], res["state"]) == ("daemon", "done"), (res, log_lines(spool))
    assert any(" recur-spooled " in line and name in line for line in log_lines(spool)), log_lines(spool)
    assert _refused_as(spool, name, "nobody"), log_lines(spool)


def test_a_folder_in_hold_denies_root_no_key(spool):
    """nobody makes a folder hold/root:rootjob@x (and a marker beside it): root's submit of rootjob,
    which clears stale markers of its key, failed with exit 4 on the folder."""
    def make():
        os.mkdir(spool / "hold" / "root:rootjob@x")
        open(spool / "hold" / "root:rootjob@y", "w").close()
    assert as_user(make) == ("ok", None)
    r = run_cli(["submit", "rootjob"], stdin=b"true\n", cwd="/tmp")
    assert r.code == 0, r
    assert drain(spool).returncode == 0 and result(spool, "rootjob")["state"] == "done"


def test_a_dependency_is_shown_as_its_owners_job_stands(spool, workdir):
    """daemon's deploy waits for daemon's running build; nobody's held forgery at build's key made
    status and list say "after build (held)"."""
    gate = workdir / "gate"
    submit("build", _gated(gate, "true"), user="daemon")
    submit("deploy", "true\n", "--after", "build", user="daemon")
    driver = start_driver(spool)
    try:
        wait_for(lambda: any(p.name == "daemon:build" for p in (spool / "running").glob("*/*")),
                 what="build to start")
        plant(spool / "jobs" / "P7" / "daemon:build", job_file("daemon:build", "/tmp"))
        plant(spool / "hold" / "daemon:build@nobody", b"")
        for args in (["list"], ["status"]):
            r = run_cli(args, user="daemon", cwd="/tmp")
            assert r.code == 0 and "after build (running)" in r.out, r
    finally:
        gate.touch()
    assert driver.wait(timeout=120) == 0
    assert result(spool, "daemon:deploy")["state"] == "done"


def test_a_template_whose_name_is_too_long_for_its_runs_stops_no_drain(spool, world_tmp):
    """nobody puts a template with a 90-character name (recur add allows 76: the runs' names would
    pass 100) in recur/, due now: building its run's job raised, and every onite run and the daemon
    died before draining. It is refused; the night goes on, other templates' fires included."""
    from onite.core.rules import parse_rule

    fire = (datetime.now().astimezone() - timedelta(hours=2)).replace(second=0, microsecond=0)
    rule = parse_rule(cron=f"{fire.minute} {fire.hour} * * *")
    plant_template(spool, "nobody:" + "p" * 90, b"true\n", rule, "nobody")
    plant_template(spool, "daemon:tick", b"true\n", rule, "daemon")
    submit("plain", "true\n", user="daemon")
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    assert result(spool, "daemon:plain")["state"] == "done"
    assert result(spool, f"daemon:tick-{fire:%Y%m%dT%H%M}")["state"] == "done"
    assert any(" recur-refused nobody:" + "p" * 90 in line and "use at most 76" in line for line in log_lines(spool)), \
        log_lines(spool)


def test_a_refused_template_is_read_once_not_at_every_look(spool, tmp_path):
    """Refused templates were read and decoded again at every look at recur/ (every 2 s in the
    daemon): a few large ones kept root's daemon busy. A version of a file is read once (strace)."""
    import shutil
    import subprocess
    import sys

    from conftest import REPO

    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("ONITE_STRACE_TESTS") == "required":
            raise AssertionError("strace is required (ONITE_STRACE_TESTS=required) and missing")
        pytest.skip("needs strace (Debian: strace) to count the reads")
    plant(spool / "recur" / "nobody:broken", job_file("nobody:broken", "/tmp"), 0o600)  # a job, not a template: no rule
    script = ("import sys; from onite.spool.paths import SpoolDir; from onite.drain.instances import RecurScheduler\n"
              "class Log:\n    def event(self, *a, **k): print(a[0], file=sys.stderr)\n"
              "s = RecurScheduler(SpoolDir(sys.argv[1]), Log())\n"
              "for _ in range(5): s.refresh(force=True)\n")
    trace = tmp_path / "trace"
    done = subprocess.run([strace, "-qq", "-e", "trace=openat", "-o", str(trace), sys.executable, "-c", script,
                           str(spool)], env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().count("recur-refused") == 1, done.stderr
    opens = [line for line in trace.read_text().splitlines() if line.split(", ")[1:2] == [f'"{spool}/recur/nobody:broken"']]
    assert len(opens) == 1, opens


def test_a_users_large_templates_hold_no_root_memory_and_take_no_one_elses_turn(spool):
    """nobody's templates, each with a body up to max_job_size (a sparse hole costs
    no disk), were kept whole in the daemon's memory for its life: 600 of them took 9 GB of root's.
    And a look at recur/ read every new version inline: a user who kept making them (a chmod is a
    new version) stalled the daemon. Now a template's job is read again when it fires, and a
    daemon's look reads templates for a bounded time, each owner's in turn."""
    import tracemalloc

    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    big = b"# " + b"x" * (4 << 20) + b"\ntrue\n"
    for i in range(6):
        r = run_cli(["recur", "add", f"big{i}", "--every", "1h"], stdin=big, user="nobody", cwd="/tmp")
        assert r.code == 0, r
    assert run_cli(["recur", "add", "mine", "--every", "1h"], stdin=b"true\n", user="daemon", cwd="/tmp").code == 0

    class Log:
        def event(self, event, *args, **fields):
            assert event == "recur-spooled", f"nothing here is refused: {event} {args} {fields}"

    tracemalloc.start()
    try:
        scheduler = RecurScheduler(SpoolDir(spool), Log(), read_budget=0.0)  # one template a look
        scheduler.refresh(force=True)
        scheduler.refresh(force=True)
        assert "daemon:mine" in scheduler.templates, sorted(scheduler.templates)  # daemon's came within two looks
        for _ in range(6):
            scheduler.refresh(force=True)
        assert len(scheduler.templates) == 7
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 4 << 20, held  # not one template's body, let alone six
    # each fire reads its template again: a look's fires keep to the budget too,
    # one owner's after another's, and daemon's fire comes within two looks, not after nobody's six
    later = datetime.now().astimezone() + timedelta(hours=2)
    fired = scheduler.spool_due(later) + scheduler.spool_due(later)
    assert len(fired) == 2 and any(name.startswith("daemon:mine-") for name in fired), fired


def test_a_template_moved_out_and_back_never_spools_a_fire_twice(spool, world_tmp):
    """nobody pauses its template by moving it out of recur/, and back before its
    next fire: recur.state had forgotten it while it was away, so its last fire counted from its
    creation again, and once that fire's result was pruned the same fire was spooled and run a
    second time. A gone template's entry is kept."""
    from datetime import timedelta

    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    for name, every in (("two", "2m"), ("one", "1m")):  # one fires while two is away: recur.state is saved
        r = run_cli(["recur", "add", name, "--every", every], stdin=b"true\n", user="nobody", cwd="/tmp")
        assert r.code == 0, r
    spooled = []

    class Log:
        def event(self, event, name=None, **fields):
            if event == "recur-spooled" and name.startswith("nobody:two-"):
                spooled.append(name)

    def look(now):
        return RecurScheduler(SpoolDir(spool), Log(), euid=0).spool_due(now)  # as each `onite run` does

    probe = RecurScheduler(SpoolDir(spool), Log(), euid=0)
    probe.refresh(force=True)
    fire = probe.templates["nobody:two"].next
    look(fire + timedelta(seconds=1))
    assert len(spooled) == 1, spooled
    for queued in (spool / "jobs").rglob("nobody:*-*"):
        queued.unlink()  # they ran, and retention pruned their results
    away = world_tmp / "two"
    os.rename(spool / "recur" / "nobody:two", away)
    assert [n for n in look(fire + timedelta(seconds=61)) if n.startswith("nobody:one-")]  # a save while two is away
    os.rename(away, spool / "recur" / "nobody:two")
    look(fire + timedelta(seconds=62))  # before two's next fire
    assert len(spooled) == 1, spooled


def test_another_users_run_at_a_finished_dependencys_key_fails_nothing(spool):
    """daemon's A succeeded; daemon's B waits for it (held). nobody then runs a job A of its own and
    writes a failing one by hand at daemon's key: neither replaces daemon's result, and B runs."""
    submit("A", "true\n", user="daemon")
    assert drain(spool).returncode == 0
    submit("B", "true\n", "--after", "A", "--hold", user="daemon")
    submit("A", "exit 3\n", user="nobody")  # its own A: another key
    plant_job(spool / "jobs" / "P1" / "daemon:A", job_file("daemon:A", "/tmp", b"exit 3\n"))
    assert drain(spool).returncode == 0
    assert (result(spool, "daemon:A")["user"], result(spool, "daemon:A")["state"]) == ("daemon", "done")
    assert result(spool, "nobody:A")["state"] == "failed"
    assert _refused_as(spool, "daemon:A", "nobody"), log_lines(spool)
    assert run_cli(["release", "B"], user="daemon", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert result(spool, "daemon:B")["state"] == "done", (result(spool, "daemon:B"), log_lines(spool))


def test_a_forgery_at_a_queued_jobs_key_is_refused_wherever_it_is_queued(spool):
    """A file at daemon's key planted at a higher priority than daemon's queued job is refused, and
    daemon's job runs."""
    submit("early", "true\n", user="daemon")
    next_ctime_tick()  # a later ctime than daemon's job
    plant(spool / "jobs" / "P1" / "daemon:early", job_file("daemon:early", "/tmp"))
    assert drain(spool).returncode == 0
    assert (result(spool, "daemon:early")["user"], result(spool, "daemon:early")["state"]) == ("daemon", "done")
    assert _refused_as(spool, "daemon:early", "nobody"), log_lines(spool)
    assert not any(" start daemon:early " in line and "user=nobody" in line for line in log_lines(spool))


def test_recovery_reruns_a_claim_whatever_forgery_is_queued_at_its_key(spool, workdir):
    """A dead driver's claim is requeued; another user's file at its key is no retry of it."""
    from conftest import kill_driver_mid_job

    kill_driver_mid_job(spool, workdir, "lost", machine_dies=True)
    plant(spool / "jobs" / "P7" / "root:lost", job_file("root:lost", "/tmp"))
    assert drain(spool).returncode == 0
    assert any(" recovered root:lost " in line and "requeued" in line for line in log_lines(spool)), log_lines(spool)
    res = result(spool, "root:lost")
    assert (res["user"], res["state"]) == ("root", "done"), res
    assert _refused_as(spool, "root:lost", "nobody"), log_lines(spool)


def test_a_recurring_jobs_run_key_is_its_owners(spool):
    """The key of a recurring job's run is known in advance (USER:TEMPLATE-YYYYMMDDTHHMM): planted
    first, it would run as the fire and the fire would be skipped as spooled already."""
    r = run_cli(["recur", "add", "nightly", "--cron", "0 3 * * *"], stdin=b"true\n", user="daemon", cwd="/tmp")
    assert r.code == 0, r
    plant(spool / "jobs" / "P4" / "daemon:nightly-20990101T0300", job_file("daemon:nightly-20990101T0300", "/tmp"))
    assert drain(spool).returncode == 0
    assert _refused_as(spool, "daemon:nightly-20990101T0300", "nobody"), log_lines(spool)


def test_a_retry_goes_back_to_the_folder_it_was_claimed_from(spool):
    """The priority written inside a job file never moves it ahead: nor does its retry."""
    job = Job(name="nobody:jumper", priority=1, retries=1, submitted=datetime.now().astimezone(), host="vm", umask=0o022,
              cwd=b"/tmp", env={b"PATH": b"/usr/bin:/bin"}, body=b"exit 1\n")
    set_config(spool, retry_delay="0.05")
    plant(spool / "jobs" / "P7" / "nobody:jumper", encode(job))
    assert drain(spool).returncode == 0
    starts = [line for line in log_lines(spool) if " start nobody:jumper " in line]
    assert len(starts) == 2 and all("priority=7" in line for line in starts), starts
    assert result(spool, "jumper")["priority"] == 7


# ---- 13. what is read back in the morning says whose job it was ----------------------------------


def test_a_forged_withdrawal_never_stands_for_another_users_job_in_the_report(spool):
    """``nobody`` drops a job file as cancel/backup@x after root's backup failed, and root's later
    jobs have backup's record pruned: root's morning report must still say backup failed, not
    "cancelled by nobody" (a refused withdrawal is logged as refused, never as backup's ``cancelled``
    line); nobody's own junk prunes nothing of root's: each user keeps their own last ``keep``."""
    set_config(spool, keep=2)
    submit("backup", "echo disk full; exit 3\n")
    assert drain(spool).returncode == 0
    plant(spool / "cancel" / "root:backup@x", job_file("root:backup", "/tmp"))
    for name in ("later1", "later2", "later3"):
        submit(name, "true\n")
    assert drain(spool).returncode == 0
    assert not (spool / "jobsdone" / "root:backup@result").exists()  # pruned: the report has the log only
    assert not any(" cancelled root:backup " in line for line in log_lines(spool)), log_lines(spool)
    jobs = json.loads(run_cli(["report", "--json", "--since", "1h"]).out)["jobs"]  # both drains
    assert [(j["user"], j["state"]) for j in jobs if j["name"] == "backup"] == [("root", "failed")], jobs


def test_a_forged_withdrawal_never_makes_wait_say_a_done_job_was_cancelled(spool):
    submit("build", "true\n", user="daemon")
    assert drain(spool).returncode == 0
    plant(spool / "cancel" / "daemon:build@forged", b"x\n")
    r = run_cli(["wait", "build"], user="daemon", cwd="/tmp")
    assert r.code == 0 and r.out.strip() == "build: done", r


def test_wait_spells_out_the_escapes_of_a_path_a_user_chose(spool, world_tmp):
    """A job whose directory is gone fails with a reason quoting that directory's name, which its
    owner chose: ``onite wait`` prints it escaped, as list and report do."""
    folder = world_tmp / "d\x1b]0;PWNED\x07\x1b[2Jx"
    folder.mkdir()
    os.chown(folder, nobody().pw_uid, nobody().pw_gid)
    assert run_cli(["submit", "evil"], stdin=b"true\n", user="nobody", cwd=str(folder)).code == 0
    folder.rmdir()
    assert drain(spool).returncode == 0
    r = run_cli(["wait", "nobody:evil"])
    assert r.code == 5 and "\x1b" not in r.out and "\x07" not in r.out and "\\e]0;PWNED" in r.out, r


def test_root_reads_no_hard_linked_file_to_say_why_a_job_waits(spool):
    """``onite list``, ``status`` and ``recur list`` as root read the first queued files and every
    template to say why each waits: a file with a second link (links cost a user nothing) is not
    read, or one large file would be read and decoded once per link."""
    queue, recur = spool / "jobs" / "P4", spool / "recur"
    plant(queue / "nobody:big", job_file("nobody:big", "/tmp"))
    template = job_file("nobody:tpl", "/tmp").replace(b"\nenv: ", b"\nrecur-every: 1d\nenv: ", 1)
    plant(recur / "nobody:tpl", template)
    assert as_user(lambda: [os.link(queue / "nobody:big", queue / f"nobody:big{i}") for i in range(3)]
                   + [os.link(recur / "nobody:tpl", recur / "nobody:tpl2")])[0] == "ok"
    listed = run_cli(["list"])
    assert listed.code == 0 and listed.out.count("a hard link") == 4, listed
    templates = run_cli(["recur", "list"])
    assert templates.code == 0 and "a hard link" in templates.out, templates


def test_a_jobs_leader_keeps_its_pid_until_what_it_left_is_ended(spool, workdir):
    """The monitor ends what a job left running by signalling its process group, named by the
    leader's pid. Reaped at once, that pid was free: a job that left a setsid'd child ignoring TERM
    (so that the clean-up lasts kill_grace) and had the next pid handed out be its leader's got the
    next job, another user's, started under that number and SIGKILLed. The leader now stays an
    unreaped zombie of its monitor's until the clean-up is done: no other process can be given its pid
    meanwhile; and the next job starts only once it is done."""
    set_config(spool, kill_grace="3s")
    leader, straggler, began = workdir / "leader", workdir / "straggler", workdir / "began"
    body = (f"echo $$ > {leader}\n"
            f"setsid sh -c 'trap \"\" TERM; echo $$ > {straggler}; sleep 30' &\n"
            f"while [ ! -s {straggler} ]; do sleep 0.01; done\n")
    submit("leaver", body, user="nobody")
    submit("next", f"echo $$ > {began}\n", user="daemon")
    driver = start_driver(spool)

    def leader_is_a_zombie() -> bool:
        if not leader.exists() or not leader.read_text().strip():
            return False
        with open(f"/proc/{int(leader.read_text())}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"

    wait_for(leader_is_a_zombie, what="the leader to end")  # its pid still taken
    assert alive(int(straggler.read_text()))  # while what it left is still being ended
    assert not began.exists()  # and the next job waits for it
    assert driver.wait(timeout=60) == 0
    assert not alive(int(straggler.read_text()))
    assert int(began.read_text()) != int(leader.read_text())
    assert result(spool, "leaver")["state"] == "done" and result(spool, "next")["state"] == "done"


LEAVES_A_WRITER = """\
sh -c 'trap "" TERM; echo $$ > {pid}; while :; do head -c 65536 /dev/zero; sleep 0.01; done' &
while [ ! -s {pid} ]; do sleep 0.01; done
exit 0
"""


def test_what_a_job_leaves_running_is_gone_before_it_is_filed_and_the_next_job_starts(spool, workdir):
    """nobody's job leaves a process that ignores TERM and writes without end, and exits 0 at once: it was filed
    `done` at once, while what it left ran on through the clean-up (kill_grace) beside the next job, another
    user's, on the night's one slot, and wrote past max_output unchecked (1.5 GB in 3 s from `yes`, with
    max_output 1M). Now its monitor ends what it left before it records the end: the run is filed, and the
    next job starts, only once every process of it is gone, and one writing past max_output is killed at
    once and the run filed as stopped for it."""
    set_config(spool, max_output="1M", kill_grace="30s", slots=1)
    pid, seen = workdir / "writer", workdir / "seen"
    submit("leaves", LEAVES_A_WRITER.format(pid=pid), "-p", "1", user="nobody")
    submit("next", f"[ -d /proc/$(cat {pid}) ] && echo alive > {seen} || echo gone > {seen}\n", "-p", "2",
           user="daemon")
    assert drain(spool).returncode == 0
    assert seen.read_text() == "gone\n"
    assert not alive(int(pid.read_text()))
    leaves = result(spool, "nobody:leaves")
    assert (leaves["state"], leaves["reason"]) == ("failed", "stopped: it wrote more output than max_output"), leaves
    assert leaves["exit_code"] == 0
    assert result(spool, "daemon:next")["state"] == "done"
    assert (spool / "stdout" / "nobody:leaves").stat().st_size < 1 << 30


# ---- 14. the key rules cannot be turned against another user's job -----------------------------


def test_a_recurring_jobs_run_keeps_its_key_against_an_earlier_forgery(spool):
    """nobody puts a file at the key of daemon's recurring job's next run before the run is spooled
    (its key is known in advance): the run is its template owner's all the same."""
    r = run_cli(["recur", "add", "rt", "--cron", "0 3 * * *"], stdin=b"true\n", user="daemon", cwd="/tmp")
    assert r.code == 0, r
    name = "daemon:rt-20990101T0300"
    plant(spool / "jobs" / "P7" / name, job_file(name, "/tmp"))
    next_ctime_tick()

    def spool_the_run():
        fd = os.open(spool / "jobs" / "P4" / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, job_file(name, "/tmp"))
        os.close(fd)

    assert as_user(spool_the_run, "daemon")[0] == "ok"
    assert drain(spool).returncode == 0
    assert result(spool, name)["user"] == "daemon" and result(spool, name)["state"] == "done"
    assert _refused_as(spool, name, "nobody"), log_lines(spool)


def test_an_edit_whose_retries_leave_the_jobs_attempt_out_of_range_is_none(spool):
    """nobody queues a file saying ``attempt: 2`` of ``retries: 1`` (as a retry is) and an edit of it with
    ``retries: 0``: the edited job could not exist, so the edit counts for nothing. It stopped root's
    ``list``, ``status``, ``cancel 'b*'`` and ``edit`` with a traceback, and the driver set the job aside."""
    job = Job(name="nobody:x", priority=4, submitted=datetime.now().astimezone(), host="vm", umask=0o022,
              cwd=b"/tmp", env={b"PATH": b"/usr/bin:/bin"}, body=b"true\n", retries=1, attempt=2)
    plant(spool / "jobs" / "P4" / "nobody:x", encode(job))
    plant(spool / "edit" / "nobody:x@1", encode(job._replace(retries=0, attempt=1, env={})))
    submit("b1", "true\n", "--at", "+1d")
    for args in (["list"], ["status"], ["edit", "nobody:x", "--timeout", "1h"]):
        r = run_cli(args)
        assert r.code == 0 and "Traceback" not in r.err, r
    assert "nobody:x" in run_cli(["list"]).out
    r = run_cli(["cancel", "b*", "--yes"])
    assert (r.code, r.out) == (0, "b1: cancelled\ncancelled 1 job(s)\n"), r
    assert drain(spool).returncode == 0
    assert result(spool, "nobody:x")["state"] == "done"
    assert not [line for line in log_lines(spool) if " error " in line]
    assert os.listdir(spool / "edit") == []


def test_a_flood_of_edits_of_a_users_own_job_is_read_no_further_than_its_newest_four(spool):
    """Each look at a queued job read every edit of it its owner made: nobody's thousands of edits (never its
    job's: another submit time) had root's list, status and the driver read them all, at every look. Only the
    newest four count; the driver still removes them all as it claims the job."""
    assert run_cli(["submit", "flood"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["edit", "flood", "--at", "+1d"], user="nobody", cwd="/tmp").code == 0  # a real edit
    junk = encode(Job(name="nobody:flood", priority=4, submitted=datetime(2020, 1, 1).astimezone(), host="vm",
                      umask=0o022, cwd=b"/", env={}, body=b"true\n"))

    def waiting() -> str:
        (row,) = [j for j in run_cli(["list", "--json"]).json()["jobs"] if j["name"] == "nobody:flood"]
        return row["waiting"] or ""

    next_ctime_tick()
    for i in range(3):
        plant(spool / "edit" / f"nobody:flood@junk{i}", junk)
    assert waiting().startswith("not before "), waiting()  # the real edit is among the newest four
    next_ctime_tick()
    plant(spool / "edit" / "nobody:flood@junk3", junk)
    assert waiting() == "", waiting()  # now it is not: the flood is read no further
    assert drain(spool).returncode == 0
    assert result(spool, "nobody:flood")["state"] == "done" and os.listdir(spool / "edit") == []


def test_a_job_file_with_more_tried_attempts_than_came_before_stops_no_night(spool):
    """nobody's file says ``retries: 1`` and holds 101 ``tried:`` lines (the most a result may list): its
    retry would have held 102, and root's driver died with a traceback as its run failed, leaving root's
    job running unwatched. Such a file is damaged: a job has had ``attempt`` − 1 attempts before."""
    when = datetime.now().astimezone()
    tried = tuple(Attempt(attempt=1, started=when, finished=when, host="vm", exit_code=1) for _ in range(101))
    lines = b"".join(b"\ntried: " + json.dumps(t.to_json()).encode() for t in tried)
    text = job_file("nobody:x", "/tmp", b"false\n", retries=1).replace(b"\nenv: ", lines + b"\nenv: ", 1)
    plant(spool / "jobs" / "P4" / "nobody:x", text)
    submit("b1", "true\n")
    assert drain(spool).returncode == 0
    assert result(spool, "b1")["state"] == "done"
    rec = result(spool, "nobody:x")
    assert rec["state"] == "failed" and "101 attempts tried before attempt 1" in rec["reason"], rec


def test_a_socket_swapped_in_and_out_of_a_queue_is_no_job_file_to_any_reader(spool):
    """nobody swaps a socket with each of its 50 queued files over and over (renameat2 EXCHANGE):
    opening a socket fails with ENXIO, which read_job_file's callers that expect a symlink swapped in
    (BadFile) did not expect, nor did the daemon's watch of timed jobs (it raised at a look at new
    names, which nothing in the daemon's loop catches). A socket met as the file is opened is no job file, as a symlink is."""
    import socket

    from onite.spool.filecheck import BadFile, read_job_file
    from onite.spool.paths import SpoolDir
    from onite.spool.index import TimedWatch

    queue, stop = spool / "jobs" / "P4", spool / "stop-swapping"

    def swap():
        from onite.spool.files import rename_exchange

        pairs = []
        for i in range(50):
            fd = os.open(queue / f"nobody:s{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, job_file(f"nobody:s{i}", "/tmp"))
            os.close(fd)
            socket.socket(socket.AF_UNIX).bind(str(queue / f".s{i}"))
            pairs.append((str(queue / f".s{i}"), str(queue / f"nobody:s{i}")))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stop.exists():
            for pair in pairs:
                rename_exchange(*pair)

    swapper = as_user(swap, background=True)
    try:
        wait_for(lambda: len(os.listdir(queue)) == 100, what="the files and sockets")
        sockets, looks, deadline = 0, 0, time.monotonic() + 3
        while time.monotonic() < deadline:
            for i in range(50):
                try:
                    read_job_file(queue / f"nobody:s{i}", 1 << 20)
                except BadFile as err:
                    sockets += "a socket" in str(err)
            TimedWatch(SpoolDir(spool), "h1").refresh()  # a daemon's first look
            looks += 1
        assert sockets and looks, (sockets, looks)  # the race was met
    finally:
        stop.touch()
        os.waitpid(swapper, 0)


def test_a_job_its_owner_stops_before_its_exec_cannot_hang_its_monitor(spool, workdir):
    """Between its drop to the owner and its exec, a job's process is its owner's to signal, while its
    monitor waits for the exec (subprocess's pipe). nobody SIGSTOPs each new child of the monitors as
    soon as it may: one in ten or so was caught before its exec, and its monitor waited for ever: its
    time limit unenforced, its run never ended, the drain never over.
    A child stopped there is now killed, and its run ends as killed. A round catches none now and then (the
    stop must land in a window of microseconds): rounds go on until one has."""
    set_config(spool, kill_grace="1s")
    for round_ in range(5):
        if _stop_before_exec(spool, workdir, round_):
            return
    raise AssertionError("no job of five rounds of 40 was stopped before its exec")


def _stop_before_exec(spool, workdir, round_: int) -> list[str]:
    """One round of the attack above: 40 jobs drained while nobody stops each new child of the monitors; each ends,
    and those stopped before their exec are killed: their keys."""
    jobs = 40
    for i in range(jobs):
        submit(f"s{round_}-{i}", "true\n", "--timeout", "3s", user="nobody")
    done = workdir / f"done{round_}"
    driver = start_driver(spool)

    def children(pid: int) -> list[int]:
        try:
            with open(f"/proc/{pid}/task/{pid}/children", "rb") as handle:
                return [int(word) for word in handle.read().split()]
        except (OSError, ValueError):
            return []

    def state(pid: int) -> str | None:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                return handle.read().rsplit(b")", 1)[1].split()[0].decode()
        except (OSError, IndexError):
            return None

    def cmdline(pid: int) -> bytes:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                return handle.read()
        except OSError:
            return b""

    def stopper():  # only the monitors' new children: no other process of the machine's
        seen = set()
        while not done.exists():
            for pid in {child for monitor in children(driver.pid) for child in children(monitor)} - seen:
                seen.add(pid)
                for _ in range(50_000):
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except PermissionError:  # still root's
                        continue
                    except ProcessLookupError:
                        break
                    while state(pid) not in ("T", "Z", None):  # a stop sent during its exec comes after it
                        time.sleep(0.001)
                    if not cmdline(pid).startswith(b"/bin/sh"):  # stopped before its exec: the attack
                        break
                    try:
                        os.kill(pid, signal.SIGCONT)  # after it: the job's own, left to run
                    except ProcessLookupError:
                        pass
                    break

    pid = as_user(stopper, background=True)
    try:
        # a job stopped after its exec is stopped by its time limit
        wait_for(lambda: driver.poll() is not None, timeout=120, what="the drain to end")
    finally:
        done.touch()
        os.waitpid(pid, 0)
        if driver.poll() is None:  # the test failed: what it stopped goes, and the driver
            for child in {child for monitor in children(driver.pid) for child in children(monitor)}:
                signal_pid(child, signal.SIGKILL)
            driver.kill()
    ended = {line.split()[3]: line for line in log_lines(spool) if line.split()[2] in ("done", "failed")
             and line.split()[3].startswith(f"nobody:s{round_}-")}
    assert set(ended) == {f"nobody:s{round_}-{i}" for i in range(jobs)}  # none waited for ever
    return [key for key, line in ended.items() if 'reason="signal 9 (SIGKILL)"' in line]  # stopped before exec


def test_a_lease_its_owner_holds_on_its_output_does_not_hold_up_the_driver(spool, workdir):
    """A retry appends to its owner's output file, which the owner may open and hold a lease on
    (fcntl F_SETLEASE: the owner of a file may). nobody took a read lease on stdout/nobody:leasy
    once its first attempt ended: root's driver, opening it for the retry, waited until the kernel
    broke the lease (lease-break-time, 45 s by default), starting nothing for anyone meanwhile, and
    again at every retry of every such job. The open no longer waits:
    a file its owner holds so is replaced by a new one, as another user's would be."""
    set_config(spool, retry_delay="0.5")
    tried, done, said, leased = workdir / "tried", workdir / "done", workdir / "said", workdir / "leased"
    # the first attempt lets its output go (a lease needs no writer), and fails once nobody holds the lease
    submit("leasy", f"[ -e {tried} ] && {{ echo second; exit 0; }}; touch {tried}; echo first; exec >/dev/null 2>&1; "
                    f"while [ ! -e {leased} ]; do sleep 0.01; done; exit 1\n", "--retries", "1", user="nobody")
    output = spool / "stdout" / "nobody:leasy"

    def holder():
        import fcntl

        broken = []
        signal.signal(signal.SIGIO, lambda signum, frame: broken.append(signum))  # the kernel asks for it back
        while True:  # until no one has it open to write: the first attempt has let it go
            try:
                fd = os.open(output, os.O_RDONLY)
            except OSError:  # not made yet, or made but not yet given to nobody
                time.sleep(0.001)
                continue
            try:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
                break
            except OSError:
                os.close(fd)
                time.sleep(0.001)
        leased.touch()
        inode = os.fstat(fd).st_ino
        while not done.exists():
            time.sleep(0.01)
        said.write_text(f"{inode} {len(broken)}")

    pid = as_user(holder, background=True)
    try:
        assert drain(spool).returncode == 0
    finally:
        done.touch()
        os.waitpid(pid, 0)
    leased, broken = (int(word) for word in said.read_text().split())
    assert broken  # the driver opened it while nobody held it
    res = result(spool, "leasy")
    assert (res["state"], res["attempt"]) == ("done", 2), res
    assert os.stat(output).st_ino != leased and b"second" in output.read_bytes()


def test_a_jobs_leader_its_owner_traces_from_outside_still_ends_at_its_time_limit(spool, workdir):
    """nobody ptraces its own job's leader from a process of its own outside the job (PTRACE_SEIZE,
    as its owner may) and never waits for it: a traced zombie is seen by its tracer only, so when
    the time limit killed the job, root's monitor never saw its leader exit and sent SIGKILL every
    50 ms for ever: the run never ended, its slot stayed taken and the drain never ended. A leader that is a
    zombie its monitor cannot wait for has ended."""
    set_config(spool, kill_grace="1s")
    leader, done, said = workdir / "leader", workdir / "done", workdir / "said"
    submit("traced", f"echo $$ > {leader}; sleep 300\n", "--timeout", "3s", user="nobody")
    submit("after", "true\n", user="daemon")

    def tracer():
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        while not (leader.exists() and leader.read_text().strip()):
            time.sleep(0.01)
        said.write_text(str(libc.ptrace(0x4206, int(leader.read_text()), None, None)))  # PTRACE_SEIZE
        while not done.exists():
            time.sleep(0.05)  # never waits for its tracee

    pid = as_user(tracer, background=True)
    driver = start_driver(spool)
    try:
        wait_for(lambda: driver.poll() is not None, timeout=60, what="the drain to end")
    finally:
        done.touch()
        os.waitpid(pid, 0)
        if driver.poll() is None:
            driver.kill()
    assert said.read_text() == "0"  # the leader was traced
    assert result(spool, "traced")["reason"] == "timeout"
    assert result(spool, "after")["state"] == "done"


def test_a_lease_its_owner_holds_on_a_queued_file_stops_no_daemon(spool, workdir):
    """The owner of a file may take a lease on it (fcntl F_SETLEASE), and then root's non-blocking open
    fails with EAGAIN (a blocking one would wait lease-break-time, 45 s). nobody writes a job file,
    leases it and names it in a queue: the daemon's watch of timed jobs let the error escape, and root's
    daemon died with a traceback (the driver set it aside as "please report this"). A leased file is no job
    file to read: the night goes on."""
    import subprocess
    import sys

    from conftest import REPO

    daemon = subprocess.Popen([sys.executable, "-m", "onite", "daemon"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True,
                              env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO)))
    wait_for(lambda: any(" daemon-start " in line for line in log_lines(spool)), what="the daemon")
    queue, done, held = spool / "jobs" / "P4", workdir / "done", workdir / "held"
    text = job_file("nobody:leased", "/tmp")

    def lease():
        import fcntl

        signal.signal(signal.SIGIO, lambda signum, frame: None)  # asked to give it back: it does not
        fd = os.open(queue / ".leased", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, text)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        os.rename(queue / ".leased", queue / "nobody:leased")
        held.touch()
        keep_lease(fd, done)

    pid = as_user(lease, background=True)
    try:
        wait_for(held.exists, what="the leased file")
        submit("timed", "true\n", "--at", "+2s", user="daemon")
        wait_for(lambda: daemon.poll() is not None or result(spool, "daemon:timed")["state"] == "done",
                 what="the timed job")
        assert daemon.poll() is None
        assert result(spool, "daemon:timed")["state"] == "done"
    finally:
        done.touch()
        os.waitpid(pid, 0)
        if daemon.poll() is None:
            daemon.terminate()
        _, err = daemon.communicate(timeout=60)
    assert b"Traceback" not in err, err.decode()[-2000:]


# ---- root's commands in the morning, on what users made ------------------------------------------


def keep_lease(fd: int, done: Path) -> None:
    """Keep a write lease on ``fd``, taken again each time the kernel breaks it, until ``done`` exists."""
    import fcntl

    while not done.exists():
        try:
            if fcntl.fcntl(fd, fcntl.F_GETLEASE) != fcntl.F_WRLCK:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError:
            pass
        time.sleep(0.002)


def hold_lease(path: Path, held: Path, done: Path) -> int:
    """``nobody`` takes a write lease on its own file ``path`` (fcntl F_SETLEASE F_WRLCK: the owner of a
    file may, once no one else has it open), touches ``held``, and keeps it (taken again whenever the
    kernel breaks it) until ``done`` exists; return the holder's pid, to reap."""
    def lease():
        import fcntl

        signal.signal(signal.SIGIO, lambda signum, frame: None)  # asked to give it back: it does not
        fd = os.open(path, os.O_RDONLY)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        held.touch()
        keep_lease(fd, done)

    return as_user(lease, background=True)


def test_a_lease_its_owner_holds_on_its_output_does_not_hold_up_roots_output_command(spool, workdir):
    """nobody takes a write lease on the output file of its finished job (its own file, which no one
    else has open): root's ``onite output nobody:leasy`` (and ``-f``) blocked in open() until the
    kernel broke the lease, lease-break-time (45 s) later. Root's
    command does not wait on a user's lease: it says in one line that the owner holds the file."""
    submit("leasy", "echo hello\n", user="nobody")
    assert drain(spool).returncode == 0 and result(spool, "nobody:leasy")["state"] == "done"
    held, done = workdir / "held", workdir / "done"
    pid = hold_lease(spool / "stdout" / "nobody:leasy", held, done)
    try:
        wait_for(held.exists, what="nobody's lease")
        for args in (["output", "nobody:leasy"], ["output", "nobody:leasy", "-f"]):
            r = run_cli(args, timeout=20)  # well under lease-break-time: the open does not wait for it
            assert r.code == 4 and r.out == "", r
            assert r.err.startswith("onite: the output of 'nobody:leasy' is held by nobody") and \
                r.err.count("\n") == 1 and " — " in r.err, r
    finally:
        done.touch()
        os.waitpid(pid, 0)
    r = run_cli(["output", "nobody:leasy"])  # let go: read as ever
    assert (r.code, r.out) == (0, "hello\n"), r


def test_a_users_sparse_queued_jobs_cost_roots_list_and_the_driver_no_more_than_their_headers(spool):
    """nobody cuts 200 of its queued jobs to max_job_size, their bodies sparse holes (no disk): root's ``list``,
    ``status``, ``metrics`` and ``report``, saying why each waits, read each whole (list 7 s), and the
    driver read each again whenever nobody changed its ctime (a chmod). Why a job waits, and whether it may
    start, is in its header: only a bounded head of each is read (the driver reads a job whole to start it)."""
    from onite.drain.verdicts import waiting_jobs
    from onite.spool.paths import SpoolDir
    from onite.spool.scan import queued_stats

    for i in range(200):
        r = run_cli(["submit", f"w{i:03d}", "--after", "gate"] if i else ["submit", "gate", "--hold"],
                    stdin=b"true\n", user="nobody", cwd="/tmp")
        assert r.code == 0, r
    size = (16 << 20) + (8 << 20) - 4096  # max_job_size and the room for the environment: still a job file

    def cut():
        for path in (spool / "jobs" / "P4").iterdir():
            os.truncate(path, size)

    assert as_user(cut) == ("ok", None)
    target = SpoolDir(spool)
    head = queued_stats(target)
    before = read_so_far()
    rows = waiting_jobs(target, head, datetime.now().astimezone(), euid=0, host="vm")
    assert read_so_far() - before < 100 << 20, "a job's body was read"  # not 4.8 GB
    assert len(rows) == 200 and {row["kind"] for row in rows} == {"held", "after"}, rows[:2]
    r = run_cli(["list", "--all"], timeout=15)  # well under what it took to read them whole
    assert r.code == 0 and "nobody:w199" in r.out, r
    from onite.drain.driver import Driver
    from onite.exec.local import LocalRunner

    before = read_so_far()
    driver = Driver(target, runner=LocalRunner(shell="/bin/sh", kill_grace=1.0, switch_user=True))
    assert driver.run() == 0  # one look at each: none may start
    assert read_so_far() - before < 100 << 20, "the driver read a job's body"
    assert not list((spool / "jobsdone").iterdir())


def test_a_users_job_files_of_nuls_cost_roots_commands_no_more_than_a_bounded_head(spool):
    """nobody puts files that are sparse holes from their first byte (NULs, no disk) in a queue and in edit/,
    and one whose header is 300 KiB of real bytes before its hole: a header with a NUL byte was read whole
    (16 MiB each), so root's own ``cancel`` took 43 s over 400 of them and ``list`` 14 s, and the driver's
    first look at edits stalled its first start. A header's first NUL ends the read: no job file has one."""
    from onite.app.control import doomed_by
    from onite.drain.verdicts import waiting_jobs
    from onite.spool.paths import SpoolDir
    from onite.spool.scan import queued_stats, read_markers

    r = run_cli(["submit", "w", "--at", "+10h"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 0, r
    size = 16 << 20

    def plant():
        for i in range(40):
            for path in (spool / "jobs" / "P4" / f"nobody:s{i:02d}", spool / "edit" / f"nobody:w@1.{i:08x}"):
                with open(path, "xb") as handle:
                    handle.truncate(size)
        with open(spool / "jobs" / "P4" / "nobody:long", "xb") as handle:  # a header of real bytes, then a hole
            handle.write(b"onite-job: 1\nname: nobody:long\nx-pad: " + b"x" * (300 << 10))
            handle.truncate(size)

    assert as_user(plant) == ("ok", None)
    target = SpoolDir(spool)
    before = read_so_far()
    rows = waiting_jobs(target, queued_stats(target), datetime.now().astimezone(), euid=0, host="vm")
    assert doomed_by(target, [], 0) == []
    assert len(read_markers(target.edit_dir)["nobody:w"]) == 40
    assert read_so_far() - before < 40 << 20, "a file of NULs was read whole"  # not 1.3 GB
    assert any(row["name"] == "nobody:w" for row in rows), rows
    r = run_cli(["submit", "r", "-q"], stdin=b"true\n")
    assert r.code == 0, r
    r = run_cli(["cancel", "r"], timeout=30)
    assert r.code == 0, r


def test_a_users_sparse_templates_cost_roots_recur_list_and_status_no_more_than_their_headers(spool):
    """nobody copies its template into 300 whose bodies are sparse holes of max_job_size (no disk):
    root's ``onite recur list`` and ``onite status`` read and decoded each whole, 24 MiB a template
    (600 of them: recur list 68 s, status 21 s). What they show is in a template's header: only a
    bounded head of each is read."""
    from onite.app.recur import templates
    from onite.spool.paths import SpoolDir

    set_config(spool, max_templates=300)  # all of them used (beyond it they are not read at all)
    sparse_templates(spool, ["--every", "1h"], 300)

    before = read_so_far()
    views = templates(SpoolDir(spool), datetime.now().astimezone())
    assert read_so_far() - before < 300 << 20, "a template's body was read"  # not 7 GB
    assert len(views) == 300 and {(v.rule, v.priority, v.problem) for v in views} == {("every 1h", 4, "")}, views[:2]
    r = run_cli(["recur", "list"], timeout=15)  # well under what it took to read them whole
    assert r.code == 0 and "nobody:t299" in r.out and "every 1h" in r.out, r
    r = run_cli(["status"], timeout=15)
    assert r.code == 0 and "recurring nobody:t" in r.out, r


def test_a_users_templates_beyond_max_templates_are_not_read_nor_run(spool):
    """nobody writes copies of its template into recur/ by hand, without end (``recur add`` stops at
    max_templates; a file written there asks no one): each cost every look of the driver, ``onite status`` and
    ``recur list`` a decode and croniter's (1.2 ms: 20,000 of them, 25 s of everyone's status and of every drain).
    Each user's first max_templates by name are used, the rest never read nor run; the driver says so in one line
    for nobody, not one a template; root's templates have no limit."""
    from onite.core.rules import parse_rule

    set_config(spool, max_templates=3)
    fire = (datetime.now().astimezone() - timedelta(hours=2)).replace(second=0, microsecond=0)
    rule = parse_rule(cron=f"{fire.minute} {fire.hour} * * *")
    plant_template(spool, "nobody:t0", b"true\n", rule, "nobody")
    copy = (spool / "recur" / "nobody:t0").read_bytes()
    for i in range(1, 10):
        plant(spool / "recur" / f"nobody:t{i}", copy)
    plant(spool / "recur" / "nobody:u-garbage", b"\xff" * 4096)  # decoded, it would be refused by name
    for i in range(5):
        plant_template(spool, f"root:r{i}", b"true\n", rule, "root")
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    stamp = f"{fire:%Y%m%dT%H%M}"
    for name in ["nobody:t0", "nobody:t1", "nobody:t2", *(f"root:r{i}" for i in range(5))]:
        assert result(spool, f"{name}-{stamp}")["state"] == "done", name
    assert sorted(p.name for p in (spool / "jobsdone").glob("nobody:*@result")) == \
        [f"nobody:t{i}-{stamp}@result" for i in range(3)]
    refused = [line for line in log_lines(spool) if " recur-refused " in line]
    assert len(refused) == 1 and "owner=nobody" in refused[0] and "8 of nobody's" in refused[0] \
        and "max_templates = 3" in refused[0], refused
    assert drain(spool).returncode == 0  # each driver run says it once
    assert len([line for line in log_lines(spool) if " recur-refused " in line]) == 2


def test_links_another_user_made_to_a_users_file_do_not_set_its_templates_aside(spool, world_tmp):
    """daemon has left a file writable by all; nobody links it into recur/ max_templates times, under names that
    sort first (a link keeps its file's owner: daemon's, as a template is counted). They were counted as daemon's
    templates, and daemon's own were set aside, never run, and `recur add` refused daemon one more. A file of
    several links counts after its owner's own: daemon's templates run, and daemon may add one."""
    from onite.core.rules import parse_rule

    set_config(spool, max_templates=3)
    fire = (datetime.now().astimezone() - timedelta(hours=2)).replace(second=0, microsecond=0)
    rule = parse_rule(cron=f"{fire.minute} {fire.hour} * * *")
    plant_template(spool, "daemon:nightly", b"true\n", rule, "daemon")
    shared = world_tmp / "shared"
    shared.write_bytes(b"notes\n")
    os.chown(shared, pwd.getpwnam("daemon").pw_uid, pwd.getpwnam("daemon").pw_gid)
    os.chmod(shared, 0o666)  # daemon's own carelessness: a file anyone may write (and so link)

    def links():
        for i in range(3):
            os.link(shared, spool / "recur" / f"daemon:a{i}")
    assert as_user(links) == ("ok", None)
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    assert result(spool, f"daemon:nightly-{fire:%Y%m%dT%H%M}")["state"] == "done"
    r = run_cli(["recur", "add", "more", "--every", "1h"], stdin=b"true\n", user="daemon", cwd="/tmp")
    assert r.code == 0, r


def test_templates_beyond_max_templates_cost_status_and_recur_list_no_read(spool):
    """``onite status`` and ``recur list`` (root's and everyone's) read none of nobody's templates beyond
    max_templates: files of garbage there, decoded, would show as broken templates; huge ones (a sparse 1 GB
    file) cost nothing. ``recur list`` says in one line on stderr how many of nobody's are not used."""
    from onite.app.recur import templates
    from onite.spool.paths import SpoolDir

    set_config(spool, max_templates=3)
    sparse_templates(spool, ["--every", "1h"], 3)
    plant(spool / "recur" / "nobody:t3", b"garbage\n" * 512)

    def huge():
        with open(spool / "recur" / "nobody:t4", "xb") as f:
            f.truncate(1 << 30)
    assert as_user(huge) == ("ok", None)
    assert run_cli(["recur", "add", "mine", "--every", "2h"], stdin=b"true\n", cwd="/tmp").code == 0

    aside: dict[int, int] = {}
    before = read_so_far()
    views = templates(SpoolDir(spool), datetime.now().astimezone(), aside)
    assert read_so_far() - before < 1 << 20
    assert [v.name for v in views] == ["nobody:t0", "nobody:t1", "nobody:t2", "root:mine"], views
    assert {v.problem for v in views} == {""} and aside == {nobody().pw_uid: 2}
    for user in (None, "nobody"):
        r = run_cli(["recur", "list"], user=user, timeout=15)
        shown = r.out.replace(str(spool), "SPOOL")  # its random folder name may hold "t3"
        assert r.code == 0 and "t2 " in shown and "t3" not in shown and "t4" not in shown, r
        assert r.err.strip().splitlines() == [
            "2 of nobody's recurring jobs are not used: each user's first 3 by name are (max_templates = 3); "
            "remove some (onite recur remove NAME), or ask the admin to raise max_templates"], r
    r = run_cli(["recur", "list", "--json"], timeout=15)
    assert r.code == 0 and len(r.json()["recurring"]) == 4 and "2 of nobody's" in r.err, r
    r = run_cli(["status"], timeout=15)
    shown = r.out.replace(str(spool), "SPOOL")
    assert r.code == 0 and "recurring nobody:t" in shown and "t3" not in shown and "t4" not in shown, r


def test_roots_wake_of_a_users_spool_signals_no_process_its_heartbeat_names(world_tmp):
    """nobody's own spool holds a heartbeat nobody wrote, naming a process of root's (a `sleep`, which SIGUSR2
    ends) as its daemon, on this machine, and no locks/ folder: root's `onite daemon --wake --spool` on it (to
    help) made locks/, left its request there and sent that process SIGUSR2. Root's wake is refused on a spool someone else could have changed, as its drain is."""
    from onite.drain.heartbeat import HEARTBEAT, Beat, BeatState, Role
    from onite.exec.contain import boot_id
    from onite.spool.paths import SpoolDir

    home = world_tmp / "nobody"
    home.mkdir()
    os.chown(home, nobody().pw_uid, nobody().pw_gid)
    spool = home / "spool"
    assert run_cli(["init", "--spool", str(spool)], user="nobody", cwd="/tmp").code == 0
    victim = subprocess.Popen(["sleep", "600"])
    try:
        now = datetime.now().astimezone()
        beat = Beat(host=HOST, pid=victim.pid, start_ticks=None, boot_id=boot_id(), machine=os.uname().nodename,
                    role=Role.DAEMON, started_by="hand", since=now, state=BeatState.IDLE, updated=now)
        path = SpoolDir(spool).state_path(HEARTBEAT, HOST)
        as_user(lambda: path.write_text(json.dumps(beat.to_json())))
        as_user(lambda: (spool / "locks").rmdir())  # root makes it anew, its own, to leave its request in
        r = run_cli(["daemon", "--wake", "--spool", str(spool)])
        assert r.code == 3 and r.err.startswith("onite: onite daemon --wake ") and "\n" not in r.err.rstrip(), r
        status = Path(f"/proc/{victim.pid}/status").read_text()
        pending = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
        aimed = (1 << (signal.SIGUSR2 - 1)) | (1 << (signal.SIGKILL - 1))  # a fatal signal is pending as a KILL
        assert victim.poll() is None and not any(mask & aimed for mask in pending), status
    finally:
        victim.kill()
        victim.wait()
