"""``ecrm``: erasure-coded embeddings (ECRM / ECRec, after Thesys-lab/ECRec).

Instead of checkpointing the embeddings often, the embedding PS keep **parity** of the rows
and their optimizer state in memory: a systematic (k + r, k) code over stripes of k rows on
k distinct servers, parity on r others, laid out ``rotating`` (over all servers) or
``grouped`` (inside groups of ``group_size`` servers) by :mod:`ftsim.stripes`
(:mod:`ftsim.trainer.parity` for the code). Dense parameters are recovered from a surviving
trainer replica. ``docs/model.md`` gives the ECRec source lines behind each choice below.

Time model (B: NIC bandwidth; U = samples × lookups per sample × ``unique_lookup_fraction``
touched rows per iteration, U/E of them on each of the E servers; the fraction is a number or
derived from row popularity, :mod:`ftsim.policies.touched`):

- **Parity traffic**, every iteration: a server sends each touched row's change (values +
  optimizer state, ``row_bytes``) to its r parity holders, U/E · row_bytes · r bytes, of
  which the share ``parity_overlap`` hides behind compute; the rest slows training, charged
  to ``other``. The stream also takes its rate out of every PS NIC for other transfers.
  **Memory**: parity is r/k of the embedding state (``parity_mem_frac``).
- **A failure the code decodes** (every stripe lost ≤ r members) does not stop training.
  Until the lost shard is rebuilt, three costs are charged to ``degraded``:

  *Degraded reads* (ECRec's ``Client::SparsePull``): a worker looking up a lost row pulls k
  surviving members of its stripe instead (values only) and decodes them itself. Survivor h
  serves ``reads(x)[h]`` rows per lookup of lost shard x (:meth:`~ftsim.stripes.StripeLayout.
  reads`); a worker receives k − 1 extra rows per lost lookup and sums k rows at
  ``decode_bandwidth``. Per iteration that adds the slower end of the pull (the busiest
  survivor's extra bytes, or one worker's, over B) plus the worker's decode.

  *Rebuild* (ECRec's ``LoadVariableWithRedundancy``): once the replacement is ready it
  restores the shard range by range (``rebuild_ranges``), each range in ``rebuild_batches``
  batches with one request in flight: a batch pulls k rows per row it restores from the
  survivors (one connection each, capped at ``flow_bandwidth`` if set) and waits for them,
  then the replacement decodes it. A range is one transfer on the cluster's network (flows
  survivor → replacement, sharing links with everything else: the batches of a range move
  the same bytes over the same links one after the other) followed by its batches'
  ``request_latency`` and decode time. ``rebuild_scope`` says what is restored: ``all`` (the
  shard's rows with their optimizer state, and its parity rows: k + r row reads per data
  row, :meth:`~ftsim.stripes.StripeLayout.rebuild_reads`) or ``values`` (what ECRec's
  prototype pulls). While a range's flows move, each survivor's training traffic (pull + push
  of its touched rows) gets what its NIC has left: it slows by busy/(1 − busy), busy the
  survivor's planned rebuild rate over B (the rebuild is given priority: an upper bound).

  *Range switches*: before each range and once to close the last, every survivor blocks
  updates, waits ``switch_drain`` for those in flight, copies the previous range back and
  the next one aside (each state array separately, by ECRec's ``QuickMemcpy`` rule:
  :func:`quick_memcpy_s`). Training stops for the switch: a ``degraded`` phase of the job
  (the rebuild waits for it); it goes on while a range is rebuilt.
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
(progress of a rebuild is not tracked): its rebuild is stopped and a new one starts for the
latest failure. The rebuild's plan (bytes per survivor, a range's transfer alone, pauses) is
worked out by pure functions of the parameters, the job, the cluster and the layout
(:func:`plan_rebuild`); a replication only runs it.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, NamedTuple

import numpy as np
from pydantic import Field, model_validator

from ftsim import stripes
from ftsim.notices import RenamedField
from ftsim.policies.base import Plan, Policy, TrainerSide, register
from ftsim.policies.events import ModelEvent, RestoreAll
from ftsim.policies.knobs import Knob
from ftsim.policies.saving import CheckpointWriter, SavingParams
from ftsim.policies.touched import TouchedRowsParams
from ftsim.scenario.quantities import BytesPerSecond, Seconds
from ftsim.sim.cluster import lone_transfer_s
from ftsim.sim.failures import Failure
from ftsim.sim.network import FlowGroup, GroupedFlows
from ftsim.sim.nodes import any_trainer, failed_shards
from ftsim.stripes import CompactArray, CompactMemo, LayoutError, Recent, StripeLayout

QUICK_MEMCPY_BLOCK_B = 2**30
"""ECRec's ``QuickMemcpy`` (``common/thread_pool.h:50-73``) copies below two blocks in one
``memcpy`` call, else in blocks of this size (the last between one and two) on its pool."""

_MEMO_SIZE = 4096
"""Entries a plan's memo of slowdowns keeps (emptied when full: a run at 100× nodes meets
thousands of sets of degraded shards)."""

REMOVED_FIELDS = {
    "rebuild_share": "the rebuild's rate now follows from the cluster (docs/model.md, ECRM)"
}
"""Fields ``ecrm`` no longer has: accepted in old scenarios with a notice, and ignored."""


class EcrmParams(SavingParams, TouchedRowsParams):
    """Parameters of ``ecrm``."""

    kind: Literal["ecrm"]
    renamed_fields: ClassVar[dict[str, str]] = {
        "checkpoint_interval": "interval",
        "copy_bandwidth": "memcpy_bandwidth",
    }
    search: ClassVar[tuple[Knob, ...]] = (
        Knob("k", (2, 4, 8), "geometric", integer=True, lowest=2),
    )
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
    rebuild_scope: Literal["all", "values"] = Field(
        "all",
        description="rows a rebuild restores: all (rows with optimizer state, and the "
        "server's parity rows) or values (what ECRec's prototype pulls)",
    )
    rebuild_ranges: int = Field(
        10, ge=1, le=1000, description="ranges a shard is rebuilt in (ECRec: 10)"
    )
    rebuild_batches: int = Field(
        10, ge=1, description="batches per range, one request in flight (ECRec: 10)"
    )
    request_latency: Seconds = Field(
        "100 us", description="round trip of one rebuild batch's request (assumption)"
    )
    flow_bandwidth: BytesPerSecond | None = Field(
        None,
        description="cap of one connection (AWS outside a cluster placement group: 5 Gbit/s); "
        "none: uncapped",
    )
    decode_bandwidth: BytesPerSecond = Field(
        "20 GB/s", description="bytes of stripe members a node sums per second (assumption)"
    )
    freeze: bool = Field(True, description="pause updates at every range switch (as ECRec)")
    switch_drain: Seconds = Field(
        "100 ms", description="wait for in-flight updates at a range switch (ECRec's poll)"
    )
    memcpy_bandwidth: BytesPerSecond = Field(
        "8 GB/s",
        description="rate of one memcpy call, one thread (ECRec copies a range's array below "
        "2 GiB in one call); assumption",
    )
    interval: Seconds = Field(
        "24 h", gt=0, description="compute between the rare fall-back checkpoints"
    )
    fallback: Literal["rollback", "partial"] = Field(
        "rollback",
        description="when some rows cannot be decoded: full rollback, or reload those rows",
    )

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data):
        """Accept a field ECRM no longer has (:data:`REMOVED_FIELDS`), with a notice."""
        if isinstance(data, dict) and data.keys() & REMOVED_FIELDS:
            for name in sorted(data.keys() & REMOVED_FIELDS):
                message = f"ecrm.{name} is deprecated and ignored: {REMOVED_FIELDS[name]}"
                warnings.warn(message, RenamedField, stacklevel=2)
            data = {key: value for key, value in data.items() if key not in REMOVED_FIELDS}
        return data

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


# -- planning: pure functions of the parameters, the job, the cluster and the layout ---------


def quick_memcpy_s(n_bytes: float, thread_Bps: float, copy_Bps: float) -> float:
    """Seconds of ECRec's ``QuickMemcpy`` of ``n_bytes``: below two blocks one ``memcpy``
    call, one thread at ``thread_Bps`` (at most the node's copy rate ``copy_Bps``); else
    n = ⌊bytes / block⌋ blocks, n − 1 of 1 GiB and a last of 1 to 2 GiB, copied together by
    its thread pool, each at most ``thread_Bps``, all sharing ``copy_Bps`` (max-min): the
    n − 1 end together, then the last copies its extra bytes alone. The pool is taken to
    run every block at once (ECRec's has one thread per hardware thread, 96 on its PS;
    97 blocks would be 97 GiB of one array in one range)."""
    if n_bytes <= 0:
        return 0.0
    block = QUICK_MEMCPY_BLOCK_B
    if n_bytes < 2 * block:
        return n_bytes / min(thread_Bps, copy_Bps)
    n = n_bytes // block
    last = n_bytes - (n - 1) * block
    return block / min(thread_Bps, copy_Bps / n) + (last - block) / min(thread_Bps, copy_Bps)


def range_arrays_B(job, shard_bytes: float, ranges: int) -> tuple[tuple[float, int], ...]:
    """Bytes of one range of every array a range switch copies, for a server holding
    ``shard_bytes`` of the job's rows, as (bytes, how many arrays of that size): the values
    and each optimizer slot (1 + ``optimizer_slots`` arrays alike), the row-wise slots
    (ECRec copies its values and its accumulator with one ``QuickMemcpy`` each). Counted,
    not listed: a job's slots are a count a scenario may set to any size."""
    values = sum(g.count * g.rows * g.dim for g in job.tables) * job.bytes_per_value
    arrays = [(values, 1 + job.optimizer_slots)]
    if job.rowwise_optimizer_slots:
        rowwise = job.embedding_rows * job.rowwise_optimizer_slots * job.bytes_per_value
        arrays.append((rowwise, 1))
    scale = shard_bytes / job.embedding_bytes / ranges
    return tuple((array * scale, count) for array, count in arrays)


def switch_pauses_s(params: EcrmParams, arrays_B: Iterable[tuple[float, int]], copy_Bps: float):
    """Training pause of each range switch, in order (none without ``freeze``): one before
    each of the ``rebuild_ranges`` ranges and one closing the last. Each waits
    ``switch_drain`` for the updates in flight and copies every array of the previous range
    back and of the next one aside (``arrays_B``: :func:`range_arrays_B`); the first has no
    previous range, the last no next."""
    if not params.freeze:
        return ()
    thread_Bps = params.memcpy_bandwidth
    copies_s = sum(count * quick_memcpy_s(b, thread_Bps, copy_Bps) for b, count in arrays_B)
    last = params.rebuild_ranges
    return tuple(
        params.switch_drain + copies_s * (1 if j in (0, last) else 2) for j in range(last + 1)
    )


@dataclass(frozen=True, slots=True)
class RebuildPlan:
    """One shard's rebuild as it runs alone (:func:`plan_rebuild`)."""

    ranges: int
    range_B: np.ndarray
    """(N,) bytes each server sends the replacement per range (0: none, e.g. the shard)."""
    transfer_s: float
    """One range's flows alone on the network, its latency included, s."""
    gap_s: float
    """Per range, after its flows: its batches' request latencies and decoding, s."""
    pauses_s: tuple[float, ...]
    """Training pause of each range switch (``ranges`` + 1, or none), s."""
    busy: np.ndarray
    """(N,) share of each server's NIC the range's flows take while they move."""

    @property
    def duration_s(self) -> float:
        """Wall seconds of the rebuild: its ranges and its switches."""
        return self.ranges * (self.transfer_s + self.gap_s) + sum(self.pauses_s)


class CompactRebuild(NamedTuple):
    """A :class:`RebuildPlan` with its two arrays compact (:class:`CompactArray`): what a
    plan keeps of every shard's rebuild."""

    ranges: int
    range_B: CompactArray
    transfer_s: float
    gap_s: float
    pauses_s: tuple[float, ...]
    busy: CompactArray

    @classmethod
    def of(cls, plan: RebuildPlan) -> CompactRebuild:
        range_B, busy = CompactArray.of(plan.range_B), CompactArray.of(plan.busy)
        return cls(plan.ranges, range_B, plan.transfer_s, plan.gap_s, plan.pauses_s, busy)

    def whole(self) -> RebuildPlan:
        """The plan, its arrays whole again (bit for bit, read-only)."""
        return RebuildPlan(
            self.ranges,
            self.range_B.array(),
            self.transfer_s,
            self.gap_s,
            self.pauses_s,
            self.busy.array(),
        )


def rebuild_sent_B(params: EcrmParams, job, shard_bytes: float, reads: np.ndarray):
    """(N,) bytes each server sends to rebuild a shard of ``shard_bytes`` whose rebuild reads
    ``reads`` rows from each per data row (:meth:`~ftsim.stripes.StripeLayout.rebuild_reads`,
    k + r in all). ``all``: rows with their optimizer state, parity rows included.
    ``values``: what ECRec's prototype pulls, the values of as many server slots as the
    shard has data rows (k reads each, data and parity slots in the layout's proportion)."""
    if params.rebuild_scope == "all":
        return shard_bytes * reads
    rows = shard_bytes / job.mean_row_bytes
    return rows * job.mean_value_bytes * reads * (params.k / (params.k + params.r))


def rebuild_pauses_s(params: EcrmParams, job, cluster, shard_bytes: float) -> tuple:
    """Training pause of each range switch of the rebuild of a shard of ``shard_bytes``
    (:func:`switch_pauses_s`; the same for every shard of a layout)."""
    arrays = range_arrays_B(job, shard_bytes, params.rebuild_ranges)
    return switch_pauses_s(params, arrays, cluster.memory_copy_Bps)


def plan_rebuild(
    params: EcrmParams,
    job,
    cluster,
    shard_bytes: float,
    reads: np.ndarray,
    stream_Bps: float,
    pauses_s: tuple | None = None,
) -> RebuildPlan:
    """How the rebuild of one shard (``reads``: its :meth:`~ftsim.stripes.StripeLayout.
    rebuild_reads`) runs when nothing else moves: each range is one flow per survivor into
    the replacement, each capped at ``flow_bandwidth`` and at the NIC less ``stream_Bps``
    (the parity stream) and the background share, all sharing the replacement's NIC; then
    ``rebuild_batches`` request latencies and the decoding of what arrived. ``pauses_s``:
    :func:`rebuild_pauses_s`, if already worked out (a plan of 1,800 shards does it once)."""
    nic = cluster.nic_bandwidth
    free = nic * (1 - cluster.background.ps_nic_share) - stream_Bps
    ranges = params.rebuild_ranges
    range_B = rebuild_sent_B(params, job, shard_bytes, reads) / ranges
    sent = range_B[range_B > 0]
    cap = min(free, params.flow_bandwidth or math.inf)
    if free > 0:
        transfer_s = lone_transfer_s(sent, np.full(len(sent), cap), free, cluster.network_latency)
    else:
        transfer_s = math.inf
    busy = range_B / (transfer_s * nic) if transfer_s > 0 else np.zeros_like(range_B)
    decoded_B = sequential_sum(sent)
    gap_s = params.rebuild_batches * params.request_latency + decoded_B / params.decode_bandwidth
    if pauses_s is None:
        pauses_s = rebuild_pauses_s(params, job, cluster, shard_bytes)
    return RebuildPlan(ranges, range_B, transfer_s, gap_s, pauses_s, busy)


def sequential_sum(values: np.ndarray) -> float:
    """The sum of ``values`` added left to right, bit for bit Python's ``sum`` of their list
    (3.11: plain float additions from 0; as a float) in NumPy: ``np.add.accumulate`` adds in
    order, where ``np.sum`` adds pairwise (other last bits). A shard's plan sums ~1,800 sizes
    at 100× nodes. The final ``+ 0.0`` gives a sum of zeros the sign Python's has (a NaN
    stays a NaN, its sign bit aside)."""
    return float(np.add.accumulate(values)[-1]) + 0.0 if len(values) else 0.0


def common_part(sent: np.ndarray) -> tuple[float, np.ndarray]:
    """The most frequent positive entry of ``sent`` (the smallest of equally frequent ones;
    0 if none) and the positions of the others."""
    parts, counts = np.unique(sent[sent > 0], return_counts=True)
    part = float(parts[np.argmax(counts)]) if len(parts) else 0.0
    return part, np.flatnonzero(sent != part)


def compact_common_part(sent: CompactArray) -> tuple[float, np.ndarray] | None:
    """:func:`common_part` of the array ``sent`` holds compactly, when its common value is
    positive and fills more than half of it (then no other value is as frequent, and the
    other positions are those it keeps); None otherwise."""
    others = len(sent.positions)
    if sent.common > 0 and sent.size - others > others:
        return sent.common, sent.positions
    return None


def rebuild_throughput_frac(
    plan: RebuildPlan, reads: float, interference: float, baseline: float
) -> float:
    """Training throughput while ``plan`` runs alone, over the throughput at the slowdown
    ``baseline``: training runs at slowdown ``reads`` (degraded reads and the parity
    stream), plus ``interference`` while a range's flows move, and stops at every switch."""
    compute_s = plan.ranges * (
        plan.transfer_s / (1 + reads + interference) + plan.gap_s / (1 + reads)
    )
    return compute_s * (1 + baseline) / plan.duration_s


def interference_slowdown(traffic_frac: float, busy: float) -> float:
    """Slowdown of a survivor's training traffic (``traffic_frac``: its seconds per second
    of compute) when the rebuild takes the share ``busy`` of its NIC first."""
    return traffic_frac * busy / (1 - busy)


@dataclass(slots=True, eq=False)
class _Rebuild:
    """One failure's rebuild under way. A background process waits for the replacements (and
    the reload of undecodable rows) and starts it; then each step is taken by what it waits
    for, as a callback: the job, as it ends a range switch, starts the range (or ends the
    rebuild after the closing switch); the range's transfer, as it arrives, the pause after
    it; the pause, the next range (:meth:`Ecrm._next_range`). No process resumes per range,
    and no event stands between the end of a switch and its range."""

    generation: int
    failure: Failure
    shares: dict[int, float]
    """Shard → the share of its rows to rebuild."""
    mine: list[int] = field(default_factory=list)
    """The shards it still owns, in order (as of :attr:`seen`)."""
    seen: int = 0
    """:attr:`Ecrm._takeovers` when :attr:`mine` was last checked."""
    start_s: float = 0.0
    j: int = 0
    """The range under way, or next."""
    moving: tuple | None = None
    """The shards of the last range planned, its flows and its gap."""


@dataclass(slots=True)
class _Switch:
    """Range switches a rebuild waits for: served by :meth:`Ecrm.act` as a job phase."""

    rebuild: _Rebuild
    shards: tuple[int, ...]
    j: int
    """Which switch of the rebuild: before range ``j``, or closing the last (j = ranges)."""
    left_s: float


class Ecrm(Policy):
    """Erasure-coded embeddings with degraded reads, background rebuild and a per-row
    checkpoint fall-back: one replication."""

    def __init__(self, plan: EcrmPlan):
        super().__init__(plan)
        self.writer = CheckpointWriter(self.params, plan.snapshot_bytes, plan.inputs.cluster)
        self.committed_s = 0.0
        self.next_s = plan.interval_s
        self.degraded: dict[int, float] = {}
        """Lost shards not yet rebuilt → share of their rows served by degraded reads."""
        self._owner: dict[int, int] = {}
        """Degraded shard → generation of the rebuild in charge of it (the latest failure)."""
        self._generation = 0
        self._takeovers = 0
        """Changes of a shard's rebuild to a later one (or to none, by a rollback): until
        the next, every rebuild owns the shards it owned."""
        self._under_way: dict[int, _Rebuild] = {}
        """Generation → its rebuild, while it owns some shard."""
        self._transfers: dict[int, object] = {}
        """Generation → the range its rebuild moves now."""
        self._sending: dict[int, tuple[int, ...]] = {}
        """Generation whose range is moving → the shards it rebuilds (their NIC shares:
        :meth:`EcrmPlan.sending_slowdown`)."""
        self._switches: list[_Switch] = []
        """Range switches waiting for the job, in order of request."""
        self._slowdown = plan.healthy_slowdown
        self._rollback_pending = False
        self._reloaded = None
        """Fired when the latest fall-back's undecodable rows are back (rebuilds wait)."""
        self._reload: list[tuple[int, float]] = []
        """(failed shard, bytes) to reload from the fall-back checkpoint (``partial``)."""
        self.recovery_s: list[float] = []
        """Per rebuilt shard: seconds from its failure to the end of its rebuild."""
        self.n_fallbacks = 0
        self.undecodable: list[float] = []
        """Per fall-back: share of the lost shards' rows that could not be decoded."""
        self.lost_update_s = 0.0

    def next_action_at(self) -> float:
        return 0.0 if self._switches else self.next_s

    def start(self, sim) -> None:
        """Parity updates stream between the PS for the whole run: every transfer (saves,
        rebuilds, reloads) shares the PS NICs with them."""
        if self.plan.parity_Bps:
            sim.net.stream_on_ps_nics(self.plan.parity_Bps)

    def act(self, sim):
        if self._switches:
            yield from self._serve_switches(sim)
            return
        progress = sim.progress_s
        yield from self.writer.save(sim, sim.net.full_save(), progress, self._committed)
        self.next_s = progress + self.plan.interval_s

    def _serve_switches(self, sim):
        """Stop training for the range switches the rebuilds wait for, one after the other
        (a failure during one leaves the rest of it for later)."""
        while self._switches:
            switch = self._switches[0]
            start = sim.now
            try:
                detail = self.plan.switch_detail(switch.shards)
                yield from sim.phase("degraded", switch.left_s, detail, activity="range switch")
            finally:
                switch.left_s -= sim.now - start
            self._switches.remove(switch)
            self._switched(sim, switch)

    def _committed(self, progress_s: float) -> None:
        self.committed_s = progress_s
        self.n_checkpoints += 1

    def slowdown(self) -> dict[str, float]:
        if not self.writer.persisting:  # (the writer's slowdown is then empty)
            return self._slowdown
        persist = self.writer.slowdown()
        out = dict(self._slowdown)
        out["other"] = out.get("other", 0.0) + persist["other"]
        return out

    def _update(self, sim) -> None:
        """Recompute the slowdown after ``degraded`` or ``_sending`` changed."""
        plan = self.plan
        if self.degraded:
            out = plan.slowdown_while(tuple(self.degraded.items()), tuple(self._sending.values()))
        else:
            out = plan.healthy_slowdown
        if out is not self._slowdown and out != self._slowdown:
            self._slowdown = out
            sim.replan()

    def on_failure(self, sim, failure) -> None:
        trainers = self.plan.trainers
        shards = set(failed_shards(trainers, failure.nodes))
        self.writer.on_failure(failure.nodes, trainers)
        if not shards:
            return
        lost = self.degraded.keys() | shards
        loss = self.plan.stripes.loss(lost)
        if loss.decodable:
            sim.model_event(DecodeShards, shards=tuple(sorted(shards)))
            self._take_over(sim, failure, dict.fromkeys(shards, 1.0), None)
            return
        self.n_fallbacks += 1
        self.undecodable.append(sum(loss.undecodable.values()) / len(lost))
        if self.params.fallback == "rollback":
            self._owner.clear()
            self._takeovers += 1
            self._retire(sim)
            self.degraded.clear()
            sim.model_event(RestoreAll, key=self.committed_s)
            sim.rollback_to(self.committed_s)
            self.next_s = self.committed_s + self.plan.interval_s
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
        self._takeovers += 1
        generation = self._generation
        for shard, share in shares.items():
            if share > 0:
                self.degraded[shard] = share
                self._owner[shard] = generation
            else:
                self.degraded.pop(shard, None)
                self._owner.pop(shard, None)
        self._retire(sim)
        mine = {shard: share for shard, share in shares.items() if share > 0}
        if mine:
            rebuild = self._under_way[generation] = _Rebuild(generation, failure, mine)
            sim.background(self._rebuild(sim, rebuild, after))
        self._update(sim)

    def _owned(self, generation: int, shards) -> list[int]:
        """Those of the ``shards`` (in order) whose rebuild is still the one of
        ``generation`` (a shard a rebuild no longer owns is never its own again)."""
        owner = self._owner
        return [s for s in shards if owner.get(s) == generation]

    def _retire(self, sim) -> None:
        """Stop the rebuilds that own nothing any more: a range on its way is cancelled (its
        replacement failed), a range switch they wait for is no longer served, and each
        ends at once."""
        live = set(self._owner.values())
        for generation in [g for g in self._under_way if g not in live]:
            rebuild = self._under_way.pop(generation)
            self._sending.pop(generation, None)
            for switch in [s for s in self._switches if s.rebuild is rebuild]:
                self._switches.remove(switch)
            transfer = self._transfers.pop(generation, None)
            if transfer is not None:  # its callback never comes: the rebuild ends here
                sim.net.cancel(transfer)

    def _rebuild(self, sim, rebuild: _Rebuild, after):
        """Background: wait for the replacements (and the reload of undecodable rows), then
        rebuild the shares ``rebuild.shares`` of the shards' rows range by range, ECRec's
        loop: a range switch, the range's flows, its batches' latencies and decoding; then
        the closing switch (:class:`_Rebuild`: the steps after this one are callbacks). The
        shards of one failure go in step (one switch of all their pauses, one transfer of
        all their flows); a shard a later failure takes over drops out, and the rebuild
        stops when it owns nothing."""
        failure = rebuild.failure
        ready = failure.time_s + failure.reschedule_s
        if ready > sim.now:
            yield sim.timeout(ready - sim.now)
        if after is not None and not after.processed:
            yield after
        rebuild.mine = self._owned(rebuild.generation, sorted(rebuild.shares))
        rebuild.seen = self._takeovers
        rebuild.start_s = sim.now
        self._next_range(sim, rebuild)

    def _still_mine(self, rebuild: _Rebuild) -> list[int]:
        """The shards ``rebuild`` still owns (checked again only after a take-over)."""
        if self._takeovers != rebuild.seen:
            rebuild.mine = self._owned(rebuild.generation, rebuild.mine)
            rebuild.seen = self._takeovers
        return rebuild.mine

    def _next_range(self, sim, rebuild: _Rebuild) -> None:
        """Range ``rebuild.j``, or the end after the last: with ``freeze``, a switch first
        (the job takes the next step as it ends it: :meth:`_switched`)."""
        if rebuild.mine and self.params.freeze:
            self._switch(sim, rebuild)
        elif rebuild.j < self.params.rebuild_ranges:
            self._start_range(sim, rebuild)
        else:
            self._finish(sim, rebuild)

    def _switch(self, sim, rebuild: _Rebuild) -> None:
        """Ask the job to stop training for switch ``rebuild.j`` of the shards' rebuilds (one
        after the other: each replacement's switch stops every survivor)."""
        shards, j = tuple(rebuild.mine), rebuild.j
        self._switches.append(_Switch(rebuild, shards, j, self.plan.switch_pause_s(shards, j)))
        sim.replan()

    def _switched(self, sim, switch: _Switch) -> None:
        """The job ended ``switch``: the range it opens starts, before the job trains again
        (so that its compute starts at the range's slowdown, not re-planned at once), or,
        after the closing switch, the rebuild ends."""
        rebuild = switch.rebuild
        self._still_mine(rebuild)
        if switch.j < self.params.rebuild_ranges:
            self._start_range(sim, rebuild)
        else:
            self._finish(sim, rebuild)

    def _start_range(self, sim, rebuild: _Rebuild) -> None:
        """Range ``rebuild.j``'s flows start (the range is planned once per set of shards);
        their NIC shares slow the survivors' training traffic until they arrive."""
        mine = self._still_mine(rebuild)
        if not mine:
            return
        generation = rebuild.generation
        self._sending[generation] = tuple(mine)
        self._update(sim)
        if rebuild.moving is None or rebuild.moving[0] != mine:
            rebuild.moving = (mine, *self._range(sim, mine, rebuild.shares))
        transfer = sim.net.start(rebuild.moving[1], "rebuild", "rebuild")
        self._transfers[generation] = transfer
        transfer.callbacks.append(functools.partial(self._range_moved, sim, rebuild))

    def _range_moved(self, sim, rebuild: _Rebuild, _) -> None:
        """Range ``rebuild.j``'s flows arrived: their interference ends; its batches'
        request latencies and decoding follow."""
        generation = rebuild.generation
        del self._transfers[generation], self._sending[generation]
        self._update(sim)
        pause = sim.timeout(rebuild.moving[2])
        pause.callbacks.append(functools.partial(self._range_done, sim, rebuild))

    def _range_done(self, sim, rebuild: _Rebuild, _) -> None:
        """Range ``rebuild.j`` is rebuilt: the next one (or the end)."""
        self._still_mine(rebuild)
        rebuild.j += 1
        self._next_range(sim, rebuild)

    def _finish(self, sim, rebuild: _Rebuild) -> None:
        """Every range is rebuilt: the shards it still owns are whole again."""
        mine = self._still_mine(rebuild)
        if not mine:
            return
        detail = " ".join(f"emb_ps{s}" for s in mine)
        nodes = tuple(sim.net.ps_node(s) for s in mine)
        sim.record(rebuild.start_s, sim.now, "rebuild", detail, nodes=nodes)
        for shard in mine:
            self.recovery_s.append(sim.now - rebuild.failure.time_s)
            del self.degraded[shard], self._owner[shard]
        del self._under_way[rebuild.generation]
        self._update(sim)

    def _range(self, sim, shards: list[int], shares: dict[int, float]) -> tuple:
        """A range of the rebuild of ``shards``: its flows (:meth:`_range_flows`) and the
        seconds after them (the slowest shard's batch latencies and decoding)."""
        alone = self.plan.compact_rebuild
        gap_s = max(shares[x] * alone(x).gap_s for x in shards)
        return self._range_flows(sim, shards, shares), gap_s

    def _range_flows(self, sim, shards: list[int], shares: dict[int, float]) -> tuple:
        """One range's flows for each of ``shards``: from each survivor its part of the
        range to the replacement, over a link capping the connection at ``flow_bandwidth``
        (if set), the survivor's NIC and the replacement's. One tuple per set of shards,
        reused by every range of every replication (the network then plans a lone transfer
        once per capacity state). Without racks, the survivors that send every shard of the
        set the same bytes each (all but a few) are one :class:`FlowGroup` per shard, over
        their NICs (every PS's send link but a few skipped: one column, the same for every
        range) into the replacement's: the network plans the range in O(shards + skipped),
        not O(survivors × shards), with the same result (:meth:`_grouped_range`)."""
        key = tuple((x, shares[x]) for x in shards)
        net = sim.net
        if self.plan.inputs.cluster.racks is None:  # a survivor's route: its NIC, the target's
            return net.repeated(("ecrm range", key), lambda: self._grouped_range(net, key))
        return net.repeated(("ecrm range", key), lambda: self._range_pairs(net, key))

    def _range_pairs(self, net, key: tuple, senders=None, between=None):
        """``(size_B, route)`` of each survivor's part of a range, for each ``(shard, share)``
        of ``key`` (``senders``: per shard, only those survivors and their parts; default:
        all; ``between``: survivor, shard → the route between their servers; default: the
        cluster's)."""
        cap = self.params.flow_bandwidth

        def cluster_route(h: int, x: int) -> tuple:
            return net.between(net.ps_node(h), net.ps_node(x))

        route_of = between or cluster_route
        for x, share in key:
            if senders is None:
                sent = self.plan.rebuild(x).range_B
                chosen = np.flatnonzero(sent)
                chosen, parts = chosen.tolist(), sent[chosen].tolist()
            else:
                chosen, parts = senders[x]
            for h, part in zip(chosen, parts, strict=True):
                route = route_of(h, x)
                if cap is not None:  # named by its ends
                    route = (self._cap(net, h, x), *route)
                yield (share * part, route)

    def _cap(self, net, h: int, x: int):
        """The link capping the connection from survivor ``h`` to ``x``'s replacement."""
        return net.link(f"ecrm.flow.emb_ps{h}>emb_ps{x}", self.params.flow_bandwidth)

    def _grouped_range(self, net, key: tuple) -> GroupedFlows:
        """:meth:`_range_pairs` of a flat cluster: the survivors outside the set that send each
        shard of it its common part (:meth:`EcrmPlan.common_part`) are one group per shard
        over their NICs (every PS's send links but the skipped: one column all ranges
        share) into the replacement's; the other survivors one flow each. The flows are in
        the order of :meth:`_range_pairs` (worked out only if listed one by one)."""
        plan, n = self.plan, self.plan.n_shards
        skip = {x for x, _ in key}
        for x, _ in key:
            skip.update(plan.common_part(x)[1].tolist())
        if n - len(skip) < 2:
            return tuple(self._range_pairs(net, key))
        skip, sends = frozenset(skip), self._sends(net)
        skipped = np.array(sorted(skip))
        rest = {}  # shard → the skipped that send it a part, and their parts
        in_order = skipped.tolist()
        for x, _ in key:
            common, others = plan.range_parts(x)
            chosen, parts = [], []
            for h in in_order:
                part = others.get(h, common)
                if part > 0:
                    chosen.append(h)
                    parts.append(part)
            rest[x] = (chosen, parts)
        first = net.ps_node(min(set(range(len(skip) + 1)) - skip))
        capped = self.params.flow_bandwidth is not None
        if capped:  # the caps are each shard's own: columns of the members only
            members = [h for h in range(n) if h not in skip]
            column = tuple(map(sends.__getitem__, members))
        into = {x: net.between(first, net.ps_node(x))[1:] for x, _ in key}  # from any PS

        def between(h: int, x: int) -> tuple:  # as the cluster's, not kept per pair
            return (sends[h], *into[x])

        blocks = []
        for x, share in key:
            part = share * plan.common_part(x)[0]
            if capped:
                caps = tuple([self._cap(net, h, x) for h in members])
                blocks.append(FlowGroup(part, (caps, column), into[x]))
            else:
                blocks.append(FlowGroup(part, (sends,), into[x], skip))
            blocks += self._range_pairs(net, ((x, share),), rest, between)

        def by_sender() -> np.ndarray:
            """The flows' order: each shard's senders in order, as :meth:`_range_pairs`."""
            members = np.setdiff1d(np.arange(n), skipped)
            order, count = [], 0
            for x, _ in key:
                chosen = np.array(rest[x][0], dtype=members.dtype)
                senders = np.concatenate([members, chosen])  # in the blocks' order
                order.append(np.argsort(senders, kind="stable") + count)
                count += len(senders)
            return np.concatenate(order)

        return GroupedFlows(blocks, by_sender)

    def _sends(self, net) -> tuple:
        """The NIC send link of every PS, by shard (each the first link of its routes to
        the others), found once for every replication."""
        n = self.plan.n_shards

        def build():
            for h in range(n):
                yield net.between(net.ps_node(h), net.ps_node((h + 1) % n))[0]

        return net.repeated(("ecrm nic sends",), build)

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
        return {
            "interval_h": plan.interval_s / 3600.0,
            "parity_mem_frac": self.params.r / self.params.k,
            "recovery_s": sum(recovery) / len(recovery) if recovery else math.nan,
            "degraded_throughput_frac": plan.degraded_throughput_frac,
            "parity_slowdown_frac": self.plan.parity_slowdown,
            "n_fallbacks": self.n_fallbacks,
            "undecodable_frac": (
                sum(self.undecodable) / len(self.undecodable) if self.undecodable else math.nan
            ),
            "pls_model": self.lost_update_s / (self.plan.inputs.job.work_s * self.plan.n_shards),
        }


@register(EcrmParams)
class EcrmPlan(Plan):
    """What every replication of ``ecrm`` shares: the stripe layout, the parity traffic and
    its slowdown, the degraded reads' costs, each shard's rebuild alone (:func:`plan_rebuild`,
    worked out on first need) and the save time."""

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
        iteration_s = job.iteration_s
        self.parity_slowdown = (
            (1 - params.parity_overlap) * per_shard * job.mean_row_bytes * params.r / nic
        ) / iteration_s
        lost_rows = per_shard / cluster.trainers  # a worker's lookups of one lost shard's rows
        self.read_slowdown = per_shard * job.mean_value_bytes / nic / iteration_s
        """Slowdown of a survivor that serves one extra row per lookup of a lost shard."""
        self.worker_read_slowdown = (
            (params.k - 1) * lost_rows * job.mean_value_bytes / nic / iteration_s
        )
        """A worker's extra rows (k instead of 1 per lookup) of one lost shard, over its NIC."""
        self.decode_slowdown = (
            params.k * lost_rows * job.mean_value_bytes / params.decode_bandwidth / iteration_s
        )
        """A worker's decoding of one lost shard's rows (k rows summed per lookup)."""
        self.traffic_frac = 2 * per_shard * job.mean_value_bytes / nic / iteration_s
        """A survivor's training traffic (pull + push of its touched rows) per iteration time."""
        self.parity_Bps = per_shard * job.mean_row_bytes * params.r / iteration_s
        """Parity updates each PS sends (and, on average, receives) while training, B/s."""
        self.busy_limit = max(1 - cluster.background.ps_nic_share - self.parity_Bps / nic, 0)
        """The largest share of a NIC the rebuilds can take (the rest is reserved)."""
        self.save_s = layout.full_save_s()
        self.snapshot_bytes = max(layout.shard_bytes, layout.dense_bytes)
        self.interval_s = params.interval
        self._pauses_alone = rebuild_pauses_s(params, job, cluster, layout.shard_bytes)
        """Every shard's rebuild's switch pauses (:func:`rebuild_pauses_s`)."""
        self._rebuilds = CompactMemo(self._plan_rebuild, CompactRebuild.of, CompactRebuild.whole)
        """Shard → its rebuild alone (:meth:`rebuild`): every shard's with its two arrays
        compact, in O(exceptions) memory (whole, at 100× nodes, 1,800 of them took ~50 MB),
        the most recently used also whole."""
        self._reads: dict[tuple, float] = {}
        """Degraded (shard, share) pairs → :meth:`reads_slowdown`."""
        self._common = Recent(stripes.RECENT_SIZE)
        """Shard → :meth:`common_part`, the most recently used."""
        self._pauses: dict[tuple, tuple[float, ...]] = {}
        """Shards → :meth:`switch_pause_s` of each switch."""
        self.healthy_slowdown = {"other": self.parity_slowdown} if self.parity_slowdown else {}
        """The slowdown with no shard degraded (the parity stream's), shared: never changed."""
        self._slowdowns: dict[tuple, dict[str, float]] = {}
        """(degraded pairs, shards sending) → :meth:`slowdown_while`."""
        self._details: dict[tuple, str] = {}
        """Shards → :meth:`switch_detail`."""
        self._sending: dict[tuple, float] = {}
        """Shards whose ranges move, per rebuild → :meth:`sending_slowdown`."""

    @functools.cached_property
    def degraded_throughput_frac(self) -> float:
        """Training throughput while shard 0 is rebuilt alone, over the failure-free one
        (:func:`rebuild_throughput_frac`; a result column, the same in every replication)."""
        alone = self.rebuild(0)
        reads = self.parity_slowdown + self.reads_slowdown([(0, 1.0)])
        return rebuild_throughput_frac(
            alone, reads, self.interference([alone.busy]), self.parity_slowdown
        )

    def rebuild(self, shard: int) -> RebuildPlan:
        """The rebuild of ``shard`` alone (planned on first need, for every replication; its
        arrays are read-only)."""
        return self._rebuilds(shard)

    def compact_rebuild(self, shard: int) -> CompactRebuild:
        """:meth:`rebuild` with its arrays compact (its times without making them whole)."""
        return self._rebuilds.compact(shard)

    def _plan_rebuild(self, shard: int) -> RebuildPlan:
        inputs = self.inputs
        found = plan_rebuild(
            self.params,
            inputs.job,
            inputs.cluster,
            self.layout.shard_bytes,
            self.stripes.rebuild_reads(shard),
            self.parity_Bps,
            self._pauses_alone,
        )
        found.range_B.flags.writeable = found.busy.flags.writeable = False
        return found

    def range_parts(self, shard: int) -> tuple[float, dict[int, float]]:
        """What each survivor sends ``shard``'s replacement per range (``rebuild(shard).
        range_B``) as the entry most of them send and the others' by survivor, read from the
        compact array (a few entries: a new range looks up the survivors it skips in Python
        floats, not in numpy arrays)."""
        sent = self.compact_rebuild(shard).range_B
        others = dict(zip(sent.positions.tolist(), sent.values.tolist(), strict=True))
        return float(sent.common), others

    def common_part(self, shard: int) -> tuple[float, np.ndarray]:
        """The bytes most survivors send ``shard``'s replacement per range (all but a few,
        e.g. a rotating layout's data partners), and the servers that send another part
        or none (:func:`common_part`; found on first need, for every replication, from the
        compact array when it can: :func:`compact_common_part`)."""
        found = self._common.get(shard)
        if found is None:
            found = compact_common_part(self.compact_rebuild(shard).range_B)
            if found is None:
                found = common_part(self.rebuild(shard).range_B)
            self._common.put(shard, found)
        return found

    def reads_slowdown(self, degraded: Iterable[tuple[int, float]]) -> float:
        """Extra seconds per compute second of degraded reads while ``degraded`` (shard →
        share of its rows) are lost: the pull ends when its slower end has moved its extra
        rows (the busiest survivor, or a worker), then the worker decodes. Each lost shard's
        reads are those of a lone failure (:meth:`StripeLayout.reads`; exact when no
        decodable stripe lost two members, always the case for r = 1 without fall-back).
        Worked out once per set of degraded shares for every replication."""
        pairs = tuple(degraded)
        found = self._reads.get(pairs)
        if found is None:
            lost = sum(share for _, share in pairs)
            served = self._busiest(pairs) * self.read_slowdown
            found = max(served, lost * self.worker_read_slowdown) + lost * self.decode_slowdown
            if len(self._reads) >= _MEMO_SIZE:
                self._reads.clear()
            self._reads[pairs] = found
        return found

    def interference(self, sending: Iterable[np.ndarray]) -> float:
        """Extra seconds per compute second of the survivors' training traffic while the
        rebuilds' ranges ``sending`` (each server's NIC share each takes) move: the busiest
        survivor's, the rebuilds taking at most what its NIC has left."""
        shares = list(sending)
        if not shares:
            return 0.0
        busy = min(float(np.sum(shares, axis=0).max()), self.busy_limit)
        return interference_slowdown(self.traffic_frac, busy)

    def switch_pause_s(self, shards: tuple[int, ...], j: int) -> float:
        """Training pause of switch ``j`` of the rebuild of ``shards`` (each replacement's in
        turn: their pauses summed in order), worked out once per set, every switch at once."""
        found = self._pauses.get(shards)
        if found is None:
            if len(self._pauses) >= _MEMO_SIZE:
                self._pauses.clear()
            alone = self.compact_rebuild
            pauses = zip(*[alone(x).pauses_s for x in shards], strict=True)
            found = self._pauses[shards] = tuple([sum(switch) for switch in pauses])
        return found[j]

    def slowdown_while(self, degraded: tuple, sending: tuple) -> dict[str, float]:
        """The slowdown while ``degraded`` (shard, share) pairs are lost and the ranges of
        rebuilds of the shards ``sending`` move (:meth:`reads_slowdown` and
        :meth:`sending_slowdown`, charged to ``degraded``; the parity stream to ``other``),
        made once per such state for every replication (the dict is shared: never
        changed)."""
        key = (degraded, sending)
        found = self._slowdowns.get(key)
        if found is None:
            if len(self._slowdowns) >= _MEMO_SIZE:
                self._slowdowns.clear()
            found = dict(self.healthy_slowdown)
            found["degraded"] = self.reads_slowdown(degraded) + self.sending_slowdown(sending)
            self._slowdowns[key] = found
        return found

    def switch_detail(self, shards: tuple[int, ...]) -> str:
        """The timeline's detail of a range switch of the rebuild of ``shards`` (made once
        per set: a replication has ten or so per failure)."""
        found = self._details.get(shards)
        if found is None:
            if len(self._details) >= _MEMO_SIZE:
                self._details.clear()
            found = self._details[shards] = "range switch " + " ".join(f"emb_ps{x}" for x in shards)
        return found

    def sending_slowdown(self, sending: tuple[tuple[int, ...], ...]) -> float:
        """:meth:`interference` while the ranges of rebuilds of the shards ``sending`` (one
        tuple per rebuild, in order) move, each taking the sum of its shards' NIC shares
        (``busy``); worked out once per such tuple for every replication."""
        found = self._sending.get(sending)
        if found is None:
            rebuild = self.rebuild
            shares = [sum(rebuild(x).busy for x in shards) for shards in sending]
            if len(self._sending) >= _MEMO_SIZE:
                self._sending.clear()
            found = self._sending[sending] = self.interference(shares)
        return found

    def _busiest(self, shares) -> float:
        """Rows the busiest survivor reads per lookup of a lost row: the largest entry of
        Σ share · ``reads(x)`` over ``(x, share)`` pairs (added in their order; 0 if none)."""
        reads = self.stripes.reads
        total = None
        for x, share in shares:
            term = reads(x) if share == 1.0 else share * reads(x)
            total = term if total is None else total + term
        return 0.0 if total is None else float(total.max())
