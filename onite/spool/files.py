"""Every write and move of a file in a spool: all or nothing, never half a job, never a lost one.

A job's state is the folder its file is in, and every change of state is one rename(2) (``change_state``),
so a crash leaves each job in exactly one state. A new file is written under a dot-name (which listings
skip), fsync'ed, then named with renameat2(RENAME_NOREPLACE), or link(2) where there is none: nobody sees
half a job and no job replaces another. Its ctime is its place in the queue (onite.core.queue): a user may
edit their own job file, so nothing in it decides order, owner or rights. Records the driver owns (results,
heartbeats, state files) are replaced atomically (``replace_file``).
"""

from __future__ import annotations

import errno
import functools
import os
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from onite.core.errors import NotFound, OniteError, Refused, SpoolError, SpoolIOError
from onite.core.names import SIDE

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
AT_FDCWD = -100
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP)  # NFS and friends: link and unlink instead
DISPLACE_TRIES = 100  # a name that a user's file keeps taking and giving back between two system calls
BATCH_CHUNK = 512  # files made durable together by one syncfs(2) before they are named


def discard(path: Path | str) -> None:
    with suppress(OSError):
        os.unlink(path)


def token() -> str:
    return f"{os.getpid()}.{os.urandom(4).hex()}"


def create_marker(folder: Path, name: str, action: str, owner: tuple[int, int] | None = None) -> Path:
    """Create an empty ``folder/NAME@TOKEN`` (a hold, a cancel request), mode 0644. Raises SpoolError, SpoolIOError."""
    path = folder / f"{name}{SIDE}{token()}"
    _write_new(str(path), path, b"", 0o644, owner, False, action)
    return path


def _taken(path: Path | str) -> Refused:
    return Refused(f"{path} already exists", "pick another name (or use --unique)")


def create_file(folder: Path, name: str, data: bytes, *, mode: int = 0o600,
                owner: tuple[int, int] | None = None) -> os.stat_result:
    """Create ``folder/name`` holding ``data``, durably, never replacing a file; the file as made.
    Raises Refused: the name exists; SpoolError, SpoolIOError."""
    tmp = write_unnamed(folder, name, data, mode, owner, durable=True)
    made = _link_name(tmp, folder, name)
    fsync_dir(folder)
    return made


def create_displacing(folder: Path, name: str, data: bytes, uid: int, *, mode: int = 0o600,
                      owner: tuple[int, int] | None = None, durable: bool = True) -> str | None:
    """Create ``folder/name``, ``uid``'s job (a retry, a recurring run): a forgery at the name is exchanged
    with it in one step (RENAME_EXCHANGE), so no one can keep the key by putting a file back as it is moved
    aside. Returns the forgery's new path (a dot-name, for the caller to set aside), or None.
    Raises Refused: ``uid``'s own file has the name, or a forgery cannot be exchanged (NFS) or
    keeps changing; SpoolIOError."""
    tmp = write_unnamed(folder, name, data, mode, owner, durable=durable)
    final = f"{folder}/{name}"
    try:
        for _ in range(DISPLACE_TRIES):
            try:
                if not rename_noreplace(tmp, final):
                    _link_name(tmp, folder, name)  # no renameat2 here: a name taken is refused
                tmp = None
                return None
            except FileExistsError:
                pass
            except OSError as err:
                raise SpoolIOError(Path(final), "writing", err) from None
            try:
                there = os.lstat(final)
            except FileNotFoundError:
                continue
            if there.st_uid == uid:
                raise _taken(final)
            try:
                exchanged = rename_exchange(tmp, final)
            except OSError as err:
                raise SpoolIOError(Path(final), "writing", err) from None
            if exchanged is None:
                raise _taken(final)
            if exchanged:
                displaced, tmp = tmp, None
                return displaced
        raise Refused(f"{final} kept being taken", "try again")
    finally:
        if tmp is not None:
            discard(tmp)
        elif durable:
            fsync_dir(folder)


def create_batch(files: Iterable[tuple[Path, str, bytes]]) -> list[os.stat_result]:
    """Create each ``(folder, name, data)`` in order, mode 0600, as ``create_file`` does; the files as made.

    An fsync each would cost more than the rest of a submit, so each chunk is written under dot-names,
    made durable together, then named in order (ctimes never decrease). On an error the files named stay
    (those written before a failed write are named first) and the other dot-names go.
    Raises Refused, SpoolError, SpoolIOError, with ``created``: how many were made before it."""
    made: list[os.stat_result] = []
    folders: dict[Path, None] = {}
    pending: deque[tuple[str, Path, str]] = deque()  # (tmp path, folder, name) written, not yet named
    try:
        for folder, name, data in files:
            folders.setdefault(folder)
            try:
                pending.append((write_unnamed(folder, name, data, 0o600, None), folder, name))
            except SpoolIOError:
                _name_durably(pending, made)
                raise
            if len(pending) >= BATCH_CHUNK:
                _name_durably(pending, made)
        _name_durably(pending, made)
    except OniteError as err:
        err.created = len(made)
        raise
    finally:
        for tmp, _, _ in pending:
            discard(tmp)
        for folder in folders:
            fsync_dir(folder)
    return made


def _name_durably(pending: deque[tuple[str, Path, str]], made: list[os.stat_result]) -> None:
    _make_durable([tmp for tmp, _, _ in pending])
    while pending:
        made.append(_link_name(*pending[0]))
        pending.popleft()


def write_unnamed(folder: Path, name: str, data: bytes, mode: int, owner: tuple[int, int] | None, *,
                  durable: bool = False) -> str:
    tmp = f"{folder}/.{name}.{os.getpid()}.{os.urandom(3).hex()}.tmp"
    _write_new(tmp, folder / name, data, mode, owner, durable, "writing")
    return tmp


def _write_new(path: str, shown: Path, data: bytes, mode: int, owner: tuple[int, int] | None, durable: bool,
               action: str) -> None:
    """Create ``path`` (``shown`` or its dot-name) holding ``data``, never through a link or over a file;
    removed on any failure. Raises SpoolError: no folder; SpoolIOError."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise SpoolError(f"no folder {shown.parent}", "run onite init to create the spool's folders") from None
    except OSError as err:
        raise SpoolIOError(shown, action, err) from None
    written = False
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        write_all(fd, data)
        os.fchmod(fd, mode)  # not what the umask made of it
        if durable:
            os.fsync(fd)
        written = True
    except OSError as err:
        raise SpoolIOError(shown, action, err) from None
    finally:
        os.close(fd)
        if not written:
            discard(path)


def read_small(path: Path | str, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``path``, never through a symlink nor waiting on a fifo or a lease. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: one write(2) (atomic against other appends with O_APPEND) unless short."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _make_durable(paths: list[str]) -> None:
    """Flush freshly written files to disk: one syncfs(2) for all, else an fsync each."""
    syncfs = _libc("syncfs")
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            if syncfs is not None and syncfs(fd) == 0:
                return
            syncfs = None
            os.fsync(fd)
        except OSError as err:
            raise SpoolIOError(path, "flushing", err) from None
        finally:
            os.close(fd)


def _link_name(tmp: str, folder: Path, name: str) -> os.stat_result:
    """Name the dot-name without replacing a file: RENAME_NOREPLACE, else link then unlink (a driver that
    sees the second link waits: filecheck.SETTLING); the file as made. Raises Refused, SpoolIOError."""
    final = folder / name
    try:
        made = os.lstat(tmp)  # the writer's own dot-name: in a sticky folder no one else can swap it
        if rename_noreplace(tmp, str(final)):
            return made
        os.link(tmp, final)
    except FileExistsError:
        discard(tmp)
        raise _taken(final) from None
    except OSError as err:
        discard(tmp)
        raise SpoolIOError(final, "writing", err) from None
    discard(tmp)
    return made


@functools.cache
def _libc(name: str):
    """The C library's ``name`` (syncfs, renameat2: not in the os module), or None where it has none."""
    try:
        import ctypes

        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (ImportError, OSError, AttributeError):
        return None


def _renameat2(src: str, dst: str, flags: int) -> bool:
    """renameat2(2): True if done, False where the C library or file system has no such call. Raises OSError."""
    call = _libc("renameat2")
    if call is None:
        return False
    import ctypes

    if call(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), dst)


def rename_noreplace(src: str, dst: str) -> bool:
    """rename(2) that never replaces ``dst`` (FileExistsError); False where it cannot be done (link instead)."""
    return _renameat2(src, dst, RENAME_NOREPLACE)


def rename_exchange(a: str, b: str) -> bool | None:
    """Swap ``a`` and ``b`` in one step; False if ``b`` is gone, None where that cannot be done (NFS).
    Raises OSError."""
    try:
        return _renameat2(a, b, RENAME_EXCHANGE) or None
    except FileNotFoundError:
        return False


def fsync_dir(folder: Path) -> None:
    """Make the names in ``folder`` durable; a file system that cannot fsync a folder is let be."""
    with suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_file(path: Path, data: bytes, *, mode: int = 0o644, owner: tuple[int, int] | None = None,
                 durable: bool = False) -> None:
    """Replace ``path`` atomically: a dot-name no one can guess or plant, then a rename; ``durable``: flushed
    first. Raises SpoolError: no folder; SpoolIOError."""
    tmp = write_unnamed(path.parent, path.name, data, mode, owner, durable=durable)
    try:
        os.rename(tmp, path)
    except OSError as err:
        discard(tmp)
        raise SpoolIOError(path, "writing", err) from None


def move_file(src: Path, dst: Path, action: str) -> None:
    """One rename within the spool. Raises NotFound: ``src`` is gone (another driver or a cancel got
    there first); SpoolError: a folder of the spool is missing; SpoolIOError."""
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        if not src.parent.exists() or not dst.parent.exists():
            raise SpoolError(f"{action}: a folder of the spool is missing ({src.parent} or {dst.parent})",
                             "run onite init to repair the spool") from None
        raise NotFound(f"{src.name} is no longer in {src.parent}", "another driver or a cancel moved it") from None
    except OSError as err:
        raise SpoolIOError(src, action, err) from None


def change_state(name: str, old, new, src: Path, dst: Path, action: str) -> None:
    """The rename of job ``name`` from state ``old`` to ``new``: every change of state goes here.
    Raises InvalidTransition: no edge of onite.core.state (nothing moved); else as move_file."""
    from onite.core.state import check_transition  # not at import: a submit never changes a state

    check_transition(name, old, new)
    move_file(src, dst, action)


def remove_file(path: Path | str) -> bool:
    """Unlink ``path``; False if it was already gone (or is a folder). Raises SpoolIOError."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno == errno.EISDIR:
            return False
        raise SpoolIOError(path, "removing", err) from None
