"""Where the members of an erasure-coded stripe live: the layout shared by the time model and
the trainer.

Both halves of the simulator need it: the ECRM policy's time model asks it which rows a set
of failed servers leaves undecodable and which survivors serve the decoding reads, and the
trainer's parity code (:mod:`ftsim.trainer.parity`) forms stripes and places parity by it.
It depends on NumPy only, so neither half imports the other.

Rows are placed round-robin: global row g lives on shard g mod N. A stripe is k data rows on k
distinct shards plus r parity rows on r further shards. Two layouts (``kind``):

- ``rotating`` (RAID-5 style, as ECRec's ``BaseParityScheme`` spreads every stripe over all
  servers): stripe j holds the k consecutive rows ``j*k .. j*k + k - 1``, on shards
  ``(j*k + i) % N``; with ``s = j*k % N``, ``P = N / gcd(N, k)`` and ``o = (j // P) * r``,
  parity slot m lives on shard ``(s + k + (o + m) % (N - k)) % N``, i.e. the parity rotates
  over the N − k shards that hold none of the stripe's data. Any k + r servers share some
  stripe, so r + 1 failures anywhere leave rows undecodable.
- ``grouped``: the N shards form N/n groups of n = ``group_size`` consecutive shards (k + r ≤ n)
  and every stripe lies inside one group, so failures in different groups stay decodable.
  Local row j of shard ``q*n + p`` (group q, position p) is global row ``j*N + q*n + p``. Rows
  come in blocks b of k local rows per shard; inside block b, group q has n stripes
  t = 0 .. n−1, stripe id ``b*N + q*n + t``: data offset i is local row ``b*k + i`` of
  position ``(t + i) % n``, parity slot m is on position ``(t + k + m) % n`` (parity rotates
  within the group; every position holds k data rows and r parity rows per block of n
  stripes, exactly balanced).

:meth:`StripeLayout.loss` answers, from the layout alone, which share of each failed shard's
rows a set of failures leaves undecodable: exact over one period of the layout (every stripe
pattern counted once), in O(failed² · k · r) time whatever N (a rotating period has about N²
stripes; it is never materialised), memoised per failed set. :meth:`StripeLayout.reads`
gives which survivors serve the decoding reads of a lone failed shard, and
:meth:`StripeLayout.rebuild_reads` which serve the rebuild of all its rows, data and parity
(both O(N); the first memoised per shard in O(exceptions) memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

LayoutKind = Literal["rotating", "grouped"]
_MEMO_SIZE = 4096
"""Failed sets a layout remembers the loss of before it starts afresh."""
RECENT_SIZE = 64
"""Per-shard values a memo keeps whole (the most recently used; :class:`CompactMemo`): more
than a replication's failed shards, fewer than a large cluster's shards."""


class CompactArray(NamedTuple):
    """A float array that is one value but at a few positions (a shard's reads or rebuild
    bytes from each of N servers: the same from all but its stripe partners), kept in
    O(exceptions) memory; :meth:`array` gives it back bit for bit (positions are told apart
    by bit pattern, so -0.0 and NaN come back as they were)."""

    size: int
    common: float
    """A frequent entry: the most frequent (by bit pattern) of the entries at a quarter,
    half and three quarters of the array (O(N), no sort: a shard's arrays are made once
    each, 1,800 of them at 100× nodes; any choice gives the array back, a frequent one
    keeps it small)."""
    positions: np.ndarray
    """Where the array differs from ``common`` (increasing)."""
    values: np.ndarray
    """Its entries there."""

    @classmethod
    def of(cls, array: np.ndarray) -> CompactArray:
        floats = np.ascontiguousarray(array, dtype=np.float64).ravel()
        bits = floats.view(np.int64)
        n = len(bits)
        if not n:
            return cls(0, 0.0, np.flatnonzero(bits), floats.copy())
        best = n // 2
        differ = bits != bits[best]
        fewest = np.count_nonzero(differ)
        if 2 * fewest >= n:  # no majority: another candidate may be more frequent
            for at in (n // 4, 3 * n // 4):
                others = np.count_nonzero(bits != bits[at])
                if others < fewest:
                    best, fewest = at, others
            differ = bits != bits[best]
        positions = np.flatnonzero(differ)
        return cls(n, float(floats[best]), positions, floats[positions])

    def at(self, indices: np.ndarray) -> np.ndarray:
        """The array's entries at ``indices`` (without making it whole)."""
        indices = np.asarray(indices, dtype=np.intp)
        out = np.full(len(indices), self.common)
        if len(self.positions):
            where = np.minimum(np.searchsorted(self.positions, indices), len(self.positions) - 1)
            kept = self.positions[where] == indices
            out[kept] = self.values[where[kept]]
        return out

    def array(self) -> np.ndarray:
        """The array, a new read-only one."""
        out = np.full(self.size, self.common)
        out[self.positions] = self.values
        out.flags.writeable = False
        return out


class Recent(dict):
    """A memo that keeps its ``size`` most recently used entries (:meth:`get` and
    :meth:`put` use one; the least recently used goes when a new one does not fit)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):
        found = self.pop(key, default)
        if found is not default:
            self[key] = found
        return found

    def put(self, key, value):
        if len(self) >= self.size:
            del self[next(iter(self))]
        self[key] = value
        return value


class CompactMemo:
    """Per-shard values made by ``make(shard)`` (a shard's read-only (N,) arrays, or what is
    made of them), memoised in O(N · exceptions) memory, not O(N²): each one packed
    (``pack``, e.g. :meth:`CompactArray.of`), the :data:`RECENT_SIZE` most recently used also
    whole (a replication asks for a few shards again and again; ``unpack`` makes the others
    whole again, bit for bit)."""

    def __init__(self, make, pack, unpack):
        self._make, self._pack, self._unpack = make, pack, unpack
        self._compact: dict = {}
        self._whole = Recent(RECENT_SIZE)

    def __call__(self, shard: int):
        """The value for ``shard``, whole."""
        found = self._whole.get(shard)
        if found is None:
            compact = self._compact.get(shard)
            if compact is None:
                found = self._make(shard)
                self._compact[shard] = self._pack(found)
            else:
                found = self._unpack(compact)
            self._whole.put(shard, found)
        return found

    def compact(self, shard: int):
        """The value for ``shard``, packed (without making it whole)."""
        found = self._compact.get(shard)
        if found is None:
            self(shard)
            found = self._compact[shard]
        return found


class LayoutError(ValueError):
    """An impossible layout; ``field`` names the parameter at fault (k, r or group_size)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Loss:
    """What losing a set of shards together costs, exact over one layout period.

    ``undecodable[x]``: fraction of failed shard x's data rows in stripes that lost more than
    r members (they need a checkpoint; the others are decodable).
    """

    shards: tuple[int, ...]
    undecodable: dict[int, float]

    @property
    def decodable(self) -> bool:
        """Every stripe lost at most r members."""
        return not any(self.undecodable.values())


@dataclass(frozen=True, slots=True)
class StripeLayout:
    """Stripe layout of a (k + r, k) code over ``n_shards`` round-robin shards (see the module
    docstring). ``group_size`` (grouped only) defaults to k + r."""

    n_shards: int
    k: int
    r: int
    kind: LayoutKind = "rotating"
    group_size: int | None = None
    _losses: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """Failed set → :class:`Loss` (memo of :meth:`loss`)."""
    _read_memo: CompactMemo | None = field(default=None, init=False, repr=False, compare=False)
    """Shard → its lone failure's reads (memo of :meth:`reads`)."""
    _firsts: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """(function, shard) → its array, for the first shard of each class (:meth:`_shifted`)."""

    def __post_init__(self) -> None:
        memo = CompactMemo(
            lambda shard: _read_only(self._shifted(_reads, shard)),
            CompactArray.of,
            CompactArray.array,
        )
        object.__setattr__(self, "_read_memo", memo)
        n, k, r = self.n_shards, self.k, self.r
        if k < 1 or r < 1:
            raise LayoutError("k" if k < 1 else "r", f"need k >= 1 and r >= 1; got k={k}, r={r}")
        if self.kind == "rotating":
            if self.group_size is not None:
                raise LayoutError("group_size", "group_size applies to the grouped layout only")
            if k + r > n:
                raise LayoutError("k", f"need k + r <= n_shards ({n}); got k={k}, r={r}")
        elif self.kind == "grouped":
            if self.size < k + r:
                raise LayoutError(
                    "group_size", f"group_size ({self.size}) must be at least k + r ({k + r})"
                )
            if n % self.size:
                raise LayoutError(
                    "group_size", f"n_shards ({n}) must be a multiple of group_size ({self.size})"
                )
        else:
            raise LayoutError("layout", f"unknown layout {self.kind!r}")

    @property
    def size(self) -> int:
        """Servers a stripe's members are drawn from: N (rotating) or the group size."""
        if self.kind == "rotating":
            return self.n_shards
        return self.group_size if self.group_size is not None else self.k + self.r

    # ------------------------------------------------------------- rows and stripes
    def n_stripes(self, n_rows: int) -> int:
        """Stripes ``0 .. n_stripes - 1`` cover rows ``0 .. n_rows - 1``; each has at least one
        existing row (the last ones may be short: their rows >= n_rows count as zero)."""
        if self.kind == "rotating":
            return -(-n_rows // self.k)
        block_rows = self.k * self.n_shards
        last = (n_rows - 1) // block_rows
        return last * self.n_shards + min(self.n_shards, n_rows - last * block_rows)

    def stripe_of(self, rows: np.ndarray) -> np.ndarray:
        """Stripe id of each global row."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.kind == "rotating":
            return rows // self.k
        n, size, k = self.n_shards, self.size, self.k
        shard, local = rows % n, rows // n
        t = (shard % size - local % k) % size
        return (local // k) * n + (shard // size) * size + t

    def offset_of(self, rows: np.ndarray) -> np.ndarray:
        """Offset (0 .. k−1) of each global row inside its stripe."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.kind == "rotating":
            return rows % self.k
        return (rows // self.n_shards) % self.k

    def data_rows(self, stripes: np.ndarray) -> np.ndarray:
        """Global rows of the data members of ``stripes`` (n,): (n, k), by offset (ids beyond
        the table are the missing members of short stripes)."""
        stripes = np.asarray(stripes, dtype=np.int64)[:, None]
        i = np.arange(self.k)
        if self.kind == "rotating":
            return stripes * self.k + i
        n, size = self.n_shards, self.size
        block, within = stripes // n, stripes % n
        group, t = within // size, within % size
        return (block * self.k + i) * n + group * size + (t + i) % size

    def parity_shards(self, stripes: np.ndarray) -> np.ndarray:
        """Shard of every parity slot of ``stripes`` (n,): (n, r), distinct from the data
        shards and from each other."""
        stripes = np.asarray(stripes, dtype=np.int64)[:, None]
        m = np.arange(self.r)
        n, k = self.n_shards, self.k
        if self.kind == "rotating":
            rot = (stripes // (n // math.gcd(n, k))) * self.r
            return (stripes * k % n + k + (rot + m) % (n - k)) % n
        size = self.size
        group, t = (stripes % n) // size, stripes % size
        return group * size + (t + k + m) % size

    # ------------------------------------------------------------------- failures
    def loss(self, failed: set[int] | frozenset[int]) -> Loss:
        """What losing the shards ``failed`` together costs (memoised per set)."""
        key = frozenset(failed)
        found = self._losses.get(key)
        if found is None:
            if len(self._losses) >= _MEMO_SIZE:
                self._losses.clear()
            found = self._losses[key] = _loss(self, key)
        return found

    def survives(self, failed: set[int] | frozenset[int]) -> bool:
        """Whether losing ``failed`` leaves every stripe decodable (≤ r members lost)."""
        return len(failed) <= self.r or self.loss(failed).decodable

    def reads(self, shard: int) -> np.ndarray:
        """(N,) rows read from each shard per decoded row of ``shard`` when it fails alone,
        averaged over one period: decoding a row reads the k − 1 other data rows of its
        stripe and its first parity row (sums to k; memoised per shard, compactly:
        :class:`CompactMemo`)."""
        return self._read_memo(shard)

    def rebuild_reads(self, shard: int) -> np.ndarray:
        """(N,) rows read from each shard per data row of ``shard`` to rebuild all the rows it
        held, when it failed alone, averaged over one period: each data row reads as in
        :meth:`reads` (k rows) and each of its parity rows (r/k per data row when the layout
        is balanced) reads the k data rows of its stripe (sums to k + r; worked out each
        time: its user, ECRM's plan, keeps what it makes of it)."""
        return _read_only(self._shifted(_parity_reads, shard) + self.reads(shard))

    def _shifted(self, make, shard: int) -> np.ndarray:
        """``make(self, shard)`` (:func:`_reads`, :func:`_parity_reads`), bit for bit, as
        that of the first shard of its class shifted by their distance (O(N) in NumPy, the
        first's worked out once): moving a shard by a multiple of g = gcd(N, k) (rotating)
        or of the group size (grouped) moves every stripe it is in by as much, and the
        counts are added up in the same order at the moved positions."""
        step = self._period()[0] if self.kind == "rotating" else self.size
        first = shard % step
        found = self._firsts.get((make, first))
        if found is None:
            found = self._firsts[make, first] = make(self, first)
        cut = len(found) - (shard - first)  # np.roll(found, shard - first), in one call
        return np.concatenate((found[cut:], found[:cut]))

    def _period(self) -> tuple[int, int, int]:
        """Rotating: (g, h, U) with g = gcd(N, k), h = gcd(N − k, r), U = (N − k)/h.

        Stripe j's members depend only on ``s = j*k % N`` (a multiple of g) and
        ``c = o % (N − k)`` (a multiple of h); over one period of (N/g)·U stripes every
        (s, c) pair occurs exactly once, and shard x holds data in the U·k/g stripes of the
        starts s = x − i (i < k) that are multiples of g.
        """
        n, k = self.n_shards, self.k
        return math.gcd(n, k), math.gcd(n - k, self.r), (n - k) // math.gcd(n - k, self.r)


def _loss(layout: StripeLayout, failed: frozenset[int]) -> Loss:
    """:meth:`StripeLayout.loss`. Rotating: for each start s holding data of a failed shard,
    d = failed data members; if d > r all U patterns c are undecodable, else those whose r
    parity slots hit at least r − d + 1 failed shards, found from the failed shards' offsets
    (at most r patterns per failed shard). Grouped: the k stripes of each block holding data
    of the shard, inside its group. O(failed² · k · r) either way, independent of N."""
    n, k, r = layout.n_shards, layout.k, layout.r
    undecodable = {}
    if layout.kind == "grouped":
        size = layout.size
        for x in failed:
            group, position = divmod(x, size)
            down = {f % size for f in failed if f // size == group}
            bad = 0
            for i in range(k):  # x is data offset i of stripe t = position − i
                t = position - i
                members = {(t + j) % size for j in range(k + r)}
                bad += len(members & down) > r
            undecodable[x] = bad / k
        return Loss(tuple(sorted(failed)), undecodable)
    g, h, patterns = layout._period()
    span = n - k
    for x in failed:
        bad = 0
        starts = [s for s in ((x - i) % n for i in range(k)) if s % g == 0]
        for s in starts:
            data = {(s + i) % n for i in range(k)}
            lost = len(data & failed)
            if lost > r:
                bad += patterns
                continue
            hits: dict[int, int] = {}
            for f in failed - data:
                t = (f - s - k) % n  # offset of f among the parity positions of s
                for m in range(r):
                    c = (t - m) % span  # pattern whose parity slot m lands on f
                    if c % h == 0:
                        hits[c] = hits.get(c, 0) + 1
            bad += sum(count > r - lost for count in hits.values())
        undecodable[x] = bad / (len(starts) * patterns)
    return Loss(tuple(sorted(failed)), undecodable)


def _reads(layout: StripeLayout, shard: int) -> np.ndarray:
    """:meth:`StripeLayout.reads` (read-only array)."""
    n, k = layout.n_shards, layout.k
    out = np.zeros(n)
    if layout.kind == "grouped":
        size = layout.size
        base = shard - shard % size
        for i in range(k):  # the stripe t = position − i holding the shard at offset i
            t = shard % size - i
            for j in [*range(k), k]:  # data members, first parity slot
                if j != i:
                    out[base + (t + j) % size] += 1
        out /= k
    else:
        g, h, patterns = layout._period()
        starts = [s for s in ((shard - i) % n for i in range(k)) if s % g == 0]
        for s in starts:
            for i in range(k):
                if (s + i) % n != shard:
                    out[(s + i) % n] += patterns
            out[(s + k + np.arange(0, n - k, h)) % n] += 1  # first parity slot of each c
        out /= len(starts) * patterns
    out.flags.writeable = False
    return out


def _parity_reads(layout: StripeLayout, shard: int) -> np.ndarray:
    """Rows read from each shard, per data row of ``shard``, to rebuild the parity rows it
    holds (each from the k data members of its stripe), over one period."""
    n, k, r = layout.n_shards, layout.k, layout.r
    out = np.zeros(n)
    if layout.kind == "grouped":
        size = layout.size
        base, position = shard - shard % size, shard % size
        for m in range(r):  # the stripe t of each block whose parity slot m is on the shard
            t = position - k - m
            for i in range(k):
                out[base + (t + i) % size] += 1
        return out / k  # k data rows of the shard per block
    g, h, patterns = layout._period()
    span = n - k
    starts = np.arange(0, n, g)  # the shard holds parity of some of their patterns
    t = (shard - starts - k) % n  # its offset among the parity positions of each start
    holds = np.zeros(len(starts), dtype=np.int64)  # (t ≥ span: it holds data there)
    for m in range(r):  # pattern c = t − m puts parity slot m on the shard
        holds += (t < span) & ((t - m) % span % h == 0)
    for i in range(k):  # each such stripe reads its k data members (whole counts: exact)
        out += np.bincount((starts + i) % n, weights=holds, minlength=n)
    data_rows = sum(1 for i in range(k) if (shard - i) % n % g == 0) * patterns
    return out / data_rows


def _read_only(values) -> np.ndarray:
    """``values`` as a float64 array that cannot be written (a memo hands it out)."""
    found = np.asarray(values, dtype=np.float64)
    found.flags.writeable = False
    return found
