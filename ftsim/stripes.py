"""Where the members of an erasure-coded stripe live: the layout shared by the time model and
the trainer.

Both halves of the simulator need it: the ECRM policy's time model decides from it whether
a set of failed servers can be decoded, and the trainer's parity code
(:mod:`ftsim.trainer.parity`) places parity rows by it. It depends on NumPy only, so neither
half imports the other.

Rotating layout (RAID-5 style, after ECRec): over N shards with row round-robin placement,
stripe ``j`` holds the k consecutive global rows ``j*k .. j*k + k - 1``, on shards
``(j*k + i) % N``; its r parity rows rotate over the N − k shards that hold none of its
data (see :mod:`ftsim.trainer.parity` for the formula and its balance).
"""

from __future__ import annotations

import math

import numpy as np


def parity_shards_of(n_shards: int, k: int, r: int, stripes: np.ndarray) -> np.ndarray:
    """Shard of every parity slot of ``stripes`` (n,) under the rotation above: (n, r)."""
    stripes = np.asarray(stripes, dtype=np.int64)
    start = (stripes * k) % n_shards
    rot = (stripes // (n_shards // math.gcd(n_shards, k))) * r
    slot = (rot[:, None] + np.arange(r)) % (n_shards - k)
    return (start[:, None] + k + slot) % n_shards


def survives(n_shards: int, k: int, r: int, failed: set[int]) -> bool:
    """Whether losing the shards ``failed`` leaves every stripe decodable (≤ r members lost).

    Depends on the layout only, so the time model can decide without a trainer: the stripe
    pattern repeats every P·(N − k)/gcd(N − k, r) stripes (P = N / gcd(N, k)), so checking one
    period checks them all.
    """
    if len(failed) <= r:
        return True
    period = (n_shards // math.gcd(n_shards, k)) * ((n_shards - k) // math.gcd(n_shards - k, r))
    stripes = np.arange(period)
    data = (stripes[:, None] * k + np.arange(k)) % n_shards
    members = np.concatenate([data, parity_shards_of(n_shards, k, r, stripes)], axis=1)
    lost = np.isin(members, sorted(failed)).sum(axis=1)
    return bool(lost.max() <= r)
