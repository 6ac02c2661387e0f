"""The multi-user security model (docs/security.md): every claim there has a test here.

The tests run as root (as CI does) and act as a second user, ``nobody``,
through real setgroups/setgid/setuid in forked processes.
"""

import errno
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import as_user, drain, log_lines, needs_root, nobody, result, run_cli, set_config, start_driver, wait_for
from onite.core.job import Job
from onite.core.jobfile import encode

pytestmark = [needs_root, pytest.mark.attack]
HOST = os.uname().nodename.split(".")[0]


def as_nobody(fn):
    """Run ``fn`` in a child process as nobody; return what it returns (or the exception it raised)."""
    return as_user(fn)


def submit(name, body, *args, user=None):
    r = run_cli(["submit", name, *args], stdin=body.encode(), user=user, cwd="/tmp")
    assert r.code == 0, r
    return r


def test_spool_modes_after_init(spool):
    def mode(rel):
        st = os.stat(spool / rel)
        return stat.S_IMODE(st.st_mode), st.st_uid

    assert mode(".") == (0o755, 0)
    for folder in ["jobs/P1", "jobs/P7", "jobs/urgent", "cancel", "recur", "hold"]:
        assert mode(folder) == (0o1777, 0), folder
    for folder in ["jobs", "running", "jobsdone", "stdout"]:
        assert mode(folder) == (0o755, 0), folder
    assert mode("refused") == (0o700, 0) and mode("locks") == (0o700, 0)
    assert mode("onite.toml") == (0o644, 0) and mode("onite.log") == (0o644, 0)


def test_nobody_can_spool_and_see_the_queue_but_not_write_elsewhere(spool):
    submit("rootjob", "true\n")
    submit("nbjob", "true\n", user="nobody")
    st = os.stat(spool / "jobs" / "P4" / "nobody:nbjob")
    assert st.st_uid == nobody().pw_uid and stat.S_IMODE(st.st_mode) == 0o600
    listed = run_cli(["list", "--json"], user="nobody").json()["jobs"]
    assert [(j["name"], j["user"]) for j in listed] == [("root:rootjob", "root"), ("nbjob", "nobody")]
    for folder in ["running", "jobsdone", "stdout", ".", "jobs", "refused"]:
        outcome = as_nobody(lambda f=folder: open(spool / f / "planted", "w").close())
        assert outcome == ("oserror", errno.EACCES), folder


def test_nobody_cannot_read_change_or_remove_roots_job(spool):
    submit("rootjob", "echo secret\n")
    path = spool / "jobs" / "P4" / "root:rootjob"
    assert as_nobody(lambda: open(path, "rb").read()) == ("oserror", errno.EACCES)
    assert as_nobody(lambda: open(path, "ab").close()) == ("oserror", errno.EACCES)
    assert as_nobody(lambda: os.unlink(path)) == ("oserror", errno.EPERM)
    assert as_nobody(lambda: os.rename(path, spool / "jobs" / "P1" / "root:moved")) == ("oserror", errno.EPERM)
    assert as_nobody(lambda: os.chmod(path, 0o644)) == ("oserror", errno.EPERM)
    r = run_cli(["cancel", "root:rootjob"], user="nobody")
    assert r.code == 3 and "belongs to root" in r.err
    r = run_cli(["hold", "root:rootjob"], user="nobody")
    assert r.code == 3 and "belongs to root" in r.err
    assert path.exists()


def test_nobodys_job_runs_as_nobody_and_cannot_regain_root(spool, workdir):
    out = workdir / "who"
    body = (f"(id -u; id -g; id -G; echo $HOME $USER $LOGNAME $SHELL; grep -E '^(Uid|Gid|Groups):' /proc/self/status; "
            f"/usr/bin/python3 -c 'import os; os.setuid(0)' 2>&1 | tail -1; umask) > {out}\n")
    r = run_cli(["submit", "whoami"], stdin=body.encode(), user="nobody", cwd=workdir, umask=0o027)
    assert r.code == 0, r
    drain(spool)
    lines = out.read_text().splitlines()
    entry = nobody()
    assert lines[0] == str(entry.pw_uid) and lines[1] == str(entry.pw_gid)
    assert "0" not in lines[2].split()  # no root group
    assert lines[3] == f"{entry.pw_dir} nobody nobody {entry.pw_shell}"
    assert lines[4].split()[1:] == [str(entry.pw_uid)] * 4  # real, effective, saved, fs uid
    assert lines[5].split()[1:] == [str(entry.pw_gid)] * 4
    assert "PermissionError" in lines[7] and lines[8] == "0027"
    out_st = os.stat(spool / "stdout" / "nobody:whoami")
    assert out_st.st_uid == entry.pw_uid and stat.S_IMODE(out_st.st_mode) == 0o600


def test_output_is_private_to_its_owner(spool):
    submit("rootout", "echo root-secret\n")
    submit("nbout", "echo nobody-text\n", user="nobody")
    drain(spool)
    r = run_cli(["output", "root:rootout"], user="nobody")
    assert r.code == 3 and "belongs to root" in r.err and "root-secret" not in r.out
    assert run_cli(["output", "nbout"], user="nobody").out == "nobody-text\n"
    assert run_cli(["output", "nobody:nbout"]).out == "nobody-text\n"  # root sees all
    assert as_nobody(lambda: open(spool / "stdout" / "root:rootout").read()) == ("oserror", errno.EACCES)


def make_root_job(world_tmp, body: str) -> Path:
    """A valid job file owned by root, outside the queue (what an attacker would point at)."""
    private = world_tmp / "private"
    private.mkdir(mode=0o755)
    job = Job(name="root:evil", priority=1, submitted=datetime.now(timezone.utc), host="x", umask=0o022, cwd=b"/tmp",
              env={b"PATH": b"/usr/bin:/bin"}, body=body.encode())
    path = private / "roots-job"
    path.write_bytes(encode(job))
    os.chmod(path, 0o600)
    return path


def test_planted_symlink_never_runs_as_root(spool, world_tmp, workdir):
    marker = workdir / "pwned"
    target = make_root_job(world_tmp, f"touch {marker}\n")
    assert as_nobody(lambda: os.symlink(target, spool / "jobs" / "P1" / "root:evil"))[0] == "ok"
    drain(spool)
    assert not marker.exists()
    assert not (spool / "jobs" / "P1" / "root:evil").exists()
    refused = list((spool / "refused").iterdir())
    assert len(refused) == 1 and refused[0].is_symlink()  # kept as evidence
    assert any(" refused root:evil " in ln and "symbolic link" in ln for ln in log_lines(spool))


def test_planted_hard_link_never_runs(spool, world_tmp, workdir):
    marker = workdir / "pwned"
    target = make_root_job(world_tmp, f"touch {marker}\n")
    # The kernel's protected_hardlinks already stops nobody from linking root's file...
    protected = Path("/proc/sys/fs/protected_hardlinks").read_text().strip() == "1"
    outcome = as_nobody(lambda: os.link(target, spool / "jobs" / "P1" / "root:evil"))
    assert outcome == ("oserror", errno.EPERM) if protected else outcome[0] == "ok"
    # ...and where it does not, the driver refuses a job file with a second link.
    if not os.path.lexists(spool / "jobs" / "P1" / "root:evil"):
        os.link(target, spool / "jobs" / "P1" / "root:evil")
    drain(spool)
    assert not marker.exists()
    assert any(" refused root:evil " in ln and "hard links" in ln for ln in log_lines(spool))


def test_copied_job_file_runs_as_whoever_placed_it(spool, workdir):
    out = workdir / "uid"
    submit("rootjob", f"id -u > {out}\n", "--hold")
    data = (spool / "jobs" / "P4" / "root:rootjob").read_bytes()  # root's job, with HOME=/root and all
    placed = as_nobody(lambda: (open(spool / "jobs" / "P1" / "nobody:copy", "xb").write(data),
                                os.chmod(spool / "jobs" / "P1" / "nobody:copy", 0o600)) and "ok")
    assert placed[0] == "ok"
    drain(spool)
    assert out.read_text().strip() == str(nobody().pw_uid)
    assert result(spool, "nobody:copy")["user"] == "nobody"


def test_unsafe_files_are_moved_aside_not_run(spool, workdir, world_tmp):
    marker = workdir / "ran"
    data = encode(Job(name="root:x", priority=1, submitted=datetime.now(timezone.utc), host="h", umask=0o022,
                      cwd=b"/tmp", env={b"PATH": b"/usr/bin:/bin"}, body=f"touch {marker}\n".encode()))
    p1 = spool / "jobs" / "P1"
    (p1 / "root:ghost").write_bytes(data)
    os.chown(p1 / "root:ghost", 54321, 54321)  # a uid with no account
    (p1 / "nobody:shared").write_bytes(data)
    os.chown(p1 / "nobody:shared", nobody().pw_uid, nobody().pw_gid)
    os.chmod(p1 / "nobody:shared", 0o666)  # writable by others
    os.mkfifo(p1 / "root:fifo")
    (p1 / "root:garbage").write_bytes(b"rm -rf /\n")
    os.chmod(p1 / "root:garbage", 0o600)
    drain(spool, timeout=60)
    assert not marker.exists()
    reasons = {ln.split()[3]: ln for ln in log_lines(spool) if " refused " in ln}
    assert "no account" in reasons["root:ghost"]
    assert "writable by users other than its owner" in reasons["nobody:shared"]
    assert "not a regular file" in reasons["root:fifo"]
    assert "not an onite job file" in reasons["root:garbage"]
    assert sorted(p.name.split("@")[0] for p in (spool / "refused").iterdir()) == [
        "nobody:shared", "root:fifo", "root:garbage", "root:ghost"]


def test_only_admins_may_spool_urgent_jobs(spool, workdir):
    r = run_cli(["submit", "rush", "--urgent"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 3 and "only root and the admins" in r.err
    # bypassing the command: the driver refuses a non-admin's file in jobs/urgent
    marker = workdir / "rushed"
    submit("sneaky", f"touch {marker}\n", user="nobody")
    os.rename(spool / "jobs" / "P4" / "nobody:sneaky", spool / "jobs" / "urgent" / "nobody:sneaky")
    drain(spool)
    assert not marker.exists()
    assert any(" refused nobody:sneaky " in ln and "urgent jobs need an admin" in ln for ln in log_lines(spool))
    # named in admins, nobody may
    set_config(spool, admins=["nobody"])
    submit("allowed", f"touch {marker}\n", "--urgent", user="nobody")
    drain(spool)
    assert marker.exists()
    # a member of a group named there may too, at submit and at night
    set_config(spool, admins=["%nogroup"])
    submit("by-group", f"touch {marker}.group\n", "--urgent", user="nobody")
    drain(spool)
    assert (workdir / "rushed.group").exists()


def test_nobody_cancels_its_own_running_job(spool, workdir):
    pidfile = workdir / "pid"
    submit("mine", f"echo $$ > {pidfile}; sleep 120\n", user="nobody")
    driver = start_driver(spool)
    wait_for(pidfile.exists, what="nobody's job to start")
    r = run_cli(["cancel", "mine"], user="nobody")
    assert r.code == 0, r
    assert driver.wait(30) == 0
    rec = result(spool, "mine")
    assert rec["state"] == "cancelled" and rec["reason"] == "cancelled by nobody"


def test_nobody_cannot_cancel_roots_running_job_even_by_request_file(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("rootrun", f"while [ -e {gate} ]; do sleep 0.05; done\n")
    driver = start_driver(spool)
    wait_for(lambda: (spool / "running" / HOST / "root:rootrun").exists(), what="root's job to start")
    assert run_cli(["cancel", "root:rootrun"], user="nobody").code == 3
    # a hand-made request file is refused by the driver too
    assert as_nobody(lambda: open(spool / "cancel" / "root:rootrun@forged", "w").close())[0] == "ok"
    wait_for(lambda: any("cancel-refused root:rootrun" in ln for ln in log_lines(spool)), what="the refusal")
    gate.unlink()
    assert driver.wait(30) == 0
    assert result(spool, "rootrun")["state"] == "done"


def test_own_only_false_lets_users_cancel_others_jobs_through_the_driver(spool):
    set_config(spool, own_only=False)
    submit("shared", "true\n")
    r = run_cli(["cancel", "root:shared"], user="nobody")
    assert r.code == 0 and "requested" in r.out
    drain(spool)
    assert result(spool, "shared")["reason"] == "cancelled by nobody"


def test_a_non_root_driver_refuses_clearly(spool):
    submit("x", "true\n")
    r = run_cli(["run"], user="nobody", cwd="/tmp")
    assert r.code == 3 and "drained by its owner" in r.err
