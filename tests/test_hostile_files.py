"""A plain user's hostile files never stop the night, never crash a command.

Job files with values no submit writes, file names that are no job names, a
recurring template whose rule overflows, damaged result records: the driver
(root) refuses each with a log line and runs the good jobs; status, list,
report and log keep working. Real files written by ``nobody``, a real driver.
"""

from __future__ import annotations

import json
import os
import pwd
from datetime import datetime, timezone

import pytest

from conftest import as_user, drain, log_lines, needs_root, result, wait_for

from onite.core.job import Job
from onite.core.jobfile import encode
from onite.spool.log import parse_line

pytestmark = pytest.mark.attack


def write_as(user: str, path: bytes | str, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data`` as ``user`` would: in a child that has become that user."""
    pid = os.fork()
    if pid == 0:
        try:
            entry = pwd.getpwnam(user)
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            os.write(fd, data)
            os.close(fd)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - never return into pytest from the child
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{user} could not write {path!r}"


def job_bytes(name: str, cwd: str, body: bytes = b"true\n") -> bytes:
    job = Job(name=name, priority=4, submitted=datetime.now().astimezone(), host="vm", umask=0o022,
              cwd=cwd.encode(), env={b"PATH": b"/usr/bin:/bin"}, body=body)
    return encode(job)


def with_line(data: bytes, line: bytes, replace: bytes | None = None) -> bytes:
    """``data`` (a job file) with ``line`` added to its header, or in place of the line starting ``replace``."""
    if replace is None:
        return data.replace(b"\nenv: ", b"\n" + line + b"\nenv: ", 1)
    head, _, rest = data.partition(b"\n" + replace)
    return head + b"\n" + line + rest[rest.index(b"\n"):]


# hostile job files, each a file a user can write into jobs/P4
HOSTILE = {
    "nul-shebang": lambda d: d.replace(b"\n\ntrue\n", b"\n\n#!/bin/sh\x00x\nid\n"),
    "long-shebang": lambda d: d.replace(b"\n\ntrue\n", b"\n\n#!" + b"/" * 300 + b"\nid\n"),
    "timeout-1e20": lambda d: with_line(d, b"timeout: 1e20"),
    "timeout-inf": lambda d: with_line(d, b"timeout: inf"),
    "timeout-nan": lambda d: with_line(d, b"timeout: nan"),
    "tried-x": lambda d: with_line(d, b"retries: 1\nattempt: 2\ntried: x"),
    "tried-list": lambda d: with_line(d, b"tried: []"),
    "tried-deep": lambda d: with_line(d, b"tried: " + b"[" * 100_000),
    "at-naive": lambda d: with_line(d, b"at: 2026-11-23T02:00:00"),
    "at-year-1": lambda d: with_line(d, b"at: 0001-01-01T00:00:00+14:00"),
    "env-equals": lambda d: with_line(d, b"env: A\\x3dB=1"),
    "env-empty": lambda d: with_line(d, b"env: =1"),
    "env-nul-name": lambda d: with_line(d, b"env: A\\x00B=1"),
    "env-nul-value": lambda d: with_line(d, b"env: A=1\\x002"),
    "cwd-nul": lambda d: with_line(d, b"cwd: /tmp\\x00x", replace=b"cwd: "),
    "priority-huge": lambda d: with_line(d, b"priority: " + b"9" * 30, replace=b"priority: "),
    "umask-huge": lambda d: with_line(d, b"umask: 77777777777777777777", replace=b"umask: "),
    "retries-huge": lambda d: with_line(d, b"retries: 99999999999999999999"),
    "after-evil": lambda d: with_line(d, b"after: a\\nb"),
    "after-many": lambda d: with_line(d, b"after: nobody:a\n" * 65),  # each is looked at whenever it might start
    # numbers int() and float() take but no shell or grep '[0-9]' does: other digits, signs, blanks, '_', '0o'
    "priority-arabic": lambda d: with_line(d, "priority: \u0663".encode(), replace=b"priority: "),
    "priority-plus": lambda d: with_line(d, b"priority: +3", replace=b"priority: "),
    "umask-prefix": lambda d: with_line(d, b"umask: 0o077", replace=b"umask: "),
    "umask-fullwidth": lambda d: with_line(d, "umask: \uff10\uff10\uff12\uff12".encode(), replace=b"umask: "),
    "timeout-underscore": lambda d: with_line(d, b"timeout: 1_0"),
    "timeout-exponent": lambda d: with_line(d, b"timeout: 1e3"),
    "retries-blank": lambda d: with_line(d, "retries: 1\u00a0".encode()),
    # an at: or pin: past the 64 KiB the daemon's watch reads: it and the driver disagreed on when and where it was due
    "at-past-the-watch": lambda d: with_line(d, b"x-pad: " + b"a" * (64 << 10) + b"\nat: 2020-01-01T00:00:00+00:00"),
    "pin-past-the-watch": lambda d: with_line(d, b"x-pad: " + b"a" * (64 << 10) + b"\npin: elsewhere"),
}
# queued files whose names are no job names
STRAYS = [b"forged\n2026-11-22T20:00:00+01:00 vm[1] done victim user=root", b"x;$(id)", b"\x1b[31mred\x1b[0m",
          b"\xff\xfe-not-utf8", b"a" * 101]


@needs_root
def test_hostile_job_files_are_refused_and_the_night_goes_on(spool, workdir, cli):
    queue = spool / "jobs" / "P4"
    for name, make in HOSTILE.items():
        write_as("nobody", str(queue / f"nobody:{name}"), make(job_bytes(f"nobody:{name}", str(workdir))))
    for raw in STRAYS:
        write_as("nobody", os.fsencode(queue) + b"/" + raw, job_bytes("nobody:stray", str(workdir)))
    marker = workdir / "good.ran"
    assert cli(["submit", "good"], stdin=f"touch {marker}\n".encode(), user="nobody", cwd=workdir).code == 0

    finished = drain(spool)
    assert finished.returncode == 0, finished.stderr.decode()
    assert b"Traceback" not in finished.stderr
    assert marker.exists()  # the good job ran, after (or before) every bad one
    assert os.listdir(queue) == []  # nothing is left to stop the next night either
    refused = os.listdir(os.fsencode(spool / "refused"))
    assert len(refused) == len(HOSTILE) + len(STRAYS)
    events = [parse_line(line) for line in log_lines(spool)]
    refusals = {e["name"]: e["fields"]["reason"] for e in events if e and e["event"] == "refused"}
    for name in HOSTILE:
        key = f"nobody:{name}"
        assert "damaged job file" in refusals[key] or "never run" in refusals[key], (key, refusals[key])
        assert result(spool, key)["state"] == "failed"
    for raw in STRAYS:
        label = os.fsdecode(raw[:200])
        assert refusals[label] == "its name is not a job key (USER:NAME)"
        assert not (spool / "jobsdone" / f"{label}@result").exists()  # no record, no notice: it is no job
    # nothing forged: every line of the log is one event that onite wrote, and no raw escape reached it
    text = (spool / "onite.log").read_text()
    assert "\x1b" not in text and all(parse_line(line) for line in text.splitlines())
    assert not any(e and e["event"] == "done" and e["name"] == "victim" for e in events)
    for args in (["status"], ["status", "--json"], ["list"], ["list", "--all"], ["list", "--all", "--json"],
                 ["report"], ["report", "--json"], ["log", "-n", "200"], ["log", "--json", "-n", "200"]):
        for user in (None, "nobody"):
            r = cli(args, user=user)
            assert r.code == 0 and "Traceback" not in r.err and "\x1b" not in r.out, (args, user, r)


@needs_root
def test_listings_never_show_a_stray_name(spool, workdir, cli):
    queue = spool / "jobs" / "P4"
    for raw in STRAYS:
        write_as("nobody", os.fsencode(queue) + b"/" + raw, b"x")
    assert cli(["submit", "real"], stdin=b"true\n", user="nobody", cwd=workdir).code == 0
    listed = cli(["list", "--all", "--json"])
    assert [job["name"] for job in listed.json()["jobs"]] == ["nobody:real"]
    for args in (["list"], ["status"], ["status", "--json"]):
        r = cli(args)
        assert r.code == 0 and "\x1b" not in r.out and "x;$(id)" not in r.out, (args, r)
    assert json.loads(cli(["status", "--json"]).out)["queue"]["P4"] == 1


@needs_root
def test_a_template_whose_rule_overflows_is_refused_and_the_night_goes_on(spool, workdir, cli):
    template = with_line(job_bytes("nobody:overflow", str(workdir)), b"recur-every: 99999999999999d")
    write_as("nobody", str(spool / "recur" / "nobody:overflow"), template)
    marker = workdir / "good.ran"
    assert cli(["submit", "good"], stdin=f"touch {marker}\n".encode(), user="nobody", cwd=workdir).code == 0
    finished = drain(spool)
    assert finished.returncode == 0 and b"Traceback" not in finished.stderr, finished.stderr.decode()
    assert marker.exists()
    events = [parse_line(line) for line in log_lines(spool)]
    assert any(e["event"] == "recur-refused" and e["name"] == "nobody:overflow" and "at most 366d" in e["fields"]["reason"]
               for e in events if e)
    for args in (["status"], ["recur", "list"], ["recur", "list", "--json"]):
        r = cli(args)
        assert r.code == 0 and "Traceback" not in r.err, (args, r)


@needs_root
def test_a_cron_expression_longer_than_any_rule_needs_is_refused(spool, workdir, cli):
    """nobody's templates whose cron expression names one minute 60,000 times (120 KB, a `recur add` argument):
    croniter parses an expression each time it is asked, and root's `onite status`, `recur list` and the driver's
    every look asked it several times a template, 2.8 s each (3 templates: status 8.6 s). An expression is at most
    512 characters: `recur add` refuses a longer one, the driver a template holding one."""
    long = ",".join(["7"] * 60_000) + " 3 * * 1"
    r = cli(["recur", "add", "long", "--cron", long], stdin=b"true\n", user="nobody", cwd=str(workdir))
    assert r.code == 2 and "at most 512" in r.err, r
    template = with_line(job_bytes("nobody:long", str(workdir)), b"recur-cron: " + long.encode())
    write_as("nobody", str(spool / "recur" / "nobody:long"), template)
    finished = drain(spool)
    assert finished.returncode == 0 and b"Traceback" not in finished.stderr, finished.stderr.decode()
    events = [parse_line(line) for line in log_lines(spool)]
    assert any(e["event"] == "recur-refused" and e["name"] == "nobody:long" and "at most 512" in e["fields"]["reason"]
               for e in events if e), log_lines(spool)
    listed = cli(["recur", "list", "--json"]).json()["recurring"]
    assert [(t["name"], t["rule"]) for t in listed] == [("nobody:long", "?")] and "at most 512" in listed[0]["problem"]


def _damage(spool, name: str, data: bytes) -> None:
    (spool / "jobsdone" / f"{name}@result").write_bytes(data)


@pytest.mark.parametrize("data", [
    b"[]", b"{\"name\": \"root:dep\"}", b"\xff", b"[" * 100_000,
    json.dumps({"format": 1, "name": "root:dep", "uid": 0, "state": "done", "finished": "2026-11-22T20:00:00"}).encode(),
    json.dumps({"format": 1, "name": "root:dep", "uid": 10**30, "state": "done",
                "finished": "2026-11-22T20:00:00+00:00"}).encode(),
    json.dumps({"format": 1, "name": "root:other", "uid": 0, "state": "done",
                "finished": "2026-11-22T20:00:00+00:00"}).encode(),
])
def test_a_damaged_result_record_is_reported_not_treated_as_absent(spool, workdir, cli, data):
    assert cli(["submit", "dep"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0 and result(spool, "dep")["state"] == "done"
    _damage(spool, "root:dep", data)
    # (status tells last night from onite.log: it reads no result record)
    for args in (["list", "--all"], ["list", "--all", "--json"], ["report"], ["report", "--json"]):
        r = cli(args)
        assert r.code == 0 and "Traceback" not in r.err, (args, r)
        assert "damaged result record(s) left out: jobsdone/root:dep@result" in r.err, (args, r)
    assert cli(["submit", "after-dep", "--after", "dep"], stdin=b"true\n").code == 0
    finished = drain(spool)
    assert finished.returncode == 0 and b"Traceback" not in finished.stderr
    assert result(spool, "after-dep")["reason"] == \
        "the result record of dependency dep is damaged: whether it succeeded is unknown"
    assert cli(["wait", "dep"]).code == 4  # the waiter cannot tell how it ended, and says so


def test_damaged_run_record_still_lists_the_running_job(spool, cli):
    folder = spool / "running" / "h1"
    folder.mkdir()
    (folder / "root:job").write_bytes(b"x")
    (folder / "root:job@run").write_bytes(json.dumps({"rank": "x", "queued": "0001-01-01T00:00:00+14:00",
                                                 "started": 5, "attempt": 1e400}).encode().replace(b"Infinity", b"1e400"))
    r = cli(["list", "--all", "--json"])
    assert r.code == 0, r
    job, = r.json()["jobs"]
    assert (job["name"], job["state"], job["started"], job["attempt"]) == ("job", "running", None, None)
    assert cli(["status"]).code == 0


@pytest.mark.parametrize("args", [
    ["submit", "a", "--at", "+999999999h"], ["submit", "a", "--at", "+99999999999999999999d"],
    ["submit", "a", "--timeout", "99999999999d"], ["submit", "a", "--at", "9999-12-31T23:59"],
    ["submit", "a", "--at", "0001-01-01T00:00"], ["submit", "a", "--timeout", "0.0000001"],
    ["recur", "add", "r", "--every", "99999999999999d"], ["recur", "next", "--every", "99999999999999d"],
    ["recur", "next", "--every", "1h", "--from", "9999-12-31T00:00"],
    ["recur", "next", "--cron", "0 0 1 1 *", "-n", "10000"],
    ["report", "--night", "9999-12-31"], ["report", "--since", "99999999999d"],
    ["wait", "x", "--timeout", "99999999999d"],
])
def test_durations_and_times_are_bounded_on_the_command_line(spool, cli, args):
    r = cli(args, stdin=b"true\n")
    assert r.code == 2 and "Traceback" not in r.err and len(r.err.splitlines()) == 1, r


@pytest.mark.parametrize("lines", [False, True])
def test_a_shebang_line_that_can_never_run_is_refused_at_submit(spool, cli, lines):
    r = cli(["submit", "n"] + (["--lines"] if lines else []), stdin=b"#!/bin/sh\x00x\nid\n")
    assert r.code == 2 and len(r.err.splitlines()) == 1, r
    assert "can never run: its #! line holds a NUL byte" in r.err
    assert os.listdir(spool / "jobs" / "P4") == []


@pytest.mark.parametrize("env", [{b"": b"x"}, {b"A=B": b"x"}, {b"A": b"1\x002"}])
def test_an_environment_execve_cannot_pass_is_refused_at_submit(env):
    # an empty name is what a process started by a raw execve("=x") finds in os.environb
    from onite.core.config import Config
    from onite.core.errors import InvalidInput
    from onite.core.request import Captured, SubmitRequest, build_job

    captured = Captured(env=env, cwd=b"/", umask=0o022, host="vm", now=datetime.now().astimezone())
    with pytest.raises(InvalidInput, match="your environment cannot be passed to a job: .*(empty|NUL)"):
        build_job(SubmitRequest(name="n", body=b"true\n"), captured, Config(), "root")


@needs_root
def test_recover_is_refused_first_to_a_user(spool, cli):
    r = cli(["recover", "--host", "H", "--force"], user="nobody")
    assert r.code == 3 and r.err.strip() == "onite: onite recover is for root — run it with sudo", r
    assert not (spool / "driver.H.lock").exists()  # refused before anything in the spool is looked at


def test_the_log_shows_a_forged_line_as_one_inert_line(spool, cli):
    with open(spool / "onite.log", "a") as log:  # a line onite never wrote (a damaged disk, a hand edit)
        log.write("2026-11-22T20:00:00+01:00 vm[1] done x reason=\x1b]0;pwned\x07 \u202eevil\n")
    r = cli(["log"])
    assert r.code == 0 and "\x1b" not in r.out and "\u202e" not in r.out and "\\e]0;pwned\\x07" in r.out


# ---- the smaller parsers and guards, one case each ------------------------------------------------

def test_printable_spells_a_byte_that_is_not_utf8():
    from onite.core.safetext import printable

    assert printable("x\udcff\x1b[1m\u202e") == "x\\xff\\e[1m\\u202e"  # print() would crash on \udcff


def test_a_jobs_output_shown_to_another_user_spells_the_letters_drawn_as_blanks():
    """``onite output`` to a terminal keeps newlines and tabs, and spells what ``printable`` spells: a line of
    Hangul fillers or braille blanks (letters str.isprintable passes) too, which could pose as empty lines."""
    from onite.core.safetext import printable, printable_output

    for text in ("\u3164\u3164", "ok\u2800", "\uffa0\u115f\u1160"):
        assert printable_output(text) == printable(text) != text
    assert printable_output("a\tb\n\u3164\n") == "a\tb\n\\u3164\n"


@pytest.mark.parametrize("text, message", [
    ("a = " + "[" * 5000, "nests arrays or tables too deeply"),
    ('max_job_size = "' + "9" * 5000 + '"', "max_job_size"),
    ('max_job_size = "0"', "a size from 1K to 1T"),
    ("max_job_size = 9999999999999999", "a size from 1K to 1T"),
    ('kill_grace = "99999999999999d"', "kill_grace"),
])
def test_parse_config_raises_only_config_error(text, message):
    from onite.core.config import parse_config
    from onite.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_a_heartbeat_with_odd_digits_is_no_driver():
    from onite.drain.heartbeat import Beat

    assert Beat.from_json({"version": 1, "pid": "\u00b2", "host": "h1"}) is None  # "²".isdigit(), yet int("²") fails


def test_the_notifier_never_hands_an_invalid_name_to_a_hook(spool):
    from onite.spool.paths import SpoolDir
    from onite.core.config import Config
    from onite.exec.notify import Notifier
    from onite.core.state import JobState, Result

    class Log:
        def __init__(self):
            self.events = []

        def event(self, event, name="", **fields):
            self.events.append((event, name, fields))

    now = datetime.now(timezone.utc)
    record = Result(name="root:ok", uid=0, user="root", priority=1, urgent=False, state=JobState.FAILED, reason="x",
                    exit_code=1, signal=None, host="h", submitted=now, queued=None, started=None, finished=now,
                    attempt=1)
    log = Log()
    notifier = Notifier(SpoolDir(spool), log)
    notifier.notify(record._replace(name="a;$(id)\nb"), None, Config(notify="command", notify_command=("/bin/true",)))
    assert notifier.pending == [] and log.events == [("notify-failed", "a;$(id)\nb",
                                                      {"how": "command", "reason": "not a valid job name"})]


def test_a_naive_or_absurd_not_before_time_is_ignored_by_the_daemons_watch(spool, workdir):
    from onite.spool.paths import SpoolDir
    from onite.spool.index import TimedWatch

    queue = spool / "jobs" / "P4"
    for name, at in (("naive", b"at: 2026-11-23T02:00:00"), ("year1", b"at: 0001-01-01T00:00:00+14:00")):
        (queue / f"root:{name}").write_bytes(with_line(job_bytes(f"root:{name}", str(workdir)), at))
    watch = TimedWatch(SpoolDir(spool), "h1")
    watch.refresh()
    assert watch.timed() == 0 and watch.next_due(None) is None


def test_the_daemons_watch_reads_a_bounded_head_of_each_file(spool, workdir):
    """nobody's files, each with a 1 MiB header line of NULs (a sparse hole)
    after its ``at:``: the daemon's watch read each up to 1 MiB, searching what it had read again
    after every 16 KiB (30-90 ms a file, inline in its loop), and 3,000 of them started daemon's
    timed job a minute and a half late. Now one read of at most WATCHED_HEAD bytes a file, counted
    here by the kernel (/proc/self/io), and a real job's ``at:`` is still found."""
    from onite.spool.paths import SpoolDir
    from onite.core.jobfile import WATCHED_HEAD
    from onite.spool.index import TimedWatch

    queue = spool / "jobs" / "P4"
    at = b"at: 2099-01-01T02:00:00+00:00"
    for i in range(20):
        data = with_line(with_line(job_bytes(f"root:pad{i}", str(workdir)), at), b"x-pad: " + b"\0" * (1 << 20))
        (queue / f"root:pad{i}").write_bytes(data)

    def read_bytes() -> int:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))

    watch = TimedWatch(SpoolDir(spool), "h1")
    before = read_bytes()
    watch.refresh()
    assert read_bytes() - before < 20 * WATCHED_HEAD + (1 << 20)  # the folders' listings aside
    assert WATCHED_HEAD <= 64 << 10
    assert watch.timed() == 20


def _names_kept(watch) -> int:
    """How many names the daemon's watch keeps in memory, over its folders' structures."""
    return sum(len(f.names) + len(f.order) + len(f.parked) + len(f.strays) for f in watch.index.folders)


def _look_again(watch) -> None:
    """One more listing of the queue folders by ``watch``, as the daemon's next turn makes."""
    before = watch.index.listings
    wait_for(lambda: (watch.refresh(), watch.index.listings > before)[1], what="a listing")


@needs_root
def test_a_users_files_named_as_no_job_are_not_kept_by_the_daemon_once_gone(spool):
    """nobody keeps 5,000 empty files whose names are no job names (``_…``) in jobs/P4, and every
    2 s removes them and makes 5,000 of new names: the daemon's watch, which never drains, kept
    every such name it had ever listed, and root's daemon grew by 12 MB a minute (20 MB → 45 MB
    after 100,000 names, never given back). Now a listing keeps only the names it found."""
    from onite.spool.paths import SpoolDir
    from onite.spool.index import TimedWatch

    queue = spool / "jobs" / "P4"
    watch = TimedWatch(SpoolDir(spool), "h1")

    def churn(round_: int) -> None:
        for old in os.listdir(queue):
            os.unlink(queue / old)
        for i in range(100):
            os.close(os.open(queue / f"_{round_}_{i}", os.O_CREAT | os.O_WRONLY, 0o600))

    for round_ in range(20):
        assert as_user(lambda: churn(round_)) == ("ok", None)
        _look_again(watch)
    assert len(os.listdir(queue)) == 100
    assert _names_kept(watch) <= 100


@needs_root
def test_a_users_jobs_moved_away_and_back_again_and_again_are_not_kept_by_the_daemon(spool):
    """nobody has 10,000 files at job names of its own in jobs/P5 and every 2 s renames half of them
    to dot-names and the other half back: each name the daemon's watch saw leave and come back was
    added to its folder's order again while the old entry stayed, and the compaction never came
    (it counted names gone, which a name back again is not): root's daemon grew by 30 MB every 90 s
    and spent 12% of a CPU. Now a folder's order is compacted once most of its entries are stale."""
    from onite.spool.paths import SpoolDir
    from onite.spool.index import TimedWatch

    queue = spool / "jobs" / "P5"
    names = [f"nobody:f{i}" for i in range(100)]
    assert as_user(lambda: [os.close(os.open(queue / n, os.O_CREAT | os.O_WRONLY, 0o600)) for n in names] and None) \
        == ("ok", None)
    watch = TimedWatch(SpoolDir(spool), "h1")
    watch.refresh()

    def flip(round_: int) -> None:
        for name in names[round_ % 2::2]:
            os.rename(queue / name, queue / f".{name}")
        for name in names[(round_ + 1) % 2::2]:
            if os.path.exists(queue / f".{name}"):
                os.rename(queue / f".{name}", queue / name)

    for round_ in range(40):
        assert as_user(lambda: flip(round_)) == ("ok", None)
        _look_again(watch)
    assert sum(1 for n in os.listdir(queue) if not n.startswith(".")) == 50
    assert _names_kept(watch) <= 4 * 100 + 200
