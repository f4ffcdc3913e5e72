"""``ecrm``: erasure-coded embeddings (ECRM / ECRec, after Thesys-lab/ECRec).

Instead of checkpointing the embeddings often, the embedding PS keep **parity** of the rows
and their optimizer state in memory: a systematic (k + r, k) code over stripes of k rows on
k distinct servers, parity rotating over the others (:mod:`ftsim.trainer.parity`). Dense
parameters are recovered from a surviving trainer replica.

Time model (all per-node quantities over the NIC bandwidth B):

- **Parity traffic**, every iteration: each touched row's change (values + optimizer state,
  ``row_bytes``) goes to its r parity holders. With U = samples × lookups per sample ×
  ``unique_lookup_fraction`` touched rows spread over E servers, a server sends
  U · row_bytes · r / E bytes per iteration, taking t_p = that / B. The share
  ``parity_overlap`` of it hides behind compute; the rest slows training by
  (1 − overlap) · t_p / iteration_time, charged to ``other``.
- **Memory**: parity is r/k of the embedding state (``parity_mem_frac``).
- **A failure of m ≤ r servers per stripe** is decoded; training does not stop. Reads of
  rows not yet rebuilt are decoded from the k survivors of their stripe (degraded reads),
  while a replacement (ready after the rescheduling delay) rebuilds the shard range by
  range, reading k rows for every row it restores (k-fold read amplification) with the
  share ``rebuild_share`` of its NIC: rebuild time = k · shard_bytes / (B · share).
  Throughput drops during recovery because (a) degraded reads fetch k rows instead of one
  for the lost shards' lookups, and (b) the rebuild takes ``rebuild_share`` of the
  survivors' NIC from the training traffic (pull + push of the touched rows), and (c) each
  range is frozen while it is installed (``freeze``: range bytes / B per range, spread over
  the rebuild). All three are charged to ``degraded``.
- **More losses than the code tolerates** (some stripe loses > r members, e.g. two servers
  at once with r = 1 under the rotating layout) fall back to the last of the rare
  checkpoints kept every ``checkpoint_interval``: ``rollback`` (everyone reloads it and
  redoes the work, as ``full``) or ``partial`` (only the failed shards reload it, as CPR).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import simpy
from pydantic import Field

from ftsim.policies.base import Policy, PolicyParams, TrainerSide
from ftsim.policies.events import Checkpoint, ModelEvent, RestoreAll, RestoreShards
from ftsim.policies.registry import register
from ftsim.scenario.quantities import Seconds
from ftsim.sim.nodes import any_trainer, failed_shards
from ftsim.stripes import survives


class EcrmParams(PolicyParams):
    """Parameters of ``ecrm``."""

    kind: Literal["ecrm"]
    k: int = Field(2, ge=1, description="data rows per stripe")
    r: Literal[1, 2] = Field(1, description="parity rows per stripe (failures tolerated)")
    parity_overlap: float = Field(
        0.0, ge=0, le=1, description="share of the parity traffic hidden behind compute"
    )
    unique_lookup_fraction: float = Field(
        1.0, gt=0, le=1, description="touched rows per lookup in an iteration (assumption)"
    )
    rebuild_share: float = Field(
        0.5, gt=0, lt=1, description="share of a NIC used by the rebuild (rest: training)"
    )
    rebuild_ranges: int = Field(16, ge=1, description="ranges a shard is rebuilt in")
    freeze: bool = Field(True, description="freeze each range while it is installed")
    checkpoint_interval: Seconds = Field(
        "24 h", description="compute between the rare fall-back checkpoints"
    )
    fallback: Literal["rollback", "partial"] = Field(
        "rollback", description="when the code cannot decode: full rollback or CPR-style"
    )

    def problems(self, scenario):
        if self.k + self.r > scenario.cluster.emb_ps:
            return [("k", f"k + r must not exceed cluster.emb_ps ({scenario.cluster.emb_ps})")]
        return []


@dataclass(frozen=True, slots=True)
class DecodeShards(ModelEvent):
    """The ``shards``' rows and optimizer state are lost and decoded from the parity and the
    surviving stripe members; exact up to float rounding, so the model goes on from
    (almost) the failure-free state."""

    shards: tuple[int, ...]
    modifies: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    def apply(self, model, trainer) -> None:
        model.side.decode(trainer, self.shards)


class EcrmSide(TrainerSide):
    """ECRM on the trainer: a real parity code of the rows and their optimizer state, kept
    current from every step's updates on the policy's own trainer."""

    def __init__(self, params, model) -> None:
        super().__init__(params, model)
        self.parity = None
        self.decode_error = 0.0
        """Largest relative error of decoded rows and state against the lost ones."""

    def attach(self, trainer, own: bool) -> None:
        from ftsim.trainer.parity import ParityCode

        if own:  # before the fork the rows are the baseline's: encode them at the fork
            self.parity = ParityCode.attach(trainer, self.params.k, self.params.r)

    def detach(self, trainer) -> None:
        if self.parity is not None and self.parity.emb is trainer.embeddings:
            trainer.remove_update_listener(self.parity.on_update)

    def restored(self, trainer) -> None:
        if self.parity is not None:
            self.parity.rebuild_parity()  # restores bypass the update listeners

    def decode(self, trainer, shards: tuple[int, ...]) -> None:
        """Lose the shards' rows (overwritten with NaN), decode them from the survivors and
        the parity, write them back, and record the decoding error."""
        emb = trainer.embeddings
        rows = np.concatenate([emb.shard_rows(shard) for shard in shards])
        truth = trainer.read_rows(rows)
        emb.weights[rows] = np.nan
        for array in emb.state.values():
            array[rows] = np.nan
        decoded = self.parity.decode(list(shards))
        trainer.write_rows(decoded)
        self.parity.rebuild_parity(list(shards))  # parity rows the failed servers held
        pairs = [(decoded.values, truth.values)]
        pairs += [(decoded.state[name], truth.state[name]) for name in truth.state]
        for got, want in pairs:
            scale = max(float(np.abs(want).max()), 1e-30)
            self.decode_error = max(self.decode_error, float(np.abs(got - want).max()) / scale)

    def columns(self) -> dict[str, float]:
        return {"decode_max_rel_err": self.decode_error}


@register
class Ecrm(Policy):
    """Erasure-coded embeddings with degraded reads and background rebuild."""

    Params = EcrmParams
    TrainerSide = EcrmSide

    def __init__(self, params, scenario, layout, rng):
        super().__init__(params, scenario, layout, rng)
        job, cluster = scenario.job, scenario.cluster
        self.n_shards = cluster.emb_ps
        nic = cluster.nic_bandwidth
        rows_per_iteration = (
            job.samples_per_iteration * job.lookups_per_sample * params.unique_lookup_fraction
        )
        row_bytes = job.mean_row_bytes
        value_bytes = job.mean_value_bytes
        per_server = rows_per_iteration / self.n_shards
        self.parity_slowdown = (
            (1 - params.parity_overlap) * per_server * row_bytes * params.r / nic / job.iteration_s
        )
        decode_extra = per_server * params.k * value_bytes / nic
        train_traffic = 2 * per_server * value_bytes / nic
        interference = train_traffic * params.rebuild_share / (1 - params.rebuild_share)
        self.degraded_per_shard = (decode_extra + interference) / job.iteration_s
        """Slowdown per degraded shard: decode reads and rebuild interference."""
        self.rebuild_s = params.k * layout.shard_bytes / (nic * params.rebuild_share)
        freeze_s = layout.shard_bytes / nic if params.freeze else 0.0
        self.freeze_slowdown = freeze_s / self.rebuild_s
        """Range freezes spread over the rebuild, per rebuilding shard."""
        self.save_s = layout.full_save_s()
        self.load_all_s = layout.full_load_s()
        self.interval_s = params.checkpoint_interval
        self.committed_s = 0.0
        self.next_s = self.interval_s
        self.degraded: set[int] = set()
        """Shards lost and not yet rebuilt (reads of their rows are decoded)."""
        self.rebuilding: set[int] = set()
        self._rebuilds: list[simpy.Process] = []
        self._rollback_pending = False
        self._reload_shards = 0
        """Shards to reload from the fall-back checkpoint (``partial`` fall-back)."""
        self.recovery_s: list[float] = []
        self.n_fallbacks = 0
        self.lost_update_s = 0.0

    def next_action_at(self) -> float:
        return self.next_s

    def act(self, sim):
        progress = sim.progress_s
        yield from sim.phase("save", self.save_s, "fall-back checkpoint")
        self.committed_s = progress
        self.n_checkpoints += 1
        sim.model_event(Checkpoint, key=progress)
        self.next_s = progress + self.interval_s

    def slowdown(self) -> dict[str, float]:
        out = {"other": self.parity_slowdown} if self.parity_slowdown else {}
        if self.degraded:
            out["degraded"] = (
                len(self.degraded) * self.degraded_per_shard
                + len(self.rebuilding) * self.freeze_slowdown
            )
        return out

    def on_failure(self, sim, failure) -> None:
        trainers = self.scenario.cluster.trainers
        shards = set(failed_shards(trainers, failure.nodes))
        if not shards:
            return
        lost = self.degraded | shards
        if survives(self.n_shards, self.params.k, self.params.r, lost):
            sim.model_event(DecodeShards, shards=tuple(sorted(shards)))
            self.degraded |= shards
            process = sim.env.process(self._rebuild(sim, failure, shards))
            self._rebuilds.append(process)
            sim.replan()
            return
        self.n_fallbacks += 1
        for process in self._rebuilds:
            if process.is_alive:
                process.interrupt("fall-back")
        self.degraded.clear()
        self.rebuilding.clear()
        if self.params.fallback == "rollback":
            sim.model_event(RestoreAll, key=self.committed_s)
            sim.rollback_to(self.committed_s)
            self.next_s = self.committed_s + self.interval_s
            self._rollback_pending = True
        else:
            sim.model_event(RestoreShards, key=self.committed_s, shards=tuple(sorted(lost)))
            self.lost_update_s += len(lost) * (sim.progress_s - self.committed_s)
            self._reload_shards = len(lost)

    def _rebuild(self, sim, failure, shards):
        """Background: wait for the replacement, then rebuild the shards range by range."""
        try:
            ready = failure.time_s + failure.reschedule_s
            if ready > sim.env.now:
                yield sim.env.timeout(ready - sim.env.now)
            start = sim.env.now
            self.rebuilding |= shards
            sim.replan()
            yield sim.env.timeout(self.rebuild_s)
            sim.record(start, sim.env.now, "rebuild", " ".join(f"emb_ps{s}" for s in shards))
            self.recovery_s.append(sim.env.now - failure.time_s)
        except simpy.Interrupt:
            return
        self.rebuilding -= shards
        self.degraded -= shards
        sim.replan()

    def recover(self, sim, failures):
        trainers = self.scenario.cluster.trainers
        lost_trainer = any(any_trainer(trainers, f.nodes) for f in failures)
        if self._rollback_pending or self._reload_shards or lost_trainer:
            yield from sim.await_replacements(failures)
        if self._rollback_pending:
            yield from sim.phase("load", self.load_all_s, "restore all from fall-back")
            self._rollback_pending = False
            return
        load_s = 0.0
        if self._reload_shards:
            load_s = self.layout.read_s([self.layout.shard_bytes] * self._reload_shards)
            self._reload_shards = 0
        if lost_trainer:
            load_s = max(load_s, self.layout.nic_s(self.layout.dense_bytes))
        if load_s:
            yield from sim.phase("load", load_s, "reload")

    def result_columns(self):
        recovery = self.recovery_s
        return {
            "interval_h": self.interval_s / 3600.0,
            "parity_mem_frac": self.params.r / self.params.k,
            "recovery_s": sum(recovery) / len(recovery) if recovery else math.nan,
            "degraded_throughput_frac": 1 / (1 + self.degraded_per_shard + self.freeze_slowdown),
            "parity_slowdown_frac": self.parity_slowdown,
            "n_fallbacks": self.n_fallbacks,
            "pls_model": self.lost_update_s / (self.scenario.job.work_s * self.n_shards),
        }
