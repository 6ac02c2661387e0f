"""A user account as a job runs under it (onite.exec.identity asks the account database)."""

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
        """With ``gid`` as its group where it is one of its groups (a job spooled after newgrp, as at(1) keeps it)."""
        return self._replace(gid=gid) if gid in self.groups else self

    def login_env(self) -> dict[bytes, bytes]:
        """What a login sets from the passwd entry; it overrides the captured environment."""
        name = os.fsencode(self.name)
        return {b"HOME": os.fsencode(self.home), b"USER": name, b"LOGNAME": name, b"SHELL": os.fsencode(self.shell)}
