"""``checknrun``: differential and quantized checkpoints (Check-N-Run, Eisenman et al., NSDI 2022).

Check-N-Run shrinks what a checkpoint writes in two ways. It recovers (``recovery``) like
``full``: on any failure every node returns to the last committed checkpoint and the work
since is redone; or, with ``partial``, as CPR (Maeng et al., MLSys 2021) does, only the
failed embedding PS go back to it (below).

**Differential checkpoints.** A DLRM updates only the embedding rows its batches look up,
so after a **baseline** (a full checkpoint) a checkpoint need only write the rows changed
since. The job tracks, per row, whether it changed; every ``baseline_every`` checkpoints a
new baseline is written (a fixed period). Two variants (``differential``):

- ``one_shot``: each differential checkpoint holds every row changed since the last
  baseline; a restore reads the baseline and the last differential checkpoint (earlier
  ones are deleted once a newer one is committed);
- ``consecutive``: each holds the rows changed since the previous checkpoint; a restore
  reads the baseline and every differential checkpoint since (all are kept).

Every checkpoint also writes one copy of the dense state (trainer 0) and, for a
differential one, a bitmap of the shard's rows saying which rows it holds (1 bit per row).

**Quantized checkpoints** (``quantize_bits`` n ∈ {2, 3, 4, 8}): embedding values are
written as n-bit codes of a uniform grid, dequantized at restore. ``quantization``:
``uniform`` takes one range (min, max) over all the values a checkpoint writes,
``adaptive`` one range per row (the row's min and max, 2 × fp32 per row written with it).
Check-N-Run's adaptive scheme also searches each row's clipping range for the smallest L2
error; ftsim keeps the row's full min–max range (no search): simpler, and its error is
bounded by range/(2^n − 1)/2 per value. Optimizer state (row-wise or per-value) and the
dense state are written in fp32, exactly: Check-N-Run quantizes the embedding tables, and
quantizing an optimizer's accumulators would change every later step size. Quantizing and
dequantizing cost ``codec_bandwidth`` per PS (fp32 bytes processed), charged to ``save`` /
``load``. Restores from quantized checkpoints are not exact: the model carries the
quantization error, measured by the co-simulation (``logloss_delta``).

Time model. Row popularity is the Zipf law of ``cpr`` (the trainer data's exponent, or
``popularity_exponent``; :func:`ftsim.sim.popularity.row_popularity`). A checkpoint at
progress p whose reference (``one_shot``: the baseline, ``consecutive``: the previous
checkpoint) was at progress r writes, per embedding PS, the expected number of distinct
rows among B·(p − r)/t lookups of every table (B samples per iteration, t the iteration
time; :func:`ftsim.sim.popularity.distinct_rows`) divided by E, each of

    row bytes = values × n/(8 · bytes_per_value) [quantized] + 8 B [adaptive] + optimizer

plus the row bitmap (rows per PS / 8 bytes); a baseline writes every row. Saves are flows
(every PS writes its part while trainer 0 writes the dense copy) and stall training
(``save``). A restore reads, per PS, its part of the baseline and of the differential
checkpoints the variant needs, while every trainer reads the dense copy (``load``).
Storage capacity (``storage_gb``) is the largest total, over the run, of the checkpoints
kept for recovery (the parts of the chain and one dense copy), against one full checkpoint
for ``full`` (``capacity_reduction``). ``write_reduction`` is what full checkpoints at the
same points would have written over what was written, the paper's write-bandwidth saving.

**Partial recovery** (``recovery: partial``). When embedding PS fail, only their shards
reload, after rescheduling, their part of the chain (the baseline and the differential
checkpoints the variant reads: per PS the sum of the chain's bytes on that PS; then that
part's dequantization), and every other node keeps its newer state: nothing rolls back. A
failed trainer's replacement copies the dense state from a surviving data-parallel replica
over the NIC (``cpr``'s ``trainer_failure: replica``). The failed shards lose their updates
since the chain's last checkpoint; as in ``cpr``, ``pls_model`` is the sum over failed
shards of those compute seconds (each update counted once, even if a shard fails twice
between checkpoints) over work × E. A restored shard's rows changed since the reference of
the next differential checkpoint are then those the chain holds (``one_shot``: the rows of
its last differential checkpoint; ``consecutive``: none), plus those updated after the
restore: in the time model a shard whose reference was at r and which was restored at
progress t from a chain ending at k counts, at progress p, the rows changed in
p − t + (k − r) seconds (``one_shot``) or p − t (``consecutive``), per PS.

``interval`` is a duration, or ``young`` / ``daly`` for the optimum with the stall of an
average checkpoint of a baseline cycle, which itself depends on the interval (solved by
fixed-point iteration). Those rules minimise the time lost to saves and rollbacks; with
``partial`` there is no rollback, and the interval trades save time against lost updates
instead: ``target_pls`` (with ``interval: null``, the default when ``target_pls`` is given)
chooses it, as ``cpr`` does, from PLS ≈ m · T / (2 · E · T_fail) (m embedding PS lost per
failure, T_fail the job MTBF: every checkpoint, baseline or differential, saves every row's
current value). young/daly are still accepted with ``partial``: the rollback optimum.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ftsim.policies.base import Plan, Policy, PolicyParams, TrainerSide, register
from ftsim.policies.events import ModelEvent
from ftsim.policies.full import Interval, planned_interval_s
from ftsim.scenario.notices import register_no_effect
from ftsim.scenario.quantities import BytesPerSecond
from ftsim.sim.nodes import failed_shards
from ftsim.sim.popularity import PopularityParams, distinct_rows

RANGE_BYTES = 8
"""Bytes of a quantization range: offset and scale, 2 × fp32."""


class CheckNRunParams(PolicyParams, PopularityParams):
    """Parameters of ``checknrun``."""

    kind: Literal["checknrun"]
    exclusive_fields: ClassVar[tuple[tuple[str, ...], ...]] = (("interval", "target_pls"),)
    interval: Interval | None = Field(
        "30 min",
        description="compute between checkpoints, or young/daly (paper: 30 min); null when "
        "target_pls chooses it",
    )
    differential: Literal["one_shot", "consecutive"] = Field(
        "one_shot",
        description="one_shot: rows changed since the baseline; consecutive: since the "
        "previous checkpoint",
    )
    baseline_every: int = Field(
        4, ge=1, description="checkpoints per baseline cycle (a baseline, then differential ones)"
    )
    quantize_bits: Literal[2, 3, 4, 8] | None = Field(
        None, description="bits per embedding value written (null: fp32, no quantization)"
    )
    quantization: Literal["uniform", "adaptive"] = Field(
        "adaptive",
        description="uniform: one range per checkpoint; adaptive: a min-max range per row",
    )
    codec_bandwidth: BytesPerSecond = Field(
        "4 GB/s",
        description="per-PS rate of (de)quantizing, fp32 bytes; assumption: a vectorised pass",
    )
    recovery: Literal["full", "partial"] = Field(
        "full",
        description="full: every node rolls back to the last checkpoint; partial (as CPR): "
        "only failed embedding PS reload their chain, failed trainers copy a replica",
    )
    target_pls: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="recovery: partial only: choose the interval for this portion of lost "
        "samples (interval then defaults to null)",
    )

    @model_validator(mode="before")
    @classmethod
    def _target_replaces_interval(cls, data):
        """``target_pls`` alone stands for ``interval: null`` (``interval`` has a default)."""
        if isinstance(data, dict) and data.get("target_pls") is not None and "interval" not in data:
            return {**data, "interval": None}
        return data

    @model_validator(mode="after")
    def _one_interval_rule(self):
        if self.target_pls is None and self.interval is None:
            raise ValueError("give interval or target_pls")
        if self.target_pls is not None:
            if self.interval is not None:
                raise ValueError("give interval or target_pls, not both (interval: null)")
            if self.recovery != "partial":
                raise ValueError(
                    "target_pls needs recovery: partial (full recovery loses no updates)"
                )
        return self

    def part_problems(self, dense, by_rows):
        """Check-N-Run can manage a part of whole shards under partial recovery only."""
        if self.recovery == "full":
            message = (
                "checknrun needs recovery: partial: full recovery rolls every node back to the "
                "last checkpoint, the other parts' state with it"
            )
            return [("recovery", message)]
        if by_rows:
            message = (
                "checknrun can only manage whole shards: its differential checkpoints' sizes "
                "come from the whole tables' row popularity, not from a share of every "
                "shard's rows"
            )
            return [("kind", message)]
        return []

    def input_problems(self, inputs):
        return inputs.popularity_problems()


# -- quantization (used by the trainer side; plain NumPy) -----------------------------------


@dataclass(frozen=True, slots=True)
class QuantizedRows:
    """Embedding values (n, d) as n-bit codes on a uniform grid: value ≈ low + code · step,
    with ``low`` and ``step`` per row (adaptive, shape (n, 1)) or one pair (uniform, (1, 1)),
    stored as fp32."""

    codes: np.ndarray
    low: np.ndarray
    step: np.ndarray
    bits: int
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        """Bytes written: the codes packed at ``bits`` per value, and the ranges."""
        return math.ceil(self.codes.size * self.bits / 8) + self.low.size * RANGE_BYTES

    def dequantize(self) -> np.ndarray:
        values = self.low.astype(np.float64) + self.codes * self.step.astype(np.float64)
        return values.astype(self.dtype)


def quantize(values: np.ndarray, bits: int, scheme: str) -> QuantizedRows:
    """n-bit uniform quantization of ``values`` (n, d) with the range of all values
    (``uniform``) or of each row (``adaptive``). Each value is rounded to the nearest of
    2^n levels spanning its range, so its error is at most range / (2^n − 1) / 2 (plus the
    fp32 rounding of the range and of the result)."""
    levels = 2**bits - 1
    x = values.astype(np.float64)
    if scheme == "uniform":
        low = np.full((1, 1), x.min() if x.size else 0.0)
        high = np.full((1, 1), x.max() if x.size else 0.0)
    else:
        low = x.min(axis=1, keepdims=True) if x.size else np.zeros((len(x), 1))
        high = x.max(axis=1, keepdims=True) if x.size else np.zeros((len(x), 1))
    low32 = low.astype(np.float32)
    step32 = ((high - low) / levels).astype(np.float32)
    step = step32.astype(np.float64)
    scaled = (x - low32) / np.where(step > 0, step, 1.0)
    codes = np.clip(np.rint(scaled), 0, levels).astype(np.uint8)
    return QuantizedRows(codes, low32, step32, bits, values.dtype)


# -- model events ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiffCheckpoint(ModelEvent):
    """Checkpoint ``key`` committed: a ``baseline`` (every row), or a differential one (the
    rows the policy's variant tracks), with the dense state. Either way the chain now
    restores every row to its current version: no lookup so far can be lost."""

    key: float
    baseline: bool

    def apply(self, model, trainer) -> None:
        model.side.save(trainer, self.key, self.baseline)
        model.saved_lookups[:] = trainer.mfu.counts


@dataclass(frozen=True, slots=True)
class RestoreChain(ModelEvent):
    """Every node returns to checkpoint ``key``: the baseline, overwritten by the
    differential checkpoints the variant reads (``0.0`` with none: the initial model). With
    exact (fp32) rows this is the state at ``key`` bit for bit, and the redone work on the
    same batches rejoins the failure-free trajectory."""

    key: float
    modifies: ClassVar[bool] = True

    def apply(self, model, trainer) -> None:
        model.side.restore(trainer, self.key)


@dataclass(frozen=True, slots=True)
class RestoreQuantizedChain(RestoreChain):
    """As :class:`RestoreChain` from quantized checkpoints: the embedding values come back
    dequantized, with their quantization error (not exact)."""

    exact: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class RestoreChainShards(ModelEvent):
    """Partial recovery: the embedding ``shards`` return to checkpoint ``key`` (the last
    committed: the baseline's rows, overwritten by the differential checkpoints the variant
    reads, dequantized if quantized; ``0.0`` with none: the initial rows) with their
    optimizer state; every other row and the dense state keep their values and nothing
    rolls back. The shards' lookups since their saved version (``key``, or an earlier
    restore since) are lost (``pls_measured``)."""

    key: float
    shards: tuple[int, ...]
    modifies: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    def apply(self, model, trainer) -> None:
        model.side.restore_shards(trainer, self.key, self.shards)
        for shard in self.shards:
            model.lose(trainer, trainer.embeddings.shard_rows(shard))
        model.side.restored(trainer)


# -- the trainer side ------------------------------------------------------------------------


@dataclass(slots=True)
class _Stored:
    """One checkpoint as storage holds it (the trainer side's copy)."""

    key: float
    step: int
    rows: np.ndarray
    values: np.ndarray | QuantizedRows
    state: dict[str, np.ndarray]
    dense: list[np.ndarray]
    dense_state: list[np.ndarray]

    def values_f(self) -> np.ndarray:
        values = self.values
        return values.dequantize() if isinstance(values, QuantizedRows) else values

    @property
    def nbytes(self) -> int:
        """Embedding bytes written (values, ranges, optimizer state; no ids or dense)."""
        return int(self.values.nbytes + sum(a.nbytes for a in self.state.values()))


class CheckNRunSide(TrainerSide):
    """Check-N-Run on the trainer: per-row "changed since" masks kept from a use
    listener (the rows each step looked up), and the checkpoints storage holds: the baseline and
    the differential checkpoints the variant keeps, each a copy of its rows (quantized and
    dequantized at restore when ``quantize_bits`` is set) with the dense state in fp32."""

    def __init__(self, params, model, inputs=None, rng=None) -> None:
        super().__init__(params, model, inputs, rng)
        self.since_checkpoint: np.ndarray | None = None
        """Per row: changed since the last checkpoint."""
        self.since_baseline: np.ndarray | None = None
        """Per row: changed since the last baseline."""
        self.chain: list[_Stored] = []
        """The baseline first, then the differential checkpoints a restore reads."""
        self.initial = None
        self._watched = set()

    def attach(self, trainer, own: bool) -> None:
        if self.since_checkpoint is None:
            n = trainer.embeddings.n_rows
            self.since_checkpoint = np.zeros(n, dtype=bool)
            self.since_baseline = np.zeros(n, dtype=bool)
            self.initial = trainer.snapshot()
        trainer.add_use_listener(self._observe)
        self._watched.add(id(trainer))

    def detach(self, trainer) -> None:
        if id(trainer) in self._watched:
            trainer.remove_use_listener(self._observe)
            self._watched.discard(id(trainer))

    def _observe(self, step: int, rows: np.ndarray, counts: np.ndarray) -> None:
        self.since_checkpoint[rows] = True
        self.since_baseline[rows] = True

    def save(self, trainer, key: float, baseline: bool) -> None:
        """Write checkpoint ``key``: every row (``baseline``) or the changed ones."""
        p = self.params
        emb = trainer.embeddings
        if baseline:
            rows = np.arange(emb.n_rows, dtype=np.int64)
        elif p.differential == "one_shot":
            rows = np.flatnonzero(self.since_baseline)
        else:
            rows = np.flatnonzero(self.since_checkpoint)
        data = emb.read_rows_sorted(rows)
        values = data.values
        if p.quantize_bits is not None:
            values = quantize(values, p.quantize_bits, p.quantization)
        stored = _Stored(
            key=key,
            step=trainer.step,
            rows=rows,
            values=values,
            state=data.state,
            dense=[a.copy() for a in trainer.model.params],
            dense_state=[a.copy() for a in trainer.dense_optimizer.state],
        )
        if baseline:
            self.chain = [stored]
            self.since_baseline[:] = False
        elif p.differential == "one_shot":
            self.chain = [self.chain[0], stored]
        else:
            self.chain.append(stored)
        self.since_checkpoint[:] = False

    def _chain_at(self, key: float) -> list[_Stored]:
        """The stored chain, which must end at checkpoint ``key`` (empty, for ``key`` 0.0,
        before any checkpoint)."""
        if not self.chain:
            if key != 0.0:
                raise RuntimeError(f"restore of checkpoint {key} with no checkpoint stored")
        elif self.chain[-1].key != key:
            last = self.chain[-1].key
            raise RuntimeError(f"restore of checkpoint {key}, but the last stored is {last}")
        return self.chain

    def _rebuild(self, rows: np.ndarray):
        """The sorted global ``rows`` as the chain restores them: the baseline's values
        (dequantized) and optimizer state, each differential checkpoint's written over them
        in order; and, per row, whether a differential checkpoint holds it (changed since
        the baseline)."""
        from ftsim.trainer import RowData

        base = self.chain[0]  # a baseline holds every row: row id = position
        values = base.values_f()[rows]
        state = {k: v[rows] for k, v in base.state.items()}
        held = np.zeros(len(rows), dtype=bool)
        for diff in self.chain[1:]:
            mine = np.isin(diff.rows, rows)
            at = np.searchsorted(rows, diff.rows[mine])
            values[at] = diff.values_f()[mine]
            for k, v in state.items():
                v[at] = diff.state[k][mine]
            held[at] = True
        return RowData(rows, values, state), held

    def restore(self, trainer, key: float) -> None:
        """Return to checkpoint ``key`` (the last committed): the baseline's rows, then each
        differential checkpoint's rows written over them, and the dense state of ``key``."""
        from ftsim.trainer import TrainerSnapshot

        self.since_checkpoint[:] = False
        self.since_baseline[:] = False
        if not self._chain_at(key):
            trainer.restore(self.initial)
            return
        last = self.chain[-1]
        embeddings, held = self._rebuild(np.arange(trainer.embeddings.n_rows, dtype=np.int64))
        self.since_baseline[:] = held
        trainer.restore(TrainerSnapshot(last.step, last.dense, last.dense_state, embeddings))

    def restore_shards(self, trainer, key: float, shards: tuple[int, ...]) -> None:
        """Return the rows and optimizer state of ``shards`` to checkpoint ``key`` (the last
        committed; before any, the initial rows); every other row, the dense state and the
        step keep theirs. The shards' rows are then unchanged since the last checkpoint, and
        changed since the baseline where a differential checkpoint of the chain holds them."""
        emb = trainer.embeddings
        chain = self._chain_at(key)
        for shard in shards:
            rows = emb.shard_rows(shard)
            if chain:
                data, held = self._rebuild(rows)
            else:
                data, held = self.initial.embeddings.subset(rows), False
            trainer.write_shard(shard, data)
            self.since_checkpoint[rows] = False
            self.since_baseline[rows] = held


# -- the policy ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Kept:
    """A committed checkpoint in the time model: its progress and what it holds, per
    embedding PS in PS order (the PS differ after partial restores)."""

    key: float
    baseline: bool
    shard_bytes: tuple[float, ...]
    """Bytes per PS (rows, ranges, optimizer state, row bitmap)."""
    codec_bytes: tuple[float, ...]
    """fp32 bytes of embedding values per PS that were quantized (0 without quantization)."""
    rows: tuple[float, ...]
    """Rows per PS."""
    span_s: tuple[float, ...]
    """Per PS, the compute seconds of lookups whose distinct rows it holds (0 for a
    baseline, which holds every row)."""


def _per_shard_sums(chain: list[_Kept], field: str, n_shards: int) -> list[float]:
    """Per PS, the sum over ``chain`` of its ``field`` (``shard_bytes`` or ``codec_bytes``),
    added in chain order (0 for an empty chain)."""
    if not chain:
        return [0] * n_shards
    return [sum(column) for column in zip(*(getattr(kept, field) for kept in chain), strict=True)]


def _shard_flows(method, sizes: list[float]) -> list:
    """Flows of ``method`` (``sim.net.shard_writes`` or ``shard_reads``), PS i moving
    ``sizes[i]`` bytes: one call when every PS moves the same (the network builds an
    all-PS write once per run and recognizes it)."""
    if len(set(sizes)) == 1:
        return [*method(range(len(sizes)), sizes[0])]
    return [flow for shard, size in enumerate(sizes) for flow in method([shard], size)]


class CheckNRun(Policy):
    """Differential (and optionally quantized) checkpoints, full or partial recovery: one
    replication."""

    def __init__(self, plan: CheckNRunPlan):
        super().__init__(plan)
        self.chain: list[_Kept] = []
        self.position = 0
        """Checkpoints committed since the last baseline (0: the next one is a baseline)."""
        self.next_s = plan.interval_s
        self.reference_s = [0.0] * plan.n_shards
        """Per PS, the progress r such that its rows changed since the next checkpoint's
        reference are those changed in p − r seconds of compute at progress p."""
        self.exposed_since = [0.0] * plan.n_shards
        """Per PS, the progress since which its updates live only in memory (partial)."""
        self.lost_update_s = 0.0
        """Sum over failed PS of the compute seconds of updates lost (for PLS)."""
        self.saves: list[_Kept] = []
        """Every committed checkpoint, in order."""
        self.storage_peak = 0.0
        self.restored_bytes: list[float] = []
        """Bytes read from storage by each restore."""

    def _reference_since(self, progress_s: float) -> tuple[float, ...] | None:
        """Per PS, compute seconds of changes the next checkpoint writes (None: a baseline)."""
        if self.position == 0 or not self.chain:
            return None
        return tuple(progress_s - r for r in self.reference_s)

    # -- saving --------------------------------------------------------------------------

    def next_action_at(self) -> float:
        return self.next_s

    def act(self, sim):
        progress = sim.progress_s
        kept = self.plan.checkpoint(progress, self._reference_since(progress))
        codec = max(kept.codec_bytes)
        if codec:
            yield from sim.phase("save", codec / self.params.codec_bandwidth, "quantize rows")
        flows = _shard_flows(sim.net.shard_writes, list(kept.shard_bytes)) + sim.net.dense_write()
        what = "baseline" if kept.baseline else "differential checkpoint"
        yield from sim.transfer("save", flows, what)
        self._commit(kept)
        sim.model_event(DiffCheckpoint, key=progress, baseline=kept.baseline)
        self.next_s = progress + self.plan.interval_s

    def _commit(self, kept: _Kept) -> None:
        if kept.baseline:
            self.chain = [kept]
        elif self.params.differential == "one_shot":
            self.chain = [self.chain[0], kept]
        else:
            self.chain.append(kept)
        if kept.baseline or self.params.differential == "consecutive":
            self.reference_s = [kept.key] * self.plan.n_shards
        self.exposed_since = [max(s, kept.key) for s in self.exposed_since]
        self.position = (self.position + 1) % self.params.baseline_every
        self.n_checkpoints += 1
        self.saves.append(kept)
        self.storage_peak = max(self.storage_peak, self.stored_bytes)

    @property
    def stored_bytes(self) -> float:
        """Bytes kept for recovery: the chain's parts on every PS and one dense copy."""
        if not self.chain:
            return 0.0
        per_shard = _per_shard_sums(self.chain, "shard_bytes", self.plan.n_shards)
        return sum(per_shard) + self.layout.dense_bytes

    # -- failures ------------------------------------------------------------------------

    def on_failure(self, sim, failure) -> None:
        key = self.chain[-1].key if self.chain else 0.0
        if self.plan.partial:
            self._lose_shards(sim, key, failed_shards(self.plan.trainers, failure.nodes))
            return
        quantized = self.params.quantize_bits is not None and self.chain
        sim.model_event(RestoreQuantizedChain if quantized else RestoreChain, key=key)
        sim.rollback_to(key)
        self.next_s = key + self.plan.interval_s

    def _lose_shards(self, sim, key: float, shards: tuple[int, ...]) -> None:
        """Partial recovery: ``shards`` go back to checkpoint ``key`` now, losing their
        updates since they were last saved; their rows changed since the next checkpoint's
        reference become those the chain holds (see the module docstring)."""
        if not shards:
            return
        sim.model_event(RestoreChainShards, key=key, shards=shards)
        now = sim.progress_s
        last = self.chain[-1] if self.chain else None
        one_shot = self.params.differential == "one_shot"
        for shard in shards:
            self.lost_update_s += now - self.exposed_since[shard]
            self.exposed_since[shard] = now
            if last is not None:
                self.reference_s[shard] = now - (last.span_s[shard] if one_shot else 0.0)

    def recover(self, sim, failures):
        yield from sim.await_replacements(failures)
        if self.plan.partial:
            yield from self._recover_partial(sim, failures)
            return
        if not self.chain:
            return  # nothing committed yet: every node restarts from the initial model
        per_shard, codec = self.plan.chain_sums(self.chain)
        flows = _shard_flows(sim.net.shard_reads, per_shard) + sim.net.dense_reads()
        parts = len(self.chain) - 1
        yield from sim.transfer("load", flows, f"baseline + {parts} differential")
        if max(codec):
            yield from sim.phase("load", max(codec) / self.params.codec_bandwidth, "dequantize")
        self.restored_bytes.append(self.stored_bytes)

    def _recover_partial(self, sim, failures):
        """The failed PS read their part of the chain (none before the first checkpoint:
        they restart from the initial rows) while each failed trainer's replacement copies
        the dense state from a replica; then the PS dequantize their part."""
        trainers = self.plan.trainers
        failed = {n for f in failures for n in f.nodes}
        shards = failed_shards(trainers, failed) if self.chain else ()
        per_shard, codec = self.plan.chain_sums(self.chain)
        flows = [flow for s in shards for flow in sim.net.shard_reads([s], per_shard[s])]
        for trainer in sorted(n for n in failed if n < trainers):
            flows += sim.net.replica_copy(trainer)  # concurrently, over other links
        if flows:
            yield from sim.transfer("load", flows, f"reload {len(shards)} shard(s)")
        decode = max((codec[s] for s in shards), default=0.0)
        if decode:
            yield from sim.phase("load", decode / self.params.codec_bandwidth, "dequantize")
        if shards:
            self.restored_bytes.append(sum(per_shard[s] for s in shards))

    def result_columns(self):
        plan, saves = self.plan, self.saves
        written = sum(sum(k.shard_bytes) for k in saves)
        written += len(saves) * self.layout.dense_bytes
        diffs = [sum(k.rows) / plan.n_shards / plan.shard_rows for k in saves if not k.baseline]
        restored = self.restored_bytes
        nan = math.nan
        return {
            "interval_h": plan.interval_s / 3600.0,
            "saved_gb": written / 1e9,
            "save_cost_s": plan.save_s,
            "load_cost_s": plan.load_s,
            "n_baselines": sum(k.baseline for k in saves),
            "diff_rows_frac": sum(diffs) / len(diffs) if diffs else nan,
            "write_reduction": len(saves) * plan.full_bytes / written if written else nan,
            "storage_gb": self.storage_peak / 1e9,
            "capacity_reduction": plan.full_bytes / self.storage_peak if saves else nan,
            "restore_gb": sum(restored) / len(restored) / 1e9 if restored else nan,
            "pls_model": self.lost_update_s / (plan.inputs.job.work_s * plan.n_shards),
            "pls_predicted": plan.predicted_pls(plan.interval_s) if plan.partial else 0.0,
        }


@register(CheckNRunParams)
class CheckNRunPlan(Plan):
    """What every replication of ``checknrun`` shares: bytes per row written, the
    interval, the mean planned stall and restore, and the sizes of checkpoints (the rows
    changed over a span of compute, worked out once per span for all replications)."""

    Runtime = CheckNRun
    TrainerSide = CheckNRunSide

    def __init__(self, params: CheckNRunParams, inputs):
        super().__init__(params, inputs)
        job = inputs.job
        self.n_shards = inputs.cluster.emb_ps
        self.trainers = inputs.cluster.trainers
        self.partial = params.recovery == "partial"
        self.mtbf_s = inputs.mtbf_s
        self.shards_per_failure = inputs.victims["emb_ps"]
        """Expected embedding PS lost per failure (m)."""
        self.shard_rows = job.embedding_rows / self.n_shards
        self.groups = inputs.row_popularity(params.popularity_exponent)
        self._distinct: dict[float, float] = {}
        """Lookups → expected distinct rows among them (:meth:`changed_rows`): replications
        ask the same spans again."""
        bits = params.quantize_bits
        value_bytes = job.mean_value_bytes
        stored_values = (
            value_bytes if bits is None else value_bytes * bits / (8 * job.bytes_per_value)
        )
        ranges = RANGE_BYTES if bits is not None and params.quantization == "adaptive" else 0
        self.row_bytes = stored_values + ranges + (job.mean_row_bytes - value_bytes)
        """Bytes written per embedding row: values (quantized or not), range, optimizer."""
        self.codec_row_bytes = value_bytes if bits is not None else 0.0
        self.full_bytes = self.layout.total_bytes
        self.interval_s = self._choose_interval()
        self.save_s, self.load_s = self._planned_costs(self.interval_s)

    # -- sizes ---------------------------------------------------------------------------

    def changed_rows(self, compute_s: float) -> float:
        """Expected distinct rows (all tables) updated in ``compute_s`` of training."""
        draws = self.inputs.job.samples_per_iteration * compute_s / self.inputs.job.iteration_s
        found = self._distinct.get(draws)
        if found is None:
            found = self._distinct[draws] = min(
                distinct_rows(self.groups, draws), float(self.inputs.job.embedding_rows)
            )
        return found

    def checkpoint(self, key: float, since_s: tuple[float, ...] | None) -> _Kept:
        """What checkpoint ``key`` writes: a baseline (``since_s`` None) or, on each PS i,
        the rows changed in the ``since_s[i]`` seconds of compute its mask covers."""
        n = self.n_shards
        if since_s is None:
            rows, bitmap, span = (self.shard_rows,) * n, 0.0, (0.0,) * n
        else:
            changed = {s: self.changed_rows(s) / n for s in set(since_s)}  # mostly one value
            rows = tuple(map(changed.__getitem__, since_s))
            bitmap, span = self.shard_rows / 8, since_s
        return _Kept(
            key=key,
            baseline=since_s is None,
            shard_bytes=tuple(r * self.row_bytes + bitmap for r in rows),
            codec_bytes=tuple(r * self.codec_row_bytes for r in rows),
            rows=rows,
            span_s=span,
        )

    def _cycle(self, interval_s: float) -> Iterator[_Kept]:
        """The checkpoints of one baseline cycle at a regular ``interval_s``, no failure, one
        at a time. A cycle longer than the failure-free run ends with the run's last
        checkpoint: the later ones are never written (and planning them would cost time in
        proportion to ``baseline_every``, which may be huge to mean "one baseline")."""
        one_shot = self.params.differential == "one_shot"
        in_run = math.floor(self.inputs.job.work_s / interval_s)
        yield self.checkpoint(0.0, None)
        for k in range(1, min(self.params.baseline_every, max(in_run, 1))):
            since = (k if one_shot else 1) * interval_s
            yield self.checkpoint(k * interval_s, (since,) * self.n_shards)

    def chain_sums(self, chain: list[_Kept]) -> tuple[list[float], list[float]]:
        """Per PS, the bytes of ``chain`` and the fp32 bytes it quantized (to dequantize)."""
        n = self.n_shards
        return _per_shard_sums(chain, "shard_bytes", n), _per_shard_sums(chain, "codec_bytes", n)

    def _stall_s(self, kept: _Kept) -> float:
        """Planned stall of writing ``kept`` alone, seconds: the slowest PS's quantization,
        then every PS's part and one dense copy."""
        flows = [*kept.shard_bytes, self.layout.dense_bytes]
        return max(kept.codec_bytes) / self.params.codec_bandwidth + self.layout.write_s(flows)

    def _restore_s(self, chain: list[_Kept]) -> float:
        """Planned time to restore from ``chain`` alone, seconds: full recovery, every PS
        reads its part while every trainer reads the dense copy; partial, the m PS of a
        failure read theirs. Then their dequantization."""
        return self._restore_sums_s(*self.chain_sums(chain))

    def _restore_sums_s(self, per_shard: list[float], codec: list[float]) -> float:
        """:meth:`_restore_s` of a chain whose per-PS sums are ``per_shard`` and ``codec``."""
        if self.partial:
            m = round(self.shards_per_failure)
            flows, codec = per_shard[:m], codec[:m]
        else:
            flows = per_shard + [self.layout.dense_bytes] * self.trainers
        return self.layout.read_s(flows) + max(codec, default=0.0) / self.params.codec_bandwidth

    def _planned_costs(self, interval_s: float) -> tuple[float, float]:
        """Mean stall of a checkpoint over a baseline cycle at ``interval_s``, and mean time
        to restore after each of its checkpoints (planning: each transfer alone)."""
        if math.isinf(interval_s):
            return self._stall_s(self.checkpoint(0.0, None)), 0.0
        one_shot = self.params.differential == "one_shot"
        stall = restore = 0
        for i, kept in enumerate(self._cycle(interval_s)):
            stall += self._stall_s(kept)
            if i == 0:  # the baseline, alone
                baseline, per_shard, codec = kept, list(kept.shard_bytes), list(kept.codec_bytes)
            elif one_shot:  # the baseline and this checkpoint
                per_shard, codec = self.chain_sums([baseline, kept])
            else:  # the chain so far, summed in chain order
                per_shard = [a + b for a, b in zip(per_shard, kept.shard_bytes, strict=True)]
                codec = [a + b for a, b in zip(codec, kept.codec_bytes, strict=True)]
            restore += self._restore_sums_s(per_shard, codec)
        return stall / (i + 1), restore / (i + 1)

    def predicted_pls(self, interval_s: float) -> float:
        """PLS of partial recovery, m · T / (2 · E · T_fail) (``cpr``'s (1)); 0 without
        embedding failures."""
        if math.isinf(self.mtbf_s) or math.isinf(interval_s):
            return 0.0
        return self.shards_per_failure * interval_s / (2.0 * self.n_shards * self.mtbf_s)

    def _choose_interval(self) -> float:
        p = self.params
        if p.target_pls is not None:
            if math.isinf(self.mtbf_s) or self.shards_per_failure == 0:
                return math.inf
            return 2.0 * self.n_shards * self.mtbf_s * p.target_pls / self.shards_per_failure
        if not isinstance(p.interval, str):
            return p.interval
        mtbf = self.mtbf_s
        work_s = self.inputs.job.work_s
        interval = planned_interval_s(work_s, p.interval, self.layout.full_save_s(), mtbf)
        for _ in range(100):
            if math.isinf(interval):
                return interval
            stall, _ = self._planned_costs(interval)
            new = planned_interval_s(work_s, p.interval, stall, mtbf)
            if abs(new - interval) <= 1e-9 * interval:
                return new
            interval = new
        return interval


register_no_effect(
    CheckNRunParams,
    "quantization",
    lambda p, s: "quantize_bits is null (no quantization)" if p.quantize_bits is None else None,
)
