"""``cpr``, ``cpr_mfu``, ``cpr_ssu``: checkpointing with partial recovery (CPR, MLSys 2021).

Checkpoints are full saves every ``interval`` of compute, as in ``full``. When embedding PS
fail, only their shards are reloaded from the last checkpoint; every other node keeps its
newer state and training goes on without rollback. The price is accuracy: the failed shards
lose the updates made since they were last saved. CPR measures that loss as the **portion
of lost samples** (PLS): the fraction of embedding-row updates of the whole run that were
lost. With a full save every T_save, job MTBF T_fail, N_emb shards and m shards lost per
failure, a failure strikes on average T_save/2 after a save:

    PLS ≈ m · T_save / (2 · N_emb · T_fail)                                       (1)

The interval is given, or chosen from a target PLS by inverting (1), or from a target
accuracy loss and a PLS-to-accuracy slope (loss ≈ slope · PLS, fitted on ``cpr_pls.yaml``).
CPR then predicts the overhead of partial and of full recovery (first order, per unit of
time) and runs full recovery when that is predicted cheaper (``fallback``):

    full:     δ/τ* + (τ*/2 + R + L_all)/T_fail        with τ* Daly's optimum
    partial:  δ/T_save + δ_p/T_p + (R + L_m)/T_fail

(δ full save time, δ_p partial save time, T_p partial-save period, R mean rescheduling
delay, L_all / L_m reload of all state / of m shards.)

Prioritized saving (``cpr_mfu``, ``cpr_ssu``): between full saves, every ``partial_interval``
each shard writes the fraction ``fraction`` of its rows that matter most — MFU: the rows
with the highest use counts since their last save (counters then reset); SSU: rows sampled
from each batch's touched ids (``sampling_rate``) into a buffer of ``buffer_rows`` rows.
The saved rows' updates survive a failure. Without the embedded trainer, the share of
updates those rows carry is the Zipf top-fraction share of ``popularity_exponent``; with
the trainer, saved rows and lost updates are measured on the real model.

A trainer failure is handled by ``trainer_failure``: ``full`` (conservative: everyone rolls
back to the checkpoint, as ``full`` does) or ``replica`` (the replacement copies the dense
parameters from a surviving data-parallel trainer over the NIC; no rollback).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ftsim.policies.base import Policy, PolicyParams, TrainerSide
from ftsim.policies.events import Checkpoint, ModelEvent, RestoreAll, RestoreShards
from ftsim.policies.full import Interval, resolve_interval_s
from ftsim.policies.registry import register
from ftsim.scenario.quantities import Seconds
from ftsim.sim.failures import job_mtbf_s, victims_per_failure
from ftsim.sim.nodes import any_trainer, failed_shards
from ftsim.sim.theory import daly_interval_s


class CprParams(PolicyParams):
    """Parameters of ``cpr`` (vanilla partial recovery)."""

    kind: Literal["cpr"]
    interval: Interval | None = Field(None, description="compute between full saves")
    target_pls: float | None = Field(None, gt=0, lt=1, description="choose interval for this PLS")
    target_accuracy_loss: float | None = Field(
        None, gt=0, description="choose interval for this log-loss increase (needs pls_slope)"
    )
    pls_slope: float | None = Field(
        None, gt=0, description="log-loss increase per unit PLS (from a cpr_pls sweep)"
    )
    fallback: bool = Field(True, description="use full recovery when predicted cheaper")
    trainer_failure: Literal["full", "replica"] = Field(
        "full", description="a trainer failure: everyone rolls back, or copy from a replica"
    )

    @model_validator(mode="after")
    def _one_interval_rule(self):
        rules = [self.interval is not None, self.target_pls is not None]
        rules.append(self.target_accuracy_loss is not None)
        if sum(rules) != 1:
            raise ValueError("give exactly one of interval, target_pls, target_accuracy_loss")
        if self.target_accuracy_loss is not None and self.pls_slope is None:
            raise ValueError("target_accuracy_loss needs pls_slope")
        return self


class _PrioritizedParams(CprParams):
    fraction: float = Field(0.05, gt=0, le=1, description="share r of rows per partial save")
    partial_interval: Seconds = Field("1 h", description="compute between partial saves")
    popularity_exponent: float = Field(
        1.05, gt=0, description="Zipf exponent of row popularity (used without the trainer)"
    )


class CprMfuParams(_PrioritizedParams):
    """Parameters of ``cpr_mfu``: save the most frequently used rows."""

    kind: Literal["cpr_mfu"]


class CprSsuParams(_PrioritizedParams):
    """Parameters of ``cpr_ssu``: save sub-sampled used rows."""

    kind: Literal["cpr_ssu"]
    sampling_rate: float = Field(0.01, gt=0, le=1, description="share of touched ids sampled")
    buffer_rows: int | None = Field(
        None, ge=1, description="sample buffer size in rows (default: fraction × shard rows)"
    )


def zipf_top_share(fraction: float, rows: int, exponent: float) -> float:
    """Share of accesses that go to the top ``fraction`` of ``rows`` under Zipf(exponent).

    Uses the integral approximation H(k) ≈ 1 + ∫₁ᵏ x^-s dx of the generalized harmonic number.
    """

    def harmonic(k: float) -> float:
        if abs(exponent - 1.0) < 1e-12:
            return 1.0 + math.log(k)
        return 1.0 + (k ** (1.0 - exponent) - 1.0) / (1.0 - exponent)

    top = max(1.0, fraction * rows)
    return min(1.0, harmonic(top) / harmonic(rows))


@register
class Cpr(Policy):
    """Checkpointing with partial recovery of failed embedding shards."""

    Params = CprParams

    def __init__(self, params, scenario, layout, rng):
        super().__init__(params, scenario, layout, rng)
        cluster = scenario.cluster
        self.n_shards = cluster.emb_ps
        self.mtbf_s = job_mtbf_s(scenario)
        self.shards_per_failure = victims_per_failure(scenario, "emb_ps")
        self.save_s = layout.full_save_s()
        self.load_all_s = layout.full_load_s()
        self.load_lost_s = layout.read_s([layout.shard_bytes] * round(self.shards_per_failure))
        self.partial_s = 0.0
        self.partial_period_s = math.inf
        if isinstance(params, _PrioritizedParams):
            self.partial_s = layout.write_s([layout.shard_bytes * params.fraction] * self.n_shards)
            self.partial_period_s = params.partial_interval
        self.interval_s = self._choose_interval()
        self.predicted = self._predict_overheads()
        self.partial = self.predicted["partial"] <= self.predicted["full"] or not params.fallback
        if not self.partial:
            self.interval_s = daly_interval_s(self.save_s, self.mtbf_s)
        self.committed_s = 0.0
        self.next_full_s = self.interval_s
        self.next_partial_s = self.partial_period_s if self.partial else math.inf
        self.exposed_since = [0.0] * self.n_shards
        """Progress since which each shard has updates that only live in memory."""
        self.partial_saved_s = 0.0
        self.lost_update_s = 0.0
        """Sum over failed shards of the compute seconds of updates lost (for PLS)."""
        self.n_partial_saves = 0
        self._rollback_pending = False

    # -- the interval choice -----------------------------------------------------------

    def _target_pls(self) -> float | None:
        p = self.params
        if p.target_pls is not None:
            return p.target_pls
        if p.target_accuracy_loss is not None:
            return p.target_accuracy_loss / p.pls_slope
        return None

    def _choose_interval(self) -> float:
        target = self._target_pls()
        if target is None:
            return resolve_interval_s(self.params.interval, self.save_s, self.mtbf_s)
        if math.isinf(self.mtbf_s) or self.shards_per_failure == 0:
            return math.inf
        return 2.0 * self.n_shards * self.mtbf_s * target / self.shards_per_failure

    def predicted_pls(self, interval_s: float) -> float:
        """PLS of vanilla partial recovery by (1); 0 without embedding failures."""
        if math.isinf(self.mtbf_s) or math.isinf(interval_s):
            return 0.0
        return self.shards_per_failure * interval_s / (2.0 * self.n_shards * self.mtbf_s)

    def predicted_prioritized_pls(self) -> float:
        """PLS with partial saves: the share c of updates carried by the rows a partial
        save writes is exposed for T_p/2 on average, the rest for T_save/2."""
        share = self._saved_share()
        period = min(self.partial_period_s, self.interval_s)
        return (1 - share) * self.predicted_pls(self.interval_s) + share * self.predicted_pls(
            period
        )

    def _predict_overheads(self) -> dict[str, float]:
        restart = self.scenario.cluster.reschedule.expected_s
        mtbf, delta = self.mtbf_s, self.save_s
        if math.isinf(mtbf):
            return {"full": 0.0, "partial": 0.0}
        tau = daly_interval_s(delta, mtbf)
        full = delta / tau + (tau / 2 + restart + self.load_all_s) / mtbf
        partial = delta / self.interval_s + (restart + self.load_lost_s) / mtbf
        if self.partial_s:
            partial += self.partial_s / self.partial_period_s
        return {"full": full, "partial": partial}

    # -- saving ------------------------------------------------------------------------

    def next_action_at(self) -> float:
        return min(self.next_full_s, self.next_partial_s)

    def act(self, sim):
        progress = sim.progress_s
        if self.next_full_s <= self.next_partial_s:
            yield from sim.phase("save", self.save_s, "checkpoint")
            self.committed_s = progress
            self.n_checkpoints += 1
            sim.model_event(Checkpoint, key=progress)
            self.exposed_since = [progress] * self.n_shards
            self.partial_saved_s = progress
            self.next_full_s = progress + self.interval_s
            if self.next_partial_s <= self.next_full_s:
                self.next_partial_s = progress + self.partial_period_s
        else:
            yield from sim.phase("save", self.partial_s, f"partial save r={self.params.fraction}")
            self.partial_saved_s = progress
            sim.model_event(PartialSave, fraction=self.params.fraction)
            self.n_partial_saves += 1
            self.next_partial_s = progress + self.partial_period_s

    # -- failures ----------------------------------------------------------------------

    def _saved_share(self) -> float:
        """Share of a shard's updates carried by the rows a partial save writes."""
        p = self.params
        if not isinstance(p, _PrioritizedParams):
            return 0.0
        rows = self.scenario.job.embedding_rows / self.n_shards
        return zipf_top_share(p.fraction, int(rows), p.popularity_exponent)

    def on_failure(self, sim, failure) -> None:
        trainers = self.scenario.cluster.trainers
        shards = failed_shards(trainers, failure.nodes)
        lost_trainer = any_trainer(trainers, failure.nodes)
        if not self.partial or (lost_trainer and self.params.trainer_failure == "full"):
            sim.model_event(RestoreAll, key=self.committed_s)
            sim.rollback_to(self.committed_s)
            self._rollback_pending = True
            self.exposed_since = [self.committed_s] * self.n_shards
            self.next_full_s = self.committed_s + self.interval_s
            return
        if shards:
            sim.model_event(RestoreShards, key=self.committed_s, shards=shards)
        now = sim.progress_s
        share = self._saved_share()
        for shard in shards:
            since = self.exposed_since[shard]
            since_partial = max(since, self.partial_saved_s)
            self.lost_update_s += (1 - share) * (now - since) + share * (now - since_partial)
            self.exposed_since[shard] = now

    def recover(self, sim, failures):
        yield from sim.await_replacements(failures)
        if self._rollback_pending:
            yield from sim.phase("load", self.load_all_s, "restore all state")
            self._rollback_pending = False
            return
        trainers = self.scenario.cluster.trainers
        failed = {n for f in failures for n in f.nodes}
        shards = len(failed_shards(trainers, failed))
        flows = [self.layout.shard_bytes] * shards
        load_s = self.layout.read_s(flows) if flows else 0.0
        if any_trainer(trainers, failed):
            load_s = max(load_s, self.layout.nic_s(self.layout.dense_bytes))
        yield from sim.phase("load", load_s, f"reload {shards} shard(s)")

    def result_columns(self):
        work = self.scenario.job.work_s
        partial_gb = self.layout.shard_bytes * self.n_shards * getattr(self.params, "fraction", 0)
        return {
            "interval_h": self.interval_s / 3600.0,
            "saved_gb": (
                self.n_checkpoints * self.layout.total_bytes + self.n_partial_saves * partial_gb
            )
            / 1e9,
            "save_cost_s": self.save_s,
            "load_cost_s": self.load_lost_s,
            "cpr_decision": "partial" if self.partial else "full",
            "predicted_overhead_full": self.predicted["full"],
            "predicted_overhead_partial": self.predicted["partial"],
            "pls_model": self.lost_update_s / (work * self.n_shards),
            "pls_predicted": self.predicted_prioritized_pls() if self.partial else 0.0,
            "n_partial_saves": self.n_partial_saves,
        }


@dataclass(frozen=True, slots=True)
class PartialSave(ModelEvent):
    """Each shard saves the share ``fraction`` of its rows that its policy's trainer side
    (MFU or SSU) ranks first; their updates until now survive a later shard restore."""

    fraction: float

    def apply(self, model, trainer) -> None:
        rows = model.side.rows_to_save(self.fraction, trainer)
        model.partials.append(trainer.read_rows(rows))
        model.saved_lookups[rows] = trainer.mfu.counts[rows]


class MfuSide(TrainerSide):
    """CPR-MFU on the trainer: per-row use counts since each row's last save."""

    def __init__(self, params, model) -> None:
        super().__init__(params, model)
        self.reset: np.ndarray | None = None
        """Per row: the trainer's cumulative use count when the row was last saved."""

    def attach(self, trainer, own: bool) -> None:
        if self.reset is None:
            self.reset = trainer.mfu.counts.copy()

    def checkpointed(self, trainer) -> None:
        self.reset[:] = trainer.mfu.counts

    def rows_to_save(self, fraction: float, trainer) -> np.ndarray:
        """Per shard, the ``fraction`` of rows most used since their last save (ties by row
        id; unused rows are never saved); their counters restart."""
        emb, lookups = trainer.embeddings, trainer.mfu.counts
        chosen = []
        for shard in range(emb.n_shards):
            rows = emb.shard_rows(shard)
            uses = lookups[rows] - self.reset[rows]
            k = math.ceil(fraction * len(rows))
            order = np.lexsort((rows, -uses))[:k]
            chosen.append(rows[order[uses[order] > 0]])
        rows = np.sort(np.concatenate(chosen))
        self.reset[rows] = lookups[rows]
        return rows


class SsuSide(TrainerSide):
    """CPR-SSU on the trainer: a sampler of the row ids each batch touches."""

    def __init__(self, params, model) -> None:
        super().__init__(params, model)
        self.sampler = None

    def attach(self, trainer, own: bool) -> None:
        from ftsim.trainer.usage import UseSampler

        if self.sampler is None:
            p = self.params
            capacity = p.buffer_rows or max(1, round(p.fraction * trainer.embeddings.n_rows))
            self.sampler = UseSampler(p.sampling_rate, capacity, self.model.sim.rep)
        trainer.add_update_listener(self._observe)

    def detach(self, trainer) -> None:
        trainer.remove_update_listener(self._observe)

    def _observe(self, update) -> None:
        self.sampler.observe(update.step, update.rows, update.counts)

    def rows_to_save(self, fraction: float, trainer) -> np.ndarray:
        """The sampled ids in the buffer (the buffer then empties)."""
        return self.sampler.drain()


@register
class CprMfu(Cpr):
    """CPR with most-frequently-used prioritized partial saves."""

    Params = CprMfuParams
    TrainerSide = MfuSide


@register
class CprSsu(Cpr):
    """CPR with sub-sampled-used prioritized partial saves."""

    Params = CprSsuParams
    TrainerSide = SsuSide
