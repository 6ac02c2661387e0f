"""onite submit: capture, validation, policy, atomicity (real CLI in a forked child, real files)."""

import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from conftest import REPO, drain, needs_root, result, run_cli, set_config, wait_for
from onite.core.jobfile import decode

ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "PS1": "\\u@\\h\n\\$ ",
    "MULTI": "one\ntwo\n",
    "QUOTES": "it's \"q\" `x` $HOME ${Y} \\n",
}


def queued_files(spool: Path) -> list[Path]:
    return sorted(p for p in (spool / "jobs").rglob("*") if p.is_file())


def all_files(spool: Path) -> list[Path]:
    return sorted(p for p in spool.rglob("*") if p.is_file() and p.name not in ("onite.toml", "onite.log"))


def test_submit_captures_env_cwd_umask_exactly(spool, workdir):
    env = dict(ENV, ONITE_SPOOL=str(spool))
    r = run_cli(["submit", "capture", "-p", "2"], stdin=b"echo hi\n", env=env, cwd=workdir, umask=0o027)
    assert r.code == 0, r
    job = decode((spool / "jobs" / "P2" / "root:capture").read_bytes())
    assert job.cwd == os.fsencode(workdir) and job.umask == 0o027 and job.priority == 2
    assert {k.decode(): v.decode() for k, v in job.env.items()} == env
    assert job.body == b"echo hi\n"


def test_non_utf8_environment_and_odd_names_round_trip(spool, workdir):
    # A job that writes its own environment, as bytes, proves the round trip end to end.
    env = {b"PATH": b"/usr/bin:/bin", b"BIN": b"\xff\xfe\x80 x", b"BASH_FUNC_f%%": b"() { echo f\n}",
           b"ONITE_SPOOL": os.fsencode(spool), b"\xe9": b"latin"}
    script = (b"#!/usr/bin/python3\nimport os\nopen(%r, 'wb').write(b'\\0'.join(k + b'=' + v for k, v in "
              b"sorted(os.environb.items())))\n" % os.fsencode(workdir / "env.out"))
    pid = os.fork()
    if pid == 0:
        os.environb.clear()
        os.environb.update(env)
        os._exit(run_cli(["submit", "envdump"], stdin=script).code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert drain(spool).returncode == 0
    assert result(spool, "envdump")["state"] == "done", (spool / "stdout" / "root:envdump").read_text()
    got = dict(item.split(b"=", 1) for item in (workdir / "env.out").read_bytes().split(b"\0"))
    login = {b"HOME", b"USER", b"LOGNAME", b"SHELL"} if os.geteuid() == 0 else set()
    for key, value in env.items():
        if key not in login:
            assert got[key] == value, key


@needs_root
def test_a_c_locale_reaches_the_job_as_the_user_has_it_not_as_python_coerced_it(spool, workdir):
    """Where the locale is C or POSIX, Python's start-up puts LC_CTYPE=C.UTF-8 in its own environment (PEP
    538): the job gets the user's locale, as `env` by hand shows it (grep of Latin-1 text in a UTF-8
    LC_CTYPE says "binary file matches")."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C", "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "ONITE_SPOOL": str(spool)}
    by_hand = subprocess.run(["env"], env=env, capture_output=True, check=True).stdout
    submit = ("import ctypes, os, sys, conftest; from onite.__main__ import main; "
              "os.setgroups([]); os.setgid(conftest.nobody().pw_gid); os.setuid(conftest.nobody().pw_uid); "
              "ctypes.CDLL(None).prctl(4, 1); "  # PR_SET_DUMPABLE: its /proc/self its own, as if nobody started it
              "os.chdir(sys.argv[1]); sys.exit(main(['submit', 'ctype']))")
    assert subprocess.run([sys.executable, "-c", submit, str(workdir)], input=b"env\n", env=env).returncode == 0
    drain(spool)
    night = (spool / "stdout" / "nobody:ctype").read_bytes()

    def locale(out: bytes) -> list[bytes]:
        return sorted(line for line in out.splitlines() if line.startswith((b"LC_", b"LANG")))

    assert locale(night) == locale(by_hand) == [b"LANG=C"], night


@needs_root
def test_a_job_spooled_after_newgrp_runs_with_that_group_while_its_owner_is_in_it(spool, workdir):
    """`newgrp proj` then `onite submit`: by hand the script's files would be group proj, as at(1) and sbatch
    keep the submitting group; the job runs with it while its owner is still in that group, and with the
    account's own group once they have left it. A user made for the test: nobody's groups stay as they are."""
    user, group = f"ong{os.getpid() % 100000}", f"ongp{os.getpid() % 100000}"
    subprocess.run(["groupadd", group], check=True)
    try:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", "-G", group, user], check=True)
        try:
            gid = grp.getgrnam(group).gr_gid
            for name in ("proj", "left"):
                body = f"id -g; touch {name}.out; stat -c %g {name}.out\n".encode()
                assert run_cli(["submit", name], stdin=body, user=user, group=gid, cwd=workdir).code == 0
                if name == "left":
                    subprocess.run(["gpasswd", "-d", user, group], check=True, capture_output=True)
                assert drain(spool).returncode == 0
            own = pwd.getpwnam(user).pw_gid
            assert (spool / "stdout" / f"{user}:proj").read_text().split() == [str(gid)] * 2
            assert (spool / "stdout" / f"{user}:left").read_text().split() == [str(own)] * 2
        finally:
            subprocess.run(["userdel", user], check=False)
    finally:
        subprocess.run(["groupdel", group], check=False)


def test_job_text_bytes_and_shebang(spool, workdir, cli):
    body = b"#!/usr/bin/python3\n# -*- coding: latin-1 -*-\nimport sys\nsys.stdout.buffer.write(bytes(range(256)))\n# \xff\xfe trailing bytes\n"
    assert cli(["submit", "bytes"], stdin=body).code == 0
    assert cli(["submit", "sh"], stdin=b"printf '%s\\n' \"$0\" | grep -q /dev/fd/ && echo shell-ok\n").code == 0
    assert decode((spool / "jobs" / "P4" / "root:bytes").read_bytes()).body == body
    drain(spool)
    assert (spool / "stdout" / "root:bytes").read_bytes() == bytes(range(256))
    assert (spool / "stdout" / "root:sh").read_text() == "shell-ok\n"


@pytest.mark.parametrize("name", ["../x", "a/b", "", "has space", "x" * 300, "new\nline", ".hidden", "-p"])
def test_hostile_names_write_nothing(spool, cli, name):
    r = cli(["submit", name], stdin=b"true\n")
    assert r.code == 2, r
    assert r.err.startswith("onite: ") and r.err.count("\n") == 1 and "Traceback" not in r.err
    assert all_files(spool) == []


@pytest.mark.parametrize("args, message", [
    (["-p", "0"], "-p '0': expected"), (["-p", "8"], "-p '8': expected"), (["-p", "x"], "-p 'x': expected a whole number"),
    (["--timeout", "soon"], "--timeout 'soon': expected"), (["--at", "whenever"], "--at 'whenever': expected"), (["--retries", "-1"], ""),
    (["--after", "nosuchjob"], "no job 'nosuchjob' is queued, running or finished"), (["--bogus"], "No such option"),
])
def test_bad_options_exit_2_with_one_line(spool, cli, args, message):
    r = cli(["submit", "job", *args], stdin=b"true\n")
    assert r.code == 2, r
    assert message in r.err and r.err.count("\n") == 1 and r.err.startswith("onite: ")
    assert all_files(spool) == []


@pytest.mark.parametrize("args", [["--timeout", "5x"], ["--mem", "4Q"], ["-p", "9"], ["--cpus", "0"], ["--at", "soon"],
                                  ["--retries", "101"], ["--notify", "fax"], ["--host", "a b"]])
@pytest.mark.parametrize("stdin", [b"", None])
@pytest.mark.parametrize("lines", [[], ["--lines"]])
def test_bad_options_are_told_before_stdin_is_read(spool, cli, args, stdin, lines):
    r = cli(["submit", "job", *lines, *args], stdin=stdin)
    assert r.code == 2 and "stdin" not in r.err and r.err.count("\n") == 1, r


@pytest.mark.parametrize("args", [["--after", "nosuch"], ["--mem", "1000T"], ["--notify", "mail"], []])
def test_what_the_spool_says_of_the_options_and_name_is_told_before_stdin_is_read(spool, cli, args):
    """A wrong --after, a request the host cannot hold, mail without sendmail, a name already queued: said at
    once, not after a long pipe ends (an empty stdin would otherwise be the error)."""
    cli(["submit", "taken"], stdin=b"true\n")
    set_config(spool, sendmail="/nonexistent/sendmail")
    r = cli(["submit", "job" if args else "taken", *args], stdin=b"")
    assert r.code != 0 and "stdin" not in r.err and r.err.count("\n") == 1, r


def test_empty_or_missing_stdin(spool, cli):
    r = cli(["submit", "empty"], stdin=b"")
    assert r.code == 2 and "the job text on stdin is empty" in r.err
    r = cli(["submit", "closed"], stdin=None)
    assert r.code == 2 and "stdin" in r.err
    assert all_files(spool) == []


def test_text_sh_will_not_run_as_meant_is_spooled_with_a_warning(spool, cli):
    """A script saved on Windows, or a binary piped by mistake, was spooled without a word and failed at night
    (`true\r: not found`, `Syntax error`)."""
    crlf = "onite: warning: the job text has CRLF line ends: /bin/sh takes each \\r as part of a command "
    r = cli(["submit", "-q", "win"], stdin=b"true\r\necho hi\r\n")
    assert r.code == 0 and r.err.startswith(crlf), r
    r = cli(["submit", "-q", "lines", "--lines"], stdin=b"true\r\ntrue\r\n")
    assert r.code == 0 and r.err.startswith(crlf), r
    r = cli(["submit", "-q", "bin"], stdin=b"\x7fELF\x02\x01\x00\x00echo")
    assert r.code == 0 and r.err == "onite: warning: the job text holds NUL bytes: it is no script, and /bin/sh will " \
                                    "fail on it\n", r
    assert cli(["submit", "-q", "fine"], stdin=b"printf 'a\\r\\n'\n").err == ""  # a \r the script writes is no line end


def test_a_batch_longer_than_keep_is_told_what_is_kept(spool, cli):
    """`submit --lines` of 60 jobs where keep = 50: by morning the first 10 had no output, and nothing had said so."""
    set_config(spool, keep=5)
    r = cli(["submit", "-q", "five", "--lines"], stdin=b"true\n" * 5)
    assert (r.code, r.err) == (0, ""), r
    r = cli(["submit", "-q", "six", "--lines"], stdin=b"true\n" * 6)
    assert (r.code, r.err) == (0, "onite: warning: 6 jobs, but the spool keeps your last 5 results (keep in onite.toml): "
                                  "the output of all but the last 5 is removed as they finish; onite report still "
                                  "tells how each ended\n"), r


def test_too_large_job_is_refused(spool, cli):
    set_config(spool, max_job_size="1K")
    r = cli(["submit", "big"], stdin=b"x" * 5000)
    assert (r.code, r.err) == (2, "onite: stdin is larger than max_job_size (1K) — spool a short script that runs "
                                  "the big one instead\n"), r
    r = cli(["submit", "many", "--lines"], stdin=b"true\n" * 1000)  # a list of jobs: it was told to spool a script
    assert (r.code, r.err) == (2, "onite: stdin is larger than max_job_size (1K) — split the list, and spool each "
                                  "part under its own NAME\n"), r
    assert all_files(spool) == []


def test_huge_input_within_limit_is_kept_exactly(spool, cli):
    body = b"#!/bin/sh\nexit 0\n" + os.urandom(3 * 1024 * 1024)
    assert cli(["submit", "huge"], stdin=body).code == 0
    assert decode((spool / "jobs" / "P4" / "root:huge").read_bytes()).body == body


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to stop a submit between its check and its write")
@pytest.mark.parametrize("args, synced, key, after", [
    ([], "fsync", "race", ""),
    (["--lines"], "syncfs", "race-00001", " (none of the 1 jobs was spooled)")])
def test_a_name_another_submit_takes_while_this_one_writes_is_said_as_a_taken_name(spool, cli, tmp_path, args,
                                                                                   synced, key, after):
    """Two submits of one name: the second passes the check while the name is free, and the first
    spools it before the second names its file. The loser said the spool's inner path
    (``onite: /var/spool/onite/jobs/P4/root:race already exists``); it says what a taken name says."""
    text, said = tmp_path / "loser.sh", tmp_path / "strace.out"
    text.write_bytes(b"echo loser\n")
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    # strace stops the submit once its job file is written and synced, before it is named
    traced = subprocess.Popen([shutil.which("strace"), "-f", "-qq", "-o", str(said), "-e", f"trace={synced}",
                               "-e", f"inject={synced}:signal=STOP:when=1", sys.executable, "-m", "onite", "submit",
                               "race", *args], env=env, stdin=text.open("rb"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = wait_for(lambda: next((x for x in said.read_text().splitlines() if "stopped by SIGSTOP" in x), None),
                        what="the submit to stop before naming its file")
        assert cli(["submit", key], stdin=b"echo winner\n").code == 0
        os.kill(int(line.split()[0]), signal.SIGCONT)
        _, err = traced.communicate(timeout=60)
    finally:
        if traced.poll() is None:
            traced.kill()
            traced.wait()
    lines = err.decode().splitlines()
    assert traced.returncode == 3, lines
    assert lines == [f"onite: a job named {key!r} is already queued (P4, root){after} — pick another name, "
                     "or use --unique"]
    assert decode((spool / "jobs" / "P4" / f"root:{key}").read_bytes()).body == b"echo winner\n"
    assert not list((spool / "jobs").rglob(".*"))


def test_file_size_limit_leaves_nothing_behind(spool, cli):
    r = cli(["submit", "capped"], stdin=b"echo x\n" * 20000, rlimit_fsize=4096)
    assert r.code == 4, r
    assert "file-size limit" in r.err and r.err.count("\n") == 1
    assert list((spool / "jobs").rglob("*capped*")) == [] and list((spool / "jobs").rglob(".*")) == []


def test_duplicates_are_refused_and_unique_makes_names(spool, cli):
    assert cli(["submit", "dup"], stdin=b"true\n").code == 0
    r = cli(["submit", "dup", "-p", "1"], stdin=b"true\n")
    assert r.code == 3 and "a job named 'dup' is already queued (P4, " in r.err
    r1, r2 = (cli(["submit", "dup", "--unique"], stdin=b"true\n") for _ in range(2))
    assert r1.code == r2.code == 0
    names = {r1.out.strip(), r2.out.strip()}
    assert len(names) == 2 and all(n.startswith("dup-") for n in names)
    assert sorted(p.name for p in queued_files(spool)) == sorted(f"root:{n}" for n in ["dup", *names])


def test_concurrent_submits_of_one_name_leave_exactly_one(spool):
    env = dict(os.environ, PYTHONPATH=str(REPO), ONITE_SPOOL=str(spool))
    procs = [subprocess.Popen([sys.executable, "-m", "onite", "submit", "race"], stdin=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env) for _ in range(8)]
    for i, proc in enumerate(procs):
        proc.stdin.write(b"echo %d\n" % i)
        proc.stdin.close()
    codes = [proc.wait(60) for proc in procs]
    assert codes.count(0) == 1 and set(codes) <= {0, 3}, codes
    assert [p.name for p in queued_files(spool)] == ["root:race"]


def test_cutoff_refuses_and_says_when(spool, cli):
    now = datetime.now()
    cutoff = (now - timedelta(minutes=1)).strftime("%H:%M")
    until = (now + timedelta(minutes=30)).strftime("%H:%M")
    if cutoff > until:  # too close to midnight for this window shape; skip the clock edge
        pytest.skip("the test window crosses midnight")
    set_config(spool, cutoff=cutoff, until=until)
    r = cli(["submit", "late"], stdin=b"true\n")
    assert r.code == 3 and f"spooling closed at the cutoff ({cutoff})" in r.err and f"open again at {until}" in r.err
    assert queued_files(spool) == []


def test_a_submitters_tz_does_not_move_the_cutoff(spool, cli):
    """The cutoff is read on the machine's clock (/etc/localtime): under a TZ of their own, six hours away, a user
    spooled past it, and status told them spooling was open."""
    from zoneinfo import ZoneInfo

    with open("/etc/localtime", "rb") as zone_file:
        now = datetime.now(ZoneInfo.from_file(zone_file))
    set_config(spool, cutoff=(now - timedelta(hours=1)).strftime("%H:%M"),
               until=(now + timedelta(hours=1)).strftime("%H:%M"))
    hours = round(now.utcoffset().total_seconds() / 3600)
    elsewhere = hours + (6 if hours <= 6 else -6)
    env = dict(os.environ, TZ=f"ONI{-elsewhere}", ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))  # ONI-6: UTC+6
    r = subprocess.run([sys.executable, "-m", "onite", "submit", "late"], input=b"true\n", env=env,
                       capture_output=True)
    assert r.returncode == 3 and b"spooling closed at the cutoff" in r.stderr, r
    status = subprocess.run([sys.executable, "-m", "onite", "status", "--json"], env=env, capture_output=True)
    spooling = json.loads(status.stdout)["spooling"]
    assert spooling["open"] is False, status
    reopens = datetime.fromisoformat(spooling["reopens"])  # on the machine's clock too, not the caller's
    assert reopens.utcoffset() == now.utcoffset() and reopens.strftime("%H:%M") == (now + timedelta(hours=1)).strftime("%H:%M")
    assert queued_files(spool) == []


@pytest.mark.parametrize("values", [{"cutoff": "00:00"}, {"cutoff": "19:30", "until": "19:30"}])
def test_cutoff_that_never_reopens_is_a_bad_value(spool, cli, values):
    # cutoff at the time spooling reopens (until, else midnight) closed spooling for good, every day, while each
    # refusal said it would open again tomorrow; it is a bad value, said once, naming the key
    set_config(spool, **values)
    r = cli(["submit", "late"], stdin=b"true\n", user="nobody")
    assert r.code == 2 and "cutoff" in r.err and "never open" in r.err and len(r.err.strip().splitlines()) == 1
    assert queued_files(spool) == []
    assert cli(["run", "-q"]).code == 2
    listed = cli(["list"], user="nobody")  # a reading command warns and goes on
    assert listed.code == 0 and "warning" in listed.err and "cutoff" in listed.err


def test_check_lock_refuses_while_a_driver_runs(spool, cli, workdir):
    from conftest import start_driver, wait_for

    set_config(spool, check_lock=True)
    gate = workdir / "gate"
    gate.touch()
    assert cli(["submit", "blocker"], stdin=f"while [ -e {gate} ]; do sleep 0.05; done\n".encode()).code == 0
    driver = start_driver(spool)
    try:
        wait_for(lambda: (spool / "running" / os.uname().nodename.split(".")[0] / "root:blocker").exists(), what="claim")
        r = cli(["submit", "during"], stdin=b"true\n")
        assert r.code == 3 and "a driver is draining the spool" in r.err
    finally:
        gate.unlink()
        driver.wait(30)
    assert cli(["submit", "after"], stdin=b"true\n").code == 0


def test_at_now_is_due_at_once(spool, cli):
    assert cli(["submit", "asap", "--at", "now"], stdin=b"true\n").code == 0
    job = decode((spool / "jobs" / "P4" / "root:asap").read_bytes())
    assert job.not_before is not None and job.not_before <= datetime.now().astimezone()
    assert drain(spool).returncode == 0
    assert result(spool, "asap")["state"] == "done"


def test_hold_flag_and_pinned_host_are_recorded(spool, cli):
    assert cli(["submit", "held", "--hold", "--host", "node7", "--timeout", "1h30m", "--retries", "2",
                "--at", "23:59"], stdin=b"true\n").code == 0
    path = spool / "jobs" / "P4" / "root:held"
    assert path.stat().st_mode & 0o777 == 0o600  # held by a marker, not by its mode (spool-format.md)
    [marker] = (spool / "hold").iterdir()
    assert marker.name.startswith("root:held@") and marker.stat().st_size == 0
    job = decode(path.read_bytes())
    assert job.pin == "node7" and job.timeout == timedelta(hours=1, minutes=30) and job.retries == 2
    assert job.not_before is not None


@pytest.fixture
def small_disk(world_tmp):
    """A 256 KiB tmpfs: a disk that fills up (needs root; skips, saying why, where it cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs as a full disk")
    mnt = world_tmp / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_full_disk_leaves_nothing_behind(small_disk, cli):
    spool = small_disk / "spool"
    assert cli(["init", "--spool", str(spool)]).code == 0
    r = cli(["submit", "big", "--spool", str(spool)], stdin=b"#!/bin/sh\n" + b"x" * (1024 * 1024))
    assert r.code == 4 and "file system is full" in r.err and r.err.count("\n") == 1, r
    assert [p for p in (spool / "jobs").rglob("*") if p.is_file()] == []
    assert cli(["submit", "small", "--spool", str(spool)], stdin=b"true\n").code == 0


def test_empty_environment_is_fine(spool, workdir):
    out = workdir / "env"
    r = run_cli(["submit", "bare"], stdin=f"env > {out}\n".encode(), env={"ONITE_SPOOL": str(spool)}, cwd=workdir)
    assert r.code == 0, r
    drain(spool)
    assert result(spool, "bare")["state"] == "done"
    lines = set(out.read_text().splitlines())
    assert f"ONITE_SPOOL={spool}" in lines


def test_a_batch_that_fills_the_disk_keeps_whole_jobs_and_says_how_many(small_disk, cli):
    spool = small_disk / "spool"
    assert cli(["init", "--spool", str(spool)]).code == 0
    lines = b"".join(b"echo %d %s\n" % (i, b"y" * 2000) for i in range(1, 201))  # ~400 KB of jobs
    r = cli(["submit", "fill", "--lines", "--spool", str(spool)], stdin=lines)
    assert r.code == 4 and "file system is full" in r.err and r.err.count("\n") == 1, r
    spooled = sorted(p.name for p in (spool / "jobs" / "P4").iterdir())
    assert not [name for name in spooled if name.startswith(".")]  # no temporary file left
    assert 0 < len(spooled) < 200 and spooled == [f"root:fill-{i:05d}" for i in range(1, len(spooled) + 1)]
    n = len(spooled)
    assert f"(the first {n} of the 200 jobs were spooled: fill-00001 to fill-{n:05d})" in r.err
    from onite.core.jobfile import decode

    for name in spooled:  # every job that is there is whole
        job = decode((spool / "jobs" / "P4" / name).read_bytes())
        assert job.body == b"echo %d %s\n" % (int(name.rsplit("-", 1)[1]), b"y" * 2000)


def test_a_priority_beyond_a_lowered_priorities_queues_last(spool):
    """A retry or requeue of a P7 job after onite.toml went down to 3 priorities goes to P3."""
    from onite.spool.paths import SpoolDir

    set_config(spool, priorities=3, default_priority=2)
    target = SpoolDir(spool)
    assert target.folder_for(7, False) == spool / "jobs" / "P3"
    assert target.folder_for(2, False) == spool / "jobs" / "P2" and target.folder_for(7, True) == spool / "jobs" / "urgent"


def test_a_command_after_dashes_is_the_job_and_runs_that_exact_argv(spool, cli, workdir):
    """`onite submit NAME [options] -- COMMAND ARGS…` (pueue add, tsp): the words are quoted for /bin/sh,
    so the job's process gets them byte for byte; stdin is not read; options after -- are the command's."""
    out = workdir / "argv"
    probe = "import os, sys; open(sys.argv[1], 'w').write(repr([os.fsencode(a) for a in sys.argv[2:]]))"
    words = ["a b", "'single'", '"double"', "$HOME", "`id`", "$(id)", "x\ny", "back\\slash", "*", "", "-p", "7",
             "--", "--hold", "tab\there", os.fsdecode(b"caf\xe9")]
    r = cli(["submit", "exact", "-p", "2", "--", sys.executable, "-c", probe, str(out), *words],
            stdin=b"echo this is not the job\n")
    assert (r.code, r.out) == (0, "") and r.err.startswith("spooled exact (P2)"), r
    job = decode((spool / "jobs" / "P2" / "root:exact").read_bytes())  # -p 2 before -- is onite's; -p 7 after is not
    assert b"not the job" not in job.body and job.body.endswith(b"\n")
    assert drain(spool).returncode == 0
    assert result(spool, "exact")["state"] == "done"
    assert out.read_text() == repr([os.fsencode(w) for w in words])


@pytest.mark.parametrize("argv, message", [
    (["submit", "x", "--"], "onite: no command after -- — write it there: onite submit NAME -- COMMAND ARGS…\n"),
    (["submit", "x", "--lines", "--", "true"], "onite: --lines reads one job a line from stdin, and cannot take a "
                                                "command after -- — drop --lines, or the command\n"),
])
def test_a_command_after_dashes_that_cannot_be_a_job(spool, cli, argv, message):
    r = cli(argv, stdin=b"true\n")
    assert (r.code, r.err) == (2, message)
    assert not list((spool / "jobs").rglob("x*"))


@pytest.mark.parametrize("command, warning", [
    (["/nonexistent/cmd", "x"], "onite: warning: '/nonexistent/cmd' is not a file you may run now"),
    (["no-such-command-here"], "onite: warning: no command 'no-such-command-here' in PATH now"),
    (["./not-here.sh"], "onite: warning: './not-here.sh' is not a file you may run now"),
    (["/nonexistent/\udcff"], "onite: warning: '/nonexistent/\\xff' is not a file you may run now"),  # a byte as typed
    (["true"], None), (["cd", "/tmp"], None), ([sys.executable, "-c", "pass"], None),
])
def test_a_command_after_dashes_found_nowhere_is_spooled_with_a_warning(spool, cli, command, warning):
    """A command that cannot run now would fail at night ("not found"): it is spooled (it may be built by then),
    and stderr says so in one line; a command in PATH, or the shell's own, is spooled with no warning."""
    r = cli(["submit", "--unique", "w", "-q", "--", *command], stdin=None)
    assert r.code == 0 and len(r.out.split()) == 1, r
    assert (warning in r.err and len(r.err.splitlines()) == 1) if warning else r.err == "", r


def test_a_command_after_dashes_is_the_shells_own_only_if_bin_sh_has_it(spool, cli):
    """``source`` is bash's, not POSIX sh's: where /bin/sh is dash the job fails at night ("source: not found"),
    yet submit said nothing (it took ``source`` for the shell's own). The warning follows what /bin/sh has."""
    import subprocess

    has_source = subprocess.run(["/bin/sh", "-c", "source /dev/null"], stderr=subprocess.DEVNULL).returncode == 0
    r = cli(["submit", "--unique", "w", "-q", "--", "source", "/dev/null"], stdin=None)
    assert r.code == 0 and len(r.out.split()) == 1, r
    if has_source:
        assert r.err == "", r
    else:
        assert "onite: warning: no command 'source' in PATH now" in r.err and len(r.err.splitlines()) == 1, r


def test_a_command_after_dashes_with_the_spool_before_the_command(spool, cli):
    r = cli(["--spool", str(spool), "submit", "--unique", "u", "--", "echo", "hi"], stdin=None)
    assert r.code == 0 and r.out.startswith("u-"), r
    [path] = (spool / "jobs" / "P4").iterdir()
    assert decode(path.read_bytes()).body == b"echo hi\n"


def test_a_job_waits_for_at_most_64_others(spool, cli):
    """Each --after is looked at whenever the job might start: a job that named thousands would slow
    every pick of the night. 64 is the most; more is a usage error, and nothing is spooled."""
    assert cli(["submit", "dep", "--lines"], stdin=b"true\n" * 65).code == 0  # dep-00001 … dep-00065
    many = [arg for i in range(1, 66) for arg in ("--after", f"dep-{i:05d}")]
    r = cli(["submit", "many", *many], stdin=b"true\n")
    assert r.code == 2 and "waits for 65 jobs" in r.err, r
    assert cli(["find", "many"]).code == 1
    assert cli(["submit", "enough", *many[:128]], stdin=b"true\n").code == 0


@pytest.mark.parametrize("option, message", [
    ("--at", "onite: --at '': expected now, HH:MM (24-hour), YYYY-MM-DDTHH:MM, 'tomorrow HH:MM' or +DURATION "
             "(e.g. +2h)\n"),
    ("--timeout", "onite: --timeout '': expected a duration such as 90s, 45m, 2h, 1h30m or 1d (a bare number is "
                  "seconds)\n"),
])
@pytest.mark.parametrize("extra", [[], ["--urgent", "--hold"]])
def test_an_empty_at_or_timeout_is_refused_not_dropped(spool, cli, option, message, extra):
    """`onite submit --at "$WHEN" NAME` with WHEN unset spooled a job due at once, and an empty --timeout one with
    the spool's default, as if neither had been given; edit refused them. Refused alike, nothing spooled."""
    r = cli(["submit", option, "", *extra, "emptyopt"], stdin=b"true\n")
    assert (r.code, r.err) == (2, message), r
    assert not queued_files(spool)


def test_a_current_directory_too_long_to_enter_is_refused_at_submit_not_failed_at_night(spool, world_tmp):
    """A job spooled from a folder whose path is 4096 bytes or more was taken, and failed at night ("cannot enter
    its directory …: file name too long"): chdir cannot take such a path. Refused now, nothing spooled."""
    part = "d" * 200
    deep, fd = world_tmp, os.open(world_tmp, os.O_RDONLY)
    while len(os.fsencode(deep)) < 4096:  # made a step at a time: mkdir takes no path this long either
        os.mkdir(part, dir_fd=fd)
        fd, old = os.open(part, os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
        deep = deep / part
    os.close(fd)

    def enter():  # a step at a time: chdir takes no path this long
        os.chdir(world_tmp)
        for _ in range(len(deep.relative_to(world_tmp).parts)):
            os.chdir(part)

    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "onite", "submit", "deep"], input=b"true\n", env=env,
                          capture_output=True, timeout=120, preexec_fn=enter)
    assert done.returncode == 2 and done.stderr.decode() == (
        f"onite: your current directory's path is {len(os.fsencode(deep))} bytes long, and no job can start in a "
        "directory whose path is longer than 4095 — cd to a folder with a shorter path and submit again\n"), done
    assert not queued_files(spool)


def test_a_spool_on_a_read_only_file_system_says_so_to_root_not_to_run_as_root(small_disk, cli):
    """Root's `onite run` on a spool whose file system is mounted read-only was told "this spool is drained by its
    owner — run it as root (sudo onite run)": running/ not writable read as another owner's. Every write says
    read-only; so does the driver now. Submit is refused alike, and list still reads."""
    spool = small_disk / "spool"
    assert cli(["init", "--spool", str(spool)]).code == 0
    assert cli(["submit", "kept", "--spool", str(spool)], stdin=b"true\n").code == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    r = cli(["run", "--spool", str(spool)])
    assert (r.code, r.err) == (4, f"onite: cannot write {spool}/running: the spool's file system is read-only — "
                                  "remount it read-write, then drain it\n"), r
    r = cli(["submit", "more", "--spool", str(spool)], stdin=b"true\n")
    assert r.code == 4 and "Read-only file system — the spool's file system is read-only\n" in r.err, r
    assert cli(["find", "kept", "--spool", str(spool)]).code == 0


def test_a_job_spooled_after_one_that_failed_is_told_it_will_fail_too(spool):
    """``onite submit dep2 --after fail2`` when fail2 had failed said ``waits for fail2``, while onite list said
    ``will fail: dependency fail2 failed``: the submitter learned it only in the morning. It says so at once,
    and what to do."""
    assert run_cli(["submit", "fail2"], stdin=b"exit 1\n", cwd="/tmp").code == 0
    assert run_cli(["submit", "fine"], stdin=b"true\n", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    r = run_cli(["submit", "dep2", "--after", "fail2"], stdin=b"true\n", cwd="/tmp")
    assert r.code == 0, r
    assert "waits for fail2, which failed: it will fail too, unless fail2 runs again first (onite restart fail2)" \
        in r.err, r.err
    r = run_cli(["submit", "dep3", "--after", "fine"], stdin=b"true\n", cwd="/tmp")
    assert r.code == 0 and "waits for fine;" in r.err and "fail" not in r.err, r.err


def test_at_confirmation_says_the_wall_time_of_the_other_dst_half(spool, cli, berlin_tz):
    """``--at`` a time whose UTC offset is not today's (summer from winter, or winter from summer): the
    confirmation says the wall time typed, not that instant at today's offset (an hour off)."""
    year = datetime.now().year + 1
    for stamp in (f"{year}-01-15T12:00", f"{year}-07-15T12:00"):
        r = cli(["submit", f"dst{stamp[5:7]}", "--at", stamp], stdin=b"true\n")
        assert r.code == 0, r
        assert f"not before {year}-{stamp[5:7]}-15 12:00;" in r.err, r
    # a time the clocks skip is the jump (docs/scheduling.md, DST): 02:30 on the last Sunday of March is 03:00
    march = max(datetime(year, 3, day) for day in range(25, 32) if datetime(year, 3, day).weekday() == 6)
    r = cli(["submit", "gap", "--at", f"{march:%Y-%m-%d}T02:30"], stdin=b"true\n")
    assert r.code == 0 and f"not before {march:%Y-%m-%d} 03:00;" in r.err, r


def test_a_not_before_time_within_a_minute_is_shown_with_its_seconds(spool, cli):
    """``--at +90s`` is not before a time with seconds: submit, list and status say them (``not before
    04:55:55``), not the minute it falls in (``04:55``), which a user reads as passed while the job still waits."""
    before = datetime.now().astimezone().replace(microsecond=0)
    r = cli(["submit", "soon", "--at", "+90s"], stdin=b"true\n")
    after = datetime.now().astimezone()
    assert r.code == 0, r
    shown = r.err.split("not before ", 1)[1].split(";", 1)[0]
    # whenever the submit read its clock (a loaded machine takes seconds), a second of that span plus 90
    span = [before + timedelta(seconds=90 + i) for i in range(int((after - before).total_seconds()) + 2)]
    assert shown in [f"{t:%H:%M:%S}" for t in span] + [f"tomorrow {t:%H:%M:%S}" for t in span], r.err
    due = next(t for t in span if shown.endswith(f"{t:%H:%M:%S}"))
    for command in (["list", "--plain"], ["status"]):
        assert f"not before {due:%Y-%m-%d} {shown.split()[-1]}" in cli(command).out, cli(command).out
    r = cli(["submit", "whole", "--at", "tomorrow 05:00"], stdin=b"true\n")
    assert "not before tomorrow 05:00;" in r.err, r.err  # a whole minute stays HH:MM
