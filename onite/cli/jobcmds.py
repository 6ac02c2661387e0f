"""The commands that spool jobs and change them: init, submit, list, find, uniqname, restart, edit, cancel, hold,
release."""

import os
from typing import Annotated, Optional

from onite.app.common import key_for, label, pam_fix
from onite.cli.options import (AfterOpt, Arg, AtOpt, CpusOpt, HostOpt, JsonOpt, KeptCpusOpt, KeptMemOpt,
                               KeptPriorityOpt, LiveNamesArg, MemOpt, NotifyOnOpt, NotifyOpt, Opt, PlainOpt,
                               PriorityOpt, QuietOpt, RetriesOpt, SpoolOpt, StderrOpt, TimeoutOpt, UrgentOpt, ask,
                               command, command_line, complete_name, confirm, locate_spool, on_terminal, open_spool,
                               say, spool_of, terminal, warn_damaged)
from onite.core.clock import SYSTEM
from onite.core.config import MAX_PRIORITIES
from onite.core.errors import InvalidInput, NotFound, OniteError
from onite.core.safetext import printable


@command()
def init(
    priorities: Annotated[Optional[int], Opt("--priorities", metavar="N", min=1, max=MAX_PRIORITIES,
                                             help="Number of priority folders P1..Pn.")] = None,
    spool: SpoolOpt = None,
) -> None:
    """Create the spool (idempotent; never overwrites a changed onite.toml)."""
    from onite.spool.locate import Source, check_may_init
    from onite.spool.paths import SpoolDir
    from onite.spool.skeleton import init_spool, install_pam_service, pam_dir

    where, root = locate_spool(spool), os.geteuid() == 0
    check_may_init(where, os.geteuid())
    report = init_spool(where.path, priorities, system=root)
    kind = "system spool (multi-user modes)" if root else "personal spool"
    made = SpoolDir(report.root)
    print(printable(f"{report.root}: {kind}; created {', '.join(report.created) or 'nothing new'}"))
    if report.repaired:  # a mode a driver would refuse the spool for, now set right
        print(printable(f"{report.root}: repaired the modes of {', '.join(report.repaired)}"))
    if report.config_kept:
        print(f"{printable(str(made.config_path))}: kept as you changed it")
    if root and where.source == Source.SYSTEM and made.config.pam != "off":
        print(install_pam_service(pam_dir(), made.config.pam_service))
    elif fix := pam_fix(made):  # another spool of root's: /etc is not changed for it unasked
        print(printable(f"PAM: not installed (no service {made.config.pam_service} in {pam_dir()}): jobs get no "
                        f"PAM session (docs/admin-guide.md); to install it: {fix}"))


@command(after_dashes=True)
def submit(
    name: Annotated[str, Arg(metavar="NAME",
                             help="Job name: letters, digits, '.', '_', '-' (100 at most).")],
    priority: PriorityOpt = None,
    urgent: UrgentOpt = False,
    after: AfterOpt = None,
    at: AtOpt = None,
    timeout: TimeoutOpt = None,
    retries: RetriesOpt = None,
    host: HostOpt = None,
    hold: Annotated[bool, Opt("--hold", help="Spool it held; onite release NAME lets it run.")] = False,
    unique: Annotated[bool, Opt("--unique",
                                help="Append a unique suffix to NAME and print the final name.")] = False,
    lines: Annotated[bool, Opt(
        "--lines", help="Each non-empty line of stdin is a job: NAME-00001, NAME-00002, … in order; prints their "
        "names, one a line.")] = False,
    stderr_separate: StderrOpt = None,
    notify: NotifyOpt = None,
    notify_on: NotifyOnOpt = None,
    mem: MemOpt = None,
    cpus: CpusOpt = None,
    quiet: QuietOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Spool the job text on stdin, with your environment, directory and umask; or, after --, the
    command line that follows (quoted exactly; stdin is not read). Says on stderr when it is expected to run."""
    from onite.app.submit import command_text, missing_command, submit_command
    from onite.core.request import SubmitRequest

    argv = command_line()
    body = command_text(argv, lines=lines) if argv is not None else b""
    request = SubmitRequest.of(name, body, dict(
        priority=priority, urgent=urgent, after=after, at=at, timeout=timeout, retries=retries, host=host, hold=hold,
        unique=unique, stderr_separate=stderr_separate, notify=notify, notify_on=notify_on, mem=mem, cpus=cpus))
    out, said, warnings = submit_command(request, spool_of(spool), lines=lines, now=SYSTEM.now(), confirm=not quiet)
    for line in ([said] if said is not None else []) + warnings:
        say(line)
    if argv and (missing := missing_command(argv)):
        say(missing)
    if out is not None:
        try:
            print(out, flush=True)
        except OSError as err:  # stdout on a full disk: the job is spooled, and its name must not go with the line
            names = out.splitlines()
            err.add_note(f"the job is spooled as {names[0]}" if len(names) == 1 else
                         f"the jobs are spooled as {names[0]} to {names[-1]}")
            raise


@command("list")
def list_(
    all_: Annotated[bool, Opt("--all", "-a", help="Also running and finished jobs.")] = False,
    by_host: Annotated[bool, Opt("--by-host", help="Group running and finished jobs by the host that "
                                 "ran them (implies --all).")] = False,
    as_json: JsonOpt = False,
    plain: PlainOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Queued jobs in run order and why each waits (with --all: running and finished ones too)."""
    from onite.app.listing import list_jobs, list_json

    target, when, damaged = open_spool(spool, reading=True), SYSTEM.now(), []
    if as_json:
        text = list_json(target, include_all=all_, now=when, damaged=damaged)
        warn_damaged(damaged)
        print(text)
        return
    views = list_jobs(target, include_all=all_ or by_host, now=when, damaged=damaged)
    warn_damaged(damaged)
    if not views:
        print("no jobs queued" if not all_ else "no jobs")
        return
    from onite.cli.render import print_job_list

    out, plain = terminal(plain)
    print_job_list(views, when, detailed=all_, by_host=by_host, out=out, plain=plain)


@command()
def find(name: Annotated[str, Arg(metavar="NAME")], spool: SpoolOpt = None) -> Optional[int]:
    """Exit 0 if a job NAME is queued or running, 1 if not."""
    from onite.spool.scan import is_live  # scripts ask in loops: only what it reads is imported

    if not is_live(open_spool(spool, reading=True), key_for(name)):
        return 1


@command()
def uniqname(base: Annotated[str, Arg(metavar="BASE")], spool: SpoolOpt = None) -> None:
    """Print an unused job name starting with BASE."""
    from onite.app.submit import uniqname as unused_name
    from onite.exec import identity

    print(unused_name(open_spool(spool, reading=True), base, identity.current().name))


@command()
def restart(
    name: Annotated[str, Arg(metavar="NAME", help="A finished job (done, failed or cancelled).",
                             autocompletion=complete_name)],
    new_name: Annotated[Optional[str], Opt("--name", metavar="NEW", help="Spool it as NEW (e.g. while "
                                           "NAME is queued again).")] = None,
    unique: Annotated[bool, Opt("--unique", help="Append a unique suffix to the name.")] = False,
    hold: Annotated[bool, Opt("--hold", help="Spool it held; onite release lets it run.")] = False,
    timeout: TimeoutOpt = None,
    priority: KeptPriorityOpt = None,
    retries: RetriesOpt = None,
    mem: KeptMemOpt = None,
    cpus: KeptCpusOpt = None,
    at: AtOpt = None,
    after: AfterOpt = None,
    quiet: QuietOpt = False,
    spool: SpoolOpt = None,
) -> None:
    """Spool a finished job again: its text, environment, directory, umask and options, but for those given
    (--timeout 2h after a timeout); print its name, and say on stderr when it is expected to run."""
    from onite.app.edit import restart as restart_job
    from onite.app.submit import confirmation
    from onite.exec import identity

    changes = job_changes(priority, timeout, retries, mem, cpus, at, after)
    target, now = open_spool(spool), SYSTEM.now()
    job = restart_job(target, name, identity.current(), now, new_name=new_name, unique=unique, hold=hold,
                      changes=changes)
    spooled = label(job.name)
    if not quiet:
        say(confirmation(target, [spooled], job, held=hold, now=now))
    print(spooled)


@command()
def edit(
    name: Annotated[str, Arg(metavar="NAME", help="A queued job (held or not).",
                             autocompletion=complete_name)],
    timeout: TimeoutOpt = None,
    priority: KeptPriorityOpt = None,
    retries: RetriesOpt = None,
    mem: KeptMemOpt = None,
    cpus: KeptCpusOpt = None,
    at: AtOpt = None,
    after: AfterOpt = None,
    spool: SpoolOpt = None,
) -> None:
    """Change a queued job: it keeps its place unless -p moves it (to the end of its new priority);
    --after replaces its dependencies, and --after '' clears them."""
    from onite.app.edit import edit as edit_job
    from onite.exec import identity

    changes = job_changes(priority, timeout, retries, mem, cpus, at, after)
    print(edit_job(open_spool(spool), name, identity.current().uid, SYSTEM.now(), changes))


def job_changes(priority, timeout, retries, mem, cpus, at, after):
    """The changes ``restart`` and ``edit`` were given (onite.core.request.JobChanges)."""
    from onite.core.request import JobChanges

    return JobChanges(priority=priority, timeout=timeout, retries=retries, mem=mem, cpus=cpus, at=at,
                      after=None if after is None else tuple(after))


@command()
def cancel(
    names: Annotated[Optional[list[str]], Arg(
        metavar="NAME", help="Jobs to cancel, or quoted patterns ('build-*'); none: pick from a list (on a terminal).",
        autocompletion=complete_name)] = None,
    all_: Annotated[bool, Opt("--all", help="Every queued and running job of yours "
                              "(root: everyone's).")] = False,
    yes: Annotated[bool, Opt("-y", "--yes", help="Do not ask root to confirm a pattern or --all.")] = False,
    spool: SpoolOpt = None,
) -> int | None:
    """Cancel queued or running jobs (your own, unless you are root or own_only = false)."""
    from onite.app.control import doomed_by, is_pattern, none_chosen, reach, select_jobs

    target, names = open_spool(spool, reading=True), names or []
    patterns = [n for n in names if is_pattern(n)]
    if not all_ and not patterns:
        failed, cancelled = _cancel_each(target, names or _pick_one(target), [])
        for line in doomed_by(target, cancelled, os.geteuid()) if cancelled else ():  # as after a pattern's summary
            print(printable(line))
        return failed
    if all_ and names:
        raise InvalidInput("--all cancels every job of yours and takes no NAME", "drop the names, or --all")
    picked = select_jobs(target, patterns, os.geteuid(), every=all_)
    what = "--all" if all_ else " ".join(map(repr, patterns))
    if not picked.chosen:
        raise none_chosen(picked, patterns, what, os.geteuid(), target.config.own_only)
    others = ", ".join(sorted({view.user for view in picked.skipped}))
    # the queued jobs that will fail, for they wait for one of these: root is shown them before answering
    doomed = [printable(line) for line in doomed_by(target, picked.chosen, os.geteuid())]
    asking = f"cancelling {reach(patterns, every=all_)} by {what} as root"  # '*:x' reaches past root's own x: say so
    listed = [printable(f"  {label(view.name)}  ({view.state}, {view.user})") for view in picked.chosen]
    if os.geteuid() == 0 and not yes and not confirm(
            asking, "--yes", [printable(f"{asking}:"), *listed, *(f"  {line}" for line in doomed)],
            f"cancel these {len(picked.chosen)} job(s)? [y/N] "):
        print("nothing cancelled")
        return
    named = [n for n in names if n not in patterns]
    matched = [label(v.name) for v in picked.chosen if label(v.name) not in named]
    failed, cancelled = _cancel_each(target, named + matched, matched)
    print(f"cancelled {len(cancelled)} job(s)" + (f"; skipped {len(picked.skipped)} of other users' ({others}): you may "
                                        "cancel only yours" if picked.skipped else ""))
    for line in doomed:
        print(line)
    return failed


def _each(names: list[str], act) -> int | None:
    """``act`` on each name, as kill(1) and rm(1) go: one that fails is said, the others still done; the exit code
    of the first that failed (None: none did)."""
    failed = None
    for name in names:
        try:
            act(name)
        except OniteError as err:
            say(f"onite: {err}")
            failed = failed or err.exit_code
    return failed


def _cancel_each(target, names: list[str], matched: list[str]) -> tuple[int | None, list]:
    """Cancel each job, saying how it went (``_each``); the exit code, and the CancelReports of those cancelled (or
    asked to stop). A job of ``matched`` (by a pattern) that ended or started since is said and skipped, not an error.
    All are withdrawn or asked to stop before any is waited for: a slot freed by one finds none of them to start."""
    from onite.app.control import CancelReport, await_cancel, cancel as cancel_job

    cancelled: list = []
    reports: list = []  # a CancelReport for each name, in order

    def cancel_one(name: str) -> None:
        try:
            reports.append(cancel_job(target, name, os.geteuid(), SYSTEM.now()))
        except NotFound as err:
            if name not in matched:
                raise
            reports.append(CancelReport(key_for(name), "not cancelled", err.what))

    failed = _each(names, cancel_one)
    for report in reports:
        if report.action == "requested":
            report = await_cancel(target, report)
        print(printable(f"{label(report.name)}: {report.action}" + (f" ({report.detail})" if report.detail else "")))
        if report.action in ("cancelled", "requested"):  # not a job that ended on its own meanwhile
            cancelled.append(report)
    return failed, cancelled


def _pick_one(target) -> list[str]:
    """The job picked by its number from a list of those you may cancel: only on a terminal."""
    from onite.app.control import select_jobs

    if not on_terminal():
        raise InvalidInput("no job name given", "name the job(s): onite cancel NAME…")
    views = select_jobs(target, [], os.geteuid(), every=True).chosen
    if not views:
        print("you have no queued or running jobs")
        return []
    for number, view in enumerate(views, 1):
        print(printable(f"{number:3d}  {label(view.name)}  ({view.state}, {view.user})"))
    answer = ask("cancel which job? number, or Enter for none: ")
    if not answer:
        print("nothing cancelled")
        return []
    if answer not in {str(number) for number in range(1, len(views) + 1)}:
        raise InvalidInput(f"no job numbered {answer!r}", f"answer a number from 1 to {len(views)}")
    return [label(views[int(answer) - 1].name)]


@command()
def hold(names: LiveNamesArg, spool: SpoolOpt = None) -> int | None:
    """Hold queued jobs (names or patterns): they keep their place but are skipped until released."""
    return _set_hold(names, spool, held=True)


@command()
def release(names: LiveNamesArg, spool: SpoolOpt = None) -> int | None:
    """Release held jobs (names or patterns); they keep their place in their priority."""
    return _set_hold(names, spool, held=False)


def _set_hold(names: list[str], spool: str | None, *, held: bool) -> int | None:
    from onite.app.control import is_pattern, select_jobs, set_hold

    target = open_spool(spool, reading=True)
    patterns = [n for n in names if is_pattern(n)]
    if patterns:  # as cancel's ('build-*': the caller's; '*:build-*' anyone's): the queued jobs not yet so
        picked = select_jobs(target, patterns, os.geteuid()).chosen
        matched = [label(v.name) for v in picked if v.state == ("queued" if held else "held")]
        if not matched:
            raise NotFound(f"no {'queued' if held else 'held'} job of yours matches {' '.join(map(repr, patterns))}",
                           "see onite list")
        names = [n for n in names if n not in patterns] + [n for n in matched if n not in names]
    done, undone = ("held", "already held") if held else ("released", "not held: nothing to release")

    def set_one(name: str) -> None:
        print(f"{name}: {done if set_hold(target, name, os.geteuid(), held) else undone}")

    return _each(names, set_one)
