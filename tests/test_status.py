"""``onite status``: drivers and their running jobs, why queued jobs wait, the last 24 hours
(real spools, a real driver, jobs gated on a file the test removes)."""

import os
import pwd
from datetime import datetime

import pytest

from conftest import as_user, drain, draining, needs_root, result, run_cli, set_config, start_driver, wait_for
from onite.app import status as st

HOST = os.uname().nodename.split(".")[0]


def submit(name, body, *args, **kw):
    r = run_cli(["submit", name, *args], stdin=body.encode(), **kw)
    assert r.code == 0, r
    return r


def by_name(doc):
    return {row["name"]: row for row in doc["waiting"]}


def test_running_driver_and_waiting_jobs(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("base", f"while [ -e {gate} ]; do sleep 0.02; done\n", "-p", "1")
    submit("child", "true\n", "--after", "base")
    submit("later", "true\n", "--at", "tomorrow 05:00")
    submit("elsewhere", "true\n", "--host", "not-this-host")
    submit("parked", "true\n", "--hold")
    submit("free", "true\n", "--hold")
    assert run_cli(["release", "free"]).code == 0  # queued, runnable: not listed as waiting
    driver = start_driver(spool, "--slots", "1")
    try:
        wait_for(lambda: (spool / "running" / HOST / "root:base").exists(), what="base to start")
        doc = run_cli(["status", "--json"]).json()
        [drv] = doc["drivers"]
        assert drv["host"] == HOST and drv["pid"] == driver.pid and drv["role"] == "driver"
        assert datetime.fromisoformat(drv["since"]) <= datetime.fromisoformat(doc["now"])
        assert drv["jobs"] == ["base"] and drv["running"] is True and f"pid={driver.pid}" in drv["holder"]
        [job] = doc["running"]
        assert (job["name"], job["host"], job["user"], job["priority"]) == ("base", HOST, "root" if os.geteuid() == 0
                                                                           else job["user"], 1)
        assert job["elapsed"] >= 0
        waiting = by_name(doc)
        assert "free" not in waiting and "base" not in waiting
        assert (waiting["child"]["kind"], waiting["child"]["reason"]) == ("after", "after base (running)")
        assert waiting["child"]["dependency"] == {"name": "base", "state": "running"}
        assert waiting["later"]["kind"] == "not_before" and waiting["later"]["reason"].startswith("not before ")
        assert datetime.fromisoformat(waiting["later"]["until"]) > datetime.fromisoformat(doc["now"])
        assert (waiting["elsewhere"]["kind"], waiting["elsewhere"]["reason"]) == (
            "pinned", "pinned to host not-this-host, which no driver drains (none has in 8 days)")
        assert (waiting["parked"]["kind"], waiting["parked"]["state"]) == ("held", "held")
        assert doc["not_examined"] == 0 and doc["held"] == 1
        text = run_cli(["status"]).out
        assert f"driver    running on {HOST} (driver, pid {driver.pid}, since " in text
        for line in ("child (", "after base (running)", "later (", "not before ", "pinned to host not-this-host",
                     "parked (", "): held"):
            assert line in text, text
        assert "base" in text.split("running   1")[1]  # the running table, with its elapsed time
    finally:
        gate.unlink()
        driver.wait(timeout=60)


def test_a_dependency_that_failed_says_the_job_will_fail(spool):
    submit("broke", "exit 1\n")
    assert drain(spool).returncode == 0
    submit("after-broke", "true\n", "--after", "broke")
    row = by_name(run_cli(["status", "--json"]).json())["after-broke"]
    assert (row["kind"], row["reason"]) == ("will_fail", "will fail: dependency broke failed")


def test_a_timed_job_whose_dependency_failed_says_it_will_fail_when_its_time_comes(spool):
    """It waits for its time first (its dependency may yet run again), but it said only ``not before …``,
    and its owner learned it was doomed from the morning's failure."""
    submit("broke", "exit 1\n")
    assert drain(spool).returncode == 0
    submit("publish", "true\n", "--after", "broke", "--at", "tomorrow 05:00")
    row = by_name(run_cli(["status", "--json"]).json())["publish"]
    assert row["kind"] == "not_before" and row["reason"].startswith("not before "), row
    assert row["reason"].endswith("; then will fail: dependency broke failed"), row
    assert "then will fail: dependency broke failed" in run_cli(["list", "--plain"]).out


@needs_root
def test_a_chain_of_any_length_is_followed_to_its_doomed_end(spool):
    """c0 (listed first: P1) waits for c1, which waits for c2 … c400, cancelled: list follows the chain one link
    at a time (a recursion through 400 jobs ended in RecursionError, and list said nothing at all)."""
    from onite.api import Spool

    api, last = Spool(str(spool)), 400
    api.submit(f"c{last}", "true\n")
    for i in range(last - 1, -1, -1):
        api.submit(f"c{i}", "true\n", after=[f"c{i + 1}"], priority=1 if i == 0 else 4)
    assert run_cli(["cancel", f"c{last}"]).code == 0
    r = run_cli(["list"])
    assert r.code == 0 and f"will fail: dependency c1 will fail (dependency c{last} was cancelled)" in r.out, r


def test_a_job_whose_dependency_is_itself_doomed_says_it_will_fail_with_the_chains_reason(spool):
    """n2 waits for n1, which waits for n0, which nobody cancelled: the driver fails n1, then n2, then n3 in a
    chain, and ``cancel 'n0*'`` would have named them all, but list said ``after n1 (queued)`` for n2 and n3. A
    job another user cannot read (daemon's d1, whose d0 daemon cancelled) is judged only for daemon and root."""
    for name, after in [("n0", ()), ("n1", ("n0",)), ("n2", ("n1",)), ("n3", ("n2",))]:
        submit(name, "true\n", *[f"--after={dep}" for dep in after], user="nobody", cwd="/tmp")
    submit("n4", "true\n", "--after", "n3", "--at", "tomorrow 05:00", user="nobody", cwd="/tmp")
    submit("d0", "true\n", user="daemon", cwd="/tmp")
    submit("d1", "true\n", "--after", "d0", user="daemon", cwd="/tmp")
    submit("nd", "true\n", "--after", "daemon:d1", user="nobody", cwd="/tmp")
    assert run_cli(["cancel", "n0"], user="nobody", cwd="/tmp").code == 0
    assert run_cli(["cancel", "d0"], user="daemon", cwd="/tmp").code == 0
    rows = by_name(run_cli(["status", "--json"], user="nobody", cwd="/tmp").json())
    said = {name: (row["kind"], row["reason"]) for name, row in rows.items()}
    chain = "(dependency n0 was cancelled)"
    assert said["n1"] == ("will_fail", "will fail: dependency n0 was cancelled"), said
    assert said["n2"] == ("will_fail", f"will fail: dependency n1 will fail {chain}"), said
    assert said["n3"] == ("will_fail", f"will fail: dependency n2 will fail {chain}"), said
    assert said["n4"][0] == "not_before", said
    assert said["n4"][1].endswith(f"; then will fail: dependency n3 will fail {chain}"), said
    assert said["nd"] == ("after", "after daemon:d1 (queued)"), said  # daemon's file is daemon's to read
    listed = run_cli(["list", "--plain"], user="nobody", cwd="/tmp").out
    assert f"will fail: dependency n2 will fail {chain}" in listed, listed
    rows = by_name(run_cli(["status", "--json"]).json())
    assert rows["nobody:nd"]["reason"] == "will fail: dependency daemon:d1 will fail (dependency daemon:d0 was " \
                                          "cancelled)", rows["nobody:nd"]
    assert drain(spool).returncode == 0  # the driver fails them, as said
    for key, dep in [("nobody:n1", "n0"), ("nobody:n2", "n1"), ("nobody:n3", "n2"), ("nobody:nd", "daemon:d1")]:
        filed = result(spool, key)
        assert filed["state"] == "failed" and filed["reason"].startswith(f"dependency {dep} "), filed


def test_last_night(spool):
    """Last night is the night of yesterday, noon to noon, whatever the time of day the test runs; its jobs are
    those onite.log tells of (their result records are not read), each as its final line says."""
    from datetime import date, timedelta

    from onite.spool.log import format_line

    yesterday = date.today() - timedelta(days=1)
    lines = []

    def record(name: str, state: str, finished_hour: int, day: date = yesterday, reason: str = "") -> None:
        finished = datetime(day.year, day.month, day.day, finished_hour).astimezone()
        fields = {"user": "root", "attempt": 1, **({"reason": reason} if reason else {})}
        lines.append(format_line(finished - timedelta(minutes=5), "vm", 7, "start", f"root:{name}", **fields))
        lines.append(format_line(finished, "vm", 7, state, f"root:{name}", **fields))

    record("ok1", "done", 20)
    record("ok2", "done", 23)
    record("bad", "failed", 21, reason="exit 3")
    record("late", "failed", 22, reason="timeout")
    record("gone", "cancelled", 19, reason="cancelled by root")
    record("before", "failed", 11, reason="exit 1")  # yesterday morning: the night before
    record("tonight", "failed", 13, day=date.today(), reason="exit 1")  # today after noon: tonight's
    with open(spool / "onite.log", "a") as log:
        log.writelines(sorted(lines))
    doc = run_cli(["status", "--json"]).json()
    day = doc["last_night"]
    assert day["night"] == yesterday.isoformat() and day["since"].startswith(f"{yesterday.isoformat()}T12:00")
    assert day["counts"] == {"done": 2, "failed": 2, "cancelled": 1} and day["timed_out"] == 1
    assert day["failed"] == ["bad", "late"] and day["failed_total"] == 2
    assert (f"last night 2 done, 2 failed (bad, late), 1 cancelled (onite report --night {yesterday.isoformat()})"
            in run_cli(["status"]).out)


def test_only_the_head_of_a_long_queue_is_examined(spool):
    r = run_cli(["submit", "many", "--lines", "--at", "tomorrow 05:00"],
                stdin=b"".join(b"true\n" for _ in range(st.EXAMINE + 5)))
    assert r.code == 0, r
    doc = run_cli(["status", "--json"]).json()
    assert len(doc["waiting"]) == st.EXAMINE and doc["not_examined"] == 5
    assert [row["position"] for row in doc["waiting"][:3]] == [1, 2, 3]
    assert "…and 5 more not examined" in run_cli(["status"]).out


def test_a_long_queue_that_waits_only_for_a_drain_says_so(spool):
    r = run_cli(["submit", "many", "--lines"], stdin=b"".join(b"true\n" for _ in range(st.EXAMINE + 5)))
    assert r.code == 0, r
    out = run_cli(["status"]).out
    assert (f"waiting   none of the first {st.EXAMINE} waits for more than a drain (of the jobs you may read); "
            "5 more not examined") in out
    assert "…and" not in out


@needs_root
def test_other_users_see_reasons_only_for_their_own_jobs(spool, workdir):
    submit("root-held", "true\n", "--hold")
    submit("root-later", "true\n", "--at", "tomorrow 05:00")
    submit("nb-later", "true\n", "--at", "tomorrow 06:00", user="nobody", cwd=workdir)
    seen = run_cli(["status", "--json"], user="nobody")
    assert seen.code == 0, seen
    waiting = by_name(seen.json())
    assert set(waiting) == {"root:root-held", "nb-later"}  # root-later: queued, its reason is root's business
    assert waiting["root:root-held"]["private"] and waiting["root:root-held"]["reason"] == "held"
    assert waiting["nb-later"]["kind"] == "not_before" and not waiting["nb-later"]["private"]
    text = run_cli(["status"], user="nobody").out
    assert "root:root-held (root, P4): held (another user's job: other details private)" in text
    assert "root-later" not in text.split("waiting")[1]
    assert set(by_name(run_cli(["status", "--json"]).json())) == {"root-held", "root-later", "nobody:nb-later"}


def test_last_night_is_the_last_drain(spool, workdir):
    """With drains in the log, "last night" is the last drain session, as ``onite report`` has it (a drain of
    this afternoon included); its running jobs' table, piped, is one line per job."""
    import re

    submit("fine", "true\n")
    submit("broke", "exit 3\n")
    assert drain(spool).returncode == 0
    doc = run_cli(["status", "--json"]).json()
    day = doc["last_night"]
    assert day["window"] == "drain" and day["counts"] == {"done": 1, "failed": 1, "cancelled": 0}
    assert day["failed"] == ["broke"]
    assert "last night 1 done, 1 failed (broke), 0 cancelled (onite report)" in run_cli(["status"]).out

    gate = workdir / "gate"
    gate.touch()
    long_name = "a-running-job-whose-name-is-longer-than-the-terminal-" + "x" * 30
    submit(long_name, f"while [ -e {gate} ]; do sleep 0.02; done\n")
    driver = start_driver(spool)
    try:
        wait_for(lambda: (spool / "running" / HOST / f"root:{long_name}").exists(), what="the job to start")
        for args in (["status"], ["status", "--plain"]):
            text = run_cli(args, env=dict(os.environ, COLUMNS="50")).out
            rows = [re.split(r" {2,}", line) for line in text.splitlines()]
            [row] = [row for row in rows if row[1:2] == [long_name]]
            titles = next(r for r in rows if r[0] == "#")
            assert len(row) == len(titles) and row[5] == "running"
    finally:
        gate.unlink()
        driver.wait(timeout=60)


@pytest.mark.attack
def test_a_look_lists_cancel_and_hold_once_however_many_jobs_it_explains(spool, tmp_path):
    """Anyone may fill cancel/ and hold/. Listing them once per job explained made root's status
    take minutes (200 jobs × 100,000 files): a look lists each at most once (strace counts it)."""
    import shutil
    import subprocess
    import sys

    import pytest

    from conftest import REPO
    from onite.core.job import Job
    from onite.core.jobfile import encode

    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("ONITE_STRACE_TESTS") == "required":
            raise AssertionError("strace is required (ONITE_STRACE_TESTS=required) and missing")
        pytest.skip("needs strace (Debian: strace) to count the listings")
    submit("base", "true\n", "--hold")
    for i in range(20):
        submit(f"child{i}", "true\n", "--after", "base")  # each says "after base (held)": a look at hold/
        job = Job(name=f"root:gone{i}", priority=4, submitted=datetime.now().astimezone(), host="vm", umask=0o022,
                  cwd=b"/tmp", env={b"PATH": b"/bin"}, body=b"true\n", after=(f"root:nosuch{i}",))
        (spool / "jobs" / "P4" / f"root:gone{i}").write_bytes(encode(job))  # written by hand: each a look at cancel/
    for i in range(5):
        (spool / "cancel" / f"x{i}@t").write_bytes(b"")
        (spool / "hold" / f"y{i}@t").write_bytes(b"")
    trace = tmp_path / "trace"
    done = subprocess.run([strace, "-qq", "-f", "-e", "trace=openat", "-o", str(trace), sys.executable, "-m", "onite",
                           "status", "--json"], env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO)),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    import json

    waiting = by_name(json.loads(done.stdout))
    assert waiting["child0"]["reason"] == "after base (held)" and "will fail" in waiting["gone0"]["reason"], waiting
    opened = [line for line in trace.read_text().splitlines() if "O_DIRECTORY" in line]
    assert sum(f'{spool}/cancel"' in line for line in opened) <= 1, opened
    assert sum(f'{spool}/hold"' in line for line in opened) <= 2, opened  # the queue's holds, and the reasons'


def test_a_new_cron_schedule_beats_what_an_earlier_drivers_heartbeat_said(spool):
    """A driver started by cron under the old schedule said the next drain was at 20:00; the admin
    then installed another schedule. What status and submit say comes from the new schedule: an
    older heartbeat's next drain counts only if that driver started after the install."""
    import json
    from datetime import timedelta

    from onite.drain import heartbeat as hb
    from onite.drain.nextdrain import plan
    from onite.spool.cronrecords import CronRecord, write_record
    from onite.spool.paths import SpoolDir

    now = datetime.now().astimezone().replace(microsecond=0)
    stale = now + timedelta(hours=10)
    due = (now + timedelta(hours=3)).replace(second=0)
    beat = hb.Beat(host="h2", pid=1, start_ticks=None, boot_id="gone", machine="elsewhere", role=hb.Role.RUN,
                   started_by="cron", since=now - timedelta(hours=2), state=hb.BeatState.EXITED,
                   updated=now - timedelta(hours=2), next_drain=stale, next_by="cron", ended=now - timedelta(hours=2))
    SpoolDir(spool).state_path(hb.HEARTBEAT, "h2").write_text(json.dumps(beat.to_json()))
    write_record(SpoolDir(spool), CronRecord(host="h2", machine="elsewhere", schedule=(f"{due.minute} {due.hour} * * *",),
                                   command="onite run", installed=now - timedelta(hours=1), user="root",
                                   next_drain=None))
    [cron] = [s for s in plan(SpoolDir(spool), now).starters if s.by == "cron"]
    assert cron.when == due, (cron.when, due)


@pytest.mark.parametrize("plain", [False, True])
def test_on_an_80_column_terminal_a_long_line_folds_between_words_under_its_label(spool, plain, monkeypatch):
    """The terminal folded status's long lines wherever the edge fell (``ask root to ru`` / ``n: onite``); they
    now fold between words, under the label. With --plain each stays one line, as a script greps it."""
    import re

    from conftest import OnTerminal

    monkeypatch.delenv("COLUMNS", raising=False)
    code, seen = OnTerminal(spool, ["status", *(["--plain"] if plain else [])], stdin=False, columns=80).finish()
    assert code == 0, seen
    lines = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode()).replace("\r\n", "\n").splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("next run  none: no drain is scheduled")]
    if plain:
        assert lines[at].endswith("onite cron --install") and len(lines[at]) > 80, lines
    else:
        assert all(len(line.rstrip()) <= 80 for line in lines), lines
        assert lines[at + 1].startswith(" " * 10 + lines[at + 1].strip()) and lines[at + 1].strip(), lines
        assert " ".join(line.strip() for line in lines[at:at + 2]).endswith("onite cron --install"), lines


def test_last_night_counts_a_refused_job_file_as_the_report_does(spool):
    """A damaged job file the driver refuses is filed as a failure ("never ran: refused: …"), and the report
    counts it so: status's "last night" is the same session and says the same counts (it read onite.log
    alone, where the refusal is no ``failed`` line, and said one failure fewer than the report)."""
    submit("fine", "true\n")
    submit("broke", "exit 3\n")
    (spool / "jobs" / "P4" / "root:damaged").write_bytes(b"garbage\x00 not a job\n")
    assert drain(spool).returncode == 0
    report = run_cli(["report", "--json"]).json()
    assert report["counts"] == {"done": 1, "failed": 2, "cancelled": 0}
    day = run_cli(["status", "--json"]).json()["last_night"]
    assert day["counts"] == report["counts"]
    assert sorted(day["failed"]) == ["broke", "damaged"]
    assert "last night 1 done, 2 failed (" in run_cli(["status"]).out


def test_next_says_when_it_shows_only_some_of_your_failures_steps(spool):
    """status shows the commands that run the first three of your failures again; a fourth is not dropped
    without a word (a timeout's step, with its longer --timeout, was simply missing): it says how many more,
    and where they are."""
    for name in ("bad-1", "bad-2", "bad-3"):
        submit(name, "exit 3\n", "-p", "2")
    submit("slow", "sleep 30\n", "-p", "3", "--timeout", "1s")
    set_config(spool, kill_grace="1s")
    assert drain(spool).returncode == 0
    day = run_cli(["status", "--json"]).json()["last_night"]
    assert len(day["next"]) == 4 and any(step.startswith("onite restart slow --timeout ") for step in day["next"])
    text = run_cli(["status", "--plain"]).out
    shown = [step for step in day["next"] if step in text]
    assert len(shown) == 3
    assert "… and 1 more: onite report" in text


def test_a_failure_restarted_since_is_not_told_to_be_restarted(spool):
    """Once a failed job is restarted (queued again), neither status nor the report offers `onite restart NAME` as
    its next step: they did, and that command is refused while the job is queued."""
    submit("broke", "exit 3\n")
    submit("also", "exit 3\n")
    assert drain(spool).returncode == 0
    assert sorted(run_cli(["status", "--json"]).json()["last_night"]["next"]) == ["onite restart also",
                                                                                 "onite restart broke"]
    assert run_cli(["restart", "broke"]).code == 0
    assert run_cli(["restart", "broke"]).code != 0  # what the next step would have said
    assert run_cli(["status", "--json"]).json()["last_night"]["next"] == ["onite restart also"]
    failures = {f["name"]: f for f in run_cli(["report", "--json"]).json()["failures"]}
    assert (failures["broke"]["next"], failures["also"]["next"]) == (None, "onite restart also")
    assert "next: onite restart broke" not in run_cli(["report", "--plain"]).out


def test_a_bad_schedule_is_fixed_in_onite_toml_before_cron_is_installed(spool):
    """A schedule onite.toml cannot hold is read as if left out, so status told the admin to run
    `onite cron --install`, which refuses the file until it is fixed: the fix comes first."""
    set_config(spool, schedule=["25:99"])
    r = run_cli(["status", "--plain"])
    assert r.code == 0 and "schedule: cron expression '25:99' has 1 field, not 5" in r.err, r
    [line] = [line for line in r.out.splitlines() if line.startswith("next run")]
    assert "fix onite.toml (see the warning), then run: onite cron --install" in line, line


def test_a_driver_killed_but_not_yet_reaped_is_not_running(spool, workdir):
    """kill -9 of a driver whose parent has not reaped it yet (a zombie: its pid and start time are still in
    /proc) was 'driver running on HOST', and `onite wait` waited for its drain until the parent reaped it."""
    import signal

    gate, driver = draining(spool, workdir, "base")
    try:
        os.kill(driver.pid, signal.SIGKILL)
        wait_for(lambda: open(f"/proc/{driver.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                 what="the driver to be a zombie")
        doc = run_cli(["status", "--json"]).json()
        assert doc["drivers"] == [], doc["drivers"]
        waited = run_cli(["wait", "--json", "--timeout", "30"]).json()
        assert not waited["timed_out"] and waited["drivers"] == [], waited  # no drain runs: it waits for none
    finally:
        gate.unlink(missing_ok=True)
        driver.wait()
    drain(spool)
    assert result(spool, "base")["state"] == "done"


def test_status_says_whether_spooling_is_open_and_when_it_opens_again(spool):
    """Spooling closes at the cutoff until ``until``: status says which it is now, by submit's own rule, and offers
    a restart for the time it may be spooled."""
    from datetime import timedelta

    def clock(hours):  # an hour's margin either side of the clock status reads
        return (datetime.now() + timedelta(hours=hours)).strftime("%H:%M")

    doc = run_cli(["status", "--json"]).json()
    assert doc["spooling"] == {"open": True, "cutoff": None, "reopens": None}
    assert "spooling" not in run_cli(["status", "--plain"]).out  # no cutoff: always open
    submit("broke", "exit 3\n")
    assert drain(spool).returncode == 0
    set_config(spool, cutoff=clock(1), until=clock(2))
    assert run_cli(["status", "--json"]).json()["spooling"] == {"open": True, "cutoff": clock(1), "reopens": None}
    text = run_cli(["status", "--plain"]).out
    assert f"spooling  open until {clock(1)} (cutoff)\n" in text and "next      onite restart broke\n" in text, text

    set_config(spool, cutoff=clock(-1), until=clock(1))
    doc = run_cli(["status", "--json"]).json()
    opens = datetime.fromisoformat(doc["spooling"]["reopens"])
    assert doc["spooling"]["open"] is False and doc["spooling"]["cutoff"] == clock(-1) and f"{opens:%H:%M}" == clock(1)
    assert doc["last_night"]["next"] == ["onite restart broke"]  # a command, as scripts run it
    text = run_cli(["status", "--plain"]).out
    assert f"spooling  closed since {clock(-1)} (cutoff); opens again at {clock(1)}\n" in text, text
    assert f"next      from {clock(1)} (spooling is closed): onite restart broke\n" in text, text
    refused = run_cli(["restart", "broke"])  # what status said: not before then
    assert refused.code == 3 and f"spooling closed at the cutoff ({clock(-1)})" in refused.err, refused


@needs_root
def test_status_names_the_command_that_installs_a_missing_pam_service(spool, monkeypatch):
    """The last drain's jobs got no PAM session, the service being missing: status gives the command that
    installs it, the one onite init gives, until it is installed."""
    import shlex
    import subprocess

    from conftest import TEST_PAM_DIR
    from onite.spool.skeleton import pam_install_command

    service = f"onite-absent-{os.getpid()}"  # whatever this machine's /etc/pam.d holds
    set_config(spool, pam="auto", pam_service=service)
    submit("plain", "true\n")
    assert drain(spool).returncode == 0
    contained = run_cli(["status", "--json"]).json()["containment"]
    assert contained["pam"] == f"no session (no service {service} in /etc/pam.d): job limits are the driver's"
    command = contained["pam_fix"]
    assert command == pam_install_command(service) and command.endswith(f" {TEST_PAM_DIR}/{service}"), command
    lines = run_cli(["status", "--plain"]).out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("pam       last drain: no session"))
    assert lines[at + 1] == f"          not installed here; as root: {command}", lines
    subprocess.run(shlex.split(command), check=True)
    try:
        assert run_cli(["status", "--json"]).json()["containment"]["pam_fix"] is None
        assert "not installed here" not in run_cli(["status", "--plain"]).out
    finally:
        (TEST_PAM_DIR / service).unlink()


def test_a_hybrid_host_is_said_where_containment_and_limits_name_different_cgroups(spool):
    """On a hybrid host the job is contained in cgroup2 while its memory and CPU limits are cgroup v1's:
    status said both without a word on why they differ."""
    submit("plain", "true\n")
    assert drain(spool).returncode == 0
    with open(spool / "onite.log", "a") as log:  # what a driver on a hybrid host logs as it starts
        log.write(f"{datetime.now().astimezone().isoformat(timespec='seconds')} vm[999999] driver-start host=vm "
                  'slots=1 executor=local contain="cgroup2 /sys/fs/cgroup/unified/onite" '
                  'limits="cgroup v1 (cpu, cpuacct, memory)" pam="off" capacity="4G memory, 2 CPUs"\n')
    lines = run_cli(["status", "--plain"]).out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("limits    last drain: cgroup v1"))
    assert lines[at + 1] == ("          a hybrid host: jobs are contained in cgroup2, their limits set by its cgroup "
                             "v1 controllers"), lines


def test_last_night_names_failures_in_the_reports_order(spool):
    """A job that fails and its dependant, failed for it in the same second: status's "last night" (read from
    onite.log's whole seconds) names them in the report's order (read from the records), the one that ran
    first, although the dependant's name sorts first."""
    submit("zz-first", "exit 3\n")
    submit("aa-dep", "true\n", "--after", "zz-first")
    assert drain(spool).returncode == 0
    report = run_cli(["report", "--json"]).json()
    failed = [job["name"] for job in report["jobs"] if job["state"] == "failed"]
    assert failed == ["zz-first", "aa-dep"], report["jobs"]
    assert run_cli(["status", "--json"]).json()["last_night"]["failed"] == failed
    assert "2 failed (zz-first, aa-dep)" in run_cli(["status"]).out


@needs_root
def test_a_spool_its_driver_would_refuse_is_warned_of(spool):
    """running/ made writable by everyone: each night's `onite run` refused the spool (exit 3) while `onite status`,
    a user's or root's, showed nothing amiss."""
    assert not run_cli(["status", "--json"]).json()["warnings"]
    os.chmod(spool / "running", 0o777)
    try:
        warned = run_cli(["status", "--json"], user="nobody", cwd="/tmp").json()["warnings"]
        r = drain(spool)
    finally:
        os.chmod(spool / "running", 0o755)
    said = f"onite run will not trust {spool}: {spool}/running is writable by others (mode 0777)"
    assert r.returncode == 3 and said in r.stderr.decode(), r
    assert [w for w in warned if w.startswith(said)], warned


@needs_root
def test_an_onite_log_users_cannot_read_is_warned_of(spool):
    """onite.log made 0600: a user's status said `last night 0 done, 0 failed` and their report quietly went to
    another window, as if no drain had run."""
    run_cli(["submit", "a"], stdin=b"true\n")
    drain(spool)
    os.chmod(spool / "onite.log", 0o600)
    try:
        warned = run_cli(["status", "--json"], user="nobody", cwd="/tmp").json()["warnings"]
        r = run_cli(["report"], user="nobody", cwd="/tmp")
    finally:
        os.chmod(spool / "onite.log", 0o644)
    said = f"cannot read {spool}/onite.log: Permission denied"
    assert [w for w in warned if w.startswith(f"{said}: last night is not shown")], warned
    assert r.code == 0 and r.err.startswith(f"onite: warning: {said}: the report goes by the result records"), r
    assert not run_cli(["status", "--json"], user="nobody", cwd="/tmp").json()["warnings"]


@needs_root
def test_a_spool_reached_through_another_users_link_is_warned_of(spool, workdir):
    """root's spool named by a link that nobody made in a folder of nobody's: root's `onite run` refuses it (nobody
    could point the link at a spool of theirs), while `onite status` of that path showed nothing amiss."""
    folder = workdir / "nobodys"
    folder.mkdir()
    os.chown(folder, pwd.getpwnam("nobody").pw_uid, -1)
    link = folder / "spool"
    assert as_user(lambda: os.symlink(spool, link)) == ("ok", None)
    warned = run_cli(["--spool", str(link), "status", "--json"]).json()["warnings"]
    r = run_cli(["--spool", str(link), "run"])
    assert r.code == 3 and "will not trust" in r.err, r
    assert [w for w in warned if "will not trust" in w and "uid" in w], warned
    assert not run_cli(["--spool", str(spool), "status", "--json"]).json()["warnings"]  # the spool itself is sound
