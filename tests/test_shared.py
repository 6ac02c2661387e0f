"""A shared machine: users' jobs reach root's spool, every command says honestly what it did and what will
happen, and no user can hold a lock (docs/admin-guide.md).

Real users (``nobody``), real processes, real locks; the machine's own /etc/onite.toml, /var/spool/onite,
systemd and cron are never used: the tests make their own (ONITE_SYSTEM_CONFIG, onite.drain.nextdrain's paths,
a crontab command on PATH, a process named cron).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from conftest import (REPO, drain, draining, kill_driver_mid_job, log_lines, needs_root, nobody, result, run_cli, set_config,
                      start_driver, wait_for)
from onite.drain import heartbeat as hb

HOST = os.uname().nodename.split(".")[0]
GONE = (f"its host {HOST} has no live driver: the next driver there, or onite recover --host {HOST} if {HOST} is gone "
        "for good, recovers it")  # onite.drain.heartbeat.driver_gone: a job claimed there
FAR = "0 3 29 2 *"  # a schedule that does not fire during a test


def submit(name, body="true\n", *args, **kw):
    r = run_cli(["submit", name, *args], stdin=body.encode(), **kw)
    assert r.code == 0, r
    return r


def onite_env(**extra) -> dict:
    """An environment for onite processes with no spool named (the default decides)."""
    env = {k: v for k, v in os.environ.items() if k != "ONITE_SPOOL"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


@pytest.fixture
def system(world_tmp, monkeypatch):
    """A system spool made by root at a test path, named in a test /etc/onite.toml; no ONITE_SPOOL."""
    path = world_tmp / "system-spool"
    etc = world_tmp / "etc"
    etc.mkdir()
    config = etc / "onite.toml"
    config.write_text(f'# every user\'s default spool\nspool = "{path}"\n')
    os.chmod(config, 0o644)
    monkeypatch.delenv("ONITE_SPOOL", raising=False)
    monkeypatch.setenv("ONITE_SYSTEM_CONFIG", str(config))
    return path


@pytest.fixture
def personal_home(world_tmp):
    """A state folder ``nobody`` may write (its real HOME is /nonexistent)."""
    home = world_tmp / "home"
    home.mkdir()
    os.chown(home, nobody().pw_uid, nobody().pw_gid)
    return home


def nobody_env(system_config: str, home: Path, workdir: Path) -> dict:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
            "ONITE_SYSTEM_CONFIG": system_config, "USER": "nobody", "LOGNAME": "nobody", "PWD": str(workdir)}


# ---- 1. the system spool is everyone's default once root has set it up ----------------------------------


@needs_root
def test_nobody_submits_with_no_spool_named_and_roots_driver_runs_it(system, personal_home, workdir):
    env = nobody_env(os.environ["ONITE_SYSTEM_CONFIG"], personal_home, workdir)
    # no system spool yet: nobody gets a personal one, and is told nothing drains it on its own
    before = run_cli(["submit", "early"], stdin=b"true\n", user="nobody", env=env, cwd=workdir)
    personal = personal_home / "state" / "onite"
    assert before.code == 0 and (personal / "jobs" / "P4" / "nobody:early").exists(), before
    assert before.err.startswith(f"spooled early (P4) in {personal}; nothing drains this spool on its own"), before
    # root sets the system spool up (no spool named: /etc/onite.toml's)
    r = run_cli(["init"])
    assert r.code == 0 and str(system) in r.out and (system / "jobs" / "P4").is_dir()
    r = run_cli(["submit", "nightly", "-p", "3"], stdin=f"id -u > {workdir}/who\n".encode(), user="nobody", env=env,
                cwd=workdir)
    assert r.code == 0 and r.out == "", r
    queued = system / "jobs" / "P3" / "nobody:nightly"
    assert queued.exists() and queued.stat().st_uid == nobody().pw_uid
    assert r.err == (f"spooled nightly (P3) in {system}; no drain is scheduled, so nothing will run it — "
                     "ask root to run: onite cron --install\n")
    status = run_cli(["status"], user="nobody", env=env, cwd=workdir)
    config = os.environ["ONITE_SYSTEM_CONFIG"]
    assert f"spool     system spool {system} (default: it exists; set in {config})" in status.out, status
    helped = subprocess.run([sys.executable, "-m", "onite", "list", "--help"], env=onite_env(),
                            capture_output=True, text=True, timeout=60)  # a fresh process: help is built at start
    wanted = f"In use now: system spool {system} (root's default; set in {config})."
    assert "".join(wanted.split()) in "".join(helped.stdout.split()), helped.stdout  # however click wraps it
    # root's driver, started with no spool named, runs it as nobody
    proc = subprocess.run([sys.executable, "-m", "onite", "run"], env=onite_env(), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert result(system, "nightly")["state"] == "done" and result(system, "nightly")["user"] == "nobody"
    assert (workdir / "who").read_text().strip() == str(nobody().pw_uid)


@needs_root
@pytest.mark.attack
def test_a_user_cannot_init_the_system_spool(system, personal_home, workdir):
    env = nobody_env(os.environ["ONITE_SYSTEM_CONFIG"], personal_home, workdir)
    assert run_cli(["init"]).code == 0
    r = run_cli(["init"], user="nobody", env=env, cwd=workdir)
    assert r.code == 3 and r.err.startswith(f"onite: the system spool {system} is root's:"), r
    assert r.err.count("\n") == 1
    r = run_cli(["init", "--spool", str(system)], user="nobody", env=env, cwd=workdir)
    assert r.code == 3, r
    own = run_cli(["init", "--spool", str(personal_home / "mine")], user="nobody", env=env, cwd=workdir)
    assert own.code == 0 and "personal spool" in own.out


@pytest.mark.attack
def test_a_system_config_anyone_may_write_is_refused_in_one_line(system):
    config = Path(os.environ["ONITE_SYSTEM_CONFIG"])
    os.chmod(config, 0o666)
    r = run_cli(["status"])
    assert r.code == 2 and r.err.startswith(f"onite: {config} must be root's and writable by root only"), r
    assert r.err.count("\n") == 1
    os.chmod(config, 0o644)
    config.write_text('spool = "relative/path"\n')
    r = run_cli(["status"])
    assert r.code == 2 and "spool must be an absolute path" in r.err
    config.write_text('spol = "/srv/onite"\n')
    r = run_cli(["status"])
    assert r.code == 2 and "unknown key 'spol'" in r.err


def test_locate_order(tmp_path):
    """--spool, ONITE_SPOOL, then the system spool for root; a user's default is personal while the
    system spool does not exist (named by a system config here, so that this machine's own
    /var/spool/onite does not decide the test)."""
    from onite.spool.locate import locate

    system = tmp_path / "no-system-spool"
    config = tmp_path / "onite.toml"
    config.write_text(f'spool = "{system}"\n')
    env = {"ONITE_SYSTEM_CONFIG": str(config), "HOME": "/home/u"}
    assert locate("/x", env, 1000).source == "--spool"
    assert locate(None, {**env, "ONITE_SPOOL": "/y"}, 1000).path == Path("/y")
    root = locate(None, env, 0)
    assert (root.path, root.source) == (system, "system")
    user = locate(None, env, 1000)
    assert user.source == "personal" and user.path == Path("/home/u/.local/state/onite")
    assert user.describe() == ("personal spool /home/u/.local/state/onite "
                               f"(default: there is no system spool at {system})")
    default = locate(None, {**env, "ONITE_SYSTEM_CONFIG": str(tmp_path / "none.toml")}, 0)
    assert (default.path, default.source) == (Path("/var/spool/onite"), "system")  # no system config


@needs_root
def test_an_account_whose_home_cannot_hold_a_personal_spool_is_told_how_to_get_one(system, world_tmp, workdir):
    """No system spool yet, and an account whose home it cannot write (nobody's /nonexistent, a service
    account's /usr/sbin): every command said `creating /nonexistent/.local/state: Permission denied — you lack
    the permission; ask the spool's administrator`, an administrator of no spool. It says which spool it wanted
    and the ways to one: --spool DIR, ONITE_SPOOL, or root's onite init."""
    env = nobody_env(os.environ["ONITE_SYSTEM_CONFIG"], world_tmp / "nonexistent", workdir)
    del env["XDG_STATE_HOME"]
    for args in (["list"], ["submit", "x"]):
        r = run_cli(args, stdin=b"true\n", user="nobody", env=env, cwd=workdir)
        lines = r.err.splitlines()
        assert r.code == 4 and len(lines) == 1, r
        assert lines[0].startswith(f"onite: there is no system spool at {system}, and your personal spool "
                                   f"{world_tmp / 'nonexistent' / '.local' / 'state' / 'onite'} cannot be made "), r
        assert "give --spool DIR (or set ONITE_SPOOL), or ask root to set up the system spool: sudo onite init" in \
            lines[0], r
    assert not (world_tmp / "nonexistent").exists()


# ---- 2. submit says what it did and when the job will run ---------------------------------------------------


def test_submit_line_on_stderr_and_quiet(spool):
    r = submit("plain")
    assert r.out == "" and r.err == (f"spooled plain (P4) in {spool}; no drain is scheduled, so nothing will run it — "
                                     "onite cron --install\n")
    r = submit("silent", "true\n", "-q")
    assert (r.out, r.err) == ("", "")
    r = submit("uniq", "true\n", "--unique", "--quiet")
    assert r.out.startswith("uniq-") and r.err == ""
    r = submit("uniq", "true\n", "--unique")
    name = r.out.strip()
    assert name.startswith("uniq-") and r.err.startswith(f"spooled {name} (P4) in {spool}; ")
    r = submit("kept", "true\n", "--hold", "-p", "2")
    assert r.err == f"spooled kept (P2) in {spool}; held: it will not run until onite release kept\n"
    r = submit("later", "true\n", "--after", "plain", "--at", "tomorrow 05:00", "--host", "elsewhere")
    assert r.err.startswith(f"spooled later (P4) in {spool}; waits for plain; not before tomorrow 05:00; "
                            "only on host elsewhere; no drain is scheduled"), r
    r = submit("many", "a\nb\n", "--lines", "-p", "6")
    assert r.out == "many-00001\nmany-00002\n"
    assert r.err == (f"spooled 2 jobs, many-00001 to many-00002 (P6) in {spool}; no drain is scheduled, so nothing "
                     "will run them — onite cron --install\n"), r  # it said "it" of the batch
    r = submit("more", "a\nb\n", "--lines", "--hold")
    assert r.err == f"spooled 2 jobs, more-00001 to more-00002 (P4) in {spool}; held: they will not run until " \
                    "onite release more-00001…\n", r


def test_submit_line_while_a_driver_drains(spool, workdir):
    gate, driver = draining(spool, workdir, "blocker")
    try:
        r = submit("next")
        assert r.err == f"spooled next (P4) in {spool}; a drain is running now on host {HOST}\n"
        r = submit("timed", "true\n", "--at", "+3h")  # (it read as "it runs now")
        assert r.err.startswith(f"spooled timed (P4) in {spool}; not before "), r
        assert r.err.endswith(f"; a drain is running now on host {HOST} (it starts it then, if it is still draining)\n"), r
    finally:
        gate.unlink()
        driver.communicate(timeout=60)


# ---- 3. a next drain only when something will start one --------------------------------------------------------


@pytest.fixture
def crontab(world_tmp, monkeypatch):
    """A ``crontab`` command on PATH that keeps the table in a file (cron itself is not needed to install)."""
    bindir, table = world_tmp / "bin", world_tmp / "crontab.txt"
    bindir.mkdir()
    script = bindir / "crontab"
    script.write_text(f"""#!/bin/sh
case "$1" in
  -l) if [ -f {table} ]; then cat {table}; else echo "no crontab for $(id -un)" >&2; exit 1; fi ;;
  -) cat > {table} ;;
  *) echo "usage" >&2; exit 2 ;;
esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return table


@pytest.fixture
def cron_daemon(world_tmp):
    """A process named ``cron`` (a copy of sleep): what onite.drain.nextdrain looks for."""
    binary = world_tmp / "cron"
    shutil.copy("/bin/sleep", binary)
    proc = subprocess.Popen([str(binary), "600"])
    wait_for(lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip() == "cron", what="cron to run")
    yield proc
    proc.kill()
    proc.wait()


def test_cron_install_is_idempotent_and_keeps_other_entries(spool, crontab, cron_daemon):
    crontab.write_text("MAILTO=ops\n15 4 * * * /usr/local/bin/backup\n")
    set_config(spool, schedule=["0 20 * * *", "30 23 * * *"])
    r = run_cli(["cron", "--install", "--force"])  # onite runs from a checkout here
    assert r.code == 0 and r.out.startswith(f"installed the cron entry of {spool} in your crontab:"), r
    assert "next drain " in r.out and f" by cron on host {HOST}" in r.out
    first = crontab.read_text()
    assert first.startswith("MAILTO=ops\n15 4 * * * /usr/local/bin/backup\n\n# BEGIN onite ")
    entries = [line for line in first.splitlines() if "ONITE_STARTED_BY=cron" in line]
    assert len(entries) == 2 and entries[0].startswith("0 20 * * * ONITE_STARTED_BY=cron ")
    assert entries[0].endswith(f"run --quiet --spool {spool}")
    set_config(spool, schedule=["0 21 * * *"])
    r = run_cli(["cron", "--install", "--force"])  # onite runs from a checkout here
    assert r.code == 0 and r.out.startswith("replaced the cron entry")
    second = crontab.read_text()
    assert second.count("# BEGIN onite") == 1 and second.count("ONITE_STARTED_BY=cron") == 1 and " 21 " in second
    assert second.startswith("MAILTO=ops\n15 4 * * * /usr/local/bin/backup\n")
    record = json.loads((spool / f"cron.{HOST}.state").read_text())
    assert record["schedule"] == ["0 21 * * *"] and stat.S_IMODE((spool / f"cron.{HOST}.state").stat().st_mode) == 0o644
    doc = run_cli(["status", "--json"]).json()
    assert doc["drain_scheduled"] and doc["next_drain_by"] == "cron" and doc["next_drain_host"] == HOST
    assert datetime.fromisoformat(doc["next_drain"]).strftime("%H:%M") == "21:00"
    assert f"by cron on {HOST}" in run_cli(["status"]).out
    assert "; next drain " in submit("after-install").err and f"21:00 by cron on host {HOST}\n" in submit("two").err
    r = run_cli(["recur", "add", "hourly", "--every", "1h"], stdin=b"true\n")
    assert r.err.startswith("hourly: each run is spooled by the first drain after it fires; next drain "), r
    assert r.err.endswith(f"21:00 by cron on host {HOST}\n"), r
    r = run_cli(["cron", "--uninstall"])
    assert r.code == 0 and r.out.startswith("removed the cron entry")
    assert crontab.read_text() == "MAILTO=ops\n15 4 * * * /usr/local/bin/backup\n"
    assert not (spool / f"cron.{HOST}.state").exists()
    assert run_cli(["status", "--json"]).json()["next_drain"] is None


def test_a_cron_entry_without_a_cron_daemon_promises_nothing(spool, crontab, monkeypatch):
    import onite.app.crontab
    import onite.drain.nextdrain

    monkeypatch.setattr(onite.drain.nextdrain, "CRON_PIDFILES", ())
    for module in (onite.drain.nextdrain, onite.app.crontab):  # this machine (or another test) may run a cron
        monkeypatch.setattr(module, "cron_daemon_running", lambda: False)
    r = run_cli(["cron", "--install", "--force"])  # onite runs from a checkout here
    assert r.code == 0 and "warning: no cron daemon runs on this machine" in r.out
    # as status says it: systemctl fails where systemd does not run (a container), which is where cron is often off
    assert "(e.g. service cron start)" in r.out and "systemctl" not in r.out, r.out
    assert "next drain" not in r.out and "tell every user" not in r.out  # one thing said: nothing starts them
    doc = run_cli(["status", "--json"]).json()
    assert doc["next_drain"] is None
    assert f"a cron entry is installed on host {HOST}, but no cron daemon runs there: it starts nothing" in doc["warnings"]
    err = submit("x").err
    assert "but no cron daemon runs there" in err and "start the cron daemon" in err and "cron --install" not in err, err
    assert "start the cron daemon" in run_cli(["status"]).out  # not the install it already has


@needs_root
@pytest.mark.attack
def test_a_user_cannot_install_roots_cron_entry(spool, crontab):
    r = run_cli(["cron", "--install"], user="nobody", cwd="/tmp")
    assert r.code == 3 and r.err == f"onite: the cron entry of {spool} is its owner's to install — ask root: sudo onite cron --install\n"
    assert not crontab.exists()


def test_the_systemd_timer_counts_only_where_systemd_runs(spool, world_tmp, monkeypatch):
    import onite.drain.nextdrain

    units, running = world_tmp / "units", world_tmp / "run-systemd"
    (units / "timers.target.wants").mkdir(parents=True)
    (units / "onite-driver.timer").write_text("[Timer]\nOnCalendar=*-*-* 20:00:00\n")
    (units / "timers.target.wants" / "onite-driver.timer").symlink_to("../onite-driver.timer")
    monkeypatch.setattr(onite.drain.nextdrain, "SYSTEMD_UNITS", units)
    monkeypatch.setattr(onite.drain.nextdrain, "SYSTEMD_RUNNING", running)
    set_config(spool, schedule=["0 20 * * *"])
    doc = run_cli(["status", "--json"]).json()
    assert doc["next_drain"] is None and any("systemd is not running" in w for w in doc["warnings"])
    running.mkdir()
    doc = run_cli(["status", "--json"]).json()
    assert doc["next_drain_by"] == "timer" and datetime.fromisoformat(doc["next_drain"]).strftime("%H:%M") == "20:00"
    assert "by the systemd timer on host " in submit("timed").err


def test_status_shows_the_daemons_next_drain_and_who_started_each_driver(spool, workdir):
    from test_daemon import Daemon

    set_config(spool, schedule=[FAR])
    d = Daemon(spool)
    try:
        d.started()
        doc = run_cli(["status", "--json"]).json()
        [drv] = doc["drivers"]
        assert (drv["role"], drv["pid"], drv["state"]) == ("daemon", d.proc.pid, "idle")
        assert doc["next_drain_by"] == "daemon" and datetime.fromisoformat(doc["next_drain"]).month == 2
        assert "by the daemon on host" in submit("x").err
        # a daemon runs --at jobs at their time
        at = (datetime.now() + timedelta(hours=2)).strftime("%H:%M")
        assert f"; the daemon on host {HOST} starts it then" in submit("timed", "true\n", "--at", at).err
        # and a job due already (--at now) at once, not at its next scheduled drain
        assert submit("now", "true\n", "--at", "now").err.endswith(f"; the daemon on host {HOST} starts it now\n")
    finally:
        assert d.stop() == 0
    doc = run_cli(["status", "--json"]).json()
    assert doc["drivers"] == [] and doc["next_drain"] is None and doc["last_driver"]["role"] == "daemon"
    proc = subprocess.run([sys.executable, "-m", "onite", "run", "-q"], env=onite_env(ONITE_SPOOL=str(spool),
                          ONITE_STARTED_BY="cron"), capture_output=True, timeout=120)
    assert proc.returncode == 0
    last = run_cli(["status", "--json"]).json()["last_driver"]
    assert (last["role"], last["started_by"], last["died"]) == ("driver", "cron", False)
    assert "(the last one ended " in run_cli(["status"]).out


# ---- 4. locks no user can hold ---------------------------------------------------------------------------------


HOLDER = """
import fcntl, os, sys, time
held = []
for top, dirs, files in os.walk(sys.argv[1]):
    for name in dirs + files:
        path = os.path.join(top, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, getattr(fcntl, sys.argv[3]) | fcntl.LOCK_NB)
            held.append(path)
        except OSError:
            continue
with open(sys.argv[2] + ".part", "w") as out:  # renamed whole: the test waits for the name
    out.write("\\n".join(held))
os.rename(sys.argv[2] + ".part", sys.argv[2])
time.sleep(600)
"""


@needs_root
@pytest.mark.parametrize("how", ["LOCK_SH", "LOCK_EX"])
@pytest.mark.attack
def test_nobody_holding_every_lock_it_can_open_stops_nothing(spool, workdir, how):
    set_config(spool, check_lock=True)
    # a spool drained before (lock files, heartbeat, recur.state exist)
    drain(spool)
    assert run_cli(["recur", "add", "tick", "--every", "1d"], stdin=b"true\n").code == 0
    held_list = workdir / "held"
    holder = os.fork()
    if holder == 0:  # nobody, holding every flock it can get, shared or exclusive, until killed
        try:
            os.setgroups([])
            os.setgid(nobody().pw_gid)
            os.setuid(nobody().pw_uid)
            sys.argv = ["holder", str(spool), str(held_list), how]
            exec(HOLDER, {})
        finally:
            os._exit(1)
    try:
        wait_for(held_list.exists, what="nobody to take its locks")
        held = held_list.read_text().splitlines()
        assert f"{spool}/onite.toml" in held  # it holds what it can open...
        assert not [p for p in held if "/locks/" in p or p.endswith("/locks")]  # ...and nothing in locks/
        assert stat.S_IMODE(os.stat(spool / "locks").st_mode) == 0o700
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in (spool / "locks").iterdir())
        doc = run_cli(["status", "--json"]).json()
        assert doc["drivers"] == []  # no phantom driver
        submit("works", f"touch {workdir}/ran\n")  # check_lock is on: not refused
        proc = drain(spool)
        assert proc.returncode == 0 and b"driver-busy" not in proc.stderr, proc.stderr
        assert (workdir / "ran").exists() and result(spool, "works")["state"] == "done"
        assert not [line for line in log_lines(spool) if "recur-error" in line]
    finally:
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)


def test_lock_folder_and_files_are_closed_if_found_open(spool):
    from onite.spool import locks

    locks_dir = spool / "locks"
    os.chmod(locks_dir, 0o755)
    path = locks_dir / f"driver.{HOST}.lock"
    path.write_text("")
    os.chmod(path, 0o644)
    assert drain(spool).returncode == 0
    assert stat.S_IMODE(locks_dir.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    # every wait for a lock is bounded
    with locks.take(locks_dir / "recur.lock", timeout=1) as held:
        assert held is not None and locks.take(locks_dir / "recur.lock", timeout=0.1) is None


@needs_root
@pytest.mark.attack
def test_users_cannot_open_any_lock(spool):
    drain(spool)
    paths = [spool / "locks", *(spool / "locks").iterdir()]
    assert len(paths) >= 2
    for path in paths:
        pid = os.fork()
        if pid == 0:
            os.setgroups([])
            os.setgid(nobody().pw_gid)
            os.setuid(nobody().pw_uid)
            try:
                os.close(os.open(path, os.O_RDONLY))
                os._exit(1)
            except PermissionError:
                os._exit(0)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, path


# ---- the heartbeat -------------------------------------------------------------------------------------------


def _beat(**changes) -> hb.Beat:
    now = datetime.now().astimezone()
    beat = hb.Beat(host="vm", pid=os.getpid(), start_ticks=hb.process_start_ticks(os.getpid()), boot_id=hb.boot_id(),
                   machine=os.uname().nodename, role="run", started_by="hand", since=now, state="draining", updated=now)

    return beat._replace(**changes)


def test_a_heartbeat_is_alive_only_with_its_own_process():
    now = datetime.now().astimezone()
    assert hb.is_alive(_beat(), now)
    assert not hb.is_alive(_beat(state="exited"), now)
    assert not hb.is_alive(_beat(start_ticks=_beat().start_ticks + 1), now)  # a reused pid
    assert not hb.is_alive(_beat(boot_id="another-boot"), now)  # written before the machine last started
    child = subprocess.Popen(["true"])
    child.wait()
    assert not hb.is_alive(_beat(pid=child.pid, start_ticks=None), now)  # its process is gone
    # another machine's driver: alive while it keeps its heartbeat fresh
    assert hb.is_alive(_beat(machine="elsewhere", updated=now - timedelta(seconds=30)), now)
    assert not hb.is_alive(_beat(machine="elsewhere", updated=now - timedelta(minutes=10)), now)
    beat = _beat(next_drain=now + timedelta(hours=3), next_by="cron")
    assert hb.Beat.from_json(json.loads(json.dumps(beat.to_json()))) == beat
    for bad in ({}, {"version": 1}, {**_beat().to_json(), "pid": -1}, {**_beat().to_json(), "pid": "1"},
                {**_beat().to_json(), "role": "root"}, {**_beat().to_json(), "since": "2026-01-01T00:00"}):
        assert hb.Beat.from_json(bad) is None


def test_a_killed_driver_is_no_driver_and_its_jobs_are_warned_about(spool, workdir):
    kill_driver_mid_job(spool, workdir, "orphan")
    doc = run_cli(["status", "--json"]).json()
    assert doc["drivers"] == [] and doc["last_driver"]["died"] is True
    assert f"orphan is running, but {GONE}" in doc["warnings"], doc["warnings"]
    assert any("died without finishing" in w for w in doc["warnings"])
    r = run_cli(["cancel", "orphan"])
    assert r.code == 0 and r.out.startswith(f"orphan: requested (running, but {GONE}; the cancel is honoured then)"), r
    proc = drain(spool)  # the next driver recovers the job and honours the request
    assert proc.returncode == 0 and result(spool, "orphan")["state"] == "cancelled"


def test_status_wait_report_and_cancel_say_one_phrase_for_a_job_whose_driver_is_gone(spool, workdir):
    """A job claimed on a host whose driver was killed -9 and whose heartbeat then went stale (as another machine's
    does): status, wait, report and cancel each said it in their own words; they say heartbeat.driver_gone's."""
    kill_driver_mid_job(spool, workdir, "stuck")
    path = spool / f"driver.{HOST}.state"
    then = (datetime.now().astimezone() - timedelta(minutes=10)).isoformat()
    path.write_text(json.dumps({**json.loads(path.read_text()), "machine": "elsewhere.example", "updated": then}))
    assert f"stuck is running, but {GONE}" in run_cli(["status", "--json"]).json()["warnings"]
    assert f"stuck is running, but {GONE}" in " ".join(run_cli(["status"]).out.split())
    r = run_cli(["wait", "stuck", "--timeout", "1"])
    assert r.code == 6 and f"stuck is running, but {GONE}; " in r.err, r
    [row] = run_cli(["report", "--json"]).json()["waiting"]
    assert row["name"] == "stuck" and row["reason"].endswith(f", not filed; {GONE}"), row
    r = run_cli(["cancel", "stuck"])
    assert r.code == 0 and f"stuck: requested (running, but {GONE}; the cancel is honoured then)" in r.out, r
    assert drain(spool).returncode == 0 and result(spool, "stuck")["state"] == "cancelled"


# ---- 5. onite run says why it did nothing ------------------------------------------------------------------------


def test_run_says_why_it_did_nothing(spool, workdir):
    proc = drain(spool)
    assert proc.returncode == 0 and b'nothing-due queued=0 note="nothing is due: the queue is empty"' in proc.stderr
    submit("parked", "true\n", "--hold")
    submit("later", "true\n", "--at", "tomorrow 05:00")
    proc = drain(spool)
    assert proc.returncode == 0
    line = [ln for ln in proc.stderr.decode().splitlines() if " nothing-due " in ln][0]
    assert 'note="nothing is due: 2 queued, none can start now (root:parked: held; root:later: not before ' in line
    assert any(" nothing-due " in ln for ln in log_lines(spool))  # the same words in the log


def test_run_says_which_driver_holds_the_lock_and_so_does_detach(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("blocker", f"while [ -e {gate} ]; do sleep 0.02; done\n")
    first = start_driver(spool, env=onite_env(ONITE_STARTED_BY="cron"))
    try:
        wait_for(lambda: (spool / "running" / HOST / "root:blocker").exists(), what="the first driver to drain")
        proc = drain(spool)
        assert proc.returncode == 0
        busy = proc.stderr.decode()
        assert f" driver-busy host={HOST} pid={first.pid} role=driver since=" in busy and "started_by=cron" in busy
        r = run_cli(["run", "--detach"])
        assert r.code == 0 and r.out.startswith("the background driver (pid ")
        assert (f"did nothing: another driver is draining this spool on this host; exiting (driver pid {first.pid}, "
                "started by cron, since ") in r.out
    finally:
        gate.unlink()
        first.communicate(timeout=60)


def test_run_on_a_terminal_says_why_it_did_nothing(spool):
    """The live view (stderr a terminal) ends with the reason, in the log's words."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "onite", "run"], env=onite_env(ONITE_SPOOL=str(spool), TERM="xterm"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(60) == 0
    assert b"onite run: nothing run \xe2\x80\x94 nothing is due: the queue is empty" in seen, seen


def test_detach_says_when_its_driver_refused(spool):
    (spool / "running").rmdir()
    r = run_cli(["run", "--detach"])
    assert r.code == 4 and r.out.startswith("the background driver (pid "), r
    assert f"did not drain: no running/ folder in {spool} — run onite init to repair the spool" in r.out


def test_daemon_wake_and_run_hand_the_drain_to_an_idle_daemon(spool, workdir):
    from test_daemon import Daemon

    r = run_cli(["daemon", "--wake"])
    assert r.code == 1 and r.err.startswith(f"onite: no onite daemon runs for host {HOST}")
    set_config(spool, schedule=[FAR])
    d = Daemon(spool)
    try:
        d.started()
        submit("missed", f"touch {workdir}/ran\n")
        r = run_cli(["daemon", "--wake"])
        assert r.code == 0 and r.out == f"told the daemon of host {HOST} (pid {d.proc.pid}) to drain now; " \
                                        "onite status and onite log follow it\n"
        wait_for(lambda: (workdir / "ran").exists(), what="the daemon to drain")
        wait_for(lambda: (spool / "jobsdone" / "root:missed@result").exists(), what="the job to be filed")
        assert result(spool, "missed")["state"] == "done"
    finally:
        assert d.stop() == 0


@needs_root
@pytest.mark.attack
def test_only_root_wakes_roots_daemon(spool):
    from test_daemon import Daemon

    set_config(spool, schedule=[FAR])
    d = Daemon(spool)
    try:
        d.started()
        r = run_cli(["daemon", "--wake"], user="nobody", cwd="/tmp")
        assert r.code == 3 and "the locks of this spool are its owner's" in r.err, r
    finally:
        assert d.stop() == 0


@needs_root
@pytest.mark.attack
def test_the_log_says_why_nothing_is_due_without_what_users_job_files_say(spool, workdir):
    """The log is every user's to read: its nothing-due line names each waiting job's kind of wait,
    never its dependency, time or host, which daemon's private job file holds."""
    r = run_cli(["submit", "layoffs-q3-payroll", "--hold"], stdin=b"true\n", user="daemon", cwd="/tmp")
    assert r.code == 0, r
    for args in (["--after", "layoffs-q3-payroll"], ["--at", "2031-01-01 03:00"], ["--host", "secret-node-7"]):
        r = run_cli(["submit", f"d{len(args[1])}", *args], stdin=b"true\n", user="daemon", cwd="/tmp")
        assert r.code == 0, r
    assert drain(spool).returncode == 0
    [line] = [ln for ln in log_lines(spool) if " nothing-due " in ln]
    assert "waits for a dependency" in line and "not before a set time" in line
    assert "secret-node-7" not in line and "2031" not in line and "after layoffs" not in line, line


def test_a_bad_setting_tells_a_user_whom_to_ask(spool):
    """A bad value in root's onite.toml told every user to edit a file only root may
    write; they are told to ask its owner, and root is told what to write."""
    set_config(spool, slots="two")
    r = run_cli(["submit", "x"], user="nobody", cwd="/tmp")
    assert r.code == 2 and r.err == (f"onite: {spool}/onite.toml: slots = 'two' is not valid — ask root, who owns "
                                     "onite.toml (write a whole number from 1 to 4096)\n"), r
    r = run_cli(["list"], user="nobody", cwd="/tmp")  # reading the queue: said as a warning, and the queue shown
    assert r.code == 0 and r.err.startswith(f"onite: warning: {spool}/onite.toml: slots = 'two' is not valid — ask "
                                            "root, who owns onite.toml (write a whole number from 1 to 4096)"), r
    r = run_cli(["restart", "x"])
    assert r.code == 2 and r.err.endswith("is not valid — write a whole number from 1 to 4096\n"), r
