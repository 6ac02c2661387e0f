"""What a new job's name and its dependencies' names may be, against what the spool holds now.

A queued or running name is one job's; so is another user's recurring job's run name, and another
user's finished job's name while its result is kept; ``--after NAME`` names a job of the owner's own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from onite.core.errors import Refused, SpoolIOError
from onite.spool.paths import SpoolDir
from onite.spool.queued import find_queued
from onite.spool.scan import find_running, running_entries, user_name


def refuse_taken(spool: SpoolDir, names: Sequence[str], uid: int) -> None:
    """Every check of a new job's name for user ``uid``: not queued or running, not another user's
    finished job's while its result is kept, not another user's recurring job's run.

    Raises:
        Refused: a name that is taken, saying whose it is.
    """
    refuse_duplicates(spool, list(names))
    refuse_finished_of_others(spool, names, uid)
    refuse_run_names(spool, names, uid)


def refuse_duplicates(spool: SpoolDir, names: list[str]) -> None:
    """``refuse_duplicate`` for many names; a big batch lists each folder once instead.

    Raises:
        Refused: one of the names is queued or running.
    """
    if len(names) < 64:
        for name in names:
            refuse_duplicate(spool, name)
        return
    wanted = set(names)
    for rank, folder in spool.queue_folders():
        try:
            with os.scandir(folder) as it:
                taken = wanted.intersection(entry.name for entry in it)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise SpoolIOError(folder, "listing", err) from None
        if taken:
            refuse_duplicate(spool, min(taken))
    for entry in running_entries(spool):
        if entry.name in wanted:
            refuse_duplicate(spool, entry.name)


def refuse_duplicate(spool: SpoolDir, name: str) -> None:
    """Raises:
        Refused: a job of this name is queued or running.
    """
    for entry in find_queued(spool, name):
        where = "urgent" if entry.rank == 0 else f"P{entry.rank}"
        raise Refused(f"a job named {name!r} is already queued ({where}, {user_name(entry.uid)})",
                      "pick another name, or use --unique")
    for entry in find_running(spool, name):
        raise Refused(f"a job named {name!r} is running now (on {entry.host}, {user_name(entry.uid)})",
                      "pick another name, or use --unique")


def refuse_finished_of_others(spool: SpoolDir, names: Sequence[str], uid: int) -> None:
    """Refuse the name of another user's finished job while its result is kept: a run of the name
    would replace that result and its output, and the owner would find in the morning only
    someone else's job under it. The name is free again once retention removes the result (or
    for its owner at once: their next run replaces their own).

    Raises:
        Refused: such a name.
    """
    if len(names) >= 64:  # a big batch lists jobsdone/ once instead of trying each name
        try:
            kept = set(os.listdir(spool.done_dir))
        except OSError as err:
            raise SpoolIOError(spool.done_dir, "listing", err) from None
        names = [name for name in names if spool.result_path(name).name in kept]
    else:  # the common case, a new name, costs a look and no import of the results' modules
        names = [name for name in names if os.path.lexists(spool.result_path(name))]
    if not names:
        return
    from onite.spool.results import kept_owner

    for name in names:
        owner = kept_owner(spool, name)
        if owner is not None and owner[0] != uid:
            raise Refused(f"job {name!r} is {user_name(owner[0])}'s: it has finished and its result is kept",
                          "pick another name, or use --unique")


def refuse_run_names(spool: SpoolDir, names: Sequence[str], uid: int) -> None:
    """Refuse now what the driver would refuse at night: the name of another user's recurring job's
    run at a time its rule fires (onite.spool.recurstate.run_name_owner). Templates are private:
    what recur.state (root's, public) says of a template that has fired once is what is known here.

    Raises:
        Refused: such a name.
    """
    shaped = [name for name in names if "T" in name and "-" in name]
    if not shaped:
        return  # no run's shape: the common case costs no import
    from onite.core.recurring import is_run_of, rule_from_state, template_of
    from onite.spool.recurstate import load_state

    state = None
    for name in shaped:
        template = template_of(name)
        if template is None:
            continue
        if state is None:
            state = load_state(spool)
        known = state.get(template)
        if not known or known.get("uid") == uid or not os.path.lexists(spool.recur_dir / template):
            continue
        rule, owner = rule_from_state(known), known.get("uid")
        if rule is not None and isinstance(owner, int) and is_run_of(rule, template, name):
            raise Refused(f"{name!r} is the name of {user_name(owner)}'s recurring job {template}'s run at that time",
                          "a recurring job's run names are its owner's: choose another name, or use --unique")


def dependency_problem(spool: SpoolDir, name: str, uid: int) -> str | None:
    """Why a job of user ``uid`` cannot be spooled ``--after name``, or None if it can: the user's own
    job of that name (``USER:NAME``: USER's) is queued, running, withdrawn or kept (onite.spool.deps).

    Raises:
        SpoolIOError: the spool cannot be looked into.
    """
    from onite.core.names import split_dependency
    from onite.core.queue import DepState
    from onite.spool.deps import dependency_of, dependency_state, name_owner

    user, job = split_dependency(name)
    owner = dependency_of(name, uid)[1]
    if owner is None:
        return f"no user {user!r} (--after {name})"
    state = dependency_state(spool, job, owner)
    of = f" of {user}'s" if user is not None else ""
    if state is DepState.MISSING:
        return f"no job {job!r}{of} is queued, running or finished"
    if state is DepState.FOREIGN:
        owner = name_owner(spool, job)
        whose = f"{user_name(owner)}'s" if owner is not None else "another user's"
        if user is not None:
            return f"job {job!r} is {whose}, not {user}'s"
        return f"job {job!r} is {whose}: a job waits only for its own user's jobs (USER:NAME for another's)"
    return None
