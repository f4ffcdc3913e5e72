"""A study's options as the reader of a message types them: the command line's flags
(``--resume DIR``, ``--force``), or, in a call of the Python API (:func:`from_python`), its
keyword arguments (``resume='DIR'``, ``force=True``). An error or a note then names a remedy
its reader can use, whichever face they came through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import PurePath

_FROM_PYTHON: ContextVar[bool] = ContextVar("ftsim_options_from_python", default=False)

_FLAGS = {"out": "-o", "overrides": "--set", "policies": "--policy"}
"""Options whose flag is not ``--`` and the name with dashes."""


@contextmanager
def from_python() -> Iterator[None]:
    """Within the block (this thread or task), options are spelled as Python arguments."""
    token = _FROM_PYTHON.set(True)
    try:
        yield
    finally:
        _FROM_PYTHON.reset(token)


def named(name: str) -> str:
    """Option ``name`` (its Python argument's name, e.g. ``max_reps``) as the reader knows
    it: ``--max-reps``, or ``max_reps`` from Python."""
    if _FROM_PYTHON.get():
        return name
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def option(name: str, value: object = True) -> str:
    """Option ``name`` given ``value`` as the reader types it: ``--max-reps 5`` or
    ``max_reps=5``; ``True`` is a flag: ``--force`` or ``force=True``."""
    if _FROM_PYTHON.get():
        return f"{name}={str(value) if isinstance(value, PurePath) else value!r}"
    return named(name) if value is True else f"{named(name)} {value}"
