"""Results folders on disk: where a command may write, and what ``plot`` may read back.

Nothing on disk is lost by accident:

- ``run -o DIR`` and ``sweep -o DIR`` write into a new or empty folder, or into the earlier
  output of the same command (recognized by the ``command`` of its ``manifest.json``) and,
  for ``run``, of the same configuration (its ``config_hash``); any other non-empty folder
  needs ``--force``. A folder holding a sweep is continued with ``--resume``, or started
  over with ``--force`` (its shards are discarded, so nothing of the earlier sweep is reused).
  Whether the folder can be written is checked before anything is simulated, so a
  read-only or mistyped path fails at once. ftsim's own hidden entries (names starting
  with ``.ftsim``: the lock of :mod:`ftsim.experiments.lock`, a staging folder) do not
  count as content.
- ``plot`` checks the structure of ``runs.csv`` and ``timeline.csv`` before drawing, so a
  truncated, garbled or foreign file is reported by name instead of crashing a figure.
  The manifest records the SHA-256 of both; a file that no longer matches is plotted as
  it is (results may be edited on purpose), with a note.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import tempfile
from pathlib import Path

from ftsim.options import option
from ftsim.scenario.files import TextFileError, read_text
from ftsim.sim.accounting import CATEGORIES

MANIFEST = "manifest.json"
RESULT_FILES = ("runs.csv", "timeline.csv")
"""Merged result files whose checksums the manifest records (``files``)."""

RUNS_NUMBERS = ("rep", "ideal_h", "wall_h", "overhead_frac", *(f"{c}_h" for c in CATEGORIES))
RUNS_COLUMNS = ("scenario", "policy", *RUNS_NUMBERS)
"""Columns every ``runs.csv`` has (a sweep adds ``point`` and the swept keys)."""

TIMELINE_NUMBERS = ("rep", "start_h", "end_h")
TIMELINE_COLUMNS = ("policy", "kind", *TIMELINE_NUMBERS)


class FolderError(Exception):
    """A folder that may not or cannot be written or read (printed as is, exit status 2)."""


# -- writing -------------------------------------------------------------------------------


def prepare_output(
    folder: Path, command: str, force: bool = False, config_hash: str | None = None
) -> None:
    """Check that ``command`` (``run`` or ``sweep``) may write its results into ``folder``
    and create it; FolderError saying why not. With ``config_hash``, earlier output of the
    same command is replaced only if it has that configuration (or with ``force``)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise FolderError(f"{folder}: is a file, not a folder")
    if folder.is_dir() and any(not p.name.startswith(".ftsim") for p in folder.iterdir()):
        manifest = _earlier_manifest(folder, command, force)
        found = manifest.get("command")
        if found == "sweep" and command == "sweep" and not force:
            raise FolderError(
                f"{folder} already holds a sweep; continue it with {option('resume', folder)}, "
                f"start it over with {option('force')}, or choose another folder"
            )
        if found != command and not force:
            held = f"the output of 'ftsim {found}'" if found else f"no {MANIFEST} of ftsim"
            raise FolderError(
                f"{folder}: the folder is not empty and holds {held}, not earlier output of "
                f"'ftsim {command}'; choose another folder, or pass {option('force')} to write "
                "into it (files of the same names are replaced)"
            )
        earlier = manifest.get("config_hash")
        if found == command and config_hash and earlier != config_hash and not force:
            raise FolderError(
                f"{folder} holds the results of another {command} (scenario "
                f"{manifest.get('scenario')!r}, config hash {earlier}; this one: "
                f"{config_hash}); choose another folder, or pass {option('force')} to replace "
                "them"
            )
    make_writable_folder(folder)


def check_figures_folder(folder: Path) -> None:
    """FolderError if ``folder`` holds the results of a command (a manifest): figures
    written there would replace result files of the same names (``plot -o RUN_DIR``
    replaced the run's ``timeline.csv`` with the figure's)."""
    folder = Path(folder)
    if folder.name == "shards" and (folder.parent / MANIFEST).is_file():
        raise FolderError(
            f"{folder}: holds a sweep's shards (its tasks, for --resume); figures are not "
            "written among them: choose another folder (the default is RUN_DIR/plots)"
        )
    if not (folder / MANIFEST).is_file():
        return
    try:
        command = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("command")
    except (OSError, ValueError, AttributeError):
        command = None
    what = f"the results of 'ftsim {command}'" if isinstance(command, str) else MANIFEST
    raise FolderError(
        f"{folder}: holds {what}; figures are not written among results (they would "
        "replace files of the same names, such as timeline.csv): choose another folder "
        "(the default is RUN_DIR/plots)"
    )


def make_writable_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) and check that files can be written in it."""
    folder = Path(folder)
    blocker = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if blocker == folder and not folder.is_dir():
        raise FolderError(f"{folder}: is a file, not a folder")
    if blocker is not None and not blocker.is_dir():
        raise FolderError(f"{folder}: lies under {blocker}, which is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise FolderError(f"{folder}: cannot write in this folder ({exc.strerror})") from None


def _earlier_manifest(folder: Path, command: str, force: bool) -> dict:
    """The manifest of the non-empty ``folder`` (empty without one). One that is there but
    cannot be read (no permission, not JSON, not an object) says nothing of what the
    folder holds: FolderError saying why, unless ``force`` (then it is written over)."""
    path = folder / MANIFEST
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        manifest = json.loads(read_text(path))
        reason = None if isinstance(manifest, dict) else "not a JSON object"
    except TextFileError as exc:
        reason = str(exc)
    except ValueError as exc:
        reason = f"not valid JSON ({exc})"
    if reason is None or force:
        return manifest if reason is None else {}
    raise FolderError(
        f"{path}: cannot be read ({reason}), so whether {folder} holds earlier output of "
        f"'ftsim {command}' is unknown; repair or remove it, choose another folder, or pass "
        f"{option('force')} to write into it (files of the same names are replaced)"
    )


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of the file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def result_checksums(folder: Path) -> dict[str, str]:
    """SHA-256 of the merged result files, for the manifest's ``files``."""
    return {name: sha256_of(Path(folder) / name) for name in RESULT_FILES}


# -- reading back (plot) --------------------------------------------------------------------


def check_results(folder: Path, point: int | None = None) -> list[str]:
    """Check that ``folder`` is a complete run or sweep folder that ``plot`` can draw from,
    with ``point`` among its points; FolderError naming the file and problem. Returns notes
    on result files changed since ftsim wrote them."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "no such folder" if not folder.exists() else "not a folder"
        raise FolderError(f"{folder}: {what}")
    if (folder / MANIFEST).is_file():
        check_finished(folder, read_manifest(folder))
    if not (folder / "runs.csv").exists():
        raise FolderError(f"{folder}: no runs.csv (not a run or sweep folder)")
    manifest = read_manifest(folder)
    recorded = manifest.get("files", {})
    notes = [
        f"{folder / name}: changed since ftsim wrote it (SHA-256 differs from {MANIFEST}); "
        "plotting it as it is"
        for name in RESULT_FILES
        if name in recorded
        and (folder / name).is_file()
        and sha256_of(folder / name) != recorded[name]
    ]
    runs = _read_table(folder / "runs.csv", RUNS_COLUMNS, RUNS_NUMBERS)
    if not runs:
        raise FolderError(f"{folder / 'runs.csv'}: no result rows (only a header)")
    columns = manifest.get("columns", [])
    if not isinstance(columns, list) or not set(map(str, columns)) <= set(runs[0]):
        raise FolderError(
            f"{folder / MANIFEST}: 'columns' does not name columns of runs.csv (got {columns!r})"
        )
    _check_points(manifest, folder / MANIFEST)
    _read_table(folder / "timeline.csv", TIMELINE_COLUMNS, TIMELINE_NUMBERS)
    points = sorted({_point(row, folder) for row in runs})
    if point is not None and point not in points:
        listed = ", ".join(map(str, points[:20])) + (", …" if len(points) > 20 else "")
        raise FolderError(f"{option('point', point)}: no such point in {folder} (it has: {listed})")
    return notes


def check_finished(folder: Path, manifest: dict) -> None:
    """FolderError unless ``manifest`` is that of a finished run or sweep: an advice's
    folder has no results of its own, and a sweep stopped before it merged its results has
    none yet (its ``runs.csv``, if any, is an earlier set's: a sweep started over with
    ``--force`` and stopped left the new manifest beside the old files, which were read
    as its results)."""
    command = manifest.get("command")
    if command == "advise":
        raise FolderError(f"{folder}: holds the output of 'ftsim advise', not of a run or sweep")
    if command == "sweep" and "finished_utc" not in manifest:
        raise FolderError(
            f"{folder}: holds a sweep that did not finish (its results are not merged yet): "
            f"continue it with {option('resume', folder)}"
        )


def read_manifest(folder: Path) -> dict:
    """``folder``'s manifest as a mapping; FolderError if missing or not a JSON object."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(read_text(path))
    except TextFileError as exc:
        raise FolderError(f"{path}: {exc} (not a run or sweep folder)") from None
    except ValueError as exc:
        raise FolderError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files", {}), dict):
        raise FolderError(f"{path}: not a manifest written by ftsim")
    return manifest


def _check_points(manifest: dict, path: Path) -> None:
    """FolderError unless the manifest's sweep fields have the shapes ftsim writes."""
    points = manifest.get("points", [])
    if not isinstance(points, list) or not all(map(_is_point_entry, points)):
        raise FolderError(f"{path}: 'points' is not a list of {{point, values}} entries")
    if not isinstance(manifest.get("reference"), str | None):
        raise FolderError(f"{path}: 'reference' is not a policy name")


def _is_point_entry(entry) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("point"), int)
        and isinstance(entry.get("values"), dict)
    )


def _read_table(path: Path, columns: tuple, numbers: tuple) -> list[dict]:
    """Rows of the CSV ``path`` after checking its header and that every row is complete,
    with numbers where numbers belong (an empty file has no rows)."""
    try:
        text = read_text(path)
    except TextFileError as exc:
        raise FolderError(f"{path}: {exc}") from None
    if not text:
        return []
    if not text.endswith("\n"):
        raise FolderError(f"{path}: the last line is incomplete (truncated file?)")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader)
    missing = [c for c in columns if c not in header]
    if missing:
        raise FolderError(
            f"{path}: not ftsim results: no column {', '.join(missing)} (got {', '.join(header)})"
        )
    rows = []
    for line, cells in enumerate(reader, start=2):
        if len(cells) != len(header):
            raise FolderError(
                f"{path} line {line}: {len(cells)} fields, the header has {len(header)}"
            )
        row = dict(zip(header, cells, strict=True))
        for name in numbers:
            if not _is_number(row[name]):
                raise FolderError(f"{path} line {line}: {name} is not a number (got {row[name]!r})")
        rows.append(row)
    return rows


def _is_number(text: str) -> bool:
    """Whether ``text`` reads as a float that is not NaN (``inf`` is a result: never done)."""
    try:
        return not math.isnan(float(text))
    except ValueError:
        return False


def _point(row: dict, folder: Path) -> int:
    """The sweep point of a runs.csv row (0 for a plain run)."""
    text = row.get("point", "0")
    try:
        return int(text)
    except ValueError:
        where = folder / "runs.csv"
        raise FolderError(f"{where}: point is not an integer (got {text!r})") from None
