"""The command-line contract: exit codes, one-line errors, --json documents, small commands."""

import os
import stat
import subprocess
import sys
from datetime import datetime

import pytest

from conftest import REPO, ROOT, drain, run_cli, set_config


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


def test_personal_default_spool_is_created_on_first_use(world_tmp):
    home = world_tmp / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
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
    assert (spool / "jobs" / "P4" / "mine").exists()
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700


def test_errors_are_one_line_with_exit_codes(spool, cli, world_tmp):
    cases = [
        (["output", "nosuch"], 1, "no output kept for job 'nosuch'"),
        (["cancel", "nosuch"], 1, "no job 'nosuch' is queued or running"),
        (["release", "nosuch"], 1, "no job 'nosuch' is queued"),
        (["submit", "bad name"], 2, "invalid job name 'bad name'"),
        (["list", "--spool", str(world_tmp / "missing")], 4, "no spool at"),
        *[([*cmd, "--spool", str(world_tmp / "missing")], 4, "no spool at")  # every command, not only list
          for cmd in (["hold", "x"], ["release", "x"], ["output", "x"], ["uniqname", "x"], ["cron"], ["status"],
                      ["find", "x"], ["cancel", "x"], ["report"], ["recur", "list"], ["daemon"])],
        (["frobnicate"], 2, "No such command"),
        (["run", "--until", "25:00"], 2, "bad --until time"),
        (["run", "--host", "../x"], 2, "invalid host name"),
    ]
    for args, code, message in cases:
        r = cli(args, stdin=b"true\n")
        assert r.code == code, (args, r)
        assert r.err.startswith("onite: ") and message in r.err and r.err.count("\n") == 1, (args, r.err)
        assert "Traceback" not in r.err


def test_bad_config_is_one_line(spool, cli):
    set_config(spool, slots=0)
    r = cli(["list"])
    assert r.code == 2 and "slots = 0 is not valid" in r.err and r.err.count("\n") == 1


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
    assert any(" done logged " in line for line in cli(["log", "-n", "50"]).out.splitlines())


def test_cron_lines(spool, cli):
    set_config(spool, schedule=["0 20 * * *", "30 23 * * 1-5"])
    out = cli(["cron"]).out.splitlines()
    entries = [line for line in out if not line.startswith("#")]
    assert len(entries) == 2
    assert entries[0].startswith("0 20 * * * ") and entries[0].endswith(f"run --quiet --spool {spool}")
    assert entries[1].startswith("30 23 * * 1-5 ")
    set_config(spool, schedule=["61 20 * * *"])
    assert cli(["cron"]).code == 2


def test_status_json(spool, cli):
    submit("a", "true\n", "-p", "1")
    submit("b", "true\n", "--hold")
    doc = cli(["status", "--json"]).json()
    assert doc["queue"]["P1"] == 1 and doc["queue"]["P4"] == 1 and doc["held"] == 1 and doc["queued"] == 2
    assert doc["drivers"] == [] and doc["running"] == []
    assert datetime.fromisoformat(doc["next_drain"]) > datetime.now().astimezone()
    assert "next run" in cli(["status"]).out


def test_report_json_and_html(spool, cli, world_tmp):
    submit("ok", "echo fine\n")
    submit("bad", "exit 2\n")
    drain(spool)
    doc = cli(["report", "--json"]).json()
    assert doc["counts"] == {"done": 1, "failed": 1, "cancelled": 0}
    assert {j["name"] for j in doc["jobs"]} == {"ok", "bad"}
    page = world_tmp / "report.html"
    r = cli(["report", "--html", str(page)])
    assert r.code == 0 and "failed" in r.out and "bad" in r.out
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

    r = cli(["--help"])
    assert r.code == 0 and "submit" in r.out and "run" in r.out
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
    import pty
    import select as _select

    submit("first")
    submit("second")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "onite", "cancel"], stdin=slave, stdout=slave, stderr=slave,
                            env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO)), close_fds=True)
    os.close(slave)
    seen = b""
    while b"cancel which job?" not in seen:
        ready, _, _ = _select.select([master], [], [], 30)
        assert ready, seen
        seen += os.read(master, 4096)
    assert b"1  first" in seen and b"2  second" in seen
    os.write(master, answer)
    assert proc.wait(30) == 0
    try:
        while chunk := os.read(master, 4096):
            seen += chunk
    except OSError:
        pass
    os.close(master)
    assert said in seen and b"Traceback" not in seen
    assert run_cli(["find", "first"]).code == 0
    assert run_cli(["find", "second"]).code == (1 if answer == b"2\n" else 0)


def test_list_by_host_shows_the_jobs_each_host_ran(spool, cli):
    submit("ran")
    assert drain(spool).returncode == 0
    submit("waits")
    out = cli(["list", "--by-host"]).out
    host = os.uname().nodename.split(".")[0]
    assert host in out.splitlines() and "ran" in out and "queued (no host yet)" in out and "waits" in out


def test_a_spool_without_running_is_to_repair_not_to_run_as_root(spool, cli):
    (spool / "running").rmdir()
    for command in (["run"], ["daemon"]):
        r = cli(command)
        assert r.code == 4 and r.err == f"onite: no running/ folder in {spool} — run onite init to repair the spool\n"
    assert cli(["init", "--spool", str(spool)]).code == 0 and cli(["run"]).code == 0


def test_a_bad_schedule_is_named_as_onite_toml_by_every_command_that_reads_it(spool, cli):
    set_config(spool, schedule=["0 25 * * *"])
    for command in (["cron"], ["status"], ["run", "--scheduled"], ["daemon"]):
        r = cli(command)
        assert r.code == 2 and r.err.startswith("onite: onite.toml: schedule: bad cron expression '0 25 * * *'"), r
        assert r.err.count("\n") == 1


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
    assert run_cli(["cancel", "alpha", "zeta-one", "zeta-two"]).code == 0
    submit("zeta-ran")
    assert drain(spool).returncode == 0
    submit("zeta-queued")
    assert complete("onite cancel zeta") == ["zeta-queued"]  # queued and running jobs only
    assert complete("onite output zeta-") == ["zeta-one", "zeta-queued", "zeta-ran", "zeta-two"]  # finished too


def test_log_json_reads_the_lines_back(spool, cli):
    submit("fails", "echo 'a \"quoted\" word'; exit 3\n")
    drain(spool)
    events = cli(["log", "-n", "3", "--json"]).json()["events"]
    assert [e["event"] for e in events] == ["start", "failed", "driver-exit"]
    failed = events[1]
    assert failed["name"] == "fails" and failed["fields"]["reason"] == "exit 3" and failed["fields"]["exit"] == "3"
    assert events[2]["name"] is None and events[2]["fields"]["failed"] == "1"
    from datetime import timezone

    from onite.log import format_line, parse_line

    line = format_line(datetime(2026, 11, 22, 20, 0, tzinfo=timezone.utc), "vm", 7, "error", "x",
                       error='cannot "write" a\\b\nc', note="k=v")
    assert parse_line(line)["fields"] == {"error": 'cannot "write" a\\b\nc', "note": "k=v"}
    assert parse_line("not a log line") is None


@pytest.mark.parametrize("argv", [["--help"], ["status", "--json"], ["list", "--json"], ["list", "--json", "--all"],
                                  ["find", "queued"]], ids=" ".join)
def test_commands_scripts_run_often_do_not_import_rich(spool, argv):
    """rich is a tenth of a second of start-up (DESIGN.md: import it only where a command draws)."""
    submit("queued")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "onite", *argv], capture_output=True, text=True,
                          env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO)), timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "onite" in imported and not [m for m in imported if m == "rich" or m.startswith("rich.")]
