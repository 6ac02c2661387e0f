"""`onite daemon` and `onite run --scheduled`: real processes, a real spool, polling (never sleeping) for effects."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from conftest import REPO, drain, log_lines, needs_root, result, run_cli, set_config, wait_for
from onite.core.schedule import plan, scheduled_window, window_of

HOST = os.uname().nodename.split(".")[0]
BERLIN = ZoneInfo("Europe/Berlin")
FAR = "0 3 29 2 *"  # a schedule that does not fire during a test (3 a.m. on 29 February)


class Daemon:
    """`python -m onite daemon` in its own session; stderr goes to a file (a pipe nobody reads would fill)."""

    def __init__(self, spool: Path, *args: str, env: dict | None = None) -> None:
        self.spool = spool
        self.err_path = spool.parent / f"daemon-{os.urandom(3).hex()}.err"
        full_env = dict(os.environ if env is None else env)
        full_env["ONITE_SPOOL"] = str(spool)
        full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "onite", "daemon", *args], env=full_env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def logged(self, event: str, *, mine: bool = False) -> list[str]:
        """Log lines of ``event`` (``mine``: written by this daemon process only)."""
        tag = f"[{self.proc.pid}] "
        return [line for line in log_lines(self.spool) if (f" {event} " in line or line.endswith(f" {event}"))
                and (not mine or tag in line)]

    def started(self) -> None:
        wait_for(lambda: self.logged("daemon-start", mine=True) or self.proc.poll() is not None,
                 what="the daemon to start")
        assert self.proc.poll() is None, self.stderr

    def round_trip(self) -> None:
        """Prove the daemon went round its loop since now: ask for a status line and wait for the
        daemon's own. A drain still running in it answers instead (its line has no role=daemon): then
        ask again."""
        def said(by_daemon: bool) -> int:
            return sum(("role=daemon" in line) == by_daemon for line in self.logged("status"))

        before = said(True)
        while True:
            by_drain = said(False)
            self.proc.send_signal(signal.SIGUSR1)
            wait_for(lambda: said(True) > before or said(False) > by_drain, what="a status line")
            if said(True) > before:
                return

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def daemons():
    started: list[Daemon] = []

    def start(spool: Path, *args: str) -> Daemon:
        d = Daemon(spool, *args)
        started.append(d)
        return d

    yield start
    for d in started:
        d.kill()


def submit(name: str, body: str, *args: str):
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r
    return r


def queued(spool: Path) -> list[str]:
    """The keys of the queued jobs."""
    return sorted(p.name for p in (spool / "jobs").rglob("*") if p.is_file())


def state_file(spool: Path) -> Path:
    return spool / f"daemon.{HOST}.state"


def daily_at(moment: datetime) -> str:
    return f"{moment.minute} {moment.hour} * * *"


# ---- the daemon drains, and stops cleanly --------------------------------------------------------


def test_drain_now_then_term_exits_cleanly(spool, workdir, daemons):
    set_config(spool, schedule=[FAR])
    submit("first", f"echo first >> {workdir}/trace\n", "-p", "2")
    submit("second", f"echo second >> {workdir}/trace\n", "-p", "1")
    d = daemons(spool, "--drain-now")
    wait_for(lambda: (spool / "jobsdone" / "root:first@result").exists(), what="the drain")
    assert (workdir / "trace").read_text() == "second\nfirst\n"
    assert d.proc.poll() is None  # it stays, waiting for the schedule
    assert d.stop() == 0
    assert d.logged("daemon-exit")
    # logs go to onite.log and to stderr (journald)
    assert "driver-start" in d.stderr and "done root:first" in d.stderr and "daemon-exit" in d.stderr
    assert not _lock_held(spool)


def _lock_held(spool: Path) -> bool:
    """Does a live process hold the driver's lock? A shared, non-blocking flock, dropped at once."""
    import fcntl

    try:
        fd = os.open(spool / "locks" / f"driver.{HOST}.lock", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_term_while_a_job_runs_finishes_it_first(spool, workdir, daemons):
    set_config(spool, schedule=[FAR])
    gate, started = workdir / "gate", workdir / "started"
    gate.touch()
    submit("long", f"touch {started}; while [ -e {gate} ]; do sleep 0.02; done; echo finished\n")
    submit("never", "echo should-not-start\n")
    d = daemons(spool, "--drain-now")
    wait_for(started.exists, what="the job to start")
    d.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: any("finish running jobs" in line for line in log_lines(spool)), what="the TERM to be seen")
    assert d.proc.poll() is None  # still waiting for its job
    gate.unlink()
    assert d.proc.wait(60) == 0
    assert result(spool, "long")["state"] == "done" and queued(spool) == ["root:never"]


def test_the_daemon_holds_the_lock_and_an_onite_run_hands_it_the_drain(spool, daemons):
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    assert _lock_held(spool) and "role=daemon" in (spool / "locks" / f"driver.{HOST}.lock").read_text()
    beat = json.loads((spool / f"driver.{HOST}.state").read_text())
    assert (beat["role"], beat["state"], beat["pid"]) == ("daemon", "idle", d.proc.pid)
    submit("waits", "true\n")
    proc = drain(spool)  # the daemon is idle: onite run hands it the drain instead of saying "busy"
    assert proc.returncode == 0 and b" drain-handed " in proc.stderr, proc.stderr
    wait_for(lambda: (spool / "jobsdone" / "root:waits@result").exists(), what="the daemon to drain")
    assert d.logged("drain-now", mine=True) and result(spool, "waits")["state"] == "done"
    second = daemons(spool)
    assert second.proc.wait(60) == 3
    assert "an onite daemon already runs" in second.stderr and second.stderr.count("\n") == 1
    status = run_cli(["status", "--json"]).json()
    assert status["drivers"] and status["drivers"][0]["role"] == "daemon" and status["drivers"][0]["pid"] == d.proc.pid
    assert d.stop() == 0
    assert json.loads((spool / f"driver.{HOST}.state").read_text())["state"] == "exited"


def test_a_restarted_daemon_recovers_what_the_killed_one_left_at_once(spool, workdir, daemons):
    """kill -9 mid-job, started again: the job is adopted and filed once, then, not at the next scheduled
    drain (status showed it running, its end unfiled, until then)."""
    set_config(spool, schedule=[FAR])
    submit("long", f"echo start >> {workdir}/ledger; while [ ! -e {workdir}/go ]; do sleep 0.1; done; "
           f"echo end >> {workdir}/ledger\n")
    first = daemons(spool, "--drain-now")
    wait_for(lambda: (workdir / "ledger").exists() and any(
        p.name == "root:long@run" for p in (spool / "running").glob("*/*")), what="the job to start")
    os.kill(first.proc.pid, signal.SIGKILL)  # the daemon only: the job and its monitor go on
    first.proc.wait()
    again = daemons(spool)
    again.started()
    wait_for(lambda: any("root:long" in line and "adopted" in line for line in again.logged("recovered", mine=True)),
             what="the job to be adopted")
    (workdir / "go").touch()
    wait_for(lambda: (spool / "jobsdone" / "root:long@result").exists(), what="the adopted job to be filed")
    assert result(spool, "long")["state"] == "done"
    assert (workdir / "ledger").read_text() == "start\nend\n"
    assert again.stop() == 0


def test_after_the_daemon_died_users_are_told_to_start_it_again_not_to_install_cron(spool, daemons):
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    d.kill()  # kill -9: its heartbeat says idle, not exited
    out = run_cli(["status"]).out
    assert "no drain is scheduled" in out and "the daemon died" in out and "cron --install" not in out, out
    r = submit("after", "true\n")
    assert "the daemon died" in r.err and "cron --install" not in r.err, r


@needs_root
def test_a_user_is_told_that_wake_is_roots(spool, daemons):
    """nobody's `onite daemon --wake` was refused with the locks' message: "run the driver as the spool's owner"."""
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    r = run_cli(["daemon", "--wake"], user="nobody")
    assert r.code == 3 and "--wake is for root" in r.err and "sudo onite daemon --wake" in r.err, r
    assert not d.logged("drain-now") and not (spool / "locks" / f"wake.{HOST}").exists()
    assert d.stop() == 0


def test_invalid_schedule_is_refused_at_start(spool, daemons):
    set_config(spool, schedule=["0 25 * * *"])
    d = daemons(spool)
    assert d.proc.wait(60) == 2
    assert d.stderr.startswith(f"onite: {spool}/onite.toml: schedule: bad cron expression '0 25 * * *'")


# ---- timed jobs and recurring jobs wake the daemon ------------------------------------------------


def test_a_timed_job_runs_when_due_while_untimed_jobs_wait(spool, workdir, daemons):
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    submit("untimed", "echo untimed\n", "-p", "1")
    submit("timed", f"date +%s.%N > {workdir}/ran\n", "--at", "+3s", "-p", "4")
    # its job file, read below, moves into jobsdone/ after its result is written: wait for the file itself
    wait_for(lambda: (spool / "jobsdone" / "root:timed").exists(), what="the timed job to be filed")
    rec = result(spool, "timed")
    from onite.core.jobfile import decode

    not_before = decode((spool / "jobsdone" / "root:timed").read_bytes()).not_before
    assert rec["state"] == "done" and datetime.fromisoformat(rec["started"]) >= not_before
    assert queued(spool) == ["root:untimed"]  # a wake for a not-before time runs only timed jobs
    starts = d.logged("driver-start")
    assert starts and all('only="timed jobs"' in line for line in starts)
    d.round_trip()
    assert queued(spool) == ["root:untimed"]
    assert d.stop() == 0


def test_a_daemon_without_a_schedule_is_said_to_start_timed_jobs(spool, daemons):
    """With schedule = [] a daemon still starts --at jobs and recurring runs when due: submit, recur add and
    wait said "no drain is scheduled, so nothing will run it" of those, and rightly so only of untimed jobs."""
    set_config(spool, schedule=[])
    d = daemons(spool)
    d.started()
    timed = submit("timed", "true\n", "--at", "+1h")
    assert f"the daemon on host {HOST} starts it then" in timed.err and "no drain" not in timed.err, timed
    r = run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n")
    assert r.code == 0 and r.err == f"hourly: the daemon on host {HOST} spools and runs each run as it fires\n", r
    r = run_cli(["wait", "timed", "--timeout", "1s"])
    assert r.code == 6 and r.err == "onite: waiting for timed (queued)…\n", r
    untimed = submit("untimed", "true\n")
    assert "no drain is scheduled" in untimed.err and "has no schedule" in untimed.err, untimed
    r = run_cli(["wait", "untimed", "timed", "--timeout", "1s"])
    assert r.code == 6 and r.err.startswith("onite: no drain is scheduled, so nothing will start one — "), r
    assert d.stop() == 0


def test_a_timed_job_edited_to_an_earlier_time_runs_then(spool, workdir, daemons):
    """onite edit --at moves a queued job's time without touching its file (an edit beside it): the daemon's
    watch read only the file, so a job spooled --at +2h and edited to --at +3s waited the two hours, while
    list and the driver said +3s."""
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    submit("moved", f"touch {workdir}/moved\n", "--at", "+2h")
    d.round_trip()  # the watch has seen it, due in two hours
    assert run_cli(["edit", "moved", "--at", "+3s"]).code == 0
    wait_for(lambda: (spool / "jobsdone" / "root:moved@result").exists(), what="the edited job to run at its new time")
    assert result(spool, "moved")["state"] == "done" and (workdir / "moved").exists()
    assert d.stop() == 0


def test_a_retry_of_a_timed_job_runs_when_its_back_off_ends(spool, workdir, daemons):
    """A retry is its job file again under the same name: the daemon's watch read a name's header only when the
    name was new, so the retry's back-off time was never seen and it waited for the next scheduled drain."""
    set_config(spool, schedule=[FAR], retry_delay="3s")
    d = daemons(spool)
    d.started()
    submit("flaky", f"echo x >> {workdir}/tries; [ $(wc -l < {workdir}/tries) -ge 2 ]\n", "--at", "now",
           "--retries", "1")
    wait_for(lambda: (spool / "jobsdone" / "root:flaky@result").exists(), timeout=60,
             what="the retry to run when its back-off ends")
    assert result(spool, "flaky")["state"] == "done" and (workdir / "tries").read_text() == "x\nx\n"
    assert d.stop() == 0


def test_a_timed_job_spooled_late_still_runs(spool, workdir, daemons):
    """A not-before time already past when the job is spooled: due at once."""
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    past = (datetime.now().astimezone() - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    submit("late", "true\n", "--at", past)
    wait_for(lambda: (spool / "jobsdone" / "root:late@result").exists(), what="the late timed job")
    submit("untimed", "true\n", "-p", "1")
    submit("asap", "true\n", "--at", "now")  # due at once: the daemon runs it, the untimed job waits
    wait_for(lambda: (spool / "jobsdone" / "root:asap@result").exists(), what="the --at now job")
    assert result(spool, "asap")["state"] == "done" and queued(spool) == ["root:untimed"]
    assert d.stop() == 0


@pytest.mark.slow
def test_a_recurring_job_is_spooled_and_run_by_the_daemon(spool, workdir, daemons):
    set_config(spool, schedule=[FAR])
    soon = datetime.now() + timedelta(seconds=6)  # it fires every minute at this second: the daemon waits for it
    r = run_cli(["recur", "add", "minutely", "--every", "1m", "--offset", f"{soon.second}s", "-p", "2"],
                stdin=f"date >> {workdir}/ran\n".encode())
    assert r.code == 0, r
    submit("untimed", "true\n")
    d = daemons(spool)
    d.started()
    r = run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n")
    assert r.code == 0 and r.err.startswith("hourly: the daemon on host ") and r.err.endswith(
        " spools and runs each run as it fires\n"), r
    wait_for(lambda: any(p.name.startswith("root:minutely-") and p.name.endswith("@result")
                         for p in (spool / "jobsdone").iterdir()), timeout=90, what="an instance to run")
    (inst,) = [p.name[:-len("@result")] for p in (spool / "jobsdone").iterdir()
               if p.name.startswith("root:minutely-") and p.name.endswith("@result")]
    rec = result(spool, inst)
    assert rec["state"] == "done" and rec["recur"] == "root:minutely" and rec["priority"] == 2
    stamp = inst[len("root:minutely-"):]  # with the fire's second unless it is 0
    fire = datetime.strptime(stamp, "%Y%m%dT%H%M%S" if len(stamp) == 15 else "%Y%m%dT%H%M").astimezone()
    assert datetime.fromisoformat(rec["started"]) >= fire
    assert "root:untimed" in queued(spool)  # the instance's wake ran only timed jobs
    assert d.logged("recur-spooled")
    assert d.stop() == 0


# ---- missed nights -----------------------------------------------------------------------------


def write_state(spool: Path, last: datetime) -> None:
    state_file(spool).write_text(json.dumps({"version": 1, "host": HOST, "last": last.isoformat()}))


def test_a_missed_night_is_caught_up_once(spool, workdir, daemons):
    now = datetime.now().astimezone()
    fire = (now - timedelta(minutes=5)).replace(second=0, microsecond=0)
    set_config(spool, schedule=[daily_at(fire)])  # no `until`: the window is still open
    write_state(spool, now - timedelta(days=2, hours=1))  # the last drain handled was two nights ago
    submit("waiting", f"echo ran >> {workdir}/trace\n")
    d = daemons(spool)
    wait_for(lambda: (spool / "jobsdone" / "root:waiting@result").exists(), what="the catch-up drain")
    d.round_trip()
    catch_up = d.logged("catch-up")
    assert len(catch_up) == 1 and f"fire={fire.isoformat(timespec='minutes')}" in catch_up[0]
    assert len(d.logged("driver-start")) == 1  # two missed nights, one drain
    last = datetime.fromisoformat(json.loads(state_file(spool).read_text())["last"])
    assert last == fire
    assert d.stop() == 0
    # restarted: nothing is missed any more
    again = daemons(spool)
    again.started()
    again.round_trip()
    assert len(d.logged("catch-up")) == 1 and len(d.logged("driver-start")) == 1
    assert again.stop() == 0


def test_during_a_scheduled_drain_users_are_told_the_next_one(spool, workdir, daemons):
    """The heartbeat of a daemon draining a schedule time names the following one: status and submit
    said "no drain is scheduled" (and "the daemon has no schedule") for the whole night."""
    now = datetime.now().astimezone()
    fire = (now - timedelta(minutes=5)).replace(second=0, microsecond=0)
    set_config(spool, schedule=[daily_at(fire)])
    write_state(spool, now - timedelta(days=1, hours=1))
    submit("long", f"touch {workdir}/started; while [ ! -e {workdir}/go ]; do sleep 0.1; done\n")
    d = daemons(spool)
    wait_for(lambda: (workdir / "started").exists(), what="the scheduled drain to start the job")
    status = run_cli(["status", "--json"]).json()
    assert status["drivers"][0]["state"] == "draining"
    assert status["next_drain"] is not None, status
    assert datetime.fromisoformat(status["next_drain"]) == fire + timedelta(days=1)
    assert "no schedule" not in " ".join(status["warnings"])
    r = submit("later", "true\n")
    assert "no drain is scheduled" not in r.out + r.err, r
    (workdir / "go").touch()
    wait_for(lambda: (spool / "jobsdone" / "root:later@result").exists(), what="the drain to end")
    assert d.stop() == 0


@pytest.mark.slow
def test_a_job_running_past_until_holds_no_timed_job_back(spool, workdir, daemons):
    """The window closes while a job of the scheduled drain still runs: the daemon stayed in that drain,
    starting nothing, so an --at job (or a recurring run) due meanwhile waited for the long job to end."""
    now = datetime.now().astimezone()
    fire = (now - timedelta(minutes=5)).replace(second=0, microsecond=0)
    until = (now + timedelta(minutes=1)).replace(second=0, microsecond=0)  # the window closes within a minute
    set_config(spool, schedule=[daily_at(fire)], until=until.strftime("%H:%M"), slots=2)
    write_state(spool, now - timedelta(days=1, hours=1))
    submit("long", f"touch {workdir}/started; while [ ! -e {workdir}/go ]; do sleep 0.1; done\n")
    d = daemons(spool)
    wait_for(lambda: (workdir / "started").exists(), what="the scheduled drain to start the job")
    wait_for(lambda: d.logged("window-closed", mine=True), timeout=90, what="the window to close")
    submit("untimed", "true\n")
    submit("timed", "true\n", "--at", "now")
    wait_for(lambda: (spool / "jobsdone" / "root:timed@result").exists(), what="the timed job to run")
    assert not (workdir / "go").exists() and queued(spool) == ["root:untimed"]
    (workdir / "go").touch()
    wait_for(lambda: (spool / "jobsdone" / "root:long@result").exists(), what="the long job to end")
    d.round_trip()
    assert queued(spool) == ["root:untimed"]  # it waits for the next night
    assert d.stop() == 0


@pytest.mark.slow
def test_a_schedule_reloaded_during_a_drain_of_timed_jobs_is_followed(spool, workdir, daemons):
    """HUP with a new schedule while a timed job runs: the drain kept the old schedule until it ended, so a
    new time that came meanwhile neither widened it nor showed in status."""
    set_config(spool, schedule=[FAR], slots=2)
    d = daemons(spool)
    d.started()
    submit("timed", f"touch {workdir}/started; while [ ! -e {workdir}/go ]; do sleep 0.1; done\n", "--at", "now")
    wait_for(lambda: (workdir / "started").exists(), what="the timed drain to start the job")
    submit("untimed", "true\n")
    soon = (datetime.now().astimezone() + timedelta(minutes=1)).replace(second=0, microsecond=0)
    set_config(spool, schedule=[daily_at(soon)], slots=2)
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.logged("reloaded"), what="the reload")
    wait_for(lambda: run_cli(["status", "--json"]).json()["next_drain"] == soon.isoformat(),
             what="status to show the new schedule")
    wait_for(lambda: (spool / "jobsdone" / "root:untimed@result").exists(), timeout=120,
             what="the new schedule time to widen the drain")
    assert not (workdir / "go").exists()
    (workdir / "go").touch()
    assert d.stop() == 0


def test_a_wake_during_a_drain_of_timed_jobs_widens_it(spool, workdir, daemons):
    """`onite daemon --wake` while a timed job ran said "is draining already" and left no request (the docs
    say it widens that drain); submit told an untimed job "a drain is running now", a drain that never
    starts it."""
    set_config(spool, schedule=[FAR], slots=2)
    d = daemons(spool)
    d.started()
    submit("timed", f"touch {workdir}/started; while [ ! -e {workdir}/go ]; do sleep 0.1; done\n", "--at", "now")
    wait_for(lambda: (workdir / "started").exists(), what="the timed drain to start the job")
    r = submit("untimed", "true\n")
    assert "a drain is running now" not in r.err, r
    r = run_cli(["daemon", "--wake"])
    assert r.code == 0 and "told the daemon" in r.out, r
    wait_for(lambda: (spool / "jobsdone" / "root:untimed@result").exists(), what="the widened drain")
    assert not (workdir / "go").exists()
    assert all("a scheduled drain time came" not in line for line in d.logged("window-opened")), d.logged("window-opened")
    (workdir / "go").touch()
    assert d.stop() == 0


def test_a_missed_night_whose_window_closed_is_skipped(spool, workdir, daemons):
    now = datetime.now().astimezone()
    fire, until = now - timedelta(minutes=10), now - timedelta(minutes=5)
    set_config(spool, schedule=[daily_at(fire)], until=until.strftime("%H:%M"))
    write_state(spool, now - timedelta(days=2))
    submit("waiting", "true\n")
    d = daemons(spool)
    wait_for(lambda: d.logged("missed-night"), what="the missed night to be logged")
    d.round_trip()
    assert queued(spool) == ["root:waiting"] and not d.logged("driver-start")
    assert datetime.fromisoformat(json.loads(state_file(spool).read_text())["last"]) == \
        fire.replace(second=0, microsecond=0)
    assert d.stop() == 0


def test_first_start_catches_nothing_up(spool, daemons):
    now = datetime.now().astimezone()
    set_config(spool, schedule=[daily_at(now - timedelta(minutes=5))])
    submit("waiting", "true\n")
    d = daemons(spool)
    d.started()
    d.round_trip()
    assert queued(spool) == ["root:waiting"] and not d.logged("driver-start")
    assert state_file(spool).exists()
    assert d.stop() == 0


def test_a_host_changed_in_onite_toml_is_said_to_wait_for_a_restart(spool, daemons):
    """HUP after onite.toml's `host` changed: the daemon logged `reloaded` and went on as the old host, saying
    nothing (a second daemon then started as the new one). It goes on as the old host and says so."""
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    set_config(spool, schedule=[FAR], host="renamed")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.logged("reloaded"), what="the reload")
    assert f"host renamed takes effect when onite daemon restarts; it drains as {HOST} until then" in \
        d.logged("reloaded")[0], d.logged("reloaded")
    assert d.stop() == 0


def test_hup_reloads_the_schedule(spool, daemons):
    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    set_config(spool, schedule=["0 4 * * *"])
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.logged("reloaded"), what="the reload")
    assert 'schedule="0 4 * * *"' in d.logged("reloaded")[0] and "T04:00" in d.logged("reloaded")[0]
    set_config(spool, schedule=["0 99 * * *"])
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.logged("reload-failed"), what="the bad schedule to be refused")
    d.round_trip()
    assert d.proc.poll() is None
    assert d.stop() == 0


def test_status_with_a_bad_schedule_still_shows_while_the_daemon_keeps_its_old_one(spool, daemons):
    """A typo in schedule made `onite status` exit 2 with no status at all, while the daemon (and submit)
    went on with the previous schedule."""
    set_config(spool, schedule=["0 4 * * *"])
    d = daemons(spool)
    d.started()
    set_config(spool, schedule=["0 25 * * *"])
    r = run_cli(["status", "--json"])
    assert r.code == 0, r
    status = r.json()
    assert status["drivers"][0]["role"] == "daemon" and "T04:00" in status["next_drain"]
    assert "schedule: bad cron expression '0 25 * * *'" in r.err and "keeps its previous settings" in r.err, r
    assert d.stop() == 0


def test_a_drain_the_daemon_has_not_yet_rewritten_its_heartbeat_for_is_due_not_missing(spool, daemons):
    """Between a schedule time and the daemon's heartbeat naming the next one (a turn of its loop; minutes while
    the spool's disk is full and the heartbeat cannot be written), the heartbeat names a time now past. Status
    said the daemon had no schedule and no drain was scheduled at all; the drain is due."""
    from onite.drain import heartbeat as hb
    from onite.drain.nextdrain import plan
    from onite.spool.paths import SpoolDir

    set_config(spool, schedule=[FAR])
    d = daemons(spool)
    d.started()
    due = hb.read(SpoolDir(spool), HOST).next_drain
    later = due + timedelta(minutes=1)
    drains = plan(SpoolDir(spool), later)
    assert not drains.problems, drains.problems
    assert [(s.by, s.when) for s in drains.starters] == [("daemon", later)]
    assert d.stop() == 0


# ---- onite run --scheduled ---------------------------------------------------------------------


def test_run_scheduled_outside_the_window_drains_nothing(spool):
    now = datetime.now().astimezone()
    fire, until = now - timedelta(minutes=10), now - timedelta(minutes=5)
    set_config(spool, schedule=[daily_at(fire)], until=until.strftime("%H:%M"))
    submit("waiting", "true\n")
    proc = drain(spool, "--scheduled")
    assert proc.returncode == 0
    outside = [line for line in log_lines(spool) if " outside-window " in line]
    assert outside and "outside the night window" in outside[0] and queued(spool) == ["root:waiting"]


def test_run_scheduled_inside_the_window_drains(spool):
    now = datetime.now().astimezone()
    set_config(spool, schedule=[daily_at(now - timedelta(minutes=10))], until=(now + timedelta(hours=1)).strftime("%H:%M"))
    submit("runs", "true\n")
    assert drain(spool, "--scheduled").returncode == 0
    assert result(spool, "runs")["state"] == "done"


# ---- the pure policy (onite.core.schedule) ---------------------------------------------------------------


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN)


NIGHTLY = ["0 20 * * *", "0 23 * * *"]


@pytest.mark.usefixtures("berlin_tz")  # schedule and until are the machine's wall times
def test_plan_nothing_due():
    step = plan(NIGHTLY, time(7), last=at("2026-01-05T20:00"), now=at("2026-01-05T21:00"))
    assert step.drain is None and step.skipped is None and step.next == at("2026-01-05T23:00")


@pytest.mark.usefixtures("berlin_tz")
def test_plan_due_now():
    step = plan(NIGHTLY, time(7), last=at("2026-01-05T20:00"), now=at("2026-01-05T23:00:01"))
    assert step.drain == at("2026-01-05T23:00") and step.handled == at("2026-01-05T23:00")
    assert step.next == at("2026-01-06T20:00")


@pytest.mark.usefixtures("berlin_tz")
def test_plan_coalesces_missed_nights_into_the_latest():
    step = plan(NIGHTLY, time(7), last=at("2026-01-02T23:00"), now=at("2026-01-06T02:00"))
    assert step.drain == at("2026-01-05T23:00") and step.next == at("2026-01-06T20:00")


@pytest.mark.usefixtures("berlin_tz")
def test_plan_skips_a_night_whose_window_closed():
    step = plan(NIGHTLY, time(7), last=at("2026-01-04T23:00"), now=at("2026-01-06T10:00"))
    assert step.drain is None and step.skipped == window_of(at("2026-01-05T23:00"), time(7))
    assert step.skipped.closes == at("2026-01-06T07:00") and step.handled == at("2026-01-05T23:00")


@pytest.mark.usefixtures("berlin_tz")
def test_plan_without_until_always_catches_up():
    step = plan(NIGHTLY, None, last=at("2026-01-04T23:00"), now=at("2026-01-06T10:00"))
    assert step.drain == at("2026-01-05T23:00")


@pytest.mark.usefixtures("berlin_tz")
def test_plan_empty_schedule():
    assert plan([], time(7), last=at("2026-01-04T23:00"), now=at("2026-01-06T10:00")).next is None


@pytest.mark.parametrize(("now", "inside"), [
    ("2026-01-05T20:00:30", True), ("2026-01-06T06:59", True), ("2026-01-06T07:00", False),
    ("2026-01-06T10:00", False), ("2026-01-05T19:59", False),
])
@pytest.mark.usefixtures("berlin_tz")
def test_scheduled_window_for_a_late_timer(now, inside):
    window = scheduled_window(["0 20 * * *"], time(7), at(now))
    assert (window is not None and window.is_open(at(now))) is inside


@pytest.mark.usefixtures("berlin_tz")
def test_scheduled_window_across_the_spring_forward_night():
    # 02:30 does not exist on 2026-03-29 in Berlin: the drain time is 03:00, and its window runs to 07:00
    window = scheduled_window(["30 2 * * *"], time(7), at("2026-03-29T03:10").replace(fold=0))
    assert window.opened == datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN) and window.is_open(at("2026-03-29T06:00"))
    # and on the fall-back night it opens once, at the first 02:30
    step = plan(["30 2 * * *"], time(7), last=at("2026-10-24T12:00"), now=at("2026-10-25T02:45").replace(fold=1))
    assert step.drain == datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN)
    assert step.next.isoformat() == "2026-10-26T02:30:00+01:00"


# ---- the watch: new job headers only --------------------------------------------------------------


def test_timed_watch_reads_only_new_headers(spool, monkeypatch):
    from onite.spool import index
    from onite.spool.paths import SpoolDir
    from onite.spool.index import TimedWatch

    reads = []  # each job header the watch reads
    real_fields = index._header_fields
    monkeypatch.setattr(index, "_header_fields", lambda path, st: (reads.append(path), real_fields(path, st))[1])
    for i in range(30):
        submit(f"plain{i}", "true\n")
    submit("timed", "true\n", "--at", "+1h")
    watch = TimedWatch(SpoolDir(spool), HOST)
    watch.refresh()
    assert len(reads) == 31 and watch.timed() == 1
    first = watch.next_due(None)
    watch.refresh()
    watch.refresh()
    assert len(reads) == 31  # nothing changed: no job file is read again
    submit("another", "true\n", "--at", "+2h")
    wait_for(lambda: (watch.refresh(), watch.timed() == 2)[1], what="the new timed job to be seen")
    assert len(reads) == 32 and watch.next_due(None) == first
    assert watch.next_due(first) > first  # a drain at `first` dealt with that one
    for name in ("timed", "another"):  # held jobs do not wake the daemon
        assert run_cli(["hold", name]).code == 0
    fresh = TimedWatch(SpoolDir(spool), HOST)
    fresh.refresh()
    assert fresh.timed() == 2 and fresh.next_due(None) is None
    assert run_cli(["release", "another"]).code == 0  # a release removes a marker in hold/: no job file changes
    fresh.refresh()
    assert fresh.next_due(None) is not None and len(reads) == 64


# ---- the spool's path ---------------------------------------------------------------------------


@needs_root
def test_a_users_symlink_on_the_spool_path_is_refused_at_start(spool, world_tmp):
    """``onite run --spool /tmp/x`` where /tmp/x is another user's link to the spool: the link could be
    pointed at a folder of theirs later, so root never drains through it; one line names it."""
    link = world_tmp / "onite-r3"
    link.symlink_to(spool)
    os.lchown(link, 65534, 65534)
    for command in (["run"], ["daemon"]):
        r = run_cli([*command, "--spool", str(link)])
        assert r.code == 3, r
        assert f"{link} is a symbolic link that belongs to uid 65534" in r.err and r.err.count("\n") == 1, r
    root_link = world_tmp / "root-link"
    root_link.symlink_to(spool)  # root's own link, in a sticky folder: followed, and the real path used
    assert run_cli(["run", "--spool", str(root_link)]).code == 0


@needs_root
def test_a_spool_path_that_leads_elsewhere_at_hup_is_refused(spool, world_tmp, daemons):
    """The daemon resolved its spool's path at start; at HUP the path, now another user's link to a
    folder of theirs, is refused (``reload-failed``) and the daemon goes on with the spool it drains."""
    link = world_tmp / "spool-link"
    link.symlink_to(spool)
    set_config(spool, schedule=[FAR])
    d = daemons(link)
    d.started()
    theirs = world_tmp / "theirs"
    theirs.mkdir()
    link.unlink()
    link.symlink_to(theirs)
    os.lchown(link, 65534, 65534)
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: [line for line in log_lines(spool) if " reload-failed " in line], what="the reload to be refused")
    [failed] = [line for line in log_lines(spool) if " reload-failed " in line]
    assert f"{link} is a symbolic link that belongs to uid 65534" in failed, failed
    assert d.proc.poll() is None
    assert d.stop() == 0


def test_a_schedule_reloaded_while_waiting_for_the_lock_is_planned_once_it_is_taken(spool):
    """A HUP while the daemon waits for another driver's lock re-reads onite.toml before any schedule time is
    handled: nothing is planned yet (it is, once the lock is taken), and nothing fails."""
    from onite.app.daemon import Daemon as InProcess
    from onite.spool.paths import SpoolDir

    daemon = InProcess(SpoolDir(spool))
    daemon._sync_schedule()  # its schedule, () until it starts, is not onite.toml's: as after a reload
    assert (daemon.schedule, daemon.next_scheduled) == (daemon.spool.config.schedule, None)


def test_a_clock_set_back_holds_back_no_scheduled_drain(spool, daemons):
    """The daemon handled a drain while the clock was a year ahead (a wrong date, NTP put it right later): it
    planned its next drain after that day, a year on, and drained nothing at the schedule's times meanwhile
    (restarted too). A handled time later than now (beyond how far another host's clock may be ahead) was
    recorded under a clock set back since: the daemon plans from now."""
    now = datetime.now().astimezone()
    soon = (now + timedelta(hours=2)).replace(second=0, microsecond=0)
    set_config(spool, schedule=[daily_at(soon)])
    write_state(spool, now + timedelta(days=365))
    d = daemons(spool)
    d.started()
    d.round_trip()
    beat = json.loads((spool / f"driver.{HOST}.state").read_text())
    assert datetime.fromisoformat(beat["next_drain"]) == soon, beat
    assert datetime.fromisoformat(json.loads(state_file(spool).read_text())["last"]) <= datetime.now().astimezone()
    assert d.stop() == 0
