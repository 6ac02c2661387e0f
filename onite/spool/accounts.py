"""The account database as the spool's messages need it: a uid's account name."""

from __future__ import annotations

import pwd


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
