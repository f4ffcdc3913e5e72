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
    partial:  δ/T_save + δ_p/T_p + σ + (R + L_m)/T_fail

(δ full save time, δ_p partial save time, T_p partial-save period, σ slowdown of tracking
row use, R mean rescheduling delay, L_all / L_m reload of all state / of m shards.)

Prioritized saving (``cpr_mfu``, ``cpr_ssu``): between full saves, every
``partial_interval`` each shard saves the rows that matter most, and the updates of those
rows survive a failure. The two variants track use differently, and so cost and keep
different things (time model; docs/model.md derives the shares):

- **MFU** keeps a counter per row (``counter_bytes`` of memory per row), incremented once
  per touched row per iteration (``counter_update_ns``: a slowdown charged to ``other``);
  a partial save selects the ``fraction`` of the shard's rows with the highest counts
  (a scan of every counter, ``select_ns`` per row, charged to ``save``) and writes them.
  The rows it saves carry the top-``fraction`` share of a shard's lookups.
- **SSU** keeps no counters: every touched row is sampled with probability
  1 − (1 − ``sampling_rate``)^(lookups in the batch) (``sample_ns`` per touched row,
  charged to ``other``) and its id appended to a ring buffer of ``buffer_rows`` ids per
  shard (``id_bytes`` each: ids only, the values are read at save time so that the
  latest ones are saved). A partial save writes the distinct ids in the buffer (a pass
  over its entries, ``select_ns`` each). Those rows are the ones sampled during the
  last W iterations the buffer holds, which is not the top ``fraction``: a row of
  lookup probability π is in the buffer with probability 1 − (1 − rate·π)^(B·W).

The row popularity behind these shares is a Zipf law per table, with the exponent the
scenario's synthetic trainer data uses (``trainer.data.zipf_exponent``) or, without one,
``popularity_exponent``. With the trainer, saved rows and lost updates are also measured
on the real model.

A trainer failure is handled by ``trainer_failure``: ``full`` (conservative: everyone rolls
back to the checkpoint, as ``full`` does) or ``replica`` (the replacement copies the dense
parameters from a surviving data-parallel trainer over the NIC; no rollback). With
``save_mode: checkfreq`` a persist under way survives a ``replica`` trainer failure (the PS
and trainer 0 write it) and is lost to any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ftsim.notices import CprFallback, Notice, short_duration
from ftsim.policies.base import Plan, Policy, TrainerSide, register
from ftsim.policies.events import ModelEvent, RestoreAll, RestoreShards
from ftsim.policies.full import Interval, planned_interval_s
from ftsim.policies.knobs import Knob
from ftsim.policies.saving import CheckpointWriter, SavingParams, stall_s
from ftsim.scenario.notices import register_no_effect
from ftsim.scenario.quantities import Seconds
from ftsim.sim.nodes import any_trainer, failed_shards
from ftsim.sim.popularity import (
    PopularityParams,
    distinct_rows,
    sampled_buffer,
    top_rows_share,
)
from ftsim.sim.theory import daly_interval_s


class CprParams(SavingParams):
    """Parameters of ``cpr`` (vanilla partial recovery)."""

    kind: Literal["cpr"]
    exclusive_fields: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("interval", "target_pls", "target_accuracy_loss"),
    )
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

    def part_problems(self, dense, by_rows):
        """CPR manages a part when it never chooses full recovery (``fallback: false``) and,
        holding the dense parameters, recovers a trainer from a replica."""
        found = []
        if self.fallback:
            message = "may choose full recovery, which rolls every node back: set fallback: false"
            found.append(("fallback", message))
        if dense and self.trainer_failure == "full":
            message = "rolls every node back on a trainer failure: set trainer_failure: replica"
            found.append(("trainer_failure", message))
        return found


class _PrioritizedParams(CprParams, PopularityParams):
    """Parameters shared by ``cpr_mfu`` and ``cpr_ssu``: partial saves, row popularity."""

    search: ClassVar[tuple[Knob, ...]] = (
        Knob("fraction", (0.01, 0.05, 0.2), "geometric", highest=1.0),
    )

    fraction: float = Field(0.05, gt=0, le=1, description="share r of rows per partial save")
    partial_interval: Seconds = Field("1 h", gt=0, description="compute between partial saves")
    select_ns: float = Field(
        10.0, ge=0, description="ns per entry scanned to choose the rows of a partial save"
    )
    tracking_threads: int = Field(
        20, ge=1, description="PS cores that count (MFU) or sample (SSU) touched rows in parallel"
    )
    """[paper: CPR] the embedding PS are 20-core servers; a shard's touched rows are spread
    over the threads that apply their updates, and each thread counts (or samples) the rows
    it updates."""
    """Assumption: a linear-time pass (threshold selection over MFU's counters, de-duplication
    of SSU's buffer); NumPy's partition + filter over 48 M uint32 counters took 9–15 ns per
    entry on the (shared) development machine."""

    def part_problems(self, dense, by_rows):
        found = super().part_problems(dense, by_rows)
        if by_rows:
            message = (
                f"{self.kind} ranks rows by the whole tables' popularity, so on a share of the "
                "rows its model would count the other part's: split the composition by shards"
            )
            found.append(("kind", message))
        return found

    def input_problems(self, inputs):
        return inputs.popularity_problems()


class CprMfuParams(_PrioritizedParams):
    """Parameters of ``cpr_mfu``: save the most frequently used rows."""

    kind: Literal["cpr_mfu"]
    counter_bytes: int = Field(4, ge=1, description="bytes of the use counter of one row")
    """Assumption: uint32. Counters restart at every full save; the hottest prod50h row gets
    ~5.4e8 lookups in the 9 h between two, below 2^32 ≈ 4.3e9."""
    counter_update_ns: float = Field(
        10.0, ge=0, description="ns per counter increment (one per touched row per iteration)"
    )
    """Assumption: an increment that misses the cache (~100 ns DRAM latency) with about ten
    independent increments in flight per core. NumPy's fancy-indexed ``+=`` on a 48 M-row
    uint32 array, which does not overlap the misses, took 200–350 ns per row on the
    development machine: an upper bound."""


class CprSsuParams(_PrioritizedParams):
    """Parameters of ``cpr_ssu``: save sub-sampled used rows."""

    kind: Literal["cpr_ssu"]
    sampling_rate: float = Field(0.01, gt=0, le=1, description="share of touched ids sampled")
    buffer_rows: int | None = Field(
        None, ge=1, description="sample buffer size in ids per shard (default: fraction × rows)"
    )
    id_bytes: int = Field(8, ge=1, description="bytes per buffer entry (a row id)")
    """The buffer holds ids only (int64, as the trainer's sampler): a partial save reads the
    rows' current values, which are the ones worth saving, not the values at sampling time."""
    sample_ns: float = Field(
        5.0, ge=0, description="ns per touched row to sample it (and append a sampled id)"
    )
    """Assumption: one uniform draw and a compare per touched row, plus for the sampled ones
    (a ``sampling_rate`` share) a sequential 8-byte append; NumPy's vectorised draw and
    compare took 3–6 ns per row on the development machine."""


@dataclass(frozen=True, slots=True)
class PartialSaving:
    """Prioritized partial saves in the time model: what they cost and what they keep."""

    period_s: float
    """Compute seconds between partial saves."""
    rows: float
    """Rows a partial save writes per shard."""
    share: float
    """Share of a shard's updates those rows carry."""
    select_s: float
    """Seconds to choose the rows, per save (shards in parallel)."""
    write_s: float
    """Seconds to write them (every shard concurrently)."""
    slowdown: float
    """Extra compute per compute second to track use (counters or sampling)."""
    tracker_bytes: float
    """Memory of the use tracker per shard (counters or sample buffer), bytes."""

    @property
    def save_s(self) -> float:
        """Stall of one partial save: choose the rows, then write them."""
        return self.select_s + self.write_s


class Cpr(Policy):
    """Checkpointing with partial recovery of failed embedding shards: one replication
    (of ``cpr``, ``cpr_mfu`` or ``cpr_ssu``: their plans differ in what partial saves do)."""

    def __init__(self, plan: CprPlan):
        super().__init__(plan)
        self.writer = CheckpointWriter(self.params, plan.snapshot_bytes, plan.inputs.cluster)
        self.committed_s = 0.0
        self.next_full_s = plan.interval_s
        saving = plan.saving
        self.next_partial_s = saving.period_s if plan.partial and saving else math.inf
        self.exposed_since = [0.0] * plan.n_shards
        """Progress since which each shard has updates that only live in memory."""
        self.partial_saved_s = 0.0
        self.lost_update_s = 0.0
        """Sum over failed shards of the compute seconds of updates lost (for PLS)."""
        self.n_partial_saves = 0
        self._rollback_pending = False

    # -- saving ------------------------------------------------------------------------

    def next_action_at(self) -> float:
        return min(self.next_full_s, self.next_partial_s)

    def act(self, sim):
        plan = self.plan
        progress = sim.progress_s
        if self.next_full_s <= self.next_partial_s:
            yield from self.writer.save(sim, sim.net.full_save(), progress, self._committed)
            self.next_full_s = progress + plan.interval_s
            if self.next_partial_s <= self.next_full_s:
                self.next_partial_s = progress + plan.saving.period_s
        else:
            yield from sim.phase("save", plan.saving.select_s, "choose the rows to save")
            flows = sim.net.shard_writes(range(plan.n_shards), plan.partial_bytes)
            yield from sim.transfer("save", flows, plan.partial_detail)
            self.partial_saved_s = progress
            sim.model_event(PartialSave, fraction=self.params.fraction)
            self.n_partial_saves += 1
            self.next_partial_s = progress + plan.saving.period_s

    def _committed(self, progress_s: float) -> None:
        """The full checkpoint of the state at ``progress_s`` is in storage."""
        self.committed_s = progress_s
        self.n_checkpoints += 1
        self.exposed_since = [s if s >= progress_s else progress_s for s in self.exposed_since]
        self.partial_saved_s = max(self.partial_saved_s, progress_s)

    def slowdown(self) -> dict[str, float]:
        """Tracking row use (MFU's counters, SSU's sampling) while partial saves run, and a
        CheckFreq persist's interference."""
        tracking = self.plan.tracking_slowdown
        if not self.writer.persisting:  # (the writer's slowdown is then empty)
            return tracking
        out = dict(self.writer.slowdown())
        for category, extra in tracking.items():
            out[category] = out.get(category, 0.0) + extra
        return out

    # -- failures ----------------------------------------------------------------------

    def on_failure(self, sim, failure) -> None:
        plan = self.plan
        trainers = plan.trainers
        shards = failed_shards(trainers, failure.nodes)
        lost_trainer = any_trainer(trainers, failure.nodes)
        rollback = not plan.partial or (lost_trainer and self.params.trainer_failure == "full")
        self.writer.on_failure(failure.nodes, trainers, rollback)
        if rollback:
            sim.model_event(RestoreAll, key=self.committed_s)
            sim.rollback_to(self.committed_s)
            self._rollback_pending = True
            # the state after the full checkpoint is gone, partial saves of it too
            self.exposed_since = [self.committed_s] * plan.n_shards
            self.partial_saved_s = self.committed_s
            self.next_full_s = self.committed_s + plan.interval_s
            if plan.partial and plan.saving:
                self.next_partial_s = self.committed_s + plan.saving.period_s
            return
        if shards:
            sim.model_event(RestoreShards, key=self.committed_s, shards=shards)
        now = sim.progress_s
        share = plan.saved_share
        for shard in shards:
            since = self.exposed_since[shard]
            since_partial = max(since, self.partial_saved_s)
            self.lost_update_s += (1 - share) * (now - since) + share * (now - since_partial)
            self.exposed_since[shard] = now

    def recover(self, sim, failures):
        yield from sim.await_replacements(failures)
        if self._rollback_pending:
            yield from sim.transfer("load", sim.net.full_load(), "restore all state")
            self._rollback_pending = False
            return
        trainers = self.plan.trainers
        failed = {n for f in failures for n in f.nodes}
        shards = failed_shards(trainers, failed)
        flows = sim.net.shard_reads(shards)
        for trainer in sorted(n for n in failed if n < trainers):
            flows += sim.net.replica_copy(trainer)  # concurrently, over other links
        yield from sim.transfer("load", flows, f"reload {len(shards)} shard(s)")

    def result_columns(self):
        plan = self.plan
        work = plan.inputs.job.work_s
        saving = plan.saving
        tracker_bytes = saving.tracker_bytes if saving else 0.0
        return {
            "interval_h": plan.interval_s / 3600.0,
            "saved_gb": (
                self.n_checkpoints * self.layout.total_bytes
                + self.n_partial_saves * plan.partial_bytes * plan.n_shards
            )
            / 1e9,
            "save_cost_s": plan.stall_s,
            "load_cost_s": plan.load_lost_s,
            "cpr_decision": "partial" if plan.partial else "full",
            "predicted_overhead_full": plan.predicted["full"],
            "predicted_overhead_partial": plan.predicted["partial"],
            "pls_model": self.lost_update_s / (work * plan.n_shards),
            "pls_predicted": plan.predicted_prioritized_pls() if plan.partial else 0.0,
            "n_partial_saves": self.n_partial_saves,
            "partial_save_s": saving.save_s if saving else 0.0,
            "partial_rows_per_shard": saving.rows if saving else 0.0,
            "saved_share_model": plan.saved_share,
            "tracker_bytes_per_shard": tracker_bytes,
            "tracker_mem_frac": tracker_bytes / self.layout.shard_bytes,
            "tracking_slowdown_frac": self.slowdown().get("other", 0.0),
        }


@register(CprParams)
class CprPlan(Plan):
    """What every replication of a CPR policy shares: the interval (asked for, and run),
    the predicted overheads of partial and full recovery and the choice between them, and
    what partial saves cost and keep (:meth:`_partial_saving`)."""

    Runtime = Cpr

    def __init__(self, params: CprParams, inputs):
        super().__init__(params, inputs)
        layout = self.layout
        self.n_shards = inputs.cluster.emb_ps
        self.trainers = inputs.cluster.trainers
        self.mtbf_s = inputs.mtbf_s
        self.shards_per_failure = inputs.victims["emb_ps"]
        self.save_s = layout.full_save_s()
        """Seconds to write a full checkpoint alone."""
        self.snapshot_bytes = max(layout.shard_bytes, layout.dense_bytes)
        self.stall_s = stall_s(params, self.snapshot_bytes, self.save_s, inputs.cluster)
        """Seconds training stalls per full checkpoint (δ of the interval rules)."""
        self.load_all_s = layout.full_load_s()
        self.load_lost_s = self._reload_s(self.shards_per_failure)
        """Expected seconds to reload the shards a failure takes."""
        self.interval_s = self.asked_interval_s = self._choose_interval()
        """The interval run, and the one the parameters ask for (they differ when CPR falls
        back to full recovery at Daly's interval)."""
        self.saving = self._partial_saving()
        job = inputs.job
        self.partial_bytes = self.saving.rows * job.mean_row_bytes if self.saving else 0.0
        """Bytes each PS writes in a partial save (its chosen rows with optimizer state)."""
        self.predicted = self._predict_overheads()
        self.partial = self.predicted["partial"] <= self.predicted["full"] or not params.fallback
        if not self.partial:
            self.interval_s = daly_interval_s(self.stall_s, self.mtbf_s)
        tracking = self.partial and self.saving and self.saving.slowdown
        self.tracking_slowdown = {"other": self.saving.slowdown} if tracking else {}
        """Training slowdown of tracking row use while partial saves run (by category; the
        dict every replication returns while no persist runs beside it: read only)."""
        self.partial_detail = f"partial save r={params.fraction}" if self.saving else ""
        """The timeline's name of a partial save."""

    def _partial_saving(self) -> PartialSaving | None:
        """Prioritized partial saves (none for vanilla CPR)."""
        return None

    @property
    def saved_share(self) -> float:
        """Share of a shard's updates carried by the rows a partial save writes."""
        return self.saving.share if self.saving else 0.0

    # -- the interval choice -----------------------------------------------------------

    def _target_pls(self) -> float | None:
        p = self.params
        if p.target_pls is not None:
            return p.target_pls
        if p.target_accuracy_loss is not None:
            return p.target_accuracy_loss / p.pls_slope
        return None

    def _reload_s(self, shards: float) -> float:
        """Expected seconds to reload the shards of a failure that takes ``shards`` embedding
        PS on average: ⌊m⌋ or ⌊m⌋ + 1 of them, mixed to that mean (as when a failure of any
        node takes one embedding PS with probability m < 1). Rounding m made it 0 there."""
        layout, low = self.layout, math.floor(shards)
        more = shards - low  # the share of failures that take one shard more

        def read_s(n: int) -> float:
            return layout.read_s([layout.shard_bytes] * n) if n else 0.0

        return (1 - more) * read_s(low) + more * read_s(low + 1) if more else read_s(low)

    def _choose_interval(self) -> float:
        target = self._target_pls()
        if target is None:
            work_s = self.inputs.job.work_s
            return planned_interval_s(work_s, self.params.interval, self.stall_s, self.mtbf_s)
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
        share = self.saved_share
        period = min(self.saving.period_s, self.interval_s) if self.saving else self.interval_s
        return (1 - share) * self.predicted_pls(self.interval_s) + share * self.predicted_pls(
            period
        )

    def _predict_overheads(self) -> dict[str, float]:
        restart = self.inputs.cluster.reschedule.expected_s
        mtbf, delta = self.mtbf_s, self.stall_s
        if math.isinf(mtbf):
            return {"full": 0.0, "partial": 0.0, "rollbacks": 0.0}
        tau = daly_interval_s(delta, mtbf)
        full = delta / tau + (tau / 2 + restart + self.load_all_s) / mtbf
        partial = delta / self.interval_s + (restart + self.load_lost_s) / mtbf
        trainer = min(1.0, self.inputs.victims["trainer"])  # share of failures taking one
        rollbacks = 0.0
        if self.params.trainer_failure == "full" and trainer > 0:
            # it rolls every node back to the last full checkpoint: half an interval lost,
            # everything reloaded (a new user's CPR planned 0.41% at 38 h and ran 842%)
            rollback = self.interval_s / 2 + self.load_all_s - self.load_lost_s
            rollbacks = trainer * rollback / mtbf
        partial += rollbacks
        if self.saving:
            partial += self.saving.save_s / self.saving.period_s + self.saving.slowdown
        return {"full": full, "partial": partial, "rollbacks": rollbacks}

    def notices(self) -> list[Notice]:
        """A fall-back to full recovery, which runs another interval than the one asked."""
        if self.partial:
            return []
        p = self.params
        asked = short_duration(self.asked_interval_s)
        if p.target_pls is not None:
            asked = f"target_pls {p.target_pls} (interval {asked})"
        elif p.target_accuracy_loss is not None:
            asked = f"target_accuracy_loss {p.target_accuracy_loss} (interval {asked})"
        elif isinstance(p.interval, str):
            asked = f"interval {p.interval} ({asked})"
        else:
            asked = f"interval {asked}"
        label = p.label
        return [CprFallback(label, asked, self.asked_interval_s, self.interval_s, self.predicted)]


TRAINED_SHARE_ERROR = 0.1
"""How far (relative) the share of a shard's rows that the embedded trainer's partial saves
hold may be from the setting's before it is said: the trainer saves whole rows of its small
tables (:meth:`_PrioritizedPlan.trained_notices`)."""


class _PrioritizedPlan(CprPlan):
    """What MFU and SSU share: row popularity, partial saves every ``partial_interval``."""

    def notices(self) -> list[Notice]:
        """CPR's, and partial saves that never come: a ``partial_interval`` not shorter than
        the full saves' makes the policy vanilla CPR that still tracks rows (a new user's
        advice searched ``fraction`` there, to no effect)."""
        said = super().notices()
        p = self.params
        if self.partial and p.partial_interval >= self.interval_s:
            what, _ = self._share()
            said.append(
                Notice(
                    f"{p.label}: partial_interval {short_duration(p.partial_interval)} is not "
                    f"shorter than the full saves' interval, {short_duration(self.interval_s)}: "
                    f"no partial save is made, so {what} has no effect; tracking the rows still "
                    "costs (tracking_slowdown_frac)"
                )
            )
        return said

    def _trained_share(self, rows_per_shard: float) -> float:
        """Share of a shard's rows a partial save of the trainer holds (:class:`MfuSide`:
        ``ceil(fraction × rows)`` per shard)."""
        return math.ceil(self.params.fraction * rows_per_shard) / rows_per_shard

    def _share(self) -> tuple[str, float]:
        """The setting's share of a shard's rows per partial save, and what sets it."""
        return f"fraction {self.params.fraction:g}", self.params.fraction

    def trained_notices(self, rows_per_shard: float) -> list[Notice]:
        """Partial saves of the trainer that hold a share of its rows more than
        :data:`TRAINED_SHARE_ERROR` away from the setting's: a whole number of rows of its
        small tables (a new user's advice picked fraction 0.0004, 0.37 of the trainer's 929
        rows per shard: it saved 1 row, 0.0011)."""
        what, share = self._share()
        trained = self._trained_share(rows_per_shard)
        if abs(trained / share - 1) <= TRAINED_SHARE_ERROR:
            return []
        return [
            Notice(
                f"{self.params.label}: {what} is {share * rows_per_shard:.2g} of the trainer's "
                f"{rows_per_shard:,.0f} rows per shard; its partial saves there hold "
                f"{trained:.2g} of them: pls_measured and logloss_delta measure that share, "
                "pls_model the setting's (more trainer rows: trainer.data.row_cap)"
            )
        ]

    def _iterations_per_partial(self) -> float:
        """Iterations between two partial saves (full saves come no less often)."""
        job = self.inputs.job
        return min(self.params.partial_interval, self.interval_s) / job.iteration_s

    def _saving(
        self, rows: float, share: float, scanned: float, tracker_bytes: float, ns_per_touch: float
    ) -> PartialSaving:
        """A plan that writes ``rows`` per shard carrying ``share`` of the updates, scans
        ``scanned`` entries per shard to choose them, keeps ``tracker_bytes`` per shard and
        spends ``ns_per_touch`` on every row a shard's iteration touches (spread over its
        ``tracking_threads``)."""
        job = self.inputs.job
        groups = self.inputs.row_popularity(self.params.popularity_exponent)
        touched = distinct_rows(groups, job.samples_per_iteration) / self.n_shards
        return PartialSaving(
            period_s=self.params.partial_interval,
            rows=rows,
            share=share,
            select_s=scanned * self.params.select_ns * 1e-9,
            write_s=self.layout.write_s([rows * job.mean_row_bytes] * self.n_shards),
            slowdown=touched * ns_per_touch * 1e-9 / self.params.tracking_threads / job.iteration_s,
            tracker_bytes=tracker_bytes,
        )


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

    def __init__(self, params, model, inputs=None, rng=None) -> None:
        super().__init__(params, model, inputs, rng)
        self.reset: np.ndarray | None = None
        """Per row: the trainer's cumulative use count when the row was last saved."""

    def attach(self, trainer, own: bool) -> None:
        if self.reset is None:
            self.reset = trainer.mfu.counts.copy()

    def checkpointed(self, trainer) -> None:
        """Every row's count restarts from the version storage now holds: the current one
        after a synchronous save; after a CheckFreq commit, the snapshot's (the updates
        between snapshot and commit are not in storage), or a later partial save's."""
        self.reset[:] = self.model.saved_lookups

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
    """CPR-SSU on the trainer: a sampler of the row ids each batch touches, into a buffer
    that holds the same share of the rows as the policy's buffer holds of a shard's rows."""

    def __init__(self, params, model, inputs=None, rng=None) -> None:
        super().__init__(params, model, inputs, rng)
        self.sampler = None

    def attach(self, trainer, own: bool) -> None:
        from ftsim.trainer.usage import UseSampler

        if self.sampler is None:
            share = self.inputs["buffer_share"]
            capacity = max(1, round(share * trainer.embeddings.n_rows))
            seed = int(self.rng.integers(2**62))
            self.sampler = UseSampler(self.params.sampling_rate, capacity, seed)
        trainer.add_use_listener(self.sampler.observe)

    def detach(self, trainer) -> None:
        trainer.remove_use_listener(self.sampler.observe)

    def rows_to_save(self, fraction: float, trainer) -> np.ndarray:
        """The sampled ids in the buffer (the buffer then empties)."""
        return self.sampler.drain()


@register(CprMfuParams)
class CprMfuPlan(_PrioritizedPlan):
    """CPR with most-frequently-used prioritized partial saves."""

    TrainerSide = MfuSide

    def _partial_saving(self) -> PartialSaving:
        """Counters on every row; a save writes the top ``fraction`` of the rows used since
        their last save, after scanning every counter of the shard."""
        p, job = self.params, self.inputs.job
        groups = self.inputs.row_popularity(p.popularity_exponent)
        shard_rows = job.embedding_rows / self.n_shards
        used = distinct_rows(groups, job.samples_per_iteration * self._iterations_per_partial())
        return self._saving(
            rows=min(p.fraction * shard_rows, used / self.n_shards),
            share=top_rows_share(groups, p.fraction),
            scanned=shard_rows,
            tracker_bytes=shard_rows * p.counter_bytes,
            ns_per_touch=p.counter_update_ns,
        )


@register(CprSsuParams)
class CprSsuPlan(_PrioritizedPlan):
    """CPR with sub-sampled-used prioritized partial saves."""

    TrainerSide = SsuSide

    @property
    def buffer_rows(self) -> float:
        """Capacity of a shard's sample buffer, ids."""
        shard_rows = self.inputs.job.embedding_rows / self.n_shards
        return self.params.buffer_rows or self.params.fraction * shard_rows

    @property
    def buffer_share(self) -> float:
        """Buffer capacity as a share of a shard's rows (kept by the scaled trainer)."""
        return self.buffer_rows * self.n_shards / self.inputs.job.embedding_rows

    def side_inputs(self):
        return {"buffer_share": self.buffer_share}

    def _trained_share(self, rows_per_shard: float) -> float:
        """Share of the trainer's rows its sample buffer holds (:class:`SsuSide`: the
        buffer's share of all its rows, rounded to whole ids, at least 1)."""
        rows = rows_per_shard * self.n_shards
        return max(1, round(self.buffer_share * rows)) / rows

    def _share(self) -> tuple[str, float]:
        return f"its buffer of {self.buffer_share:.3g} of a shard's rows", self.buffer_share

    def _partial_saving(self) -> PartialSaving:
        """A sample buffer per shard; a save writes the distinct ids it holds, after a pass
        over its entries."""
        p, job = self.params, self.inputs.job
        buffer = sampled_buffer(
            self.inputs.row_popularity(p.popularity_exponent),
            p.sampling_rate,
            job.samples_per_iteration,
            self.buffer_rows * self.n_shards,
            self._iterations_per_partial(),
        )
        return self._saving(
            rows=buffer.rows / self.n_shards,
            share=buffer.share,
            scanned=buffer.entries / self.n_shards,
            tracker_bytes=self.buffer_rows * p.id_bytes,
            ns_per_touch=p.sample_ns,
        )


register_no_effect(
    CprParams,
    "pls_slope",
    lambda p, s: None if p.target_accuracy_loss is not None else "no target_accuracy_loss",
)
