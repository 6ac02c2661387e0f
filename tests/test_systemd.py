"""systemd/: the units pass `systemd-analyze verify`, match the default schedule, and keep jobs working."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO
from onite.core.config import DEFAULT_SCHEDULE

UNITS = REPO / "systemd"
NAMES = ["onite.service", "onite-driver.service", "onite-driver.timer"]
ONITE = "/usr/local/bin/onite"


def settings(name: str) -> list[tuple[str, str]]:
    """(key, value) of every setting line of a unit, comments left out."""
    pairs = []
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            pairs.append((key.strip(), value.strip()))
    return pairs


def test_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing (apt-get install systemd)")
    # verify insists that ExecStart's program exists: stand in for /usr/local/bin/onite
    stub = tmp_path / "bin" / "onite"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    for name in NAMES:
        text = (UNITS / name).read_text()
        assert name == "onite-driver.timer" or ONITE in text
        (units / name).write_text(text.replace(ONITE, str(stub)))
    proc = subprocess.run([analyze, "verify", "--man=no", *(str(units / n) for n in NAMES)],
                          capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    # Lines about the host (no systemd as PID 1 in a container) are not about our units.
    ours = [line for line in output.splitlines() if any(n in line for n in NAMES) or str(units) in line]
    assert proc.returncode == 0 and ours == [], output


def test_the_timer_fires_at_the_default_schedule():
    calendar = [v for k, v in settings("onite-driver.timer") if k == "OnCalendar"]
    as_cron = []
    for spec in calendar:
        day, clock = spec.split()
        assert day == "*-*-*"
        hour, minute, second = clock.split(":")
        assert second == "00"
        as_cron.append(f"{int(minute)} {int(hour)} * * *")
    assert sorted(as_cron) == sorted(DEFAULT_SCHEDULE)
    assert ("Persistent", "true") in settings("onite-driver.timer")


def test_the_units_start_the_right_commands():
    daemon, driver = dict(settings("onite.service")), dict(settings("onite-driver.service"))
    assert daemon["Type"] == "simple" and daemon["ExecStart"] == f"{ONITE} daemon"
    assert driver["Type"] == "oneshot" and driver["ExecStart"].startswith(f"{ONITE} run --scheduled")
    assert driver["TimeoutStartSec"] == "infinity"


@pytest.mark.parametrize("name", ["onite.service", "onite-driver.service"])
def test_hardening_leaves_jobs_their_powers(name):
    keys = dict(settings(name))
    # the driver must stay root with every capability to run jobs as their owners, and jobs
    # must be able to use sudo/setuid programs, their homes, /tmp and devices
    for forbidden in ("User", "Group", "DynamicUser", "PrivateUsers", "NoNewPrivileges", "CapabilityBoundingSet",
                      "ProtectHome", "ProtectSystem", "PrivateTmp", "PrivateDevices", "PrivateNetwork",
                      "MemoryDenyWriteExecute", "SystemCallFilter", "SystemCallArchitectures"):
        assert forbidden not in keys, forbidden
    # stop = TERM to the driver only, so running jobs may finish
    assert keys["KillMode"] == "mixed" and keys["KillSignal"] == "SIGTERM"


def test_no_unit_suggests_an_onite_other_users_cannot_run():
    # onite.service offered /root/.local/bin/onite (pipx as root) for ExecStart, but each job's monitor runs
    # that onite's Python as the job's owner, who cannot enter /root: every job would fail to start.
    # The admin guide's install (/opt/onite/venv, linked from /usr/local/bin) is what the units name.
    for name in NAMES:
        text = (UNITS / name).read_text()
        assert "/root/" not in text and "pipx" not in text, name
