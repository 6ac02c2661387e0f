"""A job gets its owner's account, as at and cron give it: a PAM session (limits.conf, pam_loginuid)
opened by its monitor, and a pids limit on its cgroup whatever PAM says.

Real PAM (Debian's libpam, pam_limits), a real user made with useradd, a limits.d entry for it, and
the service file ``onite init`` installs, under a name of this test's own (``pam_service``), so that
no other test's jobs open it.
"""

import os
import pwd
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, ROOT, TEST_PAM_DIR, drain, log_lines, needs_root, result, run_cli, set_config

NPROC, NOFILE = 77, 99


def _pam_usable() -> str:
    """Why this machine cannot run the PAM tests ("" if it can)."""
    if not ROOT:
        return "needs root: creates a user and opens PAM sessions for it"
    if not os.path.isdir("/etc/pam.d") or not os.path.exists("/etc/pam.d/common-session-noninteractive"):
        return "no Debian PAM configuration (/etc/pam.d/common-session-noninteractive)"
    from onite.exec.pam import load

    import pamela  # noqa: F401  # the dependency, installed with onite

    return load(os.path.dirname(pamela.__file__), "other")


def _pids_controller() -> str:
    """Why jobs here get no pids limit ("" if they do)."""
    if not ROOT:
        return "needs root: cgroups"
    from onite.exec import contain, limits

    found = contain.discover(True)
    limiter = limits.discover(found.base if found.kind == contain.CGROUP2 else None, 1)
    return "" if limiter.pids_v2 or "pids" in limiter.v1 else "no cgroup pids controller here"


@pytest.fixture
def account():
    """A user made for the test with nproc 77 and nofile 99 in limits.d, and onite's PAM service
    installed as onite-test-PID; all removed after."""
    why = _pam_usable()
    if why:
        pytest.skip(why)
    from onite.spool.skeleton import install_pam_service

    name = f"onite-t{os.getpid()}"
    limits_file = Path(f"/etc/security/limits.d/onite-test-{os.getpid()}.conf")
    service = f"onite-test-{os.getpid()}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        limits_file.write_text(f"{name} hard nproc {NPROC}\n{name} hard nofile {NOFILE}\n")
        assert install_pam_service(Path("/etc/pam.d"), service).startswith("PAM: installed")
        yield name, service
    finally:
        Path(f"/etc/pam.d/{service}").unlink(missing_ok=True)
        limits_file.unlink(missing_ok=True)
        subprocess.run(["userdel", name], check=False)


def _submit(name: str, text: str, user: str, workdir: Path) -> None:
    r = run_cli(["submit", name], stdin=text.encode(), user=user, cwd=workdir)
    assert r.code == 0, r


def _output(name: str, user: str, workdir: Path) -> str:
    r = run_cli(["output", name], user=user, cwd=workdir)
    assert r.code == 0, r
    return r.out


@needs_root
@pytest.mark.attack
def test_a_job_gets_its_owners_limits_and_login_uid(account, spool, workdir):
    user, service = account
    set_config(spool, pam="required", pam_service=service)
    # its monitor (its parent once the child that opened the session has exited) keeps its own
    _submit("limits", "cat /proc/self/limits; cat /proc/self/loginuid; echo\n"
            "i=0; while [ $i -lt 200 ] && [ \"$(cut -d' ' -f4 /proc/$$/stat)\" = $PPID ]; do\n"
            "  sleep 0.05; i=$((i+1)); done\n"
            "parent=$(cut -d' ' -f4 /proc/$$/stat); grep -q onite.exec.monitor /proc/$parent/cmdline && echo monitor\n"
            "cat /proc/$parent/limits; cat /proc/$parent/loginuid; echo\n", user, workdir)
    # dash says "Cannot fork" and stops at the first fork refused; each started sleep counts
    _submit("forks", "i=0; while [ $i -lt 150 ]; do sleep 30 & i=$((i+1)); echo $i > forks.count; done\n",
            user, workdir)
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    limits, monitor = _output("limits", user, workdir).split("monitor\n")
    [nofile] = [line.split() for line in limits.splitlines() if line.startswith("Max open files")]
    assert nofile[3:5] == [str(NOFILE), str(NOFILE)], limits
    [nproc] = [line.split() for line in limits.splitlines() if line.startswith("Max processes")]
    assert nproc[2:4] == [str(NPROC), str(NPROC)], limits
    assert limits.splitlines()[-1] == str(pwd.getpwnam(user).pw_uid)  # pam_loginuid
    own = Path("/proc/self/limits").read_text().splitlines()  # the driver's are this process's
    assert [line for line in monitor.splitlines() if line.startswith(("Max open files", "Max processes"))] == \
        [line for line in own if line.startswith(("Max open files", "Max processes"))], monitor
    assert monitor.splitlines()[-1] == Path("/proc/self/loginuid").read_text().strip(), monitor
    assert result(spool, "limits")["state"] == "done"
    # the user's processes: the job's shell and the sleeps it started, and no more
    forks = result(spool, "forks")
    assert forks["state"] == "failed", forks
    started = int((workdir / "forks.count").read_text())
    assert started == NPROC - 1, started  # the shell and its sleeps: nothing of root's counted
    assert "Cannot fork" in _output("forks", user, workdir)
    events = "\n".join(log_lines(spool))
    assert f'pam="a session for each job\'s owner (service {service}' in events, events
    status = run_cli(["status"])
    assert f"pam       last drain: a session for each job's owner (service {service}" in status.out, status


@needs_root
def test_a_refused_session_fails_that_job_only(account, spool, workdir):
    """An expired account: PAM refuses it, its job fails saying so, the next job runs."""
    user, service = account
    set_config(spool, pam="required", pam_service=service)
    _submit("expired", "echo ran > expired.ran\n", user, workdir)
    _submit("after", "echo ran > after.ran\n", "nobody", workdir)
    subprocess.run(["usermod", "--expiredate", "1970-01-02", user], check=True)
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    failed = result(spool, "expired")
    assert failed["state"] == "failed" and not (workdir / "expired.ran").exists(), failed
    assert failed["reason"].startswith(f"PAM (service {service}) refused its account for {user}: "), failed
    assert result(spool, "after")["state"] == "done" and (workdir / "after.ran").exists()


@needs_root
def test_without_the_service_jobs_run_and_the_log_says_why(spool, workdir):
    set_config(spool, pam="auto", pam_service=f"onite-absent-{os.getpid()}")
    _submit("plain", "echo ran > plain.ran\n", "nobody", workdir)
    assert drain(spool).returncode == 0
    assert result(spool, "plain")["state"] == "done" and (workdir / "plain.ran").exists()
    [start] = [line for line in log_lines(spool) if " driver-start " in line]
    assert f'pam="no session (no service onite-absent-{os.getpid()} in /etc/pam.d): job limits are the driver\'s"' \
        in start, start


@needs_root
def test_required_without_the_service_drains_nothing(spool, workdir):
    set_config(spool, pam="required", pam_service=f"onite-absent-{os.getpid()}")
    _submit("kept", "echo ran > kept.ran\n", "nobody", workdir)
    assert drain(spool).returncode == 0
    assert not (workdir / "kept.ran").exists()
    assert any(" error " in line and 'pam = \\"required\\"' in line or 'pam = "required"' in line
               for line in log_lines(spool)), log_lines(spool)
    assert run_cli(["list"]).out.count("kept") == 1  # still queued


@needs_root
@pytest.mark.attack
def test_a_fork_bomb_stops_at_the_pids_limit_and_the_night_goes_on(spool, workdir):
    why = _pids_controller()
    if why:
        pytest.skip(why)
    set_config(spool, max_pids=50, pam="off")
    _submit("bomb", "i=0; while true; do sleep 30 & i=$((i+1)); echo $i > bomb.count; done\n", "nobody", workdir)
    _submit("next", "echo ran > next.ran\n", "nobody", workdir)
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    bomb = result(spool, "bomb")
    assert bomb["state"] == "failed", bomb
    # the job's shell and 49 sleeps: its monitor, a root process, was not counted against it
    assert int((workdir / "bomb.count").read_text()) == 49
    assert "Cannot fork" in _output("bomb", "nobody", workdir)
    assert result(spool, "next")["state"] == "done" and (workdir / "next.ran").exists()
    [start] = [line for line in log_lines(spool) if " driver-start " in line]
    assert "at most 50 processes a job" in start, start


def test_init_installs_the_pam_service_once_and_keeps_an_admins(tmp_path):
    from onite.spool.skeleton import install_pam_service

    said = install_pam_service(tmp_path, "onite")
    assert said == f"PAM: installed {tmp_path}/onite: each job opens a session of its owner's (docs/admin-guide.md)"
    text = (tmp_path / "onite").read_text()
    assert "session    required   pam_limits.so" in text and "pam_systemd" not in text.replace("No pam_systemd", "")
    assert oct((tmp_path / "onite").stat().st_mode & 0o777) == "0o644"
    (tmp_path / "onite").write_text("session required pam_permit.so\n")
    assert install_pam_service(tmp_path, "onite") == f"PAM: kept {tmp_path}/onite as it is"
    assert (tmp_path / "onite").read_text() == "session required pam_permit.so\n"
    assert install_pam_service(tmp_path / "none", "onite").startswith(f"PAM: {tmp_path}/none does not exist")


@needs_root
def test_onite_init_of_the_system_spool_installs_it_and_of_another_says_how(world_tmp, monkeypatch):
    from onite.spool.skeleton import pam_install_command

    config = world_tmp / "onite.toml"
    config.write_text(f'spool = "{world_tmp}/system"\n')
    monkeypatch.setenv("ONITE_SYSTEM_CONFIG", str(config))
    monkeypatch.delenv("ONITE_SPOOL", raising=False)
    (TEST_PAM_DIR / "onite").unlink(missing_ok=True)
    other, service = world_tmp / "other", f"onite-absent-{os.getpid()}"  # whatever this machine's /etc/pam.d holds
    r = run_cli(["--spool", str(other), "init"])
    assert r.code == 0 and not (TEST_PAM_DIR / "onite").exists(), r
    set_config(other, pam_service=service)
    # of another spool of root's, it says what is missing and the command that installs it, and changes nothing
    r = run_cli(["--spool", str(other), "init"])
    said, command = r.out.splitlines()[-1].split("; to install it: ")
    assert said == (f"PAM: not installed (no service {service} in {TEST_PAM_DIR}): jobs get no PAM session "
                    "(docs/admin-guide.md)"), r
    assert command == pam_install_command(service) and command.startswith("install -m 644 "), command
    set_config(other, pam="off")
    assert "PAM" not in run_cli(["--spool", str(other), "init"]).out  # jobs would open no session
    (world_tmp / "users").mkdir(mode=0o777)
    os.chmod(world_tmp / "users", 0o1777)
    personal = run_cli(["--spool", str(world_tmp / "users" / "mine"), "init"], user="nobody", cwd="/tmp")
    assert personal.code == 0 and "PAM" not in personal.out, personal  # a user's driver opens none
    subprocess.run(shlex.split(command), check=True)  # the command as said, run as root
    assert (TEST_PAM_DIR / service).read_bytes() == (REPO / "onite" / "skel" / "pam.d-onite").read_bytes()
    assert oct((TEST_PAM_DIR / service).stat().st_mode & 0o777) == "0o644"
    set_config(other, pam="auto")
    r = run_cli(["--spool", str(other), "init"])
    assert r.code == 0 and "PAM" not in r.out, r
    (TEST_PAM_DIR / service).unlink()
    r = run_cli(["init"])
    assert r.code == 0 and f"PAM: installed {TEST_PAM_DIR}/onite" in r.out, r
    r = run_cli(["init"])
    assert r.code == 0 and f"PAM: kept {TEST_PAM_DIR}/onite as it is" in r.out, r
    (TEST_PAM_DIR / "onite").unlink()


@needs_root
def test_a_job_whose_session_opener_dies_as_it_starts_it_leaves_nothing_running(account, spool, workdir):
    """The child that opens a job's PAM session is killed just after it forked the job, before it
    said so (strace kills it at its second chdir: the one back to / once the job's interpreter
    runs). The job, an orphan, is its monitor's child: the monitor ends it and files the run as
    failed; nothing of it runs on, unwatched, beside a retry."""
    from test_exactly_once import STRACE, drain_killing_at_second_chdir

    if STRACE is None:
        pytest.skip("needs strace (Debian: strace) to kill the session's opener")
    _, service = account
    set_config(spool, pam="required", pam_service=service, retry_delay="0.05")
    r = run_cli(["submit", "slow", "--retries", "1"], stdin=b"sleep 60\n", cwd=workdir)
    assert r.code == 0, r
    left = drain_killing_at_second_chdir(spool, "root:slow")
    assert not left, f"processes of the job still run, unwatched: {left}"
    res = result(spool, "slow")
    assert res["state"] == "failed" and "the process opening it died" in res["reason"], res
