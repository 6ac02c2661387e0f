"""``onite report``: the window (--night, --since), --user, the table, the timeline, the HTML page.

A real spool drained by a real driver: a job that succeeds, one that exits 3,
one that times out, one cancelled before it ran. The HTML page is rendered
by headless Chromium and the screenshot checked for the bars' colours.
"""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile
from datetime import date, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from conftest import drain, result, run_cli
from pngread import read_png, solid_blocks

ME = pwd.getpwuid(os.geteuid()).pw_name
CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and os.environ.get("ONITE_CHROMIUM_TESTS") != "required",
    reason="needs Debian's chromium (CI installs it and sets ONITE_CHROMIUM_TESTS=required)")


def submit(name, body="true\n", *args):
    r = run_cli(["submit", name, *args], stdin=body.encode())
    assert r.code == 0, r


@pytest.fixture
def night(spool, cli):
    """A drained spool: ok (P2) done, bad exits 3, slow times out, gone cancelled before the drain."""
    submit("ok", "echo fine\n", "-p", "2")
    submit("bad", "exit 3\n")
    submit("slow", "sleep 30\n", "--timeout", "1s")
    submit("gone", "true\n", "-p", "3")
    assert cli(["cancel", "gone"]).code == 0
    assert drain(spool).returncode == 0
    return spool


def expected_rows(spool):
    """NAME, USER, PRI, HOST, EXIT, REASON of each job, in the order they started."""
    host = result(spool, "ok")["host"]
    return [["gone", ME, "P3", "", "-", "cancelled by " + ME],
            ["ok", ME, "P2", host, "0", ""],
            ["bad", ME, "P4", host, "3", "exit 3"],
            ["slow", ME, "P4", host, "SIGTERM", "timeout"]]


def table_of(text: str) -> tuple[list[str], list[list[str]]]:
    """The report's table from the terminal text: each cell sliced from under its column's title."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("NAME "))
    titles = lines[top].split()
    starts = [lines[top].index(" " + t) + 1 if i else 0 for i, t in enumerate(titles)]
    rows = []
    for line in lines[top + 1:]:
        if not line.strip():
            break
        rows.append([line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])])
    return titles, rows


def timeline_of(text: str) -> tuple[str, list[str]]:
    """The terminal timeline: its axis of times, and a line per job (under the rule of ticks)."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"─", "┬"})
    bars = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        bars.append(line)
    return lines[rule - 1].strip(), bars


def exit_of(job: dict) -> str:
    """The EXIT cell that --json's fields call for."""
    if job["exit_code"] is not None:
        return str(job["exit_code"])
    return signal.Signals(job["signal"]).name if job["signal"] is not None else "-"


def wide_env(**more) -> dict:
    return dict(os.environ, **{"COLUMNS": "200", "NO_COLOR": "1", **more})


# ---- the terminal and --json ------------------------------------------------------------


def test_report_table_json_and_timeline(night, cli):
    want = expected_rows(night)
    doc = cli(["report", "--json"]).json()
    assert doc["night"] is None and doc["user"] is None and doc["timed_out"] == 1
    assert doc["counts"] == {"done": 1, "failed": 2, "cancelled": 1}
    assert [[j["name"], j["user"], f"P{j['priority']}", j["host"] or "", exit_of(j), j["reason"]]
            for j in doc["jobs"]] == want

    r = cli(["report"], env=wide_env())
    assert r.code == 0 and r.err == "", r
    assert "4 jobs: 1 done, 2 failed, 1 cancelled; 1 timed out" in r.out
    titles, rows = table_of(r.out)
    assert titles == ["NAME", "USER", "PRI", "HOST", "STARTED", "TOOK", "EXIT", "REASON"]
    assert [row[:4] + row[6:] for row in rows] == want
    assert [row[4] for row in rows][0] == "" and all(re.fullmatch(r"\d\d:\d\d:\d\d", row[4]) for row in rows[1:])
    assert rows[0][5] == "" and all(re.fullmatch(r"\d+(\.\d)?s|\d+m\d\ds", row[5]) for row in rows[1:])

    # the timeline: an axis of times, a rule, then each job's bar in the same order (× for one that never ran)
    axis, bars = timeline_of(r.out)
    assert re.fullmatch(r"(\d\d:\d\d(:\d\d)? *)*", axis)
    assert [line.split()[0] for line in bars] == ["gone", "ok", "bad", "slow"]
    assert bars[0].split()[1] == "×" and all(set(line.split()[1]) == {"█"} for line in bars[1:])


def test_report_never_imports_rich_for_json(night):
    code = ("import sys, io, contextlib\nfrom onite.__main__ import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): assert main(['report', '--json']) == 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent)))
    assert proc.stdout.strip() == "[]", proc.stderr


def test_report_user(night, cli):
    doc = cli(["report", "--json", "--user", ME]).json()
    assert doc["user"] == ME and [j["name"] for j in doc["jobs"]] == ["gone", "ok", "bad", "slow"]
    doc = cli(["report", "--json", "--user", "nosuchuser"]).json()
    assert doc["user"] == "nosuchuser" and doc["jobs"] == [] and doc["counts"] == {"done": 0, "failed": 0,
                                                                                    "cancelled": 0}
    r = cli(["report", "--user", "nosuchuser"], env=wide_env())
    assert r.code == 0 and "0 jobs for user nosuchuser: 0 done" in r.out


# ---- --night ------------------------------------------------------------------------------


def local(*fields) -> datetime:
    return datetime(*fields).astimezone()


def write(spool, name, finished, started=None, user=ME, reason="", state="done"):
    """A result record with chosen times, as the driver writes it (onite.spool.write_result)."""
    from onite import spool as sp
    from onite.state import JobState, Result

    sp.write_result(sp.Spool(spool), Result(
        name=name, uid=os.geteuid(), user=user, priority=4, urgent=False, state=JobState(state), reason=reason,
        exit_code=0 if state == "done" else None, signal=None, host="h1", submitted=finished - timedelta(hours=9),
        queued=None, started=started, finished=finished, attempt=1))


def test_report_night_is_noon_to_noon(spool, cli):
    write(spool, "noon-before", local(2026, 11, 22, 11, 59), local(2026, 11, 22, 11, 0))
    write(spool, "evening", local(2026, 11, 22, 20, 5), local(2026, 11, 22, 20, 0))
    write(spool, "small-hours", local(2026, 11, 23, 3, 0), local(2026, 11, 23, 1, 0))
    write(spool, "morning", local(2026, 11, 23, 7, 0), local(2026, 11, 23, 6, 0))
    write(spool, "ran-late", local(2026, 11, 23, 13, 0), local(2026, 11, 23, 11, 0))  # started inside
    write(spool, "next-noon", local(2026, 11, 23, 12, 30), local(2026, 11, 23, 12, 0))  # the next night's
    write(spool, "cancelled", local(2026, 11, 22, 18, 0), user="bob", reason="cancelled by bob", state="cancelled")
    doc = cli(["report", "--night", "2026-11-22", "--json"]).json()
    assert doc["night"] == "2026-11-22"
    assert datetime.fromisoformat(doc["since"]) == local(2026, 11, 22, 12, 0)
    assert datetime.fromisoformat(doc["until"]) == local(2026, 11, 23, 12, 0)
    assert [j["name"] for j in doc["jobs"]] == ["cancelled", "evening", "small-hours", "morning", "ran-late"]
    bob = cli(["report", "--night", "2026-11-22", "--user", "bob", "--json"]).json()
    assert [j["name"] for j in bob["jobs"]] == ["cancelled"] and bob["counts"]["cancelled"] == 1

    r = cli(["report", "--night", "2026-11-22"], env=wide_env())
    assert r.code == 0 and "the night of 2026-11-22 (2026-11-22 12:00 to 2026-11-23 12:00)" in r.out
    _, rows = table_of(r.out)
    assert [row[0] for row in rows] == ["cancelled", "evening", "small-hours", "morning", "ran-late"]
    assert [row[4] for row in rows] == ["", "20:00:00", "01:00:00", "06:00:00", "11:00:00"]
    assert [row[5] for row in rows] == ["", "5m00s", "2h00m", "1h00m", "2h00m"]
    axis, bars = timeline_of(r.out)  # 18:00 to 13:00 on 187 columns: a tick every two hours
    assert axis.split() == ["18:00", "20:00", "22:00", "00:00", "02:00", "04:00", "06:00", "08:00", "10:00", "12:00"]
    assert [line.split()[0] for line in bars] == ["cancelled", "evening", "small-hours", "morning", "ran-late"]
    assert bars[0].split()[1] == "×" and all(set(line.split()[1]) == {"█"} for line in bars[1:])
    narrow = cli(["report", "--night", "2026-11-22"], env=wide_env(COLUMNS="80"))
    assert narrow.out.splitlines()[0] == f"onite report for {spool}: the night of 2026-11-22 (2026-11-22 12:00 to 2026-11-23 12:00)"
    starts = [len(line) - len(line.split()[1]) for line in bars]
    sizes = [len(line.split()[1]) for line in bars]
    assert starts == sorted(starts) and len(set(starts)) == 5  # later jobs further right
    assert abs(sizes[2] - 2 * sizes[3]) <= 1 and abs(sizes[4] - sizes[2]) <= 1  # 2h, 1h, 2h


@pytest.mark.parametrize("word, day", [("today", date(2026, 11, 23)), ("yesterday", date(2026, 11, 22)),
                                       ("2026-02-28", date(2026, 2, 28)), (" Yesterday ", date(2026, 11, 22))])
def test_parse_night(word, day):
    from onite.report import parse_night

    assert parse_night(word, datetime(2026, 11, 23, 8, 0).astimezone()) == day


def test_night_window_has_each_noons_own_offset(berlin_tz):
    from onite.report import night_window

    berlin = ZoneInfo("Europe/Berlin")
    winter = night_window(date(2026, 11, 22), datetime(2026, 11, 23, 8, 0).astimezone())
    assert winter == (datetime(2026, 11, 22, 12, tzinfo=berlin), datetime(2026, 11, 23, 12, tzinfo=berlin))
    assert [w.utcoffset() for w in winter] == [timedelta(hours=1)] * 2
    # the clocks go forward in the night of 28 March 2026: that night is 23 hours long, whichever ref
    for ref in (datetime(2026, 3, 1, 8).astimezone(), datetime(2026, 3, 1, 8, tzinfo=berlin)):
        start, end = night_window(date(2026, 3, 28), ref)
        assert (start.utcoffset(), end.utcoffset()) == (timedelta(hours=1), timedelta(hours=2))
        assert end - start == timedelta(hours=23) and end.astimezone(berlin).hour == 12


@pytest.mark.parametrize("args, message", [
    (["--night", "x"], "onite: bad --night 'x' — write a date such as 2026-11-22, today or yesterday\n"),
    (["--night", "2026-02-30"], "onite: bad --night '2026-02-30' — write a date such as 2026-11-22, today or "
                                "yesterday\n"),
    (["--night", "today", "--since", "12h"], "onite: --night and --since cannot be used together — use --night "
                                             "DATE for a night (noon to noon), or --since for a time up to now\n"),
    (["--user", " "], "onite: --user is empty — name a user, e.g. --user alice, or leave it out for everyone's jobs\n"),
])
def test_report_usage_errors(spool, cli, args, message):
    for extra in ([], ["--json"]):
        r = cli(["report", *args, *extra])
        assert (r.code, r.out, r.err) == (2, "", message)


# ---- the HTML page ---------------------------------------------------------------------------


class Page(HTMLParser):
    """What a reader of the page sees: the table's rows, the SVG's bars (class and tooltip), the head."""

    def __init__(self) -> None:
        super().__init__()
        self.rows, self.bars, self.meta, self.tags = [], [], {}, []
        self._cell = self._tip = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "tr" and attrs.get("class") == "job":
            self.rows.append([])
        elif tag == "td":
            self._cell = []
        elif tag == "rect" and "bar" in attrs.get("class", "").split():
            self.bars.append([attrs["class"], ""])
        elif tag == "title" and self.bars:  # a bar's tooltip (the page's own title comes before any bar)
            self._tip = []
        elif tag == "meta" and "name" in attrs:
            self.meta[attrs["name"]] = attrs["content"]

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "title" and self._tip is not None:
            self.bars[-1][1] = "".join(self._tip)
            self._tip = None

    def handle_data(self, data):
        for part in (self._cell, self._tip):
            if part is not None:
                part.append(data)


def parse_page(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_report_html_rows_and_bars(night, cli, world_tmp):
    path = world_tmp / "report.html"
    r = cli(["report", "--html", str(path)], env=wide_env())
    assert r.code == 0 and r.out.endswith(f"HTML report written to {path}\n")
    page = parse_page(path)
    assert page.meta["viewport"] == "width=device-width,initial-scale=1"
    assert [row[:4] + row[6:] for row in page.rows] == expected_rows(night)
    assert [cls for cls, _ in page.bars] == ["bar cancelled", "bar done", "bar failed", "bar failed"]
    assert [tip.split(" ")[0] for _, tip in page.bars] == ["gone", "ok", "bad", "slow"]
    assert "slow (" + ME + "): failed" in page.bars[3][1] and "timeout" in page.bars[3][1]
    text = path.read_text()
    assert "<svg" in text and "viewBox=" in text and "<script" not in text
    assert not [a for tag, a in page.tags for k in ("src", "href") if k in a]  # nothing fetched
    assert not list(world_tmp.glob(".report.html.*"))  # the temporary file was renamed


def test_report_escapes_what_users_wrote(spool, cli, world_tmp):
    evil = "<img src=x onerror=alert(1)>&[/]"
    write(spool, "odd", datetime.now().astimezone() - timedelta(hours=1), user=evil, reason=f"no: {evil}",
          state="failed")
    path = world_tmp / "r.html"
    assert cli(["report", "--html", str(path), "--user", evil, "--json"]).code == 0
    text = path.read_text()
    assert "<img" not in text
    page = parse_page(path)
    assert page.rows[0][1] == evil and page.rows[0][7] == f"no: {evil}"
    assert not [tag for tag, _ in page.tags if tag == "img"]
    r = cli(["report", "--user", evil], env=wide_env())  # and on a terminal, not taken for rich markup
    assert r.code == 0 and f"1 jobs for user {evil}:" in r.out
    assert table_of(r.out)[1][0][1::6] == [evil, f"no: {evil}"]


def test_report_html_unwritable_leaves_nothing(spool, cli, world_tmp):
    target = world_tmp / "missing" / "r.html"
    r = cli(["report", "--html", str(target)])
    assert r.code == 2 and r.err.startswith(f"onite: cannot write {target}: ") and r.err.count("\n") == 1
    assert r.out == ""  # the page is written first: no report is printed before the error
    folder = world_tmp / "ro"
    folder.mkdir()
    (folder / "r.html").write_text("the old page")
    r = cli(["report", "--html", str(folder / "r.html" / "x")])
    assert r.code == 2
    assert (folder / "r.html").read_text() == "the old page" and os.listdir(folder) == ["r.html"]


# ---- the page in a real browser ---------------------------------------------------------------


def chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="onite-chromium-") as profile:
        return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=120)


def rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


@needs_chromium
def test_report_html_in_chromium_shows_the_bars(night, cli, world_tmp):
    from onite.report import HTML_COLOUR

    page = world_tmp / "report.html"
    assert cli(["report", "--html", str(page)]).code == 0
    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    dom_text = dom.stdout.decode()
    assert "<svg" in dom_text and len(re.findall(r'<rect class="bar ', dom_text)) == 4  # parsed as SVG
    for size, block in (("1200,900", 3), ("390,844", 2)):  # a desktop, then a phone
        shot = world_tmp / f"shot-{size.replace(',', 'x')}.png"
        done = chromium(f"--screenshot={shot}", f"--window-size={size}", page.as_uri())
        assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
        image = read_png(shot.read_bytes())
        assert image[:2] == tuple(int(n) for n in size.split(","))
        for state in ("done", "failed", "cancelled"):
            assert solid_blocks(image, rgb(HTML_COLOUR[state]), block) >= 1, (size, state)


# ---- a big night ---------------------------------------------------------------------------------


def test_a_big_report_is_plain_text_laid_out_as_the_table(night, cli):
    """Past LARGE_TABLE jobs the report skips rich (minutes for 100,000 rows); the layout is the same."""
    import io

    from rich.console import Console

    from onite import render, report
    from onite import spool as sp
    from onite.cells import plain_table

    data = report.build(sp.Spool(night), datetime.now().astimezone())
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None)
    console.print(render.report_table(data.jobs, report.rows(data)))
    console.print(render.gantt_text(data.jobs, *data.span, 120))
    lines, _ = render.gantt_lines(data.jobs, *data.span, 120)
    assert [line.rstrip() for line in out.getvalue().splitlines()] == [
        *plain_table(report.COLUMNS, report.rows(data)), *lines]

    first = datetime.now().astimezone() - timedelta(hours=8)
    for i in range(render.LARGE_TABLE):
        write(night, f"many-{i:04d}", first + timedelta(seconds=10 * i + 5), first + timedelta(seconds=10 * i))
    r = cli(["report"], env=wide_env())
    assert r.code == 0 and f"{render.LARGE_TABLE + 4} jobs:" in r.out
    titles, rows = table_of(r.out)
    assert len(rows) == render.LARGE_TABLE + 4 and rows[0][:2] == ["many-0000", ME]
    axis, bars = timeline_of(r.out)
    assert len(bars) == len(rows) and [line.split()[0] for line in bars] == [row[0] for row in rows]
