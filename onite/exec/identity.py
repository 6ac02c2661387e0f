"""Users as the system's account database knows them.

A job's owner is the uid the kernel recorded on its file; this module turns
that uid into the credentials the job runs with (uid, primary gid,
supplementary groups) and the four variables that a login would set from
the passwd entry (HOME, USER, LOGNAME, SHELL), which override whatever the
job file says.
"""

from __future__ import annotations

import grp
import os
import pwd
from typing import NamedTuple

from onite.core.errors import Refused


class Identity(NamedTuple):
    """A user account: the credentials a job of theirs runs with."""

    uid: int
    gid: int
    name: str
    home: str
    shell: str
    groups: tuple[int, ...]

    def login_env(self) -> dict[bytes, bytes]:
        """What a login sets from the passwd entry; it overrides the captured environment."""
        name = os.fsencode(self.name)
        return {b"HOME": os.fsencode(self.home), b"USER": name, b"LOGNAME": name, b"SHELL": os.fsencode(self.shell)}

    def group_names(self) -> list[str]:
        names = []
        for gid in self.groups:
            try:
                names.append(grp.getgrgid(gid).gr_name)
            except KeyError:
                pass
        return names


def resolve(uid: int) -> Identity:
    """The account behind ``uid``.

    Raises:
        Refused: no passwd entry (a file owned by a deleted or made-up uid).
    """
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        raise Refused(f"uid {uid} has no account on this machine", "jobs run only as real users") from None
    try:
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = (entry.pw_gid,)
    return Identity(
        uid=uid,
        gid=entry.pw_gid,
        name=entry.pw_name,
        home=entry.pw_dir,
        shell=entry.pw_shell or "/bin/sh",
        groups=groups,
    )


def current() -> Identity:
    """The calling process's own account, with the groups it holds now (os.getgroups: no walk of
    the group database, which ``getgrouplist`` costs on every submit).

    Raises:
        Refused: the effective uid has no passwd entry.
    """
    uid = os.geteuid()
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        raise Refused(f"uid {uid} has no account on this machine", "jobs run only as real users") from None
    return Identity(uid=uid, gid=entry.pw_gid, name=entry.pw_name, home=entry.pw_dir, shell=entry.pw_shell or "/bin/sh",
                    groups=tuple(dict.fromkeys((os.getegid(), *os.getgroups()))))
