"""Test fixtures: real spools in real temporary folders, real processes, real users.

- ``spool``: a fresh spool made by ``onite init`` (multi-user modes when the
  tests run as root, as in CI), in a folder every user may traverse, so
  that jobs of ``nobody`` can reach it.
- ``cli(args, stdin=..., user=...)``: runs onite's real command line in a
  forked child, optionally after dropping to another user with
  setgroups/setgid/setuid, and returns (code, stdout, stderr). Forking
  (rather than exec'ing the onite script) lets ``nobody`` run it even where
  the Python installation sits under root's private home.
- ``driver(...)``: starts ``python -m onite run`` as a real process that
  tests can signal and kill.
- ``wait_for(predicate)``: polls with a deadline, never a bare sleep; ``next_ctime_tick()`` waits
  for the kernel's next ctime, ``times_blocked(pid)`` counts a polling process's looks.

The suite runs on pytest-xdist (README.md: ``-n auto``). What every test on the machine shares is
guarded here: a test marked ``alone`` runs while no other does, the Slurm cluster's tests run one
at a time on one worker, and the session's cgroup sweep runs once, after the last worker.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = os.geteuid() == 0
# no time limit per example: a test never asserts a timing, and a loaded machine makes any limit a flake
settings.register_profile("onite", deadline=None)
settings.load_profile("onite")
REPO = Path(__file__).resolve().parent.parent

# No test depends on this machine's /etc/onite.toml or /var/spool/onite: every test's system spool is one
# that does not exist, unless the test names another (ONITE_SYSTEM_CONFIG, docs/admin-guide.md).
_ETC = Path(tempfile.mkdtemp(prefix="onite-test-etc-"))
os.chmod(_ETC, 0o755)
NO_SYSTEM_CONFIG = _ETC / "onite.toml"
NO_SYSTEM_CONFIG.write_text(f'spool = "{_ETC}/no-system-spool"\n')
os.environ["ONITE_SYSTEM_CONFIG"] = str(NO_SYSTEM_CONFIG)
# nor on its PAM services: `onite init` of a test's system spool installs onite's in this folder
TEST_PAM_DIR = _ETC / "pam.d"
TEST_PAM_DIR.mkdir()
os.environ["ONITE_PAM_DIR"] = str(TEST_PAM_DIR)


def _preload() -> None:
    """Import everything onite may import lazily, before any fork drops to ``nobody``.

    The test interpreter may live under root's private home (pyenv in /root),
    where ``nobody`` cannot read a module that was not loaded before the fork.
    """
    import importlib
    import pkgutil

    import onite

    for info in pkgutil.walk_packages(onite.__path__, "onite."):
        importlib.import_module(info.name)
    for name in ("typer", "rich.console", "rich.table", "rich.text", "tomllib", "croniter", "difflib",
                 "importlib.resources", "json", "shlex", "shutil", "subprocess", "resource", "select", "signal",
                 "zoneinfo", "html", "grp", "pwd", "fcntl", "selectors", "traceback", "contextvars"):
        importlib.import_module(name)
    # typer builds its parameter machinery lazily, on the first parse: parse once now
    from contextlib import redirect_stderr, redirect_stdout

    from onite.__main__ import main
    from onite.spool.skeleton import skeleton_config

    skeleton_config()  # importlib.resources loads its readers on first use
    with open(os.devnull, "w") as devnull, redirect_stdout(devnull), redirect_stderr(devnull):
        for argv in (["log", "-n", "1", "--spool", "/nonexistent"], ["submit", "--help"], ["nosuchcommand"],
                     ["run", "--slots", "x"], ["init", "--priorities", "0"]):
            main(argv)


_preload()
import atexit  # noqa: E402

atexit.register(shutil.rmtree, _ETC, True)
import onite.drain.nextdrain  # noqa: E402

# nor on whether this machine has systemd and onite's timer (tests that need them make their own)
onite.drain.nextdrain.SYSTEMD_UNITS = _ETC / "systemd-units"
onite.drain.nextdrain.SYSTEMD_RUNNING = _ETC / "run-systemd"
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: acts as a second user (nobody) and drops privileges")


def job_cgroup_folders() -> list[str]:
    """The folders a driver here makes job cgroups in: its cgroup v2 subtree and its v1 groups' folders
    (onite.drain.recovery sweeps the same ones)."""
    from onite.exec import contain, limits

    found = contain.discover(True)
    base = found.base if found.kind == contain.CGROUP2 else None
    return ([base] if base else []) + list(limits.discover(base, max_pids=1).v1.values())


SESSION_STARTED = time.time() - 1  # imported by pytest's own process before any test (or xdist worker) starts


def pytest_sessionfinish(session):
    """After the session (under pytest-xdist: once, in the process that ran the workers, after the
    last), remove the empty job cgroups its killed drivers and monitors left (tests kill them on
    purpose): a driver sweeps such cgroups only once they are ten minutes old, and on a developer's
    machine nothing else would. Only monitors' slots and probes made during the session, only empty ones: the
    driver's own sweep (onite.exec.contain.sweep_stale), asked of those alone. Then the session's
    folders of job cgroups go, if empty, as a driver's go when it ends. Not in a worker: another
    worker's driver may be about to put a job in a cgroup it has just made."""
    if not ROOT or hasattr(session.config, "workerinput"):
        return
    from onite.exec import contain, limits

    for folder in job_cgroup_folders():
        def made_in_session(name: str, folder: str = folder) -> bool:
            try:
                return os.lstat(f"{folder}/{name}").st_ctime >= SESSION_STARTED
            except FileNotFoundError:  # another session's monitor removed its slot meanwhile
                return False

        contain.sweep_stale([folder], older_than=0, only=made_in_session)
    limits.discover(None, max_pids=1).remove_folders()
    contain.remove_base(contain.discover(True))


def pytest_configure(config):
    """In pytest's own process: the folder of the locks that xdist workers share (``_alone_or_together``)."""
    if not hasattr(config, "workerinput"):
        config.onite_shared = tempfile.mkdtemp(prefix="onite-tests-shared-")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, starting a worker: tell it where the shared locks are."""
    node.workerinput["onite_shared"] = node.config.onite_shared


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(config.onite_shared, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: two workers per core. Most tests mostly wait (for a driver's poll, a minute's boundary,
    Slurm's scheduler tick, a time limit) rather than compute; on two cores four workers ended the suite in
    326 s where three took 365 s."""
    return 2 * (os.cpu_count() or 1)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's ``load`` (what ``-n`` does by default), except that the tests of the one Slurm
    cluster (tests/test_slurm.py) go to one worker, as a whole and first (the largest unit): no worker
    waits for the cluster's lock while the other holds it (``_alone_or_together``)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SlurmTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "slurm" if nodeid.startswith("tests/test_slurm.py::") else nodeid

    return SlurmTogether(config, log)


def pytest_collection_modifyitems(items):
    """Tests marked ``alone`` first: one waits for every running test to end, and later in the session it would
    leave the other workers idle behind a long one (a minute of kills under strace). Then those marked ``slow``:
    begun late, one would end the session with the other workers idle."""
    items.sort(key=lambda item: (item.get_closest_marker("alone") is None, item.get_closest_marker("slow") is None))


@pytest.fixture(autouse=True)
def _alone_or_together(request):
    """Under pytest-xdist, a test marked ``alone`` runs while no other test does: it changes what every
    test on the machine shares (the folder of job cgroups); and a test marked ``slurm`` runs while no
    other ``slurm`` test does (the cluster is one, and its tests wait for it to be idle). Every other
    test holds a shared flock on a file of this run, an ``alone`` one an exclusive flock; each passes a
    turnstile (a second flock) first, so that an ``alone`` test waiting for its turn is not passed by the
    next tests. A ``slurm`` test holds a third flock, exclusive, for the cluster."""
    import fcntl

    shared = getattr(request.config, "workerinput", {}).get("onite_shared")
    if shared is None:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    names = ["turnstile", "tests"] + (["slurm"] if request.node.get_closest_marker("slurm") else [])
    turnstile, held, *cluster = (os.open(f"{shared}/{name}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                                 for name in names)
    try:
        for fd in cluster:
            fcntl.flock(fd, fcntl.LOCK_EX)
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(held, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
    finally:
        for fd in (held, *cluster):
            fcntl.flock(fd, fcntl.LOCK_UN)  # a child forked by the test may still hold the descriptor
        for fd in (turnstile, held, *cluster):
            os.close(fd)


def nobody():
    return pwd.getpwnam("nobody")


@pytest.fixture
def world_tmp():
    """A temporary folder that every user can enter (pytest's own tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="onite-test-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    end_processes_under(path)
    shutil.rmtree(path, ignore_errors=True)


def end_processes_under(folder: Path) -> None:
    """SIGKILL whatever still runs on a spool in ``folder`` (a driver a failed test left, its monitors, their
    jobs: each carries ONITE_SPOOL or ONITE_JOB_SPOOL), so that it outlives neither the test nor its folder."""
    import signal

    mark = os.fsencode(str(folder)) + b"/"
    for _ in range(20):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(v.startswith((b"ONITE_SPOOL=", b"ONITE_JOB_SPOOL=")) and v.partition(b"=")[2].startswith(mark)
                   for v in environ):
                found.append(int(entry))
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


@pytest.fixture
def spool(world_tmp, monkeypatch):
    from onite.__main__ import main

    path = world_tmp / "spool"
    monkeypatch.setenv("ONITE_SPOOL", str(path))
    with open(os.devnull, "w") as devnull:
        saved = sys.stdout
        sys.stdout = devnull
        try:
            assert main(["init"]) == 0
        finally:
            sys.stdout = saved
    set_config(path, pam="off")  # whatever this machine's /etc/pam.d holds; tests/test_pam.py turns it on
    return path


def as_user(fn, user: str = "nobody", *, background: bool = False):
    """Run ``fn`` in a forked child that has become ``user`` (setgroups, setgid, setuid); return what
    it returned, as ``("ok", value)``, ``("oserror", errno)`` or ``("error", repr)``. ``background``:
    return the child's pid at once (it ends when ``fn`` returns; reap it with os.waitpid)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            entry = pwd.getpwnam(user)
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            try:
                out = ("ok", fn())
            except OSError as err:
                out = ("oserror", err.errno)
            except BaseException as err:  # noqa: BLE001
                out = ("error", repr(err))
            os.write(w, json.dumps(out, default=str).encode())
        finally:
            os._exit(0)
    os.close(w)
    if background:
        os.close(r)
        return pid
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return tuple(json.loads(data))


def init_spool_at(path: Path) -> Path:
    """A spool made by ``onite init`` at ``path`` (for tests that need several)."""
    r = run_cli(["--spool", str(path), "init"])
    assert r.code == 0, r
    set_config(path, pam="off")
    return path


@pytest.fixture
def workdir(world_tmp):
    """A directory every user may write: jobs run there and leave their traces."""
    path = world_tmp / "work"
    path.mkdir()
    os.chmod(path, 0o777)
    return path


class CliResult:
    def __init__(self, code: int, out: bytes, err: bytes) -> None:
        self.code, self.out_bytes, self.err_bytes = code, out, err

    @property
    def out(self) -> str:
        return self.out_bytes.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.err_bytes.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out[:300]!r}, err={self.err[:300]!r})"


def run_cli(args, *, stdin: bytes | None = b"", user: str | None = None, env: dict | None = None,
            cwd: str | os.PathLike | None = None, umask: int | None = None, rlimit_fsize: int | None = None,
            timeout: float = 60, group: int | None = None) -> CliResult:
    """onite's command line in a forked child (as ``user`` if given, with ``group`` as its gid, as after
    newgrp, if given)."""
    import resource
    import select

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.dup2(in_r, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
                os.close(fd)
            if stdin is None:
                os.close(0)
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            if user is not None:
                entry = pwd.getpwnam(user)
                os.setgroups(os.getgrouplist(entry.pw_name, entry.pw_gid))
                os.setgid(entry.pw_gid if group is None else group)
                os.setuid(entry.pw_uid)
                if env is None:
                    os.environ["HOME"] = entry.pw_dir
                    os.environ["USER"] = os.environ["LOGNAME"] = entry.pw_name
            if cwd is not None:
                os.chdir(cwd)
            if umask is not None:
                os.umask(umask)
            if rlimit_fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (rlimit_fsize, rlimit_fsize))
            sys.stdin = open(0, "r", closefd=False) if stdin is not None else None
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            from onite.__main__ import main

            code = main(list(args))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        except BaseException:  # noqa: BLE001 - report anything, never return into pytest
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            os._exit(99)
    os.close(in_r)
    os.close(out_w)
    os.close(err_w)
    if stdin:
        try:
            view = memoryview(stdin)
            while view:
                view = view[os.write(in_w, view):]
        except BrokenPipeError:
            pass
    os.close(in_w)
    chunks = {out_r: [], err_r: []}
    deadline = time.monotonic() + timeout
    open_fds = [out_r, err_r]
    while open_fds:
        ready, _, _ = select.select(open_fds, [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            os.kill(pid, 9)
            raise TimeoutError(f"onite {' '.join(args)} did not finish in {timeout}s")
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
                os.close(fd)
    _, status = os.waitpid(pid, 0)
    return CliResult(os.waitstatus_to_exitcode(status), b"".join(chunks[out_r]), b"".join(chunks[err_r]))


@pytest.fixture
def cli():
    return run_cli


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns a true value, and return that value. A file it reads that is
    not there yet (FileNotFoundError: a result not yet filed, a record not yet written) means "not
    yet", as False does; any other error is the test's failure."""
    deadline = time.monotonic() + timeout
    missing = None
    while True:
        try:
            value = predicate()
        except FileNotFoundError as err:
            value, missing = None, err
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                 + (f" (last: {missing})" if missing else ""))
        time.sleep(interval)


def next_ctime_tick() -> None:
    """Return once the kernel stamps a later ctime than it stamped on any file changed before the call.
    It takes ctimes from a coarse clock, so two files changed a moment apart may share one; a test
    that needs a file to come later in the queue (the kernel's ctime is its place) waits for the tick."""
    fd, probe = tempfile.mkstemp(prefix="onite-ctime-")
    try:
        first = os.fstat(fd).st_ctime_ns
        while True:
            os.fchmod(fd, 0o600)  # a chmod stamps a new ctime, even to the same mode
            if os.fstat(fd).st_ctime_ns > first:
                return
            time.sleep(0.001)
    finally:
        os.close(fd)
        os.unlink(probe)


def read_so_far() -> int:
    """Bytes this process has read so far (/proc/self/io rchar): what a look cost, whatever the machine's speed."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")).split()[1])


def sparse_templates(spool: Path, rule: list[str], count: int) -> None:
    """nobody's template ``t0`` (``recur add t0 RULE``) and its copies ``t1``.. up to ``count`` templates, each
    cut to max_job_size: bodies of sparse holes that cost nobody no disk, and each reader that reads them whole
    24 MiB."""
    r = run_cli(["recur", "add", "t0", *rule], stdin=b"true\n", user="nobody", cwd="/tmp")
    assert r.code == 0, r
    data = (spool / "recur" / "nobody:t0").read_bytes()
    size = (16 << 20) + (8 << 20) - 4096  # max_job_size and the room for the environment: still a template

    def copies():
        for i in range(1, count):
            fd = os.open(spool / "recur" / f"nobody:t{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, data)
            os.ftruncate(fd, size)
            os.close(fd)

    assert as_user(copies) == ("ok", None)


def times_blocked(pid: int) -> int:
    """How many times process ``pid`` has blocked (its voluntary context switches): a process that
    polls, sleeping between its looks, blocks at least once a look."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches in /proc/{pid}/status")


class OnTerminal:
    """``onite ARGS`` as root on a terminal (a pty for its stdout and stderr, and its stdin unless
    ``stdin`` is False): what it writes there, byte for byte."""

    def __init__(self, spool: Path, args: list[str], *, stdin: bool = True, env: dict | None = None,
                 columns: int | None = None) -> None:
        import fcntl
        import pty
        import struct
        import termios

        self.master, slave = pty.openpty()
        if columns is not None:  # the terminal's own width, as a window of that size has
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "onite", *args],
                                     stdin=slave if stdin else subprocess.DEVNULL, stdout=slave, stderr=slave,
                                     env=dict(os.environ, ONITE_SPOOL=str(spool), PYTHONPATH=str(REPO), **(env or {})),
                                     close_fds=True)
        os.close(slave)
        self.seen = b""

    def until(self, text: bytes, timeout: float = 30) -> bytes:
        """Read until ``text`` has been written; all written so far."""
        import select

        while text not in self.seen:
            ready, _, _ = select.select([self.master], [], [], timeout)
            assert ready, self.seen
            self.seen += os.read(self.master, 4096)
        return self.seen

    def write(self, data: bytes) -> None:
        os.write(self.master, data)

    def finish(self, timeout: float = 30) -> tuple[int, bytes]:
        """Its exit code, once it has exited, and all it wrote."""
        try:  # read first: a full terminal would keep it from exiting
            while chunk := os.read(self.master, 4096):
                self.seen += chunk
        except OSError:  # EIO: the other end is closed
            pass
        os.close(self.master)
        return self.proc.wait(timeout), self.seen


def start_driver(spool: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """`onite run` as a real process (its own session, so signals reach only it)."""
    full_env = dict(os.environ if env is None else env)
    full_env["ONITE_SPOOL"] = str(spool)
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "onite", "run", *args], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def draining(spool: Path, workdir: Path, name: str) -> tuple[Path, subprocess.Popen]:
    """Spool root's ``name``, a job that runs until its gate is removed, and start a driver: the gate and the
    driver, once the job is claimed on this host."""
    gate = workdir / "gate"
    gate.touch()
    assert run_cli(["submit", name], stdin=f"while [ -e {gate} ]; do sleep 0.02; done\n".encode()).code == 0
    driver = start_driver(spool)
    host = os.uname().nodename.split(".")[0]
    wait_for(lambda: (spool / "running" / host / f"root:{name}").exists(), what=f"{name} to start")
    return gate, driver


def kill_driver_mid_job(spool: Path, workdir: Path, name: str, *, machine_dies: bool = False) -> None:
    """Spool root's ``name`` (a job that would sleep a minute), start a driver, and kill -9 it once the job runs
    and its monitor has recorded it (what recovery reads). ``machine_dies``: the job and its monitor
    die too, as when the machine goes down (then nothing recorded how the job ended)."""
    import signal

    marker = workdir / f"{name}.started"
    # run again (after a machine died), it ends at once
    assert run_cli(["submit", name], stdin=f"[ -e {marker} ] && exit 0; touch {marker}; sleep 60\n".encode()).code == 0
    driver = start_driver(spool)
    wait_for(marker.exists, what="the job to start")
    wait_for(lambda: any(p.name == f"root:{name}@run" for p in (spool / "running").glob("*/*")), what="the run record")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    if machine_dies:
        [record] = [p for p in (spool / "running").glob(f"*/root:{name}@run")]
        kill_run(record)


def kill_run(record: Path) -> None:
    """kill -9 a run's monitor and its job's processes, as a machine that goes down does."""
    import signal

    wait_for(lambda: "job" in {json.loads(line).get("event") for line in record.read_text().splitlines()
                               if line.strip()}, what="the monitor to record the job")
    cgroup = None
    for line in record.read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "monitor":
            os.kill(event["pid"], signal.SIGKILL)
            cgroup = event.get("cgroup")
    if cgroup:
        with open(f"{cgroup}/cgroup.kill", "w") as handle:
            handle.write("1")
    else:
        [job] = [json.loads(line)["pid"] for line in record.read_text().splitlines() if '"event":"job"' in line]
        try:
            os.killpg(job, signal.SIGKILL)
        except ProcessLookupError:
            pass


def drain(spool: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = start_driver(spool, *args)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def result(spool: Path, name: str) -> dict:
    """The result record of job ``name``: a key, or a NAME that one user's kept job has."""
    return json.loads((spool / "jobsdone" / f"{key_of(spool, name, 'jobsdone', '@result')}@result").read_text())


def key_of(spool: Path, name: str, folder: str = "jobsdone", side: str = "") -> str:
    """The key USER:NAME of the one job ``name`` has in ``folder`` (``side``: of its side file), else root's."""
    if ":" in name:
        return name
    found = sorted(p.name[:len(p.name) - len(side)] for p in (spool / folder).glob(f"*:{name}{side}"))
    found = [key for key in found if key.partition(":")[2] == name]
    return found[0] if len(found) == 1 else f"root:{name}"


def log_lines(spool: Path) -> list[str]:
    return (spool / "onite.log").read_text().splitlines()


def wait_logged(spool: Path, event: str, key: str) -> None:
    """Wait until the activity log has an ``event`` line of job ``key`` (``start``, ``done``, ``retry`` …)."""
    wait_for(lambda: any(f" {event} {key} " in line for line in log_lines(spool)), what=f"{key}'s {event} line")


def set_config(spool: Path, **values) -> None:
    """Append settings to onite.toml (later keys would be duplicates: replace existing lines)."""
    path = spool / "onite.toml"
    lines = [ln for ln in path.read_text().splitlines() if ln.split("=")[0].strip() not in values]
    for key, value in values.items():
        lines.append(f"{key} = {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def berlin_tz(monkeypatch):
    """The machine's zone (TZ) set to Europe/Berlin for one test."""
    import time as time_module

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time_module.tzset()
    yield
    monkeypatch.undo()
    time_module.tzset()


class ManualClock:
    """A clock that moves only when told (``advance``, ``set``, or ``sleep``, which advances it)."""

    def __init__(self, start: datetime, monotonic: float = 1000.0) -> None:
        """Raises ValueError: ``start`` is naive."""
        if start.tzinfo is None:
            raise ValueError("a ManualClock starts at an aware datetime")
        self._now = start
        self._mono = monotonic

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> None:
        """Move both clocks ``seconds`` on."""
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, when: datetime) -> None:
        """Move the wall clock to ``when`` (and the monotonic one as far, never back).
        Raises ValueError: ``when`` is before the clock's present reading."""
        step = (when - self._now).total_seconds()
        if step < 0:
            raise ValueError(f"a ManualClock does not go back ({when.isoformat()} is before {self._now.isoformat()})")
        self.advance(step)
