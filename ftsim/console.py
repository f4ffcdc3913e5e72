"""Text on terminals of any encoding.

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
import io
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
