"""``composed``: several policies, each managing one part of the state.

A composed policy splits the embedding state into **parts** and lets a registered policy
manage each, with no code per combination: ECRM parity for the hottest rows and CPR partial
recovery for the rest; CPR-MFU on most shards and SWIFT logging for a few; Check-N-Run's
differential checkpoints with partial recovery on some shards and CPR on the others. A part's
``scope`` is one of

- ``{hottest: ρ}``: in every shard, the share ρ of its rows most looked up. Under the
  scenario's row popularity (a Zipf law per table, as for CPR-MFU) they carry the share
  c = :func:`~ftsim.sim.popularity.top_rows_share` of all lookups;
- ``{shards: [...]}``: whole embedding shards (m of the E), carrying m/E of the lookups;
- ``rest``: what no other part claims (exactly one part).

A composition splits by rows (one ``hottest`` part and ``rest``) or by shards (``shards``
parts and ``rest``), not both. One part, the ``rest`` one unless another says ``dense:
true``, also holds the dense parameters and so handles trainer failures.

**Time model.** Each part's policy runs unchanged, planned with *scaled* inputs that
describe its part alone (:func:`part_inputs`, :class:`~ftsim.policies.inputs.PlanInputs`):
by rows, every table keeps the share ρ of its rows (its bytes) and the batch the share c of
its samples (its lookups, hence its parity, log and tracking traffic), at the job's
iteration time; by shards, the cluster has m embedding PS and the tables and the batch keep
m/E, so that each shard holds and serves what it does in the job, and a failure takes m/E
of the PS it takes in the job. Parts without the dense parameters have none. The part's
transfers go through the job's network (:class:`PartNetwork` maps its shard i to the job's
PS of the i-th shard of its scope), so the parts compete for links with each other and
with everything else; its phases are charged to the job's categories and, in
``charged_parts``, to the part (result columns ``<part>/<category>_h``; rescheduling
belongs to the job). Failures reach a part only for
its nodes: its shards (every shard, by rows) and the trainers if it holds the dense
parameters. The parts' actions share one timeline (the first due acts first); after a
failure the job waits for the replacements once, then the parts recover one after the other
(a stated simplification: a real system could overlap their reloads, so recovery time is an
upper bound when several parts reload). ``pls_model`` is the lookup-weighted sum of the
parts' ``pls_model`` (each relative to its own lookups).

A part must recover without rolling the job back, since the other parts keep their newer
state: each policy says under which settings it does (``part_problems``), and a composition
that breaks this, overlaps scopes, or lets a popularity-ranking policy manage a share of
rows (its own model of row popularity would count the other part's rows) is refused with
the field at fault.

**On the trainer** (:class:`ComposedSide`), every part has its own co-simulated state
(:class:`PartModel`: partial saves, saved versions, its policy's trainer side) and its
events are wrapped in :class:`PartEvent`, which applies the part's event and then puts back
every row of the affected shards that lies outside the part's scope: a shard restore, a
decode or a replay then changes only the part's rows, and lost lookups count only those.
By rows, the hottest rows on the trainer are the share ρ of each shard's rows most looked up
so far (ties by row id), as a system that counts use would pick them.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

# the policies a part may use, registered before composed (in the catalog's order)
# isort: off
from ftsim.policies import full, cpr, ecrm, swift, checknrun  # noqa: F401

# isort: on
from ftsim.notices import Notice
from ftsim.policies.base import (
    Plan,
    PlanError,
    Policy,
    PolicyParams,
    TrainerSide,
    memory_frac,
    register,
)
from ftsim.policies.events import ModelEvent
from ftsim.policies.inputs import PlanInputs
from ftsim.policies.registry import in_table_order
from ftsim.policies.touched import TouchedRowsParams
from ftsim.scenario.registry import POLICY_PARAMS, discriminated
from ftsim.sim.cluster import StateLayout
from ftsim.sim.popularity import PopularityParams, top_rows_share

PartPolicy = discriminated(in_table_order(POLICY_PARAMS))
"""Any registered policy's parameters except ``composed`` (compositions do not nest): the
kinds registered before this module (it imports every other policy module first), in the
order messages list kinds in."""


# -- parameters ----------------------------------------------------------------------------


def _scope(value):
    if isinstance(value, str) and value.strip() == "rest":
        return {"rest": True}
    return value


class Scope(BaseModel):
    """The state a part manages: ``{hottest: ρ}``, ``{shards: [...]}`` or ``rest``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hottest: float | None = Field(
        None, gt=0, lt=1, description="share of every shard's rows, most looked up first"
    )
    shards: list[int] | None = Field(None, min_length=1, description="whole embedding shards")
    rest: bool = Field(False, description="what no other part manages")

    @model_validator(mode="after")
    def _one_kind(self):
        given = [self.hottest is not None, self.shards is not None, self.rest]
        if sum(given) != 1:
            raise ValueError("give exactly one of hottest, shards, or the word rest")
        if self.shards is not None and len(set(self.shards)) != len(self.shards):
            raise ValueError("shards are listed twice")
        return self


class Part(BaseModel):
    """One part of a composed policy: a scope and the policy that manages it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="label in results (default: the policy's)"
    )
    scope: Annotated[Scope, BeforeValidator(_scope)] = Field(
        description="{hottest: share}, {shards: [...]} or rest"
    )
    dense: bool | None = Field(
        None, description="holds the dense parameters (default: the rest part)"
    )
    policy: PartPolicy = Field(description="any other policy by kind, with its parameters")

    @property
    def label(self) -> str:
        return self.name or self.policy.label


class ComposedParams(PolicyParams, PopularityParams):
    """Parameters of ``composed``."""

    kind: Literal["composed"]
    nested_policies: ClassVar[str | None] = "parts.*.policy"
    parts: list[Part] = Field(min_length=2, description="the parts and their policies")

    def popularity_unused(self, scenario) -> str | None:
        if not self.by_rows:
            why = "the parts split the state by shards, not by row popularity (hottest)"
            return super().popularity_unused(scenario) or why
        return super().popularity_unused(scenario)

    @property
    def by_rows(self) -> bool:
        return any(p.scope.hottest is not None for p in self.parts)

    @property
    def dense_part(self) -> int:
        """Index of the part that holds the dense parameters."""
        chosen = [i for i, p in enumerate(self.parts) if p.dense]
        if chosen:
            return chosen[0]
        return next(i for i, p in enumerate(self.parts) if p.scope.rest)

    @model_validator(mode="after")
    def _valid_split(self):
        scopes = [p.scope for p in self.parts]
        if sum(s.rest for s in scopes) != 1:
            raise ValueError("exactly one part must have scope rest")
        hottest = sum(s.hottest is not None for s in scopes)
        if hottest > 1:
            raise ValueError("at most one part may take the hottest rows")
        if hottest and any(s.shards is not None for s in scopes):
            raise ValueError("split by rows (hottest) or by shards, not both")
        labels = [p.label for p in self.parts]
        if len(set(labels)) != len(labels):
            raise ValueError(f"part names must differ (got {labels}); set name")
        if sum(bool(p.dense) for p in self.parts) > 1:
            raise ValueError("at most one part may hold the dense parameters")
        return self

    def input_problems(self, inputs):
        found = []
        n_shards = inputs.cluster.emb_ps
        claimed: dict[int, int] = {}
        for i, part in enumerate(self.parts):
            for shard in part.scope.shards or ():
                if not 0 <= shard < n_shards:
                    message = f"shard {shard} does not exist (cluster.emb_ps = {n_shards})"
                    found.append((f"parts.{i}.scope.shards", message))
                elif shard in claimed:
                    message = f"shard {shard} is also in part {claimed[shard]}"
                    found.append((f"parts.{i}.scope.shards", message))
                else:
                    claimed[shard] = i
        if not self.by_rows and len(claimed) >= n_shards:
            found.append(("parts", "the shard parts take every shard: the rest part has none"))
        if found:
            return found
        dense = self.dense_part
        scopes = part_scopes(inputs, self)
        for i, part in enumerate(self.parts):
            where = f"parts.{i}.policy"
            why = part.policy.part_problems(dense=i == dense, by_rows=self.by_rows)
            found += [(f"{where}.{path}", message) for path, message in why]
            if not why:
                alone = part_inputs(inputs, self, scopes[i])
                found += [(f"{where}.{p}", msg) for p, msg in part.policy.input_problems(alone)]
        return found


# -- what each part manages ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartScope:
    """What part ``index`` of a composition manages, in the job's terms."""

    index: int
    name: str
    shards: tuple[int, ...]
    """The job's shards the part's shard i stands for (all of them when split by rows)."""
    rows_share: float
    """Share of each of those shards' rows the part holds (1 for whole shards)."""
    lookups_share: float
    """Share of all the job's lookups that go to the part's rows."""
    hottest: bool | None
    """By rows: the hottest rows (True) or the rest (False); None when split by shards."""
    dense: bool


def part_scopes(inputs: PlanInputs, params: ComposedParams) -> list[PartScope]:
    """Every part's scope resolved against the job's inputs (shares from row popularity)."""
    n = inputs.cluster.emb_ps
    dense = params.dense_part
    out = []
    if params.by_rows:
        rho = next(p.scope.hottest for p in params.parts if p.scope.hottest is not None)
        groups = inputs.row_popularity(params.popularity_exponent)
        carried = top_rows_share(groups, rho)
        for i, part in enumerate(params.parts):
            hot = part.scope.hottest is not None
            out.append(
                PartScope(
                    i,
                    part.label,
                    tuple(range(n)),
                    rho if hot else 1.0 - rho,
                    carried if hot else 1.0 - carried,
                    hot,
                    i == dense,
                )
            )
        return out
    taken = {s for p in params.parts for s in p.scope.shards or ()}
    rest = tuple(s for s in range(n) if s not in taken)
    for i, part in enumerate(params.parts):
        shards = rest if part.scope.rest else tuple(part.scope.shards)
        out.append(PartScope(i, part.label, shards, 1.0, len(shards) / n, None, i == dense))
    return out


def part_inputs(inputs: PlanInputs, params: ComposedParams, scope: PartScope) -> PlanInputs:
    """What part ``scope`` plans with (see the module docstring): by rows, every table keeps
    the share of its rows the part holds and the batch its share of the lookups; by shards,
    m of the E shards with m/E of the tables and the batch, and the job's failures as they
    strike those shards (m/E of the PS a failure takes, its trainers only if the part holds
    the dense parameters)."""
    job, cluster = inputs.job, inputs.cluster
    n_shards = len(scope.shards)
    rows = scope.rows_share * n_shards / cluster.emb_ps
    tables = [g.model_copy(update={"rows": max(1, round(g.rows * rows))}) for g in job.tables]
    scaled_job = job.model_copy(
        update={
            "tables": tables,
            "samples_per_iteration": job.samples_per_iteration * scope.lookups_share,
            "iteration_time": job.iteration_s,
            "throughput": None,
            "dense_params": job.dense_params if scope.dense else 0,
        }
    )
    mtbf_s, victims = inputs.mtbf_s, inputs.victims
    if n_shards != cluster.emb_ps:
        ps = n_shards / cluster.emb_ps * victims["emb_ps"]
        victims = {"emb_ps": ps, "trainer": victims["trainer"] if scope.dense else 0.0}
    return inputs.scaled(scaled_job, n_shards, mtbf_s, victims)


def part_params(inputs: PlanInputs, params: ComposedParams, scope: PartScope) -> PolicyParams:
    """The parameters part ``scope``'s policy plans with: its own, with a derived touched-rows
    fraction taken from the whole job (:meth:`TouchedRowsParams.for_part_of`)."""
    policy = params.parts[scope.index].policy
    return policy.for_part_of(inputs) if isinstance(policy, TouchedRowsParams) else policy


# -- the part's view of the simulation ----------------------------------------------------


class PartNetwork:
    """The job's network as part of a composition sees it: its shard i is the job's PS of
    ``scope.shards[i]``, and a whole shard of its own is its share of the job's shard."""

    def __init__(self, net, scope: PartScope, layout: StateLayout):
        self._net = net
        self._scope = scope
        self._layout = layout

    def ps_node(self, shard: int) -> int:
        return self._net.ps_node(self._scope.shards[shard])

    def _shards(self, shards) -> list[int]:
        return [self._scope.shards[s] for s in shards]

    def shard_writes(self, shards, bytes_each: float | None = None):
        size = self._layout.shard_bytes if bytes_each is None else bytes_each
        return self._net.shard_writes(self._shards(shards), size)

    def shard_reads(self, shards, bytes_each: float | None = None) -> list:
        size = self._layout.shard_bytes if bytes_each is None else bytes_each
        return self._net.shard_reads(self._shards(shards), size)

    def dense_write(self) -> list:
        return self._net.dense_write() if self._scope.dense else []

    def dense_reads(self, trainers=None) -> list:
        return self._net.dense_reads(trainers) if self._scope.dense else []

    def full_save(self) -> tuple:
        return (*self.shard_writes(range(len(self._scope.shards))), *self.dense_write())

    def stream_on_ps_nics(self, rate_Bps: float) -> None:
        """A stream on every PS NIC: the part's PS are all of them (a split by rows; ECRM,
        whose parity streams, manages no set of shards)."""
        if len(self._scope.shards) != self._net.cluster.emb_ps:
            raise RuntimeError(f"part {self._scope.name} streams on PS it does not hold")
        self._net.stream_on_ps_nics(rate_Bps)

    def full_load(self) -> tuple:
        return (*self.shard_reads(range(len(self._scope.shards))), *self.dense_reads())

    # the job's own: routes between nodes (already the job's numbers, from ps_node or a
    # trainer's), the storage's streams, links, and starting and stopping flows

    def from_storage(self, node: int) -> tuple:
        return self._net.from_storage(node)

    def from_node_side(self, node: int) -> tuple:
        return self._net.from_node_side(node)

    def between(self, src: int, dst: int) -> tuple:
        return self._net.between(src, dst)

    def repeated(self, key: tuple, build) -> tuple:
        """The job's :meth:`~ftsim.sim.cluster.ClusterNetwork.repeated`, under the part's
        name (two parts may repeat transfers of one key)."""
        return self._net.repeated((self._scope.name, *key), build)

    def replica_copy(self, trainer: int) -> list:
        return self._net.replica_copy(trainer)

    def stream_to_storage(self, rate_Bps: float) -> None:
        self._net.stream_to_storage(rate_Bps)

    def link(self, name: str, capacity_Bps: float):
        """A link of the part's own (e.g. ECRM's cap on a rebuild): two parts may make
        links of one name with different capacities."""
        return self._net.link(f"{self._scope.name}/{name}", capacity_Bps)

    def start(self, flows: list, category: str, label: str = "", activity=None):
        return self._net.start(flows, category, label, activity)

    def cancel(self, transfer) -> None:
        self._net.cancel(transfer)


class PartSimulation:
    """The simulation as one part's policy sees it: its phases are charged to the part, its
    model events wrapped in :class:`PartEvent` with the job's shard numbers, its transfers
    made on a :class:`PartNetwork` (an explicit :class:`~ftsim.sim.context.PolicyContext`:
    what it does not change, it passes to the job's simulation member by member)."""

    def __init__(self, sim, scope: PartScope, layout: StateLayout):
        self._sim = sim
        self._scope = scope
        self.net = PartNetwork(sim.net, scope, layout)

    @property
    def now(self) -> float:
        return self._sim.now

    @property
    def progress_s(self) -> float:
        return self._sim.progress_s

    def progress_now_s(self) -> float:
        return self._sim.progress_now_s()

    def await_replacements(self, failures):
        return self._sim.await_replacements(failures)

    def background(self, activity):
        return self._sim.background(activity)

    def event(self):
        return self._sim.event()

    def timeout(self, delay_s: float):
        return self._sim.timeout(delay_s)

    def is_active(self, process) -> bool:
        return self._sim.is_active(process)

    def replan(self) -> None:
        self._sim.replan()

    def phase(self, category, duration_s, detail="", activity=None):
        return self._sim.phase(category, duration_s, detail, self._scope.name, activity)

    def transfer(self, category, flows, detail="", at_least_s=0.0, activity=None):
        part = self._scope.name
        return self._sim.transfer(category, flows, detail, at_least_s, part, activity)

    def wait(self, category, event, detail=""):
        return self._sim.wait(category, event, detail, part=self._scope.name)

    def rollback_to(self, progress_s: float) -> None:
        self._sim.rollback_to(progress_s, part=self._scope.name)

    def record(self, start_s, end_s, category, detail="", nodes=()):
        self._sim.record(start_s, end_s, category, detail, self._scope.name, nodes)

    def model_event(self, event_type, **fields) -> None:
        if self._sim.model_events is None:  # not recorded in this replication
            return
        if "shards" in fields:
            fields["shards"] = tuple(self._scope.shards[s] for s in fields["shards"])
        progress = self._sim.progress_now_s()
        inner = event_type(progress, **fields)
        self._sim.model_events.append(PartEvent(progress, self._scope.index, inner))


# -- the runtime policy --------------------------------------------------------------------


class Composed(Policy):
    """Parts of the state, each managed by its own policy (see the module docstring): one
    replication, a runtime of each part's plan."""

    def __init__(self, plan: ComposedPlan):
        super().__init__(plan)
        self.scopes = plan.scopes
        self.parts: list[Policy] = [part.runtime() for part in plan.parts]
        self._views: list[PartSimulation] | None = None
        self._trainers = plan.inputs.cluster.trainers

    def _view(self, sim, index: int) -> PartSimulation:
        if self._views is None:
            self._views = [
                PartSimulation(sim, scope, part.layout)
                for scope, part in zip(self.scopes, self.plan.parts, strict=True)
            ]
        return self._views[index]

    def start(self, sim) -> None:
        for i, part in enumerate(self.parts):
            part.start(self._view(sim, i))

    def next_action_at(self) -> float:
        return min(part.next_action_at() for part in self.parts)

    def act(self, sim):
        due = [part.next_action_at() for part in self.parts]
        first = due.index(min(due))
        yield from self.parts[first].act(self._view(sim, first))

    def slowdown(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for part in self.parts:
            for category, extra in part.slowdown().items():
                out[category] = out.get(category, 0.0) + extra
        return out

    def slowdown_by_part(self) -> dict[str, dict[str, float]]:
        return {s.name: part.slowdown() for s, part in zip(self.scopes, self.parts, strict=True)}

    def _local(self, failure, scope: PartScope):
        """``failure`` as part ``scope`` sees it (its own node numbers), or None."""
        trainers = self._trainers
        local = {shard: i for i, shard in enumerate(scope.shards)}
        nodes = [n for n in failure.nodes if n < trainers and scope.dense]
        nodes += [trainers + local[n - trainers] for n in failure.nodes if n - trainers in local]
        return replace(failure, nodes=tuple(nodes)) if nodes else None

    def on_failure(self, sim, failure) -> None:
        for i, (scope, part) in enumerate(zip(self.scopes, self.parts, strict=True)):
            local = self._local(failure, scope)
            if local is not None:
                part.on_failure(self._view(sim, i), local)

    def recover(self, sim, failures):
        yield from sim.await_replacements(failures)
        for i, (scope, part) in enumerate(zip(self.scopes, self.parts, strict=True)):
            mine = [f for f in (self._local(f, scope) for f in failures) if f is not None]
            if mine:
                yield from part.recover(self._view(sim, i), mine)

    def result_columns(self):
        out: dict[str, float | str] = {}
        pls = 0.0
        saved = 0.0
        memory = []  # per part: its extra memory per PS, as a share of the job's shard
        for scope, part in zip(self.scopes, self.parts, strict=True):
            columns = part.result_columns()
            pls += scope.lookups_share * float(columns.get("pls_model", 0.0))
            saved += float(columns.get("saved_gb", 0.0))
            memory.append(scope.rows_share * memory_frac(columns))
            out[f"{scope.name}/lookups_share"] = scope.lookups_share
            share = scope.rows_share * len(scope.shards) / self.plan.inputs.cluster.emb_ps
            out[f"{scope.name}/rows_share"] = share
            out.update({f"{scope.name}/{name}": value for name, value in columns.items()})
        out["pls_model"] = pls
        out["saved_gb"] = saved
        # by rows, every PS holds each part's share of its rows; by shards, one part's shard
        by_rows = self.scopes[0].hottest is not None
        out["parts_mem_frac"] = math.fsum(memory) if by_rows else max(memory)
        out["n_checkpoints"] = sum(part.n_checkpoints for part in self.parts)
        return out


@register(ComposedParams)
class ComposedPlan(Plan):
    """What every replication of a composed policy shares: the parts' scopes and each part's
    plan, made from its part's inputs."""

    Runtime = Composed

    def __init__(self, params: ComposedParams, inputs: PlanInputs):
        super().__init__(params, inputs)
        self.scopes = part_scopes(inputs, params)
        self.part_names = tuple(s.name for s in self.scopes)
        self.parts: list[Plan] = []
        for i, scope in enumerate(self.scopes):
            alone = part_inputs(inputs, params, scope)
            try:
                self.parts.append(part_params(inputs, params, scope).plan(alone))
            except PlanError as error:
                raise error.inside(f"parts.{i}.policy") from None

    def notices(self) -> list[Notice]:
        return [notice for part in self.parts for notice in part.notices()]

    def trained_notices(self, rows_per_shard: float) -> list[Notice]:
        """Each part's, said of the part: its trainer side chooses among all of a shard's
        rows (the rows outside its scope are put back after each of its events)."""
        return [
            notice.at(f"{self.params.label}, part {scope.name}")
            for scope, part in zip(self.scopes, self.parts, strict=True)
            for notice in part.trained_notices(rows_per_shard)
        ]

    def side_inputs(self):
        """Per part: its scope, its policy's trainer side and that side's inputs."""
        return {
            "parts": [
                (scope, part.TrainerSide, part.side_inputs())
                for scope, part in zip(self.scopes, self.parts, strict=True)
            ]
        }


# -- on the trainer -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartEvent(ModelEvent):
    """Part ``part``'s own event ``inner``, applied to the rows of its scope only: every row
    of the shards ``inner`` names that lies outside the scope is put back as it was, and the
    other parts' mechanisms are told that the trainer changed under them."""

    part: int
    inner: ModelEvent

    @property
    def modifies(self) -> bool:  # type: ignore[override]
        return self.inner.modifies

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return self.inner.exact

    @property
    def reads(self) -> float | None:
        return self.inner.reads

    @property
    def writes(self) -> float | None:
        return self.inner.writes

    def apply(self, model, trainer) -> None:
        side: ComposedSide = model.side
        sub = side.parts[self.part]
        shards = getattr(self.inner, "shards", None)
        kept = None
        if self.inner.modifies and shards is not None:
            rows = np.concatenate([trainer.embeddings.shard_rows(s) for s in shards])
            outside = rows[~sub.in_scope(trainer, rows)]
            kept = trainer.read_rows(np.sort(outside)) if len(outside) else None
        self.inner.apply(sub, trainer)
        if kept is not None:
            trainer.write_rows(kept)
        if self.inner.modifies:
            for other in side.parts:
                if other is not sub:
                    other.side.restored(trainer)


class PartModel:
    """One part's co-simulated state, with the attributes model events and trainer sides
    use (:class:`ftsim.cosim.replay.PolicyModel`'s): its own partial saves, saved versions
    and CheckFreq snapshots; the job's checkpoints; lost lookups counted only on its rows and
    added to the job's."""

    def __init__(self, parent, scope: PartScope, side: type[TrainerSide], params, inputs, rng):
        self._parent = weakref.ref(parent)
        self.scope = scope
        self.cfg, self.steps, self.work_s = parent.cfg, parent.steps, parent.work_s
        mine = [
            e.inner
            for e in parent.events
            if isinstance(e, PartEvent) and e.part == scope.index and e.inner.modifies
        ]
        self.lazy = all(e.exact for e in mine)
        self.partials: list = []
        self.saved_lookups: np.ndarray | None = None
        self.pending_saves: dict = {}
        self._lost = 0
        self._hot: tuple[int, np.ndarray] | None = None
        self.side = side(params, self, inputs, rng)

    @property
    def checkpoints(self) -> dict:
        return self._parent().checkpoints

    @property
    def lost_lookups(self) -> int:
        return self._lost

    @lost_lookups.setter
    def lost_lookups(self, value: int) -> None:
        self._parent().lost_lookups += value - self._lost
        self._lost = value

    def in_scope(self, trainer, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` (global ids) the part manages now."""
        scope = self.scope
        if scope.hottest is None:
            shard_of = trainer.embeddings.shard_of_global(rows)
            return np.isin(shard_of, scope.shards)
        return self._hottest(trainer)[rows] == scope.hottest

    def _hottest(self, trainer) -> np.ndarray:
        """Per row: among the hottest share of its shard's rows, by lookups so far (ties by
        row id); recomputed once per trainer step."""
        if self._hot is not None and self._hot[0] == trainer.step:
            return self._hot[1]
        emb, counts = trainer.embeddings, trainer.mfu.counts
        share = self.scope.rows_share if self.scope.hottest else 1.0 - self.scope.rows_share
        hot = np.zeros(emb.n_rows, dtype=bool)
        for shard in range(emb.n_shards):
            rows = emb.shard_rows(shard)
            order = np.lexsort((rows, -counts[rows].astype(np.int64)))
            hot[rows[order[: math.ceil(share * len(rows))]]] = True
        self._hot = (trainer.step, hot)
        return hot

    def lose(self, trainer, rows: np.ndarray) -> None:
        """``rows`` went back to their saved version: the lookups since of those the part
        manages are lost."""
        rows = rows[self.in_scope(trainer, rows)]
        lookups = trainer.mfu.counts
        self.lost_lookups += int((lookups[rows] - self.saved_lookups[rows]).sum())
        self.saved_lookups[rows] = lookups[rows]


class ComposedSide(TrainerSide):
    """Every part's trainer side, each on its own :class:`PartModel`."""

    def __init__(self, params: ComposedParams, model, inputs=None, rng=None) -> None:
        super().__init__(params, model, inputs, rng)
        parts = self.inputs["parts"]
        streams = rng.spawn(len(parts)) if rng is not None else [None] * len(parts)
        self.parts = [
            PartModel(model, scope, side, part_params.policy, part_inputs, part_rng)
            for (scope, side, part_inputs), part_params, part_rng in zip(
                parts, params.parts, streams, strict=True
            )
        ]
        self.own_from_start = any(sub.side.own_from_start for sub in self.parts)

    def attach(self, trainer, own: bool) -> None:
        for sub in self.parts:
            if sub.saved_lookups is None:
                sub.saved_lookups = trainer.mfu.counts.copy()
            sub.side.attach(trainer, own)

    def detach(self, trainer) -> None:
        for sub in self.parts:
            sub.side.detach(trainer)

    def columns(self) -> dict[str, Any]:
        out = {}
        for sub in self.parts:
            out[f"{sub.scope.name}/pls_measured_lookups"] = sub.lost_lookups
            out.update({f"{sub.scope.name}/{k}": v for k, v in sub.side.columns().items()})
        return out


ComposedPlan.TrainerSide = ComposedSide
