"""Users as the account database knows them, as onite.core.identity.Identity: a uid, or the caller."""

from __future__ import annotations

import functools
import grp
import os
import pwd
from contextlib import suppress

from onite.core.errors import Refused
from onite.core.identity import Identity


def resolve(uid: int) -> Identity:
    """The account behind ``uid``; Refused if it has none (a file of a deleted or made-up uid)."""
    entry = _passwd(uid)
    try:
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = (entry.pw_gid,)
    return _identity(entry, groups)


def current() -> Identity:
    """The calling process's own account, with the groups it holds now; Refused if it has none."""
    return _identity(_passwd(os.geteuid()), tuple(dict.fromkeys((os.getegid(), *os.getgroups()))))


def _passwd(uid: int) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        raise Refused(f"uid {uid} has no account on this machine", "jobs run only as real users") from None


def _identity(entry: pwd.struct_passwd, groups: tuple[int, ...]) -> Identity:
    return Identity(uid=entry.pw_uid, gid=entry.pw_gid, name=entry.pw_name, home=entry.pw_dir,
                    shell=entry.pw_shell or "/bin/sh", groups=groups, group_names=functools.partial(_group_names, groups))


def _group_names(gids: tuple[int, ...]) -> list[str]:
    names = []
    for gid in gids:
        with suppress(KeyError):
            names.append(grp.getgrgid(gid).gr_name)
    return names
