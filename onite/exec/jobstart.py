"""How a job's monitor starts the job's process, and the reason it records when that fails.

Runs in the monitor: imports only os, errno and subprocess.
"""

from __future__ import annotations

import errno
import os
import subprocess

from onite.exec.plan import Plan

STAGES = {  # what the job's process was doing when it failed, for the reason recorded
    "cgroup": "cannot join its cgroup",
    "user": "cannot switch to its owner",
    "chdir": "cannot enter its directory",
    "exec": "cannot start",
}


def join(paths, joined: tuple[list[str], str] = ((), "")) -> tuple[list[str], str]:
    """Move this monitor into the cgroups ``paths`` (but those ``joined`` says it is in already), so
    that the process it forks next is born in them; the groups it is in, and ``STAGE ERRNO WHAT`` if
    one could not be joined ("" if all were)."""
    done, failed = list(joined[0]), joined[1]
    try:
        for path in paths:
            if not failed and path not in done and _move_here(path):
                done.append(path)
    except OSError as err:
        failed = f"cgroup {err.errno or 0} "
    return done, failed


def leave(joined: list[str]) -> None:
    """Back to the monitor's own cgroups (the parent of the jobs' folder) from those ``join`` joined."""
    for path in reversed(joined):
        try:
            _move_here(os.path.dirname(os.path.dirname(path)))
        except OSError:
            pass  # it stays in the job's cgroup: its end is recorded before that cgroup is killed


def start(plan: Plan, forked=None) -> tuple[int | None, str]:
    """Start the job's process; its pid, or None and ``STAGE ERRNO WHAT`` for ``reason``.
    ``forked()`` is called once the process runs, before this monitor leaves its cgroups.

    subprocess's C code forks and executes, running no Python in the child. What the child cannot
    do there is done here, around the fork: this monitor joins the job's cgroups (those its Slot did not
    join ahead), so that the
    process is born in them, and enters the job's directory with the owner's effective ids (its
    real and saved ids stay root's, so the owner cannot signal or trace it meanwhile): nothing is
    entered as root on the owner's behalf. The child starts a new session, drops to the owner
    (groups, gid, uid: real, effective and saved) and executes the interpreter with every
    descriptor closed but its script's."""
    groups, failed = join(((plan.cgroup,) if plan.cgroup else ()) + tuple(plan.limit_groups), plan.joined)
    if failed:
        leave(groups)
        return None, failed
    stage, null = "chdir", None
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        _enter_as_owner(plan)
        stage = "exec"
        program = plan.argv[0] if b"/" in plan.argv[0] else b"./" + plan.argv[0]  # no PATH search, as execve
        switch = plan.uid is not None
        child = subprocess.Popen(
            list(plan.argv), executable=program, env=plan.env, stdin=null, stdout=plan.stdout_fd,
            stderr=plan.stderr_fd if plan.stderr_fd is not None else plan.stdout_fd, close_fds=True,
            pass_fds=(plan.script_fd,), start_new_session=True, umask=plan.umask, restore_signals=True,
            user=plan.uid if switch else None, group=plan.gid if switch else None,
            extra_groups=list(plan.groups) if switch else None)
        child.returncode = 0  # reaped by the monitor (onite.exec.jobend), never by subprocess
        if forked is not None:
            forked()
        return child.pid, ""
    except OSError as err:
        if stage == "exec" and not err.filename:  # it failed before the exec: dropping to the owner
            stage = "exec" if err.errno in (errno.EAGAIN, errno.ENOMEM) else "user"
        what = os.fsdecode(plan.argv[0]) if stage == "exec" and err.filename else ""
        return None, f"{stage} {err.errno or 0} {what}"
    except (ValueError, subprocess.SubprocessError) as err:  # e.g. an embedded NUL byte
        return None, f"{stage} 0 {type(err).__name__}"
    finally:
        if null is not None:
            os.close(null)
        leave(groups)
        try:
            os.chdir("/")
        except OSError:
            pass


def _move_here(cgroup: str) -> bool:
    """Move this process into ``cgroup``; False if it is gone (the monitor, a subreaper, still
    contains the job).

    Raises:
        OSError: it cannot be joined.
    """
    try:
        fd = os.open(f"{cgroup}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)
    return True


def _enter_as_owner(plan: Plan) -> None:
    """Enter the job's directory with its owner's rights (the driver's own where it keeps them).

    Raises:
        OSError: the owner cannot enter it.
    """
    if plan.uid is None:
        os.chdir(plan.cwd)
        return
    groups, egid = os.getgroups(), os.getegid()
    try:
        os.setgroups(list(plan.groups))
        os.setresgid(-1, plan.gid, -1)
        os.setresuid(-1, plan.uid, -1)
        os.chdir(plan.cwd)
    finally:  # whatever failed, this monitor goes on with root's ids (it serves other owners' runs)
        try:
            os.setresuid(-1, 0, -1)
            os.setresgid(-1, egid, -1)
            os.setgroups(groups)
        except OSError:
            os._exit(70)  # cannot be: the saved uid is root's; never go on with the owner's rights


def reason(report: str, plan: Plan) -> str:
    """The reason recorded for a job whose process failed before its interpreter ran. Every check
    behind it was made with the owner's rights, so it tells the owner nothing they could not learn
    themselves (a root-only look would be an oracle for private paths)."""
    stage, _, rest = report.partition(" ")
    code_text, _, what = rest.partition(" ")
    code = int(code_text) if code_text.isdigit() else 0
    cwd = os.fsdecode(plan.cwd)
    if stage == "pam":  # onite.exec.pam: PAM's own words
        return what
    if stage == "chdir":
        if code == errno.ENOENT:
            return f"its directory {cwd} no longer exists"
        if code == errno.ENOTDIR:
            return f"its directory {cwd} is not a directory"
        return f"cannot enter its directory {cwd}: {_words(code, what)}"
    if stage == "exec":
        program = what or os.fsdecode(plan.argv[0])
        if code == errno.ENOENT:
            return f"cannot start {program}: no such file"
        return f"cannot start {program}: {_words(code, what)}"
    return f"{STAGES.get(stage, 'cannot start')}: {_words(code, what)}"


def _words(code: int, fallback: str) -> str:
    """An errno as the lower-case words reasons use ("permission denied")."""
    if not code:
        return fallback or "failed"
    text = os.strerror(code)
    return text[:1].lower() + text[1:]
