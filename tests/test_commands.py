"""onite.app: the work of commands, called in-process (the CLI's own tests run it as a user does)."""

import os
import shlex
import sys

import pytest

from conftest import run_cli
from onite.app import common, crontab, run, submit
from onite.core.errors import InvalidInput, SpoolError
from onite.spool.scan import is_live


@pytest.mark.parametrize("argv0", ["-m", "-c", "/usr/lib/python3/site-packages/onite/__main__.py"])
def test_command_prefix_of_python_m_onite(monkeypatch, argv0):
    monkeypatch.setattr(sys, "argv", [argv0, "cron"])
    assert crontab.command_prefix() == f"{shlex.quote(sys.executable)} -m onite"


def test_command_prefix_is_an_absolute_path_cron_can_run(monkeypatch, tmp_path):
    script = tmp_path / "my bin" / "onite"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(script.parent))
    monkeypatch.setattr(sys, "argv", ["onite", "cron"])
    assert crontab.command_prefix() == shlex.quote(str(script))  # found on PATH, quoted for the shell
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [os.path.join("my bin", "onite"), "cron"])
    assert crontab.command_prefix() == shlex.quote(str(script))  # a relative path made absolute
    monkeypatch.setattr(sys, "argv", ["onite-not-on-path", "cron"])
    assert crontab.command_prefix() == "onite-not-on-path"
    monkeypatch.setattr(sys, "argv", [""])
    assert crontab.command_prefix() == shlex.quote(str(script))  # no argv[0]: "onite", looked up


def test_cron_refuses_an_onite_whose_own_path_no_crontab_can_hold(monkeypatch, tmp_path, spool):
    """crontab(5): a % in a command ends it (the rest goes to its stdin). An onite installed under a folder
    with a % was written into the lines as it is, so cron would run the part before the % and never drain;
    the spool's path was refused for the same reason, onite's own path was not."""
    script = tmp_path / "onite%2" / "onite"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "cron"])
    with pytest.raises(InvalidInput, match=r"the path of this onite .*onite%2/onite cannot be written in a crontab"):
        crontab.cron_lines(str(spool))


def test_install_problem_of_a_command_not_on_path_ends():
    """``command_prefix`` gives a bare name when onite is not on PATH: its folders end at ``.``, not in a loop."""
    problem = crontab.install_problem("onite-not-on-path")
    assert problem is None or isinstance(problem, str)


def test_cron_lines_name_the_spool_and_this_onite(spool, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["-m"])
    target = common.open_spool(str(spool))
    lines = crontab.cron_lines(str(spool)).splitlines()
    assert lines[0] == f"# onite: drain the spool {spool} at the times of `schedule` in its onite.toml"
    assert lines[2:] == crontab.crontab_entries(spool, target.config.schedule, f"{shlex.quote(sys.executable)} -m onite")


def test_uniqname_avoids_live_and_kept_names(spool):
    assert run_cli(["submit", "taken"], stdin=b"true\n").code == 0
    target = common.open_spool(str(spool))
    me = common.me()
    name = submit.uniqname(target, "taken", me)
    assert name.startswith("taken-") and not is_live(target, common.key_for(name))
    with pytest.raises(InvalidInput):
        submit.uniqname(target, "../x", me)


def test_host_claims_checks_the_host_name_before_the_spool(spool, world_tmp):
    with pytest.raises(InvalidInput, match="host name"):
        run.host_claims(str(world_tmp / "no-spool-here"), "../x")
    with pytest.raises(SpoolError):
        run.host_claims(str(world_tmp / "no-spool-here"), "deadhost")
    target, claims = run.host_claims(str(spool), "deadhost")
    assert target.root == spool and claims == []
