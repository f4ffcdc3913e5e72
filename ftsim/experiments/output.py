"""Writing results: atomic files (temp file + rename), tidy CSV and Parquet, manifests.

A reader never sees a half-written file: each file is written to a temporary name in the
same folder, flushed to disk, then renamed over the target.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)

DEPENDENCIES = ("simpy", "numpy", "scipy", "pandas", "matplotlib", "pyyaml", "pydantic", "pyarrow")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that the file is either the old one or complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


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


def write_csv_and_parquet(stem: str | Path, rows: list[dict]) -> None:
    """``stem.csv`` and ``stem.parquet`` holding the same table.

    The Parquet file is converted from the CSV text by pyarrow's own CSV reader, so the two
    hold identical values, and pandas is never imported (building Arrow arrays from Python
    objects imports it: 0.3 s of start-up). pyarrow itself is imported here only.
    """
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    stem = Path(stem)
    text = csv_text(rows)
    atomic_write_text(stem.with_suffix(".csv"), text)
    table = pa_csv.read_csv(pa.py_buffer(text.encode()))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(stem.with_suffix(".parquet"), sink.getvalue().to_pybytes())


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
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def write_json(path: str | Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
