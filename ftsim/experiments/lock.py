"""One writer per output folder.

``run`` and ``sweep`` hold an exclusive lock on their output folder while they compute and
write, so that two processes never mix their results in one folder: the second is refused
with a message naming the folder and the first one's process id. The lock is an advisory
``flock`` on a hidden file in the folder (released by the kernel if the holder dies, however
it dies), holding the holder's pid; the file is removed when the lock is released, so a
folder looks as it did. A folder created for the lock and left holding nothing else (the
command failed or was interrupted before writing anything) is removed too. Whoever
acquires the lock first completes what a killed holder left half-moved
(:func:`ftsim.experiments.output.recover`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ftsim.experiments import interrupts
from ftsim.experiments.folders import FolderError, make_writable_folder
from ftsim.experiments.output import COMMIT, recover

LOCK = ".ftsim.lock"
"""The lock file's name inside a locked folder."""


@contextmanager
def locked_folder(folder: Path, create: bool = True) -> Iterator[Path]:
    """Hold ``folder`` for writing (created first with ``create``; without, a missing folder
    is not held, and the block reports it); FolderError naming the holder if another
    process holds it. Signals wait while the folder is created and locked, so that a
    folder this made is removed again whenever the command stops leaving it empty."""
    folder = Path(folder)
    if not create and not folder.is_dir():
        yield folder
        return
    created = create and not folder.exists()
    fd = None
    try:
        with interrupts.deferred():
            if create:
                make_writable_folder(folder)
            fd = _acquire(folder)
        recover(folder)
        yield folder
    finally:
        try:
            if fd is not None:
                (folder / LOCK).unlink(missing_ok=True)
            if created and folder.is_dir() and not any(folder.iterdir()):
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass  # the lock itself goes with the descriptor
        if fd is not None:
            os.close(fd)


def settle(folder: Path) -> None:
    """Complete what a writer of ``folder`` killed while moving its results left
    (:func:`~ftsim.experiments.output.recover`), holding the folder meanwhile; for a
    reader. Nothing is locked when nothing was left: a read-only folder can be read."""
    folder = Path(folder)
    if (folder / COMMIT).is_dir():
        with locked_folder(folder, create=False):
            pass


def writer(folder: Path) -> str | None:
    """Whether another process holds ``folder`` for writing: `` (pid N)`` (or '' without a
    pid) if so, None if not. For a reader, which waits for nothing."""
    try:
        fd = os.open(Path(folder) / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _holder(fd)
    else:
        return None
    finally:
        os.close(fd)


def _acquire(folder: Path) -> int:
    """An open descriptor of ``folder``'s lock file holding its exclusive lock."""
    path = folder / LOCK
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise FolderError(f"{folder}: cannot write in this folder ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise FolderError(f"{folder}: cannot lock the folder ({exc.strerror})") from None
            raise FolderError(
                f"{folder}: in use by another ftsim process{holder}, which writes its results "
                "there; wait until it ends, or choose another folder"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file its previous holder unlinked after we opened it
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        pass  # a full disk: the lock holds without the pid
    return fd


def _holder(fd: int) -> str:
    """`` (pid N)`` from the lock file, or nothing if it holds no pid (yet)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {text})" if text.isdigit() else ""
