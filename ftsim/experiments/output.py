"""Writing results: atomic files (temp file + rename), staged folders, tidy CSV and Parquet,
manifests; the one place where a failed write becomes an error message.

A reader never sees a half-written file: each file is written to a temporary name in the
same folder, flushed to disk, then renamed over the target. A folder of results is written
into a hidden staging folder inside it and moved into place at the end, the manifest last
(:class:`StagedFolder`), so a full disk or an interrupt leaves the earlier folder as it was,
and even a process killed outright (SIGKILL) while moving files leaves a state that the next
command holding the folder completes (:func:`complete_commit`). Every write goes through
:func:`writing`, which turns an ``OSError`` (no space left, a read-only file system, no
permission) into an :class:`OutputError` naming the path and the reason: one located line,
exit status 2.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from ftsim.experiments import interrupts
from ftsim.notices import Notice

_UMASK = os.umask(0)
os.umask(_UMASK)

DEPENDENCIES = ("simpy", "numpy", "scipy", "pandas", "matplotlib", "pyyaml", "pydantic", "pyarrow")

STAGING_PREFIX = ".ftsim-staging-"
"""Name prefix of the hidden folder a :class:`StagedFolder` is written in (inside it)."""
LAST = "manifest.json"
"""The file a staged folder receives last: a folder has it only once it is complete."""
COMMIT = ".ftsim-commit"
"""The staging folder once it is complete, while its files are moved into place: what is
left in it after an interrupted move is moved by :func:`complete_commit`."""


class CompletedCommit(Notice):
    """Files of a command killed while it moved them into place were moved now."""


class OutputError(Exception):
    """A result that could not be written: ``REASON writing PATH`` (printed as is, exit 2)."""

    def __init__(self, reason: str, path: str | Path, note: str = ""):
        super().__init__(f"{reason} writing {path}{'; ' if note else ''}{note}")
        self.reason = reason
        self.path = path


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """The one error path of writes: an ``OSError`` inside the block becomes an
    :class:`OutputError` naming ``path`` (what the user asked for, not a temporary name)
    and the reason, e.g. ``no space left on device writing results/run``."""
    try:
        yield
    except OSError as exc:
        reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
        raise OutputError(reason, path) from None


TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
"""Names of :func:`atomic_write_bytes`' temporary files (``.runs.csv.k2j4_x9q.tmp``), which
a command killed while writing leaves (:func:`recover` removes them)."""


def atomic_write_bytes(path: str | Path, data: bytes, sync: bool = True) -> None:
    """Write ``data`` to ``path`` so that the file is either the old one or complete, and
    (``sync``) on disk before it replaces the old one: without it, a crash of the machine
    may leave an empty file (for files nothing reads after a crash, e.g. a run's staged
    shards). A signal waits while the temporary file is made, so that the clean-up knows
    its name (in the main thread, where signals are handled: one raised inside ``mkstemp``
    left an empty one)."""
    path = Path(path)
    main = threading.current_thread() is threading.main_thread()
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = None
        try:
            with interrupts.deferred() if main else contextlib.nullcontext():
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give normal permissions
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if sync:
                    os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise


class StagedFolder:
    """Results written as one set: ``with StagedFolder(folder) as staging:`` gives a hidden
    staging folder inside ``folder``; when the block ends normally its files replace those
    of ``folder`` (``committed`` is then true). If the block fails or is interrupted, the
    staging folder is removed and ``folder`` is as it was: no half-written set of results,
    nothing earlier damaged. A failed write is reported as writing the file it was to
    become in ``folder`` (the staging folder is no name the user knows).

    The moves are a journaled sequence, with signals deferred: the complete staging folder
    is renamed to :data:`COMMIT` (one atomic step: from then on the new set is the one to
    have), the old :data:`LAST` removed, each file moved, :data:`LAST` last, the emptied
    folder removed (:func:`complete_commit`). Cut after any prefix of these steps (SIGKILL,
    a failed rename), ``folder`` holds its old complete set, its new complete set, or a
    :data:`COMMIT` folder that the next command holding ``folder``
    (:func:`ftsim.experiments.lock.locked_folder`) moves into place, saying so. Only a
    process holding ``folder``'s lock may stage in it."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.committed = False
        self._staging: Path | None = None

    def __enter__(self) -> Path:
        """Make the staging folder. A signal received meanwhile is raised once it has a name
        (deferred), and the folder is removed with it: ``__exit__`` never runs for a block
        whose entry failed (a SIGTERM right after the folder appeared left it behind)."""
        try:
            with interrupts.deferred(), writing(self.folder):
                self._staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.folder))
        except BaseException:
            if self._staging is not None:
                shutil.rmtree(self._staging, ignore_errors=True)
            raise
        return self._staging

    def _final(self, path: str | Path) -> Path:
        """Where ``path``, in the staging folder, was to go (``folder`` for another path, or
        for a file of a folder the set never has, such as a run's ``shards``: a full disk
        named ``r1/shards/p00000-….csv``, a path the user never sees)."""
        try:
            inside = Path(path).relative_to(self._staging)
        except (TypeError, ValueError):
            return self.folder
        return self.folder / inside if inside.parts[:1] != ("shards",) else self.folder

    def __exit__(self, kind, error, traceback) -> None:
        try:
            if isinstance(error, OutputError):  # named as the file it was to become
                raise OutputError(error.reason, self._final(error.path)) from None
            if isinstance(error, OSError):
                with writing(self.folder):
                    raise error
            if error is None:
                with interrupts.deferred(), writing(self.folder):
                    os.rename(self._staging, self.folder / COMMIT)
                    try:
                        complete_commit(self.folder)
                    except OutputError as exc:  # the new set is whole in COMMIT: say so
                        note = "the next ftsim command on the folder moves the rest into place"
                        raise OutputError(exc.reason, exc.path, note) from None
                    self.committed = True
        finally:
            shutil.rmtree(self._staging, ignore_errors=True)


def complete_commit(folder: str | Path) -> bool:
    """Move the files of ``folder``'s :data:`COMMIT` folder over those of ``folder``,
    :data:`LAST` last (the old one removed first, so that a folder never has a manifest
    with files of another set), then remove it; each step may be repeated, so an
    interrupted completion is completed by the next. True if files were moved."""
    folder = Path(folder)
    commit = folder / COMMIT
    if not commit.is_dir():
        return False
    names = sorted(p.name for p in commit.iterdir())
    if LAST in names:
        names.remove(LAST)
        names.append(LAST)
        (folder / LAST).unlink(missing_ok=True)
    for name in names:
        with writing(folder / name):  # the file at fault named, not its folder
            if (folder / name).is_dir() and not (folder / name).is_symlink():
                shutil.rmtree(folder / name)
            os.replace(commit / name, folder / name)
    commit.rmdir()
    return bool(names)


def recover(folder: str | Path) -> None:
    """What a command killed while writing ``folder`` left (its caller holds the folder's
    lock): the moves of a complete set finished, with a notice; staging folders and the
    temporary files of atomic writes (:data:`TEMPORARY`) removed, in it and in its
    ``plots`` and ``shards``."""
    folder = Path(folder)
    with writing(folder):
        for stale in folder.glob(f"{STAGING_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)
        for where in (folder, folder / "plots", folder / "shards"):
            for stale in where.glob(".*.tmp") if where.is_dir() else ():
                if TEMPORARY.match(stale.name) and stale.is_file():
                    stale.unlink(missing_ok=True)
        if complete_commit(folder):
            warnings.warn(
                CompletedCommit(
                    f"{folder}: an earlier ftsim command was stopped, or failed, while "
                    "moving its finished results into place; they were moved now"
                ),
                stacklevel=3,
            )


def atomic_write_text(path: str | Path, text: str, sync: bool = True) -> None:
    atomic_write_bytes(path, text.encode(), sync)


def columns_of(rows: list[dict]) -> list[str]:
    """Column order: as first seen across rows (stable, so files are byte-identical)."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns)


def csv_text(rows: list[dict], columns: list[str] | None = None) -> str:
    """Rows as CSV; floats in shortest round-trip form, so reading back is exact."""
    columns = columns or columns_of(rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", restval="")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue()


def write_csv(path: str | Path, rows: list[dict]) -> None:
    atomic_write_text(path, csv_text(rows))


@contextmanager
def csv_and_parquet(stem: str | Path, rows: list[dict] | str) -> Iterator:
    """Write ``stem.csv`` and ``stem.parquet`` holding the same table (``rows``, or their
    CSV text as :func:`csv_text` writes it), and give the table
    (a pyarrow table) to the block while the Parquet file is written behind it, in a
    thread (pyarrow writes without the interpreter lock); it is in place when the block
    ends, or its error raised.

    The Parquet file is converted from the CSV text by pyarrow's own CSV reader, so the two
    hold identical values, and pandas is never imported (building Arrow arrays from Python
    objects imports it: 0.3 s of start-up). pyarrow itself is imported here only.
    """
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    stem = Path(stem)
    text = rows if isinstance(rows, str) else csv_text(rows)
    atomic_write_text(stem.with_suffix(".csv"), text)
    options = pa_csv.ReadOptions(use_threads=False)
    table = pa_csv.read_csv(pa.py_buffer(text.encode()), read_options=options)
    failed: list[BaseException] = []

    def write() -> None:
        try:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            atomic_write_bytes(stem.with_suffix(".parquet"), sink.getvalue().to_pybytes())
        except BaseException as exc:  # raised again in the caller's thread
            failed.append(exc)

    writer = threading.Thread(target=write, name="ftsim-parquet")
    writer.start()
    try:
        yield table
    finally:
        writer.join()
    if failed:
        raise failed[0]


def prepare_tables() -> None:
    """Import pyarrow and do what its first CSV parse and Parquet write do once in a process
    (some 35 ms of CPU in all, 5 ms of it the parse's one-time set-up), for a caller with
    time to spare before :func:`csv_and_parquet` (a sweep's parent while its workers
    compute the first tasks), which then need not. Nothing if pyarrow cannot be imported
    (:func:`csv_and_parquet` says so)."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pa_csv
        import pyarrow.parquet as pq
    except ImportError:
        return
    options = pa_csv.ReadOptions(use_threads=False)
    table = pa_csv.read_csv(pa.py_buffer(b"a,b\n1,x\n"), read_options=options)
    pq.write_table(table, pa.BufferOutputStream())


def write_csv_and_parquet(stem: str | Path, rows: list[dict]) -> None:
    """``stem.csv`` and ``stem.parquet`` holding the same table (:func:`csv_and_parquet`)."""
    with csv_and_parquet(stem, rows):
        pass


def git_commit() -> str | None:
    """The commit of the ftsim source tree, when it is a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def versions() -> dict[str, str | None]:
    """Versions of Python, ftsim and its dependencies (from metadata: nothing is imported)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("ftsim", *DEPENDENCIES):
        try:
            found[name] = _version(metadata.distribution(name))
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _version(distribution: metadata.Distribution) -> str:
    """The ``Version`` field of an installed distribution's metadata, read from the header
    lines alone: ``distribution.version`` parses the whole file as an e-mail message, long
    descriptions included (numpy's, pandas', pydantic's: 4 ms of a sweep's manifest for
    nine packages). The value is the e-mail parser's (its leading blanks dropped); a header
    it would read otherwise (the field folded onto another line, a line that is no field)
    or without the field is left to it."""
    text = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for line, after in zip(lines, [*lines[1:], ""], strict=True):
        if not line:
            break  # the header ends at the first empty line
        name, colon, value = line.partition(":")
        if not colon and line[0] not in " \t":
            break
        if colon and name.lower() == "version":
            if after[:1] in (" ", "\t"):
                break
            return value.lstrip(" \t")
    return distribution.version


def write_json(path: str | Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
