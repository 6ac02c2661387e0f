"""Prometheus metrics: the file a real drain writes, read by prometheus-client's parser, promtool and a
real node_exporter; counters that outlive retention; a write that fails or is killed half-way."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, drain, log_lines, run_cli, set_config, wait_for

HOST = os.uname().nodename.split(".")[0]
PROMTOOL = shutil.which("promtool")
EXPORTER = shutil.which("prometheus-node-exporter")
needs_prometheus = pytest.mark.skipif(
    (PROMTOOL is None or EXPORTER is None) and os.environ.get("ONITE_PROMETHEUS_TESTS") != "required",
    reason="needs promtool and node_exporter (Debian: prometheus prometheus-node-exporter)")


def submit(name: str, body: str, *args: str) -> None:
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


def samples(text: str) -> dict[tuple, float]:
    """Every sample of ``text`` (Prometheus' text format, read by prometheus-client's own parser) as
    (name, sorted labels) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(found: dict[tuple, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(value for (n, have), value in found.items() if n == name and set(labels.items()) <= set(have))


def night_of_known_outcomes(spool: Path, prom: Path) -> None:
    """2 done, 1 failed, 1 timeout, 1 cancelled, drained once, with metrics_file set."""
    set_config(spool, metrics_file=str(prom), kill_grace="1s")
    submit("ok1", "true\n", "-p", "1")
    submit("ok2", "echo fine\n", "-p", "2")
    submit("bad", "exit 3\n")
    submit("slow", "sleep 60\n", "--timeout", "1s")
    submit("gone", "true\n")
    assert run_cli(["cancel", "gone"]).code == 0
    r = drain(spool)
    assert r.returncode == 0, r.stderr


def check_night(found: dict[tuple, float]) -> None:
    finished = {o: total(found, "onite_jobs_finished_total", host=HOST, outcome=o)
                for o in ("done", "failed", "timeout", "cancelled", "lost")}
    assert finished == {"done": 2, "failed": 1, "timeout": 1, "cancelled": 1, "lost": 0}
    assert total(found, "onite_jobs_finished_total", outcome="done", priority="1") == 1
    assert total(found, "onite_job_attempts_total", host=HOST) == 4  # the cancelled job never ran
    assert total(found, "onite_job_retries_total") == 0
    assert total(found, "onite_job_run_seconds_count", host=HOST) == 4
    assert total(found, "onite_job_run_seconds_bucket", le="+Inf") == 4
    assert total(found, "onite_last_drain_exit_status", host=HOST) == 0
    assert total(found, "onite_last_completed_drain_timestamp_seconds", host=HOST) == pytest.approx(
        total(found, "onite_last_drain_end_timestamp_seconds", host=HOST))
    assert time.time() - total(found, "onite_last_completed_drain_timestamp_seconds") < 600
    assert total(found, "onite_driver_up", host=HOST) == 0  # onite run has exited
    assert total(found, "onite_queued_jobs") == 0 and total(found, "onite_running_jobs") == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_prometheus
def test_node_exporter_serves_a_nights_outcomes(spool, world_tmp):
    textfiles = world_tmp / "node-exporter"
    textfiles.mkdir()
    prom = textfiles / "onite.prom"
    night_of_known_outcomes(spool, prom)
    text = prom.read_text()
    check_night(samples(text))
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # onite metrics prints the same, from the spool's files alone
    assert run_cli(["metrics"]).out == text
    port = free_port()
    exporter = subprocess.Popen([EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                                 f"--collector.textfile.directory={textfiles}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def scrape() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    return response.read().decode()
            except OSError:
                assert exporter.poll() is None, "node_exporter exited"
                return None

        scraped = wait_for(scrape, what="node_exporter answers")
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)
    found = samples(scraped)
    assert total(found, "node_textfile_scrape_error") == 0
    check_night(found)


DOC = REPO / "docs" / "admin-guide.md"


def documented_rules() -> str:
    """The alert rules docs/admin-guide.md gives, verbatim (the YAML block after its rules marker)."""
    text = DOC.read_text()
    match = re.search(r"<!-- alert rules -->\n```yaml\n(.*?)```", text, re.S)
    assert match, "docs/admin-guide.md has no alert rules block"
    return match.group(1)


@needs_prometheus
def test_documented_alert_rules_pass_promtool(world_tmp):
    rules = world_tmp / "onite-rules.yml"
    rules.write_text(documented_rules())
    checked = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "3 rules found" in checked.stdout


def test_counters_outlive_retention(spool):
    set_config(spool, keep=1)
    for n in range(3):
        submit(f"j{n}", "true\n")
    assert drain(spool).returncode == 0
    submit("j3", "exit 1\n")
    assert drain(spool).returncode == 0
    assert len(list((spool / "jobsdone").glob("*@result"))) == 1  # retention kept one
    found = samples(run_cli(["metrics"]).out)
    assert total(found, "onite_jobs_finished_total", outcome="done") == 3
    assert total(found, "onite_jobs_finished_total", outcome="failed") == 1
    assert total(found, "onite_job_run_seconds_count") == 4


def test_users_only_when_asked_and_never_job_names(spool):
    submit("secret-report-name", "true\n")
    submit("held-secret-name", "true\n", "--hold")
    assert drain(spool).returncode == 0
    text = run_cli(["metrics"]).out
    assert "secret" not in text and "user=" not in text
    assert total(samples(text), "onite_held_jobs") == 1
    set_config(spool, metrics_users=True)
    text = run_cli(["metrics"]).out
    assert "secret" not in text
    found = samples(text)
    assert total(found, "onite_jobs_finished_total", outcome="done", user="root") == 1
    assert total(found, "onite_held_jobs", user="root") == 1


def test_a_damaged_counters_file_is_reset_with_one_line(spool):
    state = spool / f"metrics.{HOST}.state"
    state.write_bytes(b'{"version": 1, "host": "')
    assert run_cli(["metrics"]).code == 0  # a reader takes it as none
    submit("a", "true\n")
    assert drain(spool).returncode == 0
    assert len([line for line in log_lines(spool) if " metrics-reset " in line]) == 1
    assert json.loads(state.read_text())["finished"] == [["done", "4", "root", 1]]


def test_a_metrics_file_that_cannot_be_written_never_stops_the_drain(spool, world_tmp):
    prom = world_tmp / "prom" / "onite.prom"
    prom.parent.mkdir()
    set_config(spool, metrics_file=str(prom))
    submit("first", "true\n")
    assert drain(spool).returncode == 0
    before = prom.read_bytes()
    # a real fault: the file-size limit (SIGXFSZ is ignored by Python: the write fails with EFBIG)
    assert len(before) > 4096 > (spool / "onite.log").stat().st_size + 2048
    for n in range(2):
        submit(f"then{n}", "true\n")
    r = run_cli(["run", "-q"], rlimit_fsize=4096)
    assert r.code == 0, r
    assert prom.read_bytes() == before  # the previous file, whole
    assert sorted(p.name for p in prom.parent.iterdir()) == ["onite.prom"]  # no temporary file left
    failed = [line for line in log_lines(spool) if " metrics-failed " in line]
    assert len(failed) == 1 and "File too large" in failed[0], failed
    assert total(samples(run_cli(["metrics"]).out), "onite_jobs_finished_total", outcome="done") == 3


STRACE = shutil.which("strace")


@pytest.mark.skipif(STRACE is None and os.environ.get("ONITE_STRACE_TESTS") != "required",
                    reason="needs strace (Debian: strace) to kill the driver as it renames the metrics file")
def test_a_driver_killed_while_writing_leaves_the_previous_file(spool, world_tmp):
    prom = world_tmp / "onite.prom"
    set_config(spool, metrics_file=str(prom))
    assert drain(spool).returncode == 0
    env = {**os.environ, "ONITE_SPOOL": str(spool), "PYTHONPATH": str(REPO)}
    driver = [sys.executable, "-m", "onite", "run", "-q"]
    # an empty drain makes the same renames each time: find the first onto the metrics file …
    trace = world_tmp / "renames"
    subprocess.run([STRACE, "-qq", "-o", str(trace), "-e", "trace=rename", *driver], env=env, check=True, timeout=120)
    renames = [line for line in trace.read_text().splitlines() if line.startswith("rename(")]
    n = next(i for i, line in enumerate(renames, 1) if f', "{prom}")' in line)
    before = prom.read_bytes()
    # … and SIGKILL the driver there: the new text is written, not yet in place
    traced = subprocess.run([STRACE, "-qq", "-o", os.devnull, "-e", "trace=rename",
                             "-e", f"inject=rename:signal=KILL:when={n}", *driver], env=env, capture_output=True,
                            timeout=120)
    assert traced.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL, 137), traced
    assert prom.read_bytes() == before
    samples(before.decode())
    wait_for(lambda: run_cli(["run", "-q"]).code == 0, what="a new driver drains")  # the dead one's lock is free


@pytest.mark.parametrize("line, want", [('metrics_file = "onite.prom"', "an absolute path"),
                                        ("metrics_file = 3", "an absolute path"),
                                        ('metrics_users = "yes"', "true or false")])
def test_bad_metrics_settings_are_one_line(line, want):
    from onite.core.config import parse_config
    from onite.core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config(line)
    assert want in err.value.hint
    assert parse_config('metrics_file = ""').metrics_file is None


def test_metrics_of_a_spool_with_a_bad_onite_toml_are_printed_with_a_warning(spool):
    """A typo in onite.toml stopped `onite metrics` (a scrape's script) while every other reading command went
    on with a warning: the metrics are read from the spool's files, and a new drain is what refuses the file."""
    run_cli(["submit", "queued"], stdin=b"true\n")
    (spool / "onite.toml").write_text((spool / "onite.toml").read_text() + "\nslot = 2\n")
    r = run_cli(["metrics"])
    assert r.code == 0, r
    assert "onite_queued_jobs{" in r.out and "unknown key 'slot'" in r.err and len(r.err.splitlines()) == 1
