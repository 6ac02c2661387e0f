"""Each user has their own job names: a job's file name is its key USER:NAME (docs/spool-format.md, KEYS).

Real users (``daemon`` and ``nobody``), a real spool, a real driver.
"""

from __future__ import annotations

import os
import pwd

import pytest

from conftest import drain, log_lines, run_cli
from test_attacks import HOST, job_file, plant

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as the users daemon and nobody")


def submit(name: str, body: str, *args: str, user: str | None = None):
    r = run_cli(["submit", name, *args], stdin=body.encode(), user=user, cwd="/tmp")
    assert r.code == 0, r
    return r


def listed(user: str, *args: str) -> dict[str, dict]:
    r = run_cli(["list", "--all", "--json", *args], user=user, cwd="/tmp")
    assert r.code == 0, r
    return {job["name"]: job for job in r.json()["jobs"]}


def test_two_users_build_side_by_side(spool):
    """daemon's and nobody's ``build`` are queued, run and kept side by side, each with its own output and
    result; ``daemon:build`` reaches daemon's from nobody's ``--after`` and ``wait``."""
    submit("build", "echo daemon-built\n", user="daemon")
    submit("build", "echo nobody-built\n", user="nobody")
    submit("then", "echo after-daemons\n", "--after", "daemon:build", user="nobody")
    assert sorted(os.listdir(spool / "jobs" / "P4")) == ["daemon:build", "nobody:build", "nobody:then"]
    seen = listed("nobody")
    assert set(seen) == {"build", "daemon:build", "then"}
    assert seen["build"]["user"] == "nobody" and seen["daemon:build"]["user"] == "daemon"
    assert seen["then"]["waiting"] == "after daemon:build (queued)", seen["then"]
    r = run_cli(["submit", "build"], stdin=b"true\n", user="daemon", cwd="/tmp")
    assert r.code == 3 and "a job named 'build' is already queued" in r.err, r  # one name at a time, per user

    assert drain(spool).returncode == 0
    for user in ("daemon", "nobody"):
        r = run_cli(["output", "build"], user=user, cwd="/tmp")
        assert r.code == 0 and r.out == f"{user}-built\n", r
    r = run_cli(["output", "daemon:build"], user="nobody", cwd="/tmp")
    assert r.code == 3 and "belongs to daemon" in r.err, r
    r = run_cli(["wait", "daemon:build", "then"], user="nobody", cwd="/tmp")
    assert r.code == 0 and r.out.splitlines() == ["daemon:build: done", "then: done"], r
    results = {name: (spool / "jobsdone" / f"{name}@result") for name in ("daemon:build", "nobody:build")}
    assert {name: path.stat().st_uid for name, path in results.items()} == {"daemon:build": 0, "nobody:build": 0}
    seen = listed("daemon")
    assert seen["build"]["state"] == "done" and seen["nobody:build"]["state"] == "done"
    assert seen["nobody:then"]["state"] == "done"


def test_a_user_cancels_only_their_own_name_and_root_reaches_anyones(spool):
    submit("c1", "true\n", user="daemon")
    submit("c1", "true\n", user="nobody")
    submit("c2", "true\n", user="nobody")
    r = run_cli(["cancel", "daemon:c1"])  # root
    assert r.code == 0 and "daemon:c1: cancelled" in r.out, r
    assert sorted(os.listdir(spool / "jobs" / "P4")) == ["nobody:c1", "nobody:c2"]
    r = run_cli(["cancel", "c*"], user="nobody", cwd="/tmp")
    assert r.code == 0 and "cancelled 2 job(s)" in r.out, r
    assert os.listdir(spool / "jobs" / "P4") == []
    r = run_cli(["cancel", "daemon:c1"], user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (3, "onite: job 'daemon:c1' was cancelled already — only its owner or root may spool "
                                  "it again\n"), r


def test_a_forged_key_is_refused_and_never_counted(spool):
    """nobody puts a file at daemon's key ``daemon:evil``: it is not daemon's job anywhere (list, wait,
    --after), daemon's submit of ``evil`` says whose file sits there, and the driver sets it aside
    without a result; then daemon may spool ``evil``."""
    forged = spool / "jobs" / "P1" / "daemon:evil"
    plant(forged, job_file("daemon:evil", "/tmp", b"echo forged > /tmp/onite-forged-ran\n"))
    assert "daemon:evil" not in listed("root") and "evil" not in listed("daemon")
    r = run_cli(["submit", "evil"], stdin=b"true\n", user="daemon", cwd="/tmp")
    assert r.code == 3 and "nobody's, not yours: a forgery" in r.err, r
    r = run_cli(["submit", "w", "--after", "daemon:evil"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 2 and "no job 'evil' of daemon's" in r.err, r
    assert drain(spool).returncode == 0
    assert not forged.exists() and not os.path.exists("/tmp/onite-forged-ran")
    assert any(name.startswith("daemon:evil@") for name in os.listdir(spool / "refused"))
    assert any(" refused daemon:evil " in line and "a forgery" in line for line in log_lines(spool))
    assert not (spool / "jobsdone" / "daemon:evil@result").exists()
    submit("evil", "true\n", user="daemon")


def test_a_file_of_another_users_in_running_is_refused_for_a_big_batch_as_for_one_job(spool):
    """A file of nobody's at daemon's key in running/ (only a driver moves files there; made here by hand):
    daemon's submit of that name says whose file it is, whether it spools one job or a batch of 100 (looked up
    by a listing of each folder, not key by key): the two lookups are one rule."""
    running = spool / "running" / HOST
    running.mkdir(parents=True, exist_ok=True)
    (running / "daemon:big-00050").write_bytes(job_file("daemon:big-00050", "/tmp"))
    nobody = pwd.getpwnam("nobody")
    os.chown(running / "daemon:big-00050", nobody.pw_uid, nobody.pw_gid)
    for args, stdin in ((["submit", "big-00050"], b"true\n"), (["submit", "big", "--lines"], b"true\n" * 100)):
        r = run_cli(args, stdin=stdin, user="daemon", cwd="/tmp")
        assert r.code == 3 and "nobody's, not yours: a forgery" in r.err, (args, r)
    assert sorted(os.listdir(spool / "jobs" / "P4")) == []


def test_a_forged_cancel_or_hold_at_another_users_key_does_nothing(spool):
    submit("keep", "echo kept\n", user="daemon")
    plant(spool / "cancel" / "daemon:keep@x", job_file("daemon:keep", "/tmp"))  # a "withdrawn" forgery
    plant(spool / "cancel" / "daemon:keep@y", b"")  # a cancel request of nobody's
    plant(spool / "hold" / "daemon:keep@z", b"")  # a hold of nobody's
    assert listed("daemon")["keep"]["state"] == "queued"
    assert drain(spool).returncode == 0
    assert listed("daemon")["keep"]["state"] == "done"
    assert (spool / "stdout" / "daemon:keep").read_text() == "kept\n"


def test_names_are_shown_as_the_reader_writes_them(spool):
    submit("mine", "exit 3\n", user="nobody")
    assert drain(spool).returncode == 0
    r = run_cli(["report", "--plain"], user="nobody", cwd="/tmp")
    assert r.code == 0 and "onite output mine" in r.out and "nobody:mine" not in r.out, r
    r = run_cli(["report", "--plain"])  # root reads nobody's job by its key
    assert r.code == 0 and "nobody:mine" in r.out, r
    daemon = pwd.getpwnam("daemon")
    assert daemon.pw_name == "daemon"  # the account the other tests act as exists


def test_a_dependencys_name_in_a_reason_is_shown_as_the_reader_writes_it(spool):
    """nobody's ``fdep`` waited for nobody's ``fb``, daemon's ``fdep`` for ``nobody:fb``; both ``fb`` failed. The
    driver words each reason as the job's owner writes it (``dependency fb failed`` is nobody's ``fb``): another
    reader sees that dependency by its key, and daemon's ``fdep`` names nobody's ``fb`` as nobody writes it, never
    as a name the reader would read as a job of their own (daemon's ``fb`` failed too)."""
    for user in ("nobody", "daemon"):
        submit("fb", "exit 3\n", user=user)
    submit("fdep", "true\n", "--after", "fb", user="nobody")
    submit("fdep", "true\n", "--after", "nobody:fb", user="daemon")
    assert drain(spool).returncode == 0
    reasons = {user: {name: job["reason"] for name, job in listed(user).items() if "fdep" in name}
               for user in ("nobody", "daemon", "root")}
    assert reasons == {
        "nobody": {"fdep": "dependency fb failed", "daemon:fdep": "dependency fb failed"},
        "daemon": {"fdep": "dependency nobody:fb failed", "nobody:fdep": "dependency nobody:fb failed"},
        "root": {"nobody:fdep": "dependency nobody:fb failed", "daemon:fdep": "dependency nobody:fb failed"},
    }, reasons
    r = run_cli(["report", "--plain"], user="daemon", cwd="/tmp")
    assert r.code == 0 and "dependency fb failed" not in r.out, r
    r = run_cli(["wait", "nobody:fdep"], user="daemon", cwd="/tmp")
    assert r.code == 5 and r.out == "nobody:fdep: failed (dependency nobody:fb failed)\n", r
    r = run_cli(["output", "daemon:fdep"], user="nobody", cwd="/tmp")
    assert r.code == 1 and "job 'daemon:fdep' did not run: dependency fb failed" in r.err, r


def test_another_users_queued_job_has_no_output_for_you_to_wait_for(spool):
    """nobody asks for the output of daemon's queued job: it is daemon's (exit 3), as ``output -f`` says; it was
    told the job had no output yet and to wait for it with ``onite output daemon:qq -f``, which is refused."""
    submit("qq", "echo private\n", "--hold", user="daemon")
    for args in (["output", "daemon:qq"], ["output", "daemon:qq", "-f"], ["output", "daemon:qq", "--stderr"]):
        r = run_cli(args, user="nobody", cwd="/tmp")
        assert r.code == 3 and "belongs to daemon" in r.err and "-f waits" not in r.err, (args, r)
    r = run_cli(["output", "qq"], user="daemon", cwd="/tmp")
    assert r.code == 1 and "it is held; onite release qq lets it run" in r.err, r  # held: -f would wait for ever
    r = run_cli(["output", "daemon:qq"], cwd="/tmp")  # root
    assert r.code == 1 and "it is held; onite release daemon:qq lets it run" in r.err, r


def test_completion_offers_a_users_own_jobs_as_they_may_type_them(spool):
    """nobody completes its own jobs by NAME, and by its key ``nobody:NAME`` once it has typed ``nobody:`` (a
    name every command takes); never daemon's, whichever way it types."""
    for user in ("nobody", "daemon"):
        submit("zeta", "true\n", "--hold", user=user)

    def complete(line: str) -> list[str]:
        env = dict(os.environ, ONITE_SPOOL=str(spool), _ONITE_COMPLETE="complete_bash", COMP_WORDS=line,
                   COMP_CWORD=str(len(line.split(" ")) - 1))
        r = run_cli([], user="nobody", env=env, cwd="/tmp")
        assert r.code == 0 and r.err == "", r
        return r.out.split()

    assert complete("onite release ze") == ["zeta"]
    assert complete("onite release nobody:ze") == ["nobody:zeta"]
    assert complete("onite release nobody:") == ["nobody:zeta"]
    assert complete("onite release daemon:") == []
