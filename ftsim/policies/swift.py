"""``swift``: SWIFT-style recovery (Zhong et al., PPoPP 2023): replicas + undo, and logging.

No extra copy of the model for the trainers: they are data-parallel replicas. When a trainer
fails, the survivors agree on the iteration to recover to (one behind the furthest if some
worker lags), those that already applied the next update **undo** it exactly (SGD-momentum
and Adam are invertible; ``ftsim.trainer.undo``), and the replacement receives parameters
and optimizer state from a replica over the NIC. At most the in-flight iteration is redone.

Embedding shards have no replica. Every trainer **logs** the sparse updates it pushes to
each shard (asynchronously, to checkpoint storage), and shards are checkpointed every
``checkpoint_interval``. When a shard fails, its replacement reloads the shard's checkpoint
and **replays** the log since then, optionally spread over ``replay_machines``.

Time model:

- log rate: per shard and iteration, U/E rows × (8 B id + gradient bytes) + 16 B, with
  U = samples × lookups per sample × ``unique_lookup_fraction``; all shards together write
  E × that per iteration time to storage. The log shares the storage write bandwidth with
  checkpoint saves (saves get what the log leaves) and, if it needs more than the storage
  offers, training is throttled to it (charged to ``other``);
- selective logging (``log_budget``, a fraction of each interval): a shard's log is the
  prefix of that share of the iterations after its checkpoint; the updates of the rest of
  the interval are **lost** when the shard fails (counted in ``pls_model``) — recomputing them
  would need a full rollback, since a logged gradient needs the dense model of its
  iteration;
- recovery of shards: rescheduling, reading the shard checkpoint, then replaying the logged
  iterations at max(log bytes / node read bandwidth, ``replay_compute_frac`` × iteration
  time) per iteration, divided by ``replay_machines``; training waits (``load``);
- recovery of a trainer: rescheduling, ``undo_iterations`` × ``undo_compute_frac`` ×
  iteration time to undo, the dense state over the NIC from a replica, and the in-flight
  iteration redone (``lost``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pydantic import Field

from ftsim.policies.base import Policy, PolicyParams, TrainerSide
from ftsim.policies.events import Checkpoint, ModelEvent
from ftsim.policies.registry import register
from ftsim.scenario.quantities import Seconds
from ftsim.sim.cluster import transfer_time_s
from ftsim.sim.nodes import any_trainer, failed_shards


class SwiftParams(PolicyParams):
    """Parameters of ``swift``."""

    kind: Literal["swift"]
    checkpoint_interval: Seconds = Field("1 h", description="compute between shard checkpoints")
    log_budget: float = Field(
        1.0, ge=0, le=1, description="share of each interval's iterations whose updates are logged"
    )
    replay_machines: int = Field(1, ge=1, description="machines a shard's replay is spread over")
    replay_compute_frac: float = Field(
        0.05,
        gt=0,
        description="time to apply one logged iteration to a shard, in iterations (assumption)",
    )
    unique_lookup_fraction: float = Field(
        1.0, gt=0, le=1, description="touched rows per lookup in an iteration (assumption)"
    )
    undo_iterations: int = Field(1, ge=0, le=1, description="iterations survivors undo (≤ 1)")
    undo_compute_frac: float = Field(
        0.1, ge=0, description="time to undo one iteration, in iterations (assumption)"
    )


@dataclass(frozen=True, slots=True)
class ReplayShards(ModelEvent):
    """The ``shards`` reload their last checkpoint (progress ``key``; the initial rows if
    none) or last recovered state, and replay their update logs since then.

    ``exact`` (per event): the logs cover every update since those states (``log_budget``
    1), so the replay rebuilds the failure-free rows bit for bit (the row-wise optimizers
    repeat the same float operations, :mod:`ftsim.trainer.update_log`) and the co-simulation
    need not retrain the policy.
    """

    key: float
    shards: tuple[int, ...]
    exact: bool = field(default=False, kw_only=True)
    modifies: ClassVar[bool] = True

    @property
    def reads(self) -> float | None:
        return self.key

    def apply(self, model, trainer) -> None:
        for shard in self.shards:
            model.side.replay(trainer, shard)


@dataclass(frozen=True, slots=True)
class UndoStep(ModelEvent):
    """The survivors undo the in-flight iteration exactly (SGD-momentum, Adam are invertible)."""

    modifies: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    def apply(self, model, trainer) -> None:
        model.side.undo()


class SwiftSide(TrainerSide):
    """SWIFT on the trainer: per-shard update logs (with the selective-logging budget) and
    an undoer of the last step. Logs must see every step of the policy's own trajectory, so
    the policy trains on its own trainer from step 0."""

    own_from_start: ClassVar[bool] = True

    def __init__(self, params, model) -> None:
        super().__init__(params, model)
        self.log = None
        self.undoer = None
        self.bases: dict[int, object] = {}
        """Per shard, the state a replay starts from (checkpoint or last recovery)."""

    def attach(self, trainer, own: bool) -> None:
        from ftsim.trainer.undo import Undoer
        from ftsim.trainer.update_log import UpdateLog

        model = self.model
        budget_steps = None  # a full log: every step, whatever the rounding of intervals
        if self.params.log_budget < 1:
            interval_steps = self.params.checkpoint_interval / model.work_s * model.steps
            budget_steps = round(self.params.log_budget * interval_steps)
        self.log = UpdateLog(trainer, budget_steps=budget_steps)
        self.undoer = Undoer(trainer)

    def detach(self, trainer) -> None:
        self.log.close()
        self.undoer.close()

    def checkpointed(self, trainer) -> None:
        for shard in range(trainer.n_shards):
            self.bases[shard] = trainer.read_shard(shard)
            self.log.checkpoint(shard)

    def replay(self, trainer, shard: int) -> None:
        """Reload the shard's base state, replay its log, and make the result the new base."""
        base = self.bases.get(shard)
        if base is None:  # no checkpoint yet: the initial rows
            initial = self.model.checkpoints[0.0].embeddings
            base = initial.subset(trainer.embeddings.shard_rows(shard))
        trainer.write_shard(shard, base)
        self.model.lost_lookups += self.log.replay(shard).lost_lookups
        self.bases[shard] = trainer.read_shard(shard)
        self.log.checkpoint(shard)

    def undo(self) -> None:
        if self.undoer.can_undo:
            self.undoer.undo_last_step()


@register
class Swift(Policy):
    """Replica + undo for trainers; checkpoint + log replay for embedding shards."""

    Params = SwiftParams
    TrainerSide = SwiftSide

    def __init__(self, params, scenario, layout, rng):
        super().__init__(params, scenario, layout, rng)
        job, cluster = scenario.job, scenario.cluster
        self.n_shards = cluster.emb_ps
        self.iteration_s = job.iteration_s
        rows = (
            job.samples_per_iteration
            * job.lookups_per_sample
            * params.unique_lookup_fraction
            / self.n_shards
        )
        self.log_step_bytes = 16 + rows * (8 + job.mean_value_bytes)  # id + gradient per row
        """Log bytes one iteration adds for one shard."""
        storage = cluster.storage
        log_rate = self.n_shards * self.log_step_bytes * params.log_budget / job.iteration_s
        self.log_slowdown = max(0.0, log_rate / storage.write_bandwidth - 1.0)
        left = max(storage.write_bandwidth - log_rate, 0.01 * storage.write_bandwidth)
        node_write = min(cluster.nic_bandwidth, storage.write_bandwidth_per_node or math.inf)
        self.save_s = transfer_time_s(
            [layout.shard_bytes] * self.n_shards, node_write, left, cluster.network_latency
        )
        node_read = min(cluster.nic_bandwidth, storage.read_bandwidth_per_node or math.inf)
        self.replay_iteration_s = max(
            self.log_step_bytes / node_read, params.replay_compute_frac * job.iteration_s
        )
        self.undo_s = params.undo_iterations * params.undo_compute_frac * job.iteration_s
        self.interval_s = params.checkpoint_interval
        self.next_s = self.interval_s
        self.checkpoint_s = [0.0] * self.n_shards
        """Progress of each shard's last checkpoint (or of its last recovery)."""
        self.log_bytes = 0.0
        self.replay_s: list[float] = []
        self.recovery_s: list[float] = []
        self.lost_update_s = 0.0
        self._pending: dict[int, float] = {}
        """Failed shards → compute seconds of logged iterations to replay."""
        self._trainer_failed = False

    def next_action_at(self) -> float:
        return self.next_s

    def act(self, sim):
        progress = sim.progress_s
        yield from sim.phase("save", self.save_s, "shard checkpoints (log shares storage)")
        self.n_checkpoints += 1
        sim.model_event(Checkpoint, key=progress)
        self.checkpoint_s = [progress] * self.n_shards
        self.next_s = progress + self.interval_s

    def slowdown(self) -> dict[str, float]:
        return {"other": self.log_slowdown} if self.log_slowdown else {}

    def on_failure(self, sim, failure) -> None:
        trainers = self.scenario.cluster.trainers
        shards = failed_shards(trainers, failure.nodes)
        now = sim.progress_s
        if any_trainer(trainers, failure.nodes):
            self._trainer_failed = True
            sim.model_event(UndoStep)
            sim.rollback_to(now - min(self.iteration_s / 2, now))  # the in-flight iteration
        if shards:
            full_log = self.params.log_budget >= 1
            sim.model_event(
                ReplayShards, key=self.checkpoint_s[shards[0]], shards=shards, exact=full_log
            )
        for shard in shards:
            since = now - self.checkpoint_s[shard]
            logged = min(since, self.params.log_budget * self.interval_s)
            self.lost_update_s += since - logged
            self._pending[shard] = max(self._pending.get(shard, 0.0), logged)
            self.checkpoint_s[shard] = now  # recovered to now: later losses count from here

    def recover(self, sim, failures):
        start = min(f.time_s for f in failures)
        yield from sim.await_replacements(failures)
        if self._trainer_failed:
            load = self.undo_s + self.layout.nic_s(self.layout.dense_bytes)
            yield from sim.phase("load", load, "undo and copy from a replica")
            self._trainer_failed = False
        if self._pending:
            shard_load = self.layout.read_s([self.layout.shard_bytes] * len(self._pending))
            yield from sim.phase("load", shard_load, "reload shard checkpoints")
            longest = max(self._pending.values())
            replay = longest / self.iteration_s * self.replay_iteration_s
            replay /= self.params.replay_machines
            yield from sim.phase("load", replay, "replay logs")
            self.replay_s.append(replay)
            self._pending.clear()
        self.recovery_s.append(sim.env.now - start)

    def result_columns(self):
        work = self.scenario.job.work_s
        iterations = work / self.iteration_s
        logged_share = self.params.log_budget
        self.log_bytes = iterations * self.log_step_bytes * self.n_shards * logged_share
        return {
            "interval_h": self.interval_s / 3600.0,
            "log_bytes": self.log_bytes,
            "replay_s": sum(self.replay_s) / len(self.replay_s) if self.replay_s else 0.0,
            "undo_s": self.undo_s,
            "recovery_s": (
                sum(self.recovery_s) / len(self.recovery_s) if self.recovery_s else math.nan
            ),
            "pls_model": self.lost_update_s / (work * self.n_shards),
        }
