"""Make docs/img/report-terminal.svg and docs/img/report-html.png from a real spool, drained now.

    .venv/bin/python docs/img/make_images.py        # as root: some jobs are nobody's; needs /usr/bin/chromium

A few jobs are spooled into a fresh spool in a temporary folder (one succeeds,
one exits 3 after a retry, one times out, one is cancelled, one fails on its
dependency, one is held), drained by ``onite run --slots 2``, then the report
is recorded from a rich Console on a (pretended) terminal (``save_svg``) and
the HTML page photographed by headless Chromium.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHROMIUM = "/usr/bin/chromium"
JOBS = [  # name, job text, options, user (None: whoever runs this script)
    ("backup-home", "sleep 6\n", ["-p", "2"], None),
    ("build-docs", "sleep 3\n", ["-p", "3"], "nobody"),
    ("nightly-report", "sleep 1; echo 'loading sales.csv'; echo 'error: sales.csv: no such file' >&2; exit 3\n",
     ["-p", "3", "--after", "build-docs", "--retries", "1"], "nobody"),
    ("mail-summary", "true\n", ["-p", "4", "--after", "nightly-report"], "nobody"),
    ("reindex", "echo 'reindexing 1200 documents'; sleep 30\n", ["-p", "4", "--timeout", "4s"], None),
    ("thumbnails", "sleep 4\n", ["-p", "5"], None),
    ("old-cleanup", "true\n", ["-p", "5"], None),
    ("rebuild-index", "true\n", ["-p", "5", "--hold"], None),
]


def onite(spool: Path, *args: str, stdin: str = "", user: str | None = None) -> None:
    """onite's command line in a forked child, as ``user`` when we are root (as tests/conftest.py does:
    ``nobody`` may not be able to start the interpreter, which can live under root's home)."""
    from onite.__main__ import main

    read, write = os.pipe()
    os.write(write, stdin.encode())  # a job text fits in the pipe
    os.close(write)
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.dup2(read, 0)
            sys.stdin = open(0, closefd=False)
            if user is not None and os.geteuid() == 0:
                entry = pwd.getpwnam(user)
                os.setgroups([])
                os.setgid(entry.pw_gid)
                os.setuid(entry.pw_uid)
            os.chdir(spool.parent)  # the job's directory: one its owner may enter
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
                code = main(["--spool", str(spool), *args])
        except BaseException:  # noqa: BLE001 - say what went wrong, never return into the parent's code
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"onite {' '.join(args)} failed")


def warm_up() -> None:
    """Import what onite imports lazily before any fork drops to ``nobody``."""
    import importlib
    import pkgutil

    import onite
    from onite.__main__ import main

    for info in pkgutil.walk_packages(onite.__path__, "onite."):
        importlib.import_module(info.name)
    for name in ("grp", "fcntl", "shlex", "json", "select", "signal", "resource", "tomllib", "croniter"):
        importlib.import_module(name)

    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        for argv in (["submit", "--help"], ["cancel", "--help"], ["run", "--help"]):
            main(argv)


def main() -> None:
    sys.path.insert(0, str(REPO))
    from rich.console import Console

    from onite.app import report
    from onite.cli.render import print_report
    from onite.cli.reportpage import write_html
    from onite.core.clock import SYSTEM
    from onite.spool.paths import SpoolDir

    warm_up()
    folder = Path(tempfile.mkdtemp(prefix="onite-images-", dir="/tmp"))
    os.chmod(folder, 0o755)
    spool = folder / "spool"
    try:
        onite(spool, "init")
        for name, text, options, user in JOBS:
            onite(spool, "submit", name, *options, stdin=text, user=user)
        onite(spool, "cancel", "old-cleanup")
        config = spool / "onite.toml"
        config.write_text(config.read_text().replace('retry_delay = "30s"', 'retry_delay = "1s"'))
        subprocess.run([sys.executable, "-m", "onite", "run", "--slots", "2"], check=True, capture_output=True,
                       env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO)))
        data = report.build(SpoolDir(spool), SYSTEM.now(), None)
        data.spool = "/var/spool/onite"  # the page shows where the spool is: not this temporary one

        console = Console(record=True, width=110, highlight=False, file=open(os.devnull, "w"), force_terminal=True,
                          no_color=False)
        print_report(console, data, plain=False)
        console.save_svg(str(HERE / "report-terminal.svg"), title="onite report")

        page = folder / "report.html"
        write_html(page, data)
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking", "--disable-component-update",
                            "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={HERE / 'report-html.png'}",
                            "--window-size=1000,820", page.as_uri()], check=True, capture_output=True, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for made in ("report-terminal.svg", "report-html.png"):
        print(f"{HERE / made}: {(HERE / made).stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
