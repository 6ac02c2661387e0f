"""Every parser of a file a user (or a damaged disk) can write is total.

For each parser: arbitrary bytes or text, and structured inputs that mutate a
valid file so that the deep code is reached; the result is a value or the
parser's one documented error, never anything else. Each property runs a
modest number of examples (``deadline=None``: no timing can make one flaky).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from onite.core.errors import ConfigError, DamagedRecord, InvalidInput, JobFormatError
from onite.core.job import MAX_RETRIES, Attempt, Job
from onite.core.jobfile import decode, encode, env_problem
from onite.core.names import is_valid_key
from onite.core.timeparse import EARLIEST, LATEST, MAX_DURATION, is_valid_time

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
WHEN = datetime(2026, 11, 22, 14, 3, 11, 512345, tzinfo=timezone(timedelta(hours=1)))


def good_job(**overrides) -> Job:
    fields = dict(name="alice:nightly", priority=3, submitted=WHEN, host="vm", umask=0o022, cwd=b"/home/alice",
                  env={b"PATH": b"/usr/bin:/bin", b"PS1": b"\x1b[1m$ "}, body=b"#!/bin/sh\necho hi\n",
                  timeout=timedelta(hours=2), retries=2, attempt=2, after=("alice:backup",),
                  not_before=WHEN + timedelta(hours=8), pin="node1", recur="alice:nightly-tpl",
                  tried=(Attempt(attempt=1, started=WHEN, finished=WHEN, host="vm", exit_code=1, reason="exit 1"),),
                  mem=1536, cpus=2)
    fields.update(overrides)
    return Job(**fields)


GOOD = encode(good_job())
HEADER_LINES = GOOD.split(b"\n\n", 1)[0].split(b"\n")

# values that probe the edges of every field: numbers that overflow, times without offsets,
# escapes, NUL bytes, JSON that nests too deeply
NASTY = st.sampled_from([
    b"", b"0", b"-1", b"1e20", b"inf", b"-inf", b"nan", b"1" * 5000, b"99999999999999999999", b"0x1f", b"0o22",
    b"1_000", b" 3 ", b"\xd9\xa3", b"2026-11-23T02:00:00", b"2026-11-23T02:00:00+25:00", b"0001-01-01T00:00:00+14:00",
    b"9999-12-31T23:59:59-14:00", b"\\", b"\\x00", b"\\x3d", b"\\q", b"\\x4", b"a=b", b"=", b"\x00", b"\xff\xfe",
    b"x" * 300, b"[]", b"{}", b"[" * 3000, b"{\"attempt\": 1}", b"null", b"true", b"separate", b"merged",
    b"mail", b"yes", b"../x", b"a b", b";$(id)", b"\x1b[31m",
])
KEYS = st.sampled_from([b"onite-job", b"name", b"priority", b"submitted", b"host", b"umask", b"cwd", b"urgent",
                        b"timeout", b"retries", b"after", b"at", b"pin", b"recur", b"attempt", b"tried", b"stderr",
                        b"notify", b"notify-on", b"env", b"future", b""])


@st.composite
def mutated_job_files(draw) -> bytes:
    """A valid job file, its header changed line by line: values replaced, lines dropped, added, repeated."""
    lines = list(HEADER_LINES)
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["value", "drop", "add", "repeat", "raw"]))
        i = draw(st.integers(1, len(lines) - 1)) if len(lines) > 1 else 0
        if what == "value":
            key = lines[i].partition(b": ")[0]
            lines[i] = key + b": " + draw(NASTY | st.binary(max_size=40))
        elif what == "drop" and len(lines) > 1:
            del lines[i]
        elif what == "add":
            lines.insert(i, draw(KEYS) + b": " + draw(NASTY | st.binary(max_size=40)))
        elif what == "repeat":
            lines.insert(i, lines[i])
        else:
            lines[i] = draw(st.binary(max_size=60))
    body = draw(st.sampled_from([b"echo hi\n", b"#!/bin/sh\x00x\nid\n", b"#!" + b"/" * 300, b"", b"\x00\xff"]))
    return b"\n".join(lines) + b"\n\n" + body


def _decodes_or_refuses(data: bytes) -> None:
    try:
        job = decode(data)
    except JobFormatError:
        return
    assert isinstance(job, Job)
    assert not env_problem(job.env)
    assert decode(encode(job)) == job  # what decode accepts, encode writes back the same


@FUZZ
@given(st.binary(max_size=400))
@example(b"onite-job: 1\n\n")
@pytest.mark.attack
def test_decode_any_bytes(data):
    _decodes_or_refuses(data)


@FUZZ
@given(st.binary(max_size=300).map(lambda b: b"onite-job: 1\n" + b))
@pytest.mark.attack
def test_decode_any_header(data):
    _decodes_or_refuses(data)


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated_job_files())
@pytest.mark.attack
def test_decode_mutated_job_files(data):
    _decodes_or_refuses(data)


# every number a job file (or an edit, or a template) holds is written as onite writes it: int() and float() alone
# take other digits ('\u0663', '\uff13'), signs, blanks, '_' and (in base 8) '0o', which a shell or grep reads otherwise
NUMBERS = {"priority": r"[0-9]+", "umask": r"[0-7]+", "retries": r"[0-9]+", "attempt": r"[0-9]+",
           "timeout": r"[0-9]+(?:\.[0-9]+)?", "cpus": r"[0-9]+", "mem": r"[0-9]+[KMGT]?"}
number_texts = st.text(st.characters(whitelist_categories=("Nd", "No", "Nl", "Zs"))
                       | st.sampled_from(list("0123456789+-_.oxe\t\u00a0\u2028KMGTkmgt")), min_size=1, max_size=8)


@FUZZ
@given(st.sampled_from(sorted(NUMBERS)), number_texts)
@example("priority", "\u0663")
@example("umask", "0o22")
@example("timeout", "1_0")
@example("retries", " 2")
@example("attempt", "+2")
@example("cpus", " 2")
@example("mem", "1g")
@example("mem", "1G ")
@pytest.mark.attack
def test_a_number_in_a_job_file_is_ascii_digits_or_the_file_is_damaged(key, text):
    line = next(line for line in HEADER_LINES if line.startswith(key.encode() + b": "))
    data = GOOD.replace(b"\n" + line + b"\n", b"\n" + f"{key}: {text}".encode() + b"\n", 1)
    try:
        decode(data)
    except JobFormatError:
        return
    assert re.fullmatch(NUMBERS[key], text), (key, text)


# ---- what build_job accepts, decode reads back ------------------------------------------------

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
keys = st.builds(lambda user, name: f"{user}:{name}",
                 st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,10}", fullmatch=True), names)
times = st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(9998, 12, 30),
                     timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=-14)),
                                                timezone(timedelta(hours=5, minutes=45, seconds=30))]))
env_names = st.binary(min_size=1, max_size=12).filter(lambda b: b"=" not in b and b"\0" not in b)
env_values = st.binary(max_size=20).filter(lambda b: b"\0" not in b)


@st.composite
def valid_jobs(draw) -> Job:
    retries = draw(st.integers(0, MAX_RETRIES))
    return Job(
        name=draw(keys), priority=draw(st.integers(1, 99)), submitted=draw(times),
        host=draw(st.text(max_size=10)), umask=draw(st.integers(0, 0o777)),
        cwd=b"/" + draw(st.binary(max_size=20)).replace(b"\0", b""),
        env=draw(st.dictionaries(env_names, env_values, max_size=5)),
        body=draw(st.binary(max_size=40).filter(lambda b: not b.startswith(b"#!")) | st.just(b"#!/bin/sh -e\nx")),
        timeout=draw(st.none() | st.timedeltas(min_value=timedelta(microseconds=1), max_value=MAX_DURATION)),
        retries=retries, attempt=draw(st.integers(1, retries + 1)),
        after=tuple(draw(st.lists(keys, max_size=3))), not_before=draw(st.none() | times),
        urgent=draw(st.booleans()), pin=draw(st.none() | names), recur=draw(st.none() | keys),
        stderr_separate=draw(st.booleans()), notify=draw(st.sampled_from([None, "mail", "command", "none"])),
        notify_on=draw(st.sampled_from([None, "failure", "always"])),
        extra=tuple(draw(st.lists(st.tuples(st.from_regex(r"[a-z][a-z-]{0,8}", fullmatch=True)
                                            .filter(lambda k: k not in ("env", "after", "tried", "urgent", "name",
                                                                        "host", "cwd", "umask", "timeout", "retries",
                                                                        "at", "pin", "recur", "attempt", "stderr",
                                                                        "notify", "priority", "submitted")),
                                            st.text(max_size=10).map(lambda t: t.encode("utf-8", "replace").decode())),
                                  max_size=2))),
    )


@FUZZ
@given(valid_jobs())
@pytest.mark.attack
def test_every_valid_job_round_trips(job):
    assert decode(encode(job)) == job


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated_job_files() | st.binary(max_size=300) | valid_jobs().map(encode),
       st.sampled_from([0, 1, 70_000, 300_000]))
@pytest.mark.attack
def test_reading_a_jobs_head_says_what_reading_it_whole_says_of_its_header(tmp_path_factory, data, padding):
    """read_job_head (what may start, why a job waits) is read_job_file with the body cut after its first line:
    the same job but for the body, or the same error (BadFile, JobFormatError), never another; a header made
    longer than HEAD_LIMIT (a large environment) is read whole."""
    from onite.spool.filecheck import BadFile, read_job_file, read_job_head

    if padding and b"\n\n" in data:  # a header line of that many bytes, or as much more body
        head, _, body = data.partition(b"\n\n")
        data = head + b"\nenv: PAD=" + b"x" * padding + b"\n\n" + body if padding > 1 else data + b"x" * 70_000
    path = tmp_path_factory.mktemp("head") / "job"
    path.write_bytes(data)

    def outcome(read):
        try:
            job, _ = read(path, 16 << 20)
        except (BadFile, JobFormatError) as err:
            return type(err)
        return job._replace(body=job.body.split(b"\n", 1)[0])

    assert outcome(read_job_head) == outcome(read_job_file)


@FUZZ
@given(st.dictionaries(st.binary(max_size=8), st.binary(max_size=8), max_size=4), st.binary(max_size=300),
       st.none() | st.text(max_size=12) | st.sampled_from(["1e5", "366d", "0.0000001", "90s"]),
       st.none() | st.text(max_size=12) | st.sampled_from(["+2h", "9998-12-31T23:59", "0001-01-01T00:00"]),
       st.binary(max_size=20))
@pytest.mark.attack
def test_what_submit_accepts_the_driver_reads_back(env, body, timeout, at, cwd):
    from onite.core.config import Config
    from onite.core.request import Captured, SubmitRequest, build_job

    captured = Captured(env=env, cwd=b"/" + cwd.replace(b"\0", b""), umask=0o022, host="vm", now=WHEN)
    try:
        job = build_job(SubmitRequest(name="n", body=body, timeout=timeout, at=at), captured, Config(), "alice")
    except InvalidInput:
        return
    assert decode(encode(job)) == job


# ---- JSON records -------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=30)
    | st.sampled_from(["2026-11-22T20:00:00+01:00", "2026-11-22T20:00:00", "0001-01-01T00:00:00+14:00",
                       "done", "failed", "cancelled", "merged", "separate", "alice:nightly"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)


def record_of(**overrides) -> dict:
    from onite.core.state import JobState, Result

    result = Result(name="alice:nightly", uid=1000, user="alice", priority=3, urgent=False, state=JobState.FAILED,
                    reason="exit 3", exit_code=3, signal=None, host="vm", submitted=WHEN, queued=WHEN,
                    started=WHEN, finished=WHEN + timedelta(seconds=5), attempt=2,
                    attempts=(Attempt(attempt=1, started=WHEN, finished=WHEN, host="vm", exit_code=3),),
                    run_id="r1", recur="alice:tpl", stderr="separate")
    return {**result.to_json(), **overrides}


RECORD_KEYS = list(record_of())


@st.composite
def mutated_records(draw) -> dict:
    record = record_of()
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(RECORD_KEYS))
        if draw(st.booleans()):
            record.pop(key, None)
        else:
            record[key] = draw(json_values)
    return record


@FUZZ
@given(json_values | mutated_records())
@pytest.mark.attack
def test_result_from_json_any_value(data):
    from onite.core.state import Result

    try:
        result = Result.from_json(data)
    except DamagedRecord:
        return
    assert is_valid_key(result.name) and is_valid_time(result.finished)
    assert Result.from_json(json.loads(json.dumps(result.to_json()))) == result


@FUZZ
@given(json_values | st.builds(lambda k, v: {**record_of()["attempts"][0], k: v},
                               st.sampled_from(["attempt", "started", "finished", "host", "exit_code", "signal",
                                                "reason"]), json_values))
@pytest.mark.attack
def test_attempt_from_json_any_value(data):
    try:
        attempt = Attempt.from_json(data)
    except ValueError:
        return
    assert 1 <= attempt.attempt <= MAX_RETRIES + 1 and is_valid_time(attempt.started)


@pytest.fixture(scope="module")
def scratch_spool():
    """A spool for properties that read files (hypothesis runs many examples in one test)."""
    from onite.spool.paths import SpoolDir
    from onite.spool.skeleton import init_spool

    root = Path(tempfile.mkdtemp(prefix="onite-fuzz-"))
    init_spool(root / "spool", None, system=False)
    yield SpoolDir(root / "spool")
    shutil.rmtree(root, ignore_errors=True)


@FUZZ
@given(st.binary(max_size=300) | mutated_records().map(lambda r: json.dumps(r).encode()))
@example(b"[" * 100_000)
@example(b"\xff\xfe")
@pytest.mark.attack
def test_read_result_any_bytes(scratch_spool, data):
    from onite.spool.results import read_result, read_results

    scratch_spool.result_path("alice:nightly").write_bytes(data)
    try:
        result = read_result(scratch_spool, "alice:nightly")
    except DamagedRecord:
        assert read_results(scratch_spool, damaged := []) == [] and damaged == ["alice:nightly"]
        return
    assert result is not None and result.name == "alice:nightly"


@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode())
       | st.builds(lambda k, v: json.dumps({"rank": 3, "attempt": 1, "started": WHEN.isoformat(), k: v}).encode(),
                   st.sampled_from(["rank", "attempt", "started", "queued", "external_id"]), json_values))
@pytest.mark.attack
def test_run_record_any_bytes(scratch_spool, data):
    from onite.app.listing import running_views

    folder = scratch_spool.running_dir("h1")
    folder.mkdir(exist_ok=True)
    (folder / "root:job").write_bytes(b"x")
    (folder / "root:job@run").write_bytes(data)
    view, = running_views(scratch_spool)
    assert view.name == "root:job" and (view.started is None or is_valid_time(view.started))
    assert view.attempt is None or isinstance(view.attempt, int)


@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps({"version": 1, "templates": {"alice:t": v}}).encode()))
@pytest.mark.attack
def test_recur_state_any_bytes(scratch_spool, data):
    from onite.core.recurring import from_state
    from onite.core.timeparse import parse_stamp
    from onite.spool.recurstate import load_state

    (scratch_spool.root / "recur.state").write_bytes(data)
    for name, known in load_state(scratch_spool).items():
        assert is_valid_key(name) and isinstance(known, dict)
        from_state(known)
        when = parse_stamp(known.get("last"))
        assert when is None or is_valid_time(when)


@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps({"version": 1, "last": v}).encode()))
@pytest.mark.attack
def test_daemon_state_any_bytes(scratch_spool, data):
    from onite.app.daemon import Daemon

    class Log:
        def event(self, *args, **fields):
            pass

    daemon = Daemon.__new__(Daemon)  # only what _load_state uses
    daemon.spool, daemon.host, daemon.log = scratch_spool, "h1", Log()
    daemon.state_path.write_bytes(data)
    last = daemon._load_state()
    assert last is None or is_valid_time(last)


# ---- text parsers -------------------------------------------------------------------------------

texts = st.text(max_size=80) | st.text(alphabet=" \"\\=\n\r\t\x1b\x00\u2028\udcffabc[]0123:", max_size=60)


@FUZZ
@given(texts)
@example("2026-11-22T20:00:01+01:00 vm[4711] start")
@example('2026-11-22T20:00:01+01:00 vm[x] start "')
@pytest.mark.attack
def test_log_parse_line_any_text(line):
    from onite.spool.log import parse_line

    parsed = parse_line(line)
    assert parsed is None or isinstance(parsed["fields"], dict)


@FUZZ
@given(texts, st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True), texts, max_size=4))
@pytest.mark.attack
def test_log_lines_cannot_be_forged(name, fields):
    import re

    from onite.core.safetext import UNSAFE
    from onite.spool.log import format_line, parse_line

    line = format_line(WHEN, "vm", 4711, "refused", name, **fields)
    assert line.endswith("\n") and len(line[:-1].splitlines()) <= 1 and not re.search(UNSAFE, line[:-1])
    parsed = parse_line(line)
    assert parsed["event"] == "refused" and parsed["name"] == (name or None)
    assert parsed["fields"] == {k: v for k, v in fields.items() if v != ""}


@FUZZ
@given(st.text(max_size=300) | st.lists(st.sampled_from([
    "priorities = 3", "priorities = 100", "keep = -1", "slots = 99999999999999999999", 'timeout = "9999999999d"',
    'kill_grace = "0"', 'max_job_size = "' + "9" * 5000 + '"', "max_job_size = 0", 'shell = "sh"',
    "schedule = [1]", 'schedule = ["* * *"]', "admins = [[]]", "[hosts.a]\nslots = 0", "[hosts.b]\nx = 1",
    "[slurm]\nmax_jobs = 1e9", 'notify = "command"', "notify_command = 'a \"'", "a = " + "[" * 2000,
    'cutoff = "25:00"', "cutoff = 07:00:00", 'until = "x"', "until = 1979-05-27T07:32:00Z", 'host = "a b"',
    'on_interrupt = "x"', 'sendmail = "rel"', "stderr_separate = 1",
    "max_pids = 4194305", "max_pids = -1", 'pam = "on"', 'pam_service = "a/b"', 'pam_service = ".."', "pam_service = 1",
]), max_size=5).map("\n".join))
@pytest.mark.attack
def test_parse_config_any_text(text):
    """Strict: a Config or a ConfigError. For a command that only reads: always a Config, each fault noted, and
    the same Config as the strict parse where there is none."""
    from onite.core.config import Config, parse_config

    try:
        strict = parse_config(text)
        assert isinstance(strict, Config)
    except ConfigError:
        strict = None
    skipped: list = []
    lenient = parse_config(text, skipped=skipped)
    assert isinstance(lenient, Config) and all(isinstance(err, ConfigError) for err in skipped)
    assert (strict is None) == bool(skipped) and (strict is None or lenient == strict)


def test_parse_config_for_a_reader_keeps_the_good_keys():
    from onite.core.config import parse_config

    skipped: list = []
    config = parse_config("slot = 2\npriorities = 9\nkeep = -1\n", skipped=skipped)
    assert config.priorities == 9 and config.keep == 50 and [err.key for err in skipped] == ["keep", "slot"]


@FUZZ
@given(st.text(max_size=40))
@pytest.mark.attack
def test_pam_service_any_name(name):
    """A PAM service is a file name in /etc/pam.d, never a path: a Config, or the one ConfigError."""
    from onite.core.config import parse_config

    try:
        service = parse_config(f"pam_service = {json.dumps(name)}").pam_service
    except ConfigError:
        return
    assert service == name and "/" not in service and not service.startswith(".") and service.isascii()


@FUZZ
@given(texts)
@pytest.mark.attack
def test_heartbeats_any_text(line):
    """A driver's heartbeat (SPOOL/driver.HOST.state) read back: a Beat, or None."""
    import json

    from onite.drain.heartbeat import Beat

    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        data = line
    assert Beat.from_json(data) is None or isinstance(Beat.from_json(data), Beat)


OTHER_DIGIT = re.compile(r"(?![0-9])\d")  # a digit int() and float() take, and no shell or grep '[0-9]' does


@FUZZ
@given(texts | st.sampled_from(["99999999999999d", "1e5", "0.0000001", "366d", "367d", "9" * 400, "1h30m",
                                "\u0663h", "1\uff10m"]))
@pytest.mark.attack
def test_durations_any_text(text):
    """A duration (a template's recur-every and recur-offset lines too) is bounded, and written in ASCII digits."""
    from onite.core.timeparse import parse_duration

    try:
        delta = parse_duration(text)
    except InvalidInput:
        return
    assert timedelta(0) < delta <= MAX_DURATION
    assert not OTHER_DIGIT.search(text)


@FUZZ
@given(texts | st.sampled_from(["+999999999h", "+99999999999999999999d", "0001-01-01T00:00", "9999-12-31T23:59",
                                "9999-12-31T23:59-14:00", "tomorrow 25:00", "23:59", "1900-01-01T00:00",
                                "tomorrow \u0660\u0667:\u0660\u0660", "+\u0662h"]))
@pytest.mark.attack
def test_times_any_text(text):
    from onite.core.timeparse import parse_when

    try:
        when = parse_when(text, WHEN)
    except InvalidInput:
        return
    assert EARLIEST <= when < LATEST
    assert not OTHER_DIGIT.search(text)


@FUZZ
@given(st.sampled_from(["recur-cron", "recur-every", "recur-offset"]), texts
       | st.sampled_from(["99999999999999d", "0 0 31 2 *", "* * * * * *", "0 0 1 1 *", "1d", "25m",
                          ",".join(["7"] * 300) + " 3 * * 1", "0 0 " + ",".join(["L"] * 300) + " * *"]))
@pytest.mark.attack
def test_recurring_rules_any_text(key, value):
    from onite.core.recurring import rule_of
    from onite.core.rules import MAX_CRON_LENGTH, CronRule
    from onite.core.schedule import next_fire

    template = good_job(extra=((key, value),) + ((("recur-every", "25m"),) if key == "recur-offset" else ()))
    try:
        rule = rule_of(decode(encode(template)))
    except (JobFormatError, InvalidInput):
        return
    assert not isinstance(rule, CronRule) or len(rule.expr) <= MAX_CRON_LENGTH  # croniter parses it at every ask
    try:
        next_fire(rule, WHEN)
    except InvalidInput:
        pass


# ---- names read from directories ----------------------------------------------------------------

file_names = st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b
                                                        and b not in (b".", b"..")) \
    | st.sampled_from([b"root:build", b"nobody:x", b"build", b"root:", b":x"])


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(file_names, min_size=1, max_size=6, unique=True))
@pytest.mark.attack
def test_listings_hold_only_job_names(scratch_spool, raw_names):
    from onite.spool.scan import cancel_inbox
    from onite.spool.index import QueueIndex
    from onite.app.listing import list_json, list_jobs

    folders = [scratch_spool.queue_dir(4), scratch_spool.cancel_dir]
    for folder in folders:
        for entry in os.listdir(folder):
            os.unlink(folder / entry)
    for raw in raw_names:
        for folder in folders:
            with open(os.fsencode(folder) + b"/" + raw + (b"@x" if folder == scratch_spool.cancel_dir else b""),
                      "wb") as handle:
                handle.write(b"x")
    views = list_jobs(scratch_spool, include_all=True)
    json.loads(list_json(scratch_spool, include_all=True))
    assert all(is_valid_key(v.name) for v in views)
    assert all(is_valid_key(e.name) for e in cancel_inbox(scratch_spool))
    index = QueueIndex(scratch_spool)
    index.refresh(force=True)
    found = {c.name for c in index.candidates()}
    strays = {c.name for c in index.strays()}
    names = {os.fsdecode(raw) for raw in raw_names}
    assert found == {n for n in names if is_valid_key(n)}
    assert strays == {n for n in names if not is_valid_key(n) and not n.startswith(".")}
    assert index.strays() == []  # each is handed out once per listing


# ---- what squeue says: a job's owner writes its name and comment ------------------------------

SQUEUE_PIECES = st.sampled_from(["5", "6", "5_1", "|", "\n", "RUNNING", "FAILED", "CANCELLED by 0", "256", "\u00b2",
                                 "\u0661", "None", "N/A", "2026-11-22T04:49:19", "1000", "alice(1000)", "(", ")",
                                 " ", "", "onite:x", "9" * 30, "-60000"])


@FUZZ
@given(st.lists(SQUEUE_PIECES | st.text(max_size=12), max_size=40).map("".join))
@example("31|RUNNING|\u00b2|None|N/A|1|\n")
@pytest.mark.attack
def test_squeue_answers_parse_to_what_slurm_could_have_said_or_nothing(text):
    """squeue.parse and parse_search never raise (a name with a newline crashed the driver), and take
    only ids, states, statuses and uids that look as Slurm writes them."""
    import re

    from onite.exec.squeue import JobStatus, parse, parse_search

    for job_id, status in parse(text).items():
        assert isinstance(status, JobStatus) and re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id, re.ASCII)
        assert re.fullmatch(r"[A-Z_]+", status.state, re.ASCII) and isinstance(status.uid, int)
        assert status.status is None or isinstance(status.status, int)
        assert status.nice is None or isinstance(status.nice, int)
    for job_id, state, comment in parse_search(text):
        assert re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id, re.ASCII) and isinstance(comment, str)


# ---- the counters file, metrics.HOST.state ---------------------------------------------------

def counters_of() -> dict:
    from onite.core.state import Result
    from onite.spool.counters import Counters

    counters = Counters(host="vm", drain_started=WHEN, drain_ended=WHEN, drain_exit=0, completed=WHEN)
    counters.file(Result.from_json(record_of()))
    return counters.to_json()


@st.composite
def mutated_counters(draw) -> dict:
    record = counters_of()
    parts = [record, record["drain"], record["run_seconds"], record["run_seconds"]["buckets"], record["finished"][0]]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(parts))
        key = draw(st.sampled_from(list(range(len(where))) if isinstance(where, list) else list(where)))
        where[key] = draw(json_values)
    return record


@FUZZ
@given(st.binary(max_size=300) | mutated_counters().map(lambda r: json.dumps(r).encode()))
@example(b"[" * 100_000)
@example(b"\xff\xfe")
@pytest.mark.attack
def test_counters_any_bytes(data):
    """A counters file reads as counters that write back the same, or as DamagedRecord."""
    from onite.spool.counters import parse_counters

    try:
        counters = parse_counters(data, "vm")
    except DamagedRecord:
        return
    assert parse_counters(json.dumps(counters.to_json()).encode(), "vm").to_json() == counters.to_json()


def test_counters_round_trip():
    from onite.spool.counters import parse_counters

    record = counters_of()
    assert parse_counters(json.dumps(record).encode(), "vm").to_json() == record
    assert record["finished"] == [["failed", "3", "alice", 1]] and record["attempts"] == 1
    with pytest.raises(DamagedRecord, match="damaged counters metrics.node2.state: it is the file of host 'vm'"):
        parse_counters(json.dumps(record).encode(), "node2")


LOG_VALUES = NASTY.map(lambda raw: raw.decode("utf-8", "replace")) | texts


@st.composite
def drain_logs(draw) -> list[str]:
    """onite.log of a drain whose job lines' fields hold anything (a hand-edited log), with raw lines among them."""
    from onite.spool.log import format_line

    start = datetime.now().astimezone().replace(microsecond=0) - timedelta(minutes=30)
    lines = [format_line(start, "vm", 4242, "driver-start", host="vm", slots=1)]
    for i in range(draw(st.integers(1, 4))):
        when = start + timedelta(seconds=10 * i + 1)
        name = draw(st.sampled_from(["root:a", "root:b", "nobody:c", "x", ""]))
        fields = {key: draw(LOG_VALUES) for key in draw(st.lists(st.sampled_from(
            ["user", "priority", "attempt", "run", "pid", "exit", "seconds", "reason", "by", "owner"]), max_size=5))}
        lines.append(format_line(when, "vm", 4242, "start", name, **fields))
        event = draw(st.sampled_from(["done", "failed", "cancelled", "retried", "requeued", "refused", "timeout"]))
        lines.append(format_line(when + timedelta(seconds=draw(st.integers(0, 5))), "vm", 4242, event, name, **fields))
        if draw(st.booleans()):
            lines.append(draw(texts).replace("\n", " ") + "\n")
    lines.append(format_line(start + timedelta(minutes=1), "vm", 4242, "driver-exit", reason="drained"))
    return lines


NINE_MINUTES_AGO = (datetime.now().astimezone().replace(microsecond=0) - timedelta(minutes=9)).isoformat()


@FUZZ
@given(drain_logs())
@example([f"{NINE_MINUTES_AGO} vm[1] driver-start\n",
          f"{NINE_MINUTES_AGO} vm[1] done root:a seconds=nan\n"])
@example([f"{NINE_MINUTES_AGO} vm[1] driver-start\n",
          f"{NINE_MINUTES_AGO} vm[1] start root:a priority=\u00b3 attempt={'1' * 5000}\n",
          f"{NINE_MINUTES_AGO} vm[1] done root:a attempt={'1' * 5000} exit={'9' * 5000}\n"])
@pytest.mark.attack
def test_the_report_and_status_read_any_drain_log(scratch_spool, lines):
    """A hand-edited onite.log never stops ``report`` or ``status``: what they cannot read they leave out."""
    from onite.app import report, reporttext, status

    scratch_spool.log_path.write_bytes("".join(lines).encode("utf-8", "surrogateescape"))
    now = datetime.now().astimezone()
    for records in (True, False):
        data = report.build(scratch_spool, now, records=records)
        json.loads(reporttext.to_json(data))
        reporttext.rows(data)
    status.last_night(scratch_spool, now)


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated_job_files() | st.binary(max_size=300).map(lambda b: b"onite-job: 1\n" + b)
       | valid_jobs().map(encode),
       st.lists(st.tuples(st.integers(0, 1 << 16),
                          st.sampled_from([b"\r", b"\r\n", b"\0", b"\x85", b"\xe2\x80\xa8", b"\x0b", b"\x1c",
                                           b"\nenv: A=b", b"\n\n", b"after: a:b\n", b" after: a:b", b"\tafter: a:b"])),
                max_size=3))
@example(b"onite-job: 1\nname: a:b\npriority: 1\nsubmitted: 2026-01-01T00:00:00+00:00\nhost: h\numask: 0022\n"
         b"cwd: /\r\nafter: a:c\n\n", [])
@pytest.mark.attack
def test_a_job_file_cancel_does_not_decode_waits_for_nothing(data, inserts):
    """onite cancel decodes no queued job whose bytes have no ``\\nafter: `` (jobfile.waits_for_nothing): for any
    bytes (CRLF, a NUL, a header split at ``\\nenv: ``), such a file decodes to a job that waits for nothing, or
    not at all, so no job the driver reads as waiting for X is left out of what cancelling X dooms."""
    from onite.core.jobfile import waits_for_nothing

    for at, piece in inserts:
        at %= len(data) + 1
        data = data[:at] + piece + data[at:]
    if not waits_for_nothing(data):
        return
    try:
        job = decode(data)
    except JobFormatError:
        return
    assert job.after == ()
