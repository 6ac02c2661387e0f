"""What a job finds when it starts, whether or not the driver changes credentials to start it.

A job owned by the driver's own user is started without a credential
switch (vfork); another user's, as root, with one (fork). Either way: only
its standard descriptors (nothing the driver inherited), no ignored or
blocked signal, its own session, its directory and umask.
"""

import os
import subprocess
import sys

from conftest import ROOT, REPO, key_of, result, run_cli

PROBE = """\
exec 2>&1
# readlink, errors dropped: the shell closes its end of the $(...) pipe while this runs, so one
# listed descriptor may vanish before it is read (it is never the inherited one)
echo "secret=$(readlink /proc/$$/fd/* 2>/dev/null | grep -c inherited-secret)"
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
    output = spool / "stdout" / key_of(spool, name, "jobsdone", "@result")
    assert result(spool, name)["state"] == "done", output.read_text()
    text = output.read_text()
    found = dict((item.partition("=") if "=" in item else item.partition(":"))[::2] for item in text.split())
    assert set(found) == {"secret", "SigIgn", "SigBlk", "sid", "pid", "cwd", "umask"}, text
    return found


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


def test_run_outputs_marks_a_retry_in_each_file_and_closes_them(tmp_path):
    from datetime import datetime

    from onite.exec.runner import run_outputs
    from onite.exec.runner import Run
    from onite.exec.identity import current
    from onite.core.job import Job

    out_path, err_path = tmp_path / "j", tmp_path / "j@stderr"
    out_path.write_bytes(b"first\n")
    job = Job(name="root:j", priority=1, submitted=datetime(2026, 11, 22, 21, 0).astimezone(), host="h", umask=0o22,
              cwd=b"/", env={}, body=b"true\n", retries=1, attempt=2, stderr_separate=True)
    run = Run(name="root:j", job=job, owner=current(), rank=1, run_id="r", started=datetime(2026, 11, 22, 22, 0),
              started_mono=0.0)
    with run_outputs(run, out_path, err_path, None, append=True) as (out, err):
        os.write(out, b"out\n")
        os.write(err, b"err\n")
    for fd in (out, err):
        try:
            os.fstat(fd)
        except OSError:
            continue
        raise AssertionError(f"fd {fd} left open")
    marker = "\n[onite] attempt 2 of j, 2026-11-22 22:00:00\n"
    assert out_path.read_text() == f"first\n{marker}out\n" and err_path.read_text() == f"{marker}err\n"
    merged = Run(name="root:j", job=job._replace(attempt=1, stderr_separate=False), owner=current(), rank=1, run_id="r2",
                 started=datetime(2026, 11, 22, 23, 0), started_mono=0.0)
    with run_outputs(merged, out_path, err_path, None, append=False) as (out, err):
        assert err is None
    assert out_path.read_text() == "" and out_path.stat().st_mode & 0o777 == 0o600  # a first run starts afresh
    assert not err_path.exists()  # the older job's stderr file must not pass for this one's



def test_a_monitor_gone_without_a_word_is_judged_by_its_run_record(tmp_path):
    """A monitor killed before its ``monitor`` line never started the job: the run says the job did not
    run. One killed after it: how the job ended is unknown. Either way onite's machinery failed, not the
    job, so a retry the job has left runs it (Outcome.retryable); a record with an end is taken as is."""
    from datetime import datetime

    from onite.core.job import Job
    from onite.core.runrecord import line
    from onite.exec.identity import current
    from onite.exec.local import LocalRunner
    from onite.exec.runner import Run
    from onite.spool import runrecords

    job = Job(name="root:j", priority=1, submitted=datetime(2026, 11, 22, 21, 0).astimezone(), host="h", umask=0o22,
              cwd=b"/", env={}, body=b"true\n")
    runner = LocalRunner(shell="/bin/sh", kill_grace=1.0, switch_user=False)

    def outcome(*lines: dict):
        record = tmp_path / "j@run"
        record.unlink(missing_ok=True)
        os.close(runrecords.create(str(record), {"run_id": "r", "executor": "local"}))
        with open(record, "ab") as handle:
            for data in lines:
                handle.write(line(data))
        run = Run(name="root:j", job=job, owner=current(), rank=1, run_id="r", started=datetime(2026, 11, 22, 22, 0),
                  started_mono=0.0, record_path=str(record))
        return runner.outcome_from_record(run)

    unstarted = outcome()
    assert unstarted.reason == "its monitor was killed before it started the job: the job did not run"
    assert unstarted.retryable and unstarted.state.value == "failed"
    ghost = subprocess.Popen(["true"])
    ghost.wait()  # a monitor that is gone (no job line: nothing of the run is signalled)
    unknown = outcome({"event": "monitor", "pid": ghost.pid, "ticks": 1})
    assert unknown.reason == "onite's monitor of this job was killed: how the job ended is unknown"
    assert unknown.retryable
    ended = outcome({"event": "monitor", "pid": ghost.pid, "ticks": 1}, {"event": "job", "pid": ghost.pid},
                    {"event": "ended", "status": 256})
    assert ended.exit_code == 1 and not ended.retryable
