"""``ecrm``: erasure-coded embeddings (ECRM / ECRec, after Thesys-lab/ECRec).

Instead of checkpointing the embeddings often, the embedding PS keep **parity** of the rows
and their optimizer state in memory: a systematic (k + r, k) code over stripes of k rows on
k distinct servers, parity on r others, laid out ``rotating`` (over all servers) or
``grouped`` (inside groups of ``group_size`` servers) by :mod:`ftsim.stripes`
(:mod:`ftsim.trainer.parity` for the code). Dense parameters are recovered from a surviving
trainer replica. ``docs/model.md`` gives the ECRec source lines behind each choice below.

Time model (per-node quantities over the NIC bandwidth B; U = samples × lookups per sample ×
``unique_lookup_fraction`` touched rows per iteration, U/E of them on each of the E servers;
the fraction is a number or derived from row popularity, :mod:`ftsim.policies.touched`):

- **Parity traffic**, every iteration: a server sends each touched row's change (values +
  optimizer state, ``row_bytes``) to its r parity holders, U/E · row_bytes · r bytes, of
  which the share ``parity_overlap`` hides behind compute; the rest slows training, charged
  to ``other``. **Memory**: parity is r/k of the embedding state (``parity_mem_frac``).
- **A failure the code decodes** (every stripe lost ≤ r members) does not stop training.
  *Degraded reads*: a lookup of a lost row reads k surviving members of its stripe instead
  (values only); survivor h serves ``reads(x)[h]`` rows per lookup of lost shard x
  (:meth:`~ftsim.stripes.StripeLayout.reads`), so the busiest survivor adds
  max_h Σ_x share_x · reads(x)[h] · U/E · value_bytes / B per iteration (share_x: the part
  of lost shard x still served this way).
  *Rebuild*: a replacement, ready after the rescheduling delay, reads k rows for every row it
  restores at the share ``rebuild_share`` of its NIC (k · shard_bytes / (B · share)),
  range by range (``rebuild_ranges``); survivor h then spends share · reads/k of its NIC on
  the rebuild, slowing its training traffic (pull + push of its touched rows).
  *Range switches*: before each range (and once to close the last) every survivor stops
  applying updates, waits ``switch_drain`` for the updates in flight, and copies the old
  range back and the new one aside in memory (2 · shard_bytes / ``rebuild_ranges`` at
  ``copy_bandwidth``); training does not pause while a range is rebuilt (its updates go to
  the copy). The pauses lengthen the rebuild and are spread over it as a slowdown (their
  total is exact, their placement in time is not). All three are charged to ``degraded``.
- **A failure the code cannot fully decode** (some stripe lost > r members, e.g. two servers
  at once with r = 1 under the rotating layout) falls back to the last of the rare checkpoints
  kept every ``interval``. ``partial``: per row — the undecodable rows (data rows of
  stripes that lost > r members, the fraction ``Loss.undecodable`` of each lost shard's rows,
  exact over one layout period) are reloaded from the checkpoint once the replacements are
  ready (training waits) and lose their updates since it (PLS); the decodable rows are decoded
  and rebuilt in the background as above, after the reload. ``rollback``: everyone reloads the
  checkpoint and redoes the work since (as ``full``): a rollback moves the whole model back,
  so the decodable rows cannot be kept either.

A shard still being rebuilt when another failure strikes counts as wholly lost again
(progress of a rebuild is not tracked); each shard's rebuild belongs to the latest failure
that took it, so an older rebuild ending never clears a newer loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from ftsim.policies.base import Plan, Policy, TrainerSide, register
from ftsim.policies.events import ModelEvent, RestoreAll
from ftsim.policies.saving import CheckpointWriter, SavingParams
from ftsim.policies.touched import TouchedRowsParams
from ftsim.scenario.quantities import BytesPerSecond, Seconds
from ftsim.sim.nodes import any_trainer, failed_shards
from ftsim.stripes import LayoutError, StripeLayout


class EcrmParams(SavingParams, TouchedRowsParams):
    """Parameters of ``ecrm``."""

    kind: Literal["ecrm"]
    renamed_fields: ClassVar[dict[str, str]] = {"checkpoint_interval": "interval"}
    k: int = Field(2, ge=1, description="data rows per stripe")
    r: Literal[1, 2] = Field(1, description="parity rows per stripe (failures tolerated)")
    layout: Literal["rotating", "grouped"] = Field(
        "rotating", description="stripes over all servers, or inside groups of group_size"
    )
    group_size: int | None = Field(
        None, ge=2, description="servers per group, grouped layout only (default k + r)"
    )
    parity_overlap: float = Field(
        0.0, ge=0, le=1, description="share of the parity traffic hidden behind compute"
    )
    rebuild_share: float = Field(
        0.5, gt=0, lt=1, description="share of a NIC used by the rebuild (rest: training)"
    )
    rebuild_ranges: int = Field(10, ge=1, description="ranges a shard is rebuilt in (ECRec: 10)")
    freeze: bool = Field(True, description="pause updates at every range switch (as ECRec)")
    switch_drain: Seconds = Field(
        "100 ms", description="wait for in-flight updates at a range switch (ECRec's poll)"
    )
    copy_bandwidth: BytesPerSecond = Field(
        "10 GB/s", description="in-memory copy rate of a range at a switch (assumption)"
    )
    interval: Seconds = Field(
        "24 h", gt=0, description="compute between the rare fall-back checkpoints"
    )
    fallback: Literal["rollback", "partial"] = Field(
        "rollback",
        description="when some rows cannot be decoded: full rollback, or reload those rows",
    )

    def part_problems(self, dense, by_rows):
        """ECRM manages a share of every shard's rows (its stripes span all the servers) when
        undecodable rows fall back per row rather than by a rollback."""
        found = []
        if self.fallback == "rollback":
            message = "rolls every node back when rows cannot be decoded: set fallback: partial"
            found.append(("fallback", message))
        if not by_rows:
            message = (
                "its stripes span every server, so it protects a share of every shard's rows "
                "(scope hottest or rest of a split by rows), not a set of shards"
            )
            found.append(("kind", message))
        return found

    def input_problems(self, inputs):
        found = super().input_problems(inputs)
        emb_ps = inputs.cluster.emb_ps
        try:
            self.stripes(emb_ps)
        except LayoutError as exc:
            found.append((exc.field, f"{exc} (cluster.emb_ps = {emb_ps})"))
        return found

    def stripes(self, n_shards: int) -> StripeLayout:
        """The stripe layout over ``n_shards`` embedding PS."""
        return StripeLayout(n_shards, self.k, self.r, self.layout, self.group_size)


@dataclass(frozen=True, slots=True)
class DecodeShards(ModelEvent):
    """The ``shards``' rows and optimizer state are lost. Those of stripes that lost at most
    r members are decoded from the parity and the surviving members, exact up to float
    rounding. With ``key`` (the ``partial`` fall-back, when some stripes lost more), the
    others return to fall-back checkpoint ``key`` and lose their updates since."""

    shards: tuple[int, ...]
    key: float | None = None
    modifies: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    @property
    def reads(self) -> float | None:
        return self.key

    def apply(self, model, trainer) -> None:
        if self.key is None:
            model.side.decode(trainer, self.shards)
        else:
            snapshot = model.checkpoints[self.key]
            model.lose(trainer, model.side.decode_or_restore(trainer, self.shards, snapshot))


class EcrmSide(TrainerSide):
    """ECRM on the trainer: a real parity code of the rows and their optimizer state, kept
    current from every step's updates on the policy's own trainer."""

    def __init__(self, params, model, inputs=None, rng=None) -> None:
        super().__init__(params, model, inputs, rng)
        self.parity = None
        self.decode_error = 0.0
        """Largest relative error of decoded rows and state against the lost ones."""

    def attach(self, trainer, own: bool) -> None:
        from ftsim.trainer.parity import ParityCode

        p = self.params
        if own:  # before the fork the rows are the baseline's: encode them at the fork
            self.parity = ParityCode.attach(
                trainer, p.k, p.r, layout=p.layout, group_size=p.group_size
            )

    def detach(self, trainer) -> None:
        if self.parity is not None and self.parity.emb is trainer.embeddings:
            trainer.remove_update_listener(self.parity.on_update)

    def restored(self, trainer) -> None:
        if self.parity is not None:
            self.parity.rebuild_parity()  # restores bypass the update listeners

    def decode(self, trainer, shards: tuple[int, ...]) -> None:
        """Lose the shards' rows (overwritten with NaN), decode them from the survivors and
        the parity, write them back, and record the decoding error."""
        truth = self._erase(trainer, shards)
        decoded = self.parity.decode(list(shards))
        trainer.write_rows(decoded)
        self.parity.rebuild_parity(list(shards))  # parity rows the failed servers held
        self._measure(decoded, truth)

    def decode_or_restore(self, trainer, shards: tuple[int, ...], snapshot) -> np.ndarray:
        """Lose the shards' rows, decode those of stripes that lost at most r members, restore
        the others from ``snapshot`` (a :class:`~ftsim.trainer.TrainerSnapshot`) and
        re-encode the parity; returns the restored rows (sorted global ids)."""
        truth = self._erase(trainer, shards)
        decoded, undecodable = self.parity.decode_recoverable(list(shards))
        trainer.write_rows(decoded)
        trainer.write_rows(snapshot.embeddings.subset(undecodable))
        self.parity.rebuild_parity()  # restored rows differ from what the parity encodes
        self._measure(decoded, truth.subset(decoded.rows))
        return undecodable

    @staticmethod
    def _erase(trainer, shards: tuple[int, ...]):
        """Overwrite the shards' rows and optimizer state with NaN (the servers are gone);
        returns what they held (sorted :class:`~ftsim.trainer.RowData`)."""
        emb = trainer.embeddings
        rows = np.concatenate([emb.shard_rows(shard) for shard in shards])
        truth = trainer.read_rows(rows)
        emb.weights[rows] = np.nan
        for array in emb.state.values():
            array[rows] = np.nan
        return truth

    def _measure(self, decoded, truth) -> None:
        """Track the largest relative error of decoded rows (values and each state array)."""
        pairs = [(decoded.values, truth.values)]
        pairs += [(decoded.state[name], truth.state[name]) for name in truth.state]
        for got, want in pairs:
            if want.size:
                scale = max(float(np.abs(want).max()), 1e-30)
                err = float(np.abs(got - want).max()) / scale
                self.decode_error = max(self.decode_error, err)

    def columns(self) -> dict[str, float]:
        return {"decode_max_rel_err": self.decode_error}


class Ecrm(Policy):
    """Erasure-coded embeddings with degraded reads, background rebuild and a per-row
    checkpoint fall-back: one replication."""

    def __init__(self, plan: EcrmPlan):
        super().__init__(plan)
        self.writer = CheckpointWriter(self.params, plan.snapshot_bytes)
        self.committed_s = 0.0
        self.next_s = plan.interval_s
        self.degraded: dict[int, float] = {}
        """Lost shards not yet rebuilt → share of their rows served by degraded reads."""
        self.rebuilding: set[int] = set()
        self._owner: dict[int, int] = {}
        """Degraded shard → generation of the rebuild in charge of it (the latest failure)."""
        self._generation = 0
        self._pause_frac: dict[int, float] = {}
        """Rebuilding shard → its range-switch pauses over its rebuild time."""
        self._slowdown = {"other": plan.parity_slowdown} if plan.parity_slowdown else {}
        self._rollback_pending = False
        self._reloaded = None
        """Fired when the latest fall-back's undecodable rows are back (rebuilds wait)."""
        self._reload: list[tuple[int, float]] = []
        """(failed shard, bytes) to reload from the fall-back checkpoint (``partial``)."""
        self.recovery_s: list[float] = []
        self.n_fallbacks = 0
        self.undecodable: list[float] = []
        """Per fall-back: share of the lost shards' rows that could not be decoded."""
        self.lost_update_s = 0.0

    def next_action_at(self) -> float:
        return self.next_s

    def start(self, sim) -> None:
        """Parity updates stream between the PS for the whole run: every transfer (saves,
        rebuilds, reloads) shares the PS NICs with them."""
        if self.plan.parity_Bps:
            sim.net.stream_on_ps_nics(self.plan.parity_Bps)

    def act(self, sim):
        progress = sim.progress_s
        yield from self.writer.save(sim, sim.net.full_save(), progress, self._committed)
        self.next_s = progress + self.plan.interval_s

    def _committed(self, progress_s: float) -> None:
        self.committed_s = progress_s
        self.n_checkpoints += 1

    def slowdown(self) -> dict[str, float]:
        persist = self.writer.slowdown()
        if not persist:
            return self._slowdown
        out = dict(self._slowdown)
        out["other"] = out.get("other", 0.0) + persist["other"]
        return out

    def _update(self, sim) -> None:
        """Recompute the slowdown after ``degraded`` or ``rebuilding`` changed."""
        plan = self.plan
        out = {"other": plan.parity_slowdown} if plan.parity_slowdown else {}
        if self.degraded:
            out["degraded"] = plan.traffic_slowdown(self.degraded, self.rebuilding) + sum(
                self._pause_frac[x] for x in self.rebuilding
            )
        self._slowdown = out
        sim.replan()

    def on_failure(self, sim, failure) -> None:
        plan = self.plan
        trainers = plan.trainers
        shards = set(failed_shards(trainers, failure.nodes))
        self.writer.on_failure(failure.nodes, trainers)
        if not shards:
            return
        lost = self.degraded.keys() | shards
        loss = plan.stripes.loss(lost)
        if loss.decodable:
            sim.model_event(DecodeShards, shards=tuple(sorted(shards)))
            self._take_over(sim, failure, dict.fromkeys(shards, 1.0), None)
            return
        self.n_fallbacks += 1
        self.undecodable.append(sum(loss.undecodable.values()) / len(lost))
        if self.params.fallback == "rollback":
            self._owner.clear()  # rebuilds in progress find they own nothing and stop
            self.degraded.clear()
            self.rebuilding.clear()
            sim.model_event(RestoreAll, key=self.committed_s)
            sim.rollback_to(self.committed_s)
            self.next_s = self.committed_s + plan.interval_s
            self._rollback_pending = True
            self._update(sim)
            return
        sim.model_event(DecodeShards, shards=tuple(sorted(lost)), key=self.committed_s)
        undecodable = loss.undecodable
        self.lost_update_s += sum(undecodable.values()) * (sim.progress_s - self.committed_s)
        self._reload += [(x, share * self.layout.shard_bytes) for x, share in undecodable.items()]
        rebuild = {x: 1.0 - share for x, share in undecodable.items()}
        self._reloaded = sim.event()  # recover() fires it once the rows are back
        self._take_over(sim, failure, rebuild, self._reloaded)

    def _take_over(self, sim, failure, shares: dict[int, float], after) -> None:
        """Make a new rebuild, started once the replacements of ``failure`` are ready (and
        the event ``after``, if any, has fired: the reload of undecodable rows), the owner
        of the shards ``shares`` (shard → share of its rows to rebuild; 0: nothing to
        rebuild). Older rebuilds of these shards no longer own them."""
        self._generation += 1
        generation = self._generation
        for shard, share in shares.items():
            self.rebuilding.discard(shard)
            if share > 0:
                self.degraded[shard] = share
                self._owner[shard] = generation
            else:
                self.degraded.pop(shard, None)
                self._owner.pop(shard, None)
        mine = {shard: share for shard, share in shares.items() if share > 0}
        if mine:
            sim.background(self._rebuild(sim, failure, generation, mine, after))
        self._update(sim)

    def _owned(self, generation: int, shards) -> set[int]:
        """The ``shards`` whose rebuild is still the one of ``generation``."""
        return {s for s in shards if self._owner.get(s) == generation}

    def _rebuild(self, sim, failure, generation: int, shares: dict[int, float], after):
        """Background: wait for the replacements (and the reload of undecodable rows), then
        rebuild the decodable rows range by range; ends the degraded state only of the
        shards it still owns (a later failure may have taken some, or all, over)."""
        ready = failure.time_s + failure.reschedule_s
        if ready > sim.now:
            yield sim.timeout(ready - sim.now)
        if after is not None and not after.processed:
            yield after
        mine = self._owned(generation, shares)
        if not mine:
            return
        planned = max(shares[s] for s in mine) * self.plan.transfer_s + self.plan.pause_s
        self._pause_frac.update(dict.fromkeys(mine, self.plan.pause_s / planned))
        self.rebuilding |= mine
        self._update(sim)
        start = sim.now
        yield sim.net.start(self._rebuild_flows(sim, mine, shares), "rebuild", "rebuild")
        if self.plan.pause_s:
            yield sim.timeout(self.plan.pause_s)
        mine = self._owned(generation, shares)
        if not mine:
            return
        detail = " ".join(f"emb_ps{s}" for s in sorted(mine))
        nodes = tuple(sim.net.ps_node(s) for s in sorted(mine))
        sim.record(start, sim.now, "rebuild", detail, nodes=nodes)
        self.recovery_s.append(sim.now - failure.time_s)
        for shard in mine:
            del self.degraded[shard], self._owner[shard]
            self.rebuilding.discard(shard)
        self._update(sim)

    def _rebuild_flows(self, sim, shards, shares: dict[int, float]) -> list:
        """Each replacement reads k rows for every row it rebuilds, through a cap of
        ``rebuild_share`` of its NIC (the rest stays with training): one flow per rebuilt
        shard into the replacement's NIC, its bottleneck. The reads come from the survivors
        holding its stripes, spread thin (``StripeLayout.reads``: each serves a k/(N − 1)
        share on average), so their send side is not a flow of its own: a replication then
        costs O(1) per rebuild, not O(servers)."""
        share = self.params.rebuild_share
        net, cap = sim.net, self.plan.inputs.cluster.nic_bandwidth * share
        flows = []
        for x in sorted(shards):
            limit = net.link(f"rebuild.cap.emb_ps{x}", cap)
            size = self.params.k * shares[x] * self.layout.shard_bytes
            flows.append((size, (limit, *net.from_node_side(net.ps_node(x)))))
        return flows

    def recover(self, sim, failures):
        trainers = self.plan.trainers
        lost_trainer = any(any_trainer(trainers, f.nodes) for f in failures)
        if self._rollback_pending or self._reload or lost_trainer:
            yield from sim.await_replacements(failures)
        if self._rollback_pending:
            yield from sim.transfer("load", sim.net.full_load(), "restore all from fall-back")
            self._rollback_pending = False
            return
        flows = [
            (size, sim.net.from_storage(sim.net.ps_node(x))) for x, size in self._reload if size
        ]
        failed = sorted({n for f in failures for n in f.nodes if n < trainers})
        flows += [flow for trainer in failed for flow in sim.net.replica_copy(trainer)]
        if flows:
            yield from sim.transfer("load", flows, "reload undecodable rows")
        self._reload = []
        if self._reloaded is not None and not self._reloaded.triggered:
            self._reloaded.succeed()

    def result_columns(self):
        plan, recovery = self.plan, self.recovery_s
        alone = plan.traffic_slowdown({0: 1.0}, {0}) + plan.pause_s / (
            plan.transfer_s + plan.pause_s
        )
        return {
            "interval_h": plan.interval_s / 3600.0,
            "parity_mem_frac": self.params.r / self.params.k,
            "recovery_s": sum(recovery) / len(recovery) if recovery else math.nan,
            "degraded_throughput_frac": 1 / (1 + alone),
            "parity_slowdown_frac": plan.parity_slowdown,
            "n_fallbacks": self.n_fallbacks,
            "undecodable_frac": (
                sum(self.undecodable) / len(self.undecodable) if self.undecodable else math.nan
            ),
            "pls_model": self.lost_update_s / (plan.inputs.job.work_s * plan.n_shards),
        }


@register(EcrmParams)
class EcrmPlan(Plan):
    """What every replication of ``ecrm`` shares: the stripe layout, the parity traffic and
    its slowdown, the degraded-read and rebuild costs, and the save time."""

    Runtime = Ecrm
    TrainerSide = EcrmSide

    def __init__(self, params: EcrmParams, inputs):
        super().__init__(params, inputs)
        job, cluster, layout = inputs.job, inputs.cluster, self.layout
        self.n_shards = cluster.emb_ps
        self.trainers = cluster.trainers
        self.stripes = params.stripes(self.n_shards)
        """The stripe layout (it memoises its losses and reads for every replication)."""
        nic = cluster.nic_bandwidth
        per_shard = params.touched_rows(inputs) / self.n_shards
        self.parity_slowdown = (
            (1 - params.parity_overlap)
            * per_shard
            * job.mean_row_bytes
            * params.r
            / nic
            / job.iteration_s
        )
        self.read_slowdown = per_shard * job.mean_value_bytes / nic / job.iteration_s
        """Slowdown of a survivor that serves one extra row per lookup of a lost shard."""
        self.traffic_frac = 2 * per_shard * job.mean_value_bytes / nic / job.iteration_s
        """A survivor's training traffic (pull + push of its touched rows) per iteration time."""
        self.transfer_s = params.k * layout.shard_bytes / (nic * params.rebuild_share)
        """Reads of a whole shard's rebuild: k rows per row at the rebuild's share of a NIC."""
        switch_s = params.switch_drain + 2 * layout.shard_bytes / params.rebuild_ranges / (
            params.copy_bandwidth
        )
        self.pause_s = (params.rebuild_ranges + 1) * switch_s if params.freeze else 0.0
        """Updates paused per rebuild: one range switch per range plus one closing the last."""
        self.save_s = layout.full_save_s()
        self.snapshot_bytes = max(layout.shard_bytes, layout.dense_bytes)
        self.parity_Bps = per_shard * job.mean_row_bytes * params.r / job.iteration_s
        """Parity updates each PS sends (and, on average, receives) while training, B/s."""
        self.interval_s = params.interval

    def traffic_slowdown(self, degraded: dict[int, float], rebuilding: set[int]) -> float:
        """Extra seconds per compute second from degraded reads and rebuild reads while
        ``degraded`` (shard → share of its rows) are lost and ``rebuilding`` ⊆ degraded are
        rebuilt: the busiest survivor sets the pace (synchronous training). Each lost shard's
        decoding reads are those of a lone failure (:meth:`StripeLayout.reads`; exact when no
        decodable stripe lost two members, always the case for r = 1 without fall-back). A
        survivor gives the rebuilds at most ``rebuild_share`` of its NIC."""
        served = self._busiest(degraded.items())
        rebuild = self._busiest((x, 1.0) for x in rebuilding)
        busy = min(rebuild / self.params.k, 1.0) * self.params.rebuild_share
        return served * self.read_slowdown + self.traffic_frac * busy / (1 - busy)

    def _busiest(self, shares) -> float:
        """Rows the busiest survivor reads per lookup of a lost row: the largest entry of
        Σ share · ``reads(x)`` over ``(x, share)`` pairs (added in their order; 0 if none)."""
        reads = self.stripes.reads
        total = None
        for x, share in shares:
            term = reads(x) if share == 1.0 else share * reads(x)
            total = term if total is None else total + term
        return 0.0 if total is None else float(total.max())
