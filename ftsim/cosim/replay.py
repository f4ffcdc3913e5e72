"""Co-simulation: the policies' actions replayed on a real NumPy DLRM trainer.

The SimPy run of a policy records :class:`~ftsim.sim.engine.ModelEvent`s — checkpoints,
partial saves, full rollbacks, shard restores — at their training progress. Progress p
maps to trainer step round(p / work × steps). Here each policy's events are applied to a
trainer stepped in chunks between them, so the accuracy cost of a strategy is measured on a
model that really lost (or kept) the updates the strategy loses: a restored shard really
goes back to its checkpointed rows and optimizer state, and training goes on from there.

Sharing work (``share_prefix``). Every policy follows the failure-free trajectory until its
first restore: before that its state *is* the failure-free state at the same step. One
failure-free ("baseline") trainer therefore runs once per replication; each policy's events
before its first restore are served from it, and at that restore the policy forks a trainer
of its own from the baseline's state. A policy whose only restores are full rollbacks (as
``full``) never diverges: restoring a checkpoint and replaying the same batches reproduces
the failure-free model bit for bit (tested with ``share_prefix: false``, which trains every
policy on its own trainer from step 0), so its final model is the baseline's.

PLS (portion of lost samples) is measured as the fraction of the run's embedding lookups
whose updates were lost: when shard rows go back to an older version, the lookups of those
rows since that version (counted by the trainer's per-row use counters) are lost.
"""

from __future__ import annotations

import math

import numpy as np

from ftsim.scenario.schema import Scenario, TrainerSection
from ftsim.sim.engine import ModelEvent, Simulation
from ftsim.sim.rng import Purpose, stream
from ftsim.trainer import ShardingConfig, Trainer, TrainerConfig, UseSampler
from ftsim.trainer.embeddings import SparseUpdate
from ftsim.trainer.parity import ParityCode
from ftsim.trainer.undo import Undoer
from ftsim.trainer.update_log import UpdateLog

RESTORES = ("restore_all", "restore_shards", "decode_shards", "replay_shards", "undo_step")


def trainer_config(scenario: Scenario, rep: int) -> TrainerConfig:
    """The trainer's configuration for replication ``rep``: the scenario's section with one
    shard per embedding PS, and model and data seeds drawn from the replication's trainer
    stream (so replications differ in initialisation and synthetic data, reproducibly; the
    ``seed`` fields of the section are replaced)."""
    section: TrainerSection = scenario.trainer
    model_seed, data_seed = stream(scenario.run.seed, rep, Purpose.TRAINER).integers(2**62, size=2)
    return TrainerConfig(
        model=section.model.model_copy(update={"seed": int(model_seed)}),
        optimizer=section.optimizer,
        data=(
            section.data.model_copy(update={"seed": int(data_seed)})
            if section.data.kind == "synthetic"
            else section.data
        ),
        sharding=ShardingConfig(
            n_shards=scenario.cluster.emb_ps, placement=section.sharding.placement
        ),
        hooks=section.hooks,
        batch_size=section.batch_size,
        eval_samples=section.eval_samples,
    )


class PolicyModel:
    """One policy's model state: its checkpoints, partial saves, counters and lost lookups."""

    def __init__(self, sim: Simulation, cfg: TrainerConfig, steps: int):
        self.sim = sim
        self.cfg = cfg
        self.steps = steps
        self.events: list[ModelEvent] = sim.model_events
        self.work_s = sim.work_s
        self.needed = {e.key for e in self.events if e.kind in RESTORES}
        """Checkpoint keys that a restore will read: only these are kept."""
        kinds = {e.kind for e in self.events}
        self.lazy = kinds <= {"checkpoint", "snapshot", "commit", "restore_all"}
        """Only full rollbacks: the model never leaves the failure-free trajectory."""
        restores = [i for i, e in enumerate(self.events) if e.kind in RESTORES]
        self.divergence = restores[0] if restores and not self.lazy else None
        self.own_from_start = sim.policy.params.kind == "swift"
        """SWIFT's update log covers the whole run: it trains on its own from step 0."""
        self.trainer: Trainer | None = None
        self.checkpoints: dict[float, object] = {}
        self.partials = []
        self.saved_lookups: np.ndarray | None = None
        """Per row: cumulative lookups at the version of the row that storage holds."""
        self.mfu_reset: np.ndarray | None = None
        self.lost_lookups = 0
        self.sampler: UseSampler | None = None
        self.parity: ParityCode | None = None
        self.log: UpdateLog | None = None
        self.undoer: Undoer | None = None
        self.shard_bases: dict[int, object] = {}
        """SWIFT: per shard, the state a replay starts from (checkpoint or last recovery)."""
        self.decode_error = 0.0
        """Largest relative error of decoded rows and state against the lost ones."""

    def step_of(self, event: ModelEvent) -> int:
        return min(self.steps, round(event.progress_s / self.work_s * self.steps))

    def observe(self, update: SparseUpdate) -> None:
        """Update listener: feed the SSU sampler with the rows a step touched."""
        self.sampler.observe(update.step, update.rows, update.counts)

    def follow(self, trainer: Trainer) -> None:
        """Start receiving ``trainer``'s updates (SSU, parity) and take its counters as
        reference. Parity is encoded when the policy gets a trainer of its own (at step 0
        or at its fork: before that its rows are the baseline's) and kept current from each
        step's updates."""
        if self.saved_lookups is None:  # first call, at step 0
            if 0.0 in self.needed:  # a restore before the first checkpoint: the initial model
                self.checkpoints[0.0] = trainer.snapshot()
            self.saved_lookups = trainer.mfu.counts.copy()
            self.mfu_reset = trainer.mfu.counts.copy()
            params = self.sim.policy.params
            if params.kind == "cpr_ssu":
                rows = trainer.embeddings.n_rows
                capacity = params.buffer_rows or max(1, round(params.fraction * rows))
                self.sampler = UseSampler(params.sampling_rate, capacity, self.sim.rep)
        if self.sampler is not None:
            trainer.add_update_listener(self.observe)
        params = self.sim.policy.params
        if params.kind == "ecrm" and trainer is self.trainer:
            self.parity = ParityCode.attach(trainer, params.k, params.r)
        if params.kind == "swift" and trainer is self.trainer:
            interval_steps = params.checkpoint_interval / self.work_s * self.steps
            self.log = UpdateLog(trainer, budget_steps=round(params.log_budget * interval_steps))
            self.undoer = Undoer(trainer)

    def unfollow(self, trainer: Trainer) -> None:
        if self.sampler is not None:
            trainer.remove_update_listener(self.observe)

    def fork(self, base: Trainer) -> None:
        """Leave the baseline: continue on a trainer of our own with the baseline's state."""
        self.unfollow(base)
        own = Trainer(self.cfg)
        own.data = base.data  # the same batches: share the generated ones
        own.restore(base.snapshot())
        own.mfu.counts[:] = base.mfu.counts
        self.trainer = own
        self.follow(own)

    def apply(self, event: ModelEvent, trainer: Trainer) -> None:
        """Do to ``trainer`` (already at the event's step) what the policy did."""
        lookups = trainer.mfu.counts
        if event.kind in ("checkpoint", "snapshot") and event.key in self.needed:
            self.checkpoints[event.key] = trainer.snapshot()
        if event.kind == "checkpoint":
            if self.log is not None:
                for shard in range(trainer.n_shards):
                    self.shard_bases[shard] = trainer.read_shard(shard)
                    self.log.checkpoint(shard)
            self.partials.clear()
            self.saved_lookups[:] = lookups
            self.mfu_reset[:] = lookups
        elif event.kind == "partial":
            rows = self._prioritized_rows(event.fraction, trainer)
            self.partials.append(trainer.read_rows(rows))
            self.saved_lookups[rows] = lookups[rows]
        elif event.kind == "restore_all":
            trainer.restore(self.checkpoints[event.key])
            self.partials.clear()
            self.saved_lookups[:] = lookups
        elif event.kind == "restore_shards":
            snap = self.checkpoints[event.key]
            emb = trainer.embeddings
            for shard in event.shards:
                rows = emb.shard_rows(shard)
                trainer.write_shard(shard, snap.embeddings.subset(rows))
                for saved in self.partials:
                    mine = saved.rows[emb.shard_of_global(saved.rows) == shard]
                    if len(mine):
                        trainer.write_rows(saved.subset(mine))
                self.lost_lookups += int((lookups[rows] - self.saved_lookups[rows]).sum())
                self.saved_lookups[rows] = lookups[rows]
        elif event.kind == "decode_shards":
            self._decode(event.shards, trainer)
        elif event.kind == "replay_shards":
            for shard in event.shards:
                base = self.shard_bases.get(shard)
                if base is None:  # no checkpoint yet: the initial rows
                    base = self.checkpoints[0.0].embeddings.subset(
                        trainer.embeddings.shard_rows(shard)
                    )
                trainer.write_shard(shard, base)
                report = self.log.replay(shard)
                self.lost_lookups += report.lost_lookups
                self.shard_bases[shard] = trainer.read_shard(shard)
                self.log.checkpoint(shard)
        elif event.kind == "undo_step" and self.undoer.can_undo:
            self.undoer.undo_last_step()
        if self.parity is not None and event.kind in ("restore_all", "restore_shards"):
            self.parity.rebuild_parity()  # restores bypass the update listeners

    def _decode(self, shards: tuple[int, ...], trainer: Trainer) -> None:
        """ECRM: lose the shards' rows (overwritten with NaN), decode them from the
        survivors and the parity, write them back, and record the decoding error."""
        emb = trainer.embeddings
        rows = np.concatenate([emb.shard_rows(shard) for shard in shards])
        truth = trainer.read_rows(rows)
        emb.weights[rows] = np.nan
        for array in emb.state.values():
            array[rows] = np.nan
        decoded = self.parity.decode(list(shards))
        trainer.write_rows(decoded)
        self.parity.rebuild_parity(list(shards))  # parity rows the failed servers held
        for got, want in [(decoded.values, truth.values)] + [
            (decoded.state[k], truth.state[k]) for k in truth.state
        ]:
            scale = max(float(np.abs(want).max()), 1e-30)
            self.decode_error = max(self.decode_error, float(np.abs(got - want).max()) / scale)

    def _prioritized_rows(self, fraction: float, trainer: Trainer) -> np.ndarray:
        """Rows a partial save writes: MFU's most used per shard, or SSU's sampled ids."""
        if self.sampler is not None:
            return self.sampler.drain()
        emb, lookups = trainer.embeddings, trainer.mfu.counts
        chosen = []
        for shard in range(emb.n_shards):
            rows = emb.shard_rows(shard)
            uses = lookups[rows] - self.mfu_reset[rows]
            k = math.ceil(fraction * len(rows))
            order = np.lexsort((rows, -uses))[:k]
            chosen.append(rows[order[uses[order] > 0]])
        rows = np.sort(np.concatenate(chosen))
        self.mfu_reset[rows] = lookups[rows]
        return rows

    def run_rest(self, start: int) -> None:
        """Apply events ``start``… on our own trainer, then train to the end."""
        for event in self.events[start:]:
            self._advance(self.trainer, self.step_of(event))
            self.apply(event, self.trainer)
        self._advance(self.trainer, self.steps)

    @staticmethod
    def _advance(trainer: Trainer, step: int) -> None:
        if step > trainer.step:
            trainer.train(step - trainer.step)


def run_models(scenario: Scenario, sims: list[Simulation]) -> tuple[Trainer, list[PolicyModel]]:
    """Train the failure-free model and every policy's model for one replication.

    Returns the failure-free trainer and the policies' models (``model.trainer`` is None
    when the policy's final model is the failure-free one).
    """
    section: TrainerSection = scenario.trainer
    cfg = trainer_config(scenario, sims[0].rep)
    models = [PolicyModel(sim, cfg, section.steps) for sim in sims]
    if section.share_prefix:
        return _shared_run(models, cfg, section.steps), models
    base = Trainer(cfg)
    base.train(section.steps)
    for model in models:
        model.trainer = Trainer(cfg)
        model.follow(model.trainer)
        model.run_rest(0)
    return base, models


def cosimulate(scenario: Scenario, sims: list[Simulation]) -> list[dict]:
    """Accuracy columns for finished simulations of one replication (any policies).

    The trainer runs on one BLAS thread: results then do not depend on how many threads a
    machine offers, so serial runs, process pools and Dask workers agree bit for bit, and
    parallel sweep workers do not oversubscribe the cores (which slows OpenBLAS tenfold).
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _columns(*run_models(scenario, sims))


def _columns(base: Trainer, models: list[PolicyModel]) -> list[dict]:
    """Result columns per policy model, against the failure-free trainer ``base``."""
    baseline = base.evaluate()
    total_lookups = base.step * base.cfg.batch_size * len(base.embeddings.table_sizes)
    out = []
    for model in models:
        final = baseline if model.trainer is None else model.trainer.evaluate()
        out.append(
            {
                "baseline_logloss": baseline["logloss"],
                "baseline_auc": baseline["auc"],
                "final_logloss": final["logloss"],
                "final_auc": final["auc"],
                "logloss_delta": final["logloss"] - baseline["logloss"],
                "auc_delta": final["auc"] - baseline["auc"],
                "pls": model.lost_lookups / total_lookups,
                "decode_max_rel_err": model.decode_error,
                "trainer_steps": base.step,
            }
        )
    return out


class _BatchCache:
    """A data source whose batches are generated once per replication: the baseline and
    every forked trainer read the same batch ``i`` (a pure function of seed and index)."""

    def __init__(self, data):
        self._data = data
        self._batches: dict[int, object] = {}

    def batch(self, index: int):
        found = self._batches.get(index)
        if found is None:
            found = self._batches[index] = self._data.batch(index)
        return found

    def __getattr__(self, name):
        return getattr(self._data, name)


def _shared_run(models: list[PolicyModel], cfg: TrainerConfig, steps: int) -> Trainer:
    """One failure-free trainer serves every policy until it forks; returns that trainer."""
    base = Trainer(cfg)
    base.data = _BatchCache(base.data)
    queue = []
    own = []
    for order, model in enumerate(models):
        if model.own_from_start:
            own.append(model)
            continue
        if model.lazy:
            continue
        model.follow(base)
        last = model.divergence if model.divergence is not None else len(model.events) - 1
        queue += [(model.step_of(model.events[i]), order, i) for i in range(last + 1)]
    forked = []
    for step, order, index in sorted(queue):
        model = models[order]
        PolicyModel._advance(base, step)
        if index == model.divergence:
            model.fork(base)
            model.apply(model.events[index], model.trainer)
            forked.append(model)
        else:
            model.apply(model.events[index], base)
    PolicyModel._advance(base, steps)
    for model in models:
        if not model.lazy and model.divergence is None:
            model.unfollow(base)  # saved rows but never restored: the final model is the base's
    for model in forked:
        model.run_rest(model.divergence + 1)
    for model in own:
        model.trainer = Trainer(cfg)
        model.trainer.data = base.data
        model.follow(model.trainer)
        model.run_rest(0)
    return base
