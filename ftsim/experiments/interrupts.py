"""Termination signals handled as Ctrl-C.

SIGTERM (what schedulers, ``kill`` and ``timeout`` send) and SIGHUP (a closed terminal) raise
:class:`Interrupted`, a ``KeyboardInterrupt``, exactly as SIGINT does, so that every command
takes the one path Ctrl-C takes: it says what it kept and leaves no half-written output. The
exit status is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP),
as for a process the signal would have killed. A signal the caller ignores (``nohup``, a
background job) stays ignored.

A short critical section (moving finished files into place) runs inside :func:`deferred`:
a signal received there is acted on when it ends, so the section is never cut in half. So do
the calls into a pool of workers (submitting, collecting a result, cancelling, shutting
down): their locks are Python-level conditions (``concurrent.futures``, ``queue``), and an
exception raised by a handler right after such a lock is taken, before its ``with`` block
begins, leaves it taken for good (bpo-29988): the pool's manager thread then waits for it
forever, and the command with it at exit. A clean-up on the way out of a block that is
ending anyway runs inside :func:`shielded`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_received: int | None = None
"""The last signal handled since :func:`handled` started (None: none)."""
_handling = False
"""Whether :func:`handled`'s block runs (its handlers are installed)."""
_deferring = 0
_pending: int | None = None
_owner: int | None = None
"""The process that installed the handlers: a process forked from it (a pool worker, until
its initializer runs) inherits them and must not raise in the parent's stead."""


class Interrupted(KeyboardInterrupt):
    """A termination signal received while a command ran (caught as ``KeyboardInterrupt``).
    Its only argument is the signal number, so that code re-raising an exception as
    ``type(exc)(*exc.args)`` (SimPy does) gets the same exception."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return signal.Signals(self.signum).name


def _handler(signum: int, frame) -> None:
    global _received, _pending
    if os.getpid() != _owner:  # a forked worker not yet set up: act as a worker does
        if signum == signal.SIGTERM:
            os._exit(128 + signum)
        return
    _received = signum
    if _deferring:
        _pending = signum
        return
    raise Interrupted(signum)


@contextmanager
def handled(signals: tuple[int, ...] = SIGNALS) -> Iterator[None]:
    """``signals`` (SIGINT, SIGTERM and SIGHUP) raise :class:`Interrupted` inside the block
    (the main thread only: Python runs signal handlers there); the previous handlers come
    back after."""
    global _received, _owner, _handling, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = _pending = None  # (a signal kept from an earlier block is that block's)
    _owner = os.getpid()
    previous = {}
    for signum in signals:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _handler)
    unraisable, sys.unraisablehook = sys.unraisablehook, _kept_pending(sys.unraisablehook)
    _handling = True
    try:
        yield
    finally:
        _handling = False
        sys.unraisablehook = unraisable
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if _pending is not None and not _deferring:  # one a finalizer got (see _kept_pending)
        signum, _pending = _pending, None
        raise Interrupted(signum)


def _kept_pending(hook):
    """An unraisable-exception hook that keeps a signal whose :class:`Interrupted` was
    raised inside a finalizer, a weakref callback or a ``__del__`` run by the collector
    (where Python prints "Exception ignored" with a traceback and drops the exception) as
    pending: raised as the next section that defers signals ends (:func:`deferred`), or as
    :func:`handled`'s block does. Other exceptions go to ``hook``. (Found by the fault
    fuzzer: a SIGTERM inside a pool worker's pipe finalizer as a run ended, printed and
    lost.)"""

    def unraisable(info) -> None:
        global _pending
        if isinstance(info.exc_value, Interrupted) and os.getpid() == _owner:
            _pending = info.exc_value.signum
        else:
            hook(info)

    return unraisable


@contextmanager
def ctrl_c_handled() -> Iterator[None]:
    """For a study started from Python (a notebook, a script): Ctrl-C (SIGINT) raises
    :class:`Interrupted` through this module's handler inside the block, as under the
    command line's :func:`handled`, so that the sections it defers hold there too (Python's
    own handler raises anywhere, in a pool's locking as well). Only in the main thread,
    while Python's default handler is installed (a program's own handler, or SIGINT
    ignored, stays as it is), and not inside :func:`handled` already."""
    default = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if _handling or not default or threading.current_thread() is not threading.main_thread():
        yield
        return
    with handled((signal.SIGINT,)):
        yield


@contextmanager
def deferred(raise_after: bool = True) -> Iterator[None]:
    """A section no signal interrupts: one received inside is raised when it ends (unless
    ``raise_after`` is false: see :func:`shielded`)."""
    global _deferring, _pending
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending is not None:
            signum, _pending = _pending, None
            if raise_after:
                raise Interrupted(signum)


def shielded():
    """A clean-up no signal interrupts, on the way out of a block that ends anyway (an
    error, a signal): a signal received inside is not raised when it ends (the exception
    under way goes on), only counted for the exit status (:func:`exit_status`)."""
    return deferred(raise_after=False)


@contextmanager
def unwrapped() -> Iterator[None]:
    """Inside the block, an exception a library made of a signal's ``KeyboardInterrupt`` is
    raised as the signal's :class:`Interrupted`, so that the caller's Ctrl-C path (saying what
    it kept) takes it.

    A library that calls back into Python may catch the ``KeyboardInterrupt`` a signal
    raised there and raise its own error instead (pydantic's serializer turns it into a
    ``PydanticSerializationError``): any exception that ends the block after a signal was
    received inside :func:`handled` is that signal's doing (outside it, e.g. the Python API
    after an interrupted command, errors stay errors)."""
    try:
        yield
    except Exception as exc:
        if not _handling or _received is None:
            raise
        raise Interrupted(_received) from exc


def exit_status() -> int:
    """The exit status of a command stopped by the last signal: 128 + its number."""
    return 128 + (_received or signal.SIGINT)
