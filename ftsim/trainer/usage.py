"""Cheap row-usage bookkeeping for prioritized partial checkpoints (CPR-MFU and CPR-SSU).

Both work on global row ids (see ``embeddings.py``) and are fed the unique rows and counts the
embedding backward already computed, so leaving them on costs one scatter-add (MFU) and one
uniform draw per touched row (SSU) per step.
"""

from __future__ import annotations

import numpy as np


class UseCounter:
    """CPR-MFU: number of lookups of every embedding row since the last reset."""

    def __init__(self, n_rows: int) -> None:
        self.counts = np.zeros(n_rows, dtype=np.int64)

    def add(self, rows: np.ndarray, counts: np.ndarray) -> None:
        """Accumulate ``counts`` for unique global ``rows``."""
        np.add.at(self.counts, rows, counts)  # faster than fancy += for 1-d arrays

    def top_rows(self, fraction: float, among: np.ndarray | None = None) -> np.ndarray:
        """Most-used rows: the ``ceil(fraction * len(among))`` highest counts, used rows only.

        ``among`` restricts the candidates (e.g. one shard's rows; default: all rows). Ties
        are broken by lower row id. Returns sorted global ids.
        """
        cand = np.arange(len(self.counts)) if among is None else np.asarray(among, np.int64)
        k = int(np.ceil(fraction * len(cand)))
        c = self.counts[cand]
        used = np.flatnonzero(c)
        if k <= 0 or len(used) == 0:
            return np.zeros(0, dtype=np.int64)
        order = np.lexsort((cand[used], -c[used]))[:k]
        return np.sort(cand[used[order]])

    def reset(self, rows: np.ndarray | None = None) -> None:
        """Zero all counters, or only those of ``rows`` (e.g. the rows just saved)."""
        if rows is None:
            self.counts[:] = 0
        else:
            self.counts[rows] = 0


class UseSampler:
    """CPR-SSU: per batch, sample each lookup with probability ``fraction`` into a ring buffer.

    A row looked up ``c`` times in a batch is kept with probability ``1 - (1-fraction)**c``
    (sampling lookups, then de-duplicating). The buffer holds at most ``capacity`` ids; when
    full, the oldest are overwritten. Randomness comes from a stream keyed by (seed, step),
    so restoring a trainer snapshot replays the same samples.
    """

    def __init__(self, fraction: float, capacity: int, seed: int) -> None:
        self.fraction = fraction
        self.seed = seed
        self._buf = np.zeros(capacity, dtype=np.int64)
        self._pos = 0
        self._size = 0

    def observe(self, step: int, rows: np.ndarray, counts: np.ndarray) -> None:
        """Sample from the unique ``rows`` touched at ``step`` (with their ``counts``)."""
        rng = np.random.default_rng([self.seed, 0x55, step])
        keep = rng.random(len(rows)) < -np.expm1(np.log1p(-self.fraction) * counts)
        picked = rows[keep][-len(self._buf) :]
        cap = len(self._buf)
        idx = (self._pos + np.arange(len(picked))) % cap
        self._buf[idx] = picked
        self._pos = (self._pos + len(picked)) % cap
        self._size = min(cap, self._size + len(picked))

    def peek(self) -> np.ndarray:
        """Sorted unique ids currently in the buffer."""
        return np.unique(self._buf[: self._size] if self._size < len(self._buf) else self._buf)

    def drain(self) -> np.ndarray:
        """Sorted unique ids in the buffer, then empty it (call at each partial save)."""
        rows = self.peek()
        self._pos = self._size = 0
        return rows
