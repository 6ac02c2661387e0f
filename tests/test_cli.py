"""The command-line contract: exit codes, one-line errors, --json documents, small commands."""

import os
import stat
import subprocess
import sys
from datetime import datetime

import pytest

from conftest import NO_SYSTEM_CONFIG, REPO, ROOT, drain, run_cli, set_config


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
    assert (spool / "jobs" / "P4" / "mine").exists()
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

    from onite.spool.log import format_line, parse_line

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


# ---- help and completion behave as in other tools (issue 14, item 5) ------------------------------


@pytest.mark.parametrize("argv, usage", [([], "Usage: onite [OPTIONS] COMMAND"), (["recur"], "Usage: onite recur"),
                                         (["-h"], "Usage: onite [OPTIONS] COMMAND"),
                                         (["submit", "-h"], "Usage: onite submit"),
                                         (["recur", "add", "-h"], "Usage: onite recur add"),
                                         (["list", "-h"], "Usage: onite list"), (["run", "-h"], "Usage: onite run"),
                                         (["wait", "-h"], "Usage: onite wait")], ids=str)
def test_bare_commands_and_dash_h_print_the_help_on_stdout(spool, cli, argv, usage):
    """Bare `onite` and `onite recur` print the multi-line help, as --help does, on stdout with exit 0;
    -h is --help everywhere (also where the fast path looks first: submit, list, run, wait)."""
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


# ---- a ninth look: odd environments and odd paths (each crashed, misled, or did harm before) -------


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
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    r = _onite(spool, "report", "--html", str(full))
    assert r.returncode == 2 and r.stderr.decode().startswith(f"onite: cannot write {full}: No space left"), r
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
    # a file in a folder that takes no new file (/proc): the folder is named, not "/proc/version: no such file"
    r = _onite(spool, "report", "--html", "/proc/version")
    assert r.returncode == 2 and r.stderr.decode().startswith(
        "onite: cannot write /proc/version: no new file can be made in /proc ("), r


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
    assert r.returncode == 2 and r.stderr.decode().startswith("onite: bad time '\\xfe'"), r



def test_a_number_option_given_something_else_says_what_was_typed(spool):
    """The parser's own words ('Invalid value for ...: '1.5' is not a valid int.') are rewritten to quote
    what was typed and say what it should be (or that its bytes are not text)."""
    r = _onite(spool, "submit", "ok", "-p", "1.5", stdin=b"true\n")
    assert r.returncode == 2 and r.stderr.decode() == (
        "onite: -p / --priority: '1.5' is not a whole number — see: onite submit --help\n"), r
    r = _onite(spool, "log", "-n", os.fsdecode(b"\xff"))
    assert r.returncode == 2 and r.stderr.decode().startswith(
        "onite: -n / --lines: '\\xff' is not text (its bytes are not UTF-8)"), r
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
