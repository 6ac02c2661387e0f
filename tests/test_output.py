"""A job's output: stdout/NAME, and its stderr apart in stdout/NAME@stderr when it asks.

Real spools, real drains, real processes; the bytes each stream wrote are
compared exactly, including bytes that are not UTF-8.
"""

import os
import re
import stat
import time

import pytest

from conftest import drain, needs_root, nobody, result, run_cli, set_config
from onite.core.jobfile import decode

# octal escapes: dash's printf writes the exact bytes (\377 and \376 are not UTF-8, \000 a NUL)
BOTH = b"printf 'out one\\n'; printf 'err \\376\\000 one\\n' >&2; printf 'out \\377 two\\n'; echo 'err two' >&2\n"
OUT_BYTES = b"out one\nout \xff two\n"
ERR_BYTES = b"err \xfe\x00 one\nerr two\n"


def submit(name, body, *args, user=None):
    r = run_cli(["submit", name, *args], stdin=body, user=user, cwd="/tmp")
    assert r.code == 0, r
    return r


def queued_job(spool, name):
    return decode(next((spool / "jobs").rglob(f"root:{name}")).read_bytes())


def merged_message(name):
    return (f"onite: job '{name}' kept stderr with its stdout (it was spooled without --stderr-separate)"
            f" — read it with: onite output {name}\n")


def test_separate_streams_are_kept_exactly(spool):
    longest = "l" * 100  # NAME@stderr is 107 characters: still a fine file name
    submit("both", BOTH, "--stderr-separate")
    submit(longest, BOTH, "--stderr-separate")
    assert queued_job(spool, "both").stderr_separate
    assert b"\nstderr: separate\n" in next((spool / "jobs").rglob("root:both")).read_bytes()
    assert drain(spool).returncode == 0
    for name in ("both", longest):
        assert result(spool, name)["state"] == "done" and result(spool, name)["stderr"] == "separate"
        assert (spool / "stdout" / f"root:{name}").read_bytes() == OUT_BYTES
        assert (spool / "stdout" / f"root:{name}@stderr").read_bytes() == ERR_BYTES
        out = run_cli(["output", name])
        assert (out.code, out.out_bytes, out.err_bytes) == (0, OUT_BYTES, b"")
        err = run_cli(["output", name, "--stderr"])
        assert (err.code, err.out_bytes, err.err_bytes) == (0, ERR_BYTES, b"")
    listed = run_cli(["list", "--all", "--json"]).json()["jobs"]
    assert sorted(job["name"] for job in listed) == sorted(["both", longest])  # a side file is never a job
    assert {job["stderr"] for job in listed} == {"separate"}
    unique = run_cli(["uniqname", "both"])
    assert unique.code == 0 and "@" not in unique.out


def test_merged_is_the_default_and_stderr_then_says_where_it_is(spool):
    submit("merged", b"echo out; echo err >&2\n")
    assert not queued_job(spool, "merged").stderr_separate
    assert b"stderr:" not in next((spool / "jobs").rglob("root:merged")).read_bytes()
    drain(spool)
    assert result(spool, "merged")["stderr"] == "merged"
    assert not (spool / "stdout" / "root:merged@stderr").exists()
    assert run_cli(["output", "merged"]).out == "out\nerr\n"
    r = run_cli(["output", "merged", "--stderr"])
    assert (r.code, r.out, r.err) == (1, "", merged_message("merged"))
    r = run_cli(["output", "nosuch", "--stderr"])
    assert r.code == 1 and r.err.startswith("onite: no job 'nosuch' is queued, running or finished")


def test_the_spool_default_is_decided_at_submit_time(spool):
    set_config(spool, stderr_separate=True)
    submit("by-default", BOTH)
    submit("opted-out", b"echo out; echo err >&2\n", "--stderr-merged")
    set_config(spool, stderr_separate=False)  # a later change does not change jobs already spooled
    submit("after-change", b"echo out; echo err >&2\n")
    drain(spool)
    assert result(spool, "by-default")["stderr"] == "separate"
    assert run_cli(["output", "by-default", "--stderr"]).out_bytes == ERR_BYTES
    for name in ("opted-out", "after-change"):
        assert result(spool, name)["stderr"] == "merged"
        assert run_cli(["output", name]).out == "out\nerr\n"
        assert run_cli(["output", name, "--stderr"]).code == 1


def test_a_merged_run_drops_the_stderr_of_an_earlier_job_of_that_name(spool):
    submit("again", b"echo old-err >&2\n", "--stderr-separate")
    drain(spool)
    assert run_cli(["output", "again", "--stderr"]).out == "old-err\n"
    submit("again", b"echo new-err >&2\n")
    drain(spool)
    assert not (spool / "stdout" / "root:again@stderr").exists()
    assert run_cli(["output", "again"]).out == "new-err\n"
    assert run_cli(["output", "again", "--stderr"]).err == merged_message("again")


def test_a_retry_appends_to_both_files_after_its_marker(spool, workdir):
    set_config(spool, retry_delay="1s")
    flag = workdir / "failed-once"
    body = f"echo out-$$; echo err-$$ >&2; [ -e {flag} ] || {{ touch {flag}; exit 1; }}\n".encode()
    submit("flaky", body, "--stderr-separate", "--retries", "1")
    drain(spool)
    rec = result(spool, "flaky")
    assert (rec["state"], rec["attempt"], rec["stderr"]) == ("done", 2, "separate")
    marker = r"\n\[onite\] attempt 2 of flaky, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n"
    for path, word in ((spool / "stdout" / "root:flaky", "out"), (spool / "stdout" / "root:flaky@stderr", "err")):
        assert re.fullmatch(rf"{word}-\d+\n{marker}{word}-\d+\n", path.read_text()), path.read_text()


def test_retention_removes_both_files_and_strays(spool):
    set_config(spool, keep=1)
    old = time.time() - 3600
    for stray in ("gone", "gone@stderr"):  # left by a crash: no result explains them
        (spool / "stdout" / stray).write_bytes(b"stale\n")
        os.utime(spool / "stdout" / stray, (old, old))
    submit("first", BOTH, "--stderr-separate")
    submit("second", BOTH, "--stderr-separate")
    drain(spool)
    assert sorted(p.name for p in (spool / "stdout").iterdir()) == ["root:second", "root:second@stderr"]


def test_the_python_api_takes_the_option_too(spool):
    from onite.api import Spool

    api = Spool(spool)
    api.submit("api-separate", "true\n", stderr_separate=True)
    api.submit_many([("api-a", "true\n"), ("api-b", "true\n")], stderr_separate=True)
    api.submit("api-default", "true\n")
    assert [queued_job(spool, n).stderr_separate for n in ("api-separate", "api-a", "api-b", "api-default")] == \
        [True, True, True, False]


def test_recur_add_records_the_choice_in_the_template(spool):
    r = run_cli(["recur", "add", "nightly", "--every", "1d", "--stderr-separate"], stdin=b"true\n")
    assert r.code == 0, r
    assert decode((spool / "recur" / "root:nightly").read_bytes()).stderr_separate


@needs_root
def test_separate_stderr_is_private_to_its_owner(spool):
    who = nobody()
    submit("theirs", BOTH, "--stderr-separate", user="nobody")
    submit("mine", b"echo root-out; echo root-secret >&2\n", "--stderr-separate")
    submit("mine-merged", b"echo root-secret >&2\n")
    drain(spool)
    for name in ("nobody:theirs", "nobody:theirs@stderr"):
        st = os.stat(spool / "stdout" / name)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (who.pw_uid, who.pw_gid, 0o600)
    assert run_cli(["output", "theirs", "--stderr"], user="nobody").out_bytes == ERR_BYTES
    assert run_cli(["output", "nobody:theirs", "--stderr"]).out_bytes == ERR_BYTES  # root reads any
    for name in ("mine", "mine-merged"):
        r = run_cli(["output", f"root:{name}", "--stderr"], user="nobody")
        assert (r.code, r.out) == (3, "") and "belongs to root" in r.err and "root-secret" not in r.err
    assert stat.S_IMODE(os.stat(spool / "stdout" / "root:mine@stderr").st_mode) == 0o600


@needs_root
def test_an_output_folder_shut_to_users_is_said_in_one_line(spool):
    """stdout/ made 0700 by mistake: a user's `onite output` ended in a traceback (the lstat that names the file's
    owner failed too)."""
    submit("shut", b"echo hi\n", user="nobody")
    drain(spool)
    os.chmod(spool / "stdout", 0o700)
    try:
        r = run_cli(["output", "shut"], user="nobody", cwd="/tmp")
    finally:
        os.chmod(spool / "stdout", 0o755)
    assert r.code != 0 and r.out == "" and len(r.err.splitlines()) == 1, r
    assert r.err.startswith(f"onite: reading {spool}/stdout/nobody:shut: Permission denied"), r


def on_terminal(spool, args: list[str]) -> bytes:
    """What ``onite ARGS`` writes to a terminal (a pty), as root."""
    from conftest import OnTerminal

    code, seen = OnTerminal(spool, args, stdin=False, env={"COLUMNS": "300"}).finish()
    assert code == 0, seen
    return seen


@needs_root
@pytest.mark.attack
def test_another_users_output_reaches_roots_terminal_with_its_escapes_spelt_out(spool):
    """nobody's job writes escape sequences (a new window title, OSC 52: root's clipboard): on root's
    terminal ``onite output`` spells them out, lines and tabs kept; ``--raw``, and a pipe, get the bytes."""
    body = b"printf 'line one\\033]0;pwned\\007\\n\\tand \\033]52;c;ZWNobyBvd25lZA==\\007two\\r\\n'\n"
    submit("escapes", body, user="nobody")
    assert drain(spool).returncode == 0 and result(spool, "escapes")["state"] == "done"
    raw = b"line one\x1b]0;pwned\x07\n\tand \x1b]52;c;ZWNobyBvd25lZA==\x07two\r\n"
    assert run_cli(["output", "nobody:escapes"]).out.encode() == raw  # a pipe: byte for byte
    shown = on_terminal(spool, ["output", "nobody:escapes"])
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert b"line one\\e]0;pwned\\x07" in shown and b"\\e]52;c;" in shown and b"two\\r" in shown
    assert b"\tand " in shown  # a tab stays a tab (the pty turns \n into \r\n)
    assert b"\x1b]0;pwned\x07" in on_terminal(spool, ["output", "nobody:escapes", "--raw"])
    followed = on_terminal(spool, ["output", "nobody:escapes", "--follow"])
    assert b"\x1b]" not in followed and b"\\e]0;pwned" in followed, followed


def test_your_own_output_reaches_your_terminal_as_it_is(spool):
    submit("colours", b"printf '\\033[31mred\\033[0m\\n'\n")
    assert drain(spool).returncode == 0
    assert b"\x1b[31mred\x1b[0m" in on_terminal(spool, ["output", "colours"])


@needs_root
@pytest.mark.attack
def test_rich_markup_in_a_path_a_user_chose_is_shown_as_written(spool, world_tmp):
    """A failed job's reason quotes its directory, a name nobody chose: ``[link=…]`` and ``[conceal]``
    in it must reach root's terminal as those characters, not as a hyperlink and hidden text."""
    import subprocess

    os.chmod(world_tmp, 0o1777)
    folder = world_tmp / "[link=https:" / "evil.example][conceal]x[/conceal][blink]OK[/]"
    subprocess.run(["runuser", "-u", "nobody", "--", "mkdir", "-p", str(folder)], check=True)
    r = run_cli(["submit", "marked"], stdin=b"true\n", user="nobody", cwd=folder)
    assert r.code == 0, r
    subprocess.run(["runuser", "-u", "nobody", "--", "rm", "-rf", str(world_tmp / "[link=https:")], check=True)
    assert drain(spool).returncode == 0 and result(spool, "marked")["state"] == "failed"
    shown = on_terminal(spool, ["list", "--all"])
    assert b"\x1b]8;" not in shown and b"\x1b[8m" not in shown and b"\x1b[5m" not in shown, shown
    assert b"[conceal]x[/conceal][blink]OK[/]" in shown, shown


@needs_root
def test_a_character_split_between_two_reads_reaches_roots_terminal_whole(spool):
    """Spelling out reads the output 64 KiB at a time: a UTF-8 character across two reads stays one."""
    submit("accents", b"head -c 65535 /dev/zero | tr '\\000' a; printf '\\303\\251t\\303\\251\\n'\n", user="nobody")
    assert drain(spool).returncode == 0
    shown = on_terminal(spool, ["output", "nobody:accents"])
    assert shown.endswith("aété\r\n".encode()) and b"\\x" not in shown, shown[-40:]


@needs_root
@pytest.mark.attack
def test_following_your_job_never_shows_an_earlier_users_output_of_its_name(spool):
    """root follows its own queued job ``fx``; ``stdout/fx`` is still nobody's, from an earlier job of
    that name, full of escape sequences. nobody changes its ctime (chmod), which made the follow take
    it for the new run's output and copy it raw to root's terminal."""
    from conftest import OnTerminal, as_user, times_blocked, wait_for

    submit("fx", b"printf 'A\\033]0;PWNED\\007B\\033]52;c;ZWNobyBoaQ==\\007\\n'\n", user="nobody")
    assert drain(spool).returncode == 0
    # with keys nobody's run is nobody:fx, its output stdout/nobody:fx: root's fx is another job
    assert run_cli(["submit", "fx", "--hold"], stdin=b"echo root-job\n").code == 0
    terminal = OnTerminal(spool, ["output", "fx", "--follow"], stdin=False)
    terminal.until(b"waiting for it to start")
    assert as_user(lambda: os.chmod(spool / "stdout" / "nobody:fx", 0o640)) == ("ok", None)
    blocked = times_blocked(terminal.proc.pid)
    wait_for(lambda: times_blocked(terminal.proc.pid) >= blocked + 3, what="several of the follow's looks")
    assert run_cli(["cancel", "fx"]).code == 0
    code, seen = terminal.finish()
    assert code == 5
    assert b"\x1b]" not in seen and b"PWNED" not in seen, seen


def test_output_says_why_a_job_has_none(spool):
    """A job that never ran says why (its dependency failed), a queued one that it has not started,
    and a name of no job that there is none; each exits 1."""
    submit("dep", b"exit 1\n")
    drain(spool)
    submit("after", b"true\n", "--after", "dep")
    drain(spool)
    r = run_cli(["output", "after"])
    assert r.code == 1 and r.err.startswith("onite: job 'after' did not run: dependency dep failed"), r
    submit("later", b"true\n", "--at", "tomorrow 05:00")
    r = run_cli(["output", "later"])
    assert r.code == 1 and r.err.startswith("onite: job 'later' has no output yet — it has not started"), r
    assert "onite output later -f waits for it" in r.err, r
    submit("parked", b"true\n", "--hold")  # -f would wait for ever: the way out is release
    r = run_cli(["output", "parked"])
    assert r.code == 1 and r.err == "onite: job 'parked' has no output yet — it is held; onite release parked lets it run\n", r
    r = run_cli(["output", "nosuch"])
    assert r.code == 1 and r.err.startswith("onite: no job 'nosuch' is queued, running or finished"), r


def test_output_of_a_job_that_never_started_says_why(spool, world_tmp):
    """A job whose directory was gone, or whose interpreter was missing, never
    started; the report said so, but ``output`` printed nothing and exited 0, and ``list --all``
    showed a start time. Now its result has no start, and ``output`` says why it did not run."""
    gone = world_tmp / "gone"
    gone.mkdir()
    r = run_cli(["submit", "gonedir"], stdin=b"echo hi\n", cwd=gone)
    assert r.code == 0, r
    gone.rmdir()
    submit("badinterp", b"#!/no/such/interpreter\necho\n")
    drain(spool)
    for name, why in (("gonedir", f"its directory {gone} no longer exists"),
                      ("badinterp", "cannot start /no/such/interpreter: no such file")):
        assert result(spool, name)["started"] is None
        r = run_cli(["output", name])
        assert r.code == 1 and r.err.startswith(f"onite: job '{name}' did not run: {why}"), r
        [listed] = [j for j in run_cli(["list", "--all", "--json"]).json()["jobs"] if j["name"] == name]
        assert listed["started"] is None, listed
    submit("gonedir", b"echo again\n", "--hold")  # a new run: not the old reason
    r = run_cli(["output", "gonedir"])
    assert r.code == 0 and "did not run" not in r.err and "a new run of gonedir is queued" in r.err, r


def test_output_of_an_earlier_run_says_a_new_one_is_queued(spool):
    """``hello`` ran, and was spooled again: until the new run started, ``output``
    printed the earlier run's output with nothing to say it was not today's."""
    submit("hello", b"echo first run\n")
    drain(spool)
    r = run_cli(["output", "hello"])
    assert r.code == 0 and r.out == "first run\n" and r.err == "", r
    submit("hello", b"echo second run\n", "--hold")
    r = run_cli(["output", "hello"])
    assert r.code == 0 and r.out == "first run\n", r
    assert r.err.startswith("onite: note: a new run of hello is queued and has not started: this is the output of "
                            "its earlier run (onite output hello -f waits for the new one)"), r


@needs_root
@pytest.mark.attack
@pytest.mark.parametrize("follow", [[], ["--follow"]], ids=["output", "follow"])
def test_a_users_output_made_a_huge_sparse_file_costs_roots_output_command_no_more_than_its_data(spool, follow):
    """nobody's job prints a line and ends; nobody then truncates its own output (``stdout/`` is traversable, the
    file its own) to 1 TiB, a hole that costs no disk: root's ``onite output nobody:x`` (and ``-f``) read the
    NULs on and on. Only the file's data is read, and its line is printed."""
    import subprocess
    import sys

    from conftest import REPO, as_user

    submit("sparse", b"echo its line\n", user="nobody")
    assert drain(spool).returncode == 0 and result(spool, "nobody:sparse")["state"] == "done"
    assert as_user(lambda: os.truncate(spool / "stdout" / "nobody:sparse", 1 << 40)) == ("ok", None)
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "onite", "output", "nobody:sparse", *follow], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    bound, got = 64 << 20, b""
    try:
        while len(got) < bound and (chunk := proc.stdout.read1(1 << 20)):
            got += chunk
    finally:
        proc.kill()
        proc.wait()
    assert len(got) < bound, "root's output command read the hole on and on"
    assert got.startswith(b"its line\n")


# ---- max_output -------------------------------------------------------------------------------------------------

WRITES_FOREVER = b"while :; do head -c 65536 /dev/zero; sleep 0.01; done\n"  # about 6 MB a second, without end
STOPPED = "stopped: it wrote more output than max_output"


@needs_root
@pytest.mark.attack
def test_a_job_that_writes_without_end_is_stopped_at_max_output_and_the_night_goes_on(spool):
    """nobody's job writes without end (here its stderr, kept apart): with no limit it would fill the disk under the
    spool, and every user's night would stop with it. Past max_output its monitor stops it, as at its time limit;
    daemon's job after it runs."""
    set_config(spool, max_output="1M", kill_grace="1s")
    submit("flood", b"exec >&2\n" + WRITES_FOREVER, "-p", "1", "--stderr-separate", user="nobody")
    submit("after", b"echo fine\n", "-p", "2", user="daemon")
    assert drain(spool).returncode == 0  # the flood would have kept it running for ever
    flood = result(spool, "nobody:flood")
    assert (flood["state"], flood["reason"]) == ("failed", STOPPED), flood
    assert (spool / "stdout" / "nobody:flood@stderr").stat().st_size > 1 << 20
    assert result(spool, "daemon:after")["state"] == "done"
    assert (spool / "stdout" / "daemon:after").read_bytes() == b"fine\n"


def test_each_run_may_write_max_output_a_retry_appending_too(spool, workdir):
    """A retry appends to its output file: only what that run writes counts, not what the runs before it wrote."""
    set_config(spool, max_output="1M", retry_delay="0.05s")
    flag = workdir / "failed-once"
    body = f"head -c 700000 /dev/zero; [ -e {flag} ] && exit 0; touch {flag}; exit 1\n".encode()
    submit("twice", body, "--retries", "1")
    assert drain(spool).returncode == 0
    rec = result(spool, "twice")
    assert (rec["state"], rec["attempt"]) == ("done", 2), rec
    assert (spool / "stdout" / "root:twice").stat().st_size > 1_400_000  # both runs' 700,000 bytes, and markers


def test_max_output_is_held_while_no_driver_is_alive(spool, workdir):
    """The monitor holds the limit: a driver killed as its job writes without end changes nothing; the job is
    stopped, and the next driver files it with the reason its monitor recorded."""
    from conftest import start_driver, wait_for
    import signal

    set_config(spool, max_output="1M", kill_grace="1s")
    started = workdir / "started"
    submit("orphan", f"touch {started}\n".encode() + WRITES_FOREVER)
    driver = start_driver(spool)
    wait_for(started.exists, what="the job to start")
    os.kill(driver.pid, signal.SIGKILL)
    driver.communicate()
    record = next((spool / "running").glob("*/root:orphan@run"))
    wait_for(lambda: b'"why":"output"' in record.read_bytes(), timeout=60, what="its monitor to stop it")
    assert drain(spool).returncode == 0
    rec = result(spool, "orphan")
    assert (rec["state"], rec["reason"]) == ("failed", STOPPED), rec


def test_a_job_stopped_for_its_output_is_filed_so_when_the_driver_is_stopped_hard_meanwhile(spool, workdir):
    """Its monitor stops a job past max_output; the job takes its kill_grace to end (it ignores TERM), and meanwhile
    the driver is stopped hard (QUIT). Its record's first stop line says output, and a recovering driver files it so;
    the live driver put it back in its queue as interrupted, to write as much again the next night."""
    from conftest import start_driver, wait_for
    import signal

    set_config(spool, max_output="1M", kill_grace="2s")
    submit("flood", b"trap '' TERM\n" + WRITES_FOREVER)
    driver = start_driver(spool)

    def stopped():
        return any(b'"why":"output"' in p.read_bytes() for p in (spool / "running").glob("*/root:flood@run"))
    wait_for(stopped, timeout=60, what="its monitor to stop it")
    driver.send_signal(signal.SIGQUIT)
    assert driver.wait(60) == 0
    assert not list((spool / "jobs").rglob("root:flood")), "put back in its queue"
    rec = result(spool, "flood")
    assert (rec["state"], rec["reason"]) == ("failed", STOPPED), rec


def test_the_report_proposes_no_plain_restart_of_a_job_stopped_at_max_output(spool):
    """The morning report said ``next: onite restart big`` under a job stopped at max_output: run again as it
    was spooled, it writes as much again and is stopped again. As for a job that never ran, no next step."""
    set_config(spool, max_output="1K", kill_grace="1s")
    submit("big", WRITES_FOREVER)
    submit("bad", b"exit 3\n")
    assert drain(spool).returncode == 0
    assert result(spool, "big")["reason"] == STOPPED
    out = run_cli(["report"]).out
    assert "next: onite restart bad" in out and "restart big" not in out, out
    nexts = {job["name"]: job["next"] for job in run_cli(["report", "--json"]).json()["failures"]}
    assert (nexts["big"], nexts["bad"]) == (None, "onite restart bad"), nexts


def test_output_of_a_pruned_job_says_it_was_pruned_and_how_it_ended(spool):
    """``keep = 1`` pruned ``first``: output said no such job was ever queued, running or finished. Its owner
    and root learn it was pruned and how it ended (the log's line); another user is refused, as for a kept
    output, and learns nothing of how it ended."""
    set_config(spool, keep=1)
    submit("first", b"echo hi; exit 3\n", user="nobody")
    submit("second", b"true\n", user="nobody")
    assert drain(spool).returncode == 0
    for user, name, follow in ((None, "nobody:first", []), ("nobody", "first", []), ("nobody", "first", ["-f"])):
        r = run_cli(["output", name, *follow], user=user, cwd="/tmp")
        assert r.code == 1 and r.out == "" and r.err.count("\n") == 1, r
        assert re.match(rf"onite: no output of job '{name}' is kept: failed \(exit 3 at "
                        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d; its record and output were pruned \(keep = 1\)\) — ", r.err), r
    submit("mine", b"true\n")
    submit("mine2", b"true\n")
    assert drain(spool).returncode == 0
    for follow in ([], ["-f"]):
        r = run_cli(["output", "root:mine", *follow], user="nobody", cwd="/tmp")
        assert r.code == 3 and r.err == "onite: the output of 'root:mine' belongs to root — only its owner and root " \
            "may read it\n", r
    r = run_cli(["output", "never"])
    assert r.code == 1 and "no job 'never' is queued, running or finished" in r.err, r
