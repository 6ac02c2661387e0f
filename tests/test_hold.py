"""Hold and release keep a job's place: a marker in hold/, the job file untouched (docs/spool-format.md).

The order is the kernel's ctime of each job file, which no hold or release
changes; a marker counts only when its owner is the job's owner or root.
Real spools, real drivers, real users (``nobody`` when root).
"""

import os
import shutil
import stat
import subprocess

import pytest

from conftest import drain, log_lines, needs_root, nobody, run_cli, start_driver, wait_for


def submit(name, *args, user=None, body=b"true\n"):
    r = run_cli(["submit", name, *args], stdin=body, user=user, cwd="/tmp")
    assert r.code == 0, r


def listed(*, user=None):
    r = run_cli(["list", "--json"], user=user, cwd="/tmp")
    assert r.code == 0, r
    return [(j["name"], j["state"]) for j in r.json()["jobs"]]


def started(spool):
    return [line.split()[3] for line in log_lines(spool) if line.split()[2] == "start"]


def test_hold_and_release_keep_the_job_in_its_place(spool, cli):
    for name in ("a", "b", "c", "d"):
        submit(name)
    path = spool / "jobs" / "P4" / "root:b"
    before = os.lstat(path)
    assert cli(["hold", "b"]).out == "b: held\n"
    assert listed() == [("a", "queued"), ("b", "held"), ("c", "queued"), ("d", "queued")]
    assert cli(["hold", "b"]).code == 0  # held already: nothing changes
    assert cli(["release", "b"]).out == "b: released\n"
    after = os.lstat(path)
    assert (after.st_ctime_ns, after.st_ino, stat.S_IMODE(after.st_mode)) == \
        (before.st_ctime_ns, before.st_ino, stat.S_IMODE(before.st_mode))  # the job file was never touched
    assert listed() == [("a", "queued"), ("b", "queued"), ("c", "queued"), ("d", "queued")]
    assert list((spool / "hold").iterdir()) == []
    assert drain(spool).returncode == 0
    assert started(spool) == ["root:a", "root:b", "root:c", "root:d"]


def test_a_job_spooled_held_runs_in_its_place_once_released(spool, cli):
    submit("first")
    submit("later", "--hold")
    submit("last")
    assert drain(spool).returncode == 0
    assert started(spool) == ["root:first", "root:last"] and listed() == [("later", "held")]
    submit("after-all")
    assert cli(["release", "later"]).code == 0
    assert listed() == [("later", "queued"), ("after-all", "queued")]


def test_a_running_driver_sees_a_release_and_runs_the_job_in_its_place(spool, workdir, cli):
    """The driver parks a held job; removing its marker changes hold/, which unparks it at the next pick."""
    gate = workdir / "gate"
    gate.touch()
    submit("waits", "--hold")
    submit("gated", body=f"while [ -e {gate} ]; do sleep 0.05; done\n".encode())
    submit("behind")
    driver = start_driver(spool)
    try:
        wait_for(lambda: "root:gated" in started(spool), what="the gated job to start")
        assert cli(["release", "waits"]).code == 0
        gate.unlink()
        assert driver.wait(60) == 0
    finally:
        gate.unlink(missing_ok=True)
    assert started(spool) == ["root:gated", "root:waits", "root:behind"]  # not behind "behind", as a chmod would have put it


@needs_root
@pytest.mark.attack
def test_only_the_owners_or_roots_marker_holds_a_job(spool, cli):
    submit("theirs", user="nobody")
    submit("mine")
    # nobody drops markers for root's job, a symlink and a folder for its own: none of them holds anything
    hold = spool / "hold"
    assert run_cli(["hold", "root:mine"], user="nobody").code == 3
    for name in ("root:mine@x1", "nobody:theirs@link"):
        pid = os.fork()
        if pid == 0:
            os.setgid(nobody().pw_gid)
            os.setuid(nobody().pw_uid)
            if name.endswith("link"):
                os.symlink("/etc/passwd", hold / name)
            else:
                open(hold / name, "w").close()
            os._exit(0)
        os.waitpid(pid, 0)
    assert listed() == [("nobody:theirs", "queued"), ("mine", "queued")]
    # root holds nobody's job: the marker is nobody's, and nobody may release it
    assert cli(["hold", "nobody:theirs"]).code == 0
    markers = [p for p in hold.iterdir() if p.name.startswith("nobody:theirs@") and not p.is_symlink()]
    assert [m.stat().st_uid for m in markers] == [nobody().pw_uid]
    assert listed(user="nobody") == [("theirs", "held"), ("root:mine", "queued")]
    r = run_cli(["release", "theirs"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "theirs: released\n"), r
    assert listed() == [("nobody:theirs", "queued"), ("mine", "queued")]


def test_a_cancelled_held_job_leaves_no_marker_and_a_stale_one_holds_no_new_job(spool, cli):
    submit("x", "--hold")
    assert cli(["cancel", "x"]).code == 0
    assert list((spool / "hold").iterdir()) == []
    (spool / "hold" / "root:y@stale").touch()  # left by a job that is gone (a crash, a cancel by its driver)
    submit("y")
    assert listed() == [("y", "queued")] and list((spool / "hold").iterdir()) == []


def test_a_job_files_mode_holds_nothing_and_a_hold_needs_the_hold_folder(spool, cli):
    """The one hold is the marker: a job file its owner made read-only is queued and runs. A spool
    whose hold/ is gone refuses a hold, and says how to repair it; nothing is spooled held without it."""
    submit("readonly")
    os.chmod(spool / "jobs" / "P4" / "root:readonly", 0o400)
    assert listed() == [("readonly", "queued")]
    assert drain(spool).returncode == 0 and started(spool) == ["root:readonly"]
    shutil.rmtree(spool / "hold")
    submit("x")
    r = cli(["hold", "x"])
    assert r.code == 4 and "run onite init" in r.err, r
    r = run_cli(["submit", "y", "--hold"], stdin=b"true\n", cwd="/tmp")
    assert r.code == 4 and "run onite init" in r.err, r
    assert listed() == [("x", "queued")]
    assert cli(["init"]).code == 0 and cli(["hold", "x"]).code == 0 and listed() == [("x", "held")]


@needs_root
def test_a_hold_acknowledged_between_the_drivers_pick_and_its_claim_keeps_the_job_from_running(spool, workdir):
    """The driver has picked nobody's job and is about to claim it (strace holds its rename of the job file) when
    nobody holds it: ``onite hold`` finds it still queued and says ``held``. The claim must not start it: the
    driver puts it back in its queue, held (it loses its place, as an edit that meets the claim does). Before,
    it ran. Found by reading the code for a fault campaign."""
    import subprocess

    import pytest
    from test_exactly_once import HOST, STRACE, driver_argv, driver_env, traced_driver

    if STRACE is None:
        pytest.skip("needs strace to hold the driver before its claim")
    ledger = workdir / "ledger"
    submit("x", user="nobody", body=f"echo ran >> {ledger}\n".encode())
    queued = spool / "jobs" / "P4" / "nobody:x"
    traced = subprocess.Popen([STRACE, "-qq", "-o", "/dev/null", "-P", str(queued), "-e", "trace=rename",
                               "-e", "inject=rename:delay_enter=60000000:when=1", *driver_argv()], env=driver_env(spool))
    wait_for(lambda: (spool / "running" / HOST / "nobody:x@run").exists(), what="the driver to pick the job")
    r = run_cli(["hold", "x"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "x: held\n"), r
    [driver] = traced_driver(traced.pid)
    traced.kill()  # strace lets the driver go on: it claims the job
    traced.wait(timeout=30)
    wait_for(lambda: not os.path.exists(f"/proc/{driver}"), what="the driver to exit")
    assert not ledger.exists(), "the held job ran"
    assert any("requeued nobody:x" in line and "held as it was claimed" in line for line in log_lines(spool))
    assert listed(user="nobody") == [("x", "held")]
    assert run_cli(["release", "x"], user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0 and ledger.read_text() == "ran\n"


def test_hold_and_release_take_patterns_as_cancel_does(spool, cli):
    """After `submit --lines`, `onite hold 'ln-*'` was refused ('name each job'): a batch had to be held one name at
    a time. A pattern picks the caller's queued jobs (release: held ones), as cancel's does."""
    assert cli(["submit", "-q", "ln", "--lines"], stdin=b"true\ntrue\ntrue\n").code == 0
    assert cli(["submit", "-q", "other"], stdin=b"true\n").code == 0
    assert cli(["hold", "ln-00002"]).code == 0
    r = cli(["hold", "ln-*"])
    assert (r.code, r.out) == (0, "ln-00001: held\nln-00003: held\n"), r  # not ln-00002 again, not other
    assert listed_states(cli) == {"ln-00001": "held", "ln-00002": "held", "ln-00003": "held", "other": "queued"}
    r = cli(["release", "ln-0000[12]", "other"])
    assert (r.code, r.out) == (0, "other: not held: nothing to release\nln-00001: released\nln-00002: released\n"), r
    r = cli(["release", "zz*"])
    assert (r.code, r.err) == (1, "onite: no held job of yours matches 'zz*' — see onite list\n"), r


def listed_states(cli) -> dict[str, str]:
    return {job["name"]: job["state"] for job in cli(["list", "--json"]).json()["jobs"]}


@needs_root
def test_a_release_of_a_job_no_hold_holds_says_it_was_not_held(spool, cli):
    """``onite release x`` of a queued job that was not held said ``x: released``, as if it had let it go. It says
    it was not held (exit 0: nothing was left to do), also where the only marker is one another user (daemon) dropped,
    which holds nothing; a held job in the same command is released as before."""
    submit("free", user="nobody")
    submit("kept", user="nobody")
    assert run_cli(["hold", "kept"], user="nobody", cwd="/tmp").code == 0
    # daemon's marker on nobody's job holds nothing (only its owner's or root's do)
    marker = spool / "hold" / "nobody:free@x1"
    assert subprocess.run(["runuser", "-u", "daemon", "--", "touch", str(marker)]).returncode == 0
    assert listed(user="nobody") == [("free", "queued"), ("kept", "held")]
    r = run_cli(["release", "free", "kept"], user="nobody", cwd="/tmp")
    assert (r.code, r.out, r.err) == (0, "free: not held: nothing to release\nkept: released\n", ""), r
    r = run_cli(["release", "kept"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "kept: not held: nothing to release\n"), r
    assert listed(user="nobody") == [("free", "queued"), ("kept", "queued")]


@needs_root
def test_a_hold_of_a_held_job_says_it_was_already_held(spool, cli):
    """``onite hold x`` of a job already held said ``x: held``, as if it had held it just then. It says it was
    already held, as a release of a free job says it was not held (exit 0: nothing was left to do), for its owner
    and for root; one release still lets it run."""
    submit("kept", user="nobody")
    submit("free", user="nobody")
    assert run_cli(["hold", "kept"], user="nobody", cwd="/tmp").out == "kept: held\n"
    r = run_cli(["hold", "kept", "free"], user="nobody", cwd="/tmp")
    assert (r.code, r.out, r.err) == (0, "kept: already held\nfree: held\n", ""), r
    r = cli(["hold", "nobody:kept"])
    assert (r.code, r.out, r.err) == (0, "nobody:kept: already held\n", ""), r
    r = run_cli(["release", "kept"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "kept: released\n"), r
    assert listed(user="nobody") == [("kept", "queued"), ("free", "held")]


def test_each_name_is_held_released_or_cancelled_though_one_before_it_fails(spool, cli):
    """`hold a nosuch b` stopped at nosuch, and b was never held (likewise release and cancel). As kill(1) and rm(1)
    go, each name is done in turn: the one that fails is said in one line, the exit code is its, the rest are done."""
    for name in ("a", "b"):
        assert cli(["submit", name], stdin=b"true\n").code == 0
    r = cli(["hold", "a", "nosuch", "b"])
    assert (r.code, r.out, r.err) == (1, "a: held\nb: held\n", "onite: no job 'nosuch' is queued — see onite list\n"), r
    assert [row["state"] for row in cli(["list", "--json"]).json()["jobs"]] == ["held", "held"]
    r = cli(["release", "nosuch", "a", "b"])
    assert (r.code, r.out) == (1, "a: released\nb: released\n"), r
    r = cli(["cancel", "a", "nosuch", "b"])
    assert (r.code, r.out) == (1, "a: cancelled\nb: cancelled\n"), r
    assert r.err == "onite: no job 'nosuch' is queued or running — see onite list\n", r
    assert cli(["list", "--json"]).json()["jobs"] == []


def test_hold_release_edit_and_cancel_of_a_finished_job_say_the_same_and_to_restart_it(spool, cli):
    """`onite edit a1` of a finished job said it had finished, `onite hold a1` that no job 'a1' was queued: each of
    the four says it has finished, and that onite restart spools it again."""
    submit("a1")
    assert drain(spool).returncode == 0
    for command, done in (("hold", "held"), ("release", "released"), ("edit", "edited"), ("cancel", "cancelled")):
        r = cli([command, "a1", *(["--timeout", "1h"] if command == "edit" else [])])
        assert (r.code, r.err) == (3, f"onite: job 'a1' has finished: it cannot be {done} — spool it again: "
                                      "onite restart a1\n"), r


@needs_root
def test_another_users_finished_job_is_not_theirs_to_restart(spool, workdir):
    """Told that root's finished job cannot be held, nobody was told to `onite restart` it, which only its owner or
    root may."""
    submit("a1")
    assert drain(spool).returncode == 0
    r = run_cli(["hold", "root:a1"], user="nobody", cwd=workdir)
    assert (r.code, r.err) == (3, "onite: job 'root:a1' has finished: it cannot be held — only its owner or root may "
                                  "spool it again\n"), r
