"""Recurring jobs: templates, `onite recur`, instances spooled by `onite run` (real CLI, real files, real users)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, strategies as st

from conftest import (REPO, as_user, drain, log_lines, needs_root, nobody, read_so_far, result, run_cli, set_config,
                      sparse_templates, wait_for)
from onite.core.job import Job
from onite.core.jobfile import decode, encode
from onite.app.recur import TemplateView, templates_json
from onite.core.recurring import instance_job, instance_name, rule_fields, rule_of, template_of
from onite.core.schedule import fire_times
from onite.core.rules import describe, parse_rule

BERLIN = ZoneInfo("Europe/Berlin")
WHEN = datetime(2026, 11, 22, 14, 3, 11, 512345, tzinfo=timezone(timedelta(hours=1)))


def onite(*args: str, tz: str, stdin: bytes = b"", spool: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m onite` in a fresh process with its own TZ (a forked child would keep ours)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TZ": tz, "PYTHONPATH": str(REPO)}
    if spool is not None:
        env["ONITE_SPOOL"] = str(spool)
    return subprocess.run([sys.executable, "-m", "onite", *args], input=stdin, env=env, capture_output=True,
                          timeout=60)


def template(**overrides) -> Job:
    rule = overrides.pop("rule", parse_rule(every="25m", offset="2m"))
    fields = dict(name="root:backup", priority=7, submitted=WHEN, host="vm", umask=0o022, cwd=b"/srv",
                  env={b"PATH": b"/usr/bin:/bin", b"ODD": b"a\nb\xff"}, body=b"#!/bin/sh\necho backup\n",
                  extra=rule_fields(rule))
    fields.update(overrides)
    return Job(**fields)


# ---- the template format (pure) ----------------------------------------------------------


@pytest.mark.parametrize("rule", [parse_rule(cron="0 20 * * 1-5"), parse_rule(every="25m", offset="2m"),
                                  parse_rule(every="1h"), parse_rule(every="90s")], ids=describe)
def test_template_round_trip_is_exact(rule):
    job = template(rule=rule, timeout=timedelta(hours=2), retries=1, after=("root:build",), pin="node2")
    data = encode(job)
    assert decode(data) == job and encode(decode(data)) == data
    assert rule_of(decode(data)) == rule
    assert b"\nrecur-" in data.split(b"\n\n")[0]


def test_template_header_reads_as_the_docs_say():
    head = encode(template()).split(b"\n\n")[0].decode()
    assert "recur-every: 25m\nrecur-offset: 2m\n" in head
    assert "recur-cron: 0 3 * * *" in encode(template(rule=parse_rule(cron="0  3 * * *"))).decode()


def test_a_job_is_not_a_template():
    with pytest.raises(Exception, match="not a recurring-job template"):
        rule_of(template(extra=()))


def test_instance_is_the_template_at_its_fire_time():
    fire = datetime(2026, 11, 22, 20, 0, tzinfo=BERLIN)
    now = fire + timedelta(seconds=3)
    inst = instance_job(template(extra=(("x-note", "kept"),) + rule_fields(parse_rule(every="1h"))), "root:backup",
                        fire, now, priorities=7)
    assert inst.name == "root:backup-20261122T2000" and inst.recur == "root:backup"
    assert inst.not_before == fire and inst.submitted == now
    assert inst.extra == (("x-note", "kept"),) and inst.body == b"#!/bin/sh\necho backup\n"
    assert inst.env == template().env and inst.cwd == b"/srv" and inst.priority == 7
    assert decode(encode(inst)) == inst
    assert instance_job(template(), "root:backup", fire, now, priorities=4).priority == 4  # the spool has fewer now


def test_instance_names_are_one_per_fire():
    assert instance_name("t", datetime(2026, 1, 5, 0, 27, tzinfo=BERLIN)) == "t-20260105T0027"
    assert instance_name("t", datetime(2026, 1, 5, 0, 1, 30, tzinfo=BERLIN)) == "t-20260105T000130"
    # the hour the clocks repeat: a periodic rule fires at both 02:17s, and gets two names
    fires = fire_times(parse_rule(cron="17 * * * *"), datetime(2026, 10, 25, 1, 30, tzinfo=BERLIN), 3)
    names = [instance_name("t", f) for f in fires]
    assert names == ["t-20261025T0217", "t-20261025T0217.2", "t-20261025T0317"]
    assert [template_of(name) for name in names] == ["t"] * 3
    assert [template_of(name) for name in ("t", "t-2026", "-20261025T0217", "t-20261025T0217x")] == [None] * 4


@given(name=st.from_regex(r"[a-z0-9_][a-z0-9_.-]{0,40}:[a-z0-9_][a-z0-9_.-]{0,40}", fullmatch=True),
       fire=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                         timezones=st.sampled_from([BERLIN, timezone.utc, ZoneInfo("America/St_Johns")])))
def test_a_runs_name_gives_back_its_template(name, fire):
    """What the driver reads in a queue's names (template_of) is what it wrote (instance_name), for every fire."""
    assert template_of(instance_name(name, fire)) == name


# ---- onite recur next: seed 002's table, exactly -------------------------------------------


SEED_002 = [
    (["--cron", "17 * * * *"], ["00:17", "01:17", "02:17"]),
    (["--every", "4m"], ["00:04", "00:08", "00:12", "00:16"]),
    (["--every", "6m", "--offset", "1m"], ["00:07", "00:13", "00:19"]),
    (["--every", "25m", "--offset", "2m"], ["00:27", "00:52", "01:17", "01:42"]),
    (["--every", "100m"], ["01:40", "03:20", "05:00"]),  # the seed's "5:40" is a slip: 3 × 100m is 05:00
]


@pytest.mark.parametrize(("rule", "expected"), SEED_002, ids=lambda v: " ".join(v) if "--" in v[0] else None)
def test_recur_next_seed_002(cli, rule, expected):
    r = cli(["recur", "next", *rule, "--from", "2026-01-05T00:00", "-n", str(len(expected))])
    assert r.code == 0, r
    times = [datetime.fromisoformat(line) for line in r.out.splitlines()]
    assert [t.strftime("%Y-%m-%d %H:%M") for t in times] == [f"2026-01-05 {e}" for e in expected]
    assert all(t.tzinfo is not None for t in times)


def test_recur_next_prints_iso_8601_exactly():
    r = onite("recur", "next", "--from", "2026-01-05T00:00", "--every", "25m", "--offset", "2m", "-n", "4",
              tz="Europe/Berlin")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == ["2026-01-05T00:27:00+01:00", "2026-01-05T00:52:00+01:00",
                                              "2026-01-05T01:17:00+01:00", "2026-01-05T01:42:00+01:00"]
    r = onite("recur", "next", "--from", "2026-01-05T00:00", "--every", "100m", "-n", "3", tz="UTC")
    assert r.stdout.decode().splitlines() == ["2026-01-05T01:40:00+00:00", "2026-01-05T03:20:00+00:00",
                                              "2026-01-05T05:00:00+00:00"]


@pytest.mark.parametrize(("start", "expected"), [
    # spring forward: 02:30 does not exist on 29 March; it fires once, at 03:00 (the first instant after the jump)
    ("2026-03-28T12:00", ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
    # fall back: 02:30 happens twice on 25 October; it fires once, at the first
    ("2026-10-24T12:00", ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
])
def test_recur_next_dst_02_30_fires_once_in_berlin(start, expected):
    r = onite("recur", "next", "--cron", "30 2 * * *", "--from", start, "-n", "2", tz="Europe/Berlin")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == expected


def test_recur_next_of_a_template_and_usage_errors(spool, cli):
    assert cli(["recur", "add", "t", "--every", "100m"], stdin=b"true\n").code == 0
    r = cli(["recur", "next", "t", "--from", "2026-01-05T00:00", "-n", "2"])
    assert r.code == 0 and [line[11:16] for line in r.out.splitlines()] == ["01:40", "03:20"]
    assert cli(["recur", "next", "nosuch"]).code == 1
    for args in (["recur", "next"], ["recur", "next", "t", "--every", "5m"], ["recur", "next", "--offset", "2m"],
                 ["recur", "next", "--cron", "0 25 * * *"], ["recur", "next", "--every", "1m", "--from", "soon"]):
        r = cli(args)
        assert r.code == 2 and r.err.startswith("onite: ") and r.err.count("\n") == 1, (args, r)


# ---- onite recur add -------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--cron", "61 * * * *"], "'61' is not a valid minute field"),
    (["--cron", "0 20 * *"], "has 4 fields, not 5"),
    (["--cron", "@daily"], "cron shorthand '@daily' is not supported"),
    (["--every", "30s"], "interval 30s is too short"),
    (["--every", "2d"], "longer than a day"),
    (["--every", "5m", "--offset", "5m"], "offset 5m is not shorter than the interval 5m"),
    (["--every", "soon"], "--every 'soon': expected"),
    (["--cron", "0 20 * * *", "--every", "1h"], "both --cron"),
    (["--cron", "0 20 * * *", "--offset", "2m"], "goes with --every"),
    ([], "a recurring job needs a rule"),
    (["--every", "1h", "-p", "9"], "-p '9': expected a priority from 1 (first) to 7 (last)"),
])
def test_invalid_rules_are_refused_at_add_time(spool, cli, args, message):
    r = cli(["recur", "add", "nightly", *args], stdin=b"true\n")
    assert r.code == 2, r
    assert r.err.startswith("onite: ") and message in r.err and r.err.count("\n") == 1 and "Traceback" not in r.err
    assert list((spool / "recur").iterdir()) == []


@pytest.mark.parametrize("name", ["../x", "a/b", "", "has space", ".hidden", "x" * 77])
def test_bad_template_names_write_nothing(spool, cli, name):
    r = cli(["recur", "add", name, "--every", "1h"], stdin=b"true\n")
    assert r.code == 2 and r.err.startswith("onite: "), r
    assert list((spool / "recur").iterdir()) == []


def test_add_stores_a_private_template_and_refuses_a_duplicate(spool, cli, workdir):
    env = {"PATH": "/usr/bin:/bin", "ONITE_SPOOL": str(spool), "MULTI": "one\ntwo"}
    r = run_cli(["recur", "add", "report", "--cron", "0 20 * * 1-5", "-p", "2", "--after", "build", "--timeout",
                 "1h", "--retries", "2", "--host", "node2"], stdin=b"echo report\n", env=env, cwd=workdir, umask=0o027)
    assert r.code == 0, r
    assert r.out.startswith("report: cron '0 20 * * 1-5'; next at ")
    assert r.err.startswith("report: no drain is scheduled, so nothing will run it — "), r  # what spools its runs
    path = spool / "recur" / "root:report"
    st = path.stat()
    assert oct(st.st_mode & 0o777) == "0o600" and st.st_uid == os.geteuid()
    job = decode(path.read_bytes())
    assert job.name == "root:report" and job.priority == 2 and job.after == ("root:build",) and job.retries == 2
    assert job.timeout == timedelta(hours=1) and job.pin == "node2" and job.umask == 0o027
    assert job.cwd == os.fsencode(workdir) and job.env == {k.encode(): v.encode() for k, v in env.items()}
    assert job.body == b"echo report\n" and job.not_before is None and job.recur is None
    assert rule_of(job) == parse_rule(cron="0 20 * * 1-5")
    again = cli(["recur", "add", "report", "--every", "1h"], stdin=b"true\n")
    assert again.code == 3 and "a recurring job named 'report' already exists" in again.err
    assert "remove it first: onite recur remove report" in again.err, again  # the command to run, not NAME
    assert decode(path.read_bytes()) == job


def test_an_add_whose_name_was_taken_and_freed_as_it_wrote_adds_it(spool, monkeypatch):
    """20 concurrent ``recur add rc`` and ``recur remove rc``: an add found the name taken by another add, which a
    remove then freed before the add looked whose it was: `a recurring job named 'rc' already exists (?)`, exit
    3, of a name nothing held. It adds the template."""
    import onite.app.recur as recur

    original = recur.create_file
    calls = []

    def taken_then_freed(folder, name, data, **kwargs):
        calls.append(name)
        if len(calls) == 1:  # another add takes the name, a remove frees it, then this one's write is refused
            original(folder, name, b"x", **kwargs)
            os.unlink(folder / name)
            from onite.core.errors import Refused

            raise Refused(f"{folder / name} already exists", "pick another name (or use --unique)")
        return original(folder, name, data, **kwargs)

    monkeypatch.setattr(recur, "create_file", taken_then_freed)
    r = run_cli(["recur", "add", "rc", "--every", "1h"], stdin=b"true\n")
    monkeypatch.undo()
    assert r.code == 0 and "(?)" not in r.err, r
    assert decode((spool / "recur" / "root:rc").read_bytes()).body == b"true\n"


def test_urgent_templates_need_an_admin(spool):
    if os.geteuid() != 0:
        r = run_cli(["recur", "add", "u", "--every", "1h", "--urgent"], stdin=b"true\n")
        assert r.code == 3 and "admins" in r.err
    else:
        r = run_cli(["recur", "add", "u", "--every", "1h", "--urgent"], stdin=b"true\n", user="nobody")
        assert r.code == 3 and "admins" in r.err, r
        assert run_cli(["recur", "add", "u", "--every", "1h", "--urgent"], stdin=b"true\n").code == 0


# ---- list, remove, ownership ----------------------------------------------------------------------


def test_list_json_and_status(spool, cli):
    assert cli(["recur", "add", "hourly", "--cron", "17 * * * *", "-p", "3"], stdin=b"true\n").code == 0
    assert cli(["recur", "add", "often", "--every", "25m", "--offset", "2m"], stdin=b"true\n").code == 0
    listed = cli(["recur", "list", "--json"]).json()
    assert listed["version"] == 1
    by_name = {t["name"]: t for t in listed["recurring"]}
    assert sorted(by_name) == ["hourly", "often"]
    user = pwd.getpwuid(os.geteuid()).pw_name
    assert by_name["hourly"]["rule"] == "cron '17 * * * *'" and by_name["hourly"]["priority"] == 3
    assert by_name["often"]["rule"] == "every 25m offset 2m" and by_name["often"]["priority"] == 4
    assert all(t["user"] == user and t["problem"] is None for t in listed["recurring"])
    now = datetime.fromisoformat(listed["now"])
    nxt = datetime.fromisoformat(by_name["hourly"]["next"])
    assert nxt.minute == 17 and timedelta(0) < nxt - now <= timedelta(hours=1)
    table = cli(["recur", "list"])
    assert table.code == 0 and "hourly" in table.out and "every 25m offset 2m" in table.out
    status = cli(["status", "--json"]).json()
    assert [r["name"] for r in status["recurring"]] == sorted(by_name, key=lambda n: by_name[n]["next"])
    assert set(status["recurring"][0]) >= {"name", "user", "rule", "next", "priority"}
    assert status["schedule_next"] is not None and status["next_drain"] is None  # nothing starts drains here
    human = cli(["status"])
    assert human.code == 0 and "recurring hourly" in human.out and "next run" in human.out


def test_templates_json_is_the_documented_document():
    now = datetime(2026, 11, 22, 21, 0, tzinfo=timezone.utc)
    view = TemplateView(name="nightly", uid=1000, user="alice", rule="cron '0 20 * * *'", priority=3, urgent=False,
                        next=now + timedelta(hours=23), last=None)
    text = templates_json([view], now)
    assert json.loads(text) == {"version": 1, "now": "2026-11-22T21:00:00+00:00", "recurring": [
        {"name": "nightly", "user": "alice", "uid": 1000, "rule": "cron '0 20 * * *'", "priority": 3,
         "urgent": False, "next": "2026-11-23T20:00:00+00:00", "last": None, "problem": None, "waits_for": None}]}
    assert text.startswith('{\n "version": 1,') and templates_json([], now).endswith('"recurring": []\n}')


def test_empty_list(spool, cli):
    assert cli(["recur", "list"]).out == "no recurring jobs\n"
    assert cli(["recur", "list", "--json"]).json()["recurring"] == []


@needs_root
@pytest.mark.root
def test_ownership_rules(spool, cli):
    r = run_cli(["recur", "add", "theirs", "--every", "1h", "-p", "5"], stdin=b"true\n", user="nobody")
    assert r.code == 0, r
    assert (spool / "recur" / "nobody:theirs").stat().st_uid == nobody().pw_uid
    assert cli(["recur", "add", "mine", "--every", "2h"], stdin=b"true\n").code == 0
    # root sees everything, another user's template by its key
    listed = {t["name"]: t for t in cli(["recur", "list", "--json"]).json()["recurring"]}
    assert listed["nobody:theirs"]["user"] == "nobody" and listed["nobody:theirs"]["rule"] == "every 1h"
    # nobody cannot read root's template: name and owner, but not its rule (until a driver recorded it)
    seen = {t["name"]: t for t in run_cli(["recur", "list", "--json"], user="nobody").json()["recurring"]}
    assert seen["root:mine"]["user"] == "root" and seen["root:mine"]["rule"] == "?"
    assert seen["theirs"]["rule"] == "every 1h"
    # nobody may not remove root's template; a "mine" of nobody's own is another template, beside root's
    r = run_cli(["recur", "remove", "root:mine"], user="nobody")
    assert r.code == 3 and "belongs to root" in r.err and (spool / "recur" / "root:mine").exists()
    assert run_cli(["recur", "add", "mine", "--every", "1h"], stdin=b"true\n", user="nobody").code == 0
    assert sorted(os.listdir(spool / "recur")) == ["nobody:mine", "nobody:theirs", "root:mine"]
    r = run_cli(["recur", "remove", "nosuch"], user="nobody")  # the name as the user wrote it, not nobody:nosuch
    assert r.code == 1 and r.err == "onite: no recurring job 'nosuch' — see onite recur list\n", r
    # own templates: yes; root: any
    assert run_cli(["recur", "remove", "theirs"], user="nobody").code == 0
    assert cli(["recur", "add", "theirs2", "--every", "1h"], stdin=b"true\n").code == 0
    assert cli(["recur", "remove", "mine", "theirs2", "nobody:mine"]).code == 0
    assert list((spool / "recur").iterdir()) == []


# ---- instances spooled by `onite run` -----------------------------------------------------------


def plant(spool: Path, key: str, job: Job, *, owner: tuple[int, int] | None = None, mode: int = 0o600) -> Path:
    """A template as `recur add` would have written it at ``key``, but created long ago (its `submitted`)."""
    from onite.spool.files import create_file

    create_file(spool / "recur", key, encode(job), mode=mode, owner=owner)
    return spool / "recur" / key


def old_template(body: bytes, rule, *, days: int = 3, key: str = "root:x") -> Job:
    return Job(name=key, priority=3, submitted=datetime.now().astimezone() - timedelta(days=days),
               host="vm", umask=0o022, cwd=b"/", env={b"PATH": b"/usr/bin:/bin"}, body=body, extra=rule_fields(rule))


def instances(spool: Path, template_key: str) -> list[str]:
    """The keys of the finished instances of the template ``template_key``."""
    return sorted(p.name for p in (spool / "jobsdone").iterdir()
                  if p.name.startswith(template_key + "-") and "@" not in p.name)


def test_run_spools_one_instance_for_many_missed_fires(spool, workdir):
    trace = workdir / "trace"
    # daily, two hours ago: three days of fires were missed, and none comes during the test
    expected = (datetime.now().astimezone() - timedelta(hours=2)).replace(second=0, microsecond=0)
    rule = parse_rule(cron=f"{expected.minute} {expected.hour} * * *")
    plant(spool, "root:tick", old_template(f"date >> {trace}\n".encode(), rule, key="root:tick"))
    proc = drain(spool)
    assert proc.returncode == 0, proc.stderr
    done = instances(spool, "root:tick")
    assert done == [f"root:tick-{expected:%Y%m%dT%H%M}"]  # the missed fires coalesce into the latest one
    rec = result(spool, done[0])
    assert rec["state"] == "done" and rec["recur"] == "root:tick"
    fire = expected
    job = decode((spool / "jobsdone" / done[0]).read_bytes())
    assert job.not_before == fire and job.recur == "root:tick" and not any(k.startswith("recur-") for k, _ in job.extra)
    spooled = [line for line in log_lines(spool) if " recur-spooled " in line]
    assert len(spooled) == 1 and "earlier fire(s) not spooled" in spooled[0]
    state = json.loads((spool / "recur.state").read_text())["templates"]["root:tick"]
    assert datetime.fromisoformat(state["last"]) == fire and state["rule"] == describe(rule)
    # the next run spools nothing: that fire is done, the next one has not come
    drain(spool)
    assert instances(spool, "root:tick") == done
    assert len([line for line in log_lines(spool) if " recur-spooled " in line]) == 1
    # even without recur.state, a fire whose instance ran is never spooled again
    (spool / "recur.state").unlink()
    drain(spool)
    assert instances(spool, "root:tick") == done
    assert any(" recur-skip " in line and "spooled already" in line for line in log_lines(spool))


@needs_root
@pytest.mark.root
def test_instances_belong_to_the_templates_owner(spool, workdir, cli):
    who = nobody()
    plant(spool, "nobody:theirs", old_template(b"id -un; umask\n", parse_rule(every="1h"), key="nobody:theirs"),
          owner=(who.pw_uid, who.pw_gid))
    drain(spool)
    (name,) = instances(spool, "nobody:theirs")
    assert (spool / "jobsdone" / name).stat().st_uid == who.pw_uid
    rec = result(spool, name)
    assert rec["state"] == "done" and rec["user"] == "nobody"
    assert (spool / "stdout" / name).read_text() == "nobody\n0022\n"
    # the owner sees the rule of their template; others see it from recur.state now
    seen = {t["name"]: t for t in run_cli(["recur", "list", "--json"], user="nobody").json()["recurring"]}
    assert seen["theirs"]["rule"] == "every 1h" and seen["theirs"]["last"] is not None


@pytest.mark.parametrize(("how", "reason"), [
    ("group-writable", "writable by users other than its owner"),
    ("symlink", "a symbolic link"),
    ("hardlink", "has 2 hard links"),
    ("not-a-template", "not a recurring-job template"),
    ("forgery", "a forgery: named as root's recurring job, but nobody's file"),
])
def test_untrusted_templates_are_refused_and_logged(spool, workdir, how, reason):
    job = old_template(f"touch {workdir}/ran\n".encode(), parse_rule(every="1h"))
    if how == "forgery":
        if os.geteuid() != 0:
            pytest.skip("needs root to plant a file of nobody's")
        plant(spool, "root:bad", job, owner=(nobody().pw_uid, nobody().pw_gid))
    elif how == "group-writable":
        plant(spool, "root:bad", job, mode=0o620)
    elif how == "symlink":
        target = plant(spool, "root:real", job)
        os.rename(target, workdir / "elsewhere")
        os.symlink(workdir / "elsewhere", spool / "recur" / "root:bad")
    elif how == "hardlink":
        plant(spool, "root:bad", job)
        os.link(spool / "recur" / "root:bad", workdir / "second-link")
    else:
        plant(spool, "root:bad", job._replace(extra=()))
    drain(spool)
    if how == "hardlink":  # a second link younger than 2 s may be a submit's link-then-unlink: look again
        wait_for(lambda: drain(spool) and any(" recur-refused root:bad " in line for line in log_lines(spool)),
                 what="the hard-linked template to be refused")
    assert not (workdir / "ran").exists() and instances(spool, "root:bad") == []
    refused = [line for line in log_lines(spool) if " recur-refused root:bad " in line]
    assert refused and reason in refused[0], log_lines(spool)


def test_run_scheduled_spools_recurring_jobs_even_outside_the_window(spool, workdir):
    now = datetime.now().astimezone()
    fire, until = now - timedelta(minutes=10), now - timedelta(minutes=5)
    set_config(spool, schedule=[f"{fire.minute} {fire.hour} * * *"], until=until.strftime("%H:%M"))
    plant(spool, "root:tick", old_template(b"true\n", parse_rule(every="1h"), key="root:tick"))
    assert drain(spool, "--scheduled").returncode == 0
    queued = [p.name for p in (spool / "jobs" / "P3").iterdir()]
    assert len(queued) == 1 and queued[0].startswith("root:tick-")  # spooled, waiting for the night


def test_piped_recur_list_is_one_line_per_template(spool, cli):
    """Piped (or --plain), each recurring job is one line, however narrow COLUMNS is (docs/cli.md)."""
    import re

    from onite.cli.render import RECUR_COLUMNS

    long_name = "a-recurring-job-with-a-name-longer-than-the-terminal-" + "y" * 20
    assert cli(["recur", "add", long_name, "--cron", "17 3 * * 1-5"], stdin=b"true\n").code == 0
    assert cli(["recur", "add", "often", "--every", "25m", "--offset", "2m"], stdin=b"true\n").code == 0
    env = dict(os.environ, COLUMNS="50")
    for args in (["recur", "list"], ["recur", "list", "--plain"]):
        lines = cli(args, env=env).out.splitlines()
        rows = [re.split(r" {2,}", line) for line in lines]
        assert rows[0] == [title for title, _ in RECUR_COLUMNS] and len(rows) == 3
        by_name = {row[0]: row for row in rows[1:]}
        assert by_name[long_name][2] == "cron '17 3 * * 1-5'" and by_name["often"][2] == "every 25m offset 2m"
        assert all(len(row) == len(RECUR_COLUMNS) and row[-1] == "-" for row in rows[1:])


def plant_as(user: str, spool: Path, key: str, job: Job) -> None:
    """``user`` writes the template ``job`` into recur/ by hand (mode 0600), as anyone may."""
    def write():
        fd = os.open(spool / "recur" / key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, encode(job))
        os.close(fd)

    assert as_user(write, user) == ("ok", None)


@needs_root
def test_a_run_its_owner_cancelled_is_not_spooled_again_by_the_next_driver(spool, workdir):
    """A driver killed (-9) after spooling a recurring job's run and before recur.state recorded it (or one that
    could not write recur.state) leaves that fire to the next driver, which must not spool it again while its
    run is anywhere. nobody cancelled the run meanwhile, so it waited in cancel/ for a driver to file it: the
    next driver spooled the same fire a second time, and ran it."""
    import shutil
    import signal

    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("ONITE_STRACE_TESTS") == "required":
            raise AssertionError("strace is required (ONITE_STRACE_TESTS=required) and missing")
        pytest.skip("needs strace (Debian: strace) to kill the driver between two steps")
    ledger = workdir / "ledger"
    plant_as("nobody", spool, "nobody:tick",
             old_template(f"echo ran >> {ledger}\n".encode(), parse_rule(every="1h"), key="nobody:tick"))
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    # the driver's first rename is its heartbeat's; its second, recur.state's, comes once the run is spooled
    killed = subprocess.run([strace, "-qq", "-o", "/dev/null", "-e", "trace=rename",
                             "-e", "inject=rename:signal=KILL:when=2", sys.executable, "-m", "onite", "run", "-q"],
                            env=env, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed
    [run] = [p.name for p in (spool / "jobs" / "P3").iterdir() if not p.name.startswith(".")]
    assert run.startswith("nobody:tick-") and not (spool / "recur.state").exists()
    r = run_cli(["cancel", run.partition(":")[2]], user="nobody", cwd="/tmp")
    assert r.code == 0 and "cancelled" in r.out, r
    assert drain(spool).returncode == 0
    assert not ledger.exists(), ledger.read_text()
    assert result(spool, run)["state"] == "cancelled"
    assert [line for line in log_lines(spool) if " recur-spooled " in line][1:] == []


@needs_root
@pytest.mark.attack
def test_a_templates_own_creation_time_cannot_make_the_driver_count_its_missed_fires_for_ever(spool):
    """nobody writes 20 templates by hand, each saying it was made in 1900 (``submitted:``, its owner's word), with a
    rule that fires on most days (``0 0 1-30 * *``): the driver counted the fires missed since then for its log
    line, asking croniter about each day, 10,000 of them: 7 to 10 s of root's ``onite run`` a template before it
    drained anything (and again at each fire, for a template whose ``submitted`` changed). Missed fires are counted
    back 7 days at most."""
    rule = parse_rule(cron="0 0 1-30 * *")
    for i in range(20):
        key = f"nobody:old{i}"
        plant_as("nobody", spool, key, old_template(b"true\n", rule, key=key)._replace(
            submitted=datetime(1900, 1, 2, tzinfo=timezone.utc), cwd=b"/tmp"))
    assert run_cli(["submit", "mine"], stdin=b"true\n").code == 0
    proc = drain(spool, timeout=60)  # each template cost 7 s or more: 20 of them, minutes
    assert proc.returncode == 0, proc.stderr
    assert result(spool, "root:mine")["state"] == "done"
    spooled = [line for line in log_lines(spool) if " recur-spooled nobody:old" in line]
    assert len(spooled) == 20 and all("in the 7 days before it (earlier not counted)" in line
                                      for line in spooled), spooled


@needs_root
def test_a_clock_set_back_holds_back_no_recurring_job(spool):
    """A driver ran while the clock was a year ahead (a wrong date, put right later): it spooled that day's fire
    and recur.state recorded it, so every fire until then counted as spooled: nobody's hourly template was silent
    for a year. A recorded time later than now holds nothing back (the fire spooled is still spooled once)."""
    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    r = run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 0, r

    class Log:
        def event(self, *args, **fields):
            pass

    def look(at):
        return RecurScheduler(SpoolDir(spool), Log(), euid=0).spool_due(at)  # as each `onite run` does

    now = datetime.now().astimezone()
    assert len(look(now + timedelta(days=365))) == 1  # the clock a year ahead
    back = now + timedelta(hours=2)  # put right, two hours on
    hour = back.replace(minute=0, second=0, microsecond=0)
    assert look(back) == [f"nobody:hourly-{hour:%Y%m%dT%H%M}"]
    assert look(back + timedelta(minutes=1)) == []  # that fire once
    next(spool.glob(f"jobs/*/nobody:hourly-{hour:%Y%m%dT%H%M}")).unlink()  # it ran (the year-ahead run still waits)
    assert look(back + timedelta(hours=1)) == [f"nobody:hourly-{hour + timedelta(hours=1):%Y%m%dT%H%M}"]


@needs_root
def test_a_templates_fires_wait_for_its_last_run_and_never_pile_up(spool):
    """An hourly job whose run is still queued (or running) at the next hour: each hour spooled one more run
    behind or beside it, without end. Its fires now wait for it: one recur-skip line names the run, and once it
    has ended the latest fire is spooled (the hour it waited through coalesced into it)."""
    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    r = run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 0, r
    said = []

    class Log:
        def event(self, event, *args, **fields):
            said.append((event, args, fields))

    scheduler = RecurScheduler(SpoolDir(spool), Log(), euid=0)  # as the daemon keeps one

    def look(at):
        return scheduler.spool_due(at)

    hour = (datetime.now().astimezone() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    first = f"nobody:hourly-{hour:%Y%m%dT%H%M}"
    assert look(hour + timedelta(minutes=1)) == [first]
    assert look(hour + timedelta(hours=1, minutes=1)) == []  # the first run is still queued
    assert look(hour + timedelta(hours=1, minutes=3)) == []
    # an `onite run` meanwhile (a scheduler of its own) waits too
    assert RecurScheduler(SpoolDir(spool), Log(), euid=0).spool_due(hour + timedelta(hours=1, minutes=4)) == []
    skips = [fields for event, _, fields in said if event == "recur-skip"]
    assert len(skips) == 2 and all("is still queued or running" in f["reason"] for f in skips), said  # once each
    assert all(f"hourly-{hour:%Y%m%dT%H%M}" in f["reason"] for f in skips)
    assert run_cli(["cancel", first], user="nobody").code == 0  # it ended (cancelled, as done or failed would)
    third = f"nobody:hourly-{hour + timedelta(hours=2):%Y%m%dT%H%M}"
    assert look(hour + timedelta(hours=2, minutes=1)) == [third]
    [spooled] = [fields for event, args, fields in said if event == "recur-spooled" and args == (third,)]
    assert spooled["coalesced"] == "1 earlier fire(s) not spooled", spooled


@needs_root
def test_a_run_a_killed_driver_spooled_but_never_recorded_still_holds_back_the_next_fire(spool):
    """A driver killed after it wrote a fire's run into the queue and before it saved recur.state (which it writes
    once a look, after every template's run): recur.state named no run, or an older one long ended, so the next
    fire was spooled beside the first, still queued. A queued or running run of the template's is found by its
    name as well."""
    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    r = run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 0, r

    class Log:
        def event(self, event, *args, **fields):
            pass

    def look(at):  # a driver of its own each time
        return RecurScheduler(SpoolDir(spool), Log(), euid=0).spool_due(at)

    hour = (datetime.now().astimezone() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    state = spool / "recur.state"
    before = state.read_bytes() if state.exists() else None
    first = f"nobody:hourly-{hour:%Y%m%dT%H%M}"
    assert look(hour + timedelta(minutes=1)) == [first]
    if before is None:  # the driver was killed before it saved recur.state: it is as it was
        state.unlink()
    else:
        state.write_bytes(before)
    assert list(spool.glob(f"jobs/*/{first}"))  # still queued
    assert look(hour + timedelta(hours=1, minutes=1)) == []
    next(spool.glob(f"jobs/*/{first}")).unlink()  # it ran
    assert look(hour + timedelta(hours=1, minutes=2)) == [f"nobody:hourly-{hour + timedelta(hours=1):%Y%m%dT%H%M}"]


@needs_root
@pytest.mark.attack
def test_a_users_sparse_templates_cost_each_onite_run_no_more_than_their_headers(spool):
    """nobody copies its yearly template into 100 whose bodies are sparse holes of max_job_size (no disk): each
    ``onite run`` (cron's, the timer's) read every template whole to learn its rule, 24 MiB a template, 2.4 GB
    and 6 s a run for 100 (a minute for 1,000), though none was due. A template's rule is in its header: only
    a bounded head is read to learn it, and a template is read whole only when it fires."""
    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    sparse_templates(spool, ["--cron", "0 3 1 1 *"], 100)

    class Log:
        def event(self, event, *args, **fields):
            raise AssertionError(f"nothing here is due or refused: {event} {args} {fields}")

    before = read_so_far()
    scheduler = RecurScheduler(SpoolDir(spool), Log(), euid=0)  # as each `onite run` makes one
    assert scheduler.spool_due(datetime.now().astimezone()) == []
    assert len(scheduler.templates) == 100
    assert read_so_far() - before < 100 << 20, "a template's body was read"  # not 2.4 GB


@needs_root
def test_recur_add_refuses_a_users_template_beyond_max_templates(spool):
    """nobody may have max_templates templates: one more is refused (exit 2, one line naming the limit and what
    to do), and nothing is written. Adding a name nobody has already is refused as before (not the limit); root
    has no limit."""
    set_config(spool, max_templates=3)
    for i in range(3):
        assert run_cli(["recur", "add", f"t{i}", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    r = run_cli(["recur", "add", "t3", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 2 and "you have 3 recurring jobs; each user may have 3 (max_templates)" in r.err, r
    assert "onite recur remove" in r.err, r
    assert len(r.err.strip().splitlines()) == 1, r
    assert sorted(os.listdir(spool / "recur")) == ["nobody:t0", "nobody:t1", "nobody:t2"]
    r = run_cli(["recur", "add", "t0", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code != 0 and "already exists" in r.err and "max_templates" not in r.err, r
    for i in range(5):
        assert run_cli(["recur", "add", f"r{i}", "--every", "1h"], stdin=b"true\n", cwd="/tmp").code == 0
    assert run_cli(["recur", "remove", "t1"], user="nobody").code == 0
    assert run_cli(["recur", "add", "t3", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0


@needs_root
def test_status_says_a_templates_next_fire_waits_for_its_run_still_queued(spool):
    """While a template's last run is queued, its next fires are skipped (recur-skip, in the log only), but
    ``onite status`` said ``recurring hourly … next 15:00 (in 20m)`` as if a run would come then. It says the
    fires wait for that run, and --json names it (``waits_for``)."""
    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    class Log:
        def event(self, *args, **fields):
            pass

    assert run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["status", "--json"], user="nobody", cwd="/tmp").json()["recurring"][0]["waits_for"] is None
    hour = (datetime.now().astimezone() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    assert RecurScheduler(SpoolDir(spool), Log(), euid=0).spool_due(hour + timedelta(minutes=1)) \
        == [f"nobody:hourly-{hour:%Y%m%dT%H%M}"]  # queued: no driver runs it here
    [rec] = run_cli(["status", "--json"], user="nobody", cwd="/tmp").json()["recurring"]
    assert rec["waits_for"] == f"hourly-{hour:%Y%m%dT%H%M}", rec
    out = run_cli(["status"], user="nobody", cwd="/tmp").out
    assert f"; skipped while its run hourly-{hour:%Y%m%dT%H%M} is queued or running" in out, out


@needs_root
def test_status_and_the_driver_find_a_templates_run_in_flight_one_way(spool):
    """A run recur.state never named (a driver killed before it saved it, or the owner's own job under a run's
    name) holds the template's fires back for the driver; status and recur list say it waits for that run too
    (by name in the queues, as the driver finds it), and for no other user's job of such a name."""
    assert run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    for user in ("daemon", "nobody"):
        r = run_cli(["submit", "hourly-20261130T1400"], stdin=b"true\n", user=user, cwd="/tmp")
        assert r.code == 0, r
        [rec] = run_cli(["recur", "list", "--json"], user="nobody", cwd="/tmp").json()["recurring"]
        assert rec["waits_for"] == (None if user == "daemon" else "hourly-20261130T1400"), (user, rec)


@needs_root
@pytest.mark.attack
def test_a_forged_template_and_a_forged_run_at_another_users_keys_wait_for_nothing(spool):
    """nobody plants recur/daemon:hourly (a template at daemon's key) and jobs/P3/daemon:hourly-… (a run at
    daemon's key), both its own files: the driver refuses both as forgeries. recur list and status said daemon's
    recurring job waits for that run (runs_in_flight took the template file's owner for the run's, not the key's
    user); a file at a key that is not its key's user's is no run of anything."""
    run = "daemon:hourly-20261130T1400"

    def plant():
        for path in (spool / "recur" / "daemon:hourly", spool / "jobs" / "P3" / run):
            path.write_bytes(b"true\n")

    assert as_user(plant) == ("ok", None)
    [rec] = run_cli(["recur", "list", "--json"]).json()["recurring"]
    assert rec["name"] == "daemon:hourly" and rec["user"] == "nobody", rec
    assert rec["waits_for"] is None, rec
    from onite.spool.paths import SpoolDir
    from onite.spool.recurstate import runs_in_flight
    assert runs_in_flight(SpoolDir(spool), {"daemon:hourly": pwd.getpwnam("nobody").pw_uid}) == {}


@needs_root
def test_status_says_no_wait_for_a_run_of_a_later_fire_as_the_driver_waits_for_none(spool):
    """A run spooled for a later fire than the next (a clock set back since, or the owner's own job under such a
    name) holds nothing back for the driver (docs/scheduling.md); recur list and status said the next fire waited
    for it."""
    assert run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["submit", "hourly-20991231T2300"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    [rec] = run_cli(["recur", "list", "--json"], user="nobody", cwd="/tmp").json()["recurring"]
    assert rec["waits_for"] is None, rec
    [rec] = run_cli(["status", "--json"], user="nobody", cwd="/tmp").json()["recurring"]
    assert rec["waits_for"] is None, rec


@needs_root
def test_recur_list_says_a_templates_next_fire_waits_for_its_run_still_queued(spool):
    """While a template's last run is queued its next fires are skipped; ``onite status`` said so, but ``onite recur
    list`` showed ``NEXT 15:00  IN 20m`` and an empty NOTE, as if a run would come then. Its NOTE says it."""
    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    class Log:
        def event(self, *args, **fields):
            pass

    assert run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    hour = (datetime.now().astimezone() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    assert RecurScheduler(SpoolDir(spool), Log(), euid=0).spool_due(hour + timedelta(minutes=1)) \
        == [f"nobody:hourly-{hour:%Y%m%dT%H%M}"]  # queued: no driver runs it here
    for user, run in (("nobody", f"hourly-{hour:%Y%m%dT%H%M}"), (None, f"nobody:hourly-{hour:%Y%m%dT%H%M}")):
        r = run_cli(["recur", "list", "--plain"], user=user, cwd="/tmp")
        assert r.code == 0 and f"skipped while its run {run} is queued or running" in r.out, r


@needs_root
def test_recur_list_says_a_template_whose_owners_account_is_gone_is_not_used(spool):
    """A user adds a template, then the account is deleted: the driver refuses the template at every run
    (recur-refused: its owner has no account), but ``recur list`` and ``status`` showed its next fire, as if it
    would run. recur list says why it is not used, and neither shows a next fire."""
    user = f"onq{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", user], check=True)
    try:
        r = run_cli(["recur", "add", "ghost", "--every", "1m"], stdin=b"true\n", user=user, cwd="/tmp")
        assert r.code == 0, r
    finally:
        subprocess.run(["userdel", user], check=False)
    uid = (spool / "recur" / f"{user}:ghost").stat().st_uid
    [rec] = run_cli(["recur", "list", "--json"]).json()["recurring"]
    assert rec["next"] is None and f"its owner uid {uid} has no account" in rec["problem"], rec
    r = run_cli(["recur", "list", "--plain"])
    assert r.code == 0 and "has no account on this machine; it is not used" in r.out, r
    assert "recurring " not in run_cli(["status"]).out
    finished = drain(spool)
    assert finished.returncode == 0 and b"Traceback" not in finished.stderr, finished.stderr.decode()
    assert any("recur-refused" in line and "has no account" in line for line in log_lines(spool))


@needs_root
def test_recur_add_after_one_of_your_recurring_jobs_is_refused(spool, workdir):
    """``recur add deploy --after build`` where build is the user's recurring job was taken, and every run of
    deploy failed at once with 'dependency build no longer exists (cancelled or removed)': --after names a job
    literally, and build's runs are build-YYYYMMDDTHHMM, so no job build ever existed. It is refused (exit 2,
    one line saying why), and nothing is written; --after a job that is no template is taken as before."""
    assert run_cli(["recur", "add", "build", "--every", "1m"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    r = run_cli(["recur", "add", "deploy", "--every", "1m", "--after", "build"], stdin=b"true\n", user="nobody",
                cwd="/tmp")
    assert r.code == 2 and "--after build names a recurring job" in r.err and "build-YYYYMMDDTHHMM" in r.err, r
    assert len(r.err.strip().splitlines()) == 1, r
    assert sorted(os.listdir(spool / "recur")) == ["nobody:build"]
    r = run_cli(["recur", "add", "deploy", "--every", "1m", "--after", "compile"], stdin=b"true\n", user="nobody",
                cwd="/tmp")
    assert r.code == 0, r


@needs_root
def test_recur_add_after_itself_is_refused(spool, workdir):
    """``recur add r --every 1h --after r`` was taken (exit 0): the check for a recurring job named by --after
    looked in recur/ before r was written there, so every run of r (named r-YYYYMMDDTHHMM) would wait for a job r
    that never comes and fail. It is refused as any other recurring job is (exit 2, one line), nothing written."""
    r = run_cli(["recur", "add", "r", "--every", "1h", "--after", "r"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 2 and "--after r names a recurring job" in r.err, r
    assert len(r.err.strip().splitlines()) == 1, r
    assert "nobody:r" not in os.listdir(spool / "recur")


@needs_root
@pytest.mark.attack
def test_a_planted_file_in_recur_cannot_refuse_another_users_after(spool, workdir):
    """nobody makes recur/daemon:build by hand (recur/ is sticky: anyone adds), a file of nobody's named as daemon's
    recurring job build, which no driver uses (a forgery). daemon's ``recur add deploy --after build``, for daemon's
    plain job build, was refused as naming a recurring job: any user could refuse anyone's --after of any name.
    Only the name's user's own template counts."""
    planted = spool / "recur" / "daemon:build"
    assert as_user(lambda: planted.write_bytes(b"x") and None) == ("ok", None)
    r = run_cli(["recur", "add", "deploy", "--every", "1m", "--after", "build"], stdin=b"true\n", user="daemon",
                cwd="/tmp")
    assert r.code == 0, r
    assert (spool / "recur" / "daemon:deploy").stat().st_uid == pwd.getpwnam("daemon").pw_uid


@needs_root
def test_recur_remove_says_the_templates_run_still_queued_goes_on(spool):
    """A user removes a recurring job (as one deletes a crontab line) while its run is queued: ``recur remove`` said
    only 'hourly: removed', and the run then ran. It names the run that goes on and how to cancel it."""
    from onite.drain.instances import RecurScheduler
    from onite.spool.paths import SpoolDir

    class Log:
        def event(self, *args, **fields):
            pass

    for name in ("hourly", "other"):
        r = run_cli(["recur", "add", name, "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp")
        assert r.code == 0, r
    hour = (datetime.now().astimezone() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    run = f"hourly-{hour:%Y%m%dT%H%M}"
    assert f"nobody:{run}" in RecurScheduler(SpoolDir(spool), Log(), euid=0).spool_due(hour + timedelta(minutes=1))
    r = run_cli(["recur", "remove", "hourly"], user="nobody", cwd="/tmp")
    assert r.code == 0 and r.out == (f"hourly: removed; its run {run} is still queued or running and goes on "
                                     f"(cancel it: onite cancel {run})\n"), r
    assert run_cli(["cancel", f"other-{hour:%Y%m%dT%H%M}"], user="nobody", cwd="/tmp").code == 0
    r = run_cli(["recur", "remove", "other"], user="nobody", cwd="/tmp")
    assert r.code == 0 and r.out == "other: removed\n", r


@needs_root
def test_cancel_or_hold_of_a_recurring_jobs_name_says_how_to_stop_it(spool):
    """A user stops a recurring job as a job: ``onite cancel nightly`` (or hold) said 'no job 'nightly' is queued or
    running — see onite list', with no word that nightly is a recurring job whose runs have other names. It says
    so, and how to stop its fires; a name that is no recurring job gets the same message as before."""
    assert run_cli(["recur", "add", "nightly", "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    for args in (["cancel", "nightly"], ["hold", "nightly"]):
        r = run_cli(args, user="nobody", cwd="/tmp")
        assert r.code == 1 and "nightly is a recurring job: onite recur remove nightly stops its fires" in r.err, r
        assert "nightly-YYYYMMDDTHHMM" in r.err and len(r.err.strip().splitlines()) == 1, r
        r = run_cli([args[0], "nosuch"], user="nobody", cwd="/tmp")
        assert r.code == 1 and "recurring" not in r.err and "see onite list" in r.err, r


@needs_root
def test_recur_remove_of_several_goes_on_past_one_that_fails(spool):
    """``onite recur remove gone a b`` stopped at the first name it could not remove: a and b were left firing,
    and the one error line did not say so. As ``onite cancel`` and rm(1): each name that fails is said in one line,
    the others are still removed, and the exit code is the first failure's."""
    for name in ("a", "b"):
        assert run_cli(["recur", "add", name, "--every", "1h"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    assert run_cli(["recur", "add", "theirs", "--every", "1h"], stdin=b"true\n", cwd="/tmp").code == 0
    r = run_cli(["recur", "remove", "gone", "a", "root:theirs", "b"], user="nobody", cwd="/tmp")
    assert r.code == 1 and r.out == "a: removed\nb: removed\n", r
    assert r.err.splitlines() == ["onite: no recurring job 'gone' — see onite recur list",
                                  "onite: recurring job 'root:theirs' belongs to root — you may remove only your own "
                                  "recurring jobs"], r
    assert sorted(os.listdir(spool / "recur")) == ["root:theirs"]


def test_recur_add_without_a_job_text_names_recur_add_in_its_fix(spool):
    """It said "pipe or redirect a script: onite submit NAME < job.sh", the other command."""
    r = run_cli(["recur", "add", "r5", "--every", "1h"], stdin=b"")
    assert r.code == 2 and r.err == ("onite: the job text on stdin is empty — pipe or redirect a script: "
                                     "onite recur add r5 --every 1d < job.sh\n"), r


def test_recur_add_after_a_job_that_does_not_exist_says_so_now(spool):
    """Taken without a word, every run then failed 'dependency nosuchdep no longer exists'. A job spooled later
    each day may be what it waits for, so it is taken, and said once at the add."""
    r = run_cli(["recur", "add", "ra", "--every", "1h", "--after", "nosuchdep"], stdin=b"true\n")
    assert r.code == 0 and "ra: no job 'nosuchdep' is queued, running or finished now" in r.err, r
    r = run_cli(["recur", "add", "rb", "--every", "1h"], stdin=b"true\n")
    assert r.code == 0 and "is queued, running or finished now" not in r.err, r
