"""``onite edit NAME``: a queued job changed in place (onite.app.edit, onite.spool.edits), keeping its place."""

import os
import subprocess
import sys
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import REPO, drain, log_lines, needs_root, result, run_cli, start_driver, wait_for
from onite.core.jobfile import decode


def submit(name, *options, body=b"true\n", user=None):
    r = run_cli(["submit", name, *options], stdin=body, user=user, cwd="/tmp")
    assert r.code == 0, r


def order(cli):
    return [(row["name"], row["priority"]) for row in cli(["list", "--json"]).json()["jobs"]]


def ran(spool):
    """The keys of the jobs started, in order."""
    return [line.split()[3] for line in log_lines(spool) if line.split()[2] == "start"]


def test_an_edit_of_limits_keeps_the_job_in_its_place_and_the_driver_runs_it_edited(spool, cli):
    for name in ("a", "b", "c"):
        submit(name, "--mem", "10M")
    before = order(cli)
    r = cli(["edit", "b", "--timeout", "2h", "--retries", "2", "--mem", "20M", "--cpus", "1", "--after", "a"])
    assert (r.code, r.out) == (0, "b: changed; it keeps its place\n"), r
    assert order(cli) == before == [("a", 4), ("b", 4), ("c", 4)]
    limits = {j["name"]: (j["mem"], j["cpus"], j["timeout"]) for j in cli(["list", "--json"]).json()["jobs"]}
    assert limits == {"a": (10, None, None), "b": (20, 1, 7200.0), "c": (10, None, None)}  # no command showed them
    edits = sorted((spool / "edit").iterdir())
    for again in (["--timeout", "2h", "--mem", "20M"], ["-p", "4"]):  # it said "changed", and wrote an edit
        r = cli(["edit", "b", *again])
        assert (r.code, r.out) == (0, "b: unchanged (it is so already)\n"), r
    assert sorted((spool / "edit").iterdir()) == edits and order(cli) == before
    r = cli(["edit", "c", "--at", "+3h"])
    assert r.code == 0 and "not before" in cli(["list"]).out.splitlines()[3], cli(["list"]).out
    assert cli(["edit", "c", "--at", "now"]).code == 0
    assert drain(spool).returncode == 0
    assert ran(spool) == ["root:a", "root:b", "root:c"]
    assert (result(spool, "b")["mem"], result(spool, "a")["mem"]) == (20, 10)
    job = decode((spool / "jobsdone" / "root:b").read_bytes())  # what a restart reruns: the job as edited
    assert (job.timeout.total_seconds(), job.retries, job.mem, job.cpus, job.after) == (7200, 2, 20, 1, ("root:a",))
    assert not list((spool / "edit").iterdir())  # the driver took them


@pytest.mark.parametrize("filed", [False, True])
def test_a_job_edited_then_cancelled_while_queued_restarts_as_edited(spool, cli, filed):
    """Its edits were never taken by a driver (it was never claimed): a restart, before or after a driver filed
    the cancel, reran the job as first spooled, its edited time limit and retries lost."""
    submit("e")
    assert cli(["edit", "e", "--timeout", "7m", "--retries", "2"]).code == 0
    assert cli(["cancel", "e"]).code == 0
    if filed:
        assert drain(spool).returncode == 0
    assert cli(["restart", "e", "-q"]).code == 0
    job = decode((spool / "jobs" / "P4" / "root:e").read_bytes())
    assert (job.timeout.total_seconds(), job.retries) == (420, 2)


def test_a_new_priority_moves_the_job_to_the_end_of_its_new_folder(spool, cli):
    submit("x", "-p", "2")
    for name in ("a", "b"):
        submit(name)
    r = cli(["edit", "b", "-p", "2", "--timeout", "1h"])
    assert (r.code, r.out) == (0, "b: changed; moved to P2, after the jobs there\n"), r
    assert order(cli) == [("x", 2), ("b", 2), ("a", 4)]
    assert decode(next((spool / "jobs" / "P2").glob("root:b")).read_bytes()).timeout.total_seconds() == 3600
    assert not list((spool / "jobs" / "P4").glob(".*")) and not list((spool / "jobs" / "P2").glob(".*"))


@pytest.mark.parametrize("argv, code, message", [
    (["edit", "a"], 2, "onite: nothing to change — give one of --timeout, -p, --retries, --mem, --cpus, --at, "
                       "--after\n"),
    (["edit", "a", "--timeout", "soon"], 2, "onite: --timeout 'soon': expected a duration such as 90s, 45m, 2h, "
                                            "1h30m or 1d (a bare number is seconds)\n"),
    (["edit", "a", "-p", "9"], 2, "onite: -p '9': expected a priority from 1 (first) to 7 (last)\n"),
    (["edit", "a", "--after", "a"], 2, "onite: job 'a' cannot wait for itself — drop that --after\n"),
    (["edit", "nosuch", "--retries", "1"], 1, "onite: no queued job 'nosuch' — see onite list\n"),
])
def test_edit_errors_change_nothing(spool, cli, argv, code, message):
    submit("a")
    r = cli(argv)
    assert (r.code, r.err) == (code, message), r
    assert not list((spool / "edit").iterdir()) and order(cli) == [("a", 4)]


def test_a_running_or_finished_job_cannot_be_edited(spool, cli, workdir):
    gate = workdir / "gate"
    gate.touch()
    submit("done-one")
    submit("runs", body=f"touch {workdir}/on; while [ -e {gate} ]; do sleep 0.05; done\n".encode())
    driver = start_driver(spool)
    try:
        wait_for(lambda: (workdir / "on").exists(), what="the job to start")
        r = cli(["edit", "runs", "--timeout", "1h"])
        assert (r.code, r.err) == (3, "onite: job 'runs' is running: a running job cannot be edited — cancel it, "
                                      "or change it for its next run: onite restart runs … once it has finished\n"), r
    finally:
        gate.unlink()
        driver.communicate(timeout=60)
    r = cli(["edit", "done-one", "--timeout", "1h"])
    assert (r.code, r.err) == (3, "onite: job 'done-one' has finished: it cannot be edited — spool it again: "
                                  "onite restart done-one\n"), r


@needs_root
def test_only_its_owner_or_root_edits_a_job(spool, cli):
    submit("mine")
    submit("theirs", user="nobody")
    r = run_cli(["edit", "root:mine", "--timeout", "1h"], user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (3, "onite: job 'root:mine' belongs to root — only its owner or root may edit it\n"), r
    r = run_cli(["edit", "mine", "--timeout", "1h"], user="nobody", cwd="/tmp")  # NAME is the caller's own job
    assert (r.code, r.err) == (1, "onite: no job 'mine' of yours — root:mine is root's job, not yours\n"), r
    assert cli(["edit", "nobody:theirs", "--mem", "20M"]).code == 0  # root's edit of nobody's job is nobody's
    [marker] = list((spool / "edit").iterdir())
    assert marker.stat().st_uid == os.stat(next((spool / "jobs").rglob("nobody:theirs"))).st_uid
    # a file of another user's in edit/ changes nothing: the driver honours only the owner's and root's
    assert run_cli(["edit", "theirs", "--mem", "30M"], user="nobody", cwd="/tmp").code == 0
    planted = spool / "edit" / "root:mine@planted"
    planted.write_bytes(next((spool / "edit").glob("nobody:theirs@*")).read_bytes()
                        .replace(b"nobody:theirs", b"root:mine"))
    os.chown(planted, 65534, 65534)
    assert drain(spool).returncode == 0
    assert (result(spool, "theirs")["mem"], result(spool, "mine")["mem"]) == (30, None)


def test_an_edit_racing_the_drivers_claim_applies_before_it_or_not_at_all(spool, workdir):
    """Each edit either applies to the run (its result says 20M) or fails as ``started just now`` with nothing
    changed (10M): never half; no job runs twice or is lost, however the edits and the claims interleave."""
    names = [f"j{i:02d}" for i in range(24)]
    api_env = dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-m", "onite", "submit", "j", "--lines", "--mem", "10M", "-q"],
                   input="\n".join("sleep 0.2" for _ in names).encode() + b"\n", env=api_env, check=True)
    names = [f"j-{i:05d}" for i in range(1, len(names) + 1)]
    driver = start_driver(spool, "-q")
    outcomes = {}
    try:
        for i, name in enumerate(reversed(names)):  # the last ones are still queued when their edit comes
            extra = ["-p", "3"] if i % 3 == 0 else []
            r = subprocess.run([sys.executable, "-m", "onite", "edit", name, "--mem", "20M", *extra],
                               env=api_env, capture_output=True, text=True)
            assert r.returncode in (0, 3), r
            outcomes[name] = r.returncode == 0
            if r.returncode == 3:
                # started just now: nothing changed, or it cannot be edited any more (claimed before it was read)
                assert r.stderr.startswith(f"onite: job '{name}' started just now: ") or \
                    "running" in r.stderr or "finished" in r.stderr, r.stderr
    finally:
        driver.communicate(timeout=120)
    assert sorted(ran(spool)) == sorted(f"root:{name}" for name in names)  # each ran once
    for name in names:
        assert result(spool, name)["mem"] == (20 if outcomes[name] else 10), (name, outcomes[name])
    assert any(outcomes.values())  # some edits came while their jobs were queued


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400))
def test_whatever_an_edit_file_holds_the_job_reads_as_its_own_or_edited(tmp_path, data):
    """An edit is read back as a job file (onite.core.jobfile.decode): a file that is none is no edit."""
    from onite.core.job import Job
    from onite.spool.edits import edited
    from onite.spool.scan import Marker

    job = Job(name="root:a", priority=4, submitted=datetime.now().astimezone(), host="h", umask=0o22, cwd=b"/",
              env={}, body=b"true\n")
    path = tmp_path / "root:a@x"
    path.write_bytes(data)
    got, edit = edited(job, [Marker(path, 0, 0)], 1 << 20)
    assert (got, edit) == (job, None) or got.name == "root:a"


@needs_root
@pytest.mark.attack
def test_a_forgery_at_a_key_is_never_edited_and_an_edit_of_another_user_never_counts(spool, cli):
    """A file nobody put at root's key (a forgery) is no job of root's: ``edit`` finds none there; an edit
    nobody writes for root's job is not root's nor the job's owner's, so the driver never honours it."""
    submit("real")
    real = next((spool / "jobs").rglob("root:real"))
    forged = spool / "jobs" / "P2" / "root:fake"
    forged.write_bytes(real.read_bytes().replace(b"name: root:real", b"name: root:fake"))
    os.chown(forged, 65534, 65534)
    r = cli(["edit", "fake", "--timeout", "1h"])
    assert (r.code, r.err) == (1, "onite: no queued job 'fake' — see onite list\n"), r
    assert not list((spool / "edit").iterdir())
    assert cli(["edit", "real", "--mem", "20M"]).code == 0
    [mine] = list((spool / "edit").iterdir())
    planted = spool / "edit" / "root:real@planted"
    planted.write_bytes(mine.read_bytes().replace(b"mem: 20", b"mem: 30"))
    os.chown(planted, 65534, 65534)
    os.utime(planted)  # the latest, were it counted
    assert drain(spool).returncode == 0
    assert result(spool, "real")["mem"] == 20
    assert not (spool / "jobsdone" / "root:fake@result").exists()


# ---- a dependency cycle: no job of it could ever run -----------------------------------------------------------

@given(st.dictionaries(st.sampled_from("abcdef"), st.lists(st.sampled_from("abcdefg"), max_size=3), max_size=6),
       st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=3))
def test_a_cycle_is_found_exactly_when_the_job_can_reach_itself(graph, after):
    """dependency_cycle follows what each queued job waits for: it answers a path of real edges back to the
    job, a shortest one, whenever there is one, and None when there is none."""
    from onite.core.queue import dependency_cycle

    graph = {key: deps for key, deps in graph.items() if key != "z"}
    found = dependency_cycle("z", after, lambda key: graph.get(key, ()))
    edges = {**graph, "z": after}
    reach, todo = set(), list(after)
    while todo:
        key = todo.pop()
        if key not in reach:
            reach.add(key)
            todo.extend(edges.get(key, ()) if key != "z" else ())
    assert (found is not None) == ("z" in reach)
    if found is not None:
        assert found[0] == found[-1] == "z" and "z" not in found[1:-1]
        assert all(b in edges.get(a, ()) for a, b in zip(found, found[1:]))


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.lists(st.sampled_from("abcdefghij"), max_size=3), max_size=8))
def test_cycles_names_exactly_the_jobs_that_reach_themselves(graph):
    """What the driver fails at a drain's end: each job that waits for itself through the others, with a cycle of
    real edges through it; never one that only waits for a cycle, or for a job not in the graph."""
    from onite.core.queue import cycles

    def reaches_itself(start):
        seen, todo = set(), [dep for dep in graph[start] if dep in graph]
        while todo:
            key = todo.pop()
            if key == start:
                return True
            if key not in seen:
                seen.add(key)
                todo.extend(dep for dep in graph[key] if dep in graph)
        return False

    found = cycles(graph)
    assert set(found) == {key for key in graph if reaches_itself(key)}
    for key, cycle in found.items():
        assert cycle[0] == cycle[-1] == key and all(b in graph[a] for a, b in zip(cycle, cycle[1:]))


def test_an_edit_a_submit_or_a_restart_that_would_close_a_dependency_cycle_is_refused(spool, cli):
    submit("first")
    assert drain(spool).returncode == 0  # `first` has finished: a job may name it
    submit("second", "--after", "first")
    submit("third", "--after", "second")
    before = cli(["list", "--json"]).json()
    cycle = "first → third → second → first"  # first would wait for third, which waits for second …
    r = cli(["edit", "second", "--after", "third"])
    assert (r.code, r.err) == (2, "onite: job 'second' would wait for itself: second → third → second, and none of "
                                  "them would ever run — drop that --after, or first change what the others wait "
                                  "for (onite edit NAME --after …)\n"), r
    for argv in (["submit", "first", "--after", "third"], ["restart", "first", "--after", "third"]):
        r = cli(argv, stdin=b"true\n")
        assert r.code == 2 and f"would wait for itself: {cycle}," in r.err, (argv, r)
    r = cli(["restart", "first", "--after", "first"])  # its new run would be the `first` it waits for
    assert (r.code, r.err.partition(" — ")[0]) == (2, "onite: restarting 'first': job 'first' cannot wait for itself"), r
    assert cli(["list", "--json"]).json()["jobs"] == before["jobs"]  # nothing spooled, nothing changed
    for argv in (["restart", "first", "--after", "third", "--name", "other"], ["restart", "first", "--after", "third",
                 "--unique"], ["submit", "first", "--after", "third", "--unique"], ["edit", "third", "--after", "first"]):
        assert cli(argv, stdin=b"true\n").code == 0, argv  # under another name, or a chain: no cycle


@needs_root
@pytest.mark.attack
def test_the_cycle_check_steps_over_what_is_not_a_job_file(spool, cli):
    """A queued file of another user that is no job (damaged, a hard link) is not followed: root's submit after
    it is judged as before, never stopped by it."""
    from conftest import nobody

    bad = spool / "jobs" / "P4" / "nobody:bad"
    bad.write_bytes(b"\x00not a job\n")
    os.chown(bad, nobody().pw_uid, nobody().pw_gid)
    r = cli(["submit", "after-bad", "--after", "nobody:bad"], stdin=b"true\n")
    assert r.code == 0, r
    r = cli(["edit", "nobody:bad", "-p", "2"])  # said as a refusal of this edit, not as a submit's error
    assert (r.code, r.err) == (3, "onite: job 'nobody:bad' cannot be edited: not an onite job file (no 'onite-job:' "
                                  "first line) — cancel it and spool it anew\n"), r


@needs_root
@pytest.mark.attack
def test_a_cycle_through_another_users_job_fails_at_the_drain_instead_of_waiting_for_ever(spool, cli):
    """nobody cannot read root's job, so nobody's edit that closes a cycle through it is not refused; the driver,
    once it has nothing else to start, fails the jobs of the cycle, saying so, and what waits for them fails next."""
    submit("theirs", user="nobody")
    assert cli(["submit", "mine", "--after", "nobody:theirs"], stdin=b"true\n").code == 0
    assert cli(["submit", "later", "--after", "mine"], stdin=b"true\n").code == 0
    assert cli(["submit", "free"], stdin=b"true\n").code == 0
    assert run_cli(["edit", "theirs", "--after", "root:mine"], user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert result(spool, "free")["state"] == "done"
    assert result(spool, "mine")["reason"] == ("dependency cycle: mine → nobody:theirs → mine (none of them could "
                                               "ever run)")
    assert result(spool, "nobody:theirs")["reason"] == ("dependency cycle: theirs → root:mine → theirs (none of them "
                                                        "could ever run)")
    assert (result(spool, "later")["state"], result(spool, "later")["reason"]) == ("failed", "dependency mine failed")
    assert not list((spool / "jobs").rglob("*:*"))  # nothing left queued for ever


@needs_root
def test_a_held_job_on_a_cycle_keeps_the_cycle_waiting_until_it_is_released(spool, cli):
    """A held job is left out of the drain's cycle search: the jobs of its cycle stay queued, unfailed, while it
    is held (its owner may yet change what it waits for); once released, the next drain fails them."""
    submit("theirs", user="nobody")
    assert cli(["submit", "mine", "--after", "nobody:theirs"], stdin=b"true\n").code == 0
    assert run_cli(["edit", "theirs", "--after", "root:mine"], user="nobody", cwd="/tmp").code == 0
    assert run_cli(["hold", "theirs"], user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert not list((spool / "jobsdone").glob("*@result"))
    assert sorted(row["name"] for row in cli(["list", "--all", "--json"]).json()["jobs"]) == ["mine", "nobody:theirs"]
    assert run_cli(["release", "theirs"], user="nobody", cwd="/tmp").code == 0
    assert drain(spool).returncode == 0
    assert result(spool, "mine")["reason"].startswith("dependency cycle: mine → nobody:theirs → mine")
    assert result(spool, "nobody:theirs")["reason"].startswith("dependency cycle: theirs → root:mine → theirs")


def test_the_cycle_check_follows_at_most_cycle_looks_jobs_and_the_driver_fails_a_longer_cycle(spool, cli,
                                                                                               monkeypatch):
    """``submit``, ``edit`` and ``restart`` follow at most CYCLE_LOOKS queued jobs: a cycle they can see whole is
    refused; one longer than that is let through, and the driver fails it at the drain's end. (CYCLE_LOOKS is 20
    here, in the commands this process forks: 200 made the chain cost 20 s of submits.)"""
    from onite.app import submit as submitting

    CYCLE_LOOKS = 20
    monkeypatch.setattr(submitting, "CYCLE_LOOKS", CYCLE_LOOKS)
    chain = [f"c{i:03d}" for i in range(CYCLE_LOOKS + 2)]  # c000 ← c001 ← … each waits for the one before
    submit(chain[0])
    for before, name in zip(chain, chain[1:CYCLE_LOOKS + 1]):
        submit(name, "--after", before)
    r = cli(["edit", chain[0], "--after", chain[CYCLE_LOOKS]])  # c200 … c001 read: c000 is reached
    assert r.code == 2 and f"job '{chain[0]}' would wait for itself: {chain[0]} → {chain[CYCLE_LOOKS]} → " in r.err, r
    submit(chain[-1], "--after", chain[-2])
    assert cli(["edit", chain[0], "--after", chain[-1]]).code == 0  # c201 … c001: one look more than the limit
    assert drain(spool).returncode == 0
    failed = {line.split()[3]: line for line in log_lines(spool) if line.split()[2] == "failed"}
    assert sorted(failed) == [f"root:{name}" for name in chain]  # results past `keep` are pruned: the log says it
    assert all(f'reason="dependency cycle: {name} → ' in failed[f"root:{name}"] for name in chain)


def test_a_new_priority_after_an_edit_runs_as_the_later_edit_says(spool, cli):
    """An edit of limits leaves a marker in edit/; a later edit with -p moves the job, edited, to its new folder.
    The older marker must not undo the later edit (found by a fault campaign: the job ran with the older edit's
    time limit and memory, though the -p edit had been acknowledged)."""
    submit("a", "--mem", "10M")
    assert cli(["edit", "a", "--timeout", "1h", "--mem", "20M"]).out == "a: changed; it keeps its place\n"
    r = cli(["edit", "a", "-p", "2", "--timeout", "2h", "--mem", "30M"])
    assert (r.code, r.out) == (0, "a: changed; moved to P2, after the jobs there\n"), r
    assert [row["priority"] for row in cli(["list", "--json"]).json()["jobs"]] == [2]
    assert drain(spool).returncode == 0
    job = decode((spool / "jobsdone" / "root:a").read_bytes())
    assert (job.timeout.total_seconds(), job.mem, result(spool, "a")["mem"]) == (7200, 30, 30)


@pytest.mark.parametrize("change, patched", [(["--mem", "20M"], "onite.app.edit.add_edit"),
                                             (["-p", "2"], "onite.spool.edits.rename_exchange")])
def test_an_edit_that_a_cancel_overtakes_says_the_job_was_cancelled_not_started(spool, monkeypatch, change, patched):
    """A cancel that takes the queued job as it is being edited: the edit said `started just now`, or `changed as
    it started` (exit 0), of a job no driver ever ran. It says the job was cancelled, and exits 3."""
    import importlib

    module, _, attr = patched.rpartition(".")
    original = getattr(importlib.import_module(module), attr)

    def cancel_first(*args, **kwargs):  # the cancel comes just before the edit's own write
        assert run_cli(["cancel", "racing"]).code == 0
        return original(*args, **kwargs)

    assert run_cli(["submit", "racing"], stdin=b"true\n").code == 0
    monkeypatch.setattr(patched, cancel_first)
    r = run_cli(["edit", "racing", *change])
    monkeypatch.undo()
    assert r.code == 3 and r.err.startswith("onite: job 'racing' was cancelled just now: ") and \
        r.err.endswith(" — see onite list --all\n"), r
    assert result(spool, "racing")["state"] == "cancelled"


@needs_root
@pytest.mark.parametrize("change, patched", [(["--mem", "20M"], "onite.app.edit.add_edit"),
                                             (["-p", "2"], "onite.spool.edits.rename_exchange")])
def test_an_edit_that_its_owners_withdrawal_overtakes_says_the_job_was_cancelled(spool, monkeypatch, change, patched):
    """nobody cancels its queued job as root edits it: the job is withdrawn into cancel/, and no result says so
    until a driver files it. The edit said `started just now … onite restart` (no driver runs). It says the
    job was cancelled."""
    import importlib

    module, _, attr = patched.rpartition(".")
    original = getattr(importlib.import_module(module), attr)

    def withdraw_first(*args, **kwargs):  # the owner's cancel comes just before the edit's own write
        assert run_cli(["cancel", "racing"], user="nobody", cwd="/tmp").code == 0
        return original(*args, **kwargs)

    assert run_cli(["submit", "racing"], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    monkeypatch.setattr(patched, withdraw_first)
    r = run_cli(["edit", "nobody:racing", *change])
    monkeypatch.undo()
    assert r.code == 3 and r.err.startswith("onite: job 'nobody:racing' was cancelled just now: ") and \
        r.err.endswith(" — see onite list --all\n"), r
    assert [p.name.partition("@")[0] for p in (spool / "cancel").iterdir()] == ["nobody:racing"]


@pytest.mark.parametrize("command", ["edit", "restart"])
def test_the_help_of_edit_and_restart_says_an_option_left_out_keeps_the_jobs_value(spool, command):
    """``onite edit --help`` said of -p ``default from onite.toml`` and of --mem and --cpus ``default:
    default_mem in onite.toml``: a user left -p out expecting the default priority, but edit and restart
    keep the job's own value (restart of a P1 job spools it at P1)."""
    r = run_cli([command, "--help"])
    assert r.code == 0, r
    text = " ".join(r.out.split())  # as wrapped at any width
    assert "onite.toml" not in text.split("--spool")[0], r.out
    for option in ("--priority N", "--mem SIZE", "--cpus N"):
        assert "not given: as it was" in text.split(option)[1].split(" --")[0], r.out


def test_an_edit_after_a_failed_or_cancelled_job_says_the_job_will_fail_as_submit_and_restart_do(spool, cli):
    """``onite edit x --after bad`` (bad failed) said only 'x: changed; it keeps its place', although x was now
    bound to fail at the drain; submit and restart with that --after say so at once."""
    submit("bad", body=b"false\n", user="nobody")
    assert drain(spool).returncode == 0
    for name in ("gone", "x"):
        submit(name, user="nobody")
    assert run_cli(["cancel", "gone"], user="nobody", cwd="/tmp").code == 0
    r = run_cli(["edit", "x", "--after", "bad"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "x: changed; it keeps its place; waits for bad, which failed: it will fail too, "
                                  "unless bad runs again first (onite restart bad)\n"), r
    r = run_cli(["edit", "x", "--after", "gone", "-p", "2"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "x: changed; moved to P2, after the jobs there; waits for gone, which was "
                                  "cancelled: it will fail too, unless gone runs again first (onite restart gone)\n"), r
    r = cli(["edit", "nobody:x", "--after", "nobody:bad"])  # root, for nobody's x
    assert (r.code, r.out) == (0, "nobody:x: changed; it keeps its place; waits for nobody:bad, which failed: it will "
                                  "fail too, unless nobody:bad runs again first (onite restart nobody:bad)\n"), r
    r = run_cli(["edit", "x", "--timeout", "1h"], user="nobody", cwd="/tmp")  # no --after: nothing said of it
    assert (r.code, r.out) == (0, "x: changed; it keeps its place\n"), r


def test_fewer_retries_for_a_queued_retry_are_refused_in_words_and_enough_stop_it_after_this_attempt(spool, cli):
    """``onite edit r --retries 0`` of a job queued for its attempt 2 (a retry in back-off) was refused with the
    job model's own check: 'cannot change job 'nobody:r': attempt 2 is not 1 to retries + 1 (1) — check its
    options'. It says now what is wrong and what to do, in the owner's names."""
    from conftest import set_config

    set_config(spool, retry_delay="1h")
    submit("r", "--retries", "3", body=b"false\n", user="nobody")
    driver = start_driver(spool, "-q")
    try:
        wait_for(lambda: any(line.split()[2] == "retry" for line in log_lines(spool)), what="the retry")
    finally:
        driver.terminate()
        driver.communicate(timeout=60)
    r = run_cli(["edit", "r", "--retries", "0"], user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (2, "onite: job 'r' is queued for its attempt 2, a retry: --retries 0 would leave it "
                                  "none — give --retries 1 or more (then it stops after this attempt), or cancel it\n"), r
    r = run_cli(["edit", "r", "--retries", "1"], user="nobody", cwd="/tmp")
    assert (r.code, r.out) == (0, "r: changed; it keeps its place\n"), r


def test_a_job_its_owner_cancelled_while_queued_is_finished_to_edit_not_unknown(spool, cli):
    """A job its owner (not root) cancelled while queued waits in cancel/ until a driver files it; ``onite edit``
    of it said 'no queued job 'c' — see onite list', as if there were no such job, while ``onite restart c``
    takes it: it says now, as for a filed one, to restart it with the new options."""
    submit("c", user="nobody")
    assert run_cli(["cancel", "c"], user="nobody", cwd="/tmp").code == 0
    assert not list((spool / "jobsdone").glob("nobody:c*"))  # nobody cannot file it: withdrawn, not filed
    r = run_cli(["edit", "c", "--timeout", "1h"], user="nobody", cwd="/tmp")
    assert (r.code, r.err) == (3, "onite: job 'c' was cancelled: it cannot be edited — spool it again: "
                                  "onite restart c\n"), r
    r = run_cli(["output", "c"], user="nobody", cwd="/tmp")  # it said there was no such job
    assert (r.code, r.err) == (1, "onite: job 'c' did not run: it was cancelled — see onite list --all\n"), r
    r = run_cli(["cancel", "c"], user="nobody", cwd="/tmp")  # it said the job had finished
    assert (r.code, r.err) == (3, "onite: job 'c' was cancelled already — spool it again: onite restart c\n"), r


@needs_root
def test_roots_refusal_of_a_cycle_in_another_users_jobs_names_them_as_root_reads_them(spool, cli):
    """root's `edit nobody:x --after nobody:x` was refused as "job 'x' cannot wait for itself", a job of root's
    by that name as root reads it: the refusals name jobs as their reader writes them (USER:NAME for another's)."""
    for name, after in (("x", []), ("y", ["--after", "x"])):
        assert cli(["submit", name, *after], stdin=b"true\n", user="nobody", cwd="/tmp").code == 0
    r = cli(["edit", "nobody:x", "--after", "nobody:x"])
    assert (r.code, r.err.partition(" — ")[0]) == (2, "onite: job 'nobody:x' cannot wait for itself"), r
    r = cli(["edit", "nobody:x", "--after", "nobody:y"])
    assert r.code == 2 and "job 'nobody:x' would wait for itself: nobody:x → nobody:y → nobody:x," in r.err, r
    r = cli(["edit", "x", "--after", "y"], user="nobody", cwd="/tmp")  # as its owner reads them: bare
    assert r.code == 2 and "job 'x' would wait for itself: x → y → x," in r.err, r


def test_edit_after_empty_clears_the_dependencies_and_the_job_keeps_its_place(spool, cli):
    """``onite edit b --after ''`` was refused (``invalid dependency name ''``): a job spooled ``--after a`` by
    mistake had to be cancelled and spooled anew, at the end of the queue. ``--after ''`` now means none."""
    submit("a", "--hold")
    submit("b", "--after", "a")
    submit("c")
    before = order(cli)
    r = cli(["edit", "b", "--after", ""])
    assert (r.code, r.out) == (0, "b: changed; it keeps its place\n"), r
    assert order(cli) == before
    assert [row["waiting"] for row in cli(["list", "--json"]).json()["jobs"]][1] == ""
    assert drain(spool).returncode == 0
    assert ran(spool) == ["root:b", "root:c"]  # a still held: b no longer waits for it, and runs in its place
    assert decode((spool / "jobsdone" / "root:b").read_bytes()).after == ()
    assert "--after '' clears them" in " ".join(run_cli(["edit", "--help"]).out.split())


def test_an_edit_that_another_edit_moved_the_job_under_says_so_not_that_it_started(spool, monkeypatch):
    """Two ``onite edit`` of one job at once, no driver anywhere: ``edit x -p 1`` moves x to P1 while
    ``edit x --timeout 1h`` writes its edit. The second said 'job x started just now: nothing changed — change it
    for its next run: onite restart x …', and nothing had started. It says another edit moved it, nothing changed."""
    import pwd

    import onite.app.edit as app_edit
    from onite.core.errors import Refused
    from onite.core.request import JobChanges
    from onite.spool.paths import SpoolDir

    assert run_cli(["submit", "x"], stdin=b"true\n").code == 0
    key = f"{pwd.getpwuid(os.geteuid()).pw_name}:x"
    real_add_edit = app_edit.add_edit

    def add_edit_as_another_edit_moves_it(folder, job, owner):
        marker = real_add_edit(folder, job, owner)
        os.rename(spool / "jobs" / "P4" / key, spool / "jobs" / "P1" / key)  # the other edit's move (-p 1)
        return marker

    monkeypatch.setattr(app_edit, "add_edit", add_edit_as_another_edit_moves_it)
    with pytest.raises(Refused) as err:
        app_edit.edit(SpoolDir(spool), "x", os.geteuid(), datetime.now().astimezone(), JobChanges(timeout="1h"))
    assert "started" not in str(err.value) and "another onite edit" in str(err.value), err.value
    assert (spool / "jobs" / "P1" / key).exists() and not os.listdir(spool / "edit")


def test_a_priority_edit_whose_job_another_edit_moved_first_says_so_not_that_it_started(spool, monkeypatch):
    """``edit x -p 1`` swapped its edited file in, and before it could move it ``edit x -p 2`` moved the job to P2,
    no driver anywhere: the first said 'changed as it started (in its old priority)', though nothing started and
    its change may be lost. It says another edit moved the job."""
    import pwd

    import onite.app.edit as app_edit
    import onite.spool.edits as spool_edits
    from onite.core.errors import Refused
    from onite.core.request import JobChanges
    from onite.spool.paths import SpoolDir

    assert run_cli(["submit", "x"], stdin=b"true\n").code == 0
    key = f"{pwd.getpwuid(os.geteuid()).pw_name}:x"
    real_rename = spool_edits.rename_noreplace

    def rename_after_another_edit_moved_it(src, dst):
        os.rename(spool / "jobs" / "P4" / key, spool / "jobs" / "P2" / key)  # the other edit's move (-p 2)
        return real_rename(src, dst)

    monkeypatch.setattr(spool_edits, "rename_noreplace", rename_after_another_edit_moved_it)
    with pytest.raises(Refused) as err:
        app_edit.edit(SpoolDir(spool), "x", os.geteuid(), datetime.now().astimezone(), JobChanges(priority=1))
    assert "started" not in str(err.value) and "another onite edit" in str(err.value), err.value
    assert (spool / "jobs" / "P2" / key).exists()
