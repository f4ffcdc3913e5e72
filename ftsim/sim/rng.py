"""Random streams: one ``numpy.random.Generator`` per (seed, replication, purpose).

A stream is ``SeedSequence(seed, spawn_key=(rep, purpose, *index))``, the same child that
``SeedSequence(seed).spawn`` would give at that position of the tree. Streams are
independent of one another and of the policy being simulated, so two policies run with
the same seed and replication see the same failures and rescheduling delays (common random
numbers), and adding a failure source does not change the draws of the others.
:class:`LazyStream` makes its generator only when first drawn from: making one costs about
20 µs, a few per cent of a replication, and rescheduling delays often draw nothing (a
constant delay).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Purpose(IntEnum):
    """What a stream is for; the value is its position in the seed tree (never reorder)."""

    FAILURES = 0
    """One sub-stream per failure source, by its index in the scenario."""
    RESCHEDULE = 1
    """Rescheduling delays, one draw per failure in time order."""
    POLICY = 2
    """Random choices of a policy's trainer-side mechanisms (SSU's sampling); the time
    model draws nothing here."""
    TRAINER = 3
    """The embedded trainer's data and initialisation."""
    OPERATIONS = 4
    """Cluster operations (:mod:`ftsim.sim.operations`): sub-stream 0 the classes of the
    job's nodes, 1 of the warm standbys, 2 of the spares (good or bad, drawn once per
    replication), 3 the draws of each failure (detection, repair, swap or provisioning)."""


def stream(seed: int, rep: int, purpose: Purpose, *index: int) -> np.random.Generator:
    """The generator for ``purpose`` in replication ``rep`` of a run seeded with ``seed``."""
    sequence = np.random.SeedSequence(seed, spawn_key=(rep, int(purpose), *index))
    return np.random.Generator(np.random.PCG64(sequence))


class LazyStream:
    """:func:`stream`'s generator, made on first use: attribute access (``rng.random()``,
    ``rng.spawn(2)``) goes to the generator, so the draws are the same bit for bit."""

    __slots__ = ("_key", "_generator")

    def __init__(self, seed: int, rep: int, purpose: Purpose, *index: int):
        self._key = (seed, rep, purpose, *index)
        self._generator: np.random.Generator | None = None

    def __getattr__(self, name: str):
        # Called only for names the proxy lacks: the generator's. Special names and the
        # slots themselves (unset while pickle or copy rebuilds a proxy) are not delegated.
        if name.startswith("__") or name in LazyStream.__slots__:
            raise AttributeError(name)
        if self._generator is None:
            self._generator = stream(*self._key)
        return getattr(self._generator, name)
