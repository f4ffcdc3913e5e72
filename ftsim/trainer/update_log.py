"""SWIFT logging for embedding shards: log pushed sparse updates, replay them after a failure.

Embedding shards have no replica, so SWIFT's undo cannot recover them. Instead every trainer
logs what it pushes to each embedding parameter server (asynchronously, to storage): per
step, the shard's touched rows and their summed gradients. When a shard fails, its last
checkpoint is reloaded and the log since that checkpoint is replayed with the same sparse
optimizer code. The row-wise rules (``sgd``, ``momentum``, ``rowwise_adagrad``) update each
row from its own gradient and state only, with the same float operations in the same order,
so replay reproduces the rows bit for bit.

**Selective logging** (``budget_bytes``, per shard and per checkpoint interval): the log of
a shard is a *prefix* of the steps since its checkpoint. A step's record is written only if
it fits in the remaining budget; once one does not fit, nothing more is logged for that
shard until its next checkpoint (a later, smaller record would leave a gap that replay could
not bridge). Replay then restores the shard as it was at the end of the logged prefix: the
updates of the unlogged steps are **lost** (``ReplayReport.lost_lookups`` counts their
lookups, as CPR's PLS does). They cannot be recomputed from the log: recomputing a row's
gradient of step ``s`` needs the dense model and every other row of that batch as of step
``s``, which exist again only if the whole job rolls back to a consistent state and
re-executes (the ``swift`` policy's ``unlogged: recompute`` rolls back to the end of the
logged prefix, where it keeps a copy of the dense state). A smaller budget thus means fewer
bytes written and a shorter replay, at the cost of lost updates or of a rollback.

**Repeated failures.** A replay does not truncate the log: the recovered shard is durable
only once its next checkpoint is taken, so a second failure before then reloads the same
checkpoint and replays everything logged since it (its ``ReplayReport`` covers all steps
since the checkpoint, including those already reported lost by the first replay).

**Snapshot and persist** (CheckFreq). A checkpoint taken as an in-memory snapshot is durable
only once its persist to storage ends; a failure before then loses it. So :meth:`snapshot`
(the snapshot was taken) starts a new logging interval, and its budget, but keeps every
record since the durable checkpoint: until the persist commits, a replay still starts from
that checkpoint and needs them. :meth:`checkpoint` with the snapshot's step (the persist
committed) moves the replay base there and drops only the records before that step. If the
previous interval's budget ran out, the log since the durable checkpoint has a gap: a replay
re-applies the records up to the gap, and the records logged after it are lost with the
unlogged steps (a shard state after the gap cannot be reached without the updates in it).

**Going back.** If the trainer goes back (SWIFT's undo of the last step, or a restore of an
older snapshot), the records of the steps it un-did are dropped (on the next query or update):
the log always describes the trainer's current trajectory. Their bytes stay counted in
:meth:`UpdateLog.written_bytes` (the traffic was spent).

Bytes: a record of ``n`` rows costs ``RECORD_HEADER_BYTES + n * (ROW_ID_BYTES + d * itemsize)``
(16 B for the step index and row count; 8 B row id; the ``d`` gradient floats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ftsim.trainer.embeddings import SparseUpdate

if TYPE_CHECKING:
    from ftsim.trainer.trainer import Trainer

RECORD_HEADER_BYTES = 16  # step index and row count (int64 each) per logged record
ROW_ID_BYTES = 8  # global row id (int64)


@dataclass(frozen=True)
class LogRecord:
    """The update one step pushed to one shard: ``rows`` sorted global ids (n,) and their
    summed gradients ``grad`` (n, d), as received by the parameter server. ``lookups``: the
    lookups of these rows in the step; not part of the log's bytes, it is what a replay that
    cannot reach the record (after a gap) counts as lost."""

    step: int
    rows: np.ndarray
    grad: np.ndarray
    lookups: int

    @property
    def nbytes(self) -> int:
        """Bytes of the record in the log (header, row ids, gradients)."""
        return int(RECORD_HEADER_BYTES + len(self.rows) * ROW_ID_BYTES + self.grad.nbytes)


@dataclass(frozen=True)
class ReplayReport:
    """What :meth:`UpdateLog.replay` re-applied and what it could not.

    ``replayed_steps``: records re-applied; ``replayed_row_updates``: row updates they held;
    ``replayed_bytes``: log bytes read; ``lost_steps``: steps since the checkpoint whose
    update to the shard was not logged, or was logged after such a step (past the gap);
    ``lost_rows``: sorted global ids updated in those steps (left as at the end of the
    replayed prefix); ``lost_lookups``: lookups of the shard's rows in those steps
    (samples x lookups whose embedding update is lost).
    """

    shard: int
    replayed_steps: int
    replayed_row_updates: int
    replayed_bytes: int
    lost_steps: int
    lost_rows: np.ndarray
    lost_lookups: int


class UpdateLog:
    """Per-shard log of the sparse updates since each shard's last durable checkpoint.

    Attaches itself to ``trainer`` as an update listener. ``budget_bytes``: log capacity per
    shard and checkpoint interval (None: log everything); ``budget_steps``: the same budget
    counted in steps (the prefix of that many steps after each checkpoint; how the simulator
    scales a budget between the simulated job and the small trainer). See the module
    docstring for the policy. Call :meth:`checkpoint` whenever a shard's checkpoint becomes
    durable, and :meth:`snapshot` when it is snapshotted to be persisted later.
    """

    def __init__(
        self, trainer: Trainer, budget_bytes: int | None = None, budget_steps: int | None = None
    ) -> None:
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError("budget_bytes must be >= 0 or None")
        if budget_steps is not None and budget_steps < 0:
            raise ValueError("budget_steps must be >= 0 or None")
        self.trainer = trainer
        self.budget_bytes = budget_bytes
        self.budget_steps = budget_steps
        emb = trainer.embeddings
        n = emb.n_shards
        # per shard, since its durable checkpoint: the records logged, and the steps not
        # logged (an interval's budget exhausted) as (step, rows, lookups)
        self._records: list[list[LogRecord]] = [[] for _ in range(n)]
        self._lost: list[list[tuple[int, np.ndarray, int]]] = [[] for _ in range(n)]
        self._bytes = np.zeros(n, dtype=np.int64)  # size of _records[s]
        self._written = np.zeros(n, dtype=np.int64)
        self._checkpoint_step = np.zeros(n, dtype=np.int64)  # the replay base
        self._interval_step = np.zeros(n, dtype=np.int64)  # where the budget's interval began
        self._interval_bytes = np.zeros(n, dtype=np.int64)  # logged in that interval
        trainer.add_update_listener(self._on_update)

    # -------------------------------------------------------------------- logging
    def _keep(self, shard: int, keep) -> None:
        """Keep the shard's records and losses whose step satisfies ``keep``; recount bytes."""
        records = self._records[shard] = [r for r in self._records[shard] if keep(r.step)]
        self._lost[shard] = [x for x in self._lost[shard] if keep(x[0])]
        self._bytes[shard] = sum(r.nbytes for r in records)
        start = self._interval_step[shard]
        self._interval_bytes[shard] = sum(r.nbytes for r in records if r.step >= start)

    def _drop_from(self, step: int) -> None:
        """Forget records and losses of steps >= ``step`` (the trainer went back)."""
        for s, (recs, lost) in enumerate(zip(self._records, self._lost, strict=True)):
            if (recs and recs[-1].step >= step) or (lost and lost[-1][0] >= step):
                self._keep(s, lambda k: k < step)

    def _exhausted(self, shard: int) -> bool:
        """The budget of the shard's current interval ran out (a step of it went unlogged)."""
        lost = self._lost[shard]
        return bool(lost) and lost[-1][0] >= self._interval_step[shard]

    def _on_update(self, update: SparseUpdate) -> None:
        self._drop_from(update.step)
        shard_of = self.trainer.embeddings.shard_of_global(update.rows)
        for s in range(len(self._records)):
            sel = np.flatnonzero(shard_of == s)
            if len(sel) == 0:
                continue
            lookups = int(update.counts[sel].sum())
            if not self._exhausted(s):  # the interval's prefix is still being logged
                rec = LogRecord(update.step, update.rows[sel], update.grad[sel], lookups)
                nb = rec.nbytes
                fits = (
                    self.budget_bytes is None or self._interval_bytes[s] + nb <= self.budget_bytes
                )
                in_prefix = (
                    self.budget_steps is None
                    or update.step - self._interval_step[s] < self.budget_steps
                )
                if fits and in_prefix:
                    self._records[s].append(rec)
                    self._bytes[s] += nb
                    self._interval_bytes[s] += nb
                    self._written[s] += nb
                    continue
            self._lost[s].append((update.step, update.rows[sel], lookups))

    def snapshot(self, shard: int) -> None:
        """A checkpoint of ``shard`` was snapshotted now, to be persisted in the background:
        a new logging interval (and budget) starts here. Nothing is dropped: until
        :meth:`checkpoint` is called with this step, a replay starts from the durable
        checkpoint and needs every record since it."""
        self._drop_from(self.trainer.step)
        self._interval_step[shard] = self.trainer.step
        self._interval_bytes[shard] = 0

    def checkpoint(self, shard: int, step: int | None = None) -> None:
        """The checkpoint of ``shard`` at ``step`` became durable (default: one taken now).

        The replay base moves to ``step``: the records and losses of earlier steps are
        dropped, those of later steps (logged since a :meth:`snapshot` at ``step``, whose
        persist just committed) are kept. The logging interval starts no earlier than
        ``step``; a checkpoint taken now starts a new one.
        """
        self._drop_from(self.trainer.step)
        step = self.trainer.step if step is None else step
        self._checkpoint_step[shard] = step
        self._interval_step[shard] = max(self._interval_step[shard], step)
        self._keep(shard, lambda k: k >= step)

    def close(self) -> None:
        """Stop logging (removes the listener)."""
        self.trainer.remove_update_listener(self._on_update)

    # ----------------------------------------------------------- sizes (time model)
    def nbytes(self, shard: int) -> int:
        """Bytes of the shard's log since its durable checkpoint (what storage keeps; a
        replay reads them all unless a gap cuts it short, :meth:`replay_steps`)."""
        self._drop_from(self.trainer.step)
        return int(self._bytes[shard])

    def written_bytes(self, shard: int) -> int:
        """Bytes written to storage for ``shard`` since creation (log traffic; never reset)."""
        return int(self._written[shard])

    def _replayable(self, shard: int) -> tuple[list[LogRecord], list[LogRecord]]:
        """The shard's records split at the first unlogged step since its checkpoint: those
        before it (a replay re-applies them) and those after it (past the gap: lost)."""
        self._drop_from(self.trainer.step)
        records, lost = self._records[shard], self._lost[shard]
        if not lost:
            return records, []
        gap = lost[0][0]
        return [r for r in records if r.step < gap], [r for r in records if r.step > gap]

    def replay_steps(self, shard: int) -> int:
        """Logged steps (records) a replay of ``shard`` re-applies."""
        return len(self._replayable(shard)[0])

    def steps_since_checkpoint(self, shard: int) -> int:
        """Steps trained since the shard's checkpoint (what a full rollback recomputes)."""
        return int(self.trainer.step - self._checkpoint_step[shard])

    def spread(self, shard: int, k: int) -> np.ndarray:
        """Log bytes (k,) int64 read by each of ``k`` machines replaying ``shard`` together.

        Rows replay independently, so the shard's rows are dealt to machines by their position
        in the shard (``position % k``); a machine reads, per record, the header and its rows.
        """
        if k < 1:
            raise ValueError("k must be >= 1")
        emb = self.trainer.embeddings
        on_shard = emb.shard_rows(shard)
        row_bytes = ROW_ID_BYTES + emb.dim * emb.dtype.itemsize
        out = np.zeros(k, dtype=np.int64)
        for rec in self._replayable(shard)[0]:
            n = np.bincount(np.searchsorted(on_shard, rec.rows) % k, minlength=k)
            out += np.where(n > 0, RECORD_HEADER_BYTES + n * row_bytes, 0)
        return out

    # ------------------------------------------------------------------- recovery
    def replay(self, shard: int) -> ReplayReport:
        """Re-apply the shard's logged updates in step order with the sparse optimizer, up
        to the first unlogged step.

        Precondition: the shard's rows and optimizer state were just restored from the
        durable checkpoint (the last :meth:`checkpoint` call's step). With full logging the
        shard then equals its failure-free state bit for bit; otherwise see ``lost_*``. The
        log is kept: a later replay (another failure) re-applies every step since the
        checkpoint.
        """
        if self.trainer.step < self._checkpoint_step[shard]:
            raise ValueError(f"the trainer went back past the checkpoint of shard {shard}")
        records, stranded = self._replayable(shard)
        emb = self.trainer.embeddings
        for rec in records:
            emb.optimizer.apply(emb.weights, emb.state, rec.rows, rec.grad.copy())
        lost = [(r.step, r.rows, r.lookups) for r in stranded] + self._lost[shard]
        return ReplayReport(
            shard=shard,
            replayed_steps=len(records),
            replayed_row_updates=sum(len(r.rows) for r in records),
            replayed_bytes=sum(r.nbytes for r in records),
            lost_steps=len(lost),
            lost_rows=np.unique(np.concatenate([rows for _, rows, _ in lost]))
            if lost
            else np.zeros(0, dtype=np.int64),
            lost_lookups=sum(n for _, _, n in lost),
        )
