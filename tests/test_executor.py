"""What a job finds when it starts, whether or not the driver changes credentials to start it.

A job owned by the driver's own user is started without a credential
switch (vfork); another user's, as root, with one (fork). Either way: only
its standard descriptors (nothing the driver inherited), no ignored or
blocked signal, its own session, its directory and umask.
"""

import os
import subprocess
import sys

from conftest import ROOT, REPO, result, run_cli

PROBE = """\
exec 2>&1
echo "secret=$(ls -l /proc/$$/fd/ | grep -c inherited-secret)"
grep -E '^Sig(Ign|Blk)' /proc/$$/status | tr -d '\\t'
echo "sid=$(cut -d' ' -f6 /proc/$$/stat) pid=$$"
echo "cwd=$(pwd) umask=$(umask)"
"""


def drain_with_an_inherited_descriptor(spool, workdir):
    """A driver started by a parent that leaves a descriptor open (as a careless cron wrapper might)."""
    secret = open(workdir / "inherited-secret", "w")
    try:
        env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
        proc = subprocess.run([sys.executable, "-m", "onite", "run"], env=env, pass_fds=(secret.fileno(),),
                              capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    finally:
        secret.close()


def facts(spool, name):
    assert result(spool, name)["state"] == "done", (spool / "stdout" / name).read_text()
    lines = (spool / "stdout" / name).read_text().split()
    return dict(item.split("=", 1) if "=" in item else item.split(":", 1) for item in lines)


def check(found, workdir, umask):
    assert found["secret"] == "0"
    assert found["SigIgn"] == found["SigBlk"] == "0000000000000000"
    assert found["sid"] == found["pid"]
    assert (found["cwd"], found["umask"]) == (str(workdir), umask)


def test_a_job_of_the_drivers_own_user(spool, workdir, cli):
    assert run_cli(["submit", "mine"], stdin=PROBE.encode(), cwd=workdir, umask=0o027).code == 0
    drain_with_an_inherited_descriptor(spool, workdir)
    check(facts(spool, "mine"), workdir, "0027")


def test_a_job_of_another_user(spool, workdir):
    if not ROOT:
        import pytest

        pytest.skip("needs root: a job of nobody's")
    r = run_cli(["submit", "theirs"], stdin=PROBE.encode(), user="nobody", cwd=workdir, umask=0o002)
    assert r.code == 0, r
    drain_with_an_inherited_descriptor(spool, workdir)
    check(facts(spool, "theirs"), workdir, "0002")


def test_a_missing_interpreter_and_a_vanished_directory_are_reasons(spool, workdir, cli):
    gone = workdir / "gone"
    gone.mkdir()
    assert cli(["submit", "nointerp"], stdin=b"#!/nonexistent/interp\ntrue\n").code == 0
    assert run_cli(["submit", "nodir"], stdin=b"true\n", cwd=gone).code == 0
    gone.rmdir()
    drain_with_an_inherited_descriptor(spool, workdir)
    assert result(spool, "nointerp")["reason"] == "cannot start /nonexistent/interp: no such file"
    assert result(spool, "nodir")["reason"] == f"its directory {gone} no longer exists"
