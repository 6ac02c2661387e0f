"""Many jobs at once: ``onite submit NAME --lines`` and onite.api.Spool.submit_many.

Order (a batch runs in the order of its lines, also where the kernel gave
many of its files the same ctime), all-or-nothing checks, each job all or
nothing while writing, and no temporary file left behind, whatever happens.
"""

import json
import os

import pytest

from conftest import drain
from onite.spool import files
from onite.api import Spool
from onite.core.errors import InvalidInput, Refused, SpoolIOError
from onite.core.jobfile import decode


def files_in(spool):
    """Every file under jobs/, dot-files (temporary files) included."""
    return sorted(str(p.relative_to(spool)) for p in (spool / "jobs").rglob("*") if p.is_file())


def test_lines_become_jobs_that_run_in_order(spool, workdir, cli):
    trace = workdir / "trace"
    count = 300
    lines = "".join(f"echo {i} >> {trace}\n" + ("\n" if i % 7 == 0 else "") for i in range(1, count + 1))
    r = cli(["submit", "batch", "--lines", "-p", "2"], stdin=lines.encode())
    assert r.code == 0, r
    names = [f"batch-{i:05d}" for i in range(1, count + 1)]
    assert r.out == "".join(name + "\n" for name in names)  # a name a line, for scripts
    assert files_in(spool) == [f"jobs/P2/root:{n}" for n in names]
    job = decode((spool / "jobs" / "P2" / "root:batch-00042").read_bytes())
    assert job.body == f"echo 42 >> {trace}\n".encode() and job.priority == 2
    ctimes = [os.stat(spool / "jobs" / "P2" / f"root:{n}").st_ctime_ns for n in names]
    assert ctimes == sorted(ctimes)  # they entered the queue in order (many within one tick)
    listed = cli(["list", "--json"]).json()["jobs"]
    assert [j["name"] for j in listed] == names
    assert drain(spool).returncode == 0
    assert trace.read_text().split() == [str(i) for i in range(1, count + 1)]


def test_batch_options_apply_to_every_job(spool, cli):
    assert cli(["submit", "dep"], stdin=b"true\n").code == 0
    r = cli(["submit", "h", "--lines", "--hold", "--after", "dep", "--timeout", "5m", "--retries", "2"],
            stdin=b"true\nfalse\n")
    assert r.code == 0, r
    for name in ("h-00001", "h-00002"):
        path = spool / "jobs" / "P4" / f"root:{name}"
        job = decode(path.read_bytes())
        assert (path.stat().st_mode & 0o777, job.after, job.timeout.total_seconds(), job.retries) == \
            (0o600, ("root:dep",), 300, 2)
    assert sorted(p.name.partition("@")[0] for p in (spool / "hold").iterdir()) == ["root:h-00001", "root:h-00002"]
    assert {j["state"] for j in cli(["list", "--json"]).json()["jobs"] if j["name"].startswith("h-")} == {"held"}



@pytest.mark.parametrize("base", ["night", "b" * 90])
def test_unique_lines_keep_the_whole_suffix_even_for_a_long_base(spool, cli, base):
    import re

    r = cli(["submit", base, "--lines", "--unique"], stdin=b"true\ntrue\n")
    assert r.code == 0, r
    keys = sorted(p.name for p in (spool / "jobs" / "P4").iterdir())
    assert all(key.startswith("root:") for key in keys), keys
    names = [key.removeprefix("root:") for key in keys]
    stem = re.escape(base[:100 - 1 - 5 - 7])
    assert len(names) == 2 and all(re.fullmatch(stem + r"-[a-z2-9]{6}-0000[12]", n) for n in names), names
    assert names[0][:-6] == names[1][:-6] and all(len(n) <= 100 for n in names)

def test_a_taken_name_refuses_the_whole_batch(spool, cli):
    assert cli(["submit", "c-00003", "-p", "6"], stdin=b"true\n").code == 0
    before = files_in(spool)
    r = cli(["submit", "c", "--lines"], stdin=b"true\n" * 5)
    assert r.code == 3 and "'c-00003' is already queued" in r.err and r.err.count("\n") == 1, r
    assert files_in(spool) == before


def test_the_api_raises_the_one_error_class_the_user_guide_names(spool):
    """The user guide says ``except onite.api.OniteError:``; there was none, so
    that line itself raised AttributeError the moment a submit failed."""
    import onite.api

    api = Spool(str(spool))
    api.submit("taken", "true\n")
    with pytest.raises(onite.api.OniteError) as caught:
        api.submit("taken", "true\n")
    assert "already queued" in str(caught.value) and caught.value.exit_code == 3


@pytest.mark.parametrize("args, stdin, message", [
    (["submit", "d", "--lines"], b"\n \n\t\n", "no job on stdin"),
    (["submit", "d", "--lines", "-p", "0"], b"true\n", "-p '0': expected a priority from 1"),
    (["submit", "d", "--lines", "--after", "nosuch"], b"true\n", "no job 'nosuch'"),
    (["submit", "d" * 95, "--lines"], b"true\n", "too long to be numbered"),
    (["submit", "../d", "--lines"], b"true\n", "invalid name base"),
])
def test_bad_batches_write_nothing(spool, cli, args, stdin, message):
    r = cli(args, stdin=stdin)
    assert r.code == 2 and message in r.err and r.err.count("\n") == 1, r
    assert files_in(spool) == []


def test_api_submit_many_in_order_with_dependencies_inside_the_batch(spool, workdir):
    trace = workdir / "trace"
    api = Spool(spool)
    jobs = [(f"step-{i}", f"echo {i} >> {trace}\n") for i in range(1, 6)]
    names = api.submit_many(jobs[:1], priority=3) + api.submit_many(jobs[1:], priority=3, after=["step-1"],
                                                                    env={"PATH": "/usr/bin:/bin", "X": "y"})
    assert names == [n for n, _ in jobs]
    assert decode((spool / "jobs" / "P3" / "root:step-2").read_bytes()).env == {b"PATH": b"/usr/bin:/bin", b"X": b"y"}
    assert api.find("step-5") and not api.find("step-6")
    assert drain(spool).returncode == 0
    assert trace.read_text().split() == ["1", "2", "3", "4", "5"]


def test_the_api_spools_from_a_directory_that_is_gone_when_given_a_cwd(spool, tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    api = Spool(spool)
    with pytest.raises(InvalidInput, match="current directory no longer exists"):
        api.submit("here", "true\n")
    assert api.submit("there", "true\n", cwd=str(tmp_path)) == "there"
    assert decode((spool / "jobs" / "P4" / "root:there").read_bytes()).cwd == os.fsencode(tmp_path)


def test_api_checks_everything_first(spool):
    api = Spool(spool)
    with pytest.raises(InvalidInput, match="appears twice"):
        api.submit_many([("x", "true"), ("y", "true"), ("x", "true")])
    with pytest.raises(InvalidInput, match="comes later in the batch"):
        api.submit_many([("x", "true"), ("y", "true")], after="y")
    with pytest.raises(InvalidInput, match="text of job 'y' is empty"):
        api.submit_many([("x", "true"), ("y", b"")])
    with pytest.raises(InvalidInput, match="^the text of job 'z' is empty — give the job a command$"):  # no stdin to speak of here
        api.submit("z", "")
    with pytest.raises(InvalidInput, match="text of job 'w' is empty"):  # first of its options, too
        api.submit_many([("w", b""), ("x", "true")])
    with pytest.raises(TypeError, match="unknown option 'priorty'"):
        api.submit_many([("x", "true")], priorty=2)
    assert files_in(spool) == []
    assert api.submit("x", "true\n", unique=True).startswith("x-")


def failing_writer(monkeypatch, at, error):
    """Make the ``at``-th file of a batch fail while it is written."""
    real = files.write_unnamed
    calls = []

    def write(folder, name, data, mode, owner):
        calls.append(name)
        if len(calls) == at:
            raise error
        return real(folder, name, data, mode, owner)

    monkeypatch.setattr(files, "write_unnamed", write)


def test_a_failed_write_keeps_what_was_spooled_and_leaves_no_temporary_file(spool, monkeypatch):
    monkeypatch.setattr(files, "BATCH_CHUNK", 2)
    failing_writer(monkeypatch, 4, SpoolIOError(spool / "jobs" / "P4" / "root:w-4", "writing", OSError(28, "No space left")))
    with pytest.raises(SpoolIOError) as caught:
        Spool(spool).submit_many([(f"w-{i}", "true\n") for i in range(1, 7)])
    assert "the first 3 of the 6 jobs were spooled: w-1 to w-3" in str(caught.value)
    assert "free some space" in str(caught.value)
    # w-3 shared its chunk with w-4: written before the failure, it was still flushed and named
    assert files_in(spool) == ["jobs/P4/root:w-1", "jobs/P4/root:w-2", "jobs/P4/root:w-3"]


def test_an_interrupted_batch_leaves_no_temporary_file(spool, monkeypatch):
    monkeypatch.setattr(files, "BATCH_CHUNK", 3)
    failing_writer(monkeypatch, 5, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        Spool(spool).submit_many([(f"k-{i}", "true\n") for i in range(1, 9)])
    assert files_in(spool) == ["jobs/P4/root:k-1", "jobs/P4/root:k-2", "jobs/P4/root:k-3"]


def test_a_name_taken_while_writing_stops_the_batch_there(spool, monkeypatch):
    """Another submit takes a name after the checks: the jobs before it stay, nothing is replaced."""
    real = files._link_name

    def link(tmp, folder, name):
        if name == "root:r-3":
            (folder / name).write_bytes(b"someone else's job")
        return real(tmp, folder, name)

    monkeypatch.setattr(files, "_link_name", link)
    with pytest.raises(Refused) as caught:
        Spool(spool).submit_many([(f"r-{i}", "true\n") for i in range(1, 5)])
    assert "the first 2 of the 4 jobs were spooled" in str(caught.value)
    assert files_in(spool) == ["jobs/P4/root:r-1", "jobs/P4/root:r-2", "jobs/P4/root:r-3"]
    assert (spool / "jobs" / "P4" / "root:r-3").read_bytes() == b"someone else's job"


def test_each_file_is_durable_before_it_is_named(spool, monkeypatch):
    """The flush to disk (syncfs, or an fsync each) happens before any file of the chunk gets its name."""
    events = []
    real_durable, real_link = files._make_durable, files._link_name
    monkeypatch.setattr(files, "BATCH_CHUNK", 3)
    monkeypatch.setattr(files, "_make_durable", lambda paths: (events.append(("sync", len(paths))), real_durable(paths)))
    monkeypatch.setattr(files, "_link_name", lambda tmp, folder, name: (events.append(("link", name)),
                                                                     real_link(tmp, folder, name)))
    Spool(spool).submit_many([(f"s-{i}", "true\n") for i in range(1, 6)])
    assert events == [("sync", 3), ("link", "root:s-1"), ("link", "root:s-2"), ("link", "root:s-3"),
                      ("sync", 2), ("link", "root:s-4"), ("link", "root:s-5")]


def test_list_json_is_still_the_same_document(spool, cli):
    assert cli(["submit", "j", "--lines"], stdin=b"true\ntrue\n").code == 0
    doc = cli(["list", "--json"])
    assert doc.out == json.dumps(doc.json(), indent=1) + "\n"


def test_a_batch_shares_one_decoded_environment_but_every_job_has_its_own_copy():
    from datetime import datetime, timezone

    from onite.core.job import Job
    from onite.core.errors import JobFormatError
    from onite.core.jobfile import decode, encode

    env = {b"PATH": b"/bin", b"ODD\xff": b"two\nlines", b"Q": b"'\"$x\\"}
    jobs = [Job(name=f"root:e{i}", priority=4, submitted=datetime.now(timezone.utc), host="h", umask=0o22, cwd=b"/",
                env=dict(env), body=b"true\n", after=("root:x",) * (i % 2)) for i in range(3)]
    decoded = [decode(encode(job)) for job in jobs]
    assert decoded == jobs
    decoded[0].env[b"CHANGED"] = b"1"
    assert decode(encode(jobs[1])).env == env
    # the env lines end the header: a line after them (edited by hand; the daemon's look at `at` would miss it) is
    # damage, whatever the cached environment of the batch
    raw = encode(jobs[1]).replace(b"after: root:x\n", b"").replace(b"\nenv: PATH=/bin\n",
                                                                   b"\nenv: PATH=/bin\nat: 2026-01-01T00:00:00+00:00\n")
    with pytest.raises(JobFormatError, match="the env lines end the header"):
        decode(raw)
