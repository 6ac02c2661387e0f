"""The job file format: exact round trips, versioning, damage (pure)."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from onite.core.errors import JobFormatError
from onite.core.job import Attempt, Job
from onite.core.jobfile import decode, encode, escape, unescape

WHEN = datetime(2026, 11, 22, 14, 3, 11, 512345, tzinfo=timezone(timedelta(hours=1)))

ODD_ENV = {
    b"PATH": b"/usr/bin:/bin",
    b"PS1": b"\x1b[1m\\u@\\h \\$ \x1b[0m\n> ",
    b"MULTI": b"line one\nline two\r\n\tindented",
    b"QUOTES": b"""it's "quoted" `cmd` $HOME ${X} \\n literal""",
    b"BINARY": b"\xff\xfe\x01\x80 end",  # any byte but NUL: execve cannot pass a NUL
    b"UTF8": "grüße € 日本".encode(),
    b"BASH_FUNC_greet%%": b"() {  echo hi\n}",
    b"A-B.C": b"not an identifier",
    b"EMPTY": b"",
    b"EQUALS": b"a=b=c",
    b"\xe9t\xe9": b"latin-1 name",
}


def make_job(**overrides) -> Job:
    fields = dict(name="alice:nightly-report", priority=3, submitted=WHEN, host="vm", umask=0o027,
                  cwd=b"/home/al ice/\xffdir", env=dict(ODD_ENV), body=b"#!/bin/sh\necho hi\n\xff\x00\n")
    fields.update(overrides)
    return Job(**fields)


def test_round_trip_is_exact():
    job = make_job(timeout=timedelta(seconds=5400), retries=2, after=("alice:backup", "bob:build"),
                   not_before=WHEN + timedelta(hours=12), urgent=True, pin="node2", attempt=2,
                   tried=(Attempt(attempt=1, started=WHEN, finished=WHEN + timedelta(seconds=3), host="vm",
                                  exit_code=3, reason="exit 3"),),
                   recur="alice:backup")
    assert decode(encode(job)) == job


def test_env_order_and_bytes_survive():
    decoded = decode(encode(make_job()))
    assert list(decoded.env.items()) == list(ODD_ENV.items())


@pytest.mark.parametrize("body", [b"", b"\n\n\n", b"\x00\x01\x02\xff" * 100, b"onite-job: 1\n\nnested header"])
def test_body_bytes_are_verbatim(body):
    assert decode(encode(make_job(body=body))).body == body


def test_the_file_is_readable_text():
    text = encode(make_job()).split(b"\n\n", 1)[0].decode("utf-8")
    assert text.startswith("onite-job: 1\nname: alice:nightly-report\npriority: 3\n")
    assert "env: MULTI=line one\\nline two\\r\\n\\tindented" in text
    assert "env: BINARY=\\xff\\xfe\\x01\\x80 end" in text
    assert "env: BASH_FUNC_greet%%=() {  echo hi\\n}" in text
    assert "\x1b" not in text  # no raw escape sequences reach a terminal that cats the file


@pytest.mark.parametrize("raw", [b"", b"plain", b"\\", b"\\x41", b"\\\\n", "é".encode(), b"\xc3", b"\xc2\x9b",
                                 bytes(range(256))])
def test_escape_inverts(raw):
    assert unescape(escape(raw)) == raw
    assert "\n" not in escape(raw)


def test_version_one_fixture_stays_readable():
    # tests/data/job-v1 is format 1 as it will first be released (names are keys); it must decode forever.
    job = decode(Path(__file__).with_name("data").joinpath("job-v1").read_bytes())
    assert job.name == "alice:nightly-report" and job.priority == 3 and job.after == ("alice:backup",)
    assert job.env[b"PS1"] == b"\\u@\\h\n$ "
    assert job.body == b"#!/bin/sh\necho report\n"


def test_newer_format_is_refused_clearly():
    data = encode(make_job()).replace(b"onite-job: 1", b"onite-job: 2", 1)
    with pytest.raises(JobFormatError, match="format '2' is not one this onite reads"):
        decode(data)


@pytest.mark.parametrize("data, message", [
    (b"#!/bin/sh\necho not a job\n", "not an onite job file"),
    (b"onite-job: 1\nname: x\n", "the header has no end"),
    (b"onite-job: 1\nname: x\npriority: 1\n\nbody", "damaged job file: no submitted"),
    (b"onite-job: 1\ngarbage line\n\n", "damaged job file header line"),
    (b"onite-job: 1\nname: x\npriority: one\nsubmitted: 2026-01-01T00:00:00+00:00\nhost: h\numask: 0022\ncwd: /\n\n",
     "damaged job file"),
])
def test_damaged_files_raise(data, message):
    with pytest.raises(JobFormatError, match=message):
        decode(data)


def test_unknown_header_keys_are_kept():
    data = encode(make_job()).replace(b"\nenv: ", b"\nfuture-key: some value\nenv: ", 1)
    assert ("future-key", "some value") in decode(data).extra


def test_stderr_separate_is_a_header_line_only_when_set():
    assert b"\nstderr: separate\n" in encode(make_job(stderr_separate=True))
    assert b"stderr:" not in encode(make_job())
    assert decode(encode(make_job(stderr_separate=True))).stderr_separate
    assert not decode(encode(make_job())).stderr_separate
    data = encode(make_job())
    assert decode(data.replace(b"\numask:", b"\nstderr: merged\numask:", 1)).stderr_separate is False
    with pytest.raises(JobFormatError, match="stderr: 'apart'"):
        decode(data.replace(b"\numask:", b"\nstderr: apart\numask:", 1))


# ---- hostile job files: decode is total ------------------------------------------------

GOOD = encode(make_job(env={b"PATH": b"/bin"}, body=b"echo hi\n"))


def _with(line: bytes, *, replace: bytes | None = None) -> bytes:
    """GOOD with ``line`` added to its header (or put in place of the header line starting ``replace``)."""
    if replace is None:
        return GOOD.replace(b"\nenv: ", b"\n" + line + b"\nenv: ", 1)
    head, _, rest = GOOD.partition(b"\n" + replace)
    return head + b"\n" + line + rest[rest.index(b"\n"):]


@pytest.mark.parametrize("data, message", [
    (_with(b"timeout: 1e20"), "timeout '1e20' is not longer than 0"),
    (_with(b"timeout: inf"), "timeout 'inf'"),
    (_with(b"timeout: nan"), "timeout 'nan'"),
    (_with(b"timeout: -5"), "timeout '-5'"),
    (_with(b"timeout: 0"), "timeout '0'"),
    (_with(b"timeout: 0.0000001"), "timeout 0s is not longer than 0"),
    (_with(b"timeout: 31622401"), "at most 366 days"),
    (_with(b"tried: x"), "damaged job file"),
    (_with(b'tried: {"attempt": 1, "started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:00:00+00:00"}'),
     "1 attempts tried before attempt 1"),
    (_with(b"tried: []"), "not an object"),
    (_with(b"tried: " + b"[" * 100_000), "damaged job file"),
    (_with(b'tried: {"attempt": 1, "started": "2026-01-01T00:00:00", "finished": "2026-01-01T00:00:00+00:00"}'),
     "started: .* is not a time with its UTC offset"),
    (_with(b'tried: {"attempt": 1e400, "started": "2026-01-01T00:00:00+00:00"}'), "attempt: inf"),
    (_with(b'tried: {"attempt": true}'), "attempt: True"),
    (_with(b'tried: {"attempt": 1, "started": "2026-01-01T00:00:00+00:00", '
           b'"finished": "2026-01-01T00:00:00+00:00", "exit_code": 99999999999999999999}'), "exit_code"),
    (_with(b"at: 2026-11-23T02:00:00"), "at: .* is not a time with its UTC offset"),
    (_with(b"at: 0001-01-01T00:00:00+14:00"), "in the years 1900 to 9998"),
    (_with(b"at: 9999-12-31T23:59:59-14:00"), "in the years 1900 to 9998"),
    (_with(b"submitted: 2026-11-22T14:03:11", replace=b"submitted: "), "submitted: .* UTC offset"),
    (_with(b"env: A\\x3dB=value"), "name 'A=B' is empty or holds '='"),
    (_with(b"env: =value"), "name '' is empty"),
    (_with(b"env: A\\x00B=value"), "holds '=' or a NUL byte"),
    (_with(b"env: GOOD=a\\x00b"), "value of environment variable 'GOOD' holds a NUL byte"),
    (GOOD.replace(b"env: PATH=/bin", b"env: PATH=/b\\x00in"), "value of environment variable 'PATH' holds a NUL"),
    (_with(b"cwd: /home/a\\x00b", replace=b"cwd: "), "cwd is not an absolute path without NUL bytes"),
    (_with(b"cwd: relative/dir", replace=b"cwd: "), "cwd is not an absolute path"),
    (_with(b"priority: 99999999999999999999999", replace=b"priority: "), "priority 99999999999999999999999 is not"),
    (_with(b"priority: 0", replace=b"priority: "), "priority 0 is not 1 to 99"),
    (_with(b"priority: 100", replace=b"priority: "), "priority 100 is not 1 to 99"),
    (_with(b"priority: " + b"9" * 5000, replace=b"priority: "), "damaged job file"),
    (_with(b"umask: 1777", replace=b"umask: "), "umask 1023 is not"),
    (_with(b"umask: -1", replace=b"umask: "), "umask '-1' is not an octal number"),
    (_with(b"retries: 101"), "retries 101 is not 0 to 100"),
    (_with(b"retries: -1"), "retries '-1' is not a whole number"),
    (_with(b"attempt: 2"), r"attempt 2 is not 1 to retries \+ 1"),
    (_with(b"retries: 2\nattempt: 4"), r"attempt 4 is not 1 to retries \+ 1 \(3\)"),
    (_with(b"attempt: 0"), "attempt 0"),
    (_with(b"name: a\\nb", replace=b"name: "), "is not a job key"),
    (_with(b"name: ../x", replace=b"name: "), "'../x' is not a job key"),
    (_with(b"after: ;$(id)"), r"after: ';\$\(id\)' is not a job key"),
    (_with(b"pin: a b"), "pin: 'a b' is not a valid host name"),
    (_with(b"recur: x/y"), "recur: 'x/y' is not a job key"),
])
def test_hostile_header_values_are_damage(data, message):
    with pytest.raises(JobFormatError, match=message):
        decode(data)


@pytest.mark.parametrize("body, message", [
    (b"#!/bin/sh\0x\nid\n", "its #! line holds a NUL byte"),
    (b"#!/bin/sh -e\0\n", "NUL byte"),
    (b"#!" + b"/" * 256 + b"\necho\n", "its #! line is 256 bytes long, more than the 255"),
    (b"#!" + b"x" * 300, "300 bytes long"),
])
def test_a_shebang_line_that_can_never_run_is_damage(body, message):
    with pytest.raises(JobFormatError, match=message):
        decode(GOOD.replace(b"\n\necho hi\n", b"\n\n" + body))
    with pytest.raises(ValueError, match=message):
        make_job(body=body)


@pytest.mark.parametrize("body", [b"#!/bin/sh\nx\0y\n", b"#!" + b"/" * 255 + b"\n", b"#!", b"#!\n\0", b"\0#!/bin/sh\0\n"])
def test_shebang_lines_within_the_limits_decode(body):
    assert decode(encode(make_job(body=body))).body == body


def test_timeouts_are_written_exactly():
    # %g wrote 6 digits: a timeout of 1234567 s came back as 1234570 s
    for seconds in (1234567, 7200, 0.25, 31622399.999999, 31622400, 0.000001):
        job = make_job(timeout=timedelta(seconds=seconds))
        assert decode(encode(job)).timeout == job.timeout


def test_a_host_name_that_is_not_utf8_is_written():
    job = make_job(host="vm\udcff")
    assert decode(encode(job)).host == "vm\ufffd"  # replaced on the way back, never a crash


@pytest.mark.parametrize("field, value", [
    ("name", "a b"), ("priority", 0), ("priority", True), ("umask", 0o1000), ("cwd", b"rel"), ("cwd", b"/a\0"),
    ("timeout", timedelta(0)), ("timeout", timedelta(days=367)), ("retries", 101), ("attempt", 0),
    ("after", ("alice:ok", "not ok")), ("after", ("alice:ok", "ok")), ("pin", ""), ("recur", "a/b"), ("submitted", WHEN.replace(tzinfo=None)),
    ("not_before", WHEN.replace(year=1)), ("extra", (("a\nb", "x"),)), ("extra", (("env", "x"),)),
    ("extra", (("priority", "1"),)),
])
def test_a_job_is_valid_by_construction(field, value):
    with pytest.raises(ValueError):
        make_job(**{field: value})
    with pytest.raises(ValueError):  # nor can a valid one be changed into it (the driver's retries, edits)
        make_job()._replace(**{field: value})
