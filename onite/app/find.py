"""``onite find NAME``: is a job of this name queued or running? Scripts ask it in loops, so it
imports only what it reads (not the cancel and hold machinery of onite.app.control)."""

from __future__ import annotations

from onite.app.common import key_for
from onite.spool.paths import SpoolDir
from onite.spool.scan import is_live


def find(spool: SpoolDir, name: str) -> bool:
    """Is job ``name`` (NAME: the caller's, or USER:NAME) queued or running (any host)?

    Raises:
        InvalidInput: a bad name.
    """
    return is_live(spool, key_for(name))
