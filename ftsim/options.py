"""A study's options as the reader of a message types them: as Python arguments
(``resume='DIR'``, ``force=True``), or, within the command line (:func:`command_line`), as
its flags (``--resume DIR``, ``--force``). An error or a note then names a remedy its reader
can use, whichever face they came through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import PurePath

_COMMAND_LINE: ContextVar[bool] = ContextVar("ftsim_options_command_line", default=False)

_FLAGS = {"out": "-o", "overrides": "--set", "policies": "--policy", "formats": "--format"}
"""Options whose flag is not ``--`` and the name with dashes."""


@contextmanager
def command_line() -> Iterator[None]:
    """Within the block (this thread or task), options are spelled as the command line's
    flags."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def on_command_line() -> bool:
    """Whether options are spelled as the command line's flags here."""
    return _COMMAND_LINE.get()


def named(name: str) -> str:
    """Option ``name`` (its Python argument's name, e.g. ``max_reps``) as the reader knows
    it: ``max_reps``, or ``--max-reps`` on the command line."""
    if not on_command_line():
        return name
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def option(name: str, value: object = True) -> str:
    """Option ``name`` given ``value`` as the reader types it: ``max_reps=5`` or
    ``--max-reps 5``; ``True`` is a flag: ``force=True`` or ``--force``."""
    if not on_command_line():
        return f"{name}={str(value) if isinstance(value, PurePath) else value!r}"
    return named(name) if value is True else f"{named(name)} {value}"
