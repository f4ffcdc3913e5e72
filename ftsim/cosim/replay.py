"""Co-simulation: the policies' actions replayed on a real NumPy DLRM trainer.

The SimPy run of a policy records typed model events (:mod:`ftsim.policies.events`) —
checkpoints, partial saves, full rollbacks, shard restores — at their training progress. Progress p
maps to trainer step round(p / work × steps). Here each policy's events are applied to a
trainer stepped in chunks between them (each event applies itself; mechanisms that watch
the trainer, such as a parity code or an update log, are the policy's ``TrainerSide``), so
the accuracy cost of a strategy is measured on a
model that really lost (or kept) the updates the strategy loses: a restored shard really
goes back to its checkpointed rows and optimizer state, and training goes on from there.

Sharing work (``share_prefix``). Every policy follows the failure-free trajectory until its
first restore: before that its state *is* the failure-free state at the same step. One
failure-free ("baseline") trainer therefore runs once per replication; each policy's events
before its first restore are served from it, and at that restore the policy forks a trainer
of its own from the baseline's state. A policy whose only restores are full rollbacks (as
``full``) never diverges: restoring a checkpoint and replaying the same batches reproduces
the failure-free model bit for bit (tested with ``share_prefix: false``, which trains every
policy on its own trainer from step 0), so its final model is the baseline's. The same holds
for any policy whose modifying events are all exact, e.g. SWIFT when its update log covers
every update since the shard checkpoints: it is not trained at all.

PLS (portion of lost samples) is measured as the fraction of the run's embedding lookups
whose updates were lost: when shard rows go back to an older version, the lookups of those
rows since that version (counted by the trainer's per-row use counters) are lost. It is the
``pls_measured`` column, next to the time model's own estimate ``pls_model``.

Memory. A replication's trainers, checkpoints and batches are freed by reference counting as
soon as its columns are computed: trainer sides refer to their model weakly, every side is
detached from its trainer when the policy stops training (removing the trainer's update
listeners, which would otherwise form trainer → listener → mechanism → trainer cycles), and
:func:`cosimulate` drops the models' trainers and checkpoints once it has evaluated them. A
long run therefore holds one replication's state at a time, whatever its length.
"""

from __future__ import annotations

import json

import numpy as np

from ftsim.policies.events import ModelEvent
from ftsim.scenario.schema import Scenario
from ftsim.scenario.trainer_section import TrainerSection
from ftsim.sim.engine import Simulation
from ftsim.sim.rng import Purpose, stream
from ftsim.trainer import (
    RowData,
    ShardingConfig,
    SharedData,
    Trainer,
    TrainerConfig,
    TrainerSnapshot,
)
from ftsim.trainer.blas import one_blas_thread
from ftsim.trainer.trainer import make_data


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


def model_setting(scenario: Scenario) -> str:
    """What the failure-free model of a replication depends on, as JSON text to compare: the
    trainer section, the seed and the number of embedding PS (one shard each), the inputs of
    :func:`trainer_config` and the failure-free run. Scenarios that agree on it train the
    same failure-free model in every replication, whatever their failures, cluster or
    policies, so one trainer can serve the policies of all of them (:func:`cosimulate`)."""
    section = scenario.trainer
    setting = {
        "trainer": section.model_dump(mode="json") if section is not None else None,
        "seed": scenario.run.seed,
        "emb_ps": scenario.cluster.emb_ps,
    }
    return json.dumps(setting, sort_keys=True)


class PolicyModel:
    """One policy's model state: its checkpoints, partial saves and lost lookups, and its
    trainer-side mechanisms (``side``). Events (:mod:`ftsim.policies.events`) act on it."""

    def __init__(self, sim: Simulation, cfg: TrainerConfig, steps: int):
        self.sim = sim
        self.cfg = cfg
        self.steps = steps
        self.events: list[ModelEvent] = sim.model_events
        self.work_s = sim.work_s
        self.needed = {e.reads for e in self.events if e.reads is not None}
        """Checkpoint keys that a restore will read: only these are kept."""
        modifying = [i for i, e in enumerate(self.events) if e.modifies]
        self.lazy = all(self.events[i].exact for i in modifying)
        """Only exact restores: the model never leaves the failure-free trajectory."""
        self.divergence = modifying[0] if modifying and not self.lazy else None
        plan = sim.policy.plan
        rng = stream(sim.scenario.run.seed, sim.rep, Purpose.POLICY)
        self.side = plan.TrainerSide(plan.params, self, plan.side_inputs(), rng)
        self.trainer: Trainer | None = None
        self.attached: Trainer | None = None
        """The trainer the side watches (the shared one before the fork, then our own)."""
        self.checkpoints: dict[float, TrainerSnapshot] = {}
        self.partials: list[RowData] = []
        """Rows saved by partial saves since the last checkpoint."""
        self.saved_lookups: np.ndarray | None = None
        """Per row: cumulative lookups at the version of the row that storage holds."""
        self.pending_saves: dict[float, tuple[np.ndarray, int]] = {}
        """CheckFreq snapshots being persisted: key → (lookups per row at the snapshot,
        partial saves made before it)."""
        self.lost_lookups = 0
        self.own_steps = 0
        """Steps trained on the policy's own trainer (the cost of not sharing the baseline)."""

    def step_of(self, event: ModelEvent) -> int:
        return min(self.steps, round(event.progress_s / self.work_s * self.steps))

    def lose(self, trainer: Trainer, rows: np.ndarray) -> None:
        """``rows`` went back to their saved version: their lookups since then are lost."""
        lookups = trainer.mfu.counts
        self.lost_lookups += int((lookups[rows] - self.saved_lookups[rows]).sum())
        self.saved_lookups[rows] = lookups[rows]

    def follow(self, trainer: Trainer, own: bool) -> None:
        """Start carrying the policy's state on ``trainer`` (``own``: a trainer of its own,
        else the shared failure-free one); the first call, at step 0, takes its counters as
        reference."""
        if self.saved_lookups is None:
            if 0.0 in self.needed:  # a restore before the first checkpoint: the initial model
                self.checkpoints[0.0] = trainer.snapshot()
            self.saved_lookups = trainer.mfu.counts.copy()
        self.side.attach(trainer, own)
        self.attached = trainer

    def unfollow(self) -> None:
        """Stop carrying the policy's state: the side detaches from its trainer."""
        if self.attached is not None:
            self.side.detach(self.attached)
            self.attached = None

    def release(self) -> None:
        """Drop the trainer and saved state once the result columns are computed."""
        self.unfollow()
        self.trainer = None
        self.checkpoints.clear()
        self.partials.clear()
        self.pending_saves.clear()

    def fork(self, base: Trainer) -> None:
        """Leave the baseline: continue on a trainer of our own with the baseline's state (and
        its data: the same batches and held-out set, generated once)."""
        self.unfollow()
        self.trainer = base.clone()
        self.follow(self.trainer, own=True)

    def apply(self, event: ModelEvent, trainer: Trainer) -> None:
        """Do to ``trainer`` (already at the event's step) what the policy did."""
        if event.writes is not None and event.writes in self.needed:
            self.checkpoints[event.writes] = trainer.snapshot()
        event.apply(self, trainer)

    def run_rest(self, start: int) -> None:
        """Apply events ``start``… on our own trainer, train to the end, stop following."""
        for event in self.events[start:]:
            self.own_steps += self._advance(self.trainer, self.step_of(event))
            self.apply(event, self.trainer)
        self.own_steps += self._advance(self.trainer, self.steps)
        self.unfollow()

    @staticmethod
    def _advance(trainer: Trainer, step: int) -> int:
        """Train ``trainer`` up to ``step``; returns the number of steps trained."""
        steps = max(0, step - trainer.step)
        if steps:
            trainer.train(steps, loss=False)
        return steps


def run_models(scenario: Scenario, sims: list[Simulation]) -> tuple[Trainer, list[PolicyModel]]:
    """Train the failure-free model and every policy's model for one replication.

    Returns the failure-free trainer and the policies' models (``model.trainer`` is None
    when the policy's final model is the failure-free one).
    """
    section: TrainerSection = scenario.trainer
    cfg = trainer_config(scenario, sims[0].rep)
    models = [PolicyModel(sim, cfg, section.steps) for sim in sims]
    # batches (asked for up to the last step), held-out set, calibration: built once
    data = SharedData(make_data(cfg), until=section.steps)
    if section.share_prefix:
        return _shared_run(models, cfg, data, section.steps), models
    base = Trainer(cfg, data)
    base.train(section.steps, loss=False)
    for model in models:
        model.trainer = Trainer(cfg, data)
        model.follow(model.trainer, own=True)
        model.run_rest(0)
    return base, models


def cosimulate(scenario: Scenario, sims: list[Simulation]) -> list[dict]:
    """Accuracy columns for finished simulations of one replication (any policies, of
    ``scenario`` or of scenarios with the same :func:`model_setting`).

    The trainer runs on one BLAS thread: results then do not depend on how many threads a
    machine offers, so serial runs, process pools and Dask workers agree bit for bit, and
    parallel sweep workers do not oversubscribe the cores (which slows OpenBLAS tenfold).
    The replication's trainers are released before returning (see the module docstring).
    """
    with one_blas_thread():
        base, models = run_models(scenario, sims)
        try:
            return _columns(base, models)
        finally:
            for model in models:
                model.release()


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
                "pls_measured": model.lost_lookups / total_lookups,
                "trainer_steps": base.step,
                "trainer_own_steps": model.own_steps,
                **model.side.columns(),
            }
        )
    return out


def _shared_run(
    models: list[PolicyModel], cfg: TrainerConfig, data: SharedData, steps: int
) -> Trainer:
    """One failure-free trainer serves every policy until it forks; returns that trainer.

    Policies that never leave the failure-free trajectory (``lazy``) are not trained; the
    others follow the shared trainer up to their first modifying event (``divergence``), or
    train on their own from step 0 when their side asks for it.
    """
    base = Trainer(cfg, data)
    queue = []
    own = []
    for order, model in enumerate(models):
        if model.lazy:
            continue
        if model.side.own_from_start:
            own.append(model)
            continue
        model.follow(base, own=False)
        queue += [(model.step_of(model.events[i]), order, i) for i in range(model.divergence + 1)]
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
    for model in forked:
        model.run_rest(model.divergence + 1)
    for model in own:
        model.trainer = Trainer(cfg, data, base.model.workspace)
        model.follow(model.trainer, own=True)
        model.run_rest(0)
    return base
