"""onite from Python, without a process per job (docs/user-guide.md). A job runs with the calling process's
environment, directory and umask unless ``env`` or ``cwd`` say otherwise; errors are the command line's OniteErrors."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from onite.core.errors import OniteError

__all__ = ["OniteError", "Spool"]


class Spool:
    """A spool to submit jobs to (created on first use if it is your personal default one)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        from onite.app.common import open_spool

        self._spool = open_spool(os.fspath(path) if path is not None else None)

    def submit(self, name: str, text: str | bytes, *, unique: bool = False, env: Mapping | None = None,
               cwd: str | bytes | None = None, **options) -> str:
        """Spool one job; return its name (with ``unique``, NAME plus a unique suffix). ``options``: those of
        ``onite submit`` (priority, urgent, after, at, timeout, retries, host, hold, stderr_separate, notify, …);
        it fails as ``onite submit`` would."""
        from onite.app.submit import spool_job
        from onite.core.names import split_key
        from onite.exec import identity

        request = _request(name, text, options, unique=unique)
        return split_key(spool_job(self._spool, request, _captured(env, cwd), identity.current()).name)[1]

    def submit_many(self, jobs: Iterable[tuple[str, str | bytes]], *, env: Mapping | None = None,
                    cwd: str | bytes | None = None, **options) -> list[str]:
        """Spool ``(name, text)`` pairs as one batch with the same options (``after`` may name a job earlier in
        it): all checked before any is written, then written in order, each all or nothing, with one flush to disk
        for many; return the names. If writing stops part way, the error says how many were spooled."""
        from onite.app.submit import submit_many
        from onite.core.names import split_key
        from onite.exec import identity

        texts = [(name, _bytes(text)) for name, text in jobs]
        spooled = submit_many(self._spool, _request("", b"", options), texts, _captured(env, cwd), identity.current())
        return [split_key(job.name)[1] for job in spooled]

    def find(self, name: str) -> bool:
        """Is a job of this name queued or running?"""
        from onite.app.common import key_for
        from onite.spool.scan import is_live

        self._spool.check()
        return is_live(self._spool, key_for(name))


def _request(name: str, text: str | bytes, options: dict, *, unique: bool = False):
    from onite.core.request import SubmitRequest

    if "unique" in options:
        raise TypeError("unique is an argument of submit, not an option of a job")
    return SubmitRequest.of(name, _bytes(text), dict(options, unique=unique))


def _bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)


def _captured(env: Mapping | None, cwd: str | bytes | None):
    from onite.app.submit import capture
    from onite.core.clock import SYSTEM

    return capture(SYSTEM.now(), env=None if env is None else {os.fsencode(k): os.fsencode(v) for k, v in env.items()},
                   cwd=None if cwd is None else os.fsencode(os.path.abspath(cwd)))
