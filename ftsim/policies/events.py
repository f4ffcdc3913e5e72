"""Model events: what a policy does to the model state, typed, each with its own handler.

The time model (a policy running in :mod:`ftsim.sim.engine`) records an event whenever it
saves or restores state, at its training progress; the co-simulation (:mod:`ftsim.cosim`)
later steps a real trainer to that progress and calls the event's :meth:`ModelEvent.apply`.
The time model never depends on model values, so the two halves can run apart.

Each event type handles itself (no central switch over kinds): a policy with new
trainer-side behaviour defines its own subclasses in its own module. Handlers act on two
objects handed to them, never imported here:

- ``model``, the policy's co-simulated state (:class:`ftsim.cosim.replay.PolicyModel`):
  ``checkpoints`` (key → trainer snapshot), ``partials`` (row saves since the last
  checkpoint), ``saved_lookups`` (per row, the cumulative lookups at the version storage
  holds), ``pending_saves`` (CheckFreq snapshots not yet persisted), ``side`` (the
  policy's :class:`~ftsim.policies.base.TrainerSide`, told of snapshots, checkpoints and
  restores through its hooks), ``lose(trainer, rows)`` (count the lookups of ``rows``
  since their saved version as lost);
- ``trainer``, the :class:`ftsim.trainer.Trainer` already at the event's step.

Two flags tell the co-simulation how an event bears on sharing the failure-free run:
``modifies`` (applying it changes the trainer's state) and ``exact`` (the state afterwards is
the failure-free state at the same step, as after a full rollback that replays the same
batches). Both are class flags; an event type whose exactness depends on the occasion makes
``exact`` a field instead (SWIFT's ``ReplayShards`` is exact when its log covers every
update). A policy whose modifying events are all exact never leaves the failure-free
trajectory, and its final model is the failure-free one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class ModelEvent:
    """Base class: an event at training progress ``progress_s`` (compute seconds)."""

    progress_s: float

    modifies: ClassVar[bool] = False
    exact: ClassVar[bool] = True

    @property
    def reads(self) -> float | None:
        """Key of the checkpoint this event restores from (kept only if some event reads it)."""
        return None

    @property
    def writes(self) -> float | None:
        """Key under which this event saves a checkpoint of the whole model."""
        return None

    def apply(self, model: Any, trainer: Any) -> None:
        """Do to ``trainer`` what the policy did (default: nothing)."""


@dataclass(frozen=True, slots=True)
class Checkpoint(ModelEvent):
    """All state saved as checkpoint ``key`` (progress of the saved state)."""

    key: float

    @property
    def writes(self) -> float | None:
        return self.key

    def apply(self, model, trainer) -> None:
        model.partials.clear()
        model.saved_lookups[:] = trainer.mfu.counts
        model.side.checkpointed(trainer)


@dataclass(frozen=True, slots=True)
class Snapshot(ModelEvent):
    """CheckFreq's first half: state copied in memory; in storage only once committed.
    Remembers what storage will hold once it is (each row's lookups at this version), and
    tells the side (which may keep its own part of the state aside)."""

    key: float

    @property
    def writes(self) -> float | None:
        return self.key

    def apply(self, model, trainer) -> None:
        model.pending_saves[self.key] = (trainer.mfu.counts.copy(), len(model.partials))
        model.side.snapshotted(trainer, self.key)


@dataclass(frozen=True, slots=True)
class Commit(ModelEvent):
    """CheckFreq's second half: the snapshot ``key`` is in storage. Rows now hold their
    snapshot version in storage unless a later partial save wrote a newer one; partial
    saves older than the snapshot are superseded."""

    key: float

    def apply(self, model, trainer) -> None:
        counts, older = model.pending_saves.pop(self.key)
        model.saved_lookups[:] = counts.clip(min=model.saved_lookups)
        del model.partials[:older]
        model.side.checkpointed(trainer)


@dataclass(frozen=True, slots=True)
class RestoreAll(ModelEvent):
    """Every node returns to checkpoint ``key``; the work since is redone on the same
    batches, so the model rejoins the failure-free trajectory exactly."""

    key: float
    modifies: ClassVar[bool] = True

    @property
    def reads(self) -> float | None:
        return self.key

    def apply(self, model, trainer) -> None:
        trainer.restore(model.checkpoints[self.key])
        model.partials.clear()
        model.saved_lookups[:] = trainer.mfu.counts
        model.side.restored(trainer)


@dataclass(frozen=True, slots=True)
class RestoreShards(ModelEvent):
    """The embedding ``shards`` return to checkpoint ``key`` plus the partial saves made
    since; every other node keeps its state (CPR's partial recovery). Their updates since the
    saved versions are lost."""

    key: float
    shards: tuple[int, ...]
    modifies: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    @property
    def reads(self) -> float | None:
        return self.key

    def apply(self, model, trainer) -> None:
        snapshot = model.checkpoints[self.key]
        emb = trainer.embeddings
        for shard in self.shards:
            rows = emb.shard_rows(shard)
            trainer.write_shard(shard, snapshot.embeddings.subset(rows))
            for saved in model.partials:
                mine = saved.rows[emb.shard_of_global(saved.rows) == shard]
                if len(mine):
                    trainer.write_rows(saved.subset(mine))
            model.lose(trainer, rows)
        model.side.restored(trainer)
