"""Notifications: the hook and sendmail are real executables, the driver a real `onite run` (onite.exec.notify)."""

import json
import os
from datetime import datetime, timedelta, timezone
from email import message_from_bytes, policy

import pytest
from types import SimpleNamespace

from conftest import drain, kill_driver_mid_job, log_lines, needs_root, result, run_cli, set_config, start_driver, wait_for
from onite.core.config import Config, parse_config
from onite.core.errors import ConfigError
from onite.exec.notify import NO_SENDMAIL, mail_message, subject, wants_notice
from onite.spool.outputs import last_lines
from onite.core.state import JobState, Result


def submit(name, body, *args, user=None):
    r = run_cli(["submit", name, *args], stdin=body.encode(), user=user, cwd="/tmp")
    assert r.code == 0, r
    return r


def script(path, text):
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


@pytest.fixture
def notices(workdir):
    """A hook that files what it was given: NAME.json (stdin), NAME.env, NAME.uid."""
    folder = workdir / "notices"
    folder.mkdir()
    folder.chmod(0o777)
    hook = script(workdir / "hook", f'd={folder}\ncat > "$d/$ONITE_JOB.json"\nenv > "$d/$ONITE_JOB.env"\n'
                                    f'id -u > "$d/$ONITE_JOB.uid"\n')
    return SimpleNamespace(dir=folder, hook=str(hook))


def noticed(folder):
    """The keys of the jobs the hook was told of (it names its files by ONITE_JOB, the key)."""
    return sorted(p.stem for p in folder.dir.glob("*.json"))


def events(spool, kind):
    return [line.split(" ", 3)[3] for line in log_lines(spool) if line.split(" ")[2] == kind]


# ---- the hook ---------------------------------------------------------------------------


def test_the_hook_gets_the_failed_jobs_record(spool, notices):
    set_config(spool, notify="command", notify_command=notices.hook)
    submit("broken", "echo oops; exit 3\n")
    submit("fine", "true\n")
    assert drain(spool).returncode == 0
    assert noticed(notices) == ["root:broken"]
    record = (notices.dir / "root:broken.json").read_bytes()
    assert record == (spool / "jobsdone" / "root:broken@result").read_bytes()  # exactly the result record
    assert json.loads(record) == result(spool, "broken") and result(spool, "broken")["exit_code"] == 3
    env = dict(line.split("=", 1) for line in (notices.dir / "root:broken.env").read_text().splitlines() if "=" in line)
    assert (env["ONITE_JOB"], env["ONITE_STATE"], env["ONITE_EVENT"]) == ("root:broken", "failed", "finished")
    assert env["ONITE_SPOOL"] == str(spool) and env["ONITE_USER"] == result(spool, "broken")["user"]
    assert events(spool, "notified") == ["root:broken how=command"]


def test_notify_on_always_tells_every_end(spool, notices):
    set_config(spool, notify="command", notify_command=notices.hook, notify_on="always")
    submit("broken", "exit 3\n")
    submit("fine", "true\n")
    submit("waiting", "true\n", "--after", "broken")
    assert drain(spool).returncode == 0
    assert noticed(notices) == ["root:broken", "root:fine", "root:waiting"]
    states = {key: json.loads((notices.dir / f"{key}.json").read_text())["state"] for key in noticed(notices)}
    assert states == {"root:broken": "failed", "root:fine": "done", "root:waiting": "failed"}  # a failed dependency is a failure


def test_a_job_asks_for_what_the_spool_does_not_default_to(spool, notices):
    set_config(spool, notify="none", notify_command=notices.hook)
    submit("told", "true\n", "--notify", "command", "--notify-on", "always")
    submit("quiet", "exit 1\n")
    submit("silenced", "exit 1\n", "--notify", "none")
    assert "notify: command\nnotify-on: always\n" in (spool / "jobs" / "P4" / "root:told").read_text()
    assert drain(spool).returncode == 0
    assert noticed(notices) == ["root:told"]


def test_a_job_that_opts_out_of_the_spools_default(spool, notices):
    set_config(spool, notify="command", notify_command=notices.hook, notify_on="always")
    submit("silenced", "exit 1\n", "--notify", "none")
    submit("failures-only", "true\n", "--notify-on", "failure")
    submit("told", "true\n")
    assert drain(spool).returncode == 0
    assert noticed(notices) == ["root:told"]


def test_only_the_final_attempt_of_a_retried_job_is_told(spool, notices):
    set_config(spool, notify="command", notify_command=notices.hook, retry_delay="1s")
    submit("hopeless", "exit 7\n", "--retries", "1")
    assert drain(spool).returncode == 0
    assert events(spool, "notified") == ["root:hopeless how=command"]
    told = json.loads((notices.dir / "root:hopeless.json").read_text())
    assert told["attempt"] == 2 and len(told["attempts"]) == 2


@needs_root
def test_a_queued_job_its_owner_cancels_during_the_night_is_told_with_always(spool, notices, workdir, cli):
    """The driver files a job a user withdrew from the queue (users cannot write jobsdone/), and tells them."""
    set_config(spool, notify="command", notify_command=notices.hook, notify_on="always")
    gate, started = workdir / "gate", workdir / "started"
    gate.touch()
    submit("first", f"touch {started}; while [ -e {gate} ]; do sleep 0.05; done\n")
    submit("second", "true\n", user="nobody")
    driver = start_driver(spool)
    wait_for(started.exists, what="the first job to start")
    assert cli(["cancel", "second"], user="nobody", cwd="/tmp").code == 0
    wait_for(lambda: (spool / "jobsdone" / "nobody:second@result").exists(), what="the cancel to be filed")
    gate.unlink()
    assert driver.wait(60) == 0
    assert noticed(notices) == ["nobody:second", "root:first"]
    assert json.loads((notices.dir / "nobody:second.json").read_text())["state"] == "cancelled"


@needs_root
def test_a_queued_job_root_cancels_by_day_is_told_and_logged(spool, notices, cli):
    """root files the cancelled job itself (no driver runs): the owner is told as a driver would tell them."""
    set_config(spool, notify="command", notify_command=notices.hook, notify_on="always")
    submit("theirs", "true\n", user="nobody")
    submit("quiet", "true\n", "--notify-on", "failure", user="nobody")
    r = cli(["cancel", "nobody:theirs", "nobody:quiet"])
    assert r.code == 0 and r.out == "nobody:theirs: cancelled\nnobody:quiet: cancelled\n", r
    assert noticed(notices) == ["nobody:theirs"]  # the notice is sent before cancel returns
    told = json.loads((notices.dir / "nobody:theirs.json").read_text())
    assert (told["user"], told["state"], told["reason"]) == ("nobody", "cancelled", "cancelled by root")
    assert [line.split()[:3] for line in events(spool, "cancelled")] == [["nobody:theirs", "user=nobody", "by=root"],
                                                                         ["nobody:quiet", "user=nobody", "by=root"]]


def test_a_job_failed_by_recovery_is_told(spool, notices, workdir):
    set_config(spool, notify="command", notify_command=notices.hook, on_interrupt="fail")
    kill_driver_mid_job(spool, workdir, "doomed", machine_dies=True)
    assert drain(spool).returncode == 0
    assert noticed(notices) == ["root:doomed"]
    assert "interrupted" in json.loads((notices.dir / "root:doomed.json").read_text())["reason"]


def test_a_refused_job_file_is_told(spool, notices):
    set_config(spool, notify="command", notify_command=notices.hook)
    junk = spool / "jobs" / "P4" / "root:junk"
    junk.write_bytes(b"not a job\n")
    junk.chmod(0o600)
    assert drain(spool).returncode == 0
    assert noticed(notices) == ["root:junk"]
    told = json.loads((notices.dir / "root:junk.json").read_text())
    assert told["state"] == "failed" and told["reason"].startswith("refused: ")


# ---- a broken notifier never breaks the night ------------------------------------------------


def test_a_failing_hook_is_logged_and_changes_nothing(spool, workdir):
    hook = script(workdir / "hook", "echo 'webhook said 500' >&2\nexit 1\n")
    set_config(spool, notify="command", notify_command=str(hook))
    submit("one", "exit 2\n")
    submit("two", "exit 3\n")
    submit("three", "true\n")
    assert drain(spool).returncode == 0
    assert [result(spool, n)["state"] for n in ("one", "two", "three")] == ["failed", "failed", "done"]
    assert result(spool, "two")["exit_code"] == 3
    assert sorted(events(spool, "notify-failed")) == [
        'root:one how=command exit=1 stderr="webhook said 500"', 'root:two how=command exit=1 stderr="webhook said 500"']


def test_a_hanging_hook_is_killed_and_does_not_hold_up_the_jobs(spool, workdir):
    pids = workdir / "pids"
    hook = script(workdir / "hook", f"echo $$ >> {pids}\nsleep 1000\n")
    set_config(spool, notify="command", notify_command=str(hook), notify_timeout="2s")
    submit("one", "exit 1\n")
    submit("two", "exit 1\n")
    submit("three", "true\n")
    assert drain(spool).returncode == 0
    assert [result(spool, n)["state"] for n in ("one", "two", "three")] == ["failed", "failed", "done"]
    assert sorted(events(spool, "notify-failed")) == ["root:one how=command reason=timeout",
                                                   "root:two how=command reason=timeout"]
    lines = log_lines(spool)
    done = next(i for i, line in enumerate(lines) if " done root:three " in line)
    assert done < next(i for i, line in enumerate(lines) if " notify-failed " in line)  # the jobs did not wait
    for pgid in map(int, pids.read_text().split()):  # the hook and its sleep: the whole group is gone
        wait_for(lambda: not live_in_group(pgid), what=f"process group {pgid} to die")


def live_in_group(pgid):
    """Pids of the processes of group ``pgid`` that are alive (not zombies waiting for init)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry))
    return found


def test_a_burst_of_failures_runs_a_few_hooks_at_a_time_and_the_jobs_go_on(spool, notices, workdir):
    from onite.exec.notify import MAX_RUNNING

    d, gate = notices.dir, workdir / "gate"
    gate.touch()
    hook = script(workdir / "slow-hook", f'touch {d}/run.$ONITE_JOB; ls {d} | grep -c "^run" >> {d}/counts\n'
                                         f'while [ -e {gate} ]; do sleep 0.05; done\nrm {d}/run.$ONITE_JOB\n')
    set_config(spool, notify="command", notify_command=str(hook), notify_timeout="5m")
    jobs = [f"j{i:02d}" for i in range(MAX_RUNNING + 4)]
    r = run_cli(["submit", "j", "--lines"], stdin=b"exit 1\n" * len(jobs))
    assert r.code == 0, r
    driver = start_driver(spool)
    # every job is filed while the first hooks hang: notices never hold up the night
    wait_for(lambda: len(list((spool / "jobsdone").glob("*@result"))) == len(jobs), what="every job to be filed")
    wait_for(lambda: (d / "counts").exists() and len((d / "counts").read_text().split()) == MAX_RUNNING,
             what="the first hooks")
    gate.unlink()
    assert driver.wait(120) == 0
    counts = [int(n) for n in (d / "counts").read_text().split()]
    assert len(counts) == len(jobs) and max(counts) <= MAX_RUNNING
    assert len(events(spool, "notified")) == len(jobs)


@needs_root
@pytest.mark.attack
def test_one_users_burst_of_notices_drops_and_holds_up_no_one_elses(spool, workdir):
    """nobody dropped 1,100 empty files into a queue: each was refused and filed as
    nobody's failure, each wanted a notice, and the shared queue of waiting notices was full when
    daemon's job failed: daemon's notice was dropped. Now one user's notices wait at most
    MAX_WAITING_PER_USER, one user's after another's: daemon's is among the first to start once a
    hook is free, and only nobody's own beyond the cap are dropped."""
    from conftest import as_user
    from onite.exec.notify import MAX_RUNNING, MAX_WAITING_PER_USER

    folder, gate = workdir / "told", workdir / "gate"
    folder.mkdir()
    gate.touch()
    hook = script(workdir / "gated-hook", f'while [ -e {gate} ]; do sleep 0.05; done\necho "$ONITE_JOB" >> {folder}/order\n')
    set_config(spool, notify="command", notify_command=str(hook), notify_timeout="5m")
    junk = MAX_RUNNING + MAX_WAITING_PER_USER + 5

    def drop():
        for i in range(junk):
            os.close(os.open(spool / "jobs" / "P1" / f"nobody:junk{i:03d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    assert as_user(drop) == ("ok", None)
    r = run_cli(["submit", "payroll"], stdin=b"exit 1\n", user="daemon", cwd="/tmp")
    assert r.code == 0, r
    driver = start_driver(spool)
    wait_for(lambda: (spool / "jobsdone" / "daemon:payroll@result").exists(), what="daemon's job to be filed")
    gate.unlink()
    assert driver.wait(120) == 0
    order = (folder / "order").read_text().split()
    assert "daemon:payroll" in order[:2 * MAX_RUNNING], order
    dropped = [e for e in events(spool, "notify-failed") if "too many notices at once" in e]
    assert len(dropped) == 5 and all(e.startswith("nobody:junk") for e in dropped), dropped
    assert len(order) == junk - 5 + 1


def test_a_hook_that_does_not_exist(spool, workdir):
    set_config(spool, notify="command", notify_command=f"{workdir}/no-such-hook --flag")
    submit("one", "exit 1\n")
    assert drain(spool).returncode == 0
    assert result(spool, "one")["state"] == "failed"
    assert events(spool, "notify-failed") == [f'root:one how=command reason="cannot start {workdir}/no-such-hook: no such file"']


def test_a_hook_that_writes_a_lot_is_not_waited_for(spool, workdir):
    hook = script(workdir / "hook", "head -c 3000000 /dev/zero >&2; head -c 3000000 /dev/zero; echo last words >&2\n")
    set_config(spool, notify="command", notify_command=str(hook))
    submit("one", "exit 1\n")
    assert drain(spool).returncode == 0
    assert events(spool, "notified") == ["root:one how=command"]


# ---- mail --------------------------------------------------------------------------------


@pytest.fixture
def mailbox(workdir):
    """A stand-in for the local MTA's sendmail: saves its arguments and the message."""
    folder = workdir / "mail"
    folder.mkdir()
    sendmail = script(workdir / "sendmail", f'n=$(mktemp {folder}/msg.XXXXXX)\necho "$*" > "$n.argv"\ncat > "$n"\n')
    return SimpleNamespace(dir=folder, sendmail=str(sendmail))


def messages(folder):
    return [(p.with_name(p.name + ".argv").read_text().strip(), message_from_bytes(p.read_bytes(), policy=policy.default))
            for p in sorted(folder.dir.glob("msg.??????"))]


def test_mail_tells_the_owner_with_the_end_of_the_output(spool, mailbox):
    set_config(spool, notify="mail", sendmail=mailbox.sendmail)
    submit("report", "seq 1 150; printf 'caf\\351\\n'; exit 3\n")
    submit("fine", "true\n")
    assert drain(spool).returncode == 0
    [(argv, msg)] = messages(mailbox)
    rec = result(spool, "report")
    assert argv == "-oi -t"
    assert msg["To"] == rec["user"]
    assert msg["Subject"] == "onite: job report failed (exit 3)"
    assert msg["Auto-Submitted"] == "auto-generated"
    body = msg.get_content()
    lines = body.splitlines()
    assert "150" in lines and "52" in lines and "51" not in lines  # the last 100 lines
    assert "caf\ufffd" in lines  # bytes that are not UTF-8 are replaced
    assert f"onite output report --spool {spool}" in body
    assert "exit 3" in body and rec["host"] in body
    assert events(spool, "notified") == ["root:report how=mail"]


def test_a_configured_sendmail_that_is_missing_is_said_once(spool, workdir):
    set_config(spool, notify="mail", sendmail=f"{workdir}/no-sendmail")
    for name in ("one", "two", "three"):
        submit(name, "exit 1\n")
    assert drain(spool).returncode == 0
    assert [result(spool, n)["state"] for n in ("one", "two", "three")] == ["failed"] * 3
    [line] = events(spool, "notify-failed")
    assert f"no sendmail at {workdir}/no-sendmail" in line


@pytest.mark.skipif(any(os.path.exists(p) for p in ("/usr/sbin/sendmail", "/usr/lib/sendmail")),
                    reason="this machine has a sendmail")
def test_no_sendmail_on_the_machine_is_said_once(spool):
    set_config(spool, notify="mail")
    submit("one", "exit 1\n")
    submit("two", "exit 1\n")
    assert drain(spool).returncode == 0
    [line] = events(spool, "notify-failed")
    assert line.startswith(f'root:one how=mail reason="{NO_SENDMAIL}"')


def test_a_reason_with_a_unicode_line_separator_still_reaches_the_owner_by_mail(spool, mailbox, world_tmp):
    """A job spooled from a directory whose name holds U+2028, gone before it runs: its reason quotes the path,
    which the mail's Subject takes. The email module takes U+2028 for a line break in a header and refused the
    whole message: the owner was never told their job failed."""
    set_config(spool, notify="mail", sendmail=mailbox.sendmail)
    gone = world_tmp / "gone\u2028Bcc: x"
    gone.mkdir()
    assert run_cli(["submit", "lost"], stdin=b"true\n", cwd=str(gone)).code == 0
    gone.rmdir()
    assert drain(spool).returncode == 0
    assert result(spool, "lost")["state"] == "failed"
    [(_, msg)] = messages(mailbox)
    assert msg["Subject"].startswith("onite: job lost failed") and "\u2028" not in msg["Subject"]
    assert msg["Bcc"] is None
    assert events(spool, "notify-failed") == []


def test_a_reason_quoting_bytes_that_are_not_utf8_keeps_them_spelt_to_the_owners_mail(spool, mailbox, world_tmp):
    """A job whose directory or interpreter path holds the byte 0xff: its reason said '?' (the monitor's words were
    encoded with errors="replace" on their way to the driver), so the record, the report and the mail lost which
    path it was. It is spelt '\\xff', as onite.core.safetext spells such a byte everywhere."""
    set_config(spool, notify="mail", sendmail=mailbox.sendmail)
    gone = world_tmp / os.fsdecode(b"gone\xff")
    gone.mkdir()
    assert run_cli(["submit", "lost"], stdin=b"true\n", cwd=str(gone)).code == 0
    gone.rmdir()
    assert run_cli(["submit", "shebang"], stdin=b"#!/nonexistent/\xff\n", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert result(spool, "lost")["reason"] == f"its directory {world_tmp}/gone\\xff no longer exists"
    assert result(spool, "shebang")["reason"] == "cannot start /nonexistent/\\xff: no such file"
    subjects = sorted(msg["Subject"].strip() for _, msg in messages(mailbox))  # folded before a backslash
    assert subjects == [f"onite: job lost failed (its directory {world_tmp}/gone\\xff no longer exists)",
                        "onite: job shebang failed (cannot start /nonexistent/\\xff: no such file)"]
    assert events(spool, "notify-failed") == []


# ---- another user's job (root) -----------------------------------------------------------


@needs_root
def test_a_job_of_nobody_is_told_by_root_run_notifiers(spool, notices, mailbox, cli):
    set_config(spool, notify="command", notify_command=notices.hook)
    set_config(spool, sendmail=mailbox.sendmail)
    submit("theirs", "exit 4\n", user="nobody")
    submit("mailed", "echo nobody was here; exit 5\n", "--notify", "mail", user="nobody")
    assert drain(spool).returncode == 0
    assert noticed(notices) == ["nobody:theirs"]
    told = json.loads((notices.dir / "nobody:theirs.json").read_text())
    assert (told["user"], told["state"], told["exit_code"]) == ("nobody", "failed", 4)
    assert (notices.dir / "nobody:theirs.uid").read_text().strip() == "0"  # the admin's hook runs as the driver (docs/security.md)
    [(_, msg)] = messages(mailbox)
    assert msg["To"] == "nobody" and "nobody was here" in msg.get_content()


# ---- submit ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--notify", "x"], "onite: --notify 'x': expected mail, command or none\n"),
    (["--notify-on", "never"], "onite: --notify-on 'never': expected failure or always\n"),
    (["--notify", "command"], "onite: --notify command: this spool has no notify_command in onite.toml — "
                              "ask the admin to set notify_command (--notify mail works where this machine can send mail)\n"),
])
def test_submit_refuses_a_bad_notify(spool, args, message):
    for extra in ([], ["--lines"]):
        r = run_cli(["submit", "a", *args, *extra], stdin=b"true\n")
        assert (r.code, r.err) == (2, message)
    assert not list((spool / "jobs").rglob("root:a*"))


def test_notify_mail_without_a_sendmail_is_refused_at_submit_time(spool, workdir, mailbox):
    """Not a notify-failed line in the log the next morning: the submit says it, and spools nothing."""
    set_config(spool, sendmail=f"{workdir}/no-sendmail")
    said = (f"onite: --notify mail: no sendmail at {workdir}/no-sendmail (install an MTA or fix sendmail in "
            "onite.toml) — ask the admin for a mail transport, or use --notify none\n")
    for argv in (["submit", "a", "--notify", "mail"], ["submit", "a", "--notify", "mail", "--lines"],
                 ["recur", "add", "a", "--every", "1h", "--notify", "mail"]):
        r = run_cli(argv, stdin=b"true\n")
        assert (r.code, r.err) == (2, said), argv
    assert run_cli(["list", "--json"]).json()["jobs"] == [] and not list((spool / "recur").iterdir())
    assert run_cli(["submit", "a", "--notify", "none"], stdin=b"true\n").code == 0  # only mail needs sendmail
    set_config(spool, sendmail=mailbox.sendmail)
    assert run_cli(["submit", "b", "--notify", "mail"], stdin=b"true\n").code == 0


def test_recur_add_takes_notify(spool, notices):
    set_config(spool, notify_command=notices.hook)
    r = run_cli(["recur", "add", "nightly", "--cron", "0 3 * * *", "--notify", "command", "--notify-on", "always"],
                stdin=b"true\n")
    assert r.code == 0, r
    assert "notify: command\nnotify-on: always\n" in (spool / "recur" / "root:nightly").read_text()
    r = run_cli(["recur", "add", "other", "--cron", "0 3 * * *", "--notify", "sms"], stdin=b"true\n")
    assert r.code == 2 and "--notify 'sms': expected" in r.err


# ---- pure ----------------------------------------------------------------------------------------

NOW = datetime(2026, 11, 23, 3, 0, tzinfo=timezone.utc)


def make_result(state=JobState.FAILED, reason="exit 3", **kw):
    values = dict(name="alice:job", uid=1000, user="alice", priority=4, urgent=False, state=state, reason=reason,
                  exit_code=3, signal=None, host="vm", submitted=NOW, queued=NOW, started=NOW,
                  finished=NOW + timedelta(seconds=90), attempt=1)
    return Result(**{**values, **kw})


@pytest.mark.parametrize("state, job_notify, job_on, spool_notify, spool_on, expected", [
    (JobState.FAILED, None, None, "none", "failure", None),
    (JobState.FAILED, None, None, "mail", "failure", "mail"),
    (JobState.DONE, None, None, "mail", "failure", None),
    (JobState.DONE, None, None, "mail", "always", "mail"),
    (JobState.CANCELLED, None, None, "command", "always", "command"),
    (JobState.CANCELLED, None, None, "command", "failure", None),
    (JobState.DONE, "command", "always", "none", "failure", "command"),
    (JobState.FAILED, "none", None, "mail", "always", None),
    (JobState.DONE, None, "failure", "mail", "always", None),
])
def test_wants_notice(state, job_notify, job_on, spool_notify, spool_on, expected):
    config = Config(notify=spool_notify, notify_on=spool_on, notify_command=("/bin/true",))
    assert wants_notice(make_result(state), job_notify, job_on, config) == expected


def test_subjects_say_how_it_ended():
    assert subject(make_result()) == "onite: job job failed (exit 3)"
    assert subject(make_result(JobState.DONE, "")) == "onite: job job done"
    assert subject(make_result(reason="timeout")) == "onite: job job failed (timeout)"
    assert subject(make_result(JobState.CANCELLED, "cancelled by bob")) == "onite: job job cancelled by bob"
    # a reason built from a user's data (a directory name) cannot add a header
    assert subject(make_result(reason="its directory /tmp/a\nBcc: eve no longer exists")).count("\n") == 0
    # and what a reader's terminal or mail client would act on is spelt, as everywhere (core.safetext)
    spelt = subject(make_result(reason="its directory /tmp/\u202egnp.exe\u200b\x1b[2J no longer exists"))
    assert spelt == "onite: job job failed (its directory /tmp/\\u202egnp.exe\\u200b\\e[2J no longer exists)"


def test_mail_message_headers_and_body():
    raw = mail_message(make_result(reason="x\nBcc: eve"), b"line\n\xffend\n", "/var/spool/onite")
    msg = message_from_bytes(raw, policy=policy.default)
    assert (msg["To"], msg["Auto-Submitted"], msg["Bcc"]) == ("alice", "auto-generated", None)
    body = msg.get_content()
    assert "\ufffdend" in body and "duration:  90.0 s" in body
    assert "onite output job --spool /var/spool/onite" in body
    never = message_from_bytes(mail_message(make_result(started=None), None, "/s"), policy=policy.default)
    assert "no output of this run" in never.get_content() and "never" in never.get_content()


def test_last_lines():
    data = b"".join(b"%d\n" % i for i in range(1, 201))
    assert last_lines(data, cut=False, lines=100) == b"".join(b"%d\n" % i for i in range(101, 201))
    assert last_lines(b"partial\nwhole\n", cut=True, lines=100) == b"whole\n"
    assert last_lines(b"", cut=False, lines=100) == b""
    assert last_lines(b"no newline", cut=False, lines=100) == b"no newline\n"
    assert last_lines(data, cut=False, lines=0) == b""


# ---- configuration -----------------------------------------------------------------------


def test_config_defaults_and_values():
    config = parse_config("")
    assert (config.notify, config.notify_on, config.notify_command, config.sendmail) == ("none", "failure", (), None)
    assert config.notify_timeout == timedelta(seconds=30)
    config = parse_config('notify = "command"\nnotify_command = "/usr/local/bin/hook --room \'night shift\'"\n'
                          'notify_on = "always"\nsendmail = "/usr/sbin/sendmail"\nnotify_timeout = "1m"\n')
    assert config.notify_command == ("/usr/local/bin/hook", "--room", "night shift")
    assert (config.notify, config.notify_on, config.sendmail) == ("command", "always", "/usr/sbin/sendmail")
    assert config.notify_timeout == timedelta(minutes=1)


@pytest.mark.parametrize("text, message", [
    ('notify = "sms"', r"onite.toml: notify = 'sms' is not valid"),
    ('notify_on = "never"', r"onite.toml: notify_on = 'never' is not valid"),
    ('notify = "command"', r'onite.toml: notify = "command" needs notify_command'),
    ('notify_command = "hook.sh"', r"onite.toml: notify_command = 'hook.sh' is not valid"),
    ('notify_command = "/bin/hook \'open"', r"notify_command .* is not valid"),
    ("notify_command = 3", r"notify_command = 3 is not valid"),
    ('sendmail = "sendmail"', r"onite.toml: sendmail = 'sendmail' is not valid"),
    ('notify_timeout = "soon"', r"onite.toml: notify_timeout = 'soon' is not valid"),
    ('notify-on = "always"', r"unknown key 'notify-on'"),
])
def test_config_refuses_bad_notify_keys(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(text)
