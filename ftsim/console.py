"""Standard output that is whole or an error, on terminals of any encoding.

Python's standard output can lose the end of a write to a full disk without an error:
the file's write is cut short, and the rest is dropped with exit status 0 (``ftsim show
reference > file`` on a full disk, unbuffered output, ``PYTHONUNBUFFERED``, being where
Python passes short writes over). :func:`whole_writes` puts the
standard output's file descriptor under a writer whose every write is whole or raises the
``OSError`` (which the command line reports as one line).

ftsim's tables and messages use a few characters beyond ASCII (``±``, ``…``, ``≥``, ``×``).
Under an ASCII locale (``LC_ALL=C`` with Python's UTF-8 mode off) printing them raised
``UnicodeEncodeError``. :func:`ascii_fallbacks` makes the standard streams write such a
character as an ASCII look-alike (``+/-``, ``...``, ``>=``, ``x``; see :func:`look_alike`),
and a byte of an undecodable file name (a lone surrogate) as that byte, as Python's
``surrogateescape`` does. A stream that can encode everything writes exactly what it did:
the handler is only consulted for characters its encoding cannot represent.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager, suppress

ERRORS = "ftsim-ascii-fallback"
"""Name of the codec error handler registered here."""

FALLBACKS = {
    "±": "+/-",
    "…": "...",
    "≥": ">=",
    "≤": "<=",
    "×": "x",
    "✕": "x",
    "→": "->",
    "←": "<-",
    "↦": "|->",
    "↳": "->",
    "≈": "~",
    "≠": "!=",
    "∝": "~",
    "∈": "in",
    "⊆": "<=",
    "∫": "int",
    "√": "sqrt",
    "∞": "inf",
    "⌊": "floor(",
    "⌋": ")",
    "−": "-",
    "–": "-",
    "—": "--",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "·": ".",
    "§": "S",
    "°": " deg",
    "½": "1/2",
    "⅓": "1/3",
    "²": "^2",
    "³": "^3",
    "ᵀ": "^T",
    "µ": "u",
    "Γ": "Gamma",
    "Δ": "Delta",
    "Σ": "Sigma",
    "δ": "delta",
    "λ": "lambda",
    "π": "pi",
    "ρ": "rho",
    "σ": "sigma",
    "ε": "eps",
    "τ": "tau",
    "█": "#",
    "▏": "|",
}
"""ASCII look-alikes of the non-ASCII characters ftsim writes."""


def _fallback(error: UnicodeError) -> tuple[str | bytes, int]:
    """Codec error handler: the first character the codec could not encode, in ASCII."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    char = error.object[error.start]
    if "\udc80" <= char <= "\udcff":  # a byte surrogateescape decoded (an argv file name)
        return bytes([ord(char) - 0xDC00]), error.start + 1
    return look_alike(char), error.start + 1


def look_alike(char: str) -> str:
    """ASCII for ``char``: from :data:`FALLBACKS`, its compatibility decomposition without
    accents (``é`` as ``e``, ``１`` and ``①`` as ``1``), its digit value (``١`` as ``1``),
    else ``?``."""
    if char in FALLBACKS:
        return FALLBACKS[char]
    plain = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
    if plain:
        return plain
    digit = unicodedata.digit(char, None)
    return "?" if digit is None else str(digit)


codecs.register_error(ERRORS, _fallback)


@contextmanager
def ascii_fallbacks() -> Iterator[None]:
    """Standard output and error write ASCII look-alikes of what they cannot encode, for
    the duration of the block (their previous error handling comes back after)."""
    streams = [s for s in (sys.stdout, sys.stderr) if isinstance(s, io.TextIOWrapper)]
    previous = [s.errors for s in streams]
    for stream in streams:
        stream.reconfigure(errors=ERRORS)
    try:
        yield
    finally:
        for stream, errors in zip(streams, previous, strict=True):
            with suppress(ValueError, OSError):  # closed, or a broken pipe flushed on the way
                stream.reconfigure(errors=errors)


class _WholeWrites(io.RawIOBase):
    """A file descriptor written whole: a short write is continued until every byte is
    written or the system refuses one (an ``OSError``, e.g. no space left on device). The
    descriptor is not closed with it."""

    def __init__(self, fd: int):
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            written = os.write(self._fd, view[done:])
            if written == 0:  # no progress and no error: a full device, as it comes to that
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += written
        return done


@contextmanager
def whole_writes() -> Iterator[None]:
    """Standard output written whole or not at all (an ``OSError``) for the duration of the
    block, when it is a file descriptor (a terminal, a file, a pipe), buffered or not
    (``PYTHONUNBUFFERED``: there a cut-short write was dropped even for small outputs); its
    encoding, error handling and buffering are kept, and the previous stream comes back
    after."""
    previous = sys.stdout
    buffer = getattr(previous, "buffer", None)
    unbuffered = isinstance(buffer, io.FileIO)
    if not isinstance(previous, io.TextIOWrapper) or not (
        unbuffered or isinstance(getattr(buffer, "raw", None), io.FileIO)
    ):
        yield
        return
    previous.flush()
    raw = _WholeWrites(previous.fileno())
    sys.stdout = io.TextIOWrapper(
        raw if unbuffered else io.BufferedWriter(raw),
        encoding=previous.encoding,
        errors=previous.errors,
        line_buffering=previous.line_buffering,
        write_through=unbuffered or previous.write_through,
    )
    try:
        yield
    finally:
        with suppress(ValueError, OSError):  # the caller reported a failed flush already
            sys.stdout.flush()
        sys.stdout = previous
