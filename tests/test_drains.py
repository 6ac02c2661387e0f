"""onite.app.drains: drains and the last drain session, read back from log lines (pure, and a real file read backwards)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from onite.app import drains as dr
from onite.core.errors import SpoolIOError
from onite.spool.log import LONGEST_LINE, format_line, lines_back, tail

BERLIN = ZoneInfo("Europe/Berlin")


def at(day: int, hour: int, minute: int = 0) -> datetime:
    """A time in November 2026, Berlin (the machine's zone in these tests: berlin_tz)."""
    return datetime(2026, 11, day, hour, minute, tzinfo=BERLIN).astimezone()


def morning(when: datetime) -> datetime:
    from onite.app.report import morning_before

    return morning_before(when, when)


def drain_lines(host: str, pid: int, start: datetime, end: datetime | None, jobs: int = 1,
                reason: str = "drained") -> list[str]:
    """The log lines of one drain: its start, ``jobs`` jobs started and done, its exit (None: none yet)."""
    lines = [format_line(start, host, pid, "driver-start", host=host, slots=1)]
    for i in range(jobs):
        when = start + timedelta(minutes=i + 1)
        key = f"alice:j-{host}-{pid}-{start:%d%H%M}-{i}"
        lines += [format_line(when, host, pid, "start", key, user="alice", priority=3, attempt=1),
                  format_line(when, host, pid, "done", key, user="alice", exit=0, seconds="1.000", attempt=1)]
    if end is not None:
        lines.append(format_line(end, host, pid, "driver-exit", done=jobs, failed=0, cancelled=0, left=0, reason=reason))
    return lines


def events_of(lines: list[str]) -> list[dr.Event]:
    """The events of these lines, oldest first, as the report reads them (from the end of a file)."""
    return list(reversed(_back(lines)))


def _back(lines):
    import tempfile
    from pathlib import Path

    with tempfile.NamedTemporaryFile("w", delete=False) as out:
        out.write("".join(sorted(lines, key=lambda line: line.split(" ", 1)[0])))  # in time order, as logged
    try:
        return list(dr.read_back([Path(out.name)]))
    finally:
        Path(out.name).unlink()


def session(lines: list[str], running_hosts=()) -> dr.Session:
    drains = dr.drains_of(events_of(lines), running_hosts)
    return dr.last_session(drains, morning)


def test_a_night_of_two_drains_is_one_session(berlin_tz):
    """The schedule's 20:00 and 23:00 drains are one night; the drain of the night before is not."""
    lines = (drain_lines("vm", 10, at(21, 20), at(21, 22)) + drain_lines("vm", 11, at(22, 20), at(22, 21))
             + drain_lines("vm", 12, at(22, 23), at(23, 1, 30)))
    found = session(lines)
    assert (found.start, found.end) == (at(22, 20), at(23, 1, 30))
    assert [d.pid for d in found.drains] == [11, 12]


def test_a_daytime_drain_is_reported_the_same_afternoon(berlin_tz):
    lines = drain_lines("vm", 11, at(22, 20), at(23, 6)) + drain_lines("vm", 12, at(23, 14), at(23, 14, 20))
    found = session(lines)
    assert (found.start, found.end, [d.pid for d in found.drains]) == (at(23, 14), at(23, 14, 20), [12])


def test_a_drain_that_ran_nothing_does_not_hide_the_night(berlin_tz):
    """A morning ``onite run`` that found nothing to do: the night before is still the last night."""
    lines = drain_lines("vm", 11, at(22, 20), at(23, 5)) + drain_lines("vm", 12, at(23, 8), at(23, 8), jobs=0)
    found = session(lines)
    assert found.start == at(22, 20) and [d.pid for d in found.drains] == [11, 12]
    # ... but an empty drain after the next noon starts a night of its own only if it ran something
    lines += drain_lines("vm", 13, at(23, 15), at(23, 15), jobs=0)
    assert session(lines).start == at(22, 20)


def test_drains_on_several_hosts_and_a_daemon(berlin_tz):
    """Hosts drain side by side; a daemon (one pid) drains twice; a driver killed -9 ends at its last line."""
    lines = (drain_lines("a", 7, at(22, 20), at(22, 21)) + drain_lines("a", 7, at(22, 23), at(22, 23, 30))
             + drain_lines("b", 9, at(22, 20, 5), None, jobs=2)  # killed: no exit line
             + drain_lines("b", 10, at(22, 23, 10), at(22, 23, 40)))
    drains = dr.drains_of(events_of(lines), running_hosts=())
    assert [(d.host, d.pid, d.started) for d in drains] == [("a", 7, at(22, 20)), ("b", 9, at(22, 20, 5)),
                                                            ("a", 7, at(22, 23)), ("b", 10, at(22, 23, 10))]
    died = drains[1]
    assert (died.ended, died.reason, died.ran) == (at(22, 20, 7), "died", 4)
    found = dr.last_session(drains, morning)
    assert (found.start, found.end, len(found.drains)) == (at(22, 20), at(22, 23, 40), 4)


def test_a_drain_still_running(berlin_tz):
    lines = drain_lines("vm", 11, at(22, 20), None, jobs=2)
    assert session(lines, running_hosts=["vm"]).end is None  # its host's lock is held: it runs
    assert session(lines).drains[0].reason == "died"  # no lock: it died


def test_the_window_closing_and_the_log_read_back(berlin_tz, tmp_path):
    lines = drain_lines("vm", 11, at(22, 20), None, jobs=3)
    lines.append(format_line(at(22, 23, 59), "vm", 11, "window-closed", until="07:00:00", left=6))
    lines.append(format_line(at(23, 0), "vm", 11, "driver-exit", left=6, reason="window closed"))
    lines.append("a line onite did not write\n")
    drain = dr.drains_of(events_of(lines), ())[0]
    assert (drain.until, drain.left, drain.reason) == ("07:00", 6, "window closed")

    # a log larger than a block, lines across the blocks' edges, read from its end: every line, newest first
    log = tmp_path / "onite.log"
    many = [format_line(at(20, 0) + timedelta(seconds=i), "vm", 1, "done", f"alice:job-{i:05d}", user="u" * (i % 50))
            for i in range(3000)]
    log.write_text("".join(many))
    back = list(dr.read_back(dr.log_paths(log)))
    assert [e.name for e in back] == [f"alice:job-{i:05d}" for i in reversed(range(3000))]
    # onite.log.1 (logrotate's) is read after onite.log
    (tmp_path / "onite.log.1").write_text(format_line(at(19, 23), "vm", 1, "done", "alice:older"))
    assert [e.name for e in dr.read_back(dr.log_paths(log))][-1] == "alice:older"


def test_collect_reads_back_no_further_than_the_window(berlin_tz):
    lines = (drain_lines("vm", 10, at(20, 20), at(20, 22)) + drain_lines("vm", 11, at(21, 20), at(21, 22))
             + drain_lines("vm", 12, at(22, 20), at(22, 22)))
    read = []

    def newest_first():
        for event in reversed(events_of(lines)):
            read.append(event)
            yield event

    found = dr.collect(newest_first(), None, morning, at(23, 8))
    assert found[0].when == at(22, 20) and found[-1].when == at(22, 22)
    assert min(e.when for e in read) >= at(21, 22)  # it stopped soon after the session's morning (less SKEW)
    told = dr.job_events(found, at(22, 20), at(22, 22))
    assert sorted(told.finals) == [("alice:j-vm-12-222000-0", "alice")]


def test_the_last_drain_is_the_one_the_log_wrote_last_within_a_second(berlin_tz):
    """The log's times are whole seconds: a drain that started in the second the one before it ended is
    after it, by the lines' order; another host's drain that ran beside the last is part of it."""
    second = at(22, 14)
    first = drain_lines("vm", 10, second, second, jobs=0) + [
        format_line(second, "vm", 10, "failed", "alice:a", user="alice", reason="exit 3")]
    first.insert(1, first.pop())  # its job line before its exit line
    last = [format_line(second, "vm", 11, "driver-start", host="vm", slots=1),
            format_line(second, "other", 20, "driver-start", host="other", slots=1),
            format_line(second, "vm", 11, "done", "alice:b", user="alice", exit=0),
            format_line(second, "other", 20, "driver-exit", done=0, failed=0, cancelled=0, left=0, reason="drained"),
            format_line(second, "vm", 11, "driver-exit", done=1, failed=0, cancelled=0, left=0, reason="drained")]
    drains = dr.drains_of(events_of(first + last), ())
    found = dr.last_session(drains, lambda when: None)  # no schedule: no night opened
    assert sorted((d.host, d.pid) for d in found.drains) == [("other", 20), ("vm", 11)]


def test_a_log_with_a_long_stretch_of_no_newline_is_read_back_as_its_end(tmp_path):
    """A log that a crash left with a zeroed stretch (64 MiB here, a hole) holds one line as long as that: it is
    read back as its last LONGEST_LINE bytes or so (it is damage; what memory and time it costs stay bounded),
    and the lines around it whole."""
    path = tmp_path / "onite.log"
    first, last = "2026-11-30T10:00:00+00:00 vm[1] start a", "2026-11-30T10:00:01+00:00 vm[1] done a"
    with open(path, "wb") as handle:
        handle.write(first.encode() + b"\n")
        handle.truncate(handle.tell() + (64 << 20))
        handle.seek(0, os.SEEK_END)
        handle.write(b"\n" + last.encode() + b"\n")
    lines = tail(path, 3)
    assert lines[0] == first and lines[-1] == last, [len(line) for line in lines]
    assert LONGEST_LINE <= len(lines[1]) <= LONGEST_LINE + (64 << 10) and set(lines[1]) == {"\x00"}


def test_the_log_is_read_back_line_by_line_across_its_blocks(tmp_path):
    """One reader of the log from its end (status, report, onite log): lines longer than its block, lines
    ending on a block's edge, empty lines skipped; a log that is no regular file is an error, a missing one empty."""
    lines = ["x" * n for n in (1, 65535, 65536, 3, 0, 70000, 131072, 5)]
    path = tmp_path / "onite.log"
    path.write_bytes("\n".join(lines).encode() + b"\n")
    assert list(lines_back(path)) == [line for line in reversed(lines) if line]
    assert tail(path, 2) == [lines[-2], lines[-1]] and tail(path, 0) == []
    assert list(lines_back(tmp_path / "none")) == [] and tail(tmp_path / "none", 5) == []
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(SpoolIOError):
        tail(tmp_path / "fifo", 5)


def test_a_log_made_anew_is_every_users_to_read_whatever_the_umask(tmp_path):
    """A driver started by hand under umask 077 (or the first line after logrotate moved the log away) made
    onite.log 0600: users' status, report and wait could not read it. A log that exists keeps its mode."""
    from onite.spool.log import ActivityLog

    old = os.umask(0o077)
    try:
        made = ActivityLog(tmp_path / "onite.log", "vm")
        made.event("warning", note="first line")
        made.close()
        assert (tmp_path / "onite.log").stat().st_mode & 0o777 == 0o644
        (tmp_path / "kept.log").touch(mode=0o640)
        os.chmod(tmp_path / "kept.log", 0o640)  # as logrotate's `create 0640 root adm` left it
        kept = ActivityLog(tmp_path / "kept.log", "vm")
        kept.event("warning", note="a line")
        kept.close()
        assert (tmp_path / "kept.log").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
