"""The fast path (onite.cli.fastcli) and typer's command line do the same thing (submit, find, list --json, run).

Each argv runs twice through the real CLI, in a forked child, on a fresh
spool at the same path: once where typer is out of reach (the fast path
must take it), once where the fast path is switched off. Both must exit
with the same code, print the same, fail with the same one-line error and
leave the same job files (same folder, mode and content, but for the
submit time) and results. Anything unusual must be left to typer.
"""

import json
import os
import re
import shutil
import sys
from dataclasses import replace
from datetime import datetime, timezone

import pytest

import onite.__main__
import onite.cli.fastcli
from conftest import REPO, drain, run_cli, set_config
from onite.core.jobfile import decode

FAST_ONLY = 77  # exit code of a child where the fast path declined and typer was called
STDIN = b"echo hello\n"
LINES = b"echo one\n\n   \necho two\necho 'three'\n"

# (argv, stdin, jobs queued first); SPOOL is replaced by the spool's path
ACCEPTED = [
    (["submit", "a"], STDIN, []),
    (["submit", "a", "-p", "2"], STDIN, []),
    (["submit", "-p", "7", "a"], STDIN, []),
    (["submit", "a", "--priority", "1", "--hold"], STDIN, []),
    (["submit", "a", "--priority=3", "--retries", "4", "--timeout", "1h30m"], STDIN, []),
    (["submit", "a", "--at", "2099-01-02T03:04", "--host", "node-1"], STDIN, []),
    (["submit", "a", "--after", "dep1", "--after=dep2", "--after", "dep1"], STDIN, ["dep1", "dep2"]),
    (["submit", "a", "--urgent"], STDIN, []),
    (["submit", "a", "--unique"], STDIN, []),
    (["submit", "a", "--spool", "SPOOL"], STDIN, []),
    (["submit", "a", "--spool=SPOOL", "--hold", "--hold"], STDIN, []),
    (["--spool", "SPOOL", "submit", "a"], STDIN, []),
    (["--spool=SPOOL", "submit", "a", "-p", "5"], STDIN, []),
    (["submit", "b", "--lines"], LINES, []),
    (["submit", "b", "--lines", "-p", "1", "--hold", "--after", "dep1"], LINES, ["dep1"]),
    (["submit", "b", "--lines", "--unique"], LINES, []),
    (["submit", "a", "--stderr-separate"], STDIN, []),
    (["submit", "a", "--stderr-merged", "--hold"], STDIN, []),
    (["submit", "b", "--lines", "--stderr-separate"], LINES, []),
    (["submit", "a", "--notify", "mail", "--notify-on", "always"], STDIN, []),
    (["submit", "a", "--notify=none", "--notify-on=failure"], STDIN, []),
    (["submit", "b", "--lines", "--notify", "mail"], LINES, []),
    (["submit", "a", "-q"], STDIN, []),
    (["submit", "a", "--quiet", "--unique"], STDIN, []),
    (["submit", "b", "--lines", "-q"], LINES, []),
    (["submit", "a", "--after", "dep1", "--at", "tomorrow 05:00"], STDIN, ["dep1"]),
    (["submit", "a", "--cpus", "1", "--mem", "64M"], STDIN, []),
    (["submit", "a", "--cpus=0001"], STDIN, []),
    (["submit", "b", "--lines", "--mem", "96M", "--cpus", "1"], LINES, []),
    # errors: the same exit code and the same line on stderr
    (["submit", "a"], b"", []),
    (["submit", "bad name"], STDIN, []),
    (["submit", "x" * 101], STDIN, []),
    (["submit", "a", "-p", "0"], STDIN, []),
    (["submit", "a", "-p", "99"], STDIN, []),
    (["submit", "a", "--timeout", "soon"], STDIN, []),
    (["submit", "a", "--at", "25:00"], STDIN, []),
    (["submit", "a", "--after", "nosuch"], STDIN, []),
    (["submit", "a", "--after", "a"], STDIN, ["a"]),
    (["submit", "a", "--host", "../x"], STDIN, []),
    (["submit", "a", "--notify", "x"], STDIN, []),
    (["submit", "a", "--notify-on", "sometimes"], STDIN, []),
    (["submit", "a", "--cpus", "0"], STDIN, []),  # onite's words on both paths, not typer's range error
    (["submit", "a", "--cpus", "lots"], STDIN, []),
    (["submit", "a", "--cpus", "0000015000"], STDIN, []),
    (["submit", "b", "--lines", "--cpus", "5000"], LINES, []),
    (["submit", "a", "--mem", "4.5G"], STDIN, []),
    (["submit", "a", "--notify", "command"], STDIN, []),  # the spool has no notify_command
    (["submit", "b", "--lines", "--notify", "command"], LINES, []),
    (["submit", "dup"], STDIN, ["dup"]),
    (["submit", "a", "--spool", "/nonexistent/spool"], STDIN, []),
    (["submit", "b", "--lines"], b"\n  \n", []),
    (["submit", "b", "--lines"], LINES, ["b-00002"]),
    (["submit", "b" * 95, "--lines"], LINES, []),
    (["find", "dep1"], b"", ["dep1"]),
    (["find", "nosuch"], b"", []),
    (["find", "bad name"], b"", []),
    (["--spool", "SPOOL", "find", "dep1"], b"", ["dep1"]),
    (["find", "dep1", "--spool", "/nonexistent/spool"], b"", []),
    (["list", "--json"], b"", ["dep1", "dep2"]),
    (["list", "--json", "--all"], b"", ["dep1"]),
    (["--spool", "SPOOL", "list", "-a", "--json"], b"", []),
    (["list", "--json", "--spool", "/nonexistent/spool"], b"", []),
    (["run"], b"", ["r1", "r2"]),
    (["run", "--slots", "2", "--until", "23:59", "--host", "elsewhere"], b"", ["r1", "r2", "r3"]),
    (["--spool", "SPOOL", "run", "--spool=SPOOL"], b"", ["r1"]),
    (["run", "-q"], b"", ["r1"]),
    (["run", "--until", "25:00"], b"", ["r1"]),
    (["run", "--host", "../x"], b"", ["r1"]),
    (["run", "--spool", "/nonexistent/spool"], b"", []),
    (["wait", "nosuch"], b"", []),
    (["wait", "bad name"], b"", []),
    (["wait", "dep1", "--timeout", "abc"], b"", ["dep1"]),
    (["wait"], b"", []),
    (["wait", "--json"], b"", []),
    (["wait", "dep1", "--timeout", "1s", "--json"], b"", ["dep1"]),
    (["--spool", "SPOOL", "wait", "dep1", "--timeout=1s"], b"", ["dep1"]),
    (["--show-completion", "zsh"], b"", []),
    (["--spool", "SPOOL", "--show-completion=fish"], b"", []),
    (["--show-completion", "ksh"], b"", []),
]

DECLINED = [
    ["wait", "--timeout"], ["wait", "-t", "1s"], ["wait", "--help"],
    [], ["--help"], ["--spool"], ["list"], ["submit"], ["submit", "--help"], ["submit", "a", "-h"],
    ["submit", "a", "-p3"], ["submit", "a", "-p=3"], ["submit", "a", "--prio", "3"], ["submit", "a", "b"],
    ["submit", "a", "--", "x"], ["submit", "a", "-p"], ["submit", "a", "-p", "x"], ["submit", "a", "-p", "-1"],
    ["submit", "a", "--retries", "101"], ["submit", "a", "--retries", "-1"], ["submit", "a", "-p", "1", "-p", "2"],
    ["submit", "a", "--no-hold"], ["submit", "-"], ["submit", "a", "--after", "-x"], ["submit", "a", "--hold=yes"],
    ["submit", "-p", "2"], ["submit", "a", "--notify"], ["submit", "a", "--notify", "mail", "--notify", "none"], ["find"], ["find", "a", "b"], ["find", "--help"], ["find", "a", "-p", "1"],
    ["--spool", "--help", "submit", "a"], ["--version"], ["list"], ["list", "-a"], ["list", "--json", "--by-host"],
    ["list", "--json", "x"], ["list", "--json", "--help"], ["run", "--slots", "0"], ["run", "--slots", "x"],
    ["run", "--slots", "5000"], ["run", "now"], ["run", "--help"], ["run", "-vv"],
    ["submit", "a", "--stderr-separate", "--stderr-merged"], ["submit", "a", "--stderr-separate=yes"],
    ["--show-completion", "bash", "list"], ["--show-completion", "--help"], ["--install-completion=zsh", "x"],
]


def fresh_spool(path):
    from contextlib import redirect_stdout

    shutil.rmtree(path, ignore_errors=True)
    with open(os.devnull, "w") as devnull, redirect_stdout(devnull):
        assert onite.__main__.main(["init", "--spool", str(path)]) == 0
    set_config(path, sendmail="/bin/true")  # --notify mail needs one (a machine here may have none)


def snapshot(spool):
    """Every job file: (folder, name) → (mode, the decoded job but for its submit time)."""
    epoch = datetime(2000, 1, 1, tzinfo=timezone.utc)
    files = {}
    for path in sorted((spool / "jobsdone").glob("*@result")):
        result = json.loads(path.read_text())
        files[("jobsdone", path.name)] = (result["state"], result["exit_code"], result["host"])
    for path in sorted((spool / "jobs").rglob("*")):
        if path.is_file():
            job = decode(path.read_bytes())
            key = (path.parent.name, unique_free(path.name))
            files[key] = (oct(path.stat().st_mode & 0o7777), replace(job, submitted=epoch, name=unique_free(job.name)))
    return files


def unique_free(text):
    """Without what differs from one run to the next: unique suffixes, submit times."""
    text = re.sub(r'"submitted": "[^"]*"', '"submitted": "TIME"', text)
    text = re.sub(r"-[a-z2-9]{6}(?=\b|-)", "-UNIQUE", text)
    # `onite run` off a terminal prints its log lines: times, pids and durations differ
    text = re.sub(r"(?m)^\S+ (\S+)\[\d+\] ", r"TIME \1[PID] ", text)
    # what a driver sweeps is the machine's cgroup tree, shared with every other test's drivers
    text = re.sub(r"(?m)^.* pruned cgroups=\d+ .*\n?", "", text)
    return re.sub(r"\b(pid|seconds|run)=\S+", r"\1=N", text)


def run_once(spool, monkeypatch, argv, stdin, queued, *, fast):
    fresh_spool(spool)
    for name in queued:
        assert run_cli(["submit", name], stdin=b"true\n").code == 0
    with monkeypatch.context() as patch:
        if fast:
            patch.setattr(onite.__main__, "_dispatch", lambda args: os._exit(FAST_ONLY))
        else:
            patch.setattr(onite.cli.fastcli, "run", lambda args: None)
        result = run_cli(argv, stdin=stdin)
    return result, snapshot(spool)


@pytest.mark.parametrize("argv, stdin, queued", ACCEPTED, ids=[" ".join(a[0])[:60] for a in ACCEPTED])
def test_fast_path_and_typer_agree(spool, monkeypatch, argv, stdin, queued):
    argv = [a.replace("SPOOL", str(spool)) for a in argv]
    fast, fast_files = run_once(spool, monkeypatch, argv, stdin, queued, fast=True)
    assert fast.code != FAST_ONLY, f"the fast path declined {argv}"
    slow, slow_files = run_once(spool, monkeypatch, argv, stdin, queued, fast=False)
    # two slots start their jobs at once: their log lines may come in either order
    assert (fast.code, unique_free(fast.out), sorted(unique_free(fast.err).splitlines())) == \
        (slow.code, unique_free(slow.out), sorted(unique_free(slow.err).splitlines()))
    assert fast_files == slow_files
    if fast.code and not (argv[-1] == "nosuch" and fast.code == 1):  # find's "not found" is silent
        assert fast.err.startswith("onite: ") and fast.err.count("\n") == 1
    elif "submit" in argv:
        assert len(fast_files) > len(queued)


@pytest.mark.parametrize("argv", DECLINED, ids=[" ".join(a) or "(none)" for a in DECLINED])
def test_anything_unusual_is_left_to_typer(argv):
    assert onite.cli.fastcli.run(list(argv)) is None


def test_the_fast_path_does_not_import_typer(spool, tmp_path):
    """A plain submit loads neither typer, nor pydantic, nor rich, nor inspect's ast (a fresh interpreter,
    not a fork); inspect, deferred by onite.__main__, still works when something uses it."""
    import subprocess

    probe = ("import sys; from onite.__main__ import main; code = main(sys.argv[1:]);"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'pydantic', 'rich', 'click', 'ast'));"
             "import inspect, dataclasses; assert inspect.signature(main) and dataclasses.inspect.isclass(int);"
             "print(code, heavy)")
    env = dict(os.environ, ONITE_SPOOL=str(spool))
    for argv in (["submit", "p1"], ["submit", "p2", "--lines", "-p", "2"], ["find", "p1"], ["list", "--json"]):
        out = subprocess.run([sys.executable, "-c", probe, *argv], input=b"true\n", env=env, capture_output=True,
                             check=True).stdout.decode()
        assert out.splitlines()[-1] == "0 []", (argv, out)


def test_a_submit_does_not_build_what_only_a_drain_or_a_listing_needs(spool):
    """The queue's order (onite.core.queue) and the packing rule (onite.core.admission) are not imported by
    a submit: each builds dataclasses at import, milliseconds of every submit's start-up. Nor are the
    spool's skeleton (only a first personal spool needs it), signal's enums (contain's kill only), json
    (cron records only, and this spool has none). ``find``, which scripts run in loops, loads no
    more than it reads: not the results' and cancels' modules."""
    import subprocess

    unwanted = ('onite.core.queue', 'onite.core.admission', 'onite.spool.skeleton', 'signal', 'json',
                'onite.core.state', 'onite.spool.cancels')  # find: not the cancel machinery
    probe = ("import sys; from onite.__main__ import main; code = main(sys.argv[1:]);"
             f"print(code, sorted(m for m in sys.modules if m in {unwanted!r}))")
    env = dict(os.environ, ONITE_SPOOL=str(spool))
    for argv in (["submit", "s1"], ["submit", "s2", "--mem", "1G", "--cpus", "1"], ["find", "s1"]):
        out = subprocess.run([sys.executable, "-c", probe, *argv], input=b"true\n", env=env, capture_output=True,
                             check=True).stdout.decode()
        assert out.splitlines()[-1] == "0 []", (argv, out)


def typer_options(command: str) -> dict[str, tuple[str, bool, tuple | None]]:
    """Every spelling of typer's ``onite COMMAND`` options: the parameter it sets, whether it is a flag,
    and the range of a whole number (min, max) where it has one."""
    import typer

    from onite.cli.commands import app

    params = typer.main.get_command(app).commands[command].params
    found = {}
    for param in params:
        if param.param_type_name != "option":  # typer carries its own click: compare by what it says
            continue
        low, high = getattr(param.type, "min", None), getattr(param.type, "max", None)  # an IntRange's
        limits = (low, high) if low is not None or high is not None else None
        for spelling in param.opts:
            found[spelling] = (param.name, param.is_flag, limits)
        for spelling in param.secondary_opts:  # --stderr-separate/--stderr-merged: the second sets it false
            found[spelling] = (f"{param.name}:off", param.is_flag, limits)
    return found


@pytest.mark.parametrize("command", sorted(onite.cli.fastcli.OPTIONS))
def test_the_fast_paths_tables_are_typers_options(command):
    """Each spelling the fast path takes is one typer takes, for the same parameter, of the same kind
    (a flag or an option with a value), and a whole number has the same range: the two parsers are
    kept in step by this test, not by examples."""
    values, flags = onite.cli.fastcli.OPTIONS[command]
    typer_side = typer_options(command)
    off = {"stderr_merged": "stderr_separate:off"}  # the fast path names the second spelling of a pair
    ranges = onite.cli.fastcli.ranges()
    for spelling, name in [*values.items(), *flags.items()]:
        assert spelling in typer_side, f"onite {command} {spelling}: typer has no such option"
        typer_name, is_flag, limits = typer_side[spelling]
        assert off.get(name, name) == typer_name, f"onite {command} {spelling}"
        assert is_flag == (spelling in flags), f"onite {command} {spelling}: a flag on one side only"
        if limits is not None:
            assert ranges.get((command, name)) == limits, f"onite {command} {spelling}: another range"
    for (cmd, name), limits in ranges.items():
        if cmd == command:
            assert any(t == (name, False, limits) for t in typer_side.values()), f"onite {command} --{name}"


def _as_program(argv: list[str], spool, *, stdin: bytes = b"", stdout=None, unbuffered: bool = False):
    """``python -m onite ARGV`` as a user runs it, with an atexit hook that says whether Python's own
    exit ran (it does not after a short command of the fast path: onite.__main__._leave_now).
    Standard output is buffered, as a user's is, unless ``unbuffered`` (PYTHONUNBUFFERED)."""
    import subprocess

    probe = ("import atexit, sys; atexit.register(lambda: sys.stderr.write('python exit ran\\n'));"
             "sys.argv[0] = 'onite'; from onite.__main__ import main; sys.exit(main())")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    env.update(ONITE_SPOOL=str(spool), **({"PYTHONUNBUFFERED": "1"} if unbuffered else {}))
    return subprocess.run([sys.executable, "-c", probe, *argv], input=stdin, env=env, check=False,
                          stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_short_command_ends_without_pythons_exit_and_nothing_it_wrote_is_lost(spool):
    """submit, find, list --json and wait end with os._exit once their output is flushed: every job
    line and the whole JSON document arrive; a driver (run) and typer's commands exit the normal way."""
    lines = b"".join(b"echo %d\n" % i for i in range(3000))
    done = _as_program(["submit", "many", "--lines"], spool, stdin=lines)
    assert done.returncode == 0 and b"python exit ran" not in done.stderr, done.stderr
    assert b"spooled 3000 jobs" in done.stderr
    listed = _as_program(["list", "--json"], spool)
    assert listed.returncode == 0 and b"python exit ran" not in listed.stderr
    assert len(json.loads(listed.stdout)["jobs"]) == 3000  # a ~1 MB document, all of it
    found = _as_program(["find", "many-00001"], spool)
    assert found.returncode == 0 and b"python exit ran" not in found.stderr
    one = _as_program(["submit", "one", "--unique"], spool, stdin=b"true\n")
    assert one.returncode == 0 and one.stdout.startswith(b"one-") and b"python exit ran" not in one.stderr
    for argv in (["list"], ["run", "--until", "00:00", "-q"], ["submit", "bad name"]):
        other = _as_program(argv, spool)
        assert b"python exit ran" in other.stderr, (argv, other.stderr)  # typer, a driver, an error


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
    last = [line for line in done.stderr.decode().splitlines() if line != "python exit ran"][-1]
    assert done.returncode == 4 and "Traceback" not in done.stderr.decode(), done.stderr
    if argv[0] != "submit":
        assert last.startswith("onite: cannot write its output: No space left on device — "), last
        return
    said = (r"; spooled 1 job: (many-\d+) — " if "--lines" in argv else r"; the job is spooled as (full-\w+) — ")
    found = re.match(r"onite: cannot write its output: No space left on device" + said, last)
    assert found, last
    assert run_cli(["find", found.group(1)]).code == 0


@pytest.mark.parametrize("argv", [["submit", "shut", "--unique"], ["submit", "lines", "--lines"], ["list"],
                                  ["status"], ["run", "-q"]])
@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_command_run_with_its_stdout_or_stderr_closed_does_its_work_and_says_no_more(spool, argv, closed):
    """(a sixth look) ``onite submit x >&-`` (cron, a daemon, some CI runners close it): Python gives
    None for the stream, and the command did its work, then ended in a traceback, exit 1; with stderr
    closed, submit's ``spooled`` line went to stdout, after the name a script captures. What would
    go to a closed stream is dropped, as its caller chose; the exit status is the command's."""
    import subprocess

    assert run_cli(["submit", "queued"], stdin=b"true\n").code == 0
    shut = ">&-" if closed == "stdout" else "2>&-"
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    done = subprocess.run(["sh", "-c", f'exec "$@" {shut}', "sh", sys.executable, "-m", "onite", *argv],
                          input=b"true\n", capture_output=True, env=env, timeout=120)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, (done.returncode, done.stderr)
    if argv[0] == "submit" and closed == "stderr":
        [line] = done.stdout.decode().splitlines()  # what stdout says with stderr open, and nothing more
        assert line.startswith("spooled 1 job: lines-" if "--lines" in argv else "shut-"), line
    if argv[0] == "run":
        assert json.loads((spool / "jobsdone" / "queued@result").read_text())["state"] == "done"


def test_a_reader_that_stops_early_is_no_failure_whichever_command_it_reads(spool):
    """``onite output NAME | head -1`` (typer's own handling of a broken pipe exits 1) exits 0, as
    ``onite list | head`` does: the reader chose to stop."""
    import subprocess

    assert run_cli(["submit", "big"], stdin=b"seq 1 300000\n").code == 0
    assert drain(spool).returncode == 0
    for argv in (["output", "big"], ["list", "--all"], ["log", "-n", "1000"]):
        proc = subprocess.Popen([sys.executable, "-m", "onite", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {
                                    "ONITE_SPOOL": str(spool), "PYTHONPATH": str(REPO)})
        proc.stdout.readline()
        proc.stdout.close()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and b"Traceback" not in err, (argv, proc.returncode, err)
