"""onite list --json, and the listing's local times."""

import json
import time
from datetime import datetime

import pytest

from conftest import ROOT, drain, needs_root, run_cli
from onite.app import listing
from onite.spool.paths import SpoolDir
from onite.api import Spool


def test_list_json_lists_every_kind_of_job(spool, cli):
    """Every kind of job: urgent, each priority, held, another user's, running, finished, cancelled."""
    api = Spool(spool)
    api.submit_many([(f"u{i}", "true\n") for i in range(3)], urgent=True)
    api.submit_many([(f"p{i}", "true\n") for i in range(20)], priority=2)
    api.submit_many([(f"h{i}", "true\n") for i in range(5)], priority=7, hold=True)
    assert cli(["submit", "done1"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0  # runs u*, p* and done1; the held h* stay
    api.submit_many([(f"q{i}", "exit 3\n") for i in range(4)], priority=4)
    assert cli(["cancel", "q1"]).code == 0
    if ROOT:
        assert run_cli(["submit", "theirs", "-p", "3"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    target = SpoolDir(spool)
    now = datetime.now().astimezone()
    doc = json.loads(listing.list_json(target, include_all=True, now=now))
    states = {job["name"]: job["state"] for job in doc["jobs"]}
    assert states["u0"] == "done" and states["h0"] == "held" and states["q0"] == "queued"
    assert states["q1"] == "cancelled" and (states["nobody:theirs"] == "queued" if ROOT else True)
    assert [job["name"] for job in doc["jobs"] if job["state"] == "queued"][0] == ("nobody:theirs" if ROOT else "q0")
    assert listing.list_json(target, now=now) == cli(["list", "--json"]).out.rstrip("\n")


def test_an_empty_queue(spool):
    assert json.loads(listing.list_json(SpoolDir(spool)))["jobs"] == []


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/St_Johns", "Australia/Lord_Howe"])
def test_local_times_match_astimezone_across_offset_changes(zone, monkeypatch):
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        clock = listing._clock()
        # around the 2026 changes of offset in each of those zones, and plain days
        starts = [datetime(2026, month, day).timestamp() for month, day in
                  [(3, 29), (10, 25), (3, 8), (11, 1), (4, 5), (10, 4), (6, 1)]]
        for start in starts:
            for step in range(0, 2 * 86400, 599):
                ns = int((start + step) * 1e9) + 123_456_789
                assert clock(ns) == listing._when(ns)
                assert clock(ns).isoformat() == listing._when(ns).isoformat()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_big_list_is_plain_text_laid_out_as_the_table(spool, cli):
    """Past LARGE_TABLE rows `onite list` skips rich (a minute for 100,000 rows); the layout is the same."""
    import io

    from rich.console import Console

    from onite.cli import render

    api = Spool(spool)
    api.submit_many([(f"a-much-longer-name-{i}", "exit 1\n" if i == 1 else "true\n") for i in range(3)], urgent=True)
    assert drain(spool).returncode == 0
    api.submit_many([(f"q{i}", "true\n") for i in range(4)], priority=2)
    api.submit("held", "true\n", priority=7, hold=True)
    target = SpoolDir(spool)
    now = datetime.now().astimezone()
    for detailed in (False, True):
        views = listing.list_jobs(target, include_all=detailed, now=now)
        assert any(view.waiting for view in views)  # the held job
        spec = render.job_table(views, now, detailed=detailed, waiting=True)
        out = io.StringIO()
        Console(file=out, width=300, color_system=None).print(render.rich_table(spec))
        rich_lines = [line.rstrip() for line in out.getvalue().splitlines()]
        plain = list(render.plain_table(spec.columns, spec.rows))
        assert plain == rich_lines and len(plain) == len(views) + 1
    big = [(f"j{i:05d}", "true\n") for i in range(render.LARGE_TABLE + 1 - 5)]
    api.submit_many(big, priority=5)
    r = cli(["list"])
    assert r.code == 0 and r.out.splitlines()[0].split() == ["#", "NAME", "USER", "PRI", "AGE", "STATE", "WAITING"]
    assert r.out.splitlines()[-1].split()[-2:] == ["held", "held"]
    assert len(r.out.splitlines()) == render.LARGE_TABLE + 2 and "\x1b" not in r.out


def test_list_says_why_each_queued_job_waits_in_its_table_and_json(spool, cli):
    """The reasons of queue.evaluate, as status gives them (onite.app.status.waiting_jobs), for the jobs the caller
    may read; another user's job is only known held or not (its mode is public, its file is not)."""
    assert cli(["submit", "first"], stdin=b"true\n").code == 0
    assert cli(["submit", "ready", "-p", "1"], stdin=b"true\n").code == 0
    assert cli(["submit", "later", "--at", "2099-01-02T03:04"], stdin=b"true\n").code == 0
    assert cli(["submit", "after-it", "--after", "first"], stdin=b"true\n").code == 0
    assert cli(["submit", "elsewhere", "--host", "node-zz"], stdin=b"true\n").code == 0
    assert cli(["submit", "held", "--hold"], stdin=b"true\n").code == 0
    if ROOT:
        assert run_cli(["submit", "theirs", "--at", "2099-01-01T00:00"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
        assert run_cli(["submit", "theirs-held", "--hold"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    jobs = {j["name"]: (j["waiting_kind"], j["waiting"]) for j in cli(["list", "--json"]).json()["jobs"]}
    expected = {"ready": ("", ""), "first": ("", ""), "later": ("not_before", "not before 2099-01-02 03:04"),
                "after-it": ("after", "after first (queued)"),
                "elsewhere": ("pinned", "pinned to host node-zz, which no driver drains (none has in 8 days)"),
                "held": ("held", "held")}
    if ROOT:  # root reads every job; nobody sees root's jobs (as root:NAME) as they see theirs
        expected.update({"nobody:theirs": ("not_before", "not before 2099-01-01 00:00"),
                         "nobody:theirs-held": ("held", "held")})
        seen = {j["name"]: (j["waiting_kind"], j["waiting"])
                for j in run_cli(["list", "--json"], user="nobody", cwd="/tmp").json()["jobs"]}
        assert seen == {**{f"root:{n}": (None, None) for n in expected
                           if n not in ("held", "nobody:theirs", "nobody:theirs-held")},
                        "root:held": ("held", "held"), "theirs": ("not_before", "not before 2099-01-01 00:00"),
                        "theirs-held": ("held", "held")}
    assert jobs == expected
    import re

    # piped, the table is one line per row, cells two or more spaces apart, "-" for an empty one
    table = {row[1]: row for row in (re.split(r" {2,}", line) for line in cli(["list"]).out.splitlines()[1:])}
    assert table["after-it"][-2:] == ["queued", "after first (queued)"]
    assert table["later"][-2:] == ["queued", "not before 2099-01-02 03:04"]
    assert table["ready"][-2:] == ["queued", "-"]
    # a dependency that failed: the job will fail when a driver next looks
    assert cli(["cancel", "first"]).code == 0
    jobs = {j["name"]: (j["waiting_kind"], j["waiting"]) for j in cli(["list", "--json"]).json()["jobs"]}
    assert jobs["after-it"] == ("will_fail", "will fail: dependency first was cancelled")


def test_piped_list_is_one_line_per_row(spool, cli, workdir):
    """Piped, or with --plain, each job is one line however narrow COLUMNS is: cells two or more spaces apart,
    ``-`` for an empty one (docs/cli.md); grep and awk see the table as it is."""
    import os
    import re

    from onite.cli import render

    long_name = "a-name-far-longer-than-the-terminal-is-wide-" + "x" * 40
    assert cli(["submit", long_name, "-p", "2"], stdin=b"exit 3\n").code == 0
    gone = workdir / "gone-with-a-long-directory-name-that-makes-the-reason-long"
    gone.mkdir()
    assert run_cli(["submit", "vanished", "-p", "2"], stdin=b"true\n", cwd=gone).code == 0
    gone.rmdir()
    assert drain(spool).returncode == 0
    assert cli(["submit", "queued-one", "-p", "3"], stdin=b"true\n").code == 0
    env = dict(os.environ, COLUMNS="50")
    for args in (["list", "--all"], ["list", "--all", "--plain"], ["list", "--by-host"]):
        r = cli(args, env=env)
        assert r.code == 0 and "\x1b" not in r.out, r
        cells = [re.split(r" {2,}", line) for line in r.out.splitlines()]
        titles = next(row for row in cells if row[0] == "#")
        rows = [row for row in cells if row[0] == "-" or row[0].isdigit()]
        assert titles == [t for t, _ in render.job_table([], None, detailed=True).columns]
        assert sorted(row[1] for row in rows) == sorted([long_name, "queued-one", "vanished"])
        assert all(len(row) == len(titles) for row in rows), rows
        vanished = next(row for row in rows if row[1] == "vanished")
        assert vanished[5] == "failed" and vanished[-1] == f"its directory {gone} no longer exists"
        queued = next(row for row in rows if row[1] == "queued-one")
        assert queued[0] == "1" and queued[6:] == ["-"] * 6
    short = [re.split(r" {2,}", line) for line in cli(["list"], env=env).out.splitlines()]
    assert short[0] == ["#", "NAME", "USER", "PRI", "AGE", "STATE"] and short[1][:2] == ["1", "queued-one"]


@pytest.mark.parametrize("columns", ["1", "12"])
def test_a_terminal_too_narrow_for_a_table_gets_the_plain_lines(spool, columns):
    """On a terminal of 1 to 10 columns ``onite list`` printed blank lines or ``…``: a
    table had no room for a name. Below 40 columns it writes the plain lines, which the terminal folds."""
    from conftest import OnTerminal

    assert run_cli(["submit", "narrowjob"], stdin=b"true\n").code == 0
    code, seen = OnTerminal(spool, ["list"], stdin=False, env={"COLUMNS": columns, "LINES": "24"}).finish()
    assert code == 0 and b"narrowjob" in seen, seen


@pytest.mark.parametrize("how", ["COLUMNS", "pty"])
def test_list_all_at_80_columns_keeps_every_name_whole_and_each_row_on_one_line(spool, how, monkeypatch):
    """At 80 columns (COLUMNS=80, or a terminal 80 wide) ``list --all`` leaves out the least useful columns (the
    host, the memory …) rather than wrap a name, cut a user or a title, or split RESULT across lines; a RESULT
    too long for what is left ends in … (rich, left to itself, narrowed every column alike: ``USE``, ``P``)."""
    import re

    from conftest import OnTerminal

    names = ["build-nightly-reports-for-finance", "bob-held-longer-name-here", "slowish-task"]
    api = Spool(spool)
    api.submit(names[0], "true\n", priority=2)
    api.submit(names[1], "exit 3\n")
    api.submit(names[2], "sleep 30\n", timeout="1s")
    api.submit("its-dependant", "true\n", after=[names[1]])  # fails: 'dependency bob-held-longer-name-here failed'
    assert drain(spool).returncode == 0
    api.submit("queued-after-night-job-with-long-name", "true\n", hold=True)
    monkeypatch.delenv("COLUMNS", raising=False)
    term = OnTerminal(spool, ["list", "--all"], env=({"COLUMNS": "80"} if how == "COLUMNS" else {}),
                      columns=80 if how == "pty" else 200)
    code, seen = term.finish()
    assert code == 0, seen
    text = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode())
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").splitlines()]
    assert all(len(line) <= 80 for line in lines), text
    assert len(lines) == 6, text  # the titles and one line a job
    every = ["#", "NAME", "USER", "PRI", "AGE", "STATE", "WAITING", "HOST", "STARTED", "TOOK", "MEM", "CPU", "RESULT"]
    titles = lines[0].split()  # whole titles, in order, the user, the state and how each ended among them
    assert titles == [title for title in every if title in titles] and {"USER", "STATE", "RESULT"} <= set(titles), text
    assert any(line.endswith("…") and "its-dependant" in line for line in lines), text
    for name in names + ["queued-after-night-job-with-long-name", "its-dependant"]:
        assert sum(name in line for line in lines) == 1, text
    assert any(line.endswith("timeout") for line in lines) and any(" root " in line for line in lines[1:]), text


def test_at_80_columns_list_all_leaves_out_when_and_where_before_it_cuts_how_a_job_ended(spool, monkeypatch):
    """``list --all`` at 80 columns: the start, memory and age go before the RESULT is cut (it was cut to
    ``dependency bu…`` beside them); a column with nothing in it (here the position) before any; the user, priority
    and duration stay."""
    import re

    from conftest import OnTerminal

    api = Spool(spool)
    api.submit("build-step-one", "exit 3\n")
    api.submit("its-dependant", "true\n", after=["build-step-one"])
    assert drain(spool).returncode == 0
    monkeypatch.delenv("COLUMNS", raising=False)
    code, seen = OnTerminal(spool, ["list", "--all"], columns=80).finish()
    assert code == 0, seen
    text = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode())
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").splitlines()]
    assert all(len(line) <= 80 for line in lines), text
    assert any(line.endswith("dependency build-step-one failed") for line in lines), text
    # no job is queued: the empty position goes first, and the age stays
    assert lines[0].split() == ["NAME", "USER", "PRI", "AGE", "STATE", "TOOK", "RESULT"], text


def test_a_not_before_time_typed_in_another_zone_is_listed_in_the_viewers_local_time(spool, monkeypatch):
    """A job spooled ``--at 03:00`` by a user in New York waits until 08:00 UTC: a viewer whose zone is UTC
    sees 08:00, not the submitter's wall time without its zone."""
    import time as time_module

    monkeypatch.setenv("TZ", "UTC")
    time_module.tzset()
    year = datetime.now().year + 1
    r = run_cli(["submit", "ny", "--at", f"{year}-01-10T03:00-05:00"], stdin=b"true\n",
                user="nobody" if ROOT else None, cwd="/tmp")
    assert r.code == 0, r
    try:
        out = run_cli(["list", "--plain"]).out
        assert f"not before {year}-01-10 08:00" in out and "03:00" not in out, out
    finally:
        monkeypatch.undo()
        time_module.tzset()


@needs_root
def test_a_queued_jobs_limits_are_listed_to_its_owner_only(spool):
    """list --json gives a queued job's mem, cpus and timeout (as edited) to whoever may read its file: nobody sees
    their own, and nothing of root's (job files are private)."""
    assert run_cli(["submit", "mine", "--mem", "300M", "--timeout", "90m"], stdin=b"true\n", user="nobody",
                   cwd="/tmp").code == 0
    assert run_cli(["submit", "roots", "--cpus", "1"], stdin=b"true\n").code == 0
    seen = {j["name"]: (j["mem"], j["cpus"], j["timeout"])
            for j in run_cli(["list", "--all", "--json"], user="nobody", cwd="/tmp").json()["jobs"]}
    assert seen == {"mine": (300, None, 5400.0), "root:roots": (None, None, None)}, seen
    by_root = {j["name"]: j["cpus"] for j in run_cli(["list", "--all", "--json"]).json()["jobs"]}
    assert by_root == {"nobody:mine": None, "roots": 1}, by_root
