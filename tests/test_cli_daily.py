"""What a new admin and the users of a shared machine meet first: the command line's help, a bad onite.toml, small
mistakes at submit, who started a driver, and a crontab entry that must not depend on a checkout. The real
``python -m onite`` in a subprocess, against a spool of its own."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, drain, needs_root, run_cli, set_config


def onite(spool: Path, *args: str, stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess:
    """``python -m onite ARGS`` on ``spool``; stdin, stdout and stderr are no terminal."""
    environ = dict(os.environ, ONITE_SPOOL=str(spool), COLUMNS="100", **env)
    return subprocess.run([sys.executable, "-m", "onite", *args], input=stdin, capture_output=True, env=environ,
                          timeout=120, cwd="/tmp")


def test_help_lists_everyday_commands_first_each_with_its_first_sentence_whole(spool):
    done = onite(spool, "--help")
    assert done.returncode == 0
    text = done.stdout.decode()
    listed = re.findall(r"^  ([a-z]+)  ", text.split("Commands:")[1], re.MULTILINE)
    assert listed[:6] == ["submit", "list", "status", "cancel", "output", "wait"], listed
    assert listed.index("report") < listed.index("init") < listed.index("run") < listed.index("daemon")
    assert "..." not in text.split("Commands:")[1]  # click cuts a description at 45 columns with "..."
    assert "job text on stdin, with your environment, directory and" in re.sub(r"\s+", " ", text)


@pytest.mark.parametrize(("command", "usage"), [
    ("submit", "Usage: onite submit [OPTIONS] NAME [-- COMMAND [ARGS]...]"),
    ("hold", "Usage: onite hold [OPTIONS] NAME..."),
    ("wait", "Usage: onite wait [OPTIONS] [NAME]..."),
    ("find", "Usage: onite find [OPTIONS] NAME"),
])
def test_usage_names_arguments_as_their_help_does(spool, command, usage):
    text = onite(spool, command, "--help").stdout.decode()
    assert text.splitlines()[0] == usage
    assert not re.search(r"[{}]|<str>|<list", text), text


def test_every_duration_option_says_a_bare_number_is_seconds(spool):
    for args in (["submit", "--help"], ["wait", "--help"], ["recur", "add", "--help"]):
        text = re.sub(r"\s+", " ", onite(spool, *args).stdout.decode())
        assert text.count("(a bare number is seconds)") == (3 if args[0] == "recur" else 1), (args, text)
    done = onite(spool, "submit", "x", "--timeout", "ten", stdin=b"true\n")
    assert done.returncode == 2 and "a bare number is seconds" in done.stderr.decode()
    assert onite(spool, "submit", "x", "--timeout", "10", stdin=b"true\n").returncode == 0


def test_a_job_of_only_white_space_is_refused_in_one_line(spool):
    done = onite(spool, "submit", "blank", stdin=b" \n\t\n")
    assert done.returncode == 2 and done.stderr.decode().count("\n") == 1, done
    assert done.stderr.decode().startswith("onite: the job text on stdin is only white space — ")
    assert not (spool / "jobs" / "P4" / "blank").exists()


def test_a_time_of_day_onite_cannot_read_is_answered_with_the_forms_it_can(spool):
    for when in ("tomorrow 3am", "3am"):
        done = onite(spool, "submit", "late", "--at", when, stdin=b"true\n")
        err = done.stderr.decode()
        assert done.returncode == 2 and err.count("\n") == 1, err
        assert f"--at '{when}': expected" in err and "HH:MM" in err and "'tomorrow HH:MM'" in err and "+2h" in err, err


def test_submit_lines_prints_each_name_on_its_own_line(spool):
    done = onite(spool, "submit", "batch", "--lines", stdin=b"true\n\ntrue\ntrue\n")
    assert done.returncode == 0 and done.stdout == b"batch-00001\nbatch-00002\nbatch-00003\n"
    assert done.stderr.decode().startswith("spooled 3 jobs, batch-00001 to batch-00003 (P4)")


@pytest.mark.skipif(not ROOT, reason="needs root: the onite.toml is root's, read by another user (nobody)")
def test_a_bad_key_in_onite_toml_stops_the_driver_not_a_user_reading_or_withdrawing(spool):
    assert onite(spool, "submit", "done-before", stdin=b"true\n").returncode == 0
    drain(spool)
    assert onite(spool, "submit", "waiting", stdin=b"true\n").returncode == 0
    os.chmod(spool.parent, 0o755)
    for name in ("mine", "mine2"):
        assert run_cli(["submit", name], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    with open(spool / "onite.toml", "a") as config:
        config.write("slot = 2\n")  # the admin's typo for slots
    for args in (["list"], ["status"], ["find", "root:waiting"], ["output", "done-before"],
                 ["wait", "root:done-before"], ["report"], ["list", "--json"]):
        for user in ("root", "nobody") if args[0] != "output" else ("root",):  # root's output is root's to read
            if user == "root":
                done = onite(spool, *args)
                code, err = done.returncode, done.stderr.decode()
            else:  # in a forked child: this interpreter may be one that only root can run
                done = run_cli(args, user=user, cwd="/tmp")
                code, err = done.code, done.err
            assert code == 0, (args, user, err)
            assert err.count("\n") == 1 and err.startswith("onite: warning: ") and "unknown key 'slot'" in err, err
            assert "until it is fixed a new drain refuses the file and a running daemon keeps its previous" in err
            assert ("ask root" in err) == (user == "nobody"), err
    assert json.loads(onite(spool, "list", "--json").stdout)["jobs"][0]["name"] == "waiting"
    # a user takes their own job out of the queue, or holds it, despite the admin's typo
    for args, said in ((["hold", "mine"], "mine: held"), (["release", "mine"], "mine: released"),
                       (["cancel", "mine2"], "mine2")):
        done = run_cli(args, user="nobody", cwd="/tmp")
        assert done.code == 0 and said in done.out, (args, done)
        assert done.err.startswith("onite: warning: ") and "unknown key 'slot'" in done.err, (args, done)
    assert run_cli(["find", "nobody:mine2"], user="nobody", cwd="/tmp").code != 0
    for args in (["run", "-q"], ["cron", "--install"], ["submit", "more"], ["restart", "done-before"]):
        done = onite(spool, *args, stdin=b"true\n")
        assert done.returncode == 2 and done.stderr.decode() == (
            f"onite: {spool}/onite.toml: unknown key 'slot' — did you mean 'slots'?\n"), (args, done)
    assert not (spool / "jobsdone" / "waiting@result").exists()


@needs_root
def test_a_bare_name_of_another_users_job_says_whose_it_is(spool):
    """``onite cancel x`` by root, where only nobody had an x, said ``no job 'x' is queued or running``, as if no x
    were spooled; likewise hold, release, edit, restart, output, wait and --after. Each says whose x there is: to a
    user, that it is not theirs; to one who may act on it (root; anyone for wait and --after; cancel with
    own_only = false), the keys it may have meant."""
    for name, user in (("x", "nobody"), ("x", "daemon"), ("s", "daemon"), ("r", None), ("s", None)):
        assert run_cli(["submit", name], stdin=b"true\n", user=user, cwd="/tmp").code == 0
    for args in (["cancel", "r"], ["hold", "r"], ["release", "r"], ["edit", "r", "--timeout", "1h"],
                 ["restart", "r"], ["output", "r"], ["output", "-f", "r"]):
        r = run_cli(args, user="nobody", cwd="/tmp")
        assert (r.code, r.err) == (1, "onite: no job 'r' of yours — root:r is root's job, not yours\n"), (args, r)
    r = run_cli(["wait", "r"], user="nobody", cwd="/tmp")  # anyone may wait for root:r
    assert (r.code, r.err) == (1, "onite: no job 'r' of yours — did you mean root:r?\n"), r
    r = run_cli(["wait", "r", "y"], user="nobody", cwd="/tmp")  # several names: each namesake said
    assert (r.code, r.err) == (1, "onite: no jobs 'r', 'y' are queued, running or finished — did you mean root:r?\n"), r
    r = run_cli(["submit", "late", "--after", "r"], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (2, "onite: no job 'r' of yours — did you mean root:r?\n"), r
    r = run_cli(["cancel", "s"], user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (1, "onite: no job 's' of yours — daemon:s and root:s are other users' jobs, "
                                  "not yours\n"), r
    for args in (["cancel", "x"], ["hold", "x"], ["output", "x"], ["restart", "x"]):
        done = onite(spool, *args)
        assert (done.returncode, done.stderr.decode()) == (
            1, "onite: no job 'x' of yours — did you mean daemon:x or nobody:x?\n"), (args, done)
    done = onite(spool, "wait", "y")  # no one's: said as before
    assert (done.returncode, done.stderr.decode()) == (
        1, "onite: no job 'y' is queued, running or finished — see onite list --all\n"), done
    assert run_cli(["hold", "x"], user="nobody", cwd="/tmp").out == "x: held\n"  # their own x: no hint
    set_config(spool, own_only=False)
    r = run_cli(["cancel", "r"], user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (1, "onite: no job 'r' of yours — did you mean root:r?\n"), r


def test_a_driver_a_shell_started_shows_as_started_by_hand(spool):
    """``sudo onite run > night.log 2>&1 &`` from a login: no terminal on its streams, a shell its parent."""
    assert onite(spool, "submit", "one", stdin=b"true\n").returncode == 0
    done = subprocess.run(["bash", "-c", f'"{sys.executable}" -m onite run -q; true'], capture_output=True,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, ONITE_SPOOL=str(spool)), timeout=120)
    assert done.returncode == 0, done
    last = json.loads(onite(spool, "status", "--json").stdout)["last_driver"]
    assert last["started_by"] == "hand", last


@pytest.fixture
def crontab(world_tmp):
    """A ``crontab`` command that keeps the table in a file; the PATH that finds it first."""
    bindir, table = world_tmp / "bin", world_tmp / "crontab.txt"
    bindir.mkdir()
    (bindir / "crontab").write_text(f"#!/bin/sh\ncase \"$1\" in -l) [ -f {table} ] && cat {table} || "
                                    f"{{ echo \"no crontab for $(id -un)\" >&2; exit 1; }} ;; -) cat > {table} ;; esac\n")
    (bindir / "crontab").chmod(0o755)
    return table, f"{bindir}{os.pathsep}{os.environ['PATH']}"


def test_cron_install_refuses_an_onite_that_lives_in_a_checkout(spool, crontab):
    """The tests run onite from a checkout (its .venv, an editable install): the README's first command as an
    admin would run it. Root's crontab must not start the night from there."""
    table, path = crontab
    set_config(spool, schedule=["0 20 * * *"])
    done = onite(spool, "cron", "--install", PATH=path)
    err = done.stderr.decode()
    assert done.returncode == 3 and err.count("\n") == 1, err
    assert re.match(r"onite: (other users cannot run \S+|\S+ is in the (checkout|home directory) \S+)", err), err
    assert "/usr/bin/python3 -m venv /opt/onite/venv" in err and "/usr/local/bin/onite" in err and "--force" in err
    assert not table.exists()
    done = onite(spool, "cron", "--install", "--force", PATH=path)
    assert done.returncode == 0 and f"-m onite run --quiet --spool {spool}" in table.read_text(), done
