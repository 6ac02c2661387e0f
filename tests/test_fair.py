"""``order = "fair"``: within a priority the users take turns, the one with the least running time first
(onite.core.queue.fair_order); ``fifo`` keeps first in, first out."""

from __future__ import annotations

import os

import pytest

from conftest import drain, log_lines, run_cli, set_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to spool as the users daemon and nobody")


def spool_both(count: int = 200, body: bytes = b"true\n") -> None:
    """``count`` jobs of daemon's, then five of nobody's, at P4."""
    r = run_cli(["submit", "a", "--lines", "-p", "4"], stdin=body * count, user="daemon", cwd="/tmp")
    assert r.code == 0, r
    r = run_cli(["submit", "b", "--lines", "-p", "4"], stdin=b"true\n" * 5, user="nobody", cwd="/tmp")
    assert r.code == 0, r


def started(spool) -> list[str]:
    return [line.split()[3] for line in log_lines(spool) if line.split()[2:3] == ["start"]]


@pytest.mark.slow
def test_fair_order_lets_the_second_users_jobs_run_among_the_first_users_first_ten(spool):
    set_config(spool, order="fair", slots=1)
    # daemon's jobs take longer than nobody's: whatever the machine's load, nobody has used less
    spool_both(40, b"sleep 0.2\n")
    shown = [job["name"] for job in run_cli(["list", "--json"]).json()["jobs"]]
    assert shown[:4] == ["daemon:a-00001", "nobody:b-00001", "daemon:a-00002", "nobody:b-00002"], shown[:4]
    assert drain(spool).returncode == 0
    order = started(spool)
    assert len(order) == 45
    first_ten = order[:10]
    assert sum(name.startswith("nobody:") for name in first_ten) == 5, first_ten
    assert [n for n in order if n.startswith("daemon:")] == [f"daemon:a-{i:05d}" for i in range(1, 41)]


def test_fifo_runs_them_in_the_order_they_were_spooled(spool):
    set_config(spool, slots=1)
    spool_both()
    shown = [job["name"] for job in run_cli(["list", "--json"]).json()["jobs"]]
    assert shown[199:] == ["daemon:a-00200"] + [f"nobody:b-{i:05d}" for i in range(1, 6)]
    assert drain(spool).returncode == 0
    assert [n for n in started(spool) if n.startswith("nobody:")] == started(spool)[200:]
