"""Embedding tables with per-row optimizer state, sharded over embedding parameter servers.

All tables are stored in one array ``weights`` of shape (R, d) (R = total rows); table ``t``
occupies global rows ``offsets[t] : offsets[t+1]``. A (table, row) pair maps to the global row
``offsets[table] + row``. One array makes the per-step lookup a single gather and the
backward a single sort + segment sum over all tables.

Placement (``ShardingConfig.placement``):

* ``row_round_robin``: global row ``g`` lives on shard ``g % n_shards`` (every table is spread
  over all shards; consecutive rows of a table go to consecutive shards).
* ``table_wise``: whole tables; largest table first onto the shard with fewest rows so far
  (ties: lowest shard index).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ftsim.trainer.config import ShardingConfig, SparseOptimizerConfig
from ftsim.trainer.optim import SparseOptimizer, put_rows


@dataclass
class RowData:
    """Values and optimizer state of a set of embedding rows (a copy, not a view).

    ``rows`` are sorted global row ids (n,); ``values`` (n, d); ``state[name]`` (n, ...).
    """

    rows: np.ndarray
    values: np.ndarray
    state: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of values plus optimizer state."""
        return int(self.values.nbytes + sum(a.nbytes for a in self.state.values()))

    def subset(self, rows: np.ndarray) -> RowData:
        """The entries for the given global ids (each must be present)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        pos = np.searchsorted(self.rows, rows)
        if len(rows) and (pos.max() >= len(self.rows) or np.any(self.rows[pos] != rows)):
            raise KeyError("some requested rows are not in this RowData")
        return RowData(rows, self.values[pos], {k: v[pos] for k, v in self.state.items()})


@dataclass
class SparseUpdate:
    """What one training step changed in the embeddings (delivered to update listeners).

    ``rows``: sorted unique global row ids touched (n,); ``counts``: lookups per row in the
    batch (n,) (both read-only: every trainer of the batch shares them); ``grad``: summed
    gradient per row (n, d) before the optimizer rule; ``old``/``new``: row values and
    optimizer state before and after the update (so the update can be undone exactly,
    replayed, or folded into parity as ``new - old``).
    """

    step: int
    rows: np.ndarray
    counts: np.ndarray
    grad: np.ndarray
    old: RowData
    new: RowData
    offsets: np.ndarray

    def tables(self) -> np.ndarray:
        """Table index of every touched row (n,)."""
        return np.searchsorted(self.offsets, self.rows, side="right") - 1

    def by_table(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per table: (row ids local to the table, counts)."""
        bounds = np.searchsorted(self.rows, self.offsets)
        return [
            (self.rows[a:b] - self.offsets[t], self.counts[a:b])
            for t, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
        ]

    def by_shard(self, embeddings: ShardedEmbeddings) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per shard: (global row ids, counts) of the touched rows it holds."""
        shard = embeddings.shard_of_global(self.rows)
        return [
            (self.rows[shard == s], self.counts[shard == s]) for s in range(embeddings.n_shards)
        ]


class ShardedEmbeddings:
    """All embedding tables, their per-row optimizer state, and the row -> shard placement."""

    def __init__(
        self,
        table_sizes: list[int],
        dim: int,
        sharding: ShardingConfig,
        optimizer: SparseOptimizerConfig,
        rng: np.random.Generator,
        dtype: np.dtype = np.float32,
    ) -> None:
        self.table_sizes = [int(n) for n in table_sizes]
        self.dim = dim
        self.n_shards = sharding.n_shards
        self.placement = sharding.placement
        self.offsets = np.concatenate([[0], np.cumsum(self.table_sizes)]).astype(np.int64)
        self.n_rows = int(self.offsets[-1])
        self.dtype = np.dtype(dtype)
        # facebookresearch/dlrm init: uniform(-sqrt(1/n), sqrt(1/n)) for a table of n rows
        self.weights = np.empty((self.n_rows, dim), self.dtype)
        self._rows = self.weights.view(np.dtype((np.void, dim * self.dtype.itemsize)))[:, 0]
        """``weights`` with each row one opaque item (:meth:`lookup`)."""
        for t, n in enumerate(self.table_sizes):
            lim = np.sqrt(1.0 / n)
            self.tables_view(t)[:] = rng.uniform(-lim, lim, size=(n, dim))
        self.optimizer = SparseOptimizer(optimizer)
        self.state = {
            k: np.zeros(shape, self.dtype)
            for k, shape in self.optimizer.state_shapes(self.n_rows, dim).items()
        }
        self.table_shard = self._table_placement() if self.placement == "table_wise" else None

    # ----------------------------------------------------------------- layout
    def tables_view(self, table: int) -> np.ndarray:
        """Writable view (rows, d) of one table."""
        return self.weights[self.offsets[table] : self.offsets[table + 1]]

    def global_rows(self, table: int, rows: np.ndarray) -> np.ndarray:
        """Global row ids of ``rows`` of ``table``."""
        return np.asarray(rows, dtype=np.int64) + self.offsets[table]

    def split_global(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global ids -> (table index, row id within the table)."""
        rows = np.asarray(rows, dtype=np.int64)
        tables = np.searchsorted(self.offsets, rows, side="right") - 1
        return tables, rows - self.offsets[tables]

    def _table_placement(self) -> np.ndarray:
        load = np.zeros(self.n_shards, dtype=np.int64)
        owner = np.empty(len(self.table_sizes), dtype=np.int64)
        for t in sorted(range(len(self.table_sizes)), key=lambda t: (-self.table_sizes[t], t)):
            s = int(np.argmin(load))
            owner[t] = s
            load[s] += self.table_sizes[t]
        return owner

    def shard_of_global(self, rows: np.ndarray) -> np.ndarray:
        """Shard of each global row id."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.table_shard is None:
            return rows % self.n_shards
        return self.table_shard[np.searchsorted(self.offsets, rows, side="right") - 1]

    def shard_of(self, table: int, rows: np.ndarray) -> np.ndarray:
        """Shard of each row id of ``table``."""
        return self.shard_of_global(self.global_rows(table, rows))

    def shard_rows(self, shard: int) -> np.ndarray:
        """Sorted global row ids held by ``shard``."""
        if self.table_shard is None:
            return np.arange(shard, self.n_rows, self.n_shards, dtype=np.int64)
        parts = [
            np.arange(self.offsets[t], self.offsets[t + 1], dtype=np.int64)
            for t in np.flatnonzero(self.table_shard == shard)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    @property
    def row_bytes(self) -> int:
        """Bytes per row: values plus optimizer state."""
        per_row = self.dim + sum(int(np.prod(a.shape[1:])) for a in self.state.values())
        return per_row * self.dtype.itemsize

    def shard_n_rows(self, shard: int) -> int:
        """Rows held by ``shard``."""
        if self.table_shard is None:
            return len(range(shard, self.n_rows, self.n_shards))
        return int(sum(self.table_sizes[t] for t in np.flatnonzero(self.table_shard == shard)))

    def shard_bytes(self, shard: int) -> int:
        """Bytes of values plus optimizer state held by ``shard``."""
        return self.shard_n_rows(shard) * self.row_bytes

    # ------------------------------------------------------------ read/write
    def read_rows(self, rows: np.ndarray) -> RowData:
        """Copy of values and state of the given global rows (any order; result sorted, unique)."""
        return self.read_rows_sorted(np.unique(np.asarray(rows, dtype=np.int64)))

    def write_rows(self, data: RowData) -> None:
        """Overwrite values and state of ``data.rows`` (e.g. a partial checkpoint)."""
        put_rows(self.weights, data.rows, data.values)
        for k, v in self.state.items():
            put_rows(v, data.rows, data.state[k])

    def read_shard(self, shard: int) -> RowData:
        """Copy of all rows and optimizer state of ``shard``."""
        return self.read_rows_sorted(self.shard_rows(shard))

    def write_shard(self, shard: int, data: RowData) -> None:
        """Overwrite all rows of ``shard``; ``data`` must cover exactly that shard."""
        if not np.array_equal(data.rows, self.shard_rows(shard)):
            raise ValueError(f"data does not cover exactly the rows of shard {shard}")
        self.write_rows(data)

    def snapshot(self) -> RowData:
        """Copy of every row and its state (rows = all global ids)."""
        return RowData(
            np.arange(self.n_rows, dtype=np.int64),
            self.weights.copy(),
            {k: v.copy() for k, v in self.state.items()},
        )

    def restore(self, snap: RowData) -> None:
        """Inverse of :meth:`snapshot`."""
        np.copyto(self.weights, snap.values)
        for k, v in self.state.items():
            np.copyto(v, snap.state[k])

    # ------------------------------------------------------------- training
    def lookup(self, global_ids: np.ndarray, out: np.ndarray) -> None:
        """Gather rows: ``out[b, t] = weights[global_ids[b, t]]``; out is (B, T, d).

        Into a C-contiguous ``out`` each row is copied whole, as one opaque item (the
        trainer gathers a step's rows this way: 10 µs instead of 25 at prod50h's shapes);
        into a strided one (e.g. ``feat[:, 1:]``) NumPy gathers into a buffer and copies
        that into place."""
        if out.flags.c_contiguous:
            self._rows.take(global_ids, out=out.view(self._rows.dtype)[..., 0], mode="clip")
        else:
            self.weights.take(global_ids, axis=0, out=out, mode="clip")

    def apply_gradients(
        self, rows: np.ndarray, grad: np.ndarray, record: bool
    ) -> tuple[RowData, RowData] | None:
        """Optimizer update of unique ``rows`` with summed ``grad`` (overwritten).

        With ``record`` the values/state before and after are returned (for listeners).
        """
        old = self.read_rows_sorted(rows) if record else None
        self.optimizer.apply(self.weights, self.state, rows, grad)
        return (old, self.read_rows_sorted(rows)) if record else None

    def read_rows_sorted(self, rows: np.ndarray) -> RowData:
        """Like :meth:`read_rows` for ids already sorted and unique (no re-sorting)."""
        state = {k: np.take(v, rows, axis=0) for k, v in self.state.items()}
        return RowData(rows, np.take(self.weights, rows, axis=0), state)


# SegmentSum finds the unique ids by counting lookups per row over all rows when there are at
# most this many rows per lookup, else by sorting the lookups (np.unique). Counting costs
# ~0.5 ns per row, sorting ~15 ns per lookup.
_COUNT_ROWS_PER_LOOKUP = 32


class SumPattern:
    """Where the lookups of a batch layout take their gradients from, and the parts of
    :class:`SegmentSum`'s matrix that every batch of that layout shares.

    Lookup ``k`` (of ``n``) takes its gradient from row ``col_of[k]`` of an (M, d) work array
    (``col_of`` strictly increasing, so the gradient can stay inside a larger array, e.g. the
    interaction's (B, T+1, d) gradient).
    """

    def __init__(self, col_of: np.ndarray, n_grad_rows: int) -> None:
        n = len(col_of)
        self.n_lookups = n
        self.n_grad_rows = n_grad_rows
        self.indptr = np.zeros(n_grad_rows + 1, dtype=np.int32)
        self.indptr[np.asarray(col_of) + 1] = 1
        np.cumsum(self.indptr, out=self.indptr)
        self._ones: dict[np.dtype, np.ndarray] = {}

    def ones(self, dtype: np.dtype) -> np.ndarray:
        """The matrix's values, all 1, in ``dtype`` (the gradients'; made once per dtype)."""
        found = self._ones.get(dtype)
        if found is None:
            found = self._ones[dtype] = np.ones(self.n_lookups, dtype)
            found.flags.writeable = False
        return found


class SegmentSum:
    """The backward of one batch's lookups: per looked-up id, the sum of the gradient rows of
    its lookups, without a dense table-sized gradient.

    Everything but the sums depends on the ids only, so it is built once per batch and shared,
    read-only, by every trainer that trains the batch (a replication's baseline and its
    forks): ``rows``, the sorted unique ids (n_u,); ``counts``, lookups per id (n_u,); and the
    index arrays of a sparse 0/1 (n_u x M) CSC matrix whose product with a step's gradient rows
    (M, d) is the sums (n_u, d). In CSC the matrix has one entry per column ``col_of[k]``
    (``pattern``) in lookup order, in the row of lookup ``k``'s id; scipy's product
    (``csc_matvecs``, called on these arrays directly: building a ``csc_matrix`` would check
    them again, ~45 µs per batch at prod50h's shapes) adds each id's gradients in lookup
    order, starting from zero, so the sums are deterministic and the same on every machine.

    The unique ids come from a count of the lookups per row when ``n_rows <= 32 n``, else
    from a sort of the ids.
    """

    def __init__(self, ids: np.ndarray, n_rows: int, pattern: SumPattern) -> None:
        from scipy.sparse import _sparsetools  # deferred: keeps `import ftsim.trainer` light

        self._matvecs = _sparsetools.csc_matvecs
        if len(ids) != pattern.n_lookups:
            raise ValueError(f"{len(ids)} ids for a pattern of {pattern.n_lookups} lookups")
        if n_rows <= _COUNT_ROWS_PER_LOOKUP * len(ids):
            per_row = np.bincount(ids, minlength=n_rows)
            self.rows = np.flatnonzero(per_row > 0)  # 3x faster than on the int64 counts
            self.counts = per_row[self.rows]
            rank = np.empty(n_rows, dtype=np.int32)
            rank[self.rows] = np.arange(len(self.rows), dtype=np.int32)
            inverse = rank[ids]
        else:
            self.rows, inverse, self.counts = np.unique(
                ids, return_inverse=True, return_counts=True
            )
        self.pattern = pattern
        self.inverse = inverse.astype(np.int32, copy=False)
        """Row of each lookup's id among ``rows`` (the matrix's row indices, in CSC order)."""
        # shared by every trainer of the batch and handed to their update listeners: read-only
        for a in (self.rows, self.counts, self.inverse):
            a.flags.writeable = False

    def __call__(self, grad_rows: np.ndarray) -> np.ndarray:
        """Sums (n_u, d) of the gradient rows (M, d), C-contiguous, per id (a new array)."""
        p = self.pattern
        if grad_rows.shape[0] != p.n_grad_rows:
            raise ValueError(f"{grad_rows.shape[0]} gradient rows for a pattern of {p.n_grad_rows}")
        width = grad_rows.shape[1]
        sums = np.zeros((len(self.rows), width), dtype=grad_rows.dtype)
        self._matvecs(
            len(self.rows),
            p.n_grad_rows,
            width,
            p.indptr,
            self.inverse,
            p.ones(grad_rows.dtype),
            np.ascontiguousarray(grad_rows).ravel(),
            sums.ravel(),
        )
        return sums
