"""Reading user-supplied text files (scenarios, failure traces) safely.

A scenario or trace path comes from the user and may name anything: a folder, a device
that never ends (``/dev/zero``), a FIFO that blocks, a binary or UTF-16 file. These are
refused with a message saying what the file is, instead of a ``UnicodeDecodeError``
traceback or a hang; the caller adds the file name.
"""

from __future__ import annotations

from pathlib import Path

MAX_TEXT_BYTES = 64 * 2**20
"""Largest text file read (64 MiB): far above any scenario or failure trace, and a bound
on what a wrong path (a disk image, ``/dev/zero``) can make us read."""

_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}


class TextFileError(ValueError):
    """A file that cannot be read as UTF-8 text; the message names the problem, not the file."""


def read_text(path: Path, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (a UTF-8 byte-order mark is dropped)."""
    path = Path(path)
    try:
        if not path.exists():
            raise TextFileError("file not found")
        if path.is_dir():
            raise TextFileError("is a folder, not a file")
        if not path.is_file():
            raise TextFileError("is not a regular file (a device, FIFO or socket)")
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise TextFileError(f"cannot read the file ({exc.strerror})") from None
    if len(data) > max_bytes:
        raise TextFileError(f"larger than {max_bytes / 2**20:g} MiB: not a file of ours")
    return decode_text(data)


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8 text; TextFileError for UTF-16/32, binary data or invalid bytes."""
    for bom, encoding in _BOMS.items():
        if data.startswith(bom):
            raise TextFileError(f"is {encoding} text; save it as UTF-8")
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise TextFileError(f"is a binary file, not text (NUL byte at line {line})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TextFileError(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}); save it as UTF-8"
        ) from None
