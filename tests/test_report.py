"""``onite report``: the morning report, read from a real night.

The night (built once for the module, ``real_night``) is drained by a real
``onite run --slots 2``: 33 jobs at P1 to P5, two of them blocking until a
P1 hotfix is spooled mid-drain, a job the rest waits for (so that which
results are the oldest does not depend on the machine's speed), a
dependency chain that succeeds and one whose
head fails (after a retry), a job that passes on its third attempt, two
timeouts (one ignoring TERM), a job whose directory vanished, a job of
``nobody``'s that fails with a stderr of its own, a held job, a symlink the
driver refuses, a job cancelled before the drain, and six P5 jobs spooled
late in the night and left queued when ``until`` closes the window. The
window's end is set in onite.toml and re-read on SIGHUP while two gate jobs
hold both slots, so that it closes when the test chooses, not at a minute
boundary. ``keep = 13`` prunes the 11 oldest of root's 24 results of the
night (each user keeps their own last 13: nobody's two stay).

The HTML page is rendered by headless Chromium at 1280 and 400 pixels: its
layout read back from the DOM (a copy of the page with a probe script), its
colours from a screenshot.
"""

from __future__ import annotations

import html
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile
from datetime import date, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from conftest import REPO, drain, log_lines, needs_root, run_cli, set_config, start_driver, wait_for, wait_logged
from pngread import read_png, solid_blocks

ME = pwd.getpwuid(os.geteuid()).pw_name
CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and os.environ.get("ONITE_CHROMIUM_TESTS") != "required",
    reason="needs Debian's chromium (CI installs it and sets ONITE_CHROMIUM_TESTS=required)")

FILLERS = [f"filler-{i}" for i in range(1, 8)]
CHAIN = [f"chain-{i}" for i in range(1, 5)]
LATE = [f"late-{i}" for i in range(1, 7)]
FAILED = ["head", "headdep-1", "headdep-2", "slow", "stubborn", "vanish", "nobody:nb-fail"]  # as root reads them
DONE = ["blocker-a", "blocker-b", "hotfix", *FILLERS, "settle", "flaky", *CHAIN, "nobody:nb-ok", "gate-a", "gate-b"]
PRUNED = {"blocker-a", "blocker-b", "hotfix", *FILLERS, "settle"}  # the 11 oldest of root's 24: keep = 13 (nobody's 2 are kept)
HEADLINE = "19 done, 7 failed (2 timed out), 6 left queued, 1 held, 1 refused, 11 earlier results pruned (keep = 13)"


def wide_env(**more) -> dict:
    return dict(os.environ, **{"COLUMNS": "200", "NO_COLOR": "1", **more})


# ---- the night ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_night():
    """A spool after a real night (the module's docstring says what happened in it)."""
    folder = Path(tempfile.mkdtemp(prefix="onite-night-", dir="/tmp"))
    os.chmod(folder, 0o755)
    spool, work = folder / "spool", folder / "work"
    work.mkdir()
    os.chmod(work, 0o777)

    def onite(*args, stdin=b"", user=None, cwd=work):
        r = run_cli(["--spool", str(spool), *args], stdin=stdin, user=user, cwd=cwd)
        assert r.code == 0, r
        return r

    def submit(name, body, *options, user=None, cwd=work):
        onite("submit", name, *options, stdin=body.encode(), user=user, cwd=cwd)

    def gated(name: str, gate: Path) -> str:
        return f"touch {work / name}.on; while [ -e {gate} ]; do sleep 0.05; done\n"

    onite("init")
    set_config(spool, kill_grace="1s", retry_delay="0.2s", keep=13)
    submit("early-cancel", "true\n", "-p", "3")
    onite("cancel", "early-cancel")  # before the drain: not the night's
    cancelled = datetime.now()
    # the log's times are whole seconds: the drain starts in a later one, or this cancel would be inside it
    wait_for(lambda: datetime.now().replace(microsecond=0) > cancelled, what="the next second")
    blockers, settling, gates = work / "blockers.gate", work / "settle.gate", work / "gates.gate"
    for gate in (blockers, settling, gates):
        gate.touch()
    for name in ("blocker-a", "blocker-b"):  # both slots, until the hotfix is spooled
        submit(name, gated(name, blockers), "-p", "2")
    for name in FILLERS:
        submit(name, "true\n", "-p", "2")
    # the rest of the night waits for settle, which waits for the test: the 11 oldest results, the ones
    # keep = 13 prunes at the end, are those of the jobs above and settle's, whatever the machine's speed
    submit("settle", gated("settle", settling), "-p", "2")
    after = ("--after", "settle")
    submit("head", "echo compiling; echo 'error: head broke' >&2; exit 2\n", "-p", "2", "--retries", "1", *after)
    submit("flaky", f"cd {work}; if [ -e flaky.2 ]; then echo third time lucky; elif [ -e flaky.1 ]; then "
                    "touch flaky.2; exit 1; else touch flaky.1; exit 1; fi\n", "-p", "2", "--retries", "2", *after)
    submit("headdep-1", "true\n", "-p", "3", "--after", "head")
    submit("headdep-2", "true\n", "-p", "3", "--after", "headdep-1")
    for before, name in zip(["settle", *CHAIN], CHAIN):
        submit(name, "true\n", "-p", "3", "--after", before)
    submit("slow", "sleep 30\n", "-p", "3", "--timeout", "1s", *after)
    submit("stubborn", "trap '' TERM; sleep 30\n", "-p", "3", "--timeout", "1s", *after)
    gone = work / "gone"
    gone.mkdir()
    submit("vanish", "true\n", "-p", "3", *after, cwd=gone)
    gone.rmdir()
    theirs = ("--after", f"{ME}:settle")  # another user's job: named with its user
    submit("nb-fail", "echo 'nobody at work'; echo \"nobody's secret\" >&2; exit 4\n", "-p", "3",
           "--stderr-separate", *theirs, user="nobody")
    submit("nb-ok", "true\n", "-p", "3", *theirs, user="nobody")
    submit("parked", "true\n", "-p", "3", "--hold")
    os.symlink("/etc/passwd", spool / "jobs" / "P3" / "root:sneaky")  # refused: not a regular file
    for name in ("gate-a", "gate-b"):  # both slots, once everything else is done, until the window closes
        submit(name, gated(name, gates), "-p", "4", "--after", "flaky", "--after", "chain-4")

    driver = start_driver(spool, "--slots", "2")
    try:
        wait_for(lambda: (work / "blocker-a.on").exists() and (work / "blocker-b.on").exists(), what="the blockers")
        submit("hotfix", "true\n", "-p", "1")  # spooled while the drain runs: it runs next
        blockers.unlink()
        early = PRUNED - {"settle"}
        wait_for(lambda: (work / "settle.on").exists() and early <= {
            p.name[:-len("@result")].removeprefix(f"{ME}:") for p in (spool / "jobsdone").glob("*@result")}, what="the early jobs' results")
        settling.unlink()
        wait_for(lambda: (work / "gate-a.on").exists() and (work / "gate-b.on").exists(), timeout=120,
                 what="the gate jobs (everything else ran)")
        night = set(DONE + FAILED) - {"gate-a", "gate-b"}
        wait_for(lambda: night <= {p.name[:-len("@result")].removeprefix(f"{ME}:") for p in (spool / "jobsdone").glob("*@result")},
                 what="the night's results")
        for name in LATE:  # spooled late in the night, while the gates hold both slots
            submit(name, "true\n", "-p", "5")
        # the window ends now: until = a second ago, read on SIGHUP (a real until, and no minute boundary to
        # wait for); it closes when a gate job ends and frees a slot, so that the P5 jobs stay queued
        started = next(datetime.fromisoformat(line.split()[0]) for line in log_lines(spool) if " driver-start " in line)
        until = started + timedelta(seconds=1)  # after the driver started: today's, not tomorrow's
        wait_for(lambda: datetime.now().astimezone() >= until, what="the end of the driver's first second")
        set_config(spool, until=until.astimezone().strftime("%H:%M:%S"))
        os.kill(driver.pid, signal.SIGHUP)
        wait_for(lambda: any(" reloaded " in line for line in log_lines(spool)), what="the driver to re-read onite.toml")
        gates.unlink()
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, err.decode()[-2000:]
    yield SimpleNamespace(spool=spool, work=work, folder=folder)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def report(night, *args, user=None, env=None):
    r = run_cli(["--spool", str(night.spool), "report", *args], user=user, env=env or wide_env())
    assert r.code == 0 and r.err == "", r
    return r


def report_json(night, *args, user=None) -> dict:
    return report(night, "--json", *args, user=user).json()


def section(text: str, first: str) -> list[str]:
    """The lines of a report's text from the one starting with ``first`` to the next empty line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def table_of(text: str) -> tuple[list[str], list[list[str]]]:
    """The report's table from the text: its titles and each row's cells (cells are two or more spaces apart)."""
    rows = section(text, "STATE ")
    return rows[0].split(), [re.split(r" {2,}", line) for line in rows[1:]]


def timeline_of(text: str) -> tuple[str, list[str]]:
    """The terminal timeline: its axis of times, and a line per job (under the rule of ticks)."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"─", "┬"})
    bars = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        bars.append(line)
    return lines[rule - 1].strip(), bars


# ---- the terminal report of the night --------------------------------------------------------


def test_the_headline_counts_the_whole_night(real_night):
    doc = report_json(real_night)
    assert doc["headline"] == HEADLINE
    assert doc["counts"] == {"done": 19, "failed": 7, "cancelled": 0} and doc["timed_out"] == 2
    assert doc["pruned"] == 11 and doc["keep"] == 13
    assert doc["left"] == {"queued": 6, "since": 0, "held": 1, "running": 0, "refused": 1}
    assert {j["name"] for j in doc["jobs"] if j["pruned"]} == PRUNED
    assert sorted(j["name"] for j in doc["jobs"]) == sorted(DONE + FAILED)
    text = report(real_night).out
    assert text.splitlines()[1] == HEADLINE


def test_failures_come_first_with_their_reason_attempts_and_output(real_night):
    doc = report_json(real_night)
    assert [j["name"] for j in doc["jobs"][:7]] == [j["name"] for j in doc["jobs"] if j["state"] == "failed"]
    assert sorted(j["name"] for j in doc["jobs"][:7]) == sorted(FAILED)
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert (jobs["head"]["attempt"], jobs["head"]["tries"]) == (2, 2)
    assert (jobs["flaky"]["state"], jobs["flaky"]["attempt"], jobs["flaky"]["tries"]) == ("done", 3, 3)
    assert [jobs[n]["ran"] for n in ("headdep-1", "headdep-2", "vanish", "head", "slow")] == [False] * 3 + [True] * 2

    text = report(real_night).out
    assert text.splitlines()[2] == ""
    failures = section(text, text.splitlines()[3])  # the failures come right after the headline
    said = "\n".join(failures)
    head = failures.index(next(line for line in failures if line.startswith("head (")))
    assert re.fullmatch(rf"head \({ME}, P2\) failed: exit 2 after \S+, attempt 2/2", failures[head])
    # its last attempt's lines only (the file holds both attempts')
    assert failures[head + 1:head + 4] == ["    │ compiling", "    │ error: head broke", "    onite output head"]
    assert re.search(rf"^stubborn \({ME}, P3\) timed out after \S+ \(SIGKILL\)$", said, re.M)
    assert re.search(rf"^slow \({ME}, P3\) timed out after \S+ \(SIGTERM\)$", said, re.M)
    assert f"headdep-1 ({ME}, P3) never ran: dependency head failed" in failures
    assert f"headdep-2 ({ME}, P3) never ran: dependency headdep-1 failed" in failures
    assert f"vanish ({ME}, P3) never ran: its directory {real_night.work}/gone no longer exists" in failures
    nb = failures.index(next(line for line in failures if line.startswith("nobody:nb-fail (")))
    assert failures[nb].startswith("nobody:nb-fail (nobody, P3) failed: exit 4 after ")
    # kept apart: its stderr, and the command that prints it
    assert failures[nb + 1:nb + 3] == ["    │ nobody's secret", "    onite output nobody:nb-fail --stderr"]
    # a job that never ran has nothing to read: no command that would answer "it has not run yet"
    assert "onite output headdep-1" not in text and "onite output vanish" not in text

    titles, rows = table_of(text)
    assert titles == ["STATE", "NAME", "USER", "PRI", "HOST", "STARTED", "TOOK", "MEM", "CPU", "TRIES", "EXIT", "REASON"]
    by_name = {row[1]: row for row in rows}
    assert [row[0] for row in rows[:7]] == ["failed" if n not in ("slow", "stubborn") else "timeout"
                                           for n in [row[1] for row in rows[:7]]]
    assert by_name["stubborn"][10:] == ["SIGKILL", "timeout"] and by_name["slow"][10:] == ["SIGTERM", "timeout"]
    assert by_name["head"][9:] == ["2/2", "2", "exit 2"] and by_name["flaky"][0] == "done"
    assert by_name["flaky"][9] == "3/3"
    assert by_name["headdep-1"][5:11] == ["-", "-", "-", "-", "-", "-"]
    assert re.fullmatch(r"[0-9.]+[KMG]", by_name["head"][7]) and re.fullmatch(r"[0-9.]+s", by_name["head"][8])


def test_what_is_not_finished_and_why(real_night):
    doc = report_json(real_night)
    waiting = {row["name"]: row for row in doc["waiting"]}
    assert sorted(waiting) == sorted([*LATE, "parked", "sneaky"])
    until = doc["drains"][-1]["until"]
    # HH:MM:SS, or HH:MM when the seconds are 00 (as an until of 07:00 is written)
    assert re.fullmatch(r"\d\d:\d\d(:\d\d)?", until) and doc["drains"][-1]["reason"] == "window closed"
    for name in LATE:
        assert (waiting[name]["state"], waiting[name]["reason"]) == ("queued", f"ready; left when the window closed "
                                                                               f"at {until}")
    assert (waiting["parked"]["state"], waiting["parked"]["command"]) == ("held", "onite release parked")
    assert (waiting["sneaky"]["state"], waiting["sneaky"]["reason"]) == ("refused", "a symbolic link, not a job file")

    text = report(real_night).out
    lines = section(text, "not finished: ")
    # nothing starts a drain of this spool (no daemon, timer or cron entry): no next drain is promised, as
    # status and submit say (it named the next schedule time, which nothing would start)
    assert lines[0] == "not finished: 6 left queued, 1 held, 1 refused" and doc["next_drain"] is None
    assert f"late-1 ({ME}, P5) queued: ready; left when the window closed at {until}" in lines
    assert f"parked ({ME}, P3) held — onite release parked" in lines
    assert lines[-1] == "why each waits, as it changes: onite status"


def test_the_night_is_the_last_drain(real_night):
    """The default window is the drain just run (whatever the time of day: a daytime drain is reported
    at once), from its driver-start to its driver-exit; a job cancelled before it is not the night's."""
    doc = report_json(real_night)
    events = [line.split() for line in log_lines(real_night.spool)]
    start = next(datetime.fromisoformat(e[0]) for e in events if e[2] == "driver-start")
    end = next(datetime.fromisoformat(e[0]) for e in events if e[2] == "driver-exit")
    assert doc["window"] == "drain" and doc["night"] is None
    assert (datetime.fromisoformat(doc["since"]), datetime.fromisoformat(doc["until"])) == (start, end)
    assert [(d["started"], d["ended"]) for d in doc["drains"]] == [(start.isoformat(), end.isoformat())]
    assert "early-cancel" not in {j["name"] for j in doc["jobs"]}
    assert report(real_night).out.splitlines()[0] == (
        f"onite report for {real_night.spool}: the last drain, {start.astimezone():%Y-%m-%d %H:%M:%S} to "
        f"{end.astimezone():%H:%M:%S} on {doc['drains'][0]['host']}")
    # the P1 job spooled during the drain ran before every job queued before it at a lower priority: in
    # claim order, which the run ids count (a start is logged when the job runs: a filler claimed after
    # it may get there first on a busy machine)
    claims = {e[3]: int(next(w for w in e if w.startswith("run=")).rsplit("-", 1)[1]) for e in events if e[2] == "start"}
    starts = sorted(claims, key=claims.get)
    assert starts.index(f"{ME}:hotfix") < min(starts.index(f"{ME}:{n}") for n in FILLERS)  # the log writes keys
    # a wider window finds the cancel in the log, though retention pruned its record
    wider = report_json(real_night, "--since", "1h")
    cancelled = next(j for j in wider["jobs"] if j["name"] == "early-cancel")
    assert (cancelled["state"], cancelled["pruned"], cancelled["reason"]) == ("cancelled", True, f"cancelled by {ME}")
    assert wider["window"] == "since" and wider["counts"] == {"done": 19, "failed": 7, "cancelled": 1}


@needs_root
def test_output_is_shown_to_its_owner_and_root_only(real_night):
    doc = report_json(real_night, user="nobody")
    failures = {f["name"]: f for f in doc["failures"]}
    assert (failures["root:head"]["output"], failures["root:head"]["private"], failures["root:head"]["command"]) == \
        (None, True, None)
    assert failures["nb-fail"]["output"] == ["nobody's secret"]
    text = report(real_night, user="nobody").out
    assert "error: head broke" not in text and "output is private" not in text
    # a user's report leads with their own: their failure told in full, others' named in one line after it
    failures = section(text, "nb-fail (nobody, P3) failed: exit 4")
    assert failures[0].startswith("nb-fail (nobody, P3) failed: exit 4"), text
    assert "other users' failures (theirs to read): root: " in text and text.index("nb-fail (nobody") < \
        text.index("other users' failures")
    rows = [row for row in table_of(text)[1]]
    assert [row[1] for row in rows[:2]] == ["nb-fail", "nb-ok"], rows
    assert "nobody's secret" in text and "onite output nb-fail --stderr" in text
    # the held job of another user: held for all to see, its other details private
    assert "root:parked (root, P3) held: another user's job: other details private" in text  # not "held: held (…)"
    assert "onite release parked" not in text and "onite release root:parked" not in text
    # root reads everyone's
    assert next(f for f in report_json(real_night)["failures"] if f["name"] == "nobody:nb-fail")["output"] == \
        ["nobody's secret"]


@needs_root
def test_json_next_step_is_only_for_failures_the_reader_may_restart(real_night):
    """A user's --json names no restart of another user's failure (theirs to act on: it would be refused,
    exit 3), as the terminal tells others' failures by name only; root's names every one."""
    mine = {f["name"]: f for f in report_json(real_night, user="nobody")["failures"]}
    assert mine["root:head"]["next"] is None and mine["nb-fail"]["next"] == "onite restart nb-fail"
    roots = {f["name"]: f for f in report_json(real_night)["failures"]}
    assert roots["nobody:nb-fail"]["next"] == "onite restart nobody:nb-fail" and roots["head"]["next"]


def _fail_as_root_and_nobody(spool, root_failures: int) -> None:
    """Drain ``root_failures`` failing jobs of root's and one of nobody's, ``mine``, that prints five lines."""
    for i in range(root_failures):
        assert run_cli(["submit", f"broke-{i}"], stdin=b"exit 1\n", cwd="/tmp").code == 0
    body = b"for i in 1 2 3 4 5; do echo line $i; done; exit 2\n"
    assert run_cli(["submit", "mine"], stdin=body, user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0


@needs_root
def test_a_users_report_spends_no_lines_of_output_on_other_users_failures(spool):
    """The lines of output are shared among the failures the reader may read (nobody: one of the night's four,
    five lines), not among every failure of the night (root: four, two lines each)."""
    _fail_as_root_and_nobody(spool, 3)
    text = run_cli(["report"], user="nobody", cwd="/tmp", env=wide_env()).out
    assert section(text, "mine (nobody")[1:7] == [f"    │ line {i}" for i in range(1, 6)] + ["    onite output mine"], text
    # root reads all four: two lines each
    text = run_cli(["report"], env=wide_env()).out
    assert section(text, "nobody:mine (nobody")[1:3] == ["    │ line 4", "    │ line 5"], text


@needs_root
def test_the_line_of_other_users_failures_says_how_many_it_does_not_name(spool, world_tmp):
    """Other users' failures are named on one line, the first ten of them, then how many more there are."""
    _fail_as_root_and_nobody(spool, 13)
    said = "other users' failures (theirs to read): root: " + ", ".join(f"broke-{i}" for i in range(10)) + " … and 3 more"
    lines = run_cli(["report"], user="nobody", cwd="/tmp", env=wide_env()).out.splitlines()
    assert said in lines, lines
    folder = world_tmp / "nobody"
    folder.mkdir()
    os.chown(folder, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
    assert run_cli(["report", "--html", str(folder / "r.html")], user="nobody", cwd="/tmp").code == 0
    assert f"<p>{html.escape(said)}</p>" in (folder / "r.html").read_text()


def test_user_filter(real_night):
    doc = report_json(real_night, "--user", "nobody")
    assert doc["user"] == "nobody" and sorted(j["name"] for j in doc["jobs"]) == ["nobody:nb-fail", "nobody:nb-ok"]
    assert doc["headline"] == "user nobody: 1 done, 1 failed" and doc["waiting"] == []
    r = report(real_night, "--user", "daemon")  # an account without a job in the window: a quiet night
    assert r.out.splitlines()[1] == "user daemon: 0 done, 0 failed"
    r = run_cli(["--spool", str(real_night.spool), "report", "--user", "nosuchuser"])  # a typo: it said 0 done
    assert (r.code, r.err) == (2, "onite: --user 'nosuchuser': no such user here, and no job of that name's in the "
                                  "window — check the name: onite list --all shows whose jobs there are\n"), r


def test_piped_output_is_one_line_per_row(real_night):
    """Piped (here at 60 columns), every row of the table is one line of ten cells, two or more spaces apart."""
    text = report(real_night, env=wide_env(COLUMNS="60")).out
    titles, rows = table_of(text)
    assert len(rows) == 26 and all(len(row) == len(titles) for row in rows), rows
    assert {row[0] for row in rows} == {"done", "failed", "timeout"}  # words, not symbols, in a pipe
    assert f"vanish ({ME}, P3) never ran: its directory {real_night.work}/gone no longer exists" in text.splitlines()
    assert "✓" not in text and "✗" not in text
    awk = subprocess.run(["awk", "-F", "  +", '$1 == "timeout" {print $2}'], input=text, capture_output=True,
                         text=True, check=True)
    assert sorted(awk.stdout.split()) == ["slow", "stubborn"]
    assert report(real_night, "--plain", env=wide_env(COLUMNS="60")).out == text


def test_a_terminal_gets_symbols_and_no_color_words(real_night):
    """On a terminal the state column and the failures carry ✓ ✗ ⏱ ⊘; NO_COLOR gets words, as a pipe does."""
    import io

    from rich.console import Console

    from onite.app import report as rep
    from onite.cli.render import print_report
    from onite.spool.paths import SpoolDir

    data = rep.build(SpoolDir(real_night.spool), datetime.now().astimezone())
    out = io.StringIO()
    print_report(Console(file=out, width=160, force_terminal=True, color_system="truecolor", no_color=False), data,
                 plain=False)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    titles, rows = table_of(shown)
    assert {row[0] for row in rows} == {"✓", "✗", "⏱"}
    assert "⏱ stubborn (" in shown and "✗ head (" in shown and "‖ parked (" in shown and "◦ late-1 (" in shown
    plain = io.StringIO()
    print_report(Console(file=plain, width=160, force_terminal=True, no_color=True), data, plain=False)
    assert {row[0] for row in table_of(re.sub(r"\x1b\[[0-9;]*m", "", plain.getvalue()))[1]} == {
        "done", "failed", "timeout"}


def test_the_timeline_draws_jobs_that_never_ran_as_crosses(real_night):
    axis, bars = timeline_of(report(real_night).out)
    assert re.fullmatch(r"(\d\d:\d\d:\d\d *)+", axis)  # a short night: seconds on the axis
    marks = {line.split()[0]: line.split()[1] for line in bars}
    assert {name for name, mark in marks.items() if mark == "×"} == {"headdep-1", "headdep-2", "vanish"}
    assert all(set(marks[n]) == {"█"} for n in ("head", "stubborn", "filler-1", "gate-a"))


def test_the_timeline_keeps_long_names_apart(spool):
    """A batch's names, 35 characters, were cut to their first 23 at any width: twelve rows of
    `analysis-pipeline-longr…`. They are whole where the line has room, and cut in the middle where not."""
    from onite.app import report as rep
    from onite.cli.render import gantt_lines
    from onite.spool.paths import SpoolDir

    names = [f"analysis-pipeline-longrun-sample-{i:02d}" for i in (1, 2, 3)]
    for name in names:
        assert run_cli(["submit", name], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    data = rep.build(SpoolDir(spool), datetime.now().astimezone())
    wide = [line.split()[0] for line in gantt_lines(data, 120)[0][2:]]
    assert sorted(wide) == names
    narrow = [line.split()[0] for line in gantt_lines(data, 60)[0][2:]]
    assert len(set(narrow)) == 3 and all("…" in n and n.endswith(f"-{i:02d}") for n, i in zip(sorted(narrow), (1, 2, 3)))


def test_report_never_imports_rich_for_json(real_night):
    code = ("import sys, io, contextlib\nfrom onite.__main__ import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()): assert main(['--spool', {str(real_night.spool)!r}, "
            "'report', '--json']) == 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent)))
    assert proc.stdout.strip() == "[]", proc.stderr


# ---- the page ---------------------------------------------------------------------------------


class Page(HTMLParser):
    """What a reader of the page sees: the table's rows, the failures, the SVG's bars and crosses, the head."""

    def __init__(self) -> None:
        super().__init__()
        self.rows, self.bars, self.crosses, self.failures, self.meta, self.tags = [], [], [], [], {}, []
        self._cell = self._tip = self._item = None
        self._skip = 0  # inside a failure's mark or note: not part of its sentence

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        classes = (attrs.get("class") or "").split()
        if tag == "span" and (self._skip or {"mark", "note"} & set(classes)):
            self._skip += 1
        if tag == "tr" and "job" in classes:
            self.rows.append([])
        elif tag == "td":
            self._cell = []
        elif tag == "li" and "failure" in classes:
            self._item = []
            self.failures.append(self._item)
        elif tag == "rect" and "bar" in classes:
            self.bars.append([attrs["class"], ""])
        elif tag == "text" and "never" in classes:
            self.crosses.append([attrs["class"], ""])
        elif tag == "title" and (self.bars or self.crosses):  # a mark's tooltip
            self._tip = []
        elif tag == "meta" and "name" in attrs:
            self.meta[attrs["name"]] = attrs["content"]

    def handle_endtag(self, tag):
        if tag == "span" and self._skip:
            self._skip -= 1
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "title" and self._tip is not None:
            last = max(self.bars + self.crosses, key=lambda mark: mark[1] == "")
            last[1] = "".join(self._tip)
            self._tip = None
        elif tag == "li":
            self._item = None

    def handle_data(self, data):
        for part in (self._cell, self._tip, None if self._skip else self._item):
            if part is not None:
                part.append(data)


def parse_page(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_the_page_leads_with_the_failures(real_night, world_tmp):
    path = world_tmp / "report.html"
    r = report(real_night, "--html", str(path))
    assert r.out == ""  # a cron job that writes it mails nothing
    page = parse_page(path)
    text = path.read_text()
    assert page.meta["viewport"] == "width=device-width,initial-scale=1"
    assert "<script" not in text and not [a for _, a in page.tags for k in ("src", "href") if k in a]
    assert text.index("class=headline") < text.index("id=failures") < text.index("id=waiting") \
        < text.index("id=timeline") < text.index("id=jobs")
    assert html.unescape(re.sub(r"<[^>]+>", "", re.search(r"<p class=headline>(.*?)</p>", text).group(1))) == HEADLINE
    failures = ["".join(item).strip() for item in page.failures]
    assert len(failures) == 7 and any(f.startswith(f"head ({ME}, P2) failed: exit 2 after ") and "attempt 2/2" in f
                                      for f in failures)
    assert f"headdep-1 ({ME}, P3) never ran: dependency head failed" in failures
    # the page is for sharing: no job's output on it, only the command that prints it
    assert "error: head broke" not in text and "nobody's secret" not in text and "onite output head" in text
    assert [row[1] for row in page.rows[:7]] == [row[1] for row in page.rows if row[0] in ("failed", "timeout")]
    assert sorted(cls for cls, _ in page.crosses) == ["never failed"] * 3
    assert sorted(tip.split(" ")[0] for _, tip in page.crosses) == ["headdep-1", "headdep-2", "vanish"]
    assert len(page.bars) == 26 - 3 and all(tip for _, tip in page.bars)
    assert not list(world_tmp.glob(".report.html.*"))  # the temporary file was renamed


def chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="onite-chromium-") as profile:
        return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=120)


# The page in a frame of the size under test (headless Chromium lays a window out at least 500 pixels
# wide), and where each part of it lies as the browser laid it out, written into the DOM that
# --dump-dom prints. The page itself has no script.
FRAME = """<!doctype html><html><body style="margin:0"><iframe id=page src="PAGE" width=WIDTH height=HEIGHT
style="border:0;display:block"></iframe><script>
document.getElementById('page').addEventListener('load', () => {
  const doc = document.getElementById('page').contentDocument;
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; };
  const found = {width: doc.documentElement.clientWidth, scroll: doc.documentElement.scrollWidth,
    failures: [...doc.querySelectorAll('#failures li')].map(li => ({job: li.querySelector('.name').textContent, box: box(li),
      name: box(li.querySelector('.name')), state: box(li.querySelector('.state'))})),
    rows: [...doc.querySelectorAll('tr.job')].map(tr => ({name: tr.querySelector('.name').textContent,
      cells: [...tr.querySelectorAll('td')].filter(td => td.textContent).map(box)})),
    svg: box(doc.querySelector('.gantt')),
    bars: [...doc.querySelectorAll('.gantt rect.bar')].map(r => ({state: r.classList[1], box: box(r)})),
    labels: [...doc.querySelectorAll('.gantt .axis text')].filter(t => getComputedStyle(t).display != 'none')
      .map(t => ({text: t.textContent, box: box(t)})),
    chart: box(doc.querySelector('.gantt svg.axis')),
    names: [...doc.querySelectorAll('.gantt .label')].map(l => ({name: l.textContent, box: box(l),
      mark: box(l.nextElementSibling.querySelector('rect.bar, text.never'))}))};
  document.body.setAttribute('data-probe', JSON.stringify(found));
});
</script></body></html>"""


def framed(page: Path, width: int, height: int) -> tuple[Path, str]:
    """The page in a frame ``width`` by ``height``, and the window size that shows all of it."""
    frame = page.with_name("frame.html")
    frame.write_text(FRAME.replace("PAGE", page.name).replace("WIDTH", str(width)).replace("HEIGHT", str(height)))
    return frame, f"{max(width, 500)},{height}"


def layout(page: Path, width: int, height: int) -> dict:
    frame, window = framed(page, width, height)
    done = chromium("--allow-file-access-from-files", "--dump-dom", f"--window-size={window}", frame.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'data-probe="([^"]*)"', done.stdout.decode())
    assert found, done.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def pixel(image, x: float, y: float) -> tuple[int, int, int]:
    width, _, bpp, pixels = image
    at = (int(y) * width + int(x)) * bpp
    return tuple(pixels[at:at + 3])


@needs_chromium
@pytest.mark.parametrize("width, screen", [(1280, 800), (390, 844)])
def test_the_page_in_chromium(real_night, world_tmp, width, screen):
    """On a desktop's screen and a phone's (390 by 844 CSS pixels), the whole page laid out (in a frame tall
    enough to hold it, which lays it out as the screen would: no rule of its style depends on the height) and shot:
    - nothing scrolls sideways; every failure's name, state and reason lie within the width and on the first
      screen, its red border drawn there; the timeline spans the width; each row of the table
      lies within it (stacked on the phone);
    - every bar, however short its job (a few milliseconds), drawn at least three pixels wide in its state's
      colour, centred on its name's line, the name whole and left of the chart; the axis labels (seconds,
      for a short night) apart from each other and within the chart, the last one too (on a phone it was
      cut at the edge)."""
    from onite.cli.reportpage import HTML_COLOUR

    page = world_tmp / "report.html"
    report(real_night, "--html", str(page))
    height = 3200
    found = layout(page, width, height)
    assert found["width"] == width and found["scroll"] <= width  # no horizontal scrolling
    assert len(found["failures"]) == 7
    for item in found["failures"]:
        for part in (item["box"], item["name"], item["state"]):
            assert 0 <= part[0] and part[1] <= width and part[3] <= screen, (width, item)
    assert {item["job"] for item in found["failures"]} == set(FAILED)
    left, right = found["svg"][:2]
    assert left < 20 and right > width - 20  # the timeline spans the page
    assert len(found["rows"]) == 26
    for row in found["rows"]:
        assert all(0 <= cell[0] and cell[1] <= width for cell in row["cells"]), (width, row)
    if width < 600:  # stacked: a row's cells one under the other
        assert all(len({round(cell[2]) for cell in row["cells"]}) > 3 for row in found["rows"])
    assert len(found["bars"]) == 23 and found["svg"][3] < height

    shot = world_tmp / "shot.png"
    frame, window = framed(page, width, height)
    done = chromium(f"--screenshot={shot}", f"--window-size={window}", frame.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    image = read_png(shot.read_bytes())
    assert image[1] == height
    red = rgb(HTML_COLOUR["failed"])
    for item in found["failures"]:  # each failure's red border, where the layout says it is
        box = item["box"]
        assert pixel(image, box[0] + 1, (box[2] + box[3]) / 2) == red, (width, item["job"])
    if width > 600:
        first_screen = (image[0], screen, image[2], image[3][:image[0] * screen * image[2]])
        for state in ("done", "failed"):  # the timeline's bars, on the first screen of a desktop
            assert solid_blocks(first_screen, rgb(HTML_COLOUR[state]), 3) >= 1, (width, state)
    for bar in found["bars"]:
        left, right, top, bottom = bar["box"]
        colour = rgb(HTML_COLOUR[bar["state"]])
        row = [pixel(image, x, (top + bottom) / 2) for x in range(max(int(left) - 3, 0), int(right) + 4)]
        assert row.count(colour) >= 3, (width, bar)
    labels = found["labels"]
    assert len(labels) >= 2 and all(re.fullmatch(r"\d\d:\d\d:\d\d", label["text"]) for label in labels)
    boxes = sorted(label["box"] for label in labels)
    assert all(a[1] <= b[0] for a, b in zip(boxes, boxes[1:])), boxes  # no label over another
    assert all(0 <= box[0] and box[1] <= width for box in boxes)
    chart = found["chart"]
    assert all(chart[0] <= box[0] and box[1] <= chart[1] for box in boxes), (chart, boxes)
    assert len(found["names"]) == 26
    for row in found["names"]:  # a bar (or a cross) and its name on one line: their middles level
        name, mark = row["box"], row["mark"]
        assert abs((name[2] + name[3]) / 2 - (mark[2] + mark[3]) / 2) <= 2, (width, row)
        assert name[1] <= chart[0] + 1, (width, row)  # the names' column, left of the chart


@needs_chromium
def test_a_cross_at_either_end_of_the_timeline_is_drawn_whole_on_a_phone(spool, world_tmp):
    """At 390 pixels wide, the × of a job that never ran at the timeline's first moment, or at its last, was cut in
    half by the chart's edge: each is drawn whole, as much of it left of its middle as right of it."""
    from onite.cli.reportpage import HTML_COLOUR

    write(spool, "vanish", local(2026, 11, 22, 20, 0), state="failed", reason="its directory /gone no longer exists")
    write(spool, "bad", local(2026, 11, 22, 21, 0), local(2026, 11, 22, 20, 0), state="failed", reason="exit 1")
    write(spool, "dep", local(2026, 11, 22, 21, 0), state="failed", reason="dependency bad failed")
    page = world_tmp / "report.html"
    assert run_cli(["report", "--night", "2026-11-22", "--html", str(page)]).code == 0
    found = layout(page, 390, 1600)
    crosses = {row["name"]: row["mark"] for row in found["names"] if row["name"] in ("vanish", "dep")}
    assert len(crosses) == 2, found["names"]
    shot = world_tmp / "shot.png"
    frame, window = framed(page, 390, 1600)
    assert chromium(f"--screenshot={shot}", f"--window-size={window}", frame.as_uri()).returncode == 0
    image = read_png(shot.read_bytes())
    red = rgb(HTML_COLOUR["failed"])

    def inked(x0: float, x1: float, top: float, bottom: float) -> int:  # pixels near the ×'s colour
        return sum(max(abs(a - b) for a, b in zip(pixel(image, x, y), red)) < 60
                   for x in range(int(x0), int(x1)) for y in range(int(top), int(bottom) + 1))

    for name, (left, right, top, bottom) in crosses.items():
        middle = (left + right) / 2
        halves = inked(left, middle, top, bottom), inked(middle, right + 1, top, bottom)
        assert min(halves) >= max(halves) / 2 > 0, (name, halves, crosses[name], found["chart"])


# ---- windows ------------------------------------------------------------------------------------


def local(*fields) -> datetime:
    return datetime(*fields).astimezone()


def write(spool, name, finished, started=None, user=ME, reason="", state="done"):
    """A result record with chosen times, as the driver writes it (onite.spool.write_result), at the key USER:NAME."""
    from onite.spool.paths import SpoolDir
    from onite.spool.results import write_result
    from onite.core.state import JobState, Result

    write_result(SpoolDir(spool), Result(
        name=name if ":" in name else f"{user}:{name}", uid=os.geteuid(), user=user, priority=4, urgent=False, state=JobState(state), reason=reason,
        exit_code=0 if state == "done" else None, signal=None, host="h1", submitted=finished - timedelta(hours=9),
        queued=None, started=started, finished=finished, attempt=1))


def test_report_night_is_noon_to_noon(spool, cli):
    write(spool, "noon-before", local(2026, 11, 22, 11, 59), local(2026, 11, 22, 11, 0))
    write(spool, "evening", local(2026, 11, 22, 20, 5), local(2026, 11, 22, 20, 0))
    write(spool, "small-hours", local(2026, 11, 23, 3, 0), local(2026, 11, 23, 1, 0))
    write(spool, "morning", local(2026, 11, 23, 7, 0), local(2026, 11, 23, 6, 0))
    write(spool, "ran-late", local(2026, 11, 23, 13, 0), local(2026, 11, 23, 11, 0))  # started inside
    write(spool, "next-noon", local(2026, 11, 23, 12, 30), local(2026, 11, 23, 12, 0))  # the next night's
    write(spool, "cancelled", local(2026, 11, 22, 18, 0), user="bob", reason="cancelled by bob", state="cancelled")
    doc = cli(["report", "--night", "2026-11-22", "--json"]).json()
    assert doc["night"] == "2026-11-22" and doc["window"] == "night"
    assert datetime.fromisoformat(doc["since"]) == local(2026, 11, 22, 12, 0)
    assert datetime.fromisoformat(doc["until"]) == local(2026, 11, 23, 12, 0)
    assert [j["name"] for j in doc["jobs"]] == ["bob:cancelled", "evening", "small-hours", "morning", "ran-late"]
    bob = cli(["report", "--night", "2026-11-22", "--user", "bob", "--json"]).json()
    assert [j["name"] for j in bob["jobs"]] == ["bob:cancelled"] and bob["counts"]["cancelled"] == 1
    # nothing was drained since that night: what is queued now is what it left
    assert bob["left"] == {"queued": 0, "since": 0, "held": 0, "running": 0, "refused": 0}

    r = cli(["report", "--night", "2026-11-22"], env=wide_env())
    assert r.code == 0 and "the night of 2026-11-22 (2026-11-22 12:00 to 2026-11-23 12:00)" in r.out
    _, rows = table_of(r.out)
    assert [row[1] for row in rows] == ["bob:cancelled", "evening", "small-hours", "morning", "ran-late"]
    assert [row[5] for row in rows] == ["-", "20:00:00", "01:00:00", "06:00:00", "11:00:00"]
    assert [row[6] for row in rows] == ["-", "5m00s", "2h00m", "1h00m", "2h00m"]
    axis, bars = timeline_of(r.out)  # 18:00 to 13:00 on 187 columns: a tick every two hours
    assert axis.split() == ["18:00", "20:00", "22:00", "00:00", "02:00", "04:00", "06:00", "08:00", "10:00", "12:00"]
    assert [line.split()[0] for line in bars] == ["bob:cancelled", "evening", "small-hours", "morning", "ran-late"]
    assert bars[0].split()[1] == "×" and all(set(line.split()[1]) == {"█"} for line in bars[1:])
    narrow = cli(["report", "--night", "2026-11-22"], env=wide_env(COLUMNS="80"))
    assert narrow.out.splitlines()[0] == f"onite report for {spool}: the night of 2026-11-22 (2026-11-22 12:00 to 2026-11-23 12:00)"
    starts = [len(line) - len(line.split()[1]) for line in bars]
    sizes = [len(line.split()[1]) for line in bars]
    assert starts == sorted(starts) and len(set(starts)) == 5  # later jobs further right
    assert abs(sizes[2] - 2 * sizes[3]) <= 1 and abs(sizes[4] - sizes[2]) <= 1  # 2h, 1h, 2h


def test_since_and_until(spool, cli):
    now = datetime.now().astimezone().replace(microsecond=0)
    write(spool, "three-hours-ago", now - timedelta(hours=3), now - timedelta(hours=3, minutes=5))
    write(spool, "an-hour-ago", now - timedelta(hours=1), now - timedelta(hours=1, minutes=5))
    doc = cli(["report", "--since", "4h", "--until", "2h", "--json"]).json()
    assert [j["name"] for j in doc["jobs"]] == ["three-hours-ago"]
    assert datetime.fromisoformat(doc["until"]) == now - timedelta(hours=2) or \
        abs(datetime.fromisoformat(doc["until"]) - (now - timedelta(hours=2))) < timedelta(seconds=5)
    # no drain since the window: what is queued now is what it left
    assert doc["left"] == {"queued": 0, "since": 0, "held": 0, "running": 0, "refused": 0}
    # no drain in the log: the last 24 hours
    assert [j["name"] for j in cli(["report", "--json"]).json()["jobs"]] == ["three-hours-ago", "an-hour-ago"]
    r = cli(["report", "--since", "2026-11-21T10:00", "--until", "2026-11-21T09:00"])
    assert (r.code, r.err) == (2, "onite: --since 2026-11-21T10:00 is not before --until 2026-11-21T09:00 — give a "
                                  "--since before the --until\n")


def schedule_now(spool) -> None:
    """A daily schedule whose time is this minute: tonight's window opened a moment ago and stays open."""
    now = datetime.now().astimezone()
    set_config(spool, schedule=[f"{now.minute} {now.hour} * * *"])


def fake_drain(spool, when: datetime, name: str) -> None:
    """A drain at ``when`` that ran ``name`` and failed it, as its driver writes the log and the record."""
    stamp = lambda t: t.astimezone().replace(microsecond=0).isoformat()  # noqa: E731
    lines = [f"{stamp(when)} vm[4242] driver-start host=vm slots=1 executor=local",
             f"{stamp(when)} vm[4242] start {name} user={ME} priority=4 attempt=1 pid=4243 run=x-1",
             f"{stamp(when + timedelta(seconds=5))} vm[4242] failed {name} user={ME} reason=\"exit 1\" exit=1 "
             f"seconds=5 attempt=1 run=x-1",
             f"{stamp(when + timedelta(seconds=6))} vm[4242] driver-exit done=0 failed=1 cancelled=0 left=0 "
             f"reason=drained"]
    log = Path(spool) / "onite.log"
    log.write_text("".join(line + "\n" for line in lines) + log.read_text())
    write(spool, name, when + timedelta(seconds=5), started=when, reason="exit 1", state="failed")


def test_the_drains_of_tonights_window_are_one_session_and_an_afternoon_test_is_not(spool, cli, workdir):
    """Last night is the drains of the night window (a time of ``schedule`` to ``until``) of the latest drain
    that ran a job: a second drain in the window (a manual one, or a later schedule time) belongs to it, a
    test drain of the afternoon before the window opened does not (its bars squeezed tonight's)."""
    from onite.app.report import morning_before

    now = datetime.now().astimezone()
    opened = now.replace(second=0, microsecond=0)
    if opened - morning_before(now, now) < timedelta(minutes=2):
        pytest.skip("the night (noon to noon) began less than two minutes ago: no afternoon before this window")
    fake_drain(spool, max(opened - timedelta(hours=3), morning_before(now, now) + timedelta(seconds=1)), "test-run")
    schedule_now(spool)
    assert cli(["submit", "first", "-p", "2"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    assert cli(["submit", "second", "-p", "2"], stdin=b"exit 3\n").code == 0
    assert drain(spool).returncode == 0
    assert drain(spool).returncode == 0  # a drain that ran nothing does not hide the night before it
    doc = cli(["report", "--json"]).json()
    assert doc["window"] == "drain" and len(doc["drains"]) == 3
    assert [j["name"] for j in doc["jobs"]] == ["second", "first"] and doc["headline"] == "1 done, 1 failed"
    assert "test-run" not in cli(["status"]).out


def test_without_a_schedule_last_night_is_the_last_drain(spool, cli):
    """No schedule: the last drain that ran a job (and those running beside it), not the day's earlier ones."""
    set_config(spool, schedule=[])
    assert cli(["submit", "first", "-p", "2"], stdin=b"exit 3\n").code == 0
    assert drain(spool).returncode == 0
    assert cli(["submit", "second", "-p", "2"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    doc = cli(["report", "--json"]).json()
    assert [j["name"] for j in doc["jobs"]] == ["second"] and len(doc["drains"]) == 1


@pytest.mark.parametrize("word, day", [("today", date(2026, 11, 23)), ("yesterday", date(2026, 11, 22)),
                                       ("2026-02-28", date(2026, 2, 28)), (" Yesterday ", date(2026, 11, 22))])
def test_parse_night(word, day):
    from onite.app.report import parse_night

    assert parse_night(word, datetime(2026, 11, 23, 8, 0).astimezone()) == day


def test_night_window_has_each_noons_own_offset(berlin_tz):
    from onite.app.report import night_window

    berlin = ZoneInfo("Europe/Berlin")
    winter = night_window(date(2026, 11, 22), datetime(2026, 11, 23, 8, 0).astimezone())
    assert winter == (datetime(2026, 11, 22, 12, tzinfo=berlin), datetime(2026, 11, 23, 12, tzinfo=berlin))
    assert [w.utcoffset() for w in winter] == [timedelta(hours=1)] * 2
    # the clocks go forward in the night of 28 March 2026: that night is 23 hours long, whichever ref
    for ref in (datetime(2026, 3, 1, 8).astimezone(), datetime(2026, 3, 1, 8, tzinfo=berlin)):
        start, end = night_window(date(2026, 3, 28), ref)
        assert (start.utcoffset(), end.utcoffset()) == (timedelta(hours=1), timedelta(hours=2))
        assert end - start == timedelta(hours=23) and end.astimezone(berlin).hour == 12


@pytest.mark.parametrize("args, message", [
    (["--night", "x"], "onite: --night 'x': expected a date such as 2026-11-22, today or yesterday\n"),
    (["--night", "2026-02-30"], "onite: --night '2026-02-30': expected a date such as 2026-11-22, today or "
                                "yesterday\n"),
    (["--night", "today", "--since", "12h"], "onite: --night and --since cannot be used together — use --night "
                                             "DATE for a night (noon to noon), or --since/--until for a time range\n"),
    (["--night", "today", "--until", "1h"], "onite: --night and --until cannot be used together — use --night "
                                            "DATE for a night (noon to noon), or --since/--until for a time range\n"),
    (["--until", "+2h"], "onite: --until '+2h': expected a duration such as 12h, a time such as 19:00, or a "
                         "date-time such as 2026-11-21T19:00\n"),
    (["--user", " "], "onite: --user is empty — name a user, e.g. --user alice, or leave it out for everyone's jobs\n"),
])
def test_report_usage_errors(spool, cli, args, message):
    for extra in ([], ["--json"]):
        r = cli(["report", *args, *extra])
        assert (r.code, r.out, r.err) == (2, "", message)


# ---- what users wrote, and the page's file ------------------------------------------------------


def test_report_escapes_what_users_wrote(spool, cli, world_tmp):
    evil = "<img src=x onerror=alert(1)>&[/]"
    # a user name with a "/" cannot be a file name's USER: the record sits at root's key, its user field says evil
    write(spool, f"{ME}:odd", datetime.now().astimezone() - timedelta(hours=1), user=evil,
          reason=f"no: {evil}\x1b[2J\nforged line", state="failed")
    path = world_tmp / "r.html"
    assert cli(["report", "--html", str(path), "--user", evil, "--json"]).code == 0
    text = path.read_text()
    assert "<img" not in text and "\x1b" not in text
    page = parse_page(path)
    assert page.rows[0][2] == evil and page.rows[0][11] == f"no: {evil}\\e[2J\\nforged line"
    assert not [tag for tag, _ in page.tags if tag == "img"]
    r = cli(["report", "--user", evil], env=wide_env())  # and on a terminal, not taken for rich markup
    assert r.code == 0 and f"user {evil}: 0 done, 1 failed" in r.out and "\x1b" not in r.out
    assert f"odd ({evil}, P4) never ran: no: {evil}\\e[2J\\nforged line" in r.out.splitlines()


def test_report_html_unwritable_leaves_nothing(spool, cli, world_tmp):
    target = world_tmp / "missing" / "r.html"
    r = cli(["report", "--html", str(target)])
    assert r.code == 2 and r.err.startswith(f"onite: cannot write {target}: ") and r.err.count("\n") == 1
    assert r.out == ""  # the page is written first: no report is printed before the error
    folder = world_tmp / "ro"
    folder.mkdir()
    (folder / "r.html").write_text("the old page")
    r = cli(["report", "--html", str(folder / "r.html" / "x")])
    assert r.code == 2
    assert (folder / "r.html").read_text() == "the old page" and os.listdir(folder) == ["r.html"]


# ---- a big night ---------------------------------------------------------------------------------


def test_a_big_report_is_plain_text_laid_out_as_the_table(spool, cli):
    """Past LARGE_TABLE jobs the report skips rich (minutes for 100,000 rows); the layout is the same."""
    import io

    from rich.console import Console

    from onite.cli import render
    from onite.app import report
    from onite.app import reporttext
    from onite.spool.paths import SpoolDir
    from onite.core.cells import plain_table

    first = datetime.now().astimezone() - timedelta(hours=8)
    for i in range(4):
        write(spool, f"few-{i}", first + timedelta(seconds=10 * i + 5), first + timedelta(seconds=10 * i))
    data = report.build(SpoolDir(spool), datetime.now().astimezone())
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=True, no_color=True)
    console.print(render.rich_table(render.report_table(data, reporttext.rows(data))))
    assert [line.rstrip() for line in out.getvalue().splitlines()] == list(plain_table(reporttext.COLUMNS,
                                                                                          reporttext.rows(data)))
    for i in range(render.LARGE_TABLE):
        write(spool, f"many-{i:04d}", first + timedelta(seconds=10 * i + 5), first + timedelta(seconds=10 * i))
    r = cli(["report"], env=wide_env())
    assert r.code == 0 and r.out.splitlines()[1] == f"{render.LARGE_TABLE + 4} done, 0 failed"
    titles, rows = table_of(r.out)
    assert len(rows) == render.LARGE_TABLE + 4 and rows[0][:3] == ["done", "few-0", ME]
    axis, bars = timeline_of(r.out)
    assert len(bars) == len(rows) and [line.split()[0] for line in bars] == [row[1] for row in rows]


# ---- a drain still running, an output no longer kept ---------------------------------------------


def test_a_drain_still_running(spool, cli, workdir):
    gate = workdir / "gate"
    gate.touch()
    assert cli(["submit", "quick", "-p", "1"], stdin=b"exit 1\n").code == 0
    assert cli(["submit", "long", "-p", "2"], stdin=f"while [ -e {gate} ]; do sleep 0.02; done\n".encode()).code == 0
    assert cli(["submit", "next", "-p", "3"], stdin=b"true\n").code == 0
    driver = start_driver(spool)
    try:
        # the next job starts before the one before it is filed: wait for quick's filing too (its record goes last)
        wait_for(lambda: {p.name for p in (spool / "running").glob("*/*")} == {f"{ME}:long", f"{ME}:long@run"},
                 what="long to start, and quick to be filed")
        doc = cli(["report", "--json"]).json()
        assert doc["window"] == "drain" and doc["drains"][0]["ended"] is None
        assert doc["headline"] == "0 done, 1 failed, 1 running, 1 queued"
        assert [(row["name"], row["state"]) for row in doc["waiting"]] == [("long", "running"), ("next", "queued")]
        assert doc["waiting"][1]["reason"] == "ready: waits for a free slot of the drain running now"
        text = cli(["report"], env=wide_env()).out
        assert text.splitlines()[0].startswith(f"onite report for {spool}: the last drain, running since ")
        assert re.search(rf"^long \({ME}, P2\) running: running on \S+ since \d\d:\d\d$", text, re.M)
    finally:
        gate.unlink()
        driver.wait(timeout=60)


def test_an_output_no_longer_kept_is_said_so(spool, cli):
    assert cli(["submit", "lost", "-p", "1"], stdin=b"echo words; exit 1\n").code == 0
    assert drain(spool).returncode == 0
    assert "    │ words\n    onite output lost\n" in cli(["report"], env=wide_env()).out
    (spool / "stdout" / "root:lost").unlink()
    text = cli(["report"], env=wide_env()).out
    assert "    no output of this run is kept (removed, or a later run of that name replaced it)" in text
    assert "onite output lost" not in text


def test_a_retried_failure_shows_its_last_attempts_lines(spool, cli):
    set_config(spool, retry_delay="0.2s")
    assert cli(["submit", "twice", "--retries", "1"], stdin=b"echo one; echo two >&2; exit 1\n").code == 0
    assert drain(spool).returncode == 0
    assert "[onite] attempt 2 of twice" in (spool / "stdout" / "root:twice").read_text()  # both attempts are kept
    lines = cli(["report"], env=wide_env()).out.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("twice (")))
    assert lines[at].endswith(", attempt 2/2")
    assert lines[at + 1:at + 4] == ["    │ one", "    │ two", "    onite output twice"]


def test_the_report_on_an_ascii_stdout_escapes_what_it_cannot_write(spool):
    """`PYTHONIOENCODING=ascii onite report | cat` ended in a UnicodeEncodeError traceback (the
    timeline's blocks): a character the output's encoding cannot hold is written escaped."""
    assert run_cli(["submit", "one"], stdin=b"true\n", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    proc = subprocess.run([sys.executable, "-m", "onite", "report"], capture_output=True, timeout=60,
                          env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), PYTHONIOENCODING="ascii"))
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert b"one" in proc.stdout and b"\\u" in proc.stdout, proc.stdout


@pytest.mark.parametrize("command", [["report"], ["status"]])
def test_a_c_locale_without_utf8_mode_escapes_what_it_cannot_write(world_tmp, command):
    """``LC_ALL=C PYTHONUTF8=0 onite status``: stdout is ASCII with surrogateescape (Python's choice for the C
    locale), which the escaping of PYTHONIOENCODING=ascii left as it was: a '—' ended in a UnicodeEncodeError
    traceback, exit 1. What it cannot hold is written escaped, on a spool whose path is not UTF-8 too."""
    spool = Path(os.fsdecode(bytes(world_tmp) + b"/sp\xff"))

    def onite(*args: str, stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "onite", *args], input=stdin, capture_output=True, timeout=60,
                              env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), **env))

    assert onite("init").returncode == 0
    assert onite("submit", "one", stdin=b"true\n").returncode == 0
    assert drain(spool).returncode == 0
    proc = onite(*command, LC_ALL="C", PYTHONUTF8="0")
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    assert b"\\u" in proc.stdout and bytes(world_tmp) + b"/sp" in proc.stdout, proc.stdout


def test_a_damaged_record_is_told_as_damaged_not_as_pruned(spool):
    """A torn result record (a crash, a bad disk, a hand edit) was counted in the
    headline as ``1 earlier results pruned (keep = 50)`` and told as ``its record and output were
    pruned``, while the output was still there. It is rebuilt from the log, and said to be damaged."""
    assert run_cli(["submit", "build"], stdin=b"echo 'error: disk quota'; exit 2\n").code == 0
    assert run_cli(["submit", "other"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    (spool / "jobsdone" / "root:build@result").write_text('{"format": 1, "name": "bu')
    r = run_cli(["report"])
    assert r.code == 0, r
    assert "pruned" not in r.out, r.out
    assert "its result record jobsdone/root:build@result is damaged; the log told the rest (onite output build)" in r.out
    data = json.loads(run_cli(["report", "--json"]).out)
    assert data["pruned"] == 0 and data["counts"]["failed"] == 1
    assert [j["damaged"] for j in data["jobs"] if j["name"] == "build"] == [True]


def test_a_name_run_again_in_the_night_is_shown_once_with_its_earlier_failure_noted(spool, workdir):
    """``etl`` failed in the night's first drain; restarted, it succeeded in the second. The report shows it once,
    as its latest run, with the earlier failure noted (in its reason and the headline, so that running a name
    again hides nothing)."""
    schedule_now(spool)
    body = f"cd {workdir}; [ -e etl.1 ] && exit 0; touch etl.1; echo 'lost 3 tables'; exit 3\n".encode()
    assert run_cli(["submit", "etl"], stdin=body, user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "other"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    assert run_cli(["restart", "etl"], user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    r = run_cli(["report"], env=wide_env())
    assert r.code == 0 and "2 done, 0 failed, 1 run again after a failure" in r.out, r.out
    data = json.loads(run_cli(["report", "--json"]).out)
    assert data["counts"] == {"done": 2, "failed": 0, "cancelled": 0}
    assert sorted((j["name"], j["state"]) for j in data["jobs"]) == [("nobody:etl", "done"), ("other", "done")]
    [row] = [line for line in r.out.splitlines() if line.startswith("done") and " nobody:etl " in line]
    assert row.endswith(" 0     (after an earlier run: exit 3)"), r.out
    assert run_cli(["restart", "etl"], user="nobody", cwd="/tmp").code == 0
    assert run_cli(["restart", "etl"], stdin=b"", user="nobody", cwd="/tmp").code == 3  # queued: refused
    assert drain(spool).returncode == 0
    assert json.loads(run_cli(["report", "--json"]).out)["counts"] == {"done": 2, "failed": 0, "cancelled": 0}


def _nobody_cancels_after(spool, event: str, name: str) -> None:
    """nobody cancels its job ``name`` once the log has the job's ``event`` line, and waits for the cancel's."""
    wait_logged(spool, event, f"nobody:{name}")
    assert run_cli(["cancel", name], user="nobody", cwd="/tmp").code == 0
    wait_logged(spool, "cancelled", f"nobody:{name}")


def test_a_job_cancelled_while_it_ran_then_restarted_and_done_tells_the_cancel(spool, workdir):
    """``etl`` was cancelled by its owner while it ran, restarted and done in the same drain: the headline said
    ``2 done, 0 failed`` and nothing of the cancelled run (an earlier failure is told: ``1 run again after a
    failure``). It says ``1 run again after a cancel``, in text, HTML and JSON alike; the driver's log line
    counts the runs it filed (done=2 cancelled=1), the report each job once."""
    set_config(spool, slots=2)
    schedule_now(spool)
    gate = workdir / "gate"
    gate.touch()
    body = f"cd {workdir}; [ -e etl.1 ] && exit 0; touch etl.1; sleep 60\n".encode()
    assert run_cli(["submit", "etl"], stdin=body, user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "other"], stdin=f"while [ -e {gate} ]; do sleep 0.05; done\n".encode()).code == 0
    driver = start_driver(spool)
    try:
        _nobody_cancels_after(spool, "start", "etl")
        assert run_cli(["restart", "etl"], user="nobody", cwd="/tmp").code == 0
        wait_logged(spool, "done", "nobody:etl")
    finally:
        gate.unlink()
        driver.communicate(timeout=60)
    assert driver.returncode == 0
    [exit_line] = [line for line in log_lines(spool) if " driver-exit " in line]
    assert " done=2 failed=0 cancelled=1 " in exit_line, exit_line
    for who in ("nobody", "daemon", None):
        r = run_cli(["report", "--plain"], env=wide_env(), **({"user": who, "cwd": "/tmp"} if who else {}))
        assert r.code == 0 and "2 done, 0 failed, 1 run again after a cancel\n" in r.out, (who, r.out)
    data = json.loads(run_cli(["report", "--json"]).out)
    assert data["counts"] == {"done": 2, "failed": 0, "cancelled": 0}
    assert data["headline"] == "2 done, 0 failed, 1 run again after a cancel"
    page = workdir / "r.html"
    assert run_cli(["report", "--html", str(page)]).code == 0
    assert "<span class=cancelled>1 run again after a cancel</span>" in page.read_text()


def test_a_retry_cancelled_as_it_waited_tells_the_attempt_that_ran(spool, workdir):
    """``flaky`` (--retries 2) failed with exit 5, and its owner cancelled it while its retry waited out its
    back-off: the report's row said only ``cancelled by nobody``, never ran, as if no process of it had
    started (``list --all`` shows that start). It says ``cancelled by nobody (after attempt 1: exit 5)``, to
    its owner and to another user alike, on the terminal and on the page."""
    set_config(spool, retry_delay="1h")
    body = b"echo boom; exit 5\n"
    assert run_cli(["submit", "flaky", "--retries", "2"], stdin=body, user="nobody", cwd="/tmp").code == 0
    driver = start_driver(spool)
    try:
        _nobody_cancels_after(spool, "retry", "flaky")
    finally:
        driver.terminate()
        driver.communicate(timeout=60)
    for who in ("nobody", "daemon"):
        r = run_cli(["report", "--plain"], env=wide_env(), user=who, cwd="/tmp")
        [row] = [line for line in r.out.splitlines() if line.startswith("cancelled ")]
        assert row.endswith("  2/3    -     cancelled by nobody (after attempt 1: exit 5)"), (who, r.out)
    page = workdir / "r.html"
    assert run_cli(["report", "--html", str(page)]).code == 0
    assert "cancelled by nobody (after attempt 1: exit 5)" in html.unescape(page.read_text())


def test_status_during_a_drain_is_not_last_night_and_names_each_failure_once(spool, workdir):
    """While a drain runs, ``status`` tells it ``so far``, never as ``last night``; a job that failed twice
    in the night (restarted) is named once, with the next step for it."""
    schedule_now(spool)
    gate = workdir / "gate"
    gate.touch()
    assert run_cli(["submit", "etl", "-p", "1"], stdin=b"exit 3\n").code == 0
    assert drain(spool).returncode == 0
    assert run_cli(["restart", "etl"]).code == 0
    assert run_cli(["submit", "wait", "-p", "2"], stdin=f"while [ -e {gate} ]; do sleep 0.05; done\n".encode()).code == 0
    driver = start_driver(spool)
    try:
        wait_for(lambda: sum(" failed root:etl " in line for line in log_lines(spool)) == 2
                 and any(" start root:wait " in line for line in log_lines(spool)), what="etl's second failure, and wait")
        out = run_cli(["status"]).out
        assert "last night" not in out and "so far    0 done, 1 failed (etl), 0 cancelled" in out, out
        assert "next      onite restart etl\n" in out, out
    finally:
        gate.unlink()
        driver.communicate(timeout=60)
    out = run_cli(["status"]).out
    assert "last night 1 done, 1 failed (etl), 0 cancelled" in out, out




@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "1e400", "-5"])
def test_a_run_the_log_alone_tells_with_an_impossible_length_ends_at_its_line(spool, seconds):
    """A ``seconds=`` onite never writes (a hand-edited log) is no error: the run ends at its final line."""
    from onite.app import report
    from onite.spool.paths import SpoolDir

    when = datetime.now().astimezone().replace(microsecond=0) - timedelta(minutes=5)
    lines = [f"{when.isoformat()} vm[4242] driver-start host=vm slots=1",
             f"{when.isoformat()} vm[4242] start odd user={ME} priority=4 attempt=1 run=x-1",
             f"{(when + timedelta(seconds=5)).isoformat()} vm[4242] done odd user={ME} exit=0 seconds={seconds} "
             "attempt=1 run=x-1",
             f"{(when + timedelta(seconds=6)).isoformat()} vm[4242] driver-exit reason=drained"]
    (Path(spool) / "onite.log").write_text("".join(line + "\n" for line in lines))
    job, = report.build(SpoolDir(spool), datetime.now().astimezone()).jobs
    assert (job.started, job.finished) == (when, when + timedelta(seconds=5))


@needs_root
def test_a_cancel_the_driver_files_as_it_starts_is_not_counted_as_pruned(spool):
    """A user's cancel of a queued job on a system spool is filed by the next driver as it starts, in the
    second of its start line: the report said ``2 earlier results pruned (keep = 50)`` of two cancels whose
    records were there, and showed them from the log (no priority)."""
    for name in ("tmp-a", "tmp-b"):
        assert run_cli(["submit", name], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
        assert run_cli(["cancel", name], user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "ok"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    r = run_cli(["report"])
    assert r.code == 0 and "pruned" not in r.out, r.out
    data = json.loads(run_cli(["report", "--json"]).out)
    assert data["pruned"] == 0 and data["counts"]["cancelled"] == 2, data["counts"]
    assert [j["pruned"] for j in data["jobs"] if j["state"] == "cancelled"] == [False, False]


def test_a_driver_killed_mid_night_is_told_in_the_first_line(spool, workdir):
    """A driver killed with kill -9 and the drain started again: the report covers both drains, counts the job
    the killed one had started once, and its first line says that a driver died (it said "the last 2 drains"
    as if both had ended well; only --json's drains told of it)."""
    from conftest import kill_driver_mid_job

    set_config(spool, schedule=["* * * * *"])  # a night that opened at noon: both drains are of it, whatever the hour
    assert run_cli(["submit", "first"], stdin=b"true\n").code == 0
    kill_driver_mid_job(spool, workdir, "longjob", machine_dies=True)
    first = run_cli(["report", "--plain"]).out.splitlines()[0]
    assert "its jobs are recovered by the next driver of its host" in first, first  # not yet: its claim waits
    assert drain(spool).returncode == 0
    doc = run_cli(["report", "--json"]).json()
    [dead] = [d for d in doc["drains"] if d["reason"] == "died"]
    recovered = datetime.fromisoformat(dead["recovered"]).astimezone()  # the next driver's start, which recovered it
    assert recovered == datetime.fromisoformat(doc["drains"][1]["started"]), doc["drains"]
    first = run_cli(["report", "--plain"]).out.splitlines()[0]  # said once recovered as if it still waited: no more
    assert f"its jobs were recovered by the next driver of its host at {recovered:%H:%M}" in first, first
    assert "are recovered by" not in first, first
    assert len(doc["drains"]) == 2 and doc["counts"] == {"done": 2, "failed": 0, "cancelled": 0}
    assert sorted(job["name"] for job in doc["jobs"]) == ["first", "longjob"]
    first = run_cli(["report", "--plain"]).out.splitlines()[0]
    assert f"a driver died without finishing ({dead['host']}, pid {dead['pid']})" in first, first
    page = workdir / "night.html"
    assert run_cli(["report", "--html", str(page)]).code == 0
    assert f"a driver died without finishing ({dead['host']}, pid {dead['pid']})" in html.unescape(page.read_text())


def test_a_hand_started_driver_killed_before_the_night_opened_is_part_of_the_night(spool, workdir):
    """Drains started by hand, with no night open (no schedule): one killed with kill -9 mid-job, the next
    recovering its job. Status's and the report's last night left the killed drain out, with the job it had
    filed and the word that a driver died (a cron-started one, after the night opened, was counted)."""
    from conftest import kill_driver_mid_job

    set_config(spool, schedule=[])
    assert run_cli(["submit", "first"], stdin=b"true\n").code == 0
    kill_driver_mid_job(spool, workdir, "longjob", machine_dies=True)
    assert drain(spool).returncode == 0
    doc = run_cli(["report", "--json"]).json()
    assert [d["reason"] for d in doc["drains"]] == ["died", "drained"], doc["drains"]
    assert doc["counts"] == {"done": 2, "failed": 0, "cancelled": 0}, doc["counts"]
    dead = doc["drains"][0]
    first = run_cli(["report", "--plain"]).out.splitlines()[0]
    assert f"a driver died without finishing ({dead['host']}, pid {dead['pid']})" in first, first
    status = run_cli(["status", "--json"]).json()
    assert status["last_night"]["counts"] == doc["counts"], status["last_night"]


def test_a_job_left_running_by_a_dead_driver_says_when_it_started(spool, workdir):
    """While the driver that started a job is dead, the report says when the job started and that no driver
    files it (it said "started on vm since 18:16", which is no sentence)."""
    from conftest import kill_driver_mid_job

    kill_driver_mid_job(spool, workdir, "orphaned")
    [row] = run_cli(["report", "--json"]).json()["waiting"]
    assert row["state"] == "running"
    assert re.fullmatch(r"started on (\S+) at \d\d:\d\d, not filed; its host \1 has no live driver: the next driver "
                        r"there, or onite recover --host \1 if \1 is gone for good, recovers it",
                        row["reason"]), row["reason"]


def test_pruned_says_the_keep_that_pruned_not_the_one_set_since(spool):
    """``keep = 1`` pruned ``first``; keep raised to 50 since. The report said ``(keep = 50)``, which would
    have kept it: it says the keep the driver's ``pruned`` line recorded."""
    set_config(spool, keep=1)
    for name, body in (("first", b"exit 3\n"), ("second", b"true\n")):
        assert run_cli(["submit", name], stdin=body).code == 0
    assert drain(spool).returncode == 0
    set_config(spool, keep=50)
    r = run_cli(["report", "--plain"])
    assert r.code == 0 and "1 done, 1 failed, 1 earlier results pruned (keep = 1)" in r.out, r.out
    assert "its record and output were pruned (keep = 1)" in r.out, r.out
    assert json.loads(run_cli(["report", "--json"]).out)["keep"] == 1
