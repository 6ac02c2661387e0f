"""What ``onite run`` prints: a live view on a terminal (a real pty), log lines elsewhere, nothing with -q."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from datetime import datetime, timezone

from conftest import REPO, log_lines, run_cli
from onite.cli.progress import LINES, LIVE, QUIET, DrainState, choose_mode, summary_line


def submit(name: str, body: str, *args: str) -> None:
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


def test_mode_follows_terminal_and_options():
    assert choose_mode(quiet=False, verbose=False, is_terminal=True, dumb=False) == LIVE
    assert choose_mode(quiet=False, verbose=False, is_terminal=False, dumb=False) == LINES
    assert choose_mode(quiet=False, verbose=False, is_terminal=True, dumb=True) == LINES
    assert choose_mode(quiet=False, verbose=True, is_terminal=True, dumb=False) == LINES
    assert choose_mode(quiet=True, verbose=True, is_terminal=True, dumb=False) == QUIET


def test_state_counts_the_events_of_a_drain():
    at = datetime(2026, 11, 22, 20, 0, tzinfo=timezone.utc)
    state = DrainState()
    assert state.apply(at, "driver-start", "", {"host": "vm", "slots": 2}) is None
    state.apply(at, "start", "a", {"user": "alice", "priority": 3, "attempt": 1})
    state.apply(at, "start", "b", {"user": "bob", "priority": "urgent", "attempt": 2})
    assert [(r.name, r.priority, r.attempt) for r in state.running.values()] == [("a", "P3", 1), ("b", "urgent", 2)]
    assert state.apply(at, "done", "a", {"user": "alice", "seconds": "133.0"}) == "✓ a (alice) done in 2m13s"
    assert state.apply(at, "failed", "b", {"user": "bob", "reason": "exit 3", "seconds": "41"}) == \
        "✗ b (bob) failed: exit 3 after 41s — onite output b"
    assert state.apply(at, "cancelled", "c", {"by": "root", "was": "queued"}) == "⊘ c (root) cancelled by root"
    # a job failed before it ran (its dependency failed) has no output to point to
    assert state.apply(at, "failed", "d", {"user": "bob", "reason": "dependency b failed"}) == \
        "✗ d (bob) failed: dependency b failed"
    state.apply(at, "driver-exit", "", {"left": 4})
    assert state.running == {} and state.finished == 4 and state.queued == 4
    assert summary_line(state, 62) == ("onite run: 1 done, 2 failed, 1 cancelled in 1m02s; 4 left queued"
                                       " — what failed: onite report; why they wait: onite status")
    state.counts["failed"] = 0
    assert summary_line(state, 62).endswith("; 4 left queued — why they wait: onite status")
    state.queued = 0
    assert summary_line(state, 62) == "onite run: 1 done, 0 failed, 1 cancelled in 1m02s"


def test_not_a_terminal_gets_the_log_lines_and_quiet_nothing(spool):
    submit("plain", "echo hi\n")
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "onite", "run"], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == b""
    printed = proc.stderr.decode().splitlines()
    assert [line.split()[2] for line in printed] == ["driver-start", "start", "done", "driver-exit"]
    assert printed == log_lines(spool)[-4:]  # the same lines as onite.log
    submit("silent", "echo hi\n")
    proc = subprocess.run([sys.executable, "-m", "onite", "run", "-q"], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert " done root:silent " in "\n".join(log_lines(spool))


def run_on_pty(spool, *args: str, env_extra: dict | None = None, timeout: float = 90,
               seen=None) -> tuple[int, str]:
    """``onite run`` with a pseudo-terminal as its stdout and stderr: the exit code and what the terminal got.
    ``seen(screen)`` is called with what the terminal got so far, each time more comes."""
    master, slave = pty.openpty()
    env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), TERM="xterm-256color", COLUMNS="100",
               **(env_extra or {}))
    env.pop("NO_COLOR", None) if not (env_extra and "NO_COLOR" in env_extra) else None
    proc = subprocess.Popen([sys.executable, "-m", "onite", "run", *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
            if seen is not None:
                seen(b"".join(chunks).decode("utf-8", "replace"))
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(timeout=30)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_gets_a_live_view(spool, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("first", f"while [ -e {gate} ]; do sleep 0.05; done\n", "-p", "1")
    submit("broken", "exit 3\n", "-p", "2")

    def open_gate(screen: str) -> None:  # once the view has drawn the running job
        if "▶ first" in screen and "slots busy" in screen:
            gate.unlink(missing_ok=True)

    code, screen = run_on_pty(spool, seen=open_gate)
    assert code == 0
    assert "▶ first" in screen and "slots busy" in screen and "jobs" in screen  # the live part
    assert "✓ first (root) done" in screen or "✓ first (" in screen
    assert "✗ broken (" in screen and "failed: exit 3" in screen and "onite output broken" in screen
    assert "onite run: 1 done, 1 failed, 0 cancelled in" in screen
    assert "driver-start" not in screen  # no log lines on a terminal


def test_no_color_and_verbose_on_a_terminal(spool):
    submit("tinted", "exit 1\n")
    code, screen = run_on_pty(spool, env_extra={"NO_COLOR": "1"})
    assert code == 0 and "✗ tinted" in screen
    assert "\x1b[31m" not in screen and "\x1b[1;31m" not in screen  # no red: NO_COLOR is honoured
    submit("logged", "true\n")
    code, screen = run_on_pty(spool, "-v")
    assert code == 0 and " done root:logged " in screen and "driver-exit" in screen and "▶" not in screen


def test_the_end_line_counts_each_job_once_by_its_latest_run_as_the_report_does():
    """A job cancelled while it ran and restarted in the same drain, where it succeeded: the end line said
    "2 done, 0 failed, 1 cancelled", the report of the same drain "2 done, 0 failed" (each job once, by its
    latest run)."""
    when = datetime(2026, 11, 30, 21, 0, tzinfo=timezone.utc)
    state = DrainState()
    for event, name in (("start", "k"), ("start", "z"), ("cancelled", "k"), ("done", "z"), ("start", "k"),
                        ("done", "k"), ("done", "other")):
        state.apply(when, event, name, {"user": "nobody"} if name != "other" else {"user": "bob"})
    assert state.counts == {"done": 3, "failed": 0, "cancelled": 0}, state.counts
    assert summary_line(state, 7).startswith("onite run: 3 done, 0 failed, 0 cancelled in "), summary_line(state, 7)
