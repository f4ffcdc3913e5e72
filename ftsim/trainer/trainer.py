"""The embedded trainer: DLRM + sharded embeddings + data stream + hooks for FT strategies.

One step trains on batch ``step`` of the data stream (a pure function of the data seed and
the index), so restoring a snapshot taken at step k and calling ``train`` replays exactly
the batches k, k+1, ... and reproduces the parameters bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ftsim.trainer.config import TrainerConfig
from ftsim.trainer.criteo import CriteoData
from ftsim.trainer.data import Batch, SharedData, SyntheticData
from ftsim.trainer.embeddings import (
    RowData,
    SegmentSum,
    ShardedEmbeddings,
    SparseUpdate,
    SumPattern,
)
from ftsim.trainer.metrics import auc, log_loss
from ftsim.trainer.model import DenseDLRM, Workspace, bce_with_logits, sigmoid
from ftsim.trainer.optim import DenseOptimizer
from ftsim.trainer.usage import UseCounter

UpdateListener = Callable[[SparseUpdate], None]
UseListener = Callable[[int, np.ndarray, np.ndarray], None]
_EVAL_CHUNK = 4096  # samples per forward pass in evaluate()


@dataclass
class TrainerSnapshot:
    """Complete training state: dense parameters and optimizer state, every embedding row
    with its optimizer state, and the step counter (copies)."""

    step: int
    dense: list[np.ndarray]
    dense_state: list[np.ndarray]
    embeddings: RowData

    @property
    def nbytes(self) -> int:
        """Size of the state in bytes."""
        dense = sum(a.nbytes for a in self.dense + self.dense_state)
        return int(dense + self.embeddings.nbytes)


def make_data(cfg: TrainerConfig) -> SyntheticData | CriteoData:
    """Data source selected by ``cfg.data.kind``."""
    if cfg.data.kind == "synthetic":
        return SyntheticData(cfg.data, cfg.batch_size)
    return CriteoData(cfg.data, cfg.batch_size, cfg.eval_samples)


class Trainer:
    """Trains a DLRM on a deterministic batch stream; exposes state by shard for FT policies.

    Public state: ``step`` (batches trained so far), ``model`` (dense part), ``embeddings``
    (sharded tables), ``data`` (batch source), ``mfu`` (:class:`UseCounter` or None). CPR-SSU's
    sampler belongs to its policy's trainer side, which listens to the updates.
    """

    def __init__(
        self,
        cfg: TrainerConfig,
        data: SyntheticData | CriteoData | SharedData | None = None,
        workspace: Workspace | None = None,
    ) -> None:
        """``data``: the batch source, e.g. a :class:`SharedData` that other trainers of
        the same ``cfg`` use too (read-only); by default this trainer builds its own.
        ``workspace``: the model's work arrays, e.g. another trainer's (see
        :class:`~ftsim.trainer.model.Workspace`); by default its own."""
        self.cfg = cfg
        dtype = np.dtype(cfg.model.dtype)
        self.data = make_data(cfg) if data is None else data
        sizes = self.data.table_sizes
        rng = np.random.default_rng([cfg.model.seed, 0])
        self.embeddings = ShardedEmbeddings(
            sizes, cfg.model.embedding_dim, cfg.sharding, cfg.optimizer.sparse, rng, dtype
        )
        self.model = DenseDLRM(
            self.data.n_dense,
            len(sizes),
            cfg.model.embedding_dim,
            cfg.model.bottom_mlp,
            cfg.model.top_mlp,
            rng,
            dtype,
            workspace,
        )
        self.dense_optimizer = DenseOptimizer(
            cfg.optimizer.dense, self.model.params, packed=self.model.flat_params
        )
        self.step = 0
        self.mfu = UseCounter(self.embeddings.n_rows) if cfg.hooks.mfu_counters else None
        self._listeners: list[UpdateListener] = []
        self._use_listeners: list[UseListener] = []
        self._patterns: dict[int, SumPattern] = {}  # by batch size
        self._dense_grads = self.model.grads
        # what this trainer derives from a batch depends on the table layout: a batch shared
        # with trainers of another layout keeps one entry per layout (a string: its hash is
        # kept, a tuple of the offsets would be hashed at every step)
        self._derived_key = "lookups " + " ".join(map(str, self.embeddings.offsets.tolist()))
        self._eval_set: Batch | None = None

    def clone(self) -> Trainer:
        """A new trainer in this one's state (parameters, optimizer state, step and use
        counters) that shares its data source and work arrays (no listeners; the two are
        not to train or evaluate at the same time, from two threads)."""
        twin = type(self)(self.cfg, data=self.data, workspace=self.model.workspace)
        twin.restore(self.snapshot())
        if self.mfu is not None:
            twin.mfu.counts[:] = self.mfu.counts
        return twin

    # ------------------------------------------------------------------ training
    def train(self, n_steps: int, loss: bool = True) -> float | None:
        """Train on batches ``step .. step + n_steps - 1``; returns their mean training loss
        (None with ``loss=False``, which skips computing it)."""
        total = 0.0
        for _ in range(n_steps):
            total += self.train_batch(self.data.batch(self.step), loss) or 0.0
        return total / max(1, n_steps) if loss else None

    def train_batch(self, batch: Batch, loss: bool = True) -> float | None:
        """One SGD step on ``batch`` (normally ``data.batch(step)``); returns its log loss
        (None with ``loss=False``: the update is the same, the loss is not computed)."""
        emb, model = self.embeddings, self.model
        gids, segment_sum = self._lookups(batch)
        emb.lookup(gids, out=model.feature_buffer(len(gids)))  # [:, 0]: the forward's
        logits = model.forward(batch.dense.astype(model.dtype, copy=False))
        batch_loss = bce_with_logits(logits, batch.label) if loss else None
        dfeat = model.backward(logits, batch.label)
        self.dense_optimizer.step(self._dense_grads, model.flat_grads)
        rows = segment_sum.rows
        grad = segment_sum(dfeat.reshape(-1, emb.dim))
        if self._listeners:
            grad_in = grad.copy()
            old, new = emb.apply_gradients(rows, grad, record=True)
            update = SparseUpdate(
                self.step, rows, segment_sum.counts, grad_in, old, new, emb.offsets
            )
        else:
            emb.apply_gradients(rows, grad, record=False)
        if self.mfu is not None:
            self.mfu.add(rows, segment_sum.counts)
        self.step += 1
        if self._listeners:
            for fn in self._listeners:
                fn(update)
        for fn in self._use_listeners:
            fn(self.step - 1, rows, segment_sum.counts)
        return batch_loss

    def _lookups(self, batch: Batch) -> tuple[np.ndarray, SegmentSum]:
        """The rows to gather into the interaction's input (:meth:`_gathered_rows`) and the
        backward of the batch's lookups. Computed by the first trainer of this table layout
        that trains the batch and kept with it (read-only)."""
        found = batch.derived.get(self._derived_key)
        if found is None:
            emb = self.embeddings
            b = len(batch)
            pattern = self._patterns.get(b)
            if pattern is None:  # lookup k's gradient is row k + k // T + 1 of the
                t = len(emb.table_sizes)  # (B * (T+1), d) interaction gradient
                k = np.arange(b * t, dtype=np.int64)
                pattern = self._patterns[b] = SumPattern(k + k // t + 1, b * (t + 1))
            rows = self._gathered_rows(batch.cat)
            rows.flags.writeable = False
            found = (rows, SegmentSum(rows[:, 1:].reshape(-1), emb.n_rows, pattern))
            batch.derived[self._derived_key] = found
        return found

    # ---------------------------------------------------------------- evaluation
    @property
    def eval_set(self) -> Batch:
        """The fixed held-out set (``cfg.eval_samples`` samples, built on first use)."""
        if self._eval_set is None:
            self._eval_set = self.data.eval_set(self.cfg.eval_samples)
        return self._eval_set

    def predict(self, batch: Batch) -> np.ndarray:
        """Click probabilities (n,) float64 for the samples of ``batch`` (no state change)."""
        out = np.empty(len(batch), dtype=np.float64)
        for a in range(0, len(batch), _EVAL_CHUNK):
            dense = batch.dense[a : a + _EVAL_CHUNK].astype(self.model.dtype, copy=False)
            gids = self._gathered_rows(batch.cat[a : a + _EVAL_CHUNK])
            self.embeddings.lookup(gids, out=self.model.feature_buffer(len(gids)))
            out[a : a + len(gids)] = sigmoid(self.model.forward(dense).astype(np.float64))
        return out

    def evaluate(self) -> dict[str, float]:
        """Held-out ``logloss`` (nats, clipped) and ``auc`` of the current model."""
        ev = self.eval_set
        p = self.predict(ev)
        return {"logloss": log_loss(ev.label, p), "auc": auc(ev.label, p)}

    # ----------------------------------------------------------- whole state
    def snapshot(self) -> TrainerSnapshot:
        """Copy of the complete training state (see :class:`TrainerSnapshot`)."""
        return TrainerSnapshot(
            step=self.step,
            dense=[p.copy() for p in self.model.params],
            dense_state=[s.copy() for s in self.dense_optimizer.state],
            embeddings=self.embeddings.snapshot(),
        )

    def restore(self, snap: TrainerSnapshot) -> None:
        """Return to the state of ``snap`` (the snapshot stays usable)."""
        for dst, src in zip(self.model.params, snap.dense, strict=True):
            np.copyto(dst, src)
        for dst, src in zip(self.dense_optimizer.state, snap.dense_state, strict=True):
            np.copyto(dst, src)
        self.embeddings.restore(snap.embeddings)
        self.step = snap.step

    @property
    def dense_bytes(self) -> int:
        """Bytes of dense parameters plus their optimizer state."""
        return int(sum(a.nbytes for a in self.model.params + self.dense_optimizer.state))

    # ------------------------------------------------------------- by shard
    @property
    def n_shards(self) -> int:
        """Number of embedding parameter servers."""
        return self.embeddings.n_shards

    def shard_of(self, table: int, rows: np.ndarray) -> np.ndarray:
        """Shard of each row id (local to ``table``)."""
        return self.embeddings.shard_of(table, rows)

    def shard_bytes(self, shard: int) -> int:
        """Bytes (rows + per-row optimizer state) held by ``shard``."""
        return self.embeddings.shard_bytes(shard)

    def read_shard(self, shard: int) -> RowData:
        """Copy of all rows and optimizer state of ``shard`` (global row ids)."""
        return self.embeddings.read_shard(shard)

    def write_shard(self, shard: int, data: RowData) -> None:
        """Overwrite every row (and state) of ``shard`` with ``data``."""
        self.embeddings.write_shard(shard, data)

    snapshot_shard = read_shard
    restore_shard = write_shard

    def read_rows(self, rows: np.ndarray) -> RowData:
        """Copy of the given global rows and their state (any shards)."""
        return self.embeddings.read_rows(rows)

    def write_rows(self, data: RowData) -> None:
        """Overwrite only ``data.rows`` (partial restore, e.g. ``snap.subset(rows)``)."""
        self.embeddings.write_rows(data)

    # ----------------------------------------------------------------- hooks
    def add_update_listener(self, fn: UpdateListener) -> None:
        """Call ``fn(SparseUpdate)`` after every step (records are built only if any)."""
        self._listeners.append(fn)

    def remove_update_listener(self, fn: UpdateListener) -> None:
        """Stop calling ``fn``."""
        self._listeners.remove(fn)

    def _gathered_rows(self, cat: np.ndarray) -> np.ndarray:
        """The global rows (B, T+1) to gather into the interaction's input for the local
        row ids ``cat`` (B, T): a first column of placeholders (row 0; the forward pass
        writes the bottom MLP's output there), then each table's rows, so that each
        sample's rows are gathered in one contiguous run."""
        rows = np.zeros((len(cat), cat.shape[1] + 1), np.int64)
        np.add(cat, self.embeddings.offsets[:-1], out=rows[:, 1:])
        return rows

    def add_use_listener(self, fn: UseListener) -> None:
        """Call ``fn(step, rows, counts)`` after every step: the step's index, the sorted
        unique global rows it looked up and their lookups in the batch (read-only: every
        trainer of the batch shares them). For what needs only which rows a step used (e.g.
        CPR-SSU's sampler): unlike an update listener, it has the step record nothing (an
        update record copies the rows' values before and after, ~9 µs a step at prod50h's
        shapes)."""
        self._use_listeners.append(fn)

    def remove_use_listener(self, fn: UseListener) -> None:
        """Stop calling ``fn``."""
        self._use_listeners.remove(fn)
