"""The job file format: exact round trips, versioning, damage (pure)."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from onite.errors import JobFormatError
from onite.jobfile import Attempt, Job, decode, encode, escape, unescape

WHEN = datetime(2026, 11, 22, 14, 3, 11, 512345, tzinfo=timezone(timedelta(hours=1)))

ODD_ENV = {
    b"PATH": b"/usr/bin:/bin",
    b"PS1": b"\x1b[1m\\u@\\h \\$ \x1b[0m\n> ",
    b"MULTI": b"line one\nline two\r\n\tindented",
    b"QUOTES": b"""it's "quoted" `cmd` $HOME ${X} \\n literal""",
    b"BINARY": b"\xff\xfe\x00\x01\x80 end",
    b"UTF8": "grüße € 日本".encode(),
    b"BASH_FUNC_greet%%": b"() {  echo hi\n}",
    b"A-B.C": b"not an identifier",
    b"EMPTY": b"",
    b"EQUALS": b"a=b=c",
    b"\xe9t\xe9": b"latin-1 name",
}


def make_job(**overrides) -> Job:
    fields = dict(name="nightly-report", priority=3, submitted=WHEN, host="vm", umask=0o027,
                  cwd=b"/home/al ice/\xffdir", env=dict(ODD_ENV), body=b"#!/bin/sh\necho hi\n\xff\x00\n")
    fields.update(overrides)
    return Job(**fields)


def test_round_trip_is_exact():
    job = make_job(timeout=timedelta(seconds=5400), retries=2, after=("backup", "build"),
                   not_before=WHEN + timedelta(hours=12), urgent=True, pin="node2", attempt=2,
                   tried=(Attempt(attempt=1, started=WHEN, finished=WHEN + timedelta(seconds=3), host="vm",
                                  exit_code=3, reason="exit 3"),),
                   recur="backup")
    assert decode(encode(job)) == job


def test_env_order_and_bytes_survive():
    decoded = decode(encode(make_job()))
    assert list(decoded.env.items()) == list(ODD_ENV.items())


@pytest.mark.parametrize("body", [b"", b"\n\n\n", b"\x00\x01\x02\xff" * 100, b"onite-job: 1\n\nnested header"])
def test_body_bytes_are_verbatim(body):
    assert decode(encode(make_job(body=body))).body == body


def test_the_file_is_readable_text():
    text = encode(make_job()).split(b"\n\n", 1)[0].decode("utf-8")
    assert text.startswith("onite-job: 1\nname: nightly-report\npriority: 3\n")
    assert "env: MULTI=line one\\nline two\\r\\n\\tindented" in text
    assert "env: BINARY=\\xff\\xfe\\x00\\x01\\x80 end" in text
    assert "env: BASH_FUNC_greet%%=() {  echo hi\\n}" in text
    assert "\x1b" not in text  # no raw escape sequences reach a terminal that cats the file


@pytest.mark.parametrize("raw", [b"", b"plain", b"\\", b"\\x41", b"\\\\n", "é".encode(), b"\xc3", b"\xc2\x9b",
                                 bytes(range(256))])
def test_escape_inverts(raw):
    assert unescape(escape(raw)) == raw
    assert "\n" not in escape(raw)


def test_version_one_fixture_stays_readable():
    # tests/data/job-v1 was written by onite's first format; it must decode forever.
    job = decode(Path(__file__).with_name("data").joinpath("job-v1").read_bytes())
    assert job.name == "nightly-report" and job.priority == 3 and job.after == ("backup",)
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
