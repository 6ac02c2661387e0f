"""Every write and move of a file in a spool: all or nothing, never half a job, never a lost one.

- A job's state is the folder its file is in, and every change of state is
  one rename(2) within the spool's file system (``change_state``, checked
  against the state machine of onite.core.state first), so a crash at any
  instant leaves each job in exactly one state.
- A new file is written under a dot-name in its target folder, fsync'ed,
  then given its real name with renameat2(RENAME_NOREPLACE), or link(2)
  where the file system has no such rename, neither of which replaces an
  existing file; then the dot-name is removed: nobody ever sees half a job,
  and two jobs of one name can never overwrite each other. Listings skip
  dot-names.
- Order within a folder comes from the kernel: the inode change time
  (ctime) that the final rename or link stamped (onite.core.queue). A user
  owns (and may edit) their own job file, so nothing written inside it
  decides order, owner or rights; editing a job can only move it to the
  back of its queue.
- Records the driver owns (results, heartbeats, state files) are replaced
  atomically (``replace_file``: a dot-name, then rename).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from onite.core.errors import NotFound, OniteError, Refused, SpoolError, SpoolIOError


def discard(path: Path | str) -> None:
    """Unlink ``path`` if it is there; any error is ignored (a dot-name a failed write leaves)."""
    try:
        os.unlink(path)
    except OSError:
        pass


# ---- writing jobs ------------------------------------------------------------


def create_file(folder: Path, name: str, data: bytes, *, mode: int = 0o600,
                owner: tuple[int, int] | None = None, durable: bool = True) -> Path:
    """Create ``folder/name`` holding ``data``, all or nothing, never replacing a file.

    The file is written under a dot-name (``.name.PID.RANDOM.tmp``), flushed, then linked to its
    name and the dot-name removed. On any failure nothing is left behind.

    Raises:
        Refused: ``folder/name`` already exists.
        SpoolIOError: the write failed (full disk, file-size limit, permissions, …).
    """
    tmp = _write_unnamed(folder, name, data, mode, owner, durable=durable)
    _link_name(tmp, folder, name)
    if durable:
        fsync_dir(folder)
    return folder / name


DISPLACE_TRIES = 100  # a name that a user's file keeps taking and giving back between two system calls


def create_displacing(folder: Path, name: str, data: bytes, uid: int, *, mode: int = 0o600,
                      owner: tuple[int, int] | None = None, durable: bool = True,
                      since_ns: int | None = None) -> str | None:
    """Create ``folder/name`` as ``create_file`` does, for a job of ``uid`` whose name is its own (a
    retry while its claim holds the name, a recurring job's run): a file of the name that is not
    ``uid``'s, put in the queue by hand, is exchanged with the new file in one step
    (renameat2(RENAME_EXCHANGE)), so that no user can keep the name by putting a file back the
    moment it is moved aside. ``since_ns``: only a file put there after this time (its ctime) is
    displaced; an older one keeps the name. Return the path (a dot-name in ``folder``) where what
    was displaced now is, for the caller to set aside; None if the name was free.

    Raises:
        Refused: a file of ``uid``'s own has the name, or one older than ``since_ns``; or the name
            is taken and the file system cannot exchange (NFS), or it kept changing.
        SpoolIOError: the write failed.
    """
    tmp = _write_unnamed(folder, name, data, mode, owner, durable=durable)
    final = f"{folder}/{name}"
    try:
        for _ in range(DISPLACE_TRIES):
            try:
                if not _rename_noreplace(tmp, final):
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
            if there.st_uid == uid or (since_ns is not None and there.st_ctime_ns <= since_ns):
                raise Refused(f"{final} already exists", "pick another name (or use --unique)")
            try:
                exchanged = _rename_exchange(tmp, final)
            except OSError as err:
                raise SpoolIOError(Path(final), "writing", err) from None
            if exchanged:
                displaced, tmp = tmp, None
                return displaced
        raise Refused(f"{final} kept being taken", "try again")
    finally:
        if tmp is not None:
            discard(tmp)
        elif durable:
            fsync_dir(folder)


BATCH_CHUNK = 512  # files made durable together by one syncfs(2) before they are given their names


def create_batch(files: Iterable[tuple[Path, str, bytes]], *, owner: tuple[int, int] | None = None) -> int:
    """Create each ``(folder, name, data)`` in order, mode 0600, as ``create_file`` does one; return how many.

    Each file is all or nothing and never replaces another, as with
    ``create_file``; the files get their names in the order given, so their
    ctimes never decrease along the batch. What differs is durability: one
    fsync per file costs more than everything else a submit does, so a
    chunk of files is written under dot-names, made durable together
    (syncfs(2) where it exists, else an fsync each), and only then linked to
    their names, one by one; each folder is fsync'ed once at the end. On any
    error or interruption the dot-names of files not yet named are removed:
    the files before the failure stay created, the others were never seen.
    A file that cannot be written (a full disk) is such a failure: the files
    of its chunk written before it are still made durable and named.

    Raises:
        Refused: a name already exists (``created`` on the error: how many were made before it).
        SpoolError, SpoolIOError: a write failed (``created`` likewise).
    """
    created = 0
    folders: dict[Path, None] = {}
    pending: list[tuple[str, Path, str]] = []  # (tmp path, folder, name) written, not yet named
    chunk = iter(files)
    try:
        while True:
            failed = None
            for folder, name, data in chunk:
                folders.setdefault(folder)
                try:
                    pending.append((_write_unnamed(folder, name, data, 0o600, owner), folder, name))
                except SpoolIOError as err:
                    failed = err  # a full disk: the files written before it still get their names
                    break
                if len(pending) >= BATCH_CHUNK:
                    break
            if pending:
                _make_durable([tmp for tmp, _, _ in pending])
                for tmp, folder, name in pending:
                    _link_name(tmp, folder, name)
                    created += 1
                pending.clear()
            elif failed is None:
                break
            if failed is not None:
                raise failed
    except OniteError as err:
        err.created = created
        raise
    finally:
        for tmp, _, _ in pending:
            discard(tmp)
        for folder in folders:
            fsync_dir(folder)
    return created


def _write_unnamed(folder: Path, name: str, data: bytes, mode: int, owner: tuple[int, int] | None, *,
                   durable: bool = False) -> str:
    """Write ``data`` under a dot-name in ``folder`` (flushed to disk if ``durable``); return that path.
    On any failure, an interrupt included, the dot-name is removed."""
    tmp = f"{folder}/.{name}.{os.getpid()}.{os.urandom(3).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise SpoolError(f"no folder {folder}", "run onite init to create the spool's folders") from None
    except OSError as err:
        raise SpoolIOError(folder, "creating a job in", err) from None
    written = False
    try:
        _fill(fd, data, mode, owner, durable)
        written = True
    except OSError as err:
        raise SpoolIOError(folder / name, "writing", err) from None
    finally:
        os.close(fd)
        if not written:
            discard(tmp)
    return tmp


def _fill(fd: int, data: bytes, mode: int, owner: tuple[int, int] | None, durable: bool) -> None:
    """Give a fresh file its owner, all of ``data`` and its mode (whatever the umask made of it),
    and flush it if ``durable``. Raises OSError."""
    if owner is not None:
        os.fchown(fd, *owner)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fchmod(fd, mode)
    if durable:
        os.fsync(fd)


def _make_durable(paths: list[str]) -> None:
    """Flush the data of freshly written files to disk: one syncfs(2) for all, else an fsync each."""
    syncfs = _syncfs()
    if syncfs is not None:
        fd = os.open(paths[0], os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        except OSError as err:
            raise SpoolIOError(path, "flushing", err) from None
        finally:
            os.close(fd)


_SYNCFS: list = []


def _syncfs():
    """libc's syncfs(fd), or None where there is none (it is not in the os module)."""
    if not _SYNCFS:
        try:
            import ctypes

            _SYNCFS.append(ctypes.CDLL(None, use_errno=True).syncfs)
        except (ImportError, OSError, AttributeError):
            _SYNCFS.append(None)
    return _SYNCFS[0]


def _link_name(tmp: str, folder: Path, name: str) -> None:
    """Give the written dot-name its real name, never replacing a file: renameat2(RENAME_NOREPLACE)
    where the file system has it (one step: the job never has two links), else link then unlink
    (a driver that sees the second link waits a moment for the unlink: filecheck.SETTLING).

    Raises:
        Refused: the name exists. SpoolIOError: any other failure.
    """
    final = folder / name
    try:
        if _rename_noreplace(tmp, str(final)):
            return
        os.link(tmp, final)
    except FileExistsError:
        discard(tmp)
        raise Refused(f"{final} already exists", "pick another name (or use --unique)") from None
    except OSError as err:
        discard(tmp)
        raise SpoolIOError(final, "writing", err) from None
    discard(tmp)


_RENAMEAT2: list = []
RENAME_NOREPLACE = 1
AT_FDCWD = -100


def _renameat2():
    """The C library's renameat2, or None where it has none (looked up once)."""
    if not _RENAMEAT2:
        try:
            import ctypes

            _RENAMEAT2.append(ctypes.CDLL(None, use_errno=True).renameat2)
        except (ImportError, OSError, AttributeError):
            _RENAMEAT2.append(None)
    return _RENAMEAT2[0]


def _rename_noreplace(src: str, dst: str) -> bool:
    """rename(2) that fails with FileExistsError instead of replacing ``dst``; False where the
    file system or the C library cannot (then the caller links and unlinks).

    Raises:
        FileExistsError: ``dst`` exists. OSError: any other failure of the rename itself.
    """
    call = _renameat2()
    if call is None:
        return False
    import ctypes

    if call(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # NFS and friends: link and unlink instead
        return False
    raise OSError(code, os.strerror(code), dst)


RENAME_EXCHANGE = 2


def _rename_exchange(a: str, b: str) -> bool:
    """Swap the entries ``a`` and ``b`` in one step; False if ``b`` is gone meanwhile.

    Raises:
        Refused: the file system (or the C library) cannot exchange. OSError: any other failure.
    """
    call = _renameat2()
    if call is None:
        raise Refused(f"{b} already exists", "pick another name (or use --unique)")
    import ctypes

    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.ENOENT:
        return False
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        raise Refused(f"{b} already exists", "pick another name (or use --unique)")
    raise OSError(code, os.strerror(code), b)


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, *, mode: int = 0o644, owner: tuple[int, int] | None = None,
                 durable: bool = False) -> os.stat_result:
    """Write ``path`` atomically (dot-name, then rename), replacing it if it exists: records the
    driver owns, and with ``durable`` (flushed before the rename) the spool's own files. Returns
    the file's stat as written (the rename changes its ctime only).

    Raises:
        SpoolIOError: the write failed.
    """
    folder, _, name = str(path).rpartition("/")
    tmp = f"{folder}/.{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _fill(fd, data, mode, owner, durable)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError as err:
        discard(tmp)
        raise SpoolIOError(path, "writing", err) from None
    return st



def move_file(src: Path, dst: Path, action: str) -> None:
    """One atomic rename within the spool.

    Raises:
        NotFound: ``src`` is gone (another driver or a cancel got there first).
        SpoolIOError: any other failure.
    """
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
    """The one rename that moves job ``name`` from state ``old`` to ``new``, along an edge of the
    state machine (onite.core.state): every change of a job's state goes through here.

    Raises:
        InvalidTransition: ``old → new`` is no edge (a bug in the caller; nothing was moved).
        NotFound, SpoolError, SpoolIOError: as move().
    """
    from onite.core.state import check_transition

    check_transition(name, old, new)
    move_file(src, dst, action)



def remove_file(path: Path | str) -> bool:
    """Unlink ``path``; False if it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno == errno.EISDIR:
            return False
        raise SpoolIOError(path, "removing", err) from None
