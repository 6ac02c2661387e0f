"""A user account as a job runs under it (pure: onite.exec.identity asks the account database).

What a login sets from the passwd entry overrides the job file's environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from onite.core.record import Record


class Identity(Record):
    """A user account: the credentials a job of theirs runs with."""

    uid: int
    gid: int
    name: str
    home: str
    shell: str
    groups: tuple[int, ...]
    #: the names of ``groups``, looked up only when called (only a ``%group`` in ``admins`` needs them)
    group_names: Callable[[], Iterable[str]] = tuple

    def in_group(self, gid: int) -> Identity:
        """This account with ``gid`` as its group where it is one of its groups now (a job spooled after newgrp
        or sg: its file has the submitter's group, and at(1) and sbatch keep it too), else as it is."""
        return self._replace(gid=gid) if gid in self.groups else self

    def login_env(self) -> dict[bytes, bytes]:
        """What a login sets from the passwd entry; it overrides the captured environment."""
        name = os.fsencode(self.name)
        return {b"HOME": os.fsencode(self.home), b"USER": name, b"LOGNAME": name, b"SHELL": os.fsencode(self.shell)}
