"""The run folder of a sweep: a manifest and one shard file per finished task.

A task's rows are written to ``shards/<key>.csv`` atomically (temp file + rename) as soon
as it finishes, so a killed sweep loses only the tasks in flight. The key names the point,
the policy index and the replication range. Before a shard file is written, its SHA-256 is
appended to ``shards/SHA256SUMS`` (the format of ``sha256sum``; appending keeps the cost
per task constant, where rewriting the JSON manifest each time would grow with the sweep).
``--resume`` reads the folder back, after checking that the manifest's config hash is the
one the command would produce; a task counts as done only if its shard files still have
their recorded checksums, so a truncated or edited shard is recomputed, never reused.
Shards hold the exact CSV text of their rows (floats in shortest round-trip form), and
merging concatenates them in canonical order (point, policy, replication): the merged
``runs.csv`` is byte-identical however the work was split into tasks, executed or
interrupted.

Durability. A shard file is complete from the moment it has its name (temp file +
rename), in the operating system's cache: a killed or interrupted sweep keeps every
finished task. A crash of the machine can lose what the cache had not written yet, so the
shards are synced to disk in groups (the files written since the last group, ``SHA256SUMS``
and the folder, whose entries are the renames). While a pool computes the tasks, a thread
of the store syncs them behind the sweep (:attr:`RunStore.behind`: a group, then
:data:`SYNC_GAP_S` for the next to gather); while the writer's own thread computes them,
that thread syncs a group when it writes a shard :data:`SYNC_INTERVAL_S` or more after the
last (a syncing thread would take the interpreter lock from it at every system call: on
the 600-run sweep's serial run, 40-70 ms more CPU). Whatever is left is synced while the
results are merged (:meth:`RunStore.syncing`), when a sweep is interrupted (before it says
what is saved) and when a result cannot be written (before it says the finished tasks are
kept). A crash can then cost recomputing the tasks finished since the last group, and
never more than that: a shard that lost its record or part of its bytes fails its checksum
and is computed again by ``--resume``, never used. (One sync per shard on the sweep's one
serial process, as at first, took three ``fsync`` calls per task: ~0.6 s of 60 tasks on a
busy disk; syncing a pool's shards only every second and at the end made the 600-run
sweep, whose tasks take 0.5 s on two workers, wait 20-70 ms for the disk after its last.)
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ftsim.experiments import interrupts
from ftsim.experiments.folders import MANIFEST, FolderError, prepare_output, sha256_of
from ftsim.experiments.output import atomic_write_text, csv_text, write_json, writing
from ftsim.options import option

SHARDS = "shards"
CHECKSUMS = "SHA256SUMS"
"""File in ``shards/``: a line ``<sha256>  <shard file name>`` per shard written (the last
line for a name counts)."""
_CHECKSUM_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)$")
_SHARD = re.compile(r"^p(\d+)-q(\d+)-r(\d+)-(\d+)\.csv$")
_ANY_SHARD = re.compile(r"^p\d+-q\d+-r\d+-\d+(\.timeline)?\.csv$")


SYNC_INTERVAL_S = 1.0
"""A shard written by a store that does not sync behind its writer (:attr:`RunStore.behind`)
this long after the last sync is synced at once, with those before it (so a crash of the
machine costs at most the tasks finished in about a second, or since the last sync before
a longer task)."""

SYNC_GAP_S = 0.05
"""How long a store's syncing thread waits after a group for the next to gather (a group
costs one commit of the file system's journal, whatever its size: on the 600-run sweep's
disk, 4-7 ms); a crash of the machine costs at most the tasks finished in about that time
and the group's own."""

StoreError = FolderError
"""A run folder that cannot be created or resumed (printed as is, exit status 2)."""


@dataclass(frozen=True, order=True)
class TaskKey:
    """Replications ``start`` ≤ rep < ``stop`` of policy index ``policy`` at point ``point``."""

    point: int
    policy: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        return f"p{self.point:05d}-q{self.policy:03d}-r{self.start:07d}-{self.stop:07d}"

    @property
    def reps(self) -> range:
        return range(self.start, self.stop)


def shard_texts(rows: list[dict], timeline: list[dict]) -> tuple[str, str]:
    """A finished task's rows and timeline as the CSV text of its shard files ("" for no
    timeline): made where the task ran, so that a sweep's workers, not its parent, format
    them."""
    return csv_text(rows), csv_text(timeline) if timeline else ""


class RunStore:
    """A run folder: ``manifest.json``, the shards of finished tasks and the merged results.

    A sweep keeps its shards in ``shards/`` (it can be resumed); a run, which cannot,
    removes them once the merged results are written.
    """

    def __init__(self, root: Path, durable: bool = True):
        self.root = Path(root)
        self.durable = durable
        """Whether shards are synced to disk (a sweep's, which a resume reads after a
        crash; see the module docstring); a run's staged shards are never read after one."""
        self.behind = False
        """Whether a thread of the store syncs the shards behind the writer (set while a
        pool computes the tasks: the writer's process has time to spare), else the writer's
        thread (see the module docstring)."""
        self._unsynced: list[str] = []
        """Shard files written and not yet taken by a group to sync."""
        self._synced_at = time.monotonic()
        self._sync_lock = threading.Lock()
        """Guards :attr:`_unsynced` and :attr:`_syncer`."""
        self._syncer: threading.Thread | None = None
        """The thread syncing groups behind the writer, while there are any."""
        self._hurry = threading.Event()
        """Set while :meth:`sync` waits for the syncing thread: no gap between groups."""
        self._sync_failed: BaseException | None = None
        """What the syncing thread failed with, raised by the next write or sync."""
        self.shards = self.root / SHARDS
        self._checksums: dict[str, str] = {}
        """Shard files known to be complete: name → SHA-256 (as in ``SHA256SUMS``)."""
        self._texts: dict[str, str] = {}
        """Shard files written by this store: name → text, which the merge joins without
        reading them back (the 600-run sweep's 120: some 4 ms after its last task)."""
        self.discarded: list[str] = []
        """Shard files found on resume that are not recorded or fail their checksum."""

    @classmethod
    def create(cls, root: Path, manifest: dict, force: bool = False) -> RunStore:
        """A new run folder; without ``force``, refuses an earlier sweep's folder and any
        other non-empty folder (see :func:`prepare_output`). An earlier sweep's shards are
        discarded, so that a sweep started over with ``force`` reuses nothing of it."""
        prepare_output(root, "sweep", force)
        store = cls(root)
        store.discard_shards()
        write_json(store.root / MANIFEST, manifest)  # first: a folder with it can be resumed
        with writing(store.shards):
            store.shards.mkdir(exist_ok=True)
        return store

    def discard_shards(self) -> None:
        """Remove the shard folder (a run's, once merged: it cannot be resumed)."""
        shutil.rmtree(self.shards, ignore_errors=True)
        self._unsynced = []
        self._texts = {}

    @classmethod
    def resume(cls, root: Path, config_hash: str) -> RunStore:
        """An existing run folder made by a sweep with the same ``config_hash``; its shards
        are verified against their recorded checksums."""
        store = cls(root)
        where = option("resume", root)  # as the caller gave the folder
        if root.is_file():
            raise StoreError(f"{where}: is a file; give the sweep's folder")
        if not root.exists():
            raise StoreError(f"{where}: no such folder (resume a sweep in the folder it wrote)")
        try:
            manifest = store.manifest()
            found = manifest["config_hash"]
        except (FileNotFoundError, NotADirectoryError):
            raise StoreError(f"{where}: no sweep manifest ({root / MANIFEST})") from None
        except ValueError as exc:  # it is there: "no sweep manifest" sent users looking
            raise StoreError(f"{where}: {root / MANIFEST} is not valid JSON ({exc})") from None
        except (KeyError, TypeError):
            raise StoreError(
                f"{where}: {root / MANIFEST} has no config_hash (not a sweep's)"
            ) from None
        except OSError as exc:  # it is there but cannot be read: say so, not "missing"
            raise StoreError(
                f"{where}: cannot read the sweep manifest {root / MANIFEST} ({exc.strerror})"
            ) from None
        if manifest.get("command", "sweep") != "sweep":
            raise StoreError(f"{where}: the folder holds the output of ftsim run")
        if found != config_hash:
            raise StoreError(
                f"{where}: the folder holds a different sweep (config hash {found}; this "
                f"scenario, grid and options give {config_hash}); give the scenario, grid and "
                "options that started it, or start a new folder"
            )
        with writing(store.shards):
            store.shards.mkdir(exist_ok=True)
        store._verify(store._recorded())
        return store

    def _recorded(self) -> dict[str, str]:
        """Shard name → recorded SHA-256; lines cut short by a kill are ignored."""
        try:
            text = (self.shards / CHECKSUMS).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return {}
        return {
            match.group(2): match.group(1)
            for line in text.splitlines()
            if (match := _CHECKSUM_LINE.match(line))
        }

    def _verify(self, recorded: dict[str, str]) -> None:
        """Keep the recorded shards whose files match their checksum; a task whose rows or
        timeline shard fails is discarded whole."""
        present = {p.name for p in self.shards.iterdir() if _ANY_SHARD.match(p.name)}
        good = {
            name: digest
            for name, digest in recorded.items()
            if name in present and sha256_of(self.shards / name) == digest
        }
        bad = present - set(good)
        for name in bad:
            good.pop(name.replace(".timeline.csv", ".csv"), None)
        self._checksums = good
        self.discarded = sorted(present - set(good))

    def manifest(self) -> dict:
        return json.loads((self.root / MANIFEST).read_text(encoding="utf-8"))

    def update_manifest(self, **fields) -> None:
        write_json(self.root / MANIFEST, {**self.manifest(), **fields})

    # -- shards ------------------------------------------------------------------------

    def write_shard(self, key: TaskKey, rows_csv: str, timeline_csv: str) -> None:
        """Store a finished task (its :func:`shard_texts`): the checksums of its shard files,
        then the files (timeline first, if any; the rows shard marks the task done). So
        every shard file on disk has its record, and a kill in between costs only
        recomputing the task. Synced behind the caller by the store's syncing thread, which
        a call starts if none runs (a failure of that thread is raised here or by
        :meth:`sync`), or, unless :attr:`behind`, here with those before it if the last
        sync was :data:`SYNC_INTERVAL_S` ago or more."""
        self._raise_sync_failure()
        texts = {}
        if timeline_csv:
            texts[f"{key.name}.timeline.csv"] = timeline_csv
        texts[f"{key.name}.csv"] = rows_csv
        sums = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in texts.items()}
        with writing(self.shards), open(self.shards / CHECKSUMS, "a", encoding="utf-8") as out:
            out.writelines(f"{digest}  {name}\n" for name, digest in sums.items())
        self._checksums.update(sums)
        for name, text in texts.items():
            atomic_write_text(self.shards / name, text, sync=False)
            self._texts[name] = text
        if not self.durable:
            return
        with self._sync_lock:
            self._unsynced += list(texts)
            if self.behind and self._syncer is None:
                self._syncer = threading.Thread(
                    target=self._sync_behind, name="ftsim-sync", daemon=True
                )
                self._syncer.start()
        if not self.behind and time.monotonic() - self._synced_at >= SYNC_INTERVAL_S:
            self.sync()

    def _sync_behind(self) -> None:
        """The syncing thread: groups until none is left (:meth:`_sync_group`), each after
        :data:`SYNC_GAP_S` (none while :meth:`sync` waits); then it ends, recording a
        failure for the writer to raise."""
        try:
            while self._sync_group():
                self._hurry.wait(SYNC_GAP_S)
        except BaseException as exc:
            self._sync_failed = exc
            with self._sync_lock:
                self._syncer = None

    @contextmanager
    def syncing(self) -> Iterator[None]:
        """:meth:`sync` on another thread while the block runs (``fsync`` waits for the disk
        without the interpreter lock: the block's work goes on meanwhile); done when the
        block ends, or its error raised."""
        failed: list[BaseException] = []

        def sync() -> None:
            try:
                self.sync()
            except BaseException as exc:  # raised again in the caller's thread
                failed.append(exc)

        syncer = threading.Thread(target=sync, name="ftsim-sync")
        syncer.start()
        try:
            yield
        finally:
            syncer.join()
        if failed:
            raise failed[0]

    def sync(self) -> None:
        """Put every shard file written so far on disk, with ``SHA256SUMS`` and the shard
        folder (which holds their names): the syncing thread's groups, waited for, then
        any left (those of a group that failed: its failure is raised)."""
        with self._sync_lock:
            syncer = self._syncer
        if syncer is not None:
            # an Event's set and clear take a Python-level lock, which a signal raised
            # there could leave taken (see ftsim.experiments.interrupts): deferred
            with interrupts.deferred():
                self._hurry.set()
            syncer.join()
            with interrupts.deferred():
                self._hurry.clear()
        self._raise_sync_failure()
        self._sync_group()
        self._synced_at = time.monotonic()

    def _sync_group(self) -> bool:
        """Sync the shard files not yet taken by a group, with ``SHA256SUMS`` and the folder;
        False if there were none (the syncing thread, if it called, then ends). A group
        that fails is put back, for the next to take."""
        with self._sync_lock:
            names, self._unsynced = self._unsynced, []
            if not names:
                if self._syncer is threading.current_thread():
                    self._syncer = None
                return False
        try:
            with writing(self.shards):
                for path in [*(self.shards / name for name in names), self.shards / CHECKSUMS]:
                    _fsync(path)
                _fsync(self.shards)
        except BaseException:
            with self._sync_lock:
                self._unsynced = names + self._unsynced
            raise
        return True

    def _raise_sync_failure(self) -> None:
        """Raise what the syncing thread failed with, once."""
        failed, self._sync_failed = self._sync_failed, None
        if failed is not None:
            raise failed

    def done(self) -> list[TaskKey]:
        """Keys of the finished tasks, in canonical order."""
        keys = []
        for name in self._checksums:
            match = _SHARD.match(name)
            if match:
                keys.append(TaskKey(*map(int, match.groups())))
        return sorted(keys)

    def covered(self) -> dict[tuple[int, int], set[int]]:
        """Finished replications per (point, policy index)."""
        found: dict[tuple[int, int], set[int]] = {}
        for key in self.done():
            found.setdefault((key.point, key.policy), set()).update(key.reps)
        return found

    def task_rows(self) -> Iterator[tuple[TaskKey, list[dict]]]:
        """Each finished task with its rows (values as CSV text), in canonical order."""
        for key in self.done():
            yield key, self._read(f"{key.name}.csv")

    def rows(self) -> list[dict]:
        """Every stored row (values as CSV text), by point, policy and replication."""
        out, seen = [], set()
        for key, rows in self.task_rows():
            for row in rows:
                ident = (key.point, key.policy, row["rep"])
                if ident not in seen:
                    seen.add(ident)
                    out.append(row)
        return out

    def timeline(self) -> list[dict]:
        """The stored timeline rows (values as CSV text), by point and policy."""
        return [row for name in self._timeline_shards() for row in self._read(name)]

    def rows_text(self) -> str:
        """Every stored row as CSV text, by point, policy and replication: ``csv_text(rows())``,
        made by joining the shards' bodies (no parsing of every row and writing it again)
        when they share one header and no replication is stored twice, else as that."""
        keys = self.done()
        twice = any(
            (a.point, a.policy) == (b.point, b.policy) and b.start < a.stop  # keys are sorted
            for a, b in zip(keys, keys[1:], strict=False)
        )
        joined = None if twice else self._joined([f"{key.name}.csv" for key in keys])
        return csv_text(self.rows()) if joined is None else joined

    def timeline_text(self) -> str:
        """The stored timeline as CSV text, by point and policy: ``csv_text(timeline())``,
        made by joining the shards' bodies when they share one header (no parsing of tens
        of thousands of phases), else as that."""
        joined = self._joined(self._timeline_shards())
        return csv_text(self.timeline()) if joined is None else joined

    def _joined(self, names: list[str]) -> str | None:
        """The shard files ``names`` as one CSV text, their header once: the same bytes as
        their rows parsed and written again (shards are written by the same CSV writer);
        None unless they share one header."""
        texts = [self._text(name) for name in names]
        headers = {text.partition("\n")[0] for text in texts}
        if len(headers) != 1:
            return None
        header = headers.pop() + "\n"
        return header + "".join(text[len(header) :] for text in texts)

    def _timeline_shards(self) -> list[str]:
        """The timeline shard of each (point, policy), the first finished, in order."""
        names, seen = [], set()
        for key in self.done():
            name = f"{key.name}.timeline.csv"
            if (key.point, key.policy) not in seen and name in self._checksums:
                seen.add((key.point, key.policy))
                names.append(name)
        return names

    def _read(self, name: str) -> list[dict]:
        return list(csv.DictReader(io.StringIO(self._text(name), newline="")))

    def _text(self, name: str) -> str:
        """The text of the shard file ``name``: as this store wrote it, else as read."""
        text = self._texts.get(name)
        if text is None:
            with open(self.shards / name, encoding="utf-8", newline="") as handle:
                text = handle.read()
        return text


def _fsync(path: Path) -> None:
    """Flush the file or folder ``path`` to disk."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
