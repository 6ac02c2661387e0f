"""The command-line contract: exit codes, one-line errors, --json documents, small commands."""

import contextlib
import grp
import json
import os
import pwd
import re
import stat
import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from conftest import NO_SYSTEM_CONFIG, REPO, ROOT, drain, init_spool_at, needs_root, result, run_cli, set_config


def submit(name, body="true\n", *args):
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


def test_init_is_idempotent_and_keeps_a_changed_config(world_tmp, cli):
    spool = world_tmp / "s"
    r = cli(["init", "--spool", str(spool), "--priorities", "3"])
    assert r.code == 0 and "created" in r.out
    assert sorted(p.name for p in (spool / "jobs").iterdir()) == ["P1", "P2", "P3", "urgent"]
    assert "priorities = 3" in (spool / "onite.toml").read_text()
    assert cli(["init", "--spool", str(spool)]).code == 0  # again: nothing changes
    text = (spool / "onite.toml").read_text().replace("keep = 50", "keep = 7")
    (spool / "onite.toml").write_text(text)
    r = cli(["init", "--spool", str(spool)])
    assert r.code == 0 and "kept as you changed it" in r.out
    assert (spool / "onite.toml").read_text() == text
    r = cli(["init", "--spool", str(spool), "--priorities", "5"])
    assert r.code == 3 and "was changed by hand" in r.err
    assert (spool / "onite.toml").read_text() == text
    # a pristine config follows --priorities
    fresh = world_tmp / "f"
    cli(["init", "--spool", str(fresh)])
    assert cli(["init", "--spool", str(fresh), "--priorities", "9"]).code == 0
    assert (fresh / "jobs" / "P9").is_dir() and "priorities = 9" in (fresh / "onite.toml").read_text()


def test_init_spells_a_spool_path_a_terminal_would_act_on(world_tmp, cli):
    r = cli(["init", "--spool", str(world_tmp / "odd\nname\x1b[2J")])
    lines = [line for line in r.out.splitlines() if not line.startswith("PAM: ")]  # root's: PAM is not installed
    assert r.code == 0 and len(lines) == 1 and "odd\\nname\\e[2J: " in lines[0], r


def test_init_through_a_trusted_symlink_sets_up_the_folder_it_leads_to(world_tmp, cli):
    # An admin's /var/spool/onite -> /srv/onite: the driver, submit and status follow such a link (docs/security.md),
    # but onite init refused it ("exists and is not a folder — move it away"), even run again after an upgrade.
    real, link = world_tmp / "srv-onite", world_tmp / "spool-link"
    real.mkdir()
    link.symlink_to(real)
    for _ in range(2):
        r = cli(["init", "--spool", str(link)])
        assert r.code == 0 and r.out.startswith(f"{real}: "), r
    assert (real / "jobs" / "P7").is_dir() and (real / "onite.toml").is_file() and link.is_symlink()
    # a link anyone could repoint is refused, saying why and what to give instead
    open_dir = world_tmp / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    (open_dir / "link").symlink_to(real)
    r = cli(["init", "--spool", str(open_dir / "link")])
    assert r.code == 3 and "will not trust" in r.err and "give the spool's real path" in r.err, r


def test_init_on_a_file_of_ones_own_does_not_blame_someone_else(world_tmp, cli):
    # onite init --spool FILE said "someone else made it: move it away (or chown it)" of the caller's own file.
    path = world_tmp / "spool"
    path.write_text("notes\n")
    r = cli(["init", "--spool", str(path)])
    assert r.code == 3 and f"{path} is not a folder — move it away (or, if another user made it, chown it)" in r.err, r
    assert "someone else" not in r.err and path.read_text() == "notes\n"


def test_personal_default_spool_is_created_on_first_use(world_tmp):
    home = world_tmp / "home"
    home.mkdir()
    # a system spool that does not exist, whatever this machine has (conftest)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "ONITE_SYSTEM_CONFIG": str(NO_SYSTEM_CONFIG)}
    if ROOT:
        user_env = dict(env, XDG_STATE_HOME=str(world_tmp / "state"))
        os.chmod(world_tmp, 0o777)
        r = run_cli(["submit", "mine"], stdin=b"true\n", env=user_env, user="nobody", cwd="/tmp")
        assert r.code == 0, r
        spool = world_tmp / "state" / "onite"
    else:
        r = run_cli(["submit", "mine"], stdin=b"true\n", env=env, cwd="/tmp")
        assert r.code == 0, r
        spool = home / ".local" / "state" / "onite"
    owner = "nobody" if ROOT else pwd.getpwuid(os.geteuid()).pw_name  # the job is its submitter's
    assert (spool / "jobs" / "P4" / f"{owner}:mine").exists()
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700


def test_errors_are_one_line_with_exit_codes(spool, cli, world_tmp):
    cases = [
        (["output", "nosuch"], 1, "no job 'nosuch' is queued, running or finished"),
        (["cancel", "nosuch"], 1, "no job 'nosuch' is queued or running"),
        (["release", "nosuch"], 1, "no job 'nosuch' is queued"),
        (["submit", "bad name"], 2, "invalid job name 'bad name'"),
        (["list", "--spool", str(world_tmp / "missing")], 4, "no spool at"),
        *[([*cmd, "--spool", str(world_tmp / "missing")], 4, "no spool at")  # every command, not only list
          for cmd in (["hold", "x"], ["release", "x"], ["output", "x"], ["uniqname", "x"], ["cron"], ["status"],
                      ["find", "x"], ["cancel", "x"], ["report"], ["recur", "list"], ["daemon"])],
        (["frobnicate"], 2, "No such command"),
        (["run", "--until", "25:00"], 2, "--until '25:00': expected"),
        (["run", "--host", "../x"], 2, "invalid host name"),
    ]
    for args, code, message in cases:
        r = cli(args, stdin=b"true\n")
        assert r.code == code, (args, r)
        assert r.err.startswith("onite: ") and message in r.err and r.err.count("\n") == 1, (args, r.err)
        assert "Traceback" not in r.err


def test_an_empty_driver_host_is_refused_as_submit_and_recover_refuse_it(spool, cli):
    """``onite run --host ''`` (a script's ``--host "$NODE"`` with NODE unset) drained as this machine's host, and
    ``daemon --wake --host ''`` woke this host's daemon, where ``submit --host ''`` and ``recover --host ''``
    refuse an empty host name: it is refused (exit 2, one line) and nothing is drained."""
    submit("kept")
    for args in (["run", "--host", ""], ["daemon", "--wake", "--host", ""], ["daemon", "--host", ""]):
        r = cli(args)
        assert r.code == 2 and r.err == "onite: invalid host name '': it is empty — use e.g. node1 or build-02\n", \
            (args, r)
    assert (spool / "jobs" / "P4" / f"{pwd.getpwuid(os.geteuid()).pw_name}:kept").exists()


def test_bad_config_is_one_line(spool, cli):
    set_config(spool, slots=0)
    r = cli(["restart", "x"])  # a command that spools refuses the file
    assert r.code == 2 and "slots = 0 is not valid" in r.err and r.err.count("\n") == 1
    r = cli(["list"])  # a command that only reads warns, once, and goes on
    assert r.code == 0 and "slots = 0 is not valid" in r.err and r.err.startswith("onite: warning: "), r
    assert r.err.count("\n") == 1


def test_config_that_is_not_utf8_says_so_not_permissions(spool, cli):
    # a Latin-1 comment or a stray byte in onite.toml: the error blamed the file's permissions
    with (spool / "onite.toml").open("ab") as f:
        f.write(b"# caf\xe9\n")
    r = cli(["run", "-q"])
    assert r.code == 2 and "not UTF-8" in r.err and "permissions" not in r.err and r.err.count("\n") == 1, r
    r = cli(["list"], user="nobody")
    assert r.code == 0 and "not UTF-8" in r.err and "permissions" not in r.err and r.err.count("\n") == 1, r


def test_a_config_an_editor_began_with_a_byte_order_mark_is_read(spool, cli):
    """A BOM is no TOML: every command said "Invalid statement (at line 1, column 1)" of a line that looks right."""
    set_config(spool, slots=3)
    (spool / "onite.toml").write_bytes(b"\xef\xbb\xbf" + (spool / "onite.toml").read_bytes())
    r = cli(["status", "--json"])
    assert r.code == 0 and r.err == "", r
    assert cli(["run", "-q"]).code == 0


def test_jobs_queued_beyond_lowered_priorities_are_still_seen_and_run(spool, cli):
    # the admin lowers priorities from 7 to 3: a job queued at P7 was invisible to list and status, the driver
    # said "the queue is empty", and it never ran
    r = cli(["submit", "low", "-p", "7"], stdin=b"echo low\n", user="nobody")
    assert r.code == 0, r
    set_config(spool, priorities=3, default_priority=2)
    listed = cli(["list", "--json"], user="nobody").json()
    assert [j["name"] for j in listed["jobs"]] == ["low"], listed
    assert cli(["status", "--json"]).json()["queue"].get("P7") == 1
    again = cli(["submit", "low"], stdin=b"true\n", user="nobody")  # its name is still taken
    assert again.code == 3, again
    assert drain(spool).returncode == 0
    assert result(spool, "nobody:low")["state"] == "done"
    assert cli(["output", "low"], user="nobody").out == "low\n"


def test_hosts_table_with_an_invalid_host_name_is_a_bad_value(spool, cli):
    # [hosts."node 2"] (a space no host name can hold) was taken silently: its slots applied nowhere, and a job
    # asking for its memory was accepted and kept waiting for a host that can never drain
    with (spool / "onite.toml").open("a") as f:
        f.write('\n[hosts."node 2"]\nmem = "100T"\n')
    r = cli(["submit", "big", "--mem", "50T"], stdin=b"true\n", user="nobody")
    assert r.code == 2 and "invalid host name 'node 2'" in r.err and r.err.count("\n") == 1, r
    assert cli(["run", "-q"]).code == 2
    listed = cli(["list"], user="nobody")
    assert listed.code == 0 and "invalid host name" in listed.err and listed.err.count("\n") == 1, listed


def test_spool_option_before_or_after_the_command(spool, cli):
    submit("j")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    for args in (["--spool", str(spool), "list", "--json"], ["list", "--json", "--spool", str(spool)]):
        r = run_cli(args, env=env)
        assert r.code == 0 and [j["name"] for j in r.json()["jobs"]] == ["j"], r


def test_list_json_document(spool, cli):
    submit("a", "true\n", "-p", "2")
    submit("b", "true\n", "--hold")
    doc = cli(["list", "--json"]).json()
    assert doc["version"] == 1 and doc["spool"] == str(spool)
    a, b = doc["jobs"]
    assert a["name"] == "a" and a["priority"] == 2 and a["state"] == "queued" and a["position"] == 1
    assert b["state"] == "held" and b["user"] == ("root" if ROOT else b["user"]) and isinstance(b["uid"], int)
    datetime.fromisoformat(a["submitted"])
    assert (a["waiting"], a["waiting_kind"], b["waiting"], b["waiting_kind"]) == ("", "", "held", "held")
    assert cli(["list"]).out.splitlines()[0].split() == ["#", "NAME", "USER", "PRI", "AGE", "STATE", "WAITING"]
    assert cli(["cancel", "b"]).code == 0  # nothing waits: no WAITING column
    assert cli(["list"]).out.splitlines()[0].split() == ["#", "NAME", "USER", "PRI", "AGE", "STATE"]


def test_find_and_uniqname(spool, cli):
    submit("present")
    assert cli(["find", "present"]).code == 0
    assert cli(["find", "absent"]).code == 1
    name = cli(["uniqname", "present"]).out.strip()
    assert name.startswith("present-") and cli(["find", name]).code == 1
    assert cli(["uniqname", "../x"]).code == 2


def test_log_tail(spool, cli):
    submit("logged")
    drain(spool)
    lines = cli(["log", "-n", "2"]).out.splitlines()
    assert len(lines) == 2 and lines[-1].split()[2] == "driver-exit"
    assert any(" done root:logged " in line for line in cli(["log", "-n", "50"]).out.splitlines())


def test_cron_lines(spool, cli):
    set_config(spool, schedule=["0 20 * * *", "30 23 * * 1-5"])
    out = cli(["cron"]).out.splitlines()
    entries = [line for line in out if not line.startswith("#")]
    assert len(entries) == 2
    assert entries[0].startswith("0 20 * * * ") and entries[0].endswith(f"run --quiet --spool {spool}")
    assert entries[1].startswith("30 23 * * 1-5 ")
    set_config(spool, schedule=["61 20 * * *"])
    assert cli(["cron"]).code == 2


@pytest.mark.parametrize("odd", ["a\nb", "50%"])
def test_cron_lines_of_a_spool_no_crontab_can_hold_are_refused(world_tmp, cli, odd):
    """``onite cron`` printed (exit 0) lines for a spool whose path holds a newline or a % (which cron
    reads as a newline): a crontab that cron rejects, or a command it cuts short. It is refused,
    as --install refuses it."""
    spool = init_spool_at(world_tmp / odd)
    r = cli(["cron", "--spool", str(spool)])
    assert r.code == 2 and r.out == "", r
    assert len(r.err.splitlines()) == 1 and "cannot be written in a crontab" in r.err, r


def test_status_json(spool, cli):
    submit("a", "true\n", "-p", "1")
    submit("b", "true\n", "--hold")
    doc = cli(["status", "--json"]).json()
    assert doc["queue"]["P1"] == 1 and doc["queue"]["P4"] == 1 and doc["held"] == 1 and doc["queued"] == 2
    assert doc["drivers"] == [] and doc["running"] == []
    # nothing starts a drain of this spool (no daemon, timer or cron entry): no next drain is promised
    assert doc["next_drain"] is None and doc["drain_scheduled"] is False and doc["no_drain_fix"] == "onite cron --install"
    assert datetime.fromisoformat(doc["schedule_next"]) > datetime.now().astimezone()
    assert "next run  none: no drain is scheduled, so nothing will start one — onite cron --install" in cli(["status"]).out


def test_report_json_and_html(spool, cli, world_tmp):
    submit("ok", "echo fine\n")
    submit("bad", "exit 2\n")
    drain(spool)
    doc = cli(["report", "--json"]).json()
    assert doc["counts"] == {"done": 1, "failed": 1, "cancelled": 0}
    assert {j["name"] for j in doc["jobs"]} == {"ok", "bad"}
    page = world_tmp / "report.html"
    r = cli(["report", "--html", str(page)])
    assert r.code == 0 and r.out == ""  # neither the report nor a line: a cron job that writes it mails nothing
    from conftest import OnTerminal

    code, seen = OnTerminal(spool, ["report", "--html", str(page)], stdin=False).finish()
    assert code == 0 and seen == f"HTML report written to {page}\r\n".encode(), seen  # a person is told where
    html = page.read_text()
    assert html.startswith("<!doctype html>") and '<td class=name data-label="NAME">bad</td>' in html
    assert "exit 2" in html


def test_broken_pipe_is_quiet(spool):
    for i in range(30):
        submit(f"j{i}")
    proc = subprocess.run(f"{sys.executable} -m onite list | head -1", shell=True, capture_output=True,
                          env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO)))
    assert proc.stderr == b""


def test_version_and_help(cli):
    from onite import __version__

    from onite.cli.options import every_command
    from onite.cli.typerapp import ORDER

    r = cli(["--help"], env=dict(os.environ, COLUMNS="80"))
    listed = [line.split()[0] for line in r.out.partition("Commands:\n")[2].splitlines() if line[2:3].strip()]
    assert r.code == 0 and listed == list(ORDER), r.out  # every command, the everyday ones first
    assert set(ORDER) == {group or name for group, name in every_command()}
    assert cli(["--version"]).out == f"onite {__version__}\n"


@pytest.mark.parametrize("argv, hint", [
    (["lst"], "see: onite --help"),
    (["list", "--bogus"], "see: onite list --help"),
    (["--spool", "/nonexistent", "list", "--bogus"], "see: onite list --help"),
    (["recur", "add", "x", "--bogus"], "see: onite recur add --help"),
])
def test_a_usage_error_points_at_the_help_that_explains_it(cli, argv, hint):
    r = cli(argv)
    assert r.code == 2 and r.err.count("\n") == 1 and r.err.rstrip().endswith(hint), r


@pytest.mark.parametrize("answer, said", [(b"2\n", b"second: cancelled"), (b"\x04", b"nothing cancelled"),
                                          (b"\n", b"nothing cancelled")], ids=["number", "ctrl-d", "enter"])
def test_cancel_without_a_name_offers_a_numbered_list_on_a_terminal(spool, answer, said):
    from conftest import OnTerminal

    submit("first")
    submit("second")
    terminal = OnTerminal(spool, ["cancel"])
    seen = terminal.until(b"cancel which job?")
    assert b"1  first" in seen and b"2  second" in seen
    terminal.write(answer)
    code, seen = terminal.finish()
    assert code == 0
    assert said in seen and b"Traceback" not in seen
    assert run_cli(["find", "first"]).code == 0
    assert run_cli(["find", "second"]).code == (1 if answer == b"2\n" else 0)


@pytest.mark.parametrize("answer", ["3", "0", "\u00b3", "x"])
def test_a_pick_that_names_no_job_cancels_nothing_in_one_line(spool, answer):
    from conftest import OnTerminal

    submit("first")
    submit("second")
    terminal = OnTerminal(spool, ["cancel"])
    terminal.until(b"cancel which job?")
    terminal.write(answer.encode() + b"\n")
    code, seen = terminal.finish()
    assert code == 2 and b"no job numbered" in seen and b"Traceback" not in seen, seen
    assert run_cli(["find", "first"]).code == 0 and run_cli(["find", "second"]).code == 0


def test_list_by_host_shows_the_jobs_each_host_ran(spool, cli):
    submit("ran")
    assert drain(spool).returncode == 0
    submit("waits")
    out = cli(["list", "--by-host"]).out
    host = os.uname().nodename.split(".")[0]
    assert host in out.splitlines() and "ran" in out and "queued (no host yet)" in out and "waits" in out


def test_list_by_host_does_not_call_a_cancelled_job_queued(spool, cli):
    """A job cancelled while queued never had a host: ``list --by-host`` put it under the heading 'queued (no host
    yet)', beside the queued jobs, though it will never run. The heading says it holds jobs that never ran."""
    submit("gone")
    assert cli(["cancel", "gone"]).code == 0
    submit("waits")
    out = cli(["list", "--by-host", "--plain"]).out
    assert "queued (no host yet)" not in out and "no host: queued, or never ran" in out, out
    assert "gone" in out and "cancelled" in out and "waits" in out


def test_a_spool_without_running_is_to_repair_not_to_run_as_root(spool, cli):
    (spool / "running").rmdir()
    for command in (["run"], ["daemon"]):
        r = cli(command)
        assert r.code == 4 and r.err == f"onite: no running/ folder in {spool} — run onite init to repair the spool\n"
    assert cli(["init", "--spool", str(spool)]).code == 0 and cli(["run"]).code == 0


def test_a_bad_schedule_is_a_bad_value_of_onite_toml_to_every_command(spool, cli):
    """'0 25 * * *' has five fields, so onite.toml's check let it pass: submit took jobs ("no drain is
    scheduled"), and only cron, run --scheduled and the daemon refused it. It is refused as any bad key is."""
    set_config(spool, schedule=["0 25 * * *"])
    said = f"onite: {spool}/onite.toml: schedule: bad cron expression '0 25 * * *': '25' is not a valid hour field"
    for command in (["cron"], ["run", "--scheduled"], ["run"], ["daemon"], ["submit", "late"]):
        r = cli(command, stdin=b"true\n")
        assert r.code == 2 and r.err.startswith(said), r
        assert r.err.count("\n") == 1
    assert not list(spool.glob("jobs/P*/*late*"))
    # status only reads: it says so as a warning and shows the rest (docs/configuration.md)
    r = cli(["status"])
    assert r.code == 0 and r.err.startswith(f"onite: warning: {spool}/onite.toml: schedule: bad cron expression "
                                            "'0 25 * * *'"), r


def test_shell_completion(spool, cli):
    """`onite --show-completion bash` prints a script; the shell's completion requests get commands,
    options and job names (docs/cli.md, SHELL COMPLETION)."""
    assert "_ONITE_COMPLETE=complete_bash" in cli(["--show-completion", "bash"]).out
    submit("zeta-one")
    submit("zeta-two")
    submit("alpha")

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), _ONITE_COMPLETE="complete_bash",
                   COMP_WORDS=line, COMP_CWORD=str(len(words) - 1))
        proc = subprocess.run([sys.executable, "-m", "onite"], env=env, capture_output=True, timeout=60)
        assert proc.returncode == 0 and proc.stderr == b"", proc
        return proc.stdout.decode().split()

    assert complete("onite su") == ["submit"]
    assert "--slots" in complete("onite run --sl")
    assert complete("onite cancel zeta") == ["zeta-one", "zeta-two"]
    assert complete("onite hold al") == ["alpha"]
    assert run_cli(["hold", "zeta-two"]).code == 0  # release offers held jobs only, hold unheld queued ones only
    assert (complete("onite release "), complete("onite hold zeta")) == (["zeta-two"], ["zeta-one"])
    assert complete("onite edit zeta") == ["zeta-one", "zeta-two"]
    assert run_cli(["cancel", "alpha", "zeta-one", "zeta-two"]).code == 0
    submit("zeta-ran")
    assert drain(spool).returncode == 0
    submit("zeta-queued")
    assert complete("onite cancel zeta") == ["zeta-queued"]  # queued and running jobs only
    assert complete("onite output zeta-") == ["zeta-one", "zeta-queued", "zeta-ran", "zeta-two"]  # finished too
    assert complete("onite restart zeta-") == ["zeta-one", "zeta-ran", "zeta-two"]  # finished only: it refuses others
    # the other places a job's name goes: wait and --after take finished jobs too; --notify its choices
    assert complete("onite wait zeta-") == ["zeta-one", "zeta-queued", "zeta-ran", "zeta-two"]
    assert complete("onite submit next --after zeta-r") == ["zeta-ran"]
    assert complete("onite edit zeta-queued --after zeta-r") == ["zeta-ran"]
    assert complete("onite submit next --notify ") == ["mail", "command", "none"]
    assert complete("onite submit next --notify-on a") == ["always"]


def test_log_json_reads_the_lines_back(spool, cli):
    submit("fails", "echo 'a \"quoted\" word'; exit 3\n")
    drain(spool)
    events = cli(["log", "-n", "3", "--json"]).json()["events"]
    assert [e["event"] for e in events] == ["start", "failed", "driver-exit"]
    failed = events[1]
    assert failed["name"] == "root:fails" and failed["fields"]["reason"] == "exit 3" and failed["fields"]["exit"] == "3"
    assert events[2]["name"] is None and events[2]["fields"]["failed"] == "1"
    from datetime import timezone

    from onite.spool.log import format_line, parse_line

    line = format_line(datetime(2026, 11, 22, 20, 0, tzinfo=timezone.utc), "vm", 7, "error", "x",
                       error='cannot "write" a\\b\nc', note="k=v")
    assert parse_line(line)["fields"] == {"error": 'cannot "write" a\\b\nc', "note": "k=v"}
    assert parse_line("not a log line") is None


@pytest.mark.parametrize("argv", [["--help"], ["status", "--json"], ["list", "--json"], ["list", "--json", "--all"],
                                  ["find", "queued"], ["submit", "new"], ["submit", "more", "--lines"], ["list"],
                                  ["list", "--all"], ["status"], ["recur", "list"], ["cancel", "queued"]],
                         ids=" ".join)
def test_commands_scripts_run_often_do_not_import_rich(spool, argv):
    """rich is a twentieth of a second of start-up (DESIGN.md: import it only where a command draws: a
    pipe gets plain lines), and pydantic, which typer 0.29 parses options with, more than that; typer itself
    only for help and a group's commands (onite.cli.fastpath parses the rest). Nor dataclasses (with inspect,
    and milliseconds for each class it builds): the values these commands make are NamedTuples."""
    submit("queued")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "onite", *argv], capture_output=True, text=True,
                          input="true\n", env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO)),
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "onite" in imported and not [m for m in imported if m.split(".")[0] in ("rich", "pydantic")]
    assert ("typer" in imported) == (argv[0] in ("--help", "recur"))
    assert "dataclasses" not in imported or argv[0] in ("--help", "recur")


# ---- help and completion behave as in other tools ------------------------------


@pytest.mark.parametrize("argv, usage", [([], "Usage: onite [OPTIONS] COMMAND"), (["recur"], "Usage: onite recur"),
                                         (["-h"], "Usage: onite [OPTIONS] COMMAND"),
                                         (["submit", "-h"], "Usage: onite submit"),
                                         (["recur", "add", "-h"], "Usage: onite recur add"),
                                         (["list", "-h"], "Usage: onite list"), (["run", "-h"], "Usage: onite run"),
                                         (["wait", "-h"], "Usage: onite wait")], ids=str)
def test_bare_commands_and_dash_h_print_the_help_on_stdout(spool, cli, argv, usage):
    """Bare `onite` and `onite recur` print the multi-line help, as --help does, on stdout with exit 0;
    -h is --help everywhere."""
    r = cli(argv)
    assert (r.code, r.err) == (0, ""), r
    assert r.out.startswith(usage) and "--help" in r.out and r.out.count("\n") > 5
    assert r.out == cli([*argv, "--help"]).out


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o default -F _onite_completion onite"),
                                           ("zsh", "compdef _onite_completion onite"),
                                           ("fish", "complete --command onite")])
def test_show_completion_prints_the_named_shells_script(spool, cli, shell, marker):
    for argv in (["--show-completion", shell], [f"--show-completion={shell}"],
                 ["--spool", str(spool), "--show-completion", shell]):
        r = cli(argv, env=dict(os.environ, SHELL="/bin/bash" if shell != "bash" else "/usr/bin/zsh"))
        assert (r.code, r.err) == (0, ""), r
        assert marker in r.out and f"_ONITE_COMPLETE=complete_{shell}" in r.out


def test_completion_of_a_shell_onite_cannot_complete_says_which_it_can(spool, cli, world_tmp):
    r = cli(["--show-completion", "ksh"])
    assert (r.code, r.err) == (2, "onite: onite cannot complete the shell 'ksh': it completes bash, zsh and fish — "
                                  "name one of them, e.g. onite --show-completion bash\n")
    # a user whose shell is /bin/sh: no traceback, no "Shell None", nothing written
    home = world_tmp / "home"
    home.mkdir()
    env = {"HOME": str(home), "SHELL": "/bin/sh", "PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}
    proc = subprocess.run(["/bin/sh", "-c", f"{sys.executable} -m onite --install-completion; exit $?"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (2, ""), proc
    assert proc.stderr == ("onite: your shell is sh, which onite cannot complete; it completes bash, zsh and fish — "
                           "name one of them, e.g. onite --install-completion bash\n")
    assert list(home.iterdir()) == []


def test_install_completion_for_a_named_shell(cli, world_tmp):
    home = world_tmp / "home"
    home.mkdir()
    env = {"HOME": str(home), "SHELL": "/bin/sh", "PATH": os.environ["PATH"]}
    r = cli(["--install-completion", "bash"], env=env)
    assert r.code == 0 and r.err == "", r
    script = home / ".bash_completions" / "onite.sh"
    assert r.out == f"bash completion installed in {script}; it works in shells started from now on\n"
    assert "_ONITE_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (home / ".bashrc").read_text()
    r = cli(["--install-completion", "fish"], env=env)
    assert r.code == 0 and "complete --command onite" in (home / ".config" / "fish" / "completions" / "onite.fish").read_text()


# ---- odd environments and odd paths (each crashed, misled, or did harm before) -------


def _onite(spool, *args, env=None, cwd=None, stdin=b""):
    return subprocess.run([sys.executable, "-m", "onite", *args], input=stdin, capture_output=True, timeout=60, cwd=cwd,
                          env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), **(env or {})))


@pytest.mark.skipif(os.geteuid() != 0, reason="replacing a device node needs root, as the harm did")
def test_report_html_writes_to_a_device_or_pipe_and_never_replaces_it(spool, tmp_path):
    """`onite report --html /dev/full` as root put a file where the device was (a temporary file renamed
    over it); /dev/stdout and /dev/null would have gone the same way."""
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    r = _onite(spool, "report", "--html", str(device))
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    r = _onite(spool, "report", "--html", "/dev/stdout", "--json")
    assert r.returncode == 0 and r.stdout.startswith(b"<!doctype html>"), r
    r = _onite(spool, "report", "--html", "-", cwd=tmp_path)  # it wrote a file named "-"
    assert r.returncode == 0 and r.stdout.startswith(b"<!doctype html>") and r.stdout.endswith(b"</html>\n"), r
    assert not (tmp_path / "-").exists()
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    r = _onite(spool, "report", "--html", str(full))  # a write that fails (exit 4), not a wrong path (2)
    assert r.returncode == 4 and r.stderr.decode().startswith(f"onite: cannot write {full}: No space left"), r
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_report_html_refuses_a_folder_and_a_link_to_a_file_and_replaces_a_file(spool, tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    link = tmp_path / "page.html"
    link.symlink_to(target)  # as a user would plant it where root writes its page
    r = _onite(spool, "report", "--html", str(link))
    assert r.returncode == 2 and b"is a symbolic link to a file" in r.stderr, r
    assert target.read_text() == "keep me\n" and link.is_symlink()
    r = _onite(spool, "report", "--html", "", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.decode() == "onite: cannot write .: it is a folder — give the page a file name\n", r
    page = tmp_path / "real.html"
    page.write_text("old")
    assert _onite(spool, "report", "--html", str(page)).returncode == 0
    assert page.read_text().startswith("<!doctype html>") and stat.S_IMODE(page.stat().st_mode) == 0o644
    page.chmod(0o640)  # an admin's page kept from others: replaced, it stays theirs alone
    group = next((g.gr_gid for g in grp.getgrall() if g.gr_gid != os.getegid()), os.getegid())
    with contextlib.suppress(PermissionError):
        os.chown(page, -1, group)
    group = page.stat().st_gid
    assert _onite(spool, "report", "--html", str(page)).returncode == 0
    assert (stat.S_IMODE(page.stat().st_mode), page.stat().st_gid) == (0o640, group)
    # a file in a folder that takes no new file (/proc): the folder is named, not "/proc/version: no such file"
    r = _onite(spool, "report", "--html", "/proc/version")
    assert r.returncode == 2 and r.stderr.decode().startswith(
        "onite: cannot write /proc/version: no new file can be made in /proc ("), r


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as nobody, who plants the page's file")
def test_report_html_over_a_file_another_user_planted_is_roots_page(spool, world_tmp):
    """Replacing a file keeps its mode and group only where it is the writer's own, of one link: nobody's 0666
    file planted in a shared folder made root's page nobody's, and theirs to rewrite."""
    from test_hostile_files import write_as

    shared = world_tmp / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    write_as("nobody", os.fsencode(shared / "night.html"), b"x")
    os.chmod(shared / "night.html", 0o666)
    r = _onite(spool, "report", "--html", str(shared / "night.html"))
    assert r.returncode == 0, r
    st = (shared / "night.html").stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644)


@pytest.mark.parametrize("tz", ["UTC+24", "UTC-25", "UTC+24:30"])
def test_a_time_zone_a_day_or_more_from_utc_is_one_line_not_a_traceback(spool, tz):
    for args in (["list"], ["status"], ["submit", "x"], ["run"]):
        r = _onite(spool, *args, env={"TZ": tz}, stdin=b"true\n")
        assert r.returncode == 2, (args, r)
        assert r.stderr.decode().count("\n") == 1 and "puts local time 24 hours or more from UTC" in r.stderr.decode()


def test_a_relative_spool_from_a_deleted_directory_is_one_line(spool, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    for args, env in ((["list"], {"ONITE_SPOOL": "rel"}), (["--spool", "rel", "status"], {}), (["--spool", "rel", "init"], {})):
        r = subprocess.run(f"cd {gone} && rmdir {gone} && exec {sys.executable} -m onite {' '.join(args)}", shell=True,
                           capture_output=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO), **env))
        assert r.returncode == 2 and b"is a relative path, and your current directory no longer exists" in r.stderr, r
        assert r.stderr.count(b"\n") == 1, r
        gone.mkdir()


def test_a_spool_that_is_a_file_is_not_called_permission_denied(spool, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    r = _onite(spool, "--spool", str(afile), "list")
    assert r.returncode != 0 and r.stderr.decode() == f"onite: {afile} is not a folder, so not a spool — give --spool the spool's folder\n"


def test_a_bad_host_name_is_not_told_to_look_like_a_job_name(spool):
    r = _onite(spool, "submit", "x", "--host", "bad host", stdin=b"true\n")
    assert r.returncode == 2 and r.stderr.decode().endswith("— use e.g. node1 or build-02\n"), r


@pytest.mark.parametrize("columns", ["0", "99999999999"])
def test_a_terminal_of_zero_or_absurd_columns_still_gets_status_run_and_report(spool, columns):
    """COLUMNS=0 made status and run print nothing at all (a failed job went unmentioned), and a huge
    COLUMNS made report's timeline fill memory."""
    from conftest import OnTerminal

    assert _onite(spool, "submit", "fails", stdin=b"exit 3\n").returncode == 0
    code, seen = OnTerminal(spool, ["run"], stdin=False, env={"COLUMNS": columns, "LINES": "24"}).finish(timeout=120)
    assert code == 0 and b"fails" in seen and b"exit 3" in seen, seen
    code, seen = OnTerminal(spool, ["status"], stdin=False, env={"COLUMNS": columns, "LINES": "24"}).finish()
    assert code == 0 and b"driver" in seen, seen
    code, seen = OnTerminal(spool, ["report"], stdin=False, env={"COLUMNS": columns, "LINES": "24"}).finish(timeout=120)
    assert code == 0 and b"fails" in seen and len(seen) < 200_000, (code, seen[:500])


def test_bytes_that_are_not_utf8_are_shown_as_typed_in_a_refusal(spool):
    """A name or time holding a byte that is not UTF-8 was shown as Python's 'job\\udcff'."""
    r = _onite(spool, "submit", os.fsdecode(b"job\xff"), stdin=b"true\n")
    assert r.returncode == 2 and r.stderr.decode().startswith("onite: invalid job name 'job\\xff':"), r
    r = _onite(spool, "submit", "ok", "--at", os.fsdecode(b"\xfe"), stdin=b"true\n")
    assert r.returncode == 2 and r.stderr.decode().startswith("onite: --at '\\xfe': expected"), r



@needs_root
def test_the_log_shows_a_stray_files_byte_that_is_not_utf8_as_the_rest_do(spool, cli):
    """A file nobody put in a queue, named with the byte 0xff: `onite log` said "stray\\udcff" (the log's spelling, which
    gives back that very byte in --json) where every other message says '\\xff'."""
    from test_hostile_files import write_as

    write_as("nobody", os.fsencode(spool / "jobs" / "P4") + b"/stray\xff", b"x")
    assert drain(spool).returncode == 0
    shown = cli(["log"], user="nobody").out
    assert '] refused "stray\\xff" owner=nobody' in shown and "udcff" not in shown, shown
    [event] = [e for e in cli(["log", "--json"], user="nobody").json()["events"] if e.get("event") == "refused"]
    assert event["name"] == os.fsdecode(b"stray\xff")  # the log itself keeps the byte exactly

DURATION = "a duration such as 90s, 45m, 2h, 1h30m or 1d (a bare number is seconds)"


@pytest.mark.parametrize("args, said", [
    (["submit", "x", "--timeout", "5x"], f"--timeout '5x': expected {DURATION}"),
    (["submit", "x", "--timeout", "0"], "--timeout '0': expected a duration longer than zero, such as 90s or 2h"),
    (["submit", "x", "--mem", "4Q"], "--mem '4Q': expected a whole number and a unit, such as 4G or 512M"),
    (["submit", "x", "-p", "9"], "-p '9': expected a priority from 1 (first) to 7 (last)"),
    (["submit", "x", "--cpus", "0"], "--cpus '0': expected a number of CPUs from 1 to 4096"),
    (["submit", "x", "--at", "whenever"], "--at 'whenever': expected now, HH:MM (24-hour), YYYY-MM-DDTHH:MM, "
                                          "'tomorrow HH:MM' or +DURATION (e.g. +2h)"),
    (["submit", "x", "--at", "25:00"], "--at '25:00': expected a time of day as HH:MM, e.g. 07:00"),
    (["submit", "x", "--at", "+5x"], "--at '+5x': expected now, HH:MM (24-hour), YYYY-MM-DDTHH:MM, "
                                     "'tomorrow HH:MM' or +DURATION (e.g. +2h)"),
    (["submit", "x", "--notify", "fax"], "--notify 'fax': expected mail, command or none"),
    (["submit", "x", "--notify-on", "never"], "--notify-on 'never': expected failure or always"),
    (["edit", "x", "--timeout", "5x"], f"--timeout '5x': expected {DURATION}"),
    (["recur", "add", "r", "--every", "soon"], f"--every 'soon': expected {DURATION}"),
    (["run", "--until", "25:00"], "--until '25:00': expected a time of day as HH:MM, e.g. 07:00"),
    (["run", "--until", ""], "--until '': expected a time of day as HH:MM, e.g. 07:00"),  # took onite.toml's
    (["daemon", "--until", ""], "--until '': expected a time of day as HH:MM, e.g. 07:00"),
    (["report", "--night", "x"], "--night 'x': expected a date such as 2026-11-22, today or yesterday"),
    (["report", "--since", "x"], "--since 'x': expected a duration such as 12h, a time such as 19:00, or a "
                                 "date-time such as 2026-11-21T19:00"),
    (["wait", "x", "--timeout", "5x"], f"--timeout '5x': expected {DURATION}"),
])
def test_a_bad_option_value_is_said_one_way(spool, cli, args, said):
    """"bad timeout '5x'", "invalid --mem '4Q'", "invalid priority 9": one kind of mistake said three ways. Each
    names the option as typed, the value, and the form expected (onite.core.errors.bad_value)."""
    if args[0] == "edit":
        assert cli(["submit", "x", "--hold"], stdin=b"true\n").code == 0
    r = cli(args, stdin=b"true\n")
    assert (r.code, r.err) == (2, f"onite: {said}\n"), r


@pytest.mark.parametrize("args, said", [
    (["submit", "ok", "--timeout", b"\xffh"], "--timeout '\\xffh'"),
    (["submit", "ok", "--at", b"+\xff"], "--at '+\\xff'"),
    (["submit", "ok", "--mem", b"\xffG"], "--mem '\\xffG'"),
    (["submit", "ok", "--cpus", b"\xff"], "--cpus '\\xff'"),
    (["submit", "ok", "--notify", b"\xff\xe2\x80\xae"], "--notify '\\xff\\u202e'"),
    (["recur", "add", "r", "--every", b"\xffh"], "--every '\\xffh'"),
    (["recur", "add", "r", "--cron", b"\xff * * * *"], "bad cron expression '\\xff * * * *': '\\xff' is not"),
    (["run", "--until", b"\xff"], "--until '\\xff'"),
    (["report", "--since", b"\xff"], "--since '\\xff'"),
    (["report", "--night", b"\xff"], "--night '\\xff'"),
    (["wait", "ok", "--timeout", b"\xff"], "--timeout '\\xff'"),
])
def test_every_refusal_spells_a_byte_that_is_not_utf8_as_the_rest_do(spool, args, said):
    """These quoted what was typed with repr(), which spells the byte 0xff '\\udcff' (and a backslash twice): the
    one spelling is safetext's, '\\xff' as typed, whatever the terminal's encoding."""
    argv = [os.fsdecode(a) if isinstance(a, bytes) else a for a in args]
    for env in ({}, {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}):
        r = _onite(spool, *argv, stdin=b"true\n", env=env)
        err = r.stderr.decode("ascii", "replace")
        assert r.returncode == 2 and err.startswith(f"onite: {said}") and "udcff" not in err, (env, r)



@pytest.mark.parametrize("args, said", [
    (["submit", "ok", "-p", "1.5"], "-p '1.5': expected a whole number — see: onite submit --help"),
    (["submit", "ok", "--retries", "101"], "--retries '101': expected a whole number from 0 to 100 — see: onite submit"),
    (["submit", "ok", "--retries=x"], "--retries 'x': expected a whole number from 0 to 100 — see: onite submit"),
    (["run", "--slots", "0"], "--slots '0': expected a whole number from 1 to 4096 — see: onite run --help"),
    (["log", "--lines", "-1"], "--lines '-1': expected a whole number from 0 to 1000000000 — see: onite log --help"),
    (["log", "-n", os.fsdecode(b"\xff")], "-n '\\xff': expected a whole number from 0 to 1000000000"),
    (["init", "--priorities", "100"], "--priorities '100': expected a whole number from 1 to 99"),
    (["log", "-n", "99999999999999999999"], "-n '99999999999999999999': expected a whole number from 0 to 1000000000"),
])
def test_a_number_option_given_something_else_says_what_was_typed(spool, args, said):  # log -n: was a traceback
    """The parser's own words ('Invalid value for ...: '1.5' is not a valid int.', '101 is not in the range
    0<=x<=100.') are said as every bad value is: the option as typed, the value, the form it takes."""
    r = _onite(spool, *args, stdin=b"true\n")
    assert r.returncode == 2 and r.stderr.decode().startswith(f"onite: {said}"), r
    assert not any(spool.joinpath("jobs").rglob("ok*"))

@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as nobody, who plants the link and the pipe")
def test_report_html_is_not_written_through_another_users_link_or_pipe_nor_to_a_disk(spool, tmp_path):
    """(review) Written through, a link nobody plants where root writes its page could name a disk, and
    a pipe no one reads would keep root's report waiting for ever."""
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    disk = tmp_path / "disk"
    os.mknod(disk, 0o600 | stat.S_IFBLK, os.makedev(7, 250))  # a loop device number: nothing is opened
    link, pipe = tmp_path / "page.html", tmp_path / "pipe.html"
    link.symlink_to(disk)
    os.lchown(link, nobody, -1)
    os.mkfifo(pipe)
    os.chown(pipe, nobody, -1)
    for planted in (link, pipe):
        r = _onite(spool, "report", "--html", str(planted))
        assert r.returncode == 2 and r.stderr.decode() == \
            f"onite: cannot write {planted}: it is another user's — write the page somewhere else\n", r
    r = _onite(spool, "report", "--html", str(disk))
    assert r.returncode == 2 and b"it is a disk" in r.stderr, r


# ---- the spellings scripts use in loops: submit, find, list --json, run, wait --------------------

STDIN = b"echo hello\n"
LINES = b"echo one\n\n   \necho two\necho 'three'\n"
B3 = "P4/root:b-0000[123]"  # the three jobs of LINES
HOUR_AND_A_HALF = timedelta(hours=1, minutes=30)

# (argv, stdin, jobs queued first, exit code, the job files after it (globs under jobs/), what the
# jobs of the first glob hold); SPOOL is replaced by the spool's path
SPELLINGS = [
    (["submit", "a"], STDIN, [], 0, ["P4/root:a"], {"body": STDIN}),
    (["submit", "a", "-p", "2"], STDIN, [], 0, ["P2/root:a"], {"priority": 2}),
    (["submit", "-p", "7", "a"], STDIN, [], 0, ["P7/root:a"], {"priority": 7}),
    (["submit", "a", "--priority", "1", "--hold"], STDIN, [], 0, ["P1/root:a"], {"held": True}),
    (["submit", "a", "--priority=3", "--retries", "4", "--timeout", "1h30m"], STDIN, [], 0, ["P3/root:a"],
     {"retries": 4, "timeout": HOUR_AND_A_HALF}),
    (["submit", "a", "--at", "2099-01-02T03:04", "--host", "node-1"], STDIN, [], 0, ["P4/root:a"],
     {"pin": "node-1", "not_before": "2099-01-02T03:04"}),
    (["submit", "a", "--after", "dep1", "--after=dep2", "--after", "dep1"], STDIN, ["dep1", "dep2"], 0,
     ["P4/root:a", "P4/root:dep1", "P4/root:dep2"], {"after": ("root:dep1", "root:dep2")}),
    (["submit", "a", "--urgent"], STDIN, [], 0, ["urgent/root:a"], {"urgent": True}),
    (["submit", "a", "--unique"], STDIN, [], 0, ["P4/root:a-??????"], {}),
    (["submit", "a", "--spool", "SPOOL"], STDIN, [], 0, ["P4/root:a"], {}),
    (["submit", "a", "--spool=SPOOL", "--hold", "--hold"], STDIN, [], 0, ["P4/root:a"], {"held": True}),
    (["--spool", "SPOOL", "submit", "a"], STDIN, [], 0, ["P4/root:a"], {}),
    (["--spool=SPOOL", "submit", "a", "-p", "5"], STDIN, [], 0, ["P5/root:a"], {"priority": 5}),
    (["submit", "b", "--lines"], LINES, [], 0, [B3], {}),
    (["submit", "b", "--lines", "-p", "1", "--hold", "--after", "dep1"], LINES, ["dep1"], 0,
     ["P1/root:b-0000[123]", "P4/root:dep1"], {"held": True, "after": ("root:dep1",)}),
    (["submit", "b", "--lines", "--unique"], LINES, [], 0, ["P4/root:b-??????-0000[123]"], {}),
    (["submit", "a", "--stderr-separate"], STDIN, [], 0, ["P4/root:a"], {"stderr_separate": True}),
    (["submit", "a", "--stderr-merged", "--hold"], STDIN, [], 0, ["P4/root:a"], {"stderr_separate": False, "held": True}),
    (["submit", "b", "--lines", "--stderr-separate"], LINES, [], 0, [B3], {"stderr_separate": True}),
    (["submit", "a", "--notify", "mail", "--notify-on", "always"], STDIN, [], 0, ["P4/root:a"],
     {"notify": "mail", "notify_on": "always"}),
    (["submit", "a", "--notify=none", "--notify-on=failure"], STDIN, [], 0, ["P4/root:a"],
     {"notify": "none", "notify_on": "failure"}),
    (["submit", "b", "--lines", "--notify", "mail"], LINES, [], 0, [B3], {"notify": "mail"}),
    (["submit", "a", "-q"], STDIN, [], 0, ["P4/root:a"], {}),
    (["submit", "a", "--quiet", "--unique"], STDIN, [], 0, ["P4/root:a-??????"], {}),
    (["submit", "b", "--lines", "-q"], LINES, [], 0, [B3], {}),
    (["submit", "a", "--after", "dep1", "--at", "tomorrow 05:00"], STDIN, ["dep1"], 0, ["P4/root:a", "P4/root:dep1"],
     {"after": ("root:dep1",)}),
    (["submit", "a", "--cpus", "1", "--mem", "64M"], STDIN, [], 0, ["P4/root:a"], {"cpus": 1, "mem": 64}),
    (["submit", "a", "--cpus=0001"], STDIN, [], 0, ["P4/root:a"], {"cpus": 1}),
    (["submit", "b", "--lines", "--mem", "96M", "--cpus", "1"], LINES, [], 0, [B3], {"cpus": 1, "mem": 96}),
    # errors: one line on stderr, nothing spooled
    (["submit", "a"], b"", [], 2, [], {}),
    (["submit", "bad name"], STDIN, [], 2, [], {}),
    (["submit", "x" * 101], STDIN, [], 2, [], {}),
    (["submit", "a", "-p", "0"], STDIN, [], 2, [], {}),
    (["submit", "a", "-p", "99"], STDIN, [], 2, [], {}),
    (["submit", "a", "--timeout", "soon"], STDIN, [], 2, [], {}),
    (["submit", "a", "--at", "25:00"], STDIN, [], 2, [], {}),
    (["submit", "a", "--after", "nosuch"], STDIN, [], 2, [], {}),
    (["submit", "a", "--after", "a"], STDIN, ["a"], 2, ["P4/root:a"], {}),
    (["submit", "a", "--host", "../x"], STDIN, [], 2, [], {}),
    (["submit", "a", "--notify", "x"], STDIN, [], 2, [], {}),
    (["submit", "a", "--notify-on", "sometimes"], STDIN, [], 2, [], {}),
    (["submit", "a", "--cpus", "0"], STDIN, [], 2, [], {}),
    (["submit", "a", "--cpus", "lots"], STDIN, [], 2, [], {}),
    (["submit", "a", "--cpus", "0000015000"], STDIN, [], 2, [], {}),
    (["submit", "b", "--lines", "--cpus", "5000"], LINES, [], 2, [], {}),
    (["submit", "a", "--mem", "4.5G"], STDIN, [], 2, [], {}),
    (["submit", "a", "--notify", "command"], STDIN, [], 2, [], {}),  # the spool has no notify_command
    (["submit", "b", "--lines", "--notify", "command"], LINES, [], 2, [], {}),
    (["submit", "dup"], STDIN, ["dup"], 3, ["P4/root:dup"], {}),
    (["submit", "a", "--spool", "/nonexistent/spool"], STDIN, [], 4, [], {}),
    (["submit", "b", "--lines"], b"\n  \n", [], 2, [], {}),
    (["submit", "b", "--lines"], LINES, ["b-00002"], 3, ["P4/root:b-00002"], {}),
    (["submit", "b" * 95, "--lines"], LINES, [], 2, [], {}),
    (["find", "dep1"], b"", ["dep1"], 0, ["P4/root:dep1"], {}),
    (["find", "nosuch"], b"", [], 1, [], {}),
    (["find", "bad name"], b"", [], 2, [], {}),
    (["--spool", "SPOOL", "find", "dep1"], b"", ["dep1"], 0, ["P4/root:dep1"], {}),
    (["find", "dep1", "--spool", "/nonexistent/spool"], b"", [], 4, [], {}),
    (["list", "--json"], b"", ["dep1", "dep2"], 0, ["P4/root:dep1", "P4/root:dep2"], {}),
    (["list", "--json", "--all"], b"", ["dep1"], 0, ["P4/root:dep1"], {}),
    (["--spool", "SPOOL", "list", "-a", "--json"], b"", [], 0, [], {}),
    (["list", "--json", "--spool", "/nonexistent/spool"], b"", [], 4, [], {}),
    (["run"], b"", ["r1", "r2"], 0, [], {}),
    (["run", "--slots", "2", "--until", "23:59", "--host", "elsewhere"], b"", ["r1", "r2", "r3"], 0, [], {}),
    (["--spool", "SPOOL", "run", "--spool=SPOOL"], b"", ["r1"], 0, [], {}),
    (["run", "-q"], b"", ["r1"], 0, [], {}),
    (["run", "--until", "25:00"], b"", ["r1"], 2, ["P4/root:r1"], {}),
    (["run", "--host", "../x"], b"", ["r1"], 2, ["P4/root:r1"], {}),
    (["run", "--spool", "/nonexistent/spool"], b"", [], 4, [], {}),
    (["wait", "nosuch"], b"", [], 1, [], {}),
    (["wait", "bad name"], b"", [], 2, [], {}),
    (["wait", "dep1", "--timeout", "abc"], b"", ["dep1"], 2, ["P4/root:dep1"], {}),
    (["wait"], b"", [], 0, [], {}),
    (["wait", "--json"], b"", [], 0, [], {}),
    (["wait", "dep1", "--timeout", "1s", "--json"], b"", ["dep1"], 6, ["P4/root:dep1"], {}),
    (["--spool", "SPOOL", "wait", "dep1", "--timeout=1s"], b"", ["dep1"], 6, ["P4/root:dep1"], {}),
]


@pytest.mark.parametrize("argv, stdin, queued, code, after, holds", SPELLINGS,
                         ids=[" ".join(a[0])[:60] for a in SPELLINGS])
def test_each_spelling_spools_what_it_says_or_fails_in_one_line(spool, argv, stdin, queued, code, after, holds):
    """The options scripts pass to submit, find, list --json, run and wait, in each spelling (before or
    after the name, with = or a space, repeated), land in the job file; a mistake is one line, exit 2
    (3 refused, 4 no spool) and spools nothing; a drain (run) leaves nothing queued."""
    from fnmatch import fnmatch

    from onite.core.jobfile import decode

    set_config(spool, sendmail="/bin/true")  # --notify mail needs one (a machine here may have none)
    for name in queued:
        submit(name)
    r = run_cli([a.replace("SPOOL", str(spool)) for a in argv], stdin=stdin)
    assert r.code == code, r
    if code == 1 and argv[0] == "find":
        assert r.err == "", r  # not found is said by the exit code alone
    elif code:
        assert r.err.startswith("onite: ") and r.err.count("\n") == 1, r
    files = sorted(str(p.relative_to(spool / "jobs")) for p in (spool / "jobs").rglob("*") if p.is_file())
    assert all(any(fnmatch(f, glob) for glob in after) for f in files), files
    assert all(any(fnmatch(f, glob) for f in files) for glob in after), files
    if argv[0] == "run" and code == 0:
        assert {result(spool, name)["state"] for name in queued} == {"done"}
    for path in (f for f in files if after and fnmatch(f, after[0]) and f.split("/")[1] not in [f"root:{q}" for q in queued]):
        job = decode((spool / "jobs" / path).read_bytes())
        seen = {key: getattr(job, key, None) for key in holds}
        if "held" in holds:
            seen["held"] = any((spool / "hold").glob(f"{job.name}@*"))
        if "not_before" in holds:
            seen["not_before"] = job.not_before.strftime("%Y-%m-%dT%H:%M")
        assert seen == holds, path


def _as_program(argv: list[str], spool, *, stdin: bytes = b"", stdout=None, unbuffered: bool = False):
    """``python -m onite ARGV`` as a user runs it: standard output buffered, as a user's is, unless
    ``unbuffered`` (PYTHONUNBUFFERED)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    env.update(ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), **({"PYTHONUNBUFFERED": "1"} if unbuffered else {}))
    return subprocess.run([sys.executable, "-m", "onite", *argv], input=stdin, env=env, check=False, timeout=120,
                          stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE)


def test_nothing_a_command_wrote_is_lost_at_its_exit(spool):
    """Every job line of a big --lines submit and the whole JSON document of a big listing arrive;
    a --unique submit's final name is on stdout."""
    lines = b"".join(b"echo %d\n" % i for i in range(3000))
    done = _as_program(["submit", "many", "--lines"], spool, stdin=lines)
    assert done.returncode == 0 and b"spooled 3000 jobs" in done.stderr, done.stderr
    listed = _as_program(["list", "--json"], spool)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["jobs"]) == 3000  # a ~1 MB document, all of it
    assert _as_program(["find", "many-00001"], spool).returncode == 0
    one = _as_program(["submit", "one", "--unique"], spool, stdin=b"true\n")
    assert one.returncode == 0 and re.fullmatch(rb"one-\w{6}\n", one.stdout), one


@pytest.mark.parametrize("argv", [["submit", "gone", "--unique"], ["submit", "gone", "--unique", "-q"]])
def test_a_submit_whose_reader_went_away_says_on_stderr_what_it_spooled(spool, argv):
    """``onite submit --unique | (a reader that quits at once)``: the reader's choice, exit 0 as for
    ``onite list | head``, but the job is spooled and its name, lost with stdout, is said on stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = _as_program(argv, spool, stdin=b"true\n", stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 0 and "Traceback" not in done.stderr.decode(), done.stderr
    found = re.search(r"^onite: its output's reader went away before it read: the job is spooled as (gone-\w+)$",
                      done.stderr.decode(), re.M)
    assert found, done.stderr
    assert run_cli(["find", found.group(1)]).code == 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full to fill standard output")
@pytest.mark.parametrize("argv", [["submit", "full", "--unique"], ["submit", "full", "--unique", "-q"],
                                  ["submit", "many", "--lines", "-q"], ["list", "--json"], ["list"], ["status"],
                                  ["--help"]])
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_output_that_cannot_be_written_is_one_line_and_the_job_is_kept(spool, argv, unbuffered):
    """Standard output redirected to a full disk: one line that says so, exit 4, no traceback; a
    submit's job is spooled all the same, and that line names it (with -q nothing else does). Whether
    the output is written as it goes (PYTHONUNBUFFERED) or when the command ends (a user's default)."""
    with open("/dev/full", "wb") as full:
        done = _as_program(argv, spool, stdin=b"true\n", stdout=full, unbuffered=unbuffered)
    last = done.stderr.decode().splitlines()[-1]
    assert done.returncode == 4 and "Traceback" not in done.stderr.decode(), done.stderr
    if argv[0] != "submit":
        assert last.startswith("onite: cannot write its output: No space left on device — "), last
        return
    said = r"; the job is spooled as ((?:many|full)-\w+) — "
    found = re.match(r"onite: cannot write its output: No space left on device" + said, last)
    assert found, last
    assert run_cli(["find", found.group(1)]).code == 0


@pytest.mark.parametrize("argv", [["submit", "shut", "--unique"], ["submit", "lines", "--lines"], ["list"],
                                  ["status"], ["run", "-q"]])
@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_command_run_with_its_stdout_or_stderr_closed_does_its_work_and_says_no_more(spool, argv, closed):
    """``onite submit x >&-`` (cron, a daemon, some CI runners close it): Python gives None for the
    stream; the command does its work, and what would go to the closed stream is dropped, as its caller
    chose (with stderr closed, submit's ``spooled`` line must not go to stdout, after the name a script
    captures); the exit status is the command's."""
    assert run_cli(["submit", "queued"], stdin=b"true\n").code == 0
    shut = ">&-" if closed == "stdout" else "2>&-"
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    done = subprocess.run(["sh", "-c", f'exec "$@" {shut}', "sh", sys.executable, "-m", "onite", *argv],
                          input=b"true\n", capture_output=True, env=env, timeout=120)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, (done.returncode, done.stderr)
    if argv[0] == "submit" and closed == "stderr":
        [line] = done.stdout.decode().splitlines()  # what stdout says with stderr open, and nothing more
        assert line.startswith("lines-" if "--lines" in argv else "shut-"), line
    if argv[0] == "run":
        assert json.loads((spool / "jobsdone" / "root:queued@result").read_text())["state"] == "done"


def test_a_reader_that_stops_early_is_no_failure_whichever_command_it_reads(spool):
    """``onite output NAME | head -1`` (typer's own handling of a broken pipe exits 1) exits 0, as
    ``onite list | head`` does: the reader chose to stop."""
    assert run_cli(["submit", "big"], stdin=b"seq 1 300000\n").code == 0
    assert drain(spool).returncode == 0
    # the last is typer's to parse (onite.cli.fastpath leaves it)
    for argv in (["output", "big"], ["list", "--all"], ["log", "-n", "1000"], ["output", "--", "big"]):
        proc = subprocess.Popen([sys.executable, "-m", "onite", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {
                                    "ONITE_SPOOL": str(spool), "PYTHONPATH": str(REPO)})
        proc.stdout.readline()
        proc.stdout.close()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and b"Traceback" not in err, (argv, proc.returncode, err)


def test_a_submit_or_find_does_not_load_what_only_a_drain_or_a_listing_needs(spool):
    """The queue's order (onite.core.queue) and the packing rule (onite.core.admission) are not imported by
    a submit: each builds dataclasses at import, milliseconds of every submit's start-up. Nor is the
    spool's skeleton (only a first personal spool needs it). ``find``, which scripts run in loops,
    loads no more than it reads: not the results' and cancels' modules."""
    unwanted = ("onite.core.queue", "onite.core.admission", "onite.spool.skeleton", "onite.core.state",
                "onite.spool.cancels")
    probe = ("import sys; from onite.__main__ import main; code = main(sys.argv[1:]);"
             f"print(code, sorted(m for m in sys.modules if m in {unwanted!r}))")
    env = dict(os.environ, ONITE_SPOOL=str(spool))
    for argv in (["submit", "s1"], ["submit", "s2", "--mem", "1G", "--cpus", "1"], ["find", "s1"]):
        out = subprocess.run([sys.executable, "-c", probe, *argv], input=b"true\n", env=env, capture_output=True,
                             check=True).stdout.decode()
        assert out.splitlines()[-1] == "0 []", (argv, out)


def test_a_spool_behind_a_folder_closed_to_the_user_is_one_line_not_a_traceback(spool, world_tmp):
    """pathlib's is_dir raises past a folder the caller may not enter: `--spool /root/x/spool`, or a personal
    spool under a HOME the user cannot enter, was a PermissionError traceback on every command."""
    if not ROOT:
        pytest.skip("needs root to act as nobody")
    closed = world_tmp / "closed"
    closed.mkdir(mode=0o700)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(closed), "ONITE_SYSTEM_CONFIG": str(NO_SYSTEM_CONFIG)}
    reach = f"cannot reach the spool {closed / 'spool'}: a folder on its path is closed to you (permission denied)"
    for args in (["list"], ["submit", "x"], ["status"], ["cancel", "x"], ["find", "x"], ["output", "x"],
                 ["hold", "x"], ["wait", "x"]):
        r = run_cli([*args, "--spool", str(closed / "spool")], stdin=b"true\n", env=env, user="nobody", cwd="/tmp")
        assert (r.code, r.err) == (4, f"onite: {reach} — ask its administrator, or use --spool\n"), (args, r)
    for path in (closed / "spool", closed / "deeper" / "spool"):
        r = run_cli(["init", "--spool", str(path)], env=env, user="nobody", cwd="/tmp")
        assert r.code == 4 and r.err.startswith(f"onite: creating {closed}/") and r.err.count("\n") == 1, r
        assert ": Permission denied — " in r.err, r
    r = run_cli(["list"], env=env, user="nobody", cwd="/tmp")  # the personal default, under that HOME
    assert r.code == 4 and r.err.startswith("onite: cannot reach the spool ") and r.err.count("\n") == 1, r


def test_a_spool_path_too_long_to_look_at_is_one_line(spool, cli):
    r = cli(["list", "--spool", "/tmp/" + "a" * 5000])
    assert r.code == 4 and r.err.startswith("onite: looking at /tmp/aaa") and "File name too long" in r.err, r
    assert r.err.count("\n") == 1


@pytest.mark.parametrize("args", [["--spool", "", "submit", "x"], ["submit", "x", "--spool", ""],
                                  ["list", "--spool", ""], ["--spool", "", "status"]])
def test_an_empty_spool_option_is_refused_not_taken_for_the_default(spool, cli, args):
    """`onite --spool "$DIR" submit` with DIR unset spooled into the default spool, not the one meant."""
    r = cli(args, stdin=b"true\n")
    assert (r.code, r.err) == (2, "onite: --spool is empty — give the spool's folder, or leave --spool out for the "
                                  "default\n"), r
    assert cli(["find", "x"]).code == 1


def test_a_relative_home_does_not_put_a_spool_under_the_current_directory(world_tmp):
    """HOME=rel made the personal spool rel/.local/state/onite, under whatever folder the command ran in: a job
    submitted in one folder was not in `onite list` run from another. The account's home is used instead."""
    here = world_tmp / "here"
    here.mkdir(mode=0o777)
    os.chmod(here, 0o777)
    env = {"PATH": "/usr/bin:/bin", "HOME": "rel", "ONITE_SYSTEM_CONFIG": str(NO_SYSTEM_CONFIG)}
    user = "nobody" if ROOT else None
    r = run_cli(["submit", "mine"], stdin=b"true\n", env=env, user=user, cwd=here)
    assert not (here / "rel").exists(), r
    assert "rel/.local" not in r.err and "Traceback" not in r.err, r


@pytest.mark.parametrize("args, message", [
    (["cancel"], "onite: no job name given — name the job(s): onite cancel NAME…\n"),
    (["cancel", "--all"], "onite: cancelling every user's jobs by --all as root needs a confirmation — run it on a "
                          "terminal, or add --yes\n"),
])
def test_cancel_with_stdin_closed_is_one_line_not_a_traceback(spool, cli, args, message):
    """`onite cancel <&-`: stdin closed is no terminal to ask on (Python gives it as None)."""
    if args[-1] == "--all" and not ROOT:
        pytest.skip("only root is asked to confirm")
    assert cli(["submit", "kept"], stdin=b"true\n").code == 0
    r = cli(args, stdin=None)
    assert (r.code, r.err) == (2, message), r
    assert cli(["find", "kept"]).code == 0


def test_a_personal_spool_made_under_umask_0777_leaves_no_closed_folders_in_home(world_tmp):
    """The first submit makes ~/.local/state for the personal spool: under umask 0777 it made them d---------, so
    that submit failed and every later command (and every other program's ~/.local) was shut out."""
    home = world_tmp / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "ONITE_SYSTEM_CONFIG": str(NO_SYSTEM_CONFIG)}
    user = None
    if ROOT:
        os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)
        user = "nobody"
    r = run_cli(["submit", "mine"], stdin=b"true\n", env=env, user=user, cwd="/tmp", umask=0o777)
    assert r.code == 0, r
    for folder in (home / ".local", home / ".local" / "state"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert run_cli(["find", "mine"], env=env, user=user, cwd="/tmp").code == 0


def test_output_past_the_file_size_limit_says_so_not_to_free_space(spool, tmp_path):
    """`(ulimit -f 1; onite list > file)`: EFBIG is the user's own limit, which no freeing of space lifts."""
    import resource

    assert run_cli(["submit", "many", "--lines", "-q"], stdin=b"true\n" * 100).code == 0
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    with open(tmp_path / "listing", "wb") as out:
        done = subprocess.run([sys.executable, "-m", "onite", "list"], env=env, stdout=out, stderr=subprocess.PIPE,
                              timeout=120, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)))
    assert done.returncode == 4 and done.stderr.decode() == (
        "onite: cannot write its output: File too large — it is larger than your file-size limit: raise it "
        "(ulimit -f) (or send it elsewhere)\n"), done.stderr


@needs_root
def test_a_user_running_init_on_a_shared_spool_root_set_up_is_told_it_is_ready(spool):
    """A user given ONITE_SPOOL=/srv/team (a spool root set up, not the system one) ran ``onite init``, as the
    README's first step does, and was told ``onite init will not adopt …: belongs to uid 0 — someone else made
    it: move it away (or chown it)``: advice to break a working spool. As for the system spool: it is ready."""
    r = run_cli(["init"], user="nobody", cwd="/tmp")
    assert r.code == 3, r
    assert r.err == (f"onite: the spool {spool} is root's: root set it up, and only root runs onite init on it — "
                     "it is ready: onite submit NAME < job.sh (for a spool of your own: onite init --spool DIR)\n"), r


def test_a_report_since_a_time_to_come_says_so(spool):
    """Without --until, it said "--since 2030-01-01T00:00 is not before --until None"."""
    r = _onite(spool, "report", "--since", "2030-01-01T00:00")
    assert (r.returncode, r.stderr.decode()) == (
        2, "onite: --since 2030-01-01T00:00 is in the future — give a time before now\n"), r
