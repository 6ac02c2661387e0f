"""``onite restart NAME``: a finished job spooled again from jobsdone/NAME, as ``pueue restart``
(onite.app.edit.restart)."""

import os
import stat

import pytest

from conftest import ROOT, drain, needs_root, nobody, result, run_cli
from onite.core.jobfile import decode

# fails the first time (no marker yet), then succeeds; each run records where and how it ran
PROBE = ('pwd >> {log}; printf "%s|\\n" "$ONITE_PROBE" >> {log}; umask >> {log}\n'
         'if [ -e {marker} ]; then exit 0; fi; touch {marker}; exit 3\n')


def queued_file(spool, name):
    """The queued file of job ``name``: a key, or the NAME of one user's job."""
    [path] = [p for p in (spool / "jobs").rglob(name if ":" in name else f"*:{name}") if p.is_file()]
    return path


def test_restart_of_a_failed_job_runs_it_again_with_its_environment_directory_and_umask(spool, workdir):
    user = "nobody" if ROOT else None
    log, marker = workdir / "log", workdir / "marker"
    env = dict(os.environ, ONITE_PROBE="a 'b' \"c\" $d \\e\nsecond line")
    if user:
        env.update(HOME="/nonexistent", USER=user, LOGNAME=user)
    r = run_cli(["submit", "flaky", "-p", "2", "--timeout", "1h"], stdin=PROBE.format(log=log, marker=marker).encode(),
                env=env, cwd=workdir, umask=0o027, user=user)
    assert r.code == 0, r
    assert drain(spool).returncode == 0
    assert result(spool, "flaky")["state"] == "failed"
    first = log.read_text()
    assert first == f"{workdir}\na 'b' \"c\" $d \\e\nsecond line|\n0027\n"

    key = f"{user}:flaky" if user else "flaky"
    r = run_cli(["restart", key], env=dict(os.environ, ONITE_PROBE="not this one"), cwd="/", umask=0o022)
    assert (r.code, r.out) == (0, f"{key}\n"), r  # root restarts nobody's job: still nobody's
    assert r.err.startswith(f"spooled {key} (P2) in {spool}; "), r  # and when it is expected to run, as submit says
    path = queued_file(spool, "flaky")
    assert path.parent.name == "P2" and stat.S_IMODE(path.stat().st_mode) == 0o600
    if user:
        assert path.stat().st_uid == nobody().pw_uid
    job = decode(path.read_bytes())
    assert job.attempt == 1 and job.tried == () and job.timeout.total_seconds() == 3600
    assert drain(spool).returncode == 0
    rec = result(spool, "flaky")
    assert (rec["state"], rec["attempt"], rec["user"]) == ("done", 1, user or rec["user"])
    assert log.read_text() == first + first  # the same directory, environment and umask


def test_restart_refuses_a_name_that_is_queued_and_offers_another(spool, cli):
    cli(["submit", "twice"], stdin=b"echo once\n")
    assert drain(spool).returncode == 0
    assert cli(["submit", "twice"], stdin=b"echo the new one\n").code == 0
    r = cli(["restart", "twice"])
    assert (r.code, r.err) == (3, "onite: a job named 'twice' is already queued or running — restart it as another "
                                  "job: onite restart twice --name NEW, or --unique\n")
    r = cli(["restart", "twice", "--name", "twice-again", "--hold"])
    assert (r.code, r.out) == (0, "twice-again\n")
    path = queued_file(spool, "root:twice-again")
    assert decode(path.read_bytes()).body == b"echo once\n"
    assert [j["state"] for j in cli(["list", "--json"]).json()["jobs"] if j["name"] == "twice-again"] == ["held"]
    r = cli(["restart", "twice", "--unique"])
    assert r.code == 0 and r.out.startswith("twice-") and r.out.strip() != "twice-again"
    assert decode(queued_file(spool, f"root:{r.out.strip()}").read_bytes()).body == b"echo once\n"


def test_restart_of_a_cancelled_job_and_a_past_not_before_time(spool, cli):
    assert cli(["submit", "later", "--at", "2020-01-01T00:00"], stdin=b"true\n").code == 0  # long past
    assert cli(["submit", "stopped", "--at", "2099-01-01T00:00", "-p", "6"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    assert cli(["cancel", "stopped"]).code == 0
    assert (cli(["restart", "later"]).code, cli(["restart", "stopped"]).code) == (0, 0)
    assert decode(queued_file(spool, "root:later").read_bytes()).not_before is None  # due as a new job is
    restarted = decode(queued_file(spool, "root:stopped").read_bytes())
    assert restarted.not_before.year == 2099 and restarted.priority == 6  # still to come: kept


@pytest.mark.parametrize("argv, code, message", [
    (["restart", "nosuch"], 1, "onite: no finished job 'nosuch' is kept — see onite list --all; each user's last "
                               "`keep` finished jobs are kept\n"),
    (["restart", "bad/name"], 2, None),
    (["restart", "waiting"], 1, "onite: no finished job 'waiting' is kept — it is queued or running; restart it "
                                "once it has finished\n"),
])
def test_restart_errors(spool, cli, argv, code, message):
    assert cli(["submit", "waiting"], stdin=b"true\n").code == 0
    r = cli(argv)
    assert r.code == code and r.err.count("\n") == 1 and r.err.startswith("onite: "), r
    if message:
        assert r.err == message


@needs_root
def test_only_the_owner_or_root_may_restart(spool, cli):
    assert cli(["submit", "roots"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    r = cli(["restart", "root:roots"], user="nobody")
    assert (r.code, r.err) == (3, "onite: job 'root:roots' belongs to root — only its owner or root may restart it\n")
    assert not list((spool / "jobs").rglob("*roots"))
    r = cli(["restart", "roots"], user="nobody")  # NAME is the caller's own: nobody has none of that name
    assert (r.code, r.err) == (1, "onite: no job 'roots' of yours — root:roots is root's job, not yours\n"), r
    r = cli(["restart", "nosuch"], user="nobody")
    assert (r.code, r.err) == (1, "onite: no finished job 'nosuch' is kept — see onite list --all; each user's last "
                                  "`keep` finished jobs are kept\n"), r
    assert cli(["submit", "queued"], stdin=b"true\n").code == 0  # ("restart it once it has finished")
    r = cli(["restart", "root:queued"], user="nobody")
    assert (r.code, r.err) == (1, "onite: no finished job 'root:queued' is kept — it is queued or running; restart "
                                  "it once it has finished\n"), r


@needs_root
def test_a_user_restarts_a_job_they_cancelled_before_a_driver_filed_it(spool, cli):
    assert cli(["submit", "mine"], stdin=b"echo mine\n", user="nobody", cwd="/tmp").code == 0
    assert cli(["cancel", "mine"], user="nobody").code == 0
    assert not (spool / "jobsdone" / "nobody:mine").exists()  # withdrawn into cancel/, for a driver to file
    r = cli(["restart", "mine"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "mine\n"), r
    assert queued_file(spool, "mine").stat().st_uid == nobody().pw_uid


def test_a_timed_out_job_is_restarted_with_a_longer_limit_as_the_report_says(spool, cli):
    """The report's line for a timed-out job gives the command to run it again with twice its time, rounded
    (``next: onite restart slow --timeout 5s``); restart takes that and submit's other options for a rerun."""
    assert cli(["submit", "slow", "--timeout", "1s"], stdin=b"sleep 30\n").code == 0
    assert cli(["submit", "bad"], stdin=b"exit 3\n").code == 0
    assert drain(spool).returncode == 0
    text = cli(["report"], env=dict(os.environ, COLUMNS="200")).out
    assert "    next: onite restart slow --timeout 5s\n" in text, text
    assert "    onite output bad\n    next: onite restart bad\n" in text, text
    r = cli(["restart", "slow", "--timeout", "5s", "-p", "2", "--retries", "1", "--mem", "64M", "--cpus", "1",
             "--at", "+1h", "--after", "bad"])
    assert (r.code, r.out) == (0, "slow\n"), r
    job = decode(queued_file(spool, "slow").read_bytes())
    assert queued_file(spool, "slow").parent.name == "P2"
    assert (job.timeout.total_seconds(), job.retries, job.mem, job.cpus, job.after) == (5, 1, 64, 1, ("root:bad",))
    assert job.not_before is not None
    r = cli(["restart", "bad", "--timeout", "soon"])
    assert (r.code, r.err) == (2, "onite: --timeout 'soon': expected a duration such as 90s, 45m, 2h, 1h30m or 1d "
                                  "(a bare number is seconds)\n"), r
    assert not list((spool / "jobs").rglob("root:bad"))  # nothing spooled


@needs_root
@pytest.mark.attack
def test_a_finished_job_others_may_write_is_not_restarted(spool, cli, workdir):
    """nobody's kept job file, made writable by all (its owner's own chmod, or a careless umask on a withdrawn
    one): daemon wrote a command into it, and nobody's `onite restart` spooled it and ran it as nobody. A
    finished file is trusted as the driver trusts a queued one: its owner's alone, or it is not restarted."""
    assert cli(["submit", "mine"], stdin=b"echo mine\n", user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    kept = spool / "jobsdone" / "nobody:mine"
    assert kept.stat().st_uid == nobody().pw_uid
    assert cli(["restart", "mine", "--name", "again"], user="nobody", cwd="/tmp").code == 0  # as kept: fine
    os.chmod(kept, 0o666)  # as nobody may
    r = cli(["restart", "mine"], user="nobody", cwd="/tmp")
    assert r.code == 3 and "cannot be restarted: writable by users other than its owner" in r.err, r
    assert len(r.err.splitlines()) == 1
    assert not list((spool / "jobs").rglob("nobody:mine"))


@pytest.mark.parametrize("extra, message", [
    ([], "onite: invalid job name '': it is empty — use e.g. nightly-report or backup.2026-11-22\n"),
    (["--unique"], "onite: invalid name base '': it is empty — use e.g. nightly-report or backup.2026-11-22\n"),
])
def test_restart_with_an_empty_new_name_is_refused_not_spooled_under_the_old_one(spool, cli, extra, message):
    """`onite restart old --name "$NEW"` with NEW unset spooled the job again as `old`, as if --name were not given."""
    assert cli(["submit", "old"], stdin=b"true\n").code == 0
    assert drain(spool).returncode == 0
    r = cli(["restart", "old", "--name", "", *extra])
    assert (r.code, r.err) == (2, message), r
    assert cli(["find", "old"]).code == 1


def test_a_job_filed_after_its_retries_restarts_with_fewer_retries(spool, cli):
    """A job filed on its attempt 3 (--retries 2) kept that attempt in its file; ``restart r --retries 0`` checked
    the new retry count against it, before the attempt count was set back to 1, and was refused: 'cannot change
    job 'nobody:r': attempt 3 is not 1 to retries + 1 (1)'. A restart starts at attempt 1, with any --retries."""
    from conftest import set_config

    set_config(spool, retry_delay="0.05")
    assert run_cli(["submit", "r", "--retries", "2"], stdin=b"false\n", user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert result(spool, "nobody:r")["attempt"] == 3
    r = run_cli(["restart", "r", "--retries", "0", "-q"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "r\n"), r
    job = decode(queued_file(spool, "nobody:r").read_bytes())
    assert (job.attempt, job.retries, job.tried) == (1, 0, ())


def test_restart_with_after_empty_spools_the_job_without_its_dependencies(spool):
    """``--after ''`` means no dependencies for restart as for edit (onite.core.request.JobChanges)."""
    assert run_cli(["submit", "a"], stdin=b"true\n", cwd="/tmp").code == 0
    assert run_cli(["submit", "b", "--after", "a"], stdin=b"true\n", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    r = run_cli(["restart", "b", "--after", ""], cwd="/tmp")
    assert r.code == 0, r
    assert decode(queued_file(spool, "b").read_bytes()).after == ()
